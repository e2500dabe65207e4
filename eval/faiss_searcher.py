"""A loaded index (one file or several shards) with per-call search parameters and, when its
vectors were written beside it, exact re-ranking: the one entry point for callers.

  from twotower.eval import faiss_searcher
  s = faiss_searcher.load_searcher("run/index.faiss")            # or a shard glob / list
  scores, ids = s.search(queries, k=100, nprobe=32)        # float32[nq, k], int64[nq, k]

`Searcher.search` changes no state of the loaded index: nprobe / efSearch travel with each
call as FAISS `SearchParametersIVF` / `SearchParametersHNSW` (`index.search(..., params=)`),
so concurrent calls with different settings (a query service's requests, each on its own
thread) do not see each other's. FAISS CPU search and the read-only memory-mapped vectors are
safe to share between threads.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional, Sequence

import faiss
import numpy as np

from twotower.core import files as tio
from twotower.eval import faiss_index
from twotower.eval import rerank as rr

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Part:
  """One index file and, if written beside it, its mapped vectors."""
  path: str
  index: faiss.Index
  vectors: Optional[rr.MappedVectors]


class Searcher:
  """Search over one index or several index shards; see the module docstring.

  `search(queries, k, nprobe=None, ef_search=None, rerank=None) -> (scores, ids)`:
    queries  float32[nq, d] (or [d] for one query; still returns [1, k] arrays)
    k        hits per query
    nprobe   IVF lists visited, for this call only (None: the value saved in the index)
    ef_search HNSW beam width, for this call only (None: the index's)
    rerank   r: take the top k*r from the compressed index and re-rank them by the exact inner
             product with the memory-mapped float32 vectors; 0: no re-rank (scores are the
             codes' approximations). None: the loader's `rerank`.
  Returns scores float32[nq, k] (exact inner products when re-ranked) and ids int64[nq, k],
  best first; fewer than k hits are padded with id -1 (score -inf when re-ranked).
  """

  def __init__(self, parts: Sequence[Part], rerank: int = 0, threaded: bool = True):
    if not parts:
      raise ValueError("no index to search")
    self.parts = tuple(parts)
    self.rerank = rerank
    self.d = parts[0].index.d
    self.ntotal = sum(p.index.ntotal for p in parts)
    self.what = parts[0].path if len(parts) == 1 else f"{len(parts)} shards ({parts[0].path}…)"
    # Without re-ranking the shards are served as FAISS serves them (IndexShards: one query
    # to every shard, threads across shards, top-k merged). Re-ranking needs each shard's own
    # vectors, so each shard is searched and re-ranked alone, then the exact lists merged.
    self._shards = None
    if len(parts) > 1:
      self._shards = faiss.IndexShards(self.d, threaded, False)  # keep the shards' own ids
      for p in parts:
        self._shards.add_shard(p.index)

  def check_params(self, nprobe: Optional[int] = None, ef_search: Optional[int] = None,
                   rerank: Optional[int] = None) -> None:
    """Raises ValueError for parameters this index cannot take (before any search: a
    server refuses such a request alone, with this message)."""
    faiss_index.search_params(self.parts[0].index, self.what, nprobe, ef_search)
    if rerank and not self.can_rerank:
      raise ValueError(f"{self.what}: no re-rank vectors beside the index; rerank must be 0")

  @property
  def can_rerank(self) -> bool:
    return all(p.vectors is not None for p in self.parts)

  def search(self, queries: np.ndarray, k: int, nprobe: Optional[int] = None,
             ef_search: Optional[int] = None, rerank: Optional[int] = None
             ) -> tuple[np.ndarray, np.ndarray]:
    queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
    if queries.shape[1] != self.d:
      raise ValueError(f"{self.what}: query dim {queries.shape[1]} != index dim {self.d}")
    if k < 1:
      raise ValueError(f"{self.what}: k must be >= 1, got {k}")
    r = self.rerank if rerank is None else rerank
    params = faiss_index.search_params(self.parts[0].index, self.what, nprobe, ef_search)
    if not r:
      index = self._shards if self._shards is not None else self.parts[0].index
      return index.search(queries, k, params=params)
    if not self.can_rerank:
      missing = next(p.path for p in self.parts if p.vectors is None)
      raise ValueError(f"{missing}: no {rr.sidecar_paths(missing)[0]} to re-rank from; build "
                       "the index with --type ivfpq_rerank or --store_vectors, or search "
                       "with rerank 0")
    results = []
    for p in self.parts:
      _, candidates = p.index.search(queries, k * r, params=params)
      results.append(rr.rerank(queries, candidates, p.vectors, k))
    return rr.merge_topk(results, k)


def load_searcher(paths: str | Sequence[str], mmap: bool = False, rerank: Optional[int] = None,
                  threaded: bool = True) -> Searcher:
  """A `Searcher` over one index file or several shards (a glob, a comma list, or a list).

  mmap: map the index files instead of reading them (faiss_index.read_index_file; an index
  type FAISS cannot map is refused with a ValueError naming the file). The re-rank vectors
  beside an index are always mapped, never read whole.
  rerank: default re-rank factor of `search`; None: DEFAULT_RERANK when every index file has
  its vectors beside it, else 0 (plain search)."""
  if isinstance(paths, str):
    paths = tio.match_files(paths) if any(c in paths for c in "*?,") else [paths]
  if not paths:
    raise ValueError("no index file given")
  parts = []
  for p in paths:
    index = faiss_index.read_index_file(p, mmap)
    faiss_index.check_inner_product(index, p)
    parts.append(Part(p, index, rr.open_vectors(p)))
  if len({p.index.d for p in parts}) > 1:
    raise ValueError(f"{paths[0]}: index shards of different dims "
                     f"{sorted({p.index.d for p in parts})}")
  with_vectors = [p.vectors is not None for p in parts]
  if any(with_vectors) and not all(with_vectors):
    missing = parts[with_vectors.index(False)].path
    raise ValueError(f"{missing}: no {rr.sidecar_paths(missing)[0]}, but other shards have "
                     "their re-rank vectors; rebuild the shards together")
  for p in parts:
    if p.vectors is not None and len(p.vectors.vectors) != p.index.ntotal:
      raise ValueError(f"{p.vectors.path}: {len(p.vectors.vectors)} vectors for an index of "
                       f"{p.index.ntotal} ({p.path})")
    if p.vectors is not None and p.vectors.vectors.shape[1] != p.index.d:
      raise ValueError(f"{p.vectors.path}: dim {p.vectors.vectors.shape[1]} != index dim "
                       f"{p.index.d} ({p.path})")
  if rerank is None:
    rerank = rr.DEFAULT_RERANK if all(with_vectors) else 0
  if rerank < 0:
    raise ValueError(f"{paths[0]}: rerank must be >= 0, got {rerank}")
  searcher = Searcher(parts, rerank, threaded)
  if rerank and not searcher.can_rerank:
    raise ValueError(f"{paths[0]}: no {rr.sidecar_paths(paths[0])[0]} to re-rank from; build "
                     "the index with --type ivfpq_rerank or --store_vectors, or pass rerank 0")
  logger.info("searcher over %s: %d vectors, d %d, re-rank %s", searcher.what, searcher.ntotal,
              searcher.d, f"k x {rerank} from mapped vectors" if rerank else "off")
  return searcher
