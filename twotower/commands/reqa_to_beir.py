"""`twotower reqa-to-beir --reqa DIR --split SPLIT --out DIR`: one split of a ReQA folder as
a BEIR folder, qrels under both gold conventions (the flags of eval.reqa_beir: one per
ReqaBeirConfig field, dataclass_flags); prints what it wrote."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.core import tower_text as texts
from twotower.commands import dataclass_flags, flags
from twotower.eval import reqa_beir


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("reqa-to-beir", reqa_beir.__doc__)
  dataclass_flags.add_fields(p, reqa_beir.ReqaBeirConfig, exclude=("overwrite",),
                             kwargs={"doc_text": {"choices": texts.DOC_TEXT_MODES}})
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> reqa_beir.ReqaBeirConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  return dataclass_flags.config_from(args, reqa_beir.ReqaBeirConfig,
                                    out=flags.out_folder(p, args.out))


def main(argv: Iterable[str] | None = None) -> None:
  result = reqa_beir.run(parse(argv))
  print(f"{result.out}: {result.documents} documents, {result.queries} queries; "
        f"qrels/{result.split}.tsv (pair) {result.pair_qrels} judgments, "
        f"qrels/{reqa_beir.sentence_split(result.split)}.tsv (sentence) "
        f"{result.sentence_qrels} judgments of {result.sentence_queries} unique questions")
