"""`twotower heldout --pairs DIR --out DIR`: a ReQA-layout benchmark from the pages a pair
pipeline held out (the flags of pipelines.heldout)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower import contracts
from twotower.commands import flags
from twotower.pipelines import heldout


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("heldout", heldout.__doc__)
  d = heldout.HeldoutConfig(pairs="", out="")
  p.add_argument("--pairs", required=True, help="a `twotower pairs --out` directory")
  p.add_argument("--out", required=True, help="benchmark directory (ReQA layout)")
  p.add_argument("--heldout_percent", type=float, default=d.heldout_percent,
                 help="the share of pages held out (default: the pair pipeline's, from its "
                      f"{contracts.PAIRS_CONFIG_FILE})")
  p.add_argument("--task", choices=contracts.PRETRAIN_TASKS, default=d.task,
                 help="the task whose held-out pairs give the questions")
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> heldout.HeldoutConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  if args.heldout_percent is not None and not 0 <= args.heldout_percent <= 100:
    p.error(f"--heldout_percent must be in [0, 100], got {args.heldout_percent}")
  return heldout.HeldoutConfig(pairs=args.pairs, out=flags.out_folder(p, args.out),
                               heldout_percent=args.heldout_percent, task=args.task,
                               overwrite=args.overwrite)


def main(argv: Iterable[str] | None = None) -> None:
  config = parse(argv)
  print(heldout.summary_table(heldout.run(config).stats, config))
