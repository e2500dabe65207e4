"""`twotower index --embeddings DIR --out FILE`: a FAISS index from embedding shards (the flags
of eval.index)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.commands import flags
from twotower.eval import faiss_index, index


def add_index_flags(p: argparse.ArgumentParser) -> None:
  """Flags of a `faiss_index.IndexSpec` (shared with benchmarks.faiss_ann)."""
  p.add_argument("--type", choices=faiss_index.INDEX_TYPES, default="flat",
                 help="index family; flat is the exact inner-product reference; "
                      "ivfpq_rerank: fast-scan IVF-PQ whose short list is re-ranked exactly "
                      "from float32 vectors memory-mapped beside the index")
  p.add_argument("--factory", default=None,
                 help="an index_factory string (e.g. 'OPQ32,IVF4096,PQ32'); overrides --type")
  p.add_argument("--nlist", type=int, default=0, help="IVF lists (0: about 4*sqrt(n))")
  p.add_argument("--pq_m", type=int, default=0, help="PQ sub-quantizers (0: d/4)")
  p.add_argument("--pq_nbits", type=int, default=8, help="bits per PQ code")
  p.add_argument("--hnsw_m", type=int, default=32, help="HNSW graph degree")
  p.add_argument("--ef_construction", type=int, default=40, help="HNSW build beam width")
  p.add_argument("--train_size", type=int, default=0,
                 help="training sample size (0: max(64*nlist, 64*2^nbits), at most n)")
  p.add_argument("--kmeans_niter", type=int, default=10,
                 help="k-means iterations of the IVF coarse quantizer")
  p.add_argument("--seed", type=int, default=0, help="seed of the training sample")
  p.add_argument("--nprobe", type=int, default=0,
                 help="IVF nprobe saved in the index, the search default (0: FAISS's 1; "
                      f"ivfpq_rerank: {faiss_index.RERANK_NPROBE})")
  p.add_argument("--opq", action="store_true",
                 help="ivfpq / ivfpq_rerank: an OPQ rotation before PQ")
  p.add_argument("--fast_scan", action="store_true",
                 help="ivfpq / ivfpq_rerank: 4-bit fast-scan PQ codes (PQ{m}x4fs)")
  p.add_argument("--store_vectors", action="store_true",
                 help="write float32 vectors beside the index (INDEX.vectors.npy, id order) "
                      "for exact re-ranking at search time; implied by ivfpq_rerank")


def index_config(args: argparse.Namespace) -> faiss_index.IndexSpec:
  return faiss_index.IndexSpec(
      type=args.type, factory=args.factory, nlist=args.nlist, pq_m=args.pq_m,
      pq_nbits=args.pq_nbits, hnsw_m=args.hnsw_m, ef_construction=args.ef_construction,
      train_size=args.train_size, kmeans_niter=args.kmeans_niter, seed=args.seed,
      nprobe=args.nprobe, opq=args.opq, fast_scan=args.fast_scan,
      store_vectors=args.store_vectors)


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("index", index.__doc__)
  p.add_argument("--embeddings", required=True,
                 help="an embed output folder, Parquet files or globs, comma-separated; "
                 "the folders of `embed --num_input_shards N` as one complete set "
                 "(e.g. 'runs/emb-*')")
  p.add_argument("--out", required=True, help="index file to write (e.g. index.faiss)")
  add_index_flags(p)
  p.add_argument("--num_index_shards", type=flags.positive_int, default=1,
                 help="write N index shards (OUT-SSSSS-of-NNNNN.faiss) for IndexShards")
  p.add_argument("--block_rows", type=flags.positive_int, default=65_536,
                 help="vectors read and added per step (bounds build memory)")
  p.add_argument("--threads", type=int, default=0, help="FAISS OpenMP threads (0: all)")
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> index.IndexConfig:
  args = build_parser().parse_args(None if argv is None else list(argv))
  return index.IndexConfig(embeddings=args.embeddings, out=args.out, index=index_config(args),
                        num_index_shards=args.num_index_shards, block_rows=args.block_rows,
                        threads=args.threads, overwrite=args.overwrite)


def main(argv: Iterable[str] | None = None) -> None:
  result = index.run(parse(argv))
  print(f"indexed {result.vectors} vectors in {result.seconds:.1f} s -> "
        f"{', '.join(result.paths)}")
