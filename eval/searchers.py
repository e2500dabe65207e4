"""The dense searcher and the fusion of two searchers, beside BM25's (twotower.core.lucene.
Bm25Searcher): the three objects behind every search of a retriever bundle, `twotower query`,
`twotower serve`, and the batch stages that are their reference (`twotower search` searches
through `DenseSearcher`, `twotower bm25` through `Bm25Searcher`, `twotower fuse` and
`FusedSearcher` through one `eval.fusion.interpolate`).

    dense = DenseSearcher(faiss_searcher.load_searcher("bundle/index.faiss"), encoder)
    bm25 = lucene.Bm25Searcher("bundle/lucene", k1, b)
    hybrid = FusedSearcher(bm25, dense, weight=0.4, depth=100)   # Pyserini's HybridSearcher
    hybrid.search(Queries(("who wrote hamlet?",)), k=10,
                  params=SearchParams(restriction=Restriction.including(ids)))

A fused searcher asks each side for `max(k, depth)` hits under the same parameters (the
restriction included: fusion over the filtered lists), normalises each list min-max and
interpolates with `weight` on the first (`twotower fuse --run FIRST SECOND --weight W`).
Either side may be any searcher, a fused one included.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from twotower.core.contracts import Ranked
from twotower.core.searching import Queries, SearchParams, Searcher, cut
from twotower.eval import fusion

if TYPE_CHECKING:  # FAISS loads with the first index, not with this module
  from twotower.eval import faiss_searcher as searcher_lib

logger = logging.getLogger(__name__)


class DenseSearcher:
  """A query tower (anything with `encode(texts) -> float32[n, d]` and `dim`; None for a
  caller that brings vectors, as `twotower search` does) over a FAISS index
  (eval.faiss_searcher.Searcher: per-call nprobe / ef_search, exact re-rank, restrictions)."""
  name = "dense"

  def __init__(self, index: "searcher_lib.Searcher", encoder: Any = None, model_key: str = ""):
    self.index = index
    self.encoder = encoder
    #: Names the model whose vectors `Queries.vectors` holds for this searcher.
    self.model_key = model_key or f"dense-{id(self)}"

  @property
  def size(self) -> int:
    return int(self.index.ntotal)

  def check(self, params: SearchParams) -> None:
    self.index.check_params(params.nprobe, params.ef_search)

  def embed(self, queries: Queries) -> Queries:
    """`queries` with this searcher's query vectors (one query-tower call; kept in
    `queries.vectors`, so every later search of them, a fused one included, reuses them)."""
    if self.model_key not in queries.vectors:
      if self.encoder is None:
        raise ValueError("this dense searcher has no query tower: give the query vectors")
      queries.vectors[self.model_key] = np.ascontiguousarray(
          self.encoder.encode(list(queries.texts)), dtype=np.float32)
    return queries

  def embed_rows(self, queries: Queries, rows: Sequence[int]) -> Queries:
    """`embed` for the queries at `rows` only (a micro-batch whose BM25 requests need no
    query tower); the other rows' vectors are NaN, which no search of them may read."""
    if self.model_key in queries.vectors or not rows:
      return queries
    rows = sorted(set(rows))
    vectors = np.full((len(queries), self.index.d), np.nan, np.float32)
    vectors[rows] = self.encoder.encode([queries.texts[r] for r in rows])
    queries.vectors[self.model_key] = vectors
    return queries

  def search(self, queries: Queries | Sequence[str], k: int,
             params: SearchParams = SearchParams()) -> list[Ranked]:
    queries = self.embed(Queries.of(queries))
    if not len(queries):
      return []
    scores, ids = self.search_vectors(queries.vectors[self.model_key], k, params)
    return [to_ranked(s, i) for s, i in zip(scores, ids)]

  def search_vectors(self, vectors: np.ndarray, k: int, params: SearchParams = SearchParams()
                     ) -> tuple[np.ndarray, np.ndarray]:
    """FAISS's arrays for query vectors: scores float32[n, k'], ids int64[n, k'] with -1
    past the hits; k' = min(k, the documents), so that k beyond the corpus asks FAISS for no
    fillers."""
    return self.index.search(vectors, max(1, min(k, self.size)), nprobe=params.nprobe,
                             ef_search=params.ef_search, restriction=params.restriction)

  def close(self) -> None:
    pass


class FusedSearcher:
  """Two searchers as one (see the module docstring): `first` weighs `weight`, `second`
  `1 - weight`, each side `depth` deep (or k, if deeper)."""
  name = "hybrid"

  def __init__(self, first: Searcher, second: Searcher, weight: float, depth: int):
    if not 0.0 <= weight <= 1.0:
      raise ValueError(f"interpolation weight {weight} is not in [0, 1]")
    if depth < 1:
      raise ValueError(f"depth must be >= 1, got {depth}")
    self.first, self.second = first, second
    self.weight, self.depth = float(weight), int(depth)

  def check(self, params: SearchParams) -> None:
    self.first.check(params)
    self.second.check(params)

  def side_depth(self, k: int) -> int:
    return max(k, self.depth)

  def search(self, queries: Queries | Sequence[str], k: int,
             params: SearchParams = SearchParams()) -> list[Ranked]:
    queries = Queries.of(queries)
    depth = self.side_depth(k)
    first = self.first.search(queries, depth, params)
    second = self.second.search(queries, depth, params)
    return [self.fuse(a, b, k) for a, b in zip(first, second)]

  def fuse(self, first: Ranked, second: Ranked, k: int) -> Ranked:
    """One query's two lists fused, top `k`: `twotower fuse`'s interpolation of them."""
    fused = fusion.interpolate({"q": first}, {"q": second}, self.weight, self.side_depth(k))
    return cut(fused["q"], k)

  def close(self) -> None:
    pass


def to_ranked(scores: np.ndarray, ids: np.ndarray) -> Ranked:
  """One query's FAISS row -> Ranked; the -1 fillers dropped."""
  keep = np.flatnonzero(ids >= 0)
  return Ranked(tuple(int(v) for v in ids[keep]), tuple(float(v) for v in scores[keep]))


def searchers_of(searcher: Searcher) -> list[Searcher]:
  """`searcher` and, for a fused one, its sides' searchers (depth first)."""
  if isinstance(searcher, FusedSearcher):
    return [searcher, *searchers_of(searcher.first), *searchers_of(searcher.second)]
  return [searcher]


def dense_of(searcher: Searcher) -> Optional[DenseSearcher]:
  """The first dense searcher inside `searcher` (itself, or a side of a fused one)."""
  return next((s for s in searchers_of(searcher) if isinstance(s, DenseSearcher)), None)
