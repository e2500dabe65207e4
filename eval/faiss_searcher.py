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

A search under a restriction (twotower.core.searching.Restriction: the ids it may return)
puts an `IDSelector` in those parameters (`IDSelectorBatch` of the allowed ids, or
`IDSelectorNot` of the excluded ones), so every index type skips what the restriction leaves
out while it searches: flat scores exactly the allowed documents; IVF (flat or PQ, fast-scan
included) scans its nprobe lists for them, visiting more lists (nprobe x 4 at a time, up to
all) for queries that found fewer than k; HNSW walks its graph through them with its beam
(efSearch) widened by 1 / selectivity, so that it holds as many allowed documents as it would
unfiltered; a re-ranked index
re-ranks the allowed candidates. When the restriction allows at most `exact_max` documents
(EXACT_SCORING_MAX) they are scored exactly instead: their float32 vectors gathered (from the
re-rank vectors beside the index, or a flat or HNSW index's own storage) and multiplied with
the queries, the true top k at a cost that shrinks with the filter, where a graph or a few
inverted lists hold too few allowed documents to find the best (an IVF index without float
vectors visits every list instead, exact over its codes).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
from typing import Optional, Sequence

import faiss
import numpy as np

from twotower.core import files as tio
from twotower.core.searching import Restriction
from twotower.eval import faiss_index
from twotower.eval import rerank as rr

logger = logging.getLogger(__name__)

#: A restriction allowing at most this many documents is scored exactly (their vectors
#: gathered) rather than searched through the index; benchmarks/filtered_search.py measured it.
EXACT_SCORING_MAX = 16_384
#: Selectors kept for reuse (one per restriction seen recently).
SELECTOR_CACHE = 32


@dataclasses.dataclass(frozen=True)
class Part:
  """One index file and, if written beside it, its mapped vectors."""
  path: str
  index: faiss.Index
  vectors: Optional[rr.MappedVectors]


class _StoredVectors:
  """The float32 vectors a flat or HNSW index behind an IDMap stores, looked up by id (a view
  of the index's own storage; the id -> row order is computed once, 8 bytes a vector)."""

  def __init__(self, index: faiss.Index):
    idmap = faiss.downcast_index(index)
    inner = faiss.downcast_index(idmap.index)
    flat = inner if isinstance(inner, faiss.IndexFlat) else faiss.downcast_index(inner.storage)
    n, d = flat.ntotal, flat.d
    self.vectors = faiss.rev_swig_ptr(flat.get_xb(), n * d).reshape(n, d) if n else \
        np.zeros((0, d), np.float32)
    ids = faiss.vector_to_array(idmap.id_map).astype(np.int64, copy=False)
    self._order = np.argsort(ids, kind="stable")
    self._sorted = ids[self._order]

  @property
  def ids(self) -> np.ndarray:
    """The ids the index holds, sorted."""
    return self._sorted

  @classmethod
  def of(cls, index: faiss.Index) -> Optional["_StoredVectors"]:
    """For an IDMap over a flat index or an HNSW graph over flat storage; else None."""
    outer = faiss.downcast_index(index)
    if not isinstance(outer, (faiss.IndexIDMap, faiss.IndexIDMap2)):
      return None
    inner = faiss.downcast_index(outer.index)
    if isinstance(inner, faiss.IndexFlat) or (
        isinstance(inner, faiss.IndexHNSW)
        and isinstance(faiss.downcast_index(inner.storage), faiss.IndexFlat)):
      return cls(index)
    return None

  def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, found) like rerank.MappedVectors.lookup."""
    if not len(self._sorted):
      return np.zeros(len(ids), np.int64), np.zeros(len(ids), bool)
    at = np.minimum(np.searchsorted(self._sorted, ids), len(self._sorted) - 1)
    found = self._sorted[at] == ids
    return self._order[at], found


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
    self.exact_max = EXACT_SCORING_MAX
    self._selectors: collections.OrderedDict = collections.OrderedDict()
    self._stored: dict[int, Optional[_StoredVectors]] = {}
    self._lock = threading.Lock()
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
             ef_search: Optional[int] = None, rerank: Optional[int] = None,
             restriction: Optional[Restriction] = None) -> tuple[np.ndarray, np.ndarray]:
    queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
    if queries.shape[1] != self.d:
      raise ValueError(f"{self.what}: query dim {queries.shape[1]} != index dim {self.d}")
    if k < 1:
      raise ValueError(f"{self.what}: k must be >= 1, got {k}")
    r = self.rerank if rerank is None else rerank
    if r and not self.can_rerank:
      missing = next(p.path for p in self.parts if p.vectors is None)
      raise ValueError(f"{missing}: no {rr.sidecar_paths(missing)[0]} to re-rank from; build "
                       "the index with --type ivfpq_rerank or --store_vectors, or search "
                       "with rerank 0")
    if restriction is not None:
      return self._restricted(queries, k, nprobe, ef_search, r, restriction)
    params = faiss_index.search_params(self.parts[0].index, self.what, nprobe, ef_search)
    if not r:
      index = self._shards if self._shards is not None else self.parts[0].index
      return index.search(queries, k, params=params)
    results = []
    for p in self.parts:
      _, candidates = p.index.search(queries, k * r, params=params)
      results.append(rr.rerank(queries, candidates, p.vectors, k))
    return rr.merge_topk(results, k)

  # -------------------------------------------------------------------------------------------
  # Under a restriction.
  # -------------------------------------------------------------------------------------------

  @property
  def can_score_exactly(self) -> bool:
    """Whether every part can give the float32 vectors of any of its documents."""
    return all(p.vectors is not None or self._stored_vectors(n) is not None
               for n, p in enumerate(self.parts))

  def _stored_vectors(self, n: int) -> Optional[_StoredVectors]:
    with self._lock:
      if n not in self._stored:
        self._stored[n] = _StoredVectors.of(self.parts[n].index)
      return self._stored[n]

  def _restricted(self, queries: np.ndarray, k: int, nprobe: Optional[int],
                  ef_search: Optional[int], r: int, restriction: Restriction
                  ) -> tuple[np.ndarray, np.ndarray]:
    faiss_index.search_params(self.parts[0].index, self.what, nprobe, ef_search)  # checks
    allowed = restriction.allowed_count(self.ntotal)
    if restriction.include is not None and len(restriction.include) <= self.exact_max:
      if self.can_score_exactly:
        return self.score_exactly(queries, restriction.include, k)
      # IVF without float vectors: every list visited, exact over what the codes hold.
      nprobe = max(faiss.extract_index_ivf(p.index).nlist for p in self.parts)
    selector = self._selector(restriction)
    results = []
    for p in self.parts:  # one by one: IndexIDMap swaps params.sel in place while it searches
      results.append(self._search_part(p, queries, k, r, nprobe, ef_search, selector,
                                       min(k, allowed), allowed))
    scores, ids = rr.merge_topk(results, k)
    short = np.flatnonzero((ids >= 0).sum(axis=1) < min(k, allowed))
    if short.size and self.can_score_exactly:
      # A graph (HNSW) may not reach k allowed documents: score those queries exactly.
      scores[short], ids[short] = self.score_exactly(queries[short],
                                                     self._allowed_ids(restriction), k)
    return scores, ids

  def _allowed_ids(self, restriction: Restriction) -> np.ndarray:
    """The ids a restriction allows among those the index holds (exact scoring only)."""
    if restriction.include is not None:
      return restriction.include
    held = []
    for n, p in enumerate(self.parts):
      if p.vectors is not None:
        held.append(np.arange(len(p.vectors.vectors), dtype=np.int64) if p.vectors.ids is None
                    else np.asarray(p.vectors.ids))
      else:
        held.append(self._stored_vectors(n).ids)
    ids = np.concatenate(held)
    return ids[restriction.allows(ids)]

  def _search_part(self, p: Part, queries: np.ndarray, k: int, r: int,
                   nprobe: Optional[int], ef_search: Optional[int], selector,
                   wanted: int, allowed: int) -> tuple[np.ndarray, np.ndarray]:
    depth = k * r if r else k
    ivf = faiss.try_extract_index_ivf(p.index)
    probe = nprobe or (ivf.nprobe if ivf is not None else None)
    inner = faiss_index._unwrap(p.index)  # pylint: disable=protected-access
    if isinstance(inner, faiss.IndexHNSW):
      # The beam holds every node it walks, allowed or not: widened by 1 / selectivity it
      # holds about as many allowed ones as ef_search unfiltered (10 % allowed, 10 x ef).
      ef = ef_search or inner.hnsw.efSearch
      share = max(allowed, 1) / max(self.ntotal, 1)
      ef_search = int(min(max(ef, np.ceil(ef / share)), max(self.ntotal, ef)))
    scores, ids = p.index.search(queries, depth, params=_selector_params(
        p.index, selector, probe, ef_search))
    if ivf is not None:
      # Lists scanned hold too few allowed documents: visit more for the queries left short.
      while probe < ivf.nlist:
        short = np.flatnonzero((ids >= 0).sum(axis=1) < min(depth, wanted))
        if not short.size:
          break
        probe = min(ivf.nlist, probe * 4)
        scores[short], ids[short] = p.index.search(
            queries[short], depth, params=_selector_params(p.index, selector, probe, None))
    if r:
      return rr.rerank(queries, ids, p.vectors, k)
    return scores, ids

  def _selector(self, restriction: Restriction):
    """The IDSelector of a restriction, built once (IDSelectorBatch hashes every id)."""
    with self._lock:
      if restriction.key in self._selectors:
        self._selectors.move_to_end(restriction.key)
        return self._selectors[restriction.key]
    selector = id_selector(restriction)
    with self._lock:
      self._selectors[restriction.key] = selector
      while len(self._selectors) > SELECTOR_CACHE:
        self._selectors.popitem(last=False)
    return selector

  def score_exactly(self, queries: np.ndarray, ids: np.ndarray, k: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The exact inner-product top k of each query among the documents `ids` (those the
    index does not hold are left out), from their float32 vectors. Ties: lower id first."""
    queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
    found_ids, blocks = [], []
    for n, p in enumerate(self.parts):
      source = p.vectors if p.vectors is not None else self._stored_vectors(n)
      if source is None:
        raise ValueError(f"{p.path}: no float32 vectors to score exactly from")
      rows, found = source.lookup(np.asarray(ids, dtype=np.int64))
      found_ids.append(np.asarray(ids, dtype=np.int64)[found])
      blocks.append(np.asarray(source.vectors[rows[found]], dtype=np.float32))
    doc_ids = np.concatenate(found_ids)
    vectors = np.ascontiguousarray(np.concatenate(blocks)) if blocks else \
        np.zeros((0, self.d), np.float32)
    return exact_topk(queries, vectors, doc_ids, k)


def exact_topk(queries: np.ndarray, vectors: np.ndarray, doc_ids: np.ndarray, k: int
               ) -> tuple[np.ndarray, np.ndarray]:
  """(scores float32[nq, k], ids int64[nq, k]): the top k of `queries @ vectors.T` with
  `doc_ids` as labels, best first; -inf / -1 past the documents. Through `faiss.knn`, FAISS's
  own exhaustive kernels on its own threads (numpy's BLAS threads cost milliseconds a call
  on a busy machine, measured: 8 ms against 0.1 ms for one query and 10k vectors of d 64)."""
  nq = len(queries)
  out_s = np.full((nq, k), -np.inf, np.float32)
  out_i = np.full((nq, k), -1, np.int64)
  if not len(doc_ids):
    return out_s, out_i
  top = min(k, len(doc_ids))
  scores, rows = faiss.knn(np.ascontiguousarray(queries, np.float32),
                           np.ascontiguousarray(vectors, np.float32), top,
                           metric=faiss.METRIC_INNER_PRODUCT)
  out_s[:, :top] = scores
  out_i[:, :top] = np.where(rows >= 0, np.asarray(doc_ids)[np.maximum(rows, 0)], -1)
  return out_s, out_i


def id_selector(restriction: Restriction):
  """A FAISS IDSelector for a restriction (the sub-selectors it wraps are kept alive on it)."""
  selector = None
  if restriction.include is not None:
    selector = faiss.IDSelectorBatch(np.ascontiguousarray(restriction.include))
  if restriction.exclude is not None:
    excluded = faiss.IDSelectorBatch(np.ascontiguousarray(restriction.exclude))
    negated = faiss.IDSelectorNot(excluded)
    negated.referenced = [excluded]  # SWIG keeps no reference of its own
    if selector is None:
      selector = negated
    else:
      both = faiss.IDSelectorAnd(selector, negated)
      both.referenced = [selector, negated]
      selector = both
  return selector


def _selector_params(index: faiss.Index, selector, nprobe: Optional[int],
                     ef_search: Optional[int]) -> faiss.SearchParameters:
  """Search parameters carrying `selector`, with the index's own nprobe / efSearch unless
  given (FAISS takes a parameter object's defaults, nprobe 1 and efSearch 16, over the
  index's settings). A new object per call: IndexIDMap changes its `sel` while it searches."""
  ivf = faiss.try_extract_index_ivf(index)
  inner = faiss_index._unwrap(index)  # pylint: disable=protected-access
  if ivf is not None:
    params = faiss.SearchParametersIVF()
    params.nprobe = int(nprobe or ivf.nprobe)
    params.max_codes = ivf.max_codes
  elif isinstance(inner, faiss.IndexHNSW):
    params = faiss.SearchParametersHNSW()
    params.efSearch = int(ef_search or inner.hnsw.efSearch)
  else:
    params = faiss.SearchParameters()
  params.sel = selector
  params.referenced = [selector]
  return params


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
