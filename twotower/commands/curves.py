"""`twotower curves --run LABEL=DIR ... --out FILE.png`: training curves of runs
(model.curves)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.commands import flags
from twotower.model import curves


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("curves", curves.__doc__)
  p.add_argument("--run", action="append", required=True, metavar="LABEL=DIR",
                 help="a run dir with history.csv and config.yaml (repeatable)")
  p.add_argument("--out", required=True, help="PNG path")
  p.add_argument("--title", default="", help="figure title")
  p.add_argument("--table", default="",
                 help="also write the plotted metric as a Markdown table to this file")
  p.add_argument("--every", type=int, default=0,
                 help="the table's steps: every N steps (default: every checkpoint)")
  return p


def parse(argv: Iterable[str] | None) -> curves.CurvesConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  runs = []
  for item in args.run:
    label, sep, run_dir = item.partition("=")
    if not sep or not label or not run_dir:
      p.error(f"--run {item!r}: expected LABEL=DIR")
    runs.append((label, run_dir))
  return curves.CurvesConfig(runs=tuple(runs), out=args.out, title=args.title,
                            table=args.table, every=args.every)


def main(argv: Iterable[str] | None = None) -> None:
  print(curves.run(parse(argv)).plot)
