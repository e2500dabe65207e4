"""`twotower index --embeddings DIR --out FILE`: a FAISS index from embedding shards (the flags
of eval.index)."""

from __future__ import annotations

import argparse
import functools
from typing import Iterable

from twotower.commands import dataclass_flags, flags
from twotower.eval import faiss_index, index


#: Each flag's help; name, type and default come from the config field of the same name
#: (faiss_index.IndexSpec, index.IndexConfig; commands.dataclass_flags).
HELP = {
    "type": "index family; flat is the exact inner-product reference; ivfpq_rerank: IVF-PQ "
            "(8-bit codes, d/4 bytes; --fast_scan: 4-bit fast-scan) whose short list is "
            "re-ranked exactly from float32 vectors memory-mapped beside the index",
    "factory": "an index_factory string (e.g. 'OPQ32,IVF4096,PQ32'); overrides --type",
    "nlist": "IVF lists (0: about 4*sqrt(n))",
    "pq_m": "PQ sub-quantizers (0: d/4; ivfpq_rerank --fast_scan: d/2)",
    "pq_nbits": "bits per PQ code",
    "hnsw_m": "HNSW graph degree",
    "ef_construction": "HNSW build beam width",
    "train_size": "training sample size (0: max(64*nlist, 64*2^nbits), at most n)",
    "kmeans_niter": "k-means iterations of the IVF coarse quantizer",
    "seed": "seed of the training sample",
    "nprobe": "IVF nprobe saved in the index, the search default (0: FAISS's 1; ivfpq_rerank: "
              f"{faiss_index.RERANK_NPROBE})",
    "opq": "ivfpq / ivfpq_rerank: an OPQ rotation before PQ",
    "fast_scan": "ivfpq / ivfpq_rerank: 4-bit fast-scan PQ codes (PQ{m}x4fs)",
    "store_vectors": "write float32 vectors beside the index (INDEX.vectors.npy, id order) for "
                     "exact re-ranking at search time; implied by ivfpq_rerank",
    "embeddings": ("an embed output folder, Parquet files or globs, comma-separated; the "
                   "folders of `embed --num_input_shards N` as one complete set "
                   "(e.g. 'runs/emb-*')"),
    "out": "index file to write (e.g. index.faiss)",
    "num_index_shards": "write N index shards (OUT-SSSSS-of-NNNNN.faiss) for IndexShards",
    "block_rows": "vectors read and added per step (bounds build memory)",
    "threads": "FAISS OpenMP threads (0: all)",
    "allow_unchecked_vectors": "take embeddings no record vouches for, with a warning: "
                               "without a vectors.json naming their model (another tool's, an "
                               "older twotower's), or input shards recorded by file names "
                               "only; the index then records no model",
}


def add_index_flags(p: argparse.ArgumentParser) -> None:
  """Flags of a `faiss_index.IndexSpec` (shared with `twotower bundle`)."""
  dataclass_flags.add_fields(p, faiss_index.IndexSpec, HELP,
                             kwargs={"type": {"choices": faiss_index.INDEX_TYPES}})


def index_config(args: argparse.Namespace) -> faiss_index.IndexSpec:
  return dataclass_flags.config_from(args, faiss_index.IndexSpec)


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("index", index.__doc__)
  add = functools.partial(dataclass_flags.add_fields, p, index.IndexConfig, HELP)
  add(names=("embeddings", "out"))
  add_index_flags(p)
  add(names=("num_index_shards", "block_rows", "threads"),
      kwargs={"num_index_shards": {"type": flags.positive_int},
              "block_rows": {"type": flags.positive_int}})
  add(names=("allow_unchecked_vectors",))
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> index.IndexConfig:
  args = build_parser().parse_args(None if argv is None else list(argv))
  return dataclass_flags.config_from(args, index.IndexConfig, index=index_config(args))


def main(argv: Iterable[str] | None = None) -> None:
  result = index.run(parse(argv))
  print(f"indexed {result.vectors} vectors in {result.seconds:.1f} s -> "
        f"{', '.join(result.paths)}")
