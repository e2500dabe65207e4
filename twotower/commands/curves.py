"""`twotower curves --run LABEL=DIR ... --out FILE.png`: training curves of runs
(model.curves)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.commands import dataclass_flags, flags
from twotower.model import curves

#: Each flag's help; name, type and default come from CurvesConfig (commands.dataclass_flags).
HELP = {
    "runs": "a run dir with history.csv and config.yaml (repeatable)",
    "out": "PNG path",
    "title": "figure title",
    "table": "also write the plotted metric as a Markdown table to this file",
    "every": "the table's steps: every N steps (default: every checkpoint)",
}


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("curves", curves.__doc__)
  dataclass_flags.add_fields(p, curves.CurvesConfig, HELP, flag_names={"runs": ("--run",)},
                             kwargs={"runs": {"action": "append", "metavar": "LABEL=DIR"}})
  return p


def parse(argv: Iterable[str] | None) -> curves.CurvesConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  runs = []
  for item in args.runs:
    label, sep, run_dir = item.partition("=")
    if not sep or not label or not run_dir:
      p.error(f"--run {item!r}: expected LABEL=DIR")
    runs.append((label, run_dir))
  return dataclass_flags.config_from(args, curves.CurvesConfig, runs=tuple(runs))


def main(argv: Iterable[str] | None = None) -> None:
  print(curves.run(parse(argv)).plot)
