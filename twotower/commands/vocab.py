"""`twotower vocab --passages DIR --out FILE`: a WordPiece vocabulary from passages/*.parquet
(the flags of pipelines.vocab; one process, not a Beam job)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower import contracts
from twotower.commands import flags
from twotower.pipelines import vocab


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("vocab", vocab.__doc__)
  d = vocab.VocabConfig(passages="", out="")
  p.add_argument("--passages", required=True,
                 help="passages Parquet: the `twotower pairs` output dir, its passages/ dir, "
                      "or a glob")
  p.add_argument("--out", required=True, help="vocabulary file to write (one token a line)")
  p.add_argument("--vocab_size", type=int, default=d.vocab_size,
                 help="largest vocabulary size")
  p.add_argument("--max_texts", type=int, default=d.max_texts,
                 help="read at most this many passages (0 = all)")
  p.add_argument("--exclude_heldout", action=argparse.BooleanOptionalAction,
                 default=d.exclude_heldout,
                 help="skip the passages of pages the pair pipeline held out (its "
                      f"{contracts.PAIRS_CONFIG_FILE} gives the share)")
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> vocab.VocabConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  if args.vocab_size <= len(contracts.RESERVED_TOKENS):
    p.error(f"--vocab_size must exceed {len(contracts.RESERVED_TOKENS)}, got {args.vocab_size}")
  flags.non_negative(p, args, ("max_texts",))
  return vocab.VocabConfig(passages=args.passages, out=args.out, vocab_size=args.vocab_size,
                           max_texts=args.max_texts, exclude_heldout=args.exclude_heldout,
                           overwrite=args.overwrite)


def main(argv: Iterable[str] | None = None) -> None:
  result = vocab.run(parse(argv))
  print(vocab.summary(result))
