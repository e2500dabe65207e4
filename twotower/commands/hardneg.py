"""`twotower hardneg --reqa DIR`: BM25 hard negatives for the ReQA fine-tuning pairs of each
train ratio -> finetune/train-<ratio>-hn<k>-*.tfrecord (the flags of pipelines.hardneg)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower import contracts
from twotower import texts
from twotower.commands import flags
from twotower.pipelines import hardneg


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("hardneg", hardneg.__doc__)
  d = hardneg.HardNegConfig(reqa="")
  p.add_argument("--reqa", required=True,
                 help="a `twotower reqa` output dir; its finetune/ receives the new pairs")
  p.add_argument("--ratios", default=",".join(map(str, d.ratios)),
                 help="train ratios whose finetune/train-<ratio> pairs get negatives")
  p.add_argument("--k", type=int, default=d.k, help="hard negatives per pair")
  p.add_argument("--depth", type=int, default=d.depth,
                 help="BM25 hits searched per question for the k negatives")
  p.add_argument("--doc_text", choices=texts.DOC_TEXT_MODES, default=d.doc_text,
                 help="candidate layout (index and negative documents): the one `twotower "
                      "reqa` wrote the pairs with")
  p.add_argument("--k1", type=float, default=d.k1, help="BM25 k1 (Pyserini's default)")
  p.add_argument("--b", type=float, default=d.b, help="BM25 b (Pyserini's default)")
  p.add_argument("--threads", type=int, default=d.threads,
                 help="Lucene indexing and search threads")
  p.add_argument("--num_shards", type=int, default=d.num_shards,
                 help="TFRecord shards per output split")
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
  return hardneg.HardNegConfig(reqa=args.reqa, ratios=ratios, k=args.k, depth=args.depth,
                               doc_text=args.doc_text, k1=args.k1, b=args.b,
                               threads=args.threads, num_shards=args.num_shards,
                               overwrite=args.overwrite)


def main(argv: Iterable[str] | None = None) -> None:
  config = parse(argv)
  print(hardneg.summary_table(hardneg.run(config).stats, config))
