"""`twotower demo [--dump GLOB] [--out DIR] [--squad FILE]`: the end-to-end demo on the
embedded Wikipedia slice (the flags of twotower.experiment.demo)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.commands import flags
from twotower.eval import report
from twotower.experiment import demo
from twotower.io import match_files


def build_parser() -> argparse.ArgumentParser:
  d = demo.DemoConfig()
  p = flags.parser("demo", demo.__doc__)
  p.add_argument("--dump", default=d.dump,
                 help="Wikipedia pages-articles dump (glob); `make data` fetches the default")
  p.add_argument("--out", default=d.out, help="work and report directory")
  p.add_argument("--squad", default="", help="SQuAD JSON: also evaluate on ReQA")
  p.add_argument("--preset", default=d.preset, help="model preset for the towers")
  p.add_argument("--pretrain_steps", type=int, default=d.pretrain_steps,
                 help="pre-training steps (cpu-small: ~2 steps/s on 2 cores)")
  p.add_argument("--heldout_percent", type=float, default=d.heldout_percent,
                 help="share of pages held out as the benchmark")
  p.add_argument("--vocab_size", type=int, default=d.vocab_size,
                 help="WordPiece vocabulary size")
  return p


def parse(argv: Iterable[str] | None) -> demo.DemoConfig:
  args = build_parser().parse_args(None if argv is None else list(argv))
  try:
    match_files(args.dump)
  except FileNotFoundError as e:
    raise FileNotFoundError(f"{e} (`make data` fetches the default slice)") from None
  return demo.DemoConfig(**{k: v for k, v in vars(args).items() if k != "verbose"})


def main(argv: Iterable[str] | None = None) -> None:
  result = demo.run(parse(argv))
  total = sum(seconds for _, seconds in result.stage_seconds)
  print(report.markdown_table(result.records))
  print(f"report: {result.report_dir}/demo.md, {result.report_dir}/demo.png "
        f"({total:.0f} s in all)")
  print(f"search it: twotower query {result.bundle} \"your question\" --mode hybrid  "
        f"(or twotower serve {result.bundle})")
