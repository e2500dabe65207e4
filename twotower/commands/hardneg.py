"""`twotower hardneg --reqa DIR`: BM25 hard negatives for the ReQA fine-tuning pairs of each
train ratio -> finetune/train-<ratio>-hn<k>-*.tfrecord (the flags of pipelines.hardneg)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.core import contracts
from twotower.core import tower_text as texts
from twotower.commands import dataclass_flags, flags
from twotower.pipelines import hardneg

#: Each flag's help; name, type and default come from HardNegConfig (commands.dataclass_flags).
HELP = {
    "reqa": "a `twotower reqa` output dir; its finetune/ receives the new pairs",
    "ratios": "train ratios whose finetune/train-<ratio> pairs get negatives",
    "k": "hard negatives per pair",
    "depth": "BM25 hits searched per question for the k negatives",
    "doc_text": "candidate layout (index and negative documents): the one `twotower reqa` "
                "wrote the pairs with",
    "k1": "BM25 k1 (Pyserini's default)",
    "b": "BM25 b (Pyserini's default)",
    "threads": "Lucene indexing and search threads",
    "num_shards": "TFRecord shards per output split",
}


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("hardneg", hardneg.__doc__)
  # --ratios stays a string here: parse() reads it, with its own one-line error.
  dataclass_flags.add_fields(p, hardneg.HardNegConfig, HELP, exclude=("overwrite",),
                             kwargs={"doc_text": {"choices": texts.DOC_TEXT_MODES}})
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> hardneg.HardNegConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  try:
    ratios = flags.ints(args.ratios)
  except ValueError:
    p.error(f"--ratios {args.ratios!r}: expected a comma list of integers, e.g. 1,5,10,80")
  unknown = sorted(set(ratios) - set(contracts.REQA_RATIOS))
  if not ratios or unknown:
    p.error(f"--ratios: {unknown or 'none given'}; `twotower reqa` writes {contracts.REQA_RATIOS}")
  if args.k < 1 or args.depth < args.k:
    p.error(f"need 1 <= --k <= --depth, got --k {args.k} --depth {args.depth}")
  if args.threads < 1 or args.num_shards < 1:
    p.error("--threads and --num_shards must be >= 1")
  return dataclass_flags.config_from(args, hardneg.HardNegConfig, ratios=ratios)


def main(argv: Iterable[str] | None = None) -> None:
  config = parse(argv)
  print(hardneg.summary_table(hardneg.run(config).stats, config))
