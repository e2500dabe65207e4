"""`twotower reqa --squad FILE --out DIR`: SQuAD / Natural Questions -> ReQA candidates,
questions, fine-tuning pairs, stats.json (the flags of pipelines.reqa; any other flag is a
Beam pipeline option)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower import texts
from twotower.commands import flags
from twotower.pipelines import reqa, sentences


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
  d = reqa.ReqaConfig(out="")
  src = p.add_mutually_exclusive_group(required=True)
  src.add_argument("--squad", help="SQuAD v1.1/v2.0 JSON file(s) (a glob, any Beam filesystem)")
  src.add_argument("--nq", help="Natural Questions simplified jsonl[.gz] file(s) (a glob)")
  p.add_argument("--out", required=True, help="output directory")
  p.add_argument("--splitter", default=d.splitter,
                 help=f"sentence splitter ({', '.join(sentences.SPLITTER_NAMES)}); `reqa` "
                      "reproduces ReQA's counts")
  p.add_argument("--extra_passages", help="a `twotower pairs` output dir (or its passages/) "
                 "whose passages supply open-domain candidates")
  p.add_argument("--extra_candidates", type=extra_count, default=d.extra_candidates,
                 help="(sentence, passage) candidates sampled from --extra_passages, or `all`; "
                      "one whose passage is a ReQA paragraph is removed and counted")
  p.add_argument("--validation_percent", type=float, default=d.validation_percent,
                 help="percent of each train side held out for validation")
  p.add_argument("--seed", default=d.seed, help="salt of the split and sampling hashes")
  p.add_argument("--doc_text", choices=texts.DOC_TEXT_MODES, default=d.doc_text,
                 help="doc_text layout of the fine-tuning pairs (twotower.texts)")
  p.add_argument("--num_shards", type=int, default=d.num_shards,
                 help="TFRecord shards per fine-tuning split")
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
  return reqa.ReqaConfig(out=flags.out_folder(p, args.out), squad=args.squad, nq=args.nq,
                         splitter=args.splitter,
                         extra_passages=args.extra_passages,
                         extra_candidates=args.extra_candidates,
                         validation_percent=args.validation_percent, seed=args.seed,
                         doc_text=args.doc_text, num_shards=args.num_shards,
                         overwrite=args.overwrite, beam_args=beam_args)


def main(argv: Iterable[str] | None = None) -> None:
  config = parse(argv)
  print(reqa.summary_table(reqa.run(config).stats, config))
