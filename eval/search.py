"""`twotower search`: query embeddings against a FAISS index -> the run file the evaluator
reads (eval.runs: TREC or Parquet by suffix), plus, with `--reference`, a report of the
index's Recall@k against the exact flat inner-product search and of both queries/s.

  twotower search --index run/index.faiss --queries run/q_emb --out run/run.parquet \
      --k 100 --nprobe 32 --reference run/embeddings
  twotower search --index 'run/index-*-of-00004.faiss' ...   # served as faiss.IndexShards
  twotower search --index run/index.faiss --rerank 8 ...     # re-rank k*8 (ivfpq_rerank)

An index built with its vectors beside it (`twotower index --type ivfpq_rerank` or
`--store_vectors`) is re-ranked by default (eval.rerank.DEFAULT_RERANK); `--rerank 0` turns
that off. Search goes through eval.faiss_searcher.load_searcher, as a query service would.

Query embeddings of another model than the index's are refused, naming both models; so are
`--reference` embeddings of another model. The search itself goes through
eval.searchers.DenseSearcher, the object a retriever bundle's dense side (`twotower query`,
`serve`) searches with. The index's model is read where its record lives
(eval.embeddings.index_record): `<file>.vectors.json` beside it, or, for a retriever bundle's
`BUNDLE/index.faiss`, the bundle's manifest; the queries' from their `vectors.json`
(twotower.core.fingerprints). Any of them without a record naming its model is refused unless
`--allow_unchecked_vectors` takes it unchecked.

`run(SearchConfig) -> SearchResult` is the typed entry point (twotower.commands.search parses
the flags).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from typing import Optional, Sequence

import numpy as np
from tqdm import tqdm

from twotower.core import config_checks as checks
from twotower.core import contracts
from twotower.core import file_outputs
from twotower.core import fingerprints
from twotower.core import files as tio
from twotower.core import outputs
from twotower.core.searching import SearchParams
from twotower.eval import embeddings
from twotower.eval import faiss_index
from twotower.eval import runs
from twotower.eval import faiss_searcher as searcher_lib
from twotower.eval import searchers

logger = logging.getLogger(__name__)


def to_run(qids: Sequence[str], scores: np.ndarray, ids: np.ndarray) -> runs.Run:
  """Search results -> eval.runs.Run; FAISS's -1 fillers (fewer hits than k) dropped."""
  run_: runs.Run = {}
  for qid, s, i in zip(qids, scores, ids):
    keep = i >= 0
    run_[str(qid)] = runs.Ranked(tuple(int(x) for x in i[keep]),
                                 tuple(float(x) for x in s[keep]))
  return run_


def search_batches(dense: searchers.DenseSearcher, queries: np.ndarray, k: int,
                   batch_size: int, params: SearchParams = SearchParams()
                   ) -> tuple[np.ndarray, np.ndarray, float]:
  """(scores float32[nq, k], ids int64[nq, k] with -1 past the hits, seconds): the dense
  searcher over query vectors, `batch_size` queries per call, with a progress bar."""
  queries = np.ascontiguousarray(queries, dtype=np.float32)
  scores = np.full((len(queries), k), -np.inf, np.float32)
  ids = np.full((len(queries), k), -1, np.int64)
  t0 = time.perf_counter()
  for i in tqdm(range(0, len(queries), batch_size), desc="search", disable=None):
    s, found = dense.search_vectors(queries[i:i + batch_size], k, params)
    scores[i:i + batch_size, :s.shape[1]], ids[i:i + batch_size, :s.shape[1]] = s, found
  return scores, ids, time.perf_counter() - t0


def compare_to_flat(ids: np.ndarray, seconds: float, queries: np.ndarray,
                    reference_files: Sequence[str], k: int,
                    ks: Sequence[int] = contracts.DEFAULT_KS) -> dict:
  """Recall@k of `ids` against the exact flat top-k over the same embeddings, and qps."""
  _, flat_ids, flat_seconds = faiss_index.flat_knn(queries, reference_files, k)
  return {
      "queries": int(len(queries)),
      "recall_vs_flat": {f"R@{c}": faiss_index.recall_vs_reference(ids, flat_ids, c)
                         for c in ks if c <= k},
      "qps": len(queries) / seconds if seconds else float("inf"),
      "flat_qps": len(queries) / flat_seconds if flat_seconds else float("inf"),
  }


@dataclasses.dataclass(frozen=True)
class SearchConfig:
  """Flags of `twotower search`."""
  index: str                        # index file, or a glob / comma list of index shards
  queries: str                      # query embeddings (string ids): folder(s), files or globs
                                    # (eval.embeddings.embedding_files, as --reference)
  out: str                          # run file: *.parquet (contracts.RUN_SCHEMA) or TREC
  k: int = 100
  nprobe: Optional[int] = None      # IVF lists visited per query
  ef_search: Optional[int] = None   # HNSW search beam width
  batch_size: int = 4096            # queries per FAISS call
  threads: int = 0                  # FAISS OpenMP threads (0: all)
  mmap: bool = False                # map the index file(s) (refused for unmappable types)
  rerank: Optional[int] = None      # re-rank k*rerank exactly (None: default if vectors exist)
  tag: str = "twotower"             # TREC run tag
  reference: Optional[str] = None   # document embeddings: report Recall@k vs exact flat
  report: Optional[str] = None      # where that report goes (default OUT.report.json)
  overwrite: bool = False           # replace an --out of other settings (file_outputs.owned_files)
  allow_unchecked_vectors: bool = False  # take an index, queries or reference whose model no
                                    # record names, with a warning

  def __post_init__(self):
    checks.positive(self, "k", "batch_size")


@dataclasses.dataclass(frozen=True)
class SearchResult:
  run_file: str
  queries: int
  seconds: float
  report: Optional[dict] = None     # with `reference`: recall vs flat, queries/s


def check_models(job: SearchConfig) -> tuple[list[str], list[str]]:
  """The query and the reference embedding files (none without --reference), after checking
  that the index, the queries (and the reference) are vectors of one model.

  Raises:
    ValueError: vectors of two models, naming both; a source whose model no record names,
      unless `allow_unchecked_vectors` (then a warning); no such index file.
  """
  allow = job.allow_unchecked_vectors
  paths = tio.match_files(job.index) if any(c in job.index for c in "*?,") else [job.index]
  records = [(p, embeddings.index_record(p)) for p in paths]
  query_files = embeddings.embedding_files(job.queries, allow_unchecked=allow)
  records += fingerprints.embedding_records(query_files)
  reference_files = (embeddings.embedding_files(job.reference, allow_unchecked=allow)
                     if job.reference else [])
  records += fingerprints.embedding_records(reference_files)
  fingerprints.one_model(records, allow_unchecked=allow)
  return query_files, reference_files


def run(job: SearchConfig) -> SearchResult:
  import faiss  # pylint: disable=import-outside-toplevel
  query_files, reference_files = check_models(job)
  # --out is this stage's file (file_outputs.owned_files); judged before the search, so that a
  # refused --out costs nothing. Taking unchecked vectors changes no byte of the run.
  settings = outputs.settings_of(job, skip=("batch_size", "threads", "mmap", "report",
                                            "allow_unchecked_vectors"))
  inputs = [job.index, job.queries, *([job.reference] if job.reference else [])]
  file_outputs.check_file(job.out, "search", settings, overwrite=job.overwrite, inputs=inputs)
  if job.threads:
    faiss.omp_set_num_threads(job.threads)
  index = searcher_lib.load_searcher(job.index, mmap=job.mmap, rerank=job.rerank)
  qids, queries = embeddings.read_embeddings(job.queries, query_files)
  if queries.shape[1] != index.d:
    raise ValueError(f"{job.queries}: query dim {queries.shape[1]} != index dim {index.d}")
  tio.log_settings("search", {"index": job.index, "vectors": index.ntotal,
                              "queries": len(qids), "k": job.k, "nprobe": job.nprobe,
                              "ef_search": job.ef_search, "rerank": index.rerank,
                              "mmap": job.mmap, "out": job.out})
  scores, ids, seconds = search_batches(searchers.DenseSearcher(index), queries, job.k,
                                       job.batch_size, SearchParams(job.nprobe, job.ef_search))
  logger.info("search: %d queries in %.2f s (%.0f queries/s) -> %s", len(qids), seconds,
              len(qids) / max(seconds, 1e-9), job.out)
  report = None
  if job.reference:
    report = compare_to_flat(ids, seconds, queries, reference_files, job.k)
    report.update({"index": job.index, "nprobe": job.nprobe, "ef_search": job.ef_search,
                   "rerank": index.rerank, "k": job.k})
  report_path = job.report or f"{job.out}.report.json"
  with file_outputs.owned_files(job.out, "search", settings, overwrite=job.overwrite,
                           inputs=inputs) as written:
    runs.write_run(job.out, to_run(qids, scores, ids), tag=job.tag)
    written.append(job.out)
    if report is not None:
      tio.write_json(report_path, report)
      if os.path.dirname(os.path.abspath(report_path)) == \
          os.path.dirname(os.path.abspath(job.out)):
        written.append(report_path)  # beside the run: the run's (a manifest lists names)
  return SearchResult(job.out, len(qids), seconds, report)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("search"))
