"""`twotower heldout --pairs DIR --out DIR`: a ReQA-layout benchmark from the pages a pair
pipeline held out (the flags of pipelines.reqa.heldout)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.core import contracts
from twotower.commands import dataclass_flags, flags
from twotower.pipelines.reqa import heldout

#: Each flag's help; name, type and default come from HeldoutConfig (commands.dataclass_flags).
HELP = {
    "pairs": "a `twotower pairs --out` directory",
    "out": "benchmark directory (ReQA layout)",
    "heldout_percent": "the share of pages held out (default: the pair pipeline's, from its "
                       f"{contracts.PAIRS_CONFIG_FILE})",
    "task": "the task whose held-out pairs give the questions",
}


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("heldout", heldout.__doc__)
  dataclass_flags.add_fields(p, heldout.HeldoutConfig, HELP, exclude=("overwrite",),
                             kwargs={"task": {"choices": contracts.PRETRAIN_TASKS}})
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> heldout.HeldoutConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  if args.heldout_percent is not None and not 0 <= args.heldout_percent <= 100:
    p.error(f"--heldout_percent must be in [0, 100], got {args.heldout_percent}")
  return dataclass_flags.config_from(args, heldout.HeldoutConfig,
                                    out=flags.out_folder(p, args.out))


def main(argv: Iterable[str] | None = None) -> None:
  config = parse(argv)
  print(heldout.summary_table(heldout.run(config).stats, config))
