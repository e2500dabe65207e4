"""`twotower index`: build a FAISS index (flat / IVF / HNSW / IVF-PQ, inner product) from
embedding shards, streamed, and write it atomically; optionally as several index shards that
`twotower search` serves together through `faiss.IndexShards`.

  twotower index --embeddings run/embeddings --out run/index.faiss --type ivfpq --nlist 4096
  twotower index --embeddings run/embeddings --out run/index.faiss --type ivfpq \
      --num_index_shards 4      # writes run/index-0000{0..3}-of-00004.faiss
"""

from __future__ import annotations

import argparse
import logging
import time

from twotower import io as tio
from twotower.eval import faiss_index

logger = logging.getLogger(__name__)


def add_build_args(p: argparse.ArgumentParser) -> None:
  p.add_argument("--type", choices=faiss_index.INDEX_TYPES, default="flat",
                 help="index family; flat is the exact inner-product reference")
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


def config_from_args(args: argparse.Namespace) -> faiss_index.IndexConfig:
  return faiss_index.IndexConfig(
      type=args.type, factory=args.factory, nlist=args.nlist, pq_m=args.pq_m,
      pq_nbits=args.pq_nbits, hnsw_m=args.hnsw_m, ef_construction=args.ef_construction,
      train_size=args.train_size, kmeans_niter=args.kmeans_niter, seed=args.seed)


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="twotower index", description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument("--embeddings", required=True,
                 help="embeddings directory (embeddings-*.parquet) or a glob of shards")
  p.add_argument("--out", required=True, help="index file to write (e.g. index.faiss)")
  add_build_args(p)
  p.add_argument("--num_index_shards", type=int, default=1,
                 help="write N index shards (OUT-SSSSS-of-NNNNN.faiss) for IndexShards")
  p.add_argument("--block_rows", type=int, default=65_536,
                 help="vectors read and added per step (bounds build memory)")
  p.add_argument("--threads", type=int, default=0, help="FAISS OpenMP threads (0: all)")
  return p


def run(argv: list[str] | None = None) -> None:
  import faiss
  args = _parser().parse_args(argv)
  if args.threads:
    faiss.omp_set_num_threads(args.threads)
  config = config_from_args(args)
  files = faiss_index.embedding_files(args.embeddings)
  tio.log_settings("index", {"embeddings": args.embeddings, "shards_in": len(files),
                             "factory": config.factory or config.type, "out": args.out,
                             "index_shards": args.num_index_shards})
  t0 = time.perf_counter()
  paths = faiss_index.shard_paths(args.out, args.num_index_shards)
  if args.num_index_shards <= 1:
    index = faiss_index.build_index(files, config, args.block_rows, progress=True)
    faiss_index.save_index(index, paths[0])
    total = index.ntotal
  else:
    total = 0
    for path, shard in zip(paths, faiss_index.iter_index_shards(
        files, config, args.num_index_shards, args.block_rows, progress=True)):
      faiss_index.save_index(shard, path)
      total += shard.ntotal
      del shard
  logger.info("index: %d vectors in %s (%.1f s)", total, ", ".join(paths),
              time.perf_counter() - t0)


if __name__ == "__main__":
  run()
