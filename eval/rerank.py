"""Exact re-ranking from memory-mapped float32 vectors, and the searcher callers load.

A compressed index (IVF-PQ, fast-scan PQ) finds the right neighbourhood but its codes rank
within it coarsely: on 1M clustered vectors IVF-PQ's Recall@100 stops at 0.6-0.7 of flat
whatever nprobe is. Re-scoring its top `k * rerank` candidates by the exact inner product
fixes the order, and needs the float vectors of those candidates only. FAISS's own
`IndexRefineFlat` keeps every float vector in RAM (4·d bytes each, the cost compression was
meant to remove), so the vectors live instead in a `.npy` file beside the index, memory-mapped:
resident memory is the codes + coarse quantizer + the pages the candidates touch, and the
kernel can drop those clean pages again under pressure.

Files beside `index.faiss` (or beside each index shard `index-SSSSS-of-NNNNN.faiss`):

  index.vectors.npy   float32[n, d], row i = the vector of the i-th smallest id of the index
  index.ids.npy       int64[n], those ids ascending; absent when the ids are 0..n-1 (row = id)

Callers (the batch `twotower search`, a query service) use `load_searcher(paths).search(...)`.
"""

from __future__ import annotations

import dataclasses
import logging
import mmap as mmap_module
import os
import tempfile
from typing import Callable, Iterator, Optional, Sequence

import faiss
import numpy as np

logger = logging.getLogger(__name__)

#: Candidates re-ranked per hit wanted (k * DEFAULT_RERANK), chosen from the 1M-vector
#: measurement in docs/guide/index_search.md.
DEFAULT_RERANK = 4
#: Queries re-scored together: bounds the score block (chunk * k * rerank floats).
RERANK_CHUNK = 1024

Blocks = Iterator[tuple[np.ndarray, np.ndarray]]  # (ids int64[b], vectors float32[b, d])


def sidecar_paths(index_path: str) -> tuple[str, str]:
  """(vectors .npy, ids .npy) written beside an index file."""
  stem = index_path[:-len(".faiss")] if index_path.endswith(".faiss") else index_path
  return f"{stem}.vectors.npy", f"{stem}.ids.npy"


# ---------------------------------------------------------------------------------------------
# Writing the vectors beside an index.
# ---------------------------------------------------------------------------------------------


def _atomic_npy(path: str, shape: tuple[int, ...], dtype) -> tuple[np.memmap, str]:
  fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)) or ".",
                             prefix=".tmp-", suffix=".npy")
  os.close(fd)
  return np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape), tmp


def write_vectors(index_path: str, make_blocks: Callable[[], Blocks], d: int) -> int:
  """Writes the vectors of `make_blocks()` beside `index_path` in id order; returns n.

  Two passes over the blocks (`make_blocks` is called twice): the ids first (8 bytes a
  vector, to learn each vector's row), then the vectors, each written straight to its row of
  the memory-mapped file. Memory: the ids and one block, never all vectors."""
  from twotower.core import files as tio  # pylint: disable=import-outside-toplevel
  if not tio.is_local(index_path):
    raise ValueError(f"{index_path}: re-rank vectors are memory-mapped, so the index must be "
                     "a local file")
  vec_path, ids_path = sidecar_paths(index_path)
  parts = []
  for ids, _ in make_blocks():
    if ids.dtype != np.int64:
      raise ValueError(f"{index_path}: document ids must be int64, got {ids.dtype}")
    parts.append(ids)
  ids = np.concatenate(parts) if parts else np.zeros(0, np.int64)
  sorted_ids = np.sort(ids)
  del ids, parts
  if len(sorted_ids) and (dup := np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1])).size:
    raise ValueError(f"{index_path}: id {sorted_ids[dup[0]]} occurs more than once; re-rank "
                     "vectors need unique ids")
  n = len(sorted_ids)
  out, tmp = _atomic_npy(vec_path, (n, d), np.float32)
  try:
    for ids, x in make_blocks():
      out[np.searchsorted(sorted_ids, ids)] = x
    out.flush()
    del out
    os.replace(tmp, vec_path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  dense = n == 0 or (sorted_ids[0] == 0 and sorted_ids[-1] == n - 1)
  if dense:  # row = id: no map (and no stale one from an earlier build)
    if os.path.exists(ids_path):
      os.remove(ids_path)
  else:
    out, tmp = _atomic_npy(ids_path, (n,), np.int64)
    out[:] = sorted_ids
    out.flush()
    del out
    os.replace(tmp, ids_path)
  logger.info("re-rank vectors: %d x %d float32 -> %s%s", n, d, vec_path,
              "" if dense else f" (+ id map {ids_path})")
  return n


# ---------------------------------------------------------------------------------------------
# Reading them back, mapped.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MappedVectors:
  """Float32 vectors of one index (file), memory-mapped, looked up by document id."""
  path: str
  vectors: np.ndarray               # float32[n, d] memmap, rows in id order
  ids: Optional[np.ndarray]         # int64[n] ascending memmap; None: row = id

  def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows int64 like ids, found bool like ids): FAISS's -1 fillers are not found."""
    n = len(self.vectors)
    if self.ids is None:
      found = (ids >= 0) & (ids < n)
      return np.where(found, ids, 0), found
    rows = np.minimum(np.searchsorted(self.ids, ids), n - 1)
    return rows, (self.ids[rows] == ids) & (ids >= 0)


def open_vectors(index_path: str) -> Optional[MappedVectors]:
  """The vectors beside `index_path`, mapped read-only; None when there are none."""
  vec_path, ids_path = sidecar_paths(index_path)
  if not os.path.exists(vec_path):
    return None
  vectors = np.load(vec_path, mmap_mode="r")
  if vectors.dtype != np.float32 or vectors.ndim != 2:
    raise ValueError(f"{vec_path}: expected float32[n, d], got {vectors.dtype}{vectors.shape}")
  # Candidates are scattered rows: without this each page fault reads ahead ~128 KiB of
  # neighbours nobody asked for, into resident memory.
  if hasattr(vectors, "_mmap") and hasattr(mmap_module, "MADV_RANDOM"):
    vectors._mmap.madvise(mmap_module.MADV_RANDOM)  # pylint: disable=protected-access
  ids = None
  if os.path.exists(ids_path):
    ids = np.load(ids_path, mmap_mode="r")
    if ids.dtype != np.int64 or ids.shape != (len(vectors),):
      raise ValueError(f"{ids_path}: expected int64[{len(vectors)}] (one id per row of "
                       f"{vec_path}), got {ids.dtype}{ids.shape}")
  return MappedVectors(vec_path, vectors, ids)


def rerank(queries: np.ndarray, candidates: np.ndarray, vectors: MappedVectors, k: int,
           chunk: int = RERANK_CHUNK) -> tuple[np.ndarray, np.ndarray]:
  """Exact inner-product top-k of each query among its candidates.

  queries float32[nq, d]; candidates int64[nq, c] (ids, -1 for none). Returns
  (scores float32[nq, k], ids int64[nq, k]), best first; -inf / -1 where fewer than k
  candidates exist. A candidate id missing from the vectors file is an error (the file was
  not written from this index)."""
  queries = np.ascontiguousarray(queries, dtype=np.float32)
  nq, c = candidates.shape
  d = vectors.vectors.shape[1]
  scores = np.full((nq, k), -np.inf, np.float32)
  ids = np.full((nq, k), -1, np.int64)
  top = min(k, c)
  base = faiss.swig_ptr(vectors.vectors)
  for i in range(0, nq, chunk):
    cand = candidates[i:i + chunk]
    rows, found = vectors.lookup(cand)
    missing = ~found & (cand >= 0)
    if missing.any():
      raise ValueError(f"{vectors.path}: no vector for id {cand[missing][0]} returned by the "
                       "index; the vectors file was written for another index")
    rows = np.ascontiguousarray(np.where(found, rows, -1), dtype=np.int64)
    s = np.full(cand.shape, -np.inf, np.float32)
    # FAISS reads each candidate's row in place from the mapped file (no gathered copy of
    # chunk x c x d floats) and skips the rows marked -1.
    faiss.fvec_inner_products_by_idx(faiss.swig_ptr(s), faiss.swig_ptr(queries[i:i + chunk]),
                                     base, faiss.swig_ptr(rows), d, len(cand), c)
    best = (np.argpartition(-s, top - 1, axis=1)[:, :top] if top < c
            else np.broadcast_to(np.arange(c), s.shape))
    best_s = np.take_along_axis(s, best, 1)
    order = np.argsort(-best_s, axis=1, kind="stable")
    scores[i:i + chunk, :top] = np.take_along_axis(best_s, order, 1)
    chosen = np.take_along_axis(np.take_along_axis(cand, best, 1), order, 1)
    ids[i:i + chunk, :top] = np.where(np.isfinite(scores[i:i + chunk, :top]), chosen, -1)
  return scores, ids


def merge_topk(parts: Sequence[tuple[np.ndarray, np.ndarray]], k: int
               ) -> tuple[np.ndarray, np.ndarray]:
  """Top-k by score over several (scores, ids) results of the same queries (index shards)."""
  if len(parts) == 1:
    return parts[0]
  heap = faiss.ResultHeap(len(parts[0][0]), k, keep_max=True)
  for s, i in parts:
    heap.add_result(np.ascontiguousarray(s, np.float32), np.ascontiguousarray(i, np.int64))
  heap.finalize()
  return heap.D, heap.I
