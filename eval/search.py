"""`twotower search`: query embeddings against a FAISS index -> the run file the evaluator
reads (eval.runs: TREC or Parquet by suffix), plus, with `--reference`, a report of the
index's Recall@k against the exact flat inner-product search and of both queries/s.

  twotower search --index run/index.faiss --queries run/q_emb --out run/run.parquet \
      --k 100 --nprobe 32 --reference run/embeddings
  twotower search --index 'run/index-*-of-00004.faiss' ...   # served as faiss.IndexShards
"""

from __future__ import annotations

import argparse
import logging
from typing import Optional, Sequence

import numpy as np

from twotower import contracts
from twotower import io as tio
from twotower.eval import faiss_index
from twotower.eval import runs

logger = logging.getLogger(__name__)


def to_run(qids: Sequence[str], scores: np.ndarray, ids: np.ndarray) -> runs.Run:
  """Search results -> eval.runs.Run; FAISS's -1 fillers (fewer hits than k) dropped."""
  run: runs.Run = {}
  for qid, s, i in zip(qids, scores, ids):
    keep = i >= 0
    run[str(qid)] = runs.Ranked(tuple(int(x) for x in i[keep]), tuple(float(x) for x in s[keep]))
  return run


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


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="twotower search", description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument("--index", required=True,
                 help="index file, or a glob / comma list of index shards (IndexShards)")
  p.add_argument("--queries", required=True, help="query embeddings directory (string ids)")
  p.add_argument("--out", required=True, help="run file: *.parquet (RUN_SCHEMA) or TREC")
  p.add_argument("--k", type=int, default=100, help="candidates per question")
  p.add_argument("--nprobe", type=int, default=None, help="IVF lists visited per query")
  p.add_argument("--ef_search", type=int, default=None, help="HNSW search beam width")
  p.add_argument("--batch_size", type=int, default=4096, help="queries per FAISS call")
  p.add_argument("--threads", type=int, default=0, help="FAISS OpenMP threads (0: all)")
  p.add_argument("--mmap", action="store_true", help="memory-map the index file(s)")
  p.add_argument("--tag", default="twotower", help="TREC run tag")
  p.add_argument("--reference", default=None,
                 help="document embeddings the index was built from: report Recall@k "
                      "against exact flat inner-product search and queries/s")
  p.add_argument("--report", default=None,
                 help="where to write that report (default: OUT + '.report.json')")
  return p


def run(argv: Optional[list[str]] = None) -> None:
  import faiss
  args = _parser().parse_args(argv)
  if args.threads:
    faiss.omp_set_num_threads(args.threads)
  index = faiss_index.load_index(args.index, mmap=args.mmap)
  faiss_index.set_search_params(index, args.nprobe, args.ef_search)
  qids, queries = faiss_index.read_embeddings(args.queries)
  if queries.shape[1] != index.d:
    raise ValueError(f"{args.queries}: query dim {queries.shape[1]} != index dim {index.d}")
  tio.log_settings("search", {"index": args.index, "vectors": index.ntotal,
                              "queries": len(qids), "k": args.k, "nprobe": args.nprobe,
                              "ef_search": args.ef_search, "out": args.out})
  scores, ids, seconds = faiss_index.search(index, queries, args.k, args.batch_size,
                                            progress=True)
  runs.write_run(args.out, to_run(qids, scores, ids), tag=args.tag)
  logger.info("search: %d queries in %.2f s (%.0f queries/s) -> %s", len(qids), seconds,
              len(qids) / max(seconds, 1e-9), args.out)
  if args.reference:
    report = compare_to_flat(ids, seconds, queries,
                             faiss_index.embedding_files(args.reference), args.k)
    report.update({"index": args.index, "nprobe": args.nprobe, "ef_search": args.ef_search,
                   "k": args.k})
    tio.write_json(args.report or f"{args.out}.report.json", report)
    recalls = "  ".join(f"{key} {v:.4f}" for key, v in report["recall_vs_flat"].items())
    print(f"vs flat: {recalls}  |  {report['qps']:.0f} q/s vs flat {report['flat_qps']:.0f} "
          f"q/s ({report['qps'] / report['flat_qps']:.1f}x)")


if __name__ == "__main__":
  run()
