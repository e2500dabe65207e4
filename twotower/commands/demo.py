"""`twotower demo [--dump GLOB] [--out DIR] [--squad FILE]`: the end-to-end demo on the
embedded Wikipedia slice (the flags of twotower.experiment.demo)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.commands import dataclass_flags, flags
from twotower.eval import report
from twotower.experiment import demo
from twotower.core.files import match_files

#: Each flag's help; name, type and default come from DemoConfig (commands.dataclass_flags).
HELP = {
    "dump": "Wikipedia pages-articles dump (glob); `make data` fetches the default",
    "out": "work and report directory",
    "squad": "SQuAD JSON: also evaluate on ReQA",
    "preset": "model preset for the towers",
    "pretrain_steps": "pre-training steps (cpu-small: ~2 steps/s on 2 cores)",
    "heldout_percent": "share of pages held out as the benchmark",
    "vocab_size": "WordPiece vocabulary size",
}


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("demo", demo.__doc__)
  dataclass_flags.add_fields(p, demo.DemoConfig, HELP)
  return p


def parse(argv: Iterable[str] | None) -> demo.DemoConfig:
  args = build_parser().parse_args(None if argv is None else list(argv))
  try:
    match_files(args.dump)
  except FileNotFoundError as e:
    raise FileNotFoundError(f"{e} (`make data` fetches the default slice)") from None
  return dataclass_flags.config_from(args, demo.DemoConfig)


def main(argv: Iterable[str] | None = None) -> None:
  result = demo.run(parse(argv))
  total = sum(seconds for _, seconds in result.stage_seconds)
  print(report.markdown_table(result.records))
  print(f"report: {result.report_dir}/demo.md, {result.report_dir}/demo.png "
        f"({total:.0f} s in all)")
  print(f"search it: twotower query {result.bundle} \"your question\" --mode hybrid  "
        f"(or twotower serve {result.bundle})")
