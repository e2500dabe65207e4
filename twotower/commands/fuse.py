"""`twotower fuse --run A B --out RUN`: hybrid of two runs, by score interpolation (weight
given or tuned on a validation split) or reciprocal-rank fusion (the flags of eval.fusion)."""

from __future__ import annotations

import argparse
import functools
from typing import Iterable

from twotower.commands import dataclass_flags, flags
from twotower.eval import fusion

#: Each flag's help; name, type and default come from FuseConfig (commands.dataclass_flags).
HELP = {
    "runs": "the two run files (TREC or .parquet), e.g. BM25 then dense",
    "out": "fused run file (TREC, or .parquet)",
    "method": "interpolate: min-max normalised scores, weight*A + (1-weight)*B; rrf: "
              "reciprocal-rank fusion",
    "reqa": "ReQA directory (to tune the weight)",
    "tune_split": "validation split that chooses the weight, e.g. validation-5 (a test split "
                  "is refused)",
    "tune_metric": "what the weight maximises: mean_R@k (the mean of R@1..100), "
                   "worst_gain_over_first (the worst gain over RUN_A alone among R@1..100 and "
                   "MRR: never below RUN_A on the split), or one metric (R@100, MRR, ...)",
    "min_tune_questions": "fewest questions of --tune_split that may choose the weight",
    "depth": "candidates kept per question",
    "rrf_k": "RRF's k",
    "tag": "TREC run tag",
}


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("fuse", fusion.__doc__)
  add = functools.partial(dataclass_flags.add_fields, p, fusion.FuseConfig, HELP)
  add(names=("runs", "out", "method"), flag_names={"runs": ("--run",)},
      kwargs={"runs": {"nargs": 2, "metavar": ("RUN_A", "RUN_B")},
              "method": {"choices": fusion.METHODS}})
  # --weight is spelt apart: 'auto' (FuseConfig.weight None) is no float; parse converts it.
  p.add_argument("--weight", default="auto",
                 help="weight of RUN_A in [0, 1], or 'auto' to tune it on --tune_split")
  add(names=("reqa", "tune_split", "tune_metric", "min_tune_questions", "depth", "rrf_k", "tag"),
      kwargs={"depth": {"type": flags.positive_int}, "rrf_k": {"type": flags.positive_int}})
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> fusion.FuseConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  try:
    weight = None if args.weight == "auto" else float(args.weight)
  except ValueError:
    p.error(f"--weight {args.weight!r}: expected a number in [0, 1] or 'auto'")
  flags.hybrid_tuning(p, weight, args.tune_split, args.tune_metric)
  try:
    return dataclass_flags.config_from(args, fusion.FuseConfig, weight=weight)
  except ValueError as e:
    p.error(str(e))


def main(argv: Iterable[str] | None = None) -> None:
  result = fusion.run(parse(argv))
  line = f"{result.method} fusion -> {result.run_file}"
  if result.weight is not None:
    line += f" (weight of the first run {result.weight:.2f}"
    line += f", chosen on {result.tuning.split} by {result.tuning.metric})" if result.tuning \
        else ")"
  print(line)
