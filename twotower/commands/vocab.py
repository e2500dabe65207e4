"""`twotower vocab --passages DIR --out FILE`: a WordPiece vocabulary from passages/*.parquet
(the flags of pipelines.vocab; one process, not a Beam job)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.core import contracts
from twotower.commands import dataclass_flags, flags
from twotower.pipelines import vocab

#: Each flag's help; name, type and default come from VocabConfig (commands.dataclass_flags).
HELP = {
    "passages": "passages Parquet: the `twotower pairs` output dir, its passages/ dir, or a glob",
    "out": "vocabulary file to write (one token a line)",
    "vocab_size": "largest vocabulary size",
    "max_texts": "read at most this many passages (0 = all)",
    "exclude_heldout": "skip the passages of pages the pair pipeline held out (its "
                       f"{contracts.PAIRS_CONFIG_FILE} gives the share)",
}


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("vocab", vocab.__doc__)
  dataclass_flags.add_fields(p, vocab.VocabConfig, HELP, exclude=("overwrite",))
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> vocab.VocabConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  if args.vocab_size <= len(contracts.RESERVED_TOKENS):
    p.error(f"--vocab_size must exceed {len(contracts.RESERVED_TOKENS)}, got {args.vocab_size}")
  flags.non_negative(p, args, ("max_texts",))
  return dataclass_flags.config_from(args, vocab.VocabConfig)


def main(argv: Iterable[str] | None = None) -> None:
  result = vocab.run(parse(argv))
  print(vocab.summary(result))
