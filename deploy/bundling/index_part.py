"""A bundle's FAISS part from vectors in memory, and changed by an update: documents added
(their vectors appended with their ids) and deleted (removed from the index where FAISS can:
flat, IVF, IVF-PQ and fast-scan; an HNSW graph cannot drop a node, so a deleted document's id
becomes a tombstone, bundle_manifest.TOMBSTONES_FILE, that every search filters out). The
re-rank vectors beside a compressed index (eval.rerank) are rewritten to match.

    part = build(spec, ids, vectors, "NEW/index.faiss")               # `bundle --docs`
    part, tombstones = update("NEW/index.faiss", deleted, ids, vectors, tombstones)

An IVF index keeps the coarse centroids (and PQ codebooks) it was trained with: added
documents go to their nearest lists, as a shard built from a template does; a build from
scratch trains on its own corpus, so its lists differ (benchmarks/filtered_search.py states the
recall of both against exact search).
"""

from __future__ import annotations

import logging
import os
from typing import Optional

import faiss
import numpy as np

from twotower.core import fingerprints
from twotower.core.contracts import bundle_manifest
from twotower.core.contracts.bundle_manifest import IdSet
from twotower.eval import faiss_index
from twotower.eval import rerank as rr

logger = logging.getLogger(__name__)


def build(spec: faiss_index.IndexSpec, ids: np.ndarray, vectors: np.ndarray, path: str
          ) -> bundle_manifest.IndexPart:
  """The index of `vectors` (float32[n, d], ids int64[n]) at `path`, as the index stage
  builds one (inner product, the spec resolved for n and d, a seeded training sample)."""
  n, d = vectors.shape
  spec = spec.resolve(n, d)
  index = faiss_index.new_index(spec, d)
  if not index.is_trained:
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
      ivf = faiss.downcast_index(ivf)
      ivf.cp.niter = spec.kmeans_niter
      if hasattr(ivf, "pq"):
        ivf.pq.cp.niter = spec.kmeans_niter
      if getattr(ivf, "do_polysemous_training", False):
        ivf.do_polysemous_training = False
    rng = np.random.default_rng(spec.seed)
    sample = vectors[np.sort(rng.choice(n, min(n, spec.train_size), replace=False))]
    index.train(np.ascontiguousarray(sample))
  if spec.nprobe:
    faiss.extract_index_ivf(index).nprobe = spec.nprobe
  index.add_with_ids(np.ascontiguousarray(vectors, np.float32), np.asarray(ids, np.int64))
  faiss_index.save_index(index, path)
  if spec.store_vectors:
    rr.write_vectors(path, lambda: iter([(np.asarray(ids, np.int64), vectors)]), d)
  return part_of(path, spec.factory_string(), None)


def part_of(path: str, factory: str, tombstones: Optional[np.ndarray]
            ) -> bundle_manifest.IndexPart:
  """The manifest's record of the index at `path`, its ids read back from it (tombstones
  left out: the ids its searches can return)."""
  index = faiss_index.read_index_file(path)
  held = faiss_index.index_ids(index)
  live = held if tombstones is None else np.setdiff1d(held, tombstones)
  return bundle_manifest.IndexPart(
      factory=factory, vectors=int(index.ntotal), dim=int(index.d), metric="inner_product",
      ids=IdSet.of(fingerprints.ids_record(live)),
      tombstones=0 if tombstones is None else int(len(tombstones)))


def update(path: str, deleted: np.ndarray, ids: np.ndarray, vectors: np.ndarray,
           tombstones: Optional[np.ndarray], factory: str
           ) -> tuple[bundle_manifest.IndexPart, Optional[np.ndarray]]:
  """Deletes `deleted` and adds `vectors` with `ids` to the index file at `path` (a copy:
  the parent bundle's file is never opened for writing), rewrites its re-rank vectors, and
  returns the manifest's record with the tombstones (the parent's and any new ones; None
  when there are none)."""
  index = faiss.read_index(path)
  deleted = np.asarray(deleted, np.int64)
  removed = 0
  if deleted.size:
    try:
      removed = index.remove_ids(faiss.IDSelectorBatch(deleted))
    except RuntimeError:  # HNSW: no node can leave the graph
      removed = 0
      tombstones = deleted if tombstones is None else np.union1d(tombstones, deleted)
      logger.info("index %s cannot remove vectors: %d deleted documents become tombstones "
                  "(%d in all), filtered out of every search", factory, len(deleted),
                  len(tombstones))
    else:
      if removed != len(deleted):
        raise ValueError(f"{path}: removed {removed} vectors for {len(deleted)} deleted "
                         "documents")
  if len(ids):
    index.add_with_ids(np.ascontiguousarray(vectors, np.float32), np.asarray(ids, np.int64))
  faiss_index.save_index(index, path)
  vec_path, _ = rr.sidecar_paths(path)
  if os.path.exists(vec_path):
    _rewrite_vectors(path, deleted if removed else np.zeros(0, np.int64), ids, vectors)
  return part_of(path, factory, tombstones), tombstones


def _rewrite_vectors(path: str, deleted: np.ndarray, ids: np.ndarray,
                     vectors: np.ndarray) -> None:
  """The re-rank vectors beside `path` without `deleted`, with `vectors` added."""
  old = rr.open_vectors(path)
  old_ids = (np.arange(len(old.vectors), dtype=np.int64) if old.ids is None
             else np.asarray(old.ids))
  keep = ~np.isin(old_ids, deleted)
  kept_ids = old_ids[keep]
  kept = np.asarray(old.vectors[keep])  # read before the file is replaced
  del old
  all_ids = np.concatenate([kept_ids, np.asarray(ids, np.int64)])
  all_vectors = np.concatenate([kept, np.asarray(vectors, np.float32)])
  rr.write_vectors(path, lambda: iter([(all_ids, all_vectors)]), all_vectors.shape[1])
