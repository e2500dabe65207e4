"""`twotower reqa --squad FILE --out DIR`: SQuAD / Natural Questions -> ReQA candidates,
questions, fine-tuning pairs, stats.json (the flags of pipelines.reqa.builder; any other flag is a
Beam pipeline option)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.core import tower_text as texts
from twotower.commands import dataclass_flags, flags
from twotower.pipelines.reqa import builder as reqa
from twotower.pipelines.sentences import splitters

#: Each flag's help; name, type and default come from ReqaConfig (commands.dataclass_flags).
HELP = {
    "squad": "SQuAD v1.1/v2.0 JSON file(s) (a glob, any Beam filesystem)",
    "nq": "Natural Questions simplified jsonl[.gz] file(s) (a glob)",
    "out": "output directory",
    "splitter": f"sentence splitter ({', '.join(splitters.SPLITTER_NAMES)}); `reqa` reproduces "
                "ReQA's counts",
    "extra_passages": "a `twotower pairs` output dir (or its passages/) whose passages supply "
                      "open-domain candidates",
    "extra_candidates": "(sentence, passage) candidates sampled from --extra_passages, or "
                        "`all`; one whose passage is a ReQA paragraph is removed and counted",
    "validation_percent": "percent of each train side held out for validation",
    "seed": "salt of the split and sampling hashes",
    "doc_text": "doc_text layout of the fine-tuning pairs (twotower.core.tower_text)",
    "num_shards": "TFRecord shards per fine-tuning split",
}


def extra_count(value: str) -> int:
  """`--extra_candidates`: a count >= 0, or `all` (reqa.ALL_EXTRA)."""
  if value.strip().lower() == "all":
    return reqa.ALL_EXTRA
  try:
    n = int(value)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected a count or 'all', got {value!r}") from None
  if n < 0:
    raise argparse.ArgumentTypeError(f"must be >= 0 or 'all', got {n}")
  return n


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("reqa", reqa.__doc__)
  # One source: --squad or --nq.
  dataclass_flags.add_fields(p.add_mutually_exclusive_group(required=True), reqa.ReqaConfig,
                             HELP, names=("squad", "nq"))
  dataclass_flags.add_fields(
      p, reqa.ReqaConfig, HELP,
      exclude=("squad", "nq", "ratios", "overwrite", "beam_args"),  # ratios: no flag
      kwargs={"extra_candidates": {"type": extra_count},
              "doc_text": {"choices": texts.DOC_TEXT_MODES}})
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> reqa.ReqaConfig:
  p = build_parser()
  args, beam_args = flags.parse_with_beam(p, argv)
  flags.non_negative(p, args, ("num_shards",))
  if args.extra_candidates and not args.extra_passages:
    p.error("--extra_candidates needs --extra_passages")
  if not 0 <= args.validation_percent <= 100:
    p.error(f"--validation_percent must be in [0, 100], got {args.validation_percent}")
  return dataclass_flags.config_from(args, reqa.ReqaConfig, out=flags.out_folder(p, args.out),
                                    beam_args=beam_args)


def main(argv: Iterable[str] | None = None) -> None:
  config = parse(argv)
  print(reqa.summary_table(reqa.run(config).stats, config))
