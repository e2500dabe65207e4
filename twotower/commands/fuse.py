"""`twotower fuse --run A B --out RUN`: hybrid of two runs, by score interpolation (weight
given or tuned on a validation split) or reciprocal-rank fusion (the flags of eval.fusion)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.commands import flags
from twotower.eval import fusion


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("fuse", fusion.__doc__)
  p.add_argument("--run", required=True, nargs=2, metavar=("RUN_A", "RUN_B"),
                 help="the two run files (TREC or .parquet), e.g. BM25 then dense")
  p.add_argument("--out", required=True, help="fused run file (TREC, or .parquet)")
  p.add_argument("--method", choices=fusion.METHODS, default="interpolate",
                 help="interpolate: min-max normalised scores, weight*A + (1-weight)*B; "
                      "rrf: reciprocal-rank fusion")
  p.add_argument("--weight", default="auto",
                 help="weight of RUN_A in [0, 1], or 'auto' to tune it on --tune_split")
  p.add_argument("--reqa", default="", help="ReQA directory (to tune the weight)")
  p.add_argument("--tune_split", default="",
                 help="validation split that chooses the weight, e.g. validation-5 (a test "
                      "split is refused)")
  p.add_argument("--tune_metric", default=fusion.MEAN_RECALL,
                 help="what the weight maximises: mean_R@k (the mean of R@1..100), or one "
                 "metric (R@100, MRR, ...)")
  p.add_argument("--min_tune_questions", type=int, default=fusion.MIN_TUNE_QUESTIONS,
                 help="fewest questions of --tune_split that may choose the weight")
  p.add_argument("--depth", type=flags.positive_int, default=100, help="candidates kept per question")
  p.add_argument("--rrf_k", type=flags.positive_int, default=fusion.RRF_K, help="RRF's k")
  p.add_argument("--tag", default="fused", help="TREC run tag")
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
    return fusion.FuseConfig(runs=tuple(args.run), out=args.out, method=args.method,
                             weight=weight, reqa=args.reqa, tune_split=args.tune_split,
                             tune_metric=args.tune_metric,
                             min_tune_questions=args.min_tune_questions, depth=args.depth,
                             rrf_k=args.rrf_k, tag=args.tag, overwrite=args.overwrite)
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
