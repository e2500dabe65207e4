"""`twotower bm25 --reqa DIR --out DIR`: Pyserini BM25 over ReQA candidates (the flags of
eval.bm25)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower import texts
from twotower.commands import flags
from twotower.eval import bm25, report


def build_parser() -> argparse.ArgumentParser:
  d = bm25.Bm25Config(reqa="", out="")
  p = flags.parser("bm25", bm25.__doc__)
  p.add_argument("--reqa", required=True, help="a `twotower reqa` output directory")
  p.add_argument("--out", required=True, help="output directory (index/, run.trec, metrics.*)")
  p.add_argument("--doc_text", choices=texts.DOC_TEXT_MODES, default=d.doc_text,
                 help="what a candidate's Lucene document holds")
  p.add_argument("--k1", type=float, default=d.k1, help="BM25 k1 (Pyserini's default)")
  p.add_argument("--b", type=float, default=d.b, help="BM25 b (Pyserini's default)")
  p.add_argument("--split", default=",".join(d.splits), help="split(s) to search and evaluate")
  p.add_argument("--gold", default=",".join(d.golds), help="gold convention(s): pair, sentence")
  p.add_argument("--threads", type=flags.positive_int, default=d.threads,
                 help="indexing and search threads (1: one query at a time)")
  p.add_argument("--hits", type=flags.positive_int, default=d.hits, help="candidates retrieved per question")
  p.add_argument("--batch_size", type=flags.positive_int, default=d.batch_size,
                 help="questions per batch_search call")
  p.add_argument("--system", default="", help="system name in metrics (default bm25-<doc_text>)")
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> bm25.Bm25Config:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  return bm25.Bm25Config(reqa=args.reqa, out=flags.out_folder(p, args.out),
                         doc_text=args.doc_text, k1=args.k1, b=args.b, splits=flags.csv(args.split), golds=flags.csv(args.gold),
                         threads=args.threads, hits=args.hits, batch_size=args.batch_size,
                         system=args.system, overwrite=args.overwrite)


def main(argv: Iterable[str] | None = None) -> None:
  print(report.markdown_table(bm25.run(parse(argv)).records))
