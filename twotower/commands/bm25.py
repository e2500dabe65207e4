"""`twotower bm25 --reqa DIR --out DIR`: Pyserini BM25 over ReQA candidates (the flags of
eval.bm25)."""

from __future__ import annotations

import argparse
import functools
from typing import Iterable

from twotower.core import tower_text as texts
from twotower.commands import dataclass_flags, flags
from twotower.eval import bm25, report

#: Each flag's help; name, type and default come from Bm25Config (commands.dataclass_flags).
HELP = {
    "reqa": "a `twotower reqa` output directory",
    "out": "output directory (index/, run.trec, metrics.*)",
    "doc_text": "what a candidate's Lucene document holds",
    "k1": "BM25 k1 (Pyserini's default)",
    "b": "BM25 b (Pyserini's default)",
    "splits": "split(s) to search and evaluate",
    "golds": "gold convention(s): pair, sentence",
    "threads": "indexing and search threads (1: one query at a time)",
    "hits": "candidates retrieved per question",
    "batch_size": "questions per batch_search call",
    "system": "system name in metrics (default bm25-<doc_text>)",
    "vocab": "the towers' WordPiece vocabulary (with --doc_pieces / --query_pieces)",
    "doc_pieces": "index what the document tower keeps of `[CLS] title [SEP] text [SEP]` cut "
                  "to this many word pieces (its model.doc_len; 0: the whole text)",
    "query_pieces": "search what the query tower keeps of each question, cut to this many "
                    "word pieces (its model.query_len; 0: the whole question)",
}


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("bm25", bm25.__doc__)
  add = functools.partial(dataclass_flags.add_fields, p, bm25.Bm25Config, HELP)
  add(names=("reqa", "out", "doc_text", "k1", "b"),
      kwargs={"doc_text": {"choices": texts.DOC_TEXT_MODES}})
  # Singular flag names for the splits / golds fields (comma lists).
  add(names=("splits", "golds"), flag_names={"splits": ("--split",), "golds": ("--gold",)})
  add(names=("threads", "hits", "batch_size", "system"),
      kwargs={name: {"type": flags.positive_int} for name in ("threads", "hits", "batch_size")})
  add(names=("vocab", "doc_pieces", "query_pieces"))
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> bm25.Bm25Config:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  if args.doc_pieces < 0 or args.query_pieces < 0:
    p.error("--doc_pieces / --query_pieces: 0 (the whole text) or a length in word pieces")
  if (args.doc_pieces or args.query_pieces) and not args.vocab:
    p.error("--doc_pieces / --query_pieces cut the text into the towers' word pieces: give "
            "their --vocab")
  return dataclass_flags.config_from(args, bm25.Bm25Config, out=flags.out_folder(p, args.out),
                                    splits=flags.csv(args.splits), golds=flags.csv(args.golds))


def main(argv: Iterable[str] | None = None) -> None:
  print(report.markdown_table(bm25.run(parse(argv)).records))
