"""Pyserini BM25 on the shared SQuAD subset: indexing time, single-threaded vs batched search.

  .venv/bin/python -m benchmarks.bm25_speed [--reqa DIR] [--queries 3000] [--threads N]
      [--doc_text sentence+passage] [--repeats 3]

Data: ../shared/data/squad/train-subset-v1.1.json built into ReQA candidates by
`twotower reqa` (untimed; or pass --reqa DIR of an existing build). Timed, each a median of
--repeats runs: building the Lucene index of all candidates (twotower.core.lucene.build_index); the first
--queries questions searched one at a time with `LuceneSearcher.search` (threads=1); the same
questions with `batch_search` in batches of 1000 on --threads threads. Prints a table and the
batched / single-threaded queries/s ratio. The JVM start and Pyserini import are paid once,
before any timing.
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import statistics
import tempfile
import time

from twotower.core import contracts
from twotower.core import lucene
from twotower.core import pyserini_env
from twotower.core import tower_text as texts
from twotower.eval import evaluate
from twotower.pipelines.reqa import builder as reqa

SUBSET = (pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data" / "squad"
          / "train-subset-v1.1.json")


def _median_time(fn, repeats: int) -> tuple[float, object]:
  times, result = [], None
  for _ in range(repeats):
    started = time.perf_counter()
    result = fn()
    times.append(time.perf_counter() - started)
  return statistics.median(times), result


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--reqa", help="an existing `twotower reqa` output (default: build one)")
  p.add_argument("--squad", default=str(SUBSET), help="SQuAD file to build from")
  p.add_argument("--queries", type=int, default=3000, help="questions searched per mode")
  p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                 help="batch_search threads")
  p.add_argument("--doc_text", choices=texts.DOC_TEXT_MODES, default=texts.DEFAULT_DOC_TEXT)
  p.add_argument("--repeats", type=int, default=3)
  args = p.parse_args()
  logging.basicConfig(level=logging.WARNING)
  pyserini_env.import_lucene_searcher()  # JVM start-up, untimed

  with tempfile.TemporaryDirectory() as tmp:
    reqa_dir = args.reqa
    if not reqa_dir:
      reqa_dir = f"{tmp}/reqa"
      reqa.run(reqa.ReqaConfig(out=reqa_dir, squad=args.squad, ratios=(5,)))
    docs = list(lucene.candidate_documents(reqa_dir, args.doc_text))
    (split,) = evaluate.load_splits(reqa_dir, [contracts.ALL_QUESTIONS])
    queries = [(q.question_id, q.question) for q in split.questions[:args.queries]]
    builds = iter(range(args.repeats))  # build_index takes a new folder each time
    t_index, _ = _median_time(
        lambda: lucene.build_index(docs, f"{tmp}/index-{next(builds)}", args.threads),
        args.repeats)
    index = f"{tmp}/index-0"

    def search(threads: int):
      return lucene.search(index, queries, lucene.DEFAULT_K1, lucene.DEFAULT_B, 100, threads,
                           1000, progress=False)

    search(args.threads)  # warm the JIT and the page cache
    t_single, single = _median_time(lambda: search(1), args.repeats)
    t_batched, batched = _median_time(lambda: search(args.threads), args.repeats)
    same = sum(single[q].candidate_ids == batched[q].candidate_ids for q, _ in queries)

  qps_single, qps_batched = len(queries) / t_single, len(queries) / t_batched
  print(f"Pyserini BM25 (k1={lucene.DEFAULT_K1}, b={lucene.DEFAULT_B}), {len(docs)} candidates "
        f"({args.doc_text}), {len(queries)} queries, top 100, median of {args.repeats}, "
        f"{os.cpu_count()} cores")
  print(f"{'step':<36} {'seconds':>8} {'per second':>12}")
  print(f"{'index all candidates':<36} {t_index:>8.2f} {len(docs) / t_index:>9.0f} doc")
  print(f"{'search, one query at a time':<36} {t_single:>8.2f} {qps_single:>9.0f} q/s")
  print(f"{f'batch_search, {args.threads} threads':<36} {t_batched:>8.2f} {qps_batched:>9.0f} q/s")
  print(f"ratio batched / single-threaded: {qps_batched / qps_single:.2f}x "
        f"(identical top-100 lists: {same}/{len(queries)})")


if __name__ == "__main__":
  main()
