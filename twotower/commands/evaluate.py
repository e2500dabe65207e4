"""`twotower evaluate --reqa DIR --run FILE... --out DIR`: Recall@k / MRR of run files (the
flags of eval.evaluate)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.core import metrics
from twotower.commands import dataclass_flags, flags
from twotower.eval import evaluate, report

#: Each flag's help; name, type and default come from EvaluateConfig
#: (commands.dataclass_flags).
HELP = {
    "reqa": "a `twotower reqa` output directory",
    "runs": "run files (TREC or .parquet)",
    "out": "output directory",
    "names": "system names, one per run (default: file names)",
    "splits": "split(s), comma-separated, e.g. all,test-5",
    "golds": f"gold convention(s), comma-separated: {', '.join(metrics.GOLD_CONVENTIONS)} "
             "(pair: the paper's exact (sentence, passage); sentence: ReQA's sentence text)",
    "ks": "recall cut-offs, comma-separated",
    "stem": "output file stem",
}


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("evaluate", evaluate.__doc__)
  dataclass_flags.add_fields(
      p, evaluate.EvaluateConfig, HELP, exclude=("overwrite",),
      # Singular flag names for the runs / splits / golds fields.
      flag_names={"runs": ("--run",), "splits": ("--split",), "golds": ("--gold",)},
      kwargs={"runs": {"nargs": "+"}, "ks": {"type": flags.positive_ints},
              # None: not given (the run files' names), as --help has always shown it.
              "names": {"nargs": "+", "default": None}})
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> evaluate.EvaluateConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  try:
    return dataclass_flags.config_from(
        args, evaluate.EvaluateConfig, out=flags.out_folder(p, args.out),
        names=tuple(args.names or ()), splits=flags.csv(args.splits),
        golds=flags.csv(args.golds))
  except ValueError as e:
    p.error(str(e))


def main(argv: Iterable[str] | None = None) -> None:
  result = evaluate.run(parse(argv))
  print(report.markdown_table(result.records) + "\nwritten: " + ", ".join(result.paths.values()))
