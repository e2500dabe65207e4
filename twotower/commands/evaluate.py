"""`twotower evaluate --reqa DIR --run FILE... --out DIR`: Recall@k / MRR of run files (the
flags of eval.evaluate)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower import contracts
from twotower import metrics
from twotower.commands import flags
from twotower.eval import evaluate, report


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("evaluate", evaluate.__doc__)
  p.add_argument("--reqa", required=True, help="a `twotower reqa` output directory")
  p.add_argument("--run", required=True, nargs="+", help="run files (TREC or .parquet)")
  p.add_argument("--out", required=True, help="output directory")
  p.add_argument("--names", nargs="+", help="system names, one per run (default: file names)")
  p.add_argument("--split", default=contracts.ALL_QUESTIONS, help="split(s), comma-separated, e.g. all,test-5")
  p.add_argument("--gold", default="pair", help="gold convention(s), comma-separated: "
                 f"{', '.join(metrics.GOLD_CONVENTIONS)} (pair: the paper's exact "
                 "(sentence, passage); sentence: ReQA's sentence text)")
  p.add_argument("--ks", type=flags.positive_ints,
                 default=",".join(map(str, contracts.DEFAULT_KS)),
                 help="recall cut-offs, comma-separated")
  p.add_argument("--stem", default="metrics", help="output file stem")
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> evaluate.EvaluateConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  try:
    return evaluate.EvaluateConfig(
        reqa=args.reqa, runs=tuple(args.run), out=flags.out_folder(p, args.out),
        names=tuple(args.names or ()),
        splits=flags.csv(args.split), golds=flags.csv(args.gold), ks=args.ks,
        stem=args.stem, overwrite=args.overwrite)
  except ValueError as e:
    p.error(str(e))


def main(argv: Iterable[str] | None = None) -> None:
  result = evaluate.run(parse(argv))
  print(report.markdown_table(result.records) + "\nwritten: " + ", ".join(result.paths.values()))
