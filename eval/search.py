"""`twotower search`: query embeddings against a FAISS index -> the run file the evaluator
reads (eval.runs: TREC or Parquet by suffix), plus, with `--reference`, a report of the
index's Recall@k against the exact flat inner-product search and of both queries/s.

  twotower search --index run/index.faiss --queries run/q_emb --out run/run.parquet \
      --k 100 --nprobe 32 --reference run/embeddings
  twotower search --index 'run/index-*-of-00004.faiss' ...   # served as faiss.IndexShards
  twotower search --index run/index.faiss --rerank 8 ...     # re-rank k*8 (ivfpq_rerank)

An index built with its vectors beside it (`twotower index --type ivfpq_rerank` or
`--store_vectors`) is re-ranked by default (eval.rerank.DEFAULT_RERANK); `--rerank 0` turns
that off. Search goes through eval.searcher.load_searcher, as a query service would.

`run(SearchConfig) -> SearchResult` is the typed entry point (twotower.commands.search parses
the flags).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from typing import Optional, Sequence

import numpy as np

from twotower import checks
from twotower import contracts
from twotower import io as tio
from twotower.eval import faiss_index
from twotower.eval import runs
from twotower.eval import searcher as searcher_lib

logger = logging.getLogger(__name__)


def to_run(qids: Sequence[str], scores: np.ndarray, ids: np.ndarray) -> runs.Run:
  """Search results -> eval.runs.Run; FAISS's -1 fillers (fewer hits than k) dropped."""
  run_: runs.Run = {}
  for qid, s, i in zip(qids, scores, ids):
    keep = i >= 0
    run_[str(qid)] = runs.Ranked(tuple(int(x) for x in i[keep]),
                                 tuple(float(x) for x in s[keep]))
  return run_


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
  queries: str                      # query embeddings directory (string ids)
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

  def __post_init__(self):
    checks.positive(self, "k", "batch_size")


@dataclasses.dataclass(frozen=True)
class SearchResult:
  run_file: str
  queries: int
  seconds: float
  report: Optional[dict] = None     # with `reference`: recall vs flat, queries/s


def run(job: SearchConfig) -> SearchResult:
  import faiss  # pylint: disable=import-outside-toplevel
  if job.threads:
    faiss.omp_set_num_threads(job.threads)
  index = searcher_lib.load_searcher(job.index, mmap=job.mmap, rerank=job.rerank)
  qids, queries = faiss_index.read_embeddings(job.queries)
  if queries.shape[1] != index.d:
    raise ValueError(f"{job.queries}: query dim {queries.shape[1]} != index dim {index.d}")
  tio.log_settings("search", {"index": job.index, "vectors": index.ntotal,
                              "queries": len(qids), "k": job.k, "nprobe": job.nprobe,
                              "ef_search": job.ef_search, "rerank": index.rerank,
                              "mmap": job.mmap, "out": job.out})
  scores, ids, seconds = faiss_index.search(index, queries, job.k, job.batch_size,
                                            progress=True, nprobe=job.nprobe,
                                            ef_search=job.ef_search)
  runs.write_run(job.out, to_run(qids, scores, ids), tag=job.tag)
  logger.info("search: %d queries in %.2f s (%.0f queries/s) -> %s", len(qids), seconds,
              len(qids) / max(seconds, 1e-9), job.out)
  report = None
  if job.reference:
    report = compare_to_flat(ids, seconds, queries,
                             faiss_index.embedding_files(job.reference), job.k)
    report.update({"index": job.index, "nprobe": job.nprobe, "ef_search": job.ef_search,
                   "rerank": index.rerank, "k": job.k})
    tio.write_json(job.report or f"{job.out}.report.json", report)
  return SearchResult(job.out, len(qids), seconds, report)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("search"))
