"""The one searcher interface: a batch of queries, k and this call's parameters in, one ranked
list of (document id, score) per query out. Dense (eval.searchers.DenseSearcher: a query
tower + FAISS), BM25 (twotower.core.lucene.Bm25Searcher: Lucene) and a fusion of any two
(eval.searchers.FusedSearcher, as Pyserini's `HybridSearcher(dense, sparse)`) implement it;
a retriever bundle (deploy.serving), `twotower query`, `serve` and the batch stages (`twotower
search`, `twotower bm25`) search through these objects, so the batch path is the reference the
service must equal by construction.

    queries = Queries(("who wrote hamlet?", "when was the castle built?"))
    params = SearchParams(nprobe=32, restriction=Restriction.including([3, 17, 40]))
    ranked = searcher.search(queries, k=10, params=params)   # [Ranked, Ranked]

A `Restriction` is the only filter a searcher knows: which document ids a search may return
(an include list, an exclude list, or both). Metadata filters (fields, a section prefix) are
resolved into one by the bundle that holds the metadata (deploy.serving.doc_filter); a search
under a restriction returns the true top k among the documents it allows, as far as the index
can (FAISS: IDSelectors in the search parameters, exact scoring of the allowed documents when
they are few; Lucene: a filter clause).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Iterable, Optional, Protocol, Sequence

import numpy as np

from twotower.core.contracts import Ranked


def _sorted_ids(ids: Iterable[int] | np.ndarray) -> np.ndarray:
  array = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids, dtype=np.int64)
  if array.ndim != 1 or not (array.flags.writeable is False and
                             (len(array) < 2 or bool(np.all(array[1:] > array[:-1])))):
    array = np.unique(array)  # (a read-only sorted array is one of ours: kept as it is)
    array.setflags(write=False)
  return array


@dataclasses.dataclass(frozen=True, eq=False)
class Restriction:
  """The document ids a search may return: `include` (None: every document) minus `exclude`
  (None: none). Both are sorted, unique, read-only int64 arrays. Equal restrictions have equal
  `key`s (a digest of both lists), which is what equality and hashing use: requests that share
  a filter share one search call (the server's micro-batcher), and searchers cache what they
  build from one (FAISS selectors, Lucene's filter query) by it."""
  include: Optional[np.ndarray] = None
  exclude: Optional[np.ndarray] = None
  key: str = ""

  def __post_init__(self):
    include = None if self.include is None else _sorted_ids(self.include)
    exclude = None if self.exclude is None else _sorted_ids(self.exclude)
    if include is not None and exclude is not None:  # one list says it all
      include, exclude = _sorted_ids(np.setdiff1d(include, exclude, assume_unique=True)), None
    object.__setattr__(self, "include", include)
    object.__setattr__(self, "exclude", exclude if exclude is None or exclude.size else None)
    digest = hashlib.sha256()
    for name, ids in (("include", self.include), ("exclude", self.exclude)):
      digest.update(name.encode() + (b"-" if ids is None else ids.tobytes()) + b"\0")
    object.__setattr__(self, "key", digest.hexdigest())

  @classmethod
  def including(cls, ids: Iterable[int] | np.ndarray,
                exclude: Iterable[int] | np.ndarray | None = None) -> "Restriction":
    return cls(_sorted_ids(ids), None if exclude is None else _sorted_ids(exclude))

  @classmethod
  def excluding(cls, ids: Iterable[int] | np.ndarray) -> "Restriction":
    return cls(None, _sorted_ids(ids))

  def __eq__(self, other) -> bool:
    return isinstance(other, Restriction) and other.key == self.key

  def __hash__(self) -> int:
    return hash(self.key)

  def also_excluding(self, ids: Optional[np.ndarray]) -> "Restriction":
    """This restriction with `ids` excluded too (a bundle's tombstones)."""
    if ids is None or not len(ids):
      return self
    if self.include is not None:
      return Restriction(self.include, ids)
    return Restriction(None, ids if self.exclude is None else np.concatenate([self.exclude, ids]))

  def allows(self, ids: np.ndarray) -> np.ndarray:
    """bool[len(ids)]: which of `ids` the restriction lets through."""
    ids = np.asarray(ids, dtype=np.int64)
    keep = np.ones(ids.shape, dtype=bool)
    if self.include is not None:
      keep &= np.isin(ids, self.include)
    if self.exclude is not None:
      keep &= ~np.isin(ids, self.exclude)
    return keep

  def allowed_count(self, total: int) -> int:
    """How many documents of a corpus of `total` it allows (exclusions assumed present)."""
    if self.include is not None:
      return int(len(self.include))
    return int(total - (0 if self.exclude is None else len(self.exclude)))

  def describe(self) -> str:
    parts = []
    if self.include is not None:
      parts.append(f"{len(self.include)} ids included")
    if self.exclude is not None:
      parts.append(f"{len(self.exclude)} excluded")
    return ", ".join(parts) or "no restriction"


@dataclasses.dataclass(frozen=True)
class SearchParams:
  """Per-call parameters. A searcher takes what applies to it and leaves the rest (BM25 has
  no nprobe); a parameter its index cannot use at all is refused by its `check`."""
  nprobe: Optional[int] = None         # IVF lists visited (dense)
  ef_search: Optional[int] = None      # HNSW beam width (dense)
  restriction: Optional[Restriction] = None  # the ids a search may return (every side)

  def with_restriction(self, restriction: Optional[Restriction]) -> "SearchParams":
    return dataclasses.replace(self, restriction=restriction)


@dataclasses.dataclass(frozen=True, eq=False)
class Queries:
  """A batch of query texts, and their embeddings by the model that made them (so that a
  fused searcher's dense side, and every request of a micro-batch, share one query-tower
  call: `DenseSearcher.embed` fills `vectors`)."""
  texts: tuple[str, ...]
  vectors: dict = dataclasses.field(default_factory=dict)  # model key -> float32[n, d]

  def __len__(self) -> int:
    return len(self.texts)

  def take(self, rows: Sequence[int]) -> "Queries":
    rows = list(rows)
    return Queries(tuple(self.texts[r] for r in rows),
                   {key: v[rows] for key, v in self.vectors.items()})

  @classmethod
  def of(cls, queries: "Queries | Sequence[str] | str") -> "Queries":
    if isinstance(queries, Queries):
      return queries
    if isinstance(queries, str):
      return cls((queries,))
    return cls(tuple(queries))


class Searcher(Protocol):
  """What every searcher implements (see the module docstring)."""
  name: str

  def search(self, queries: Queries, k: int, params: SearchParams = SearchParams()
             ) -> list[Ranked]:
    """Top `k` per query, best first (fewer when fewer documents match)."""

  def check(self, params: SearchParams) -> None:
    """Raises ValueError for parameters this searcher cannot take (before any search)."""

  def close(self) -> None:
    """Releases what the searcher holds (a Lucene reader)."""


def cut(ranked: Ranked, k: int) -> Ranked:
  return Ranked(ranked.candidate_ids[:k], ranked.scores[:k])
