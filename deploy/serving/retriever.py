"""Search with a retriever bundle from Python: dense (query tower + FAISS), BM25 (Lucene) or
the hybrid of both, every hit with its text.

    from twotower.deploy.serving import Retriever
    retriever = Retriever.load("runs/demo/bundle")
    for hit in retriever.search("who founded the city?", k=5, mode="hybrid"):
      print(hit.rank, round(hit.score, 3), hit.title, hit.text[:80])
    retriever.search(["q1", "q2"], k=10)          # a batch: one query-tower call
    retriever.search("q", k=100, nprobe=32)       # IVF: per call, the shared index untouched

What a mode does (the batch path each one equals):
  dense   the query tower (SavedModel, or its ONNX copy `query_onnx/` from `bundle --onnx`:
          deploy.serving.query_encoders) embeds every query of the call at once, FAISS returns
          the top k by inner product            == `twotower embed` -> `twotower search`
  bm25    Lucene BM25 with the bundle's k1, b    == `twotower bm25`'s run
  hybrid  both, `hybrid.depth` deep, min-max normalised and interpolated with the bundle's
          weight (eval.fusion.interpolate)     == `twotower fuse --weight W`

Each mode is one searcher object (twotower.core.searching's interface, what the batch stages
search with too): `retriever.searchers["dense"]` an eval.searchers.DenseSearcher, "bm25" a
twotower.core.lucene.Bm25Searcher, "hybrid" an eval.searchers.FusedSearcher of the two (BM25
first, weighing the bundle's weight). A micro-batch embeds all its queries in one query-tower
call and shares it between its dense and hybrid requests.

Per-call FAISS parameters (`nprobe`, `ef_search`) go through FAISS's SearchParameters
objects (eval.faiss_searcher), so concurrent callers with different settings never race on the
shared index (a `ParameterSpace.set_index_parameter` would change it for everyone). A bundle
built with `--type ivfpq_rerank` holds its float32 vectors beside the index: the dense side
then re-ranks the compressed index's top k x 4 exactly, reading them memory-mapped. `k` beyond the corpus
returns every document, never a -1 id; a side that finds nothing leaves the hybrid to the
other.

Loading checks the bundle (contracts.bundle_manifest, the one home of its format): the
manifest's format version and fields, every part present with the sha256 the manifest records
(the default `verify="sha256"`: a same-size file of another bundle is refused; `"size"` checks
sizes only, `"none"` presence only), and that the parts agree (embedding dims, document
counts, and the id sets the build read back from the store, the index and Lucene). A bundle
that fails is refused with a message naming the part.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import threading
import time
from typing import Any, Optional, Sequence, Union

import numpy as np

from twotower.core import contracts
from twotower.core import lucene
from twotower.core import tower_text as texts
from twotower.core.contracts import bundle_manifest
from twotower.core.contracts import bundle_metadata
from twotower.core.contracts.bundle_manifest import BundleError, BundleManifest
from twotower.core.searching import Queries, SearchParams, Searcher
from twotower.deploy.serving import doc_filter as filters_lib
from twotower.deploy.serving import query_encoders
from twotower.deploy.serving import store as store_lib
from twotower.eval import searchers as searchers_lib
from twotower.eval.runs import Ranked, Run

logger = logging.getLogger(__name__)

MODES = ("dense", "bm25", "hybrid")
VERIFY = bundle_manifest.VERIFY
#: Contents, not only sizes: a same-size part of another bundle is caught. It reads every
#: file once (measured in docs/guide/serve.md: small next to loading TensorFlow).
DEFAULT_VERIFY = "sha256"
#: What each `verify` checks of every file the manifest lists.
VERIFY_CHECKS = {"sha256": "present, with its size and sha256", "size": "present, with its size",
                 "none": "present"}
#: Largest query-tower call (the embedding job's default batch, pipelines.embed).
ENCODE_BATCH = query_encoders.ENCODE_BATCH
#: Up to this many BM25 queries are searched one after another, more with batch_search.
LUCENE_SEQUENTIAL = lucene.SEQUENTIAL_QUERIES


@dataclasses.dataclass(frozen=True)
class Hit:
  """One retrieved document: `text` is its passage, `sentence` the ReQA candidate's sentence
  ('' for a passage), `page_id` its Wikipedia page when the bundle knows it."""
  rank: int
  id: int
  score: float
  title: str
  text: str
  sentence: str = ""
  page_id: Optional[int] = None
  section: str = ""  # the passage's section path; the page shows "Title › Section"

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class SearchRequest:
  """One call's worth of work: the unit the server's micro-batcher gathers. `filter` keeps
  the search to the documents it matches (deploy.serving.doc_filter)."""
  queries: tuple[str, ...]
  k: int = 10
  mode: str = "dense"
  nprobe: Optional[int] = None
  ef_search: Optional[int] = None
  filter: Optional[filters_lib.DocFilter] = None

  def __post_init__(self):
    if isinstance(self.filter, dict):
      object.__setattr__(self, "filter", filters_lib.DocFilter.from_json(self.filter))
    if self.mode not in MODES:
      raise ValueError(f"unknown mode {self.mode!r}; expected one of {MODES}")
    if self.k < 1:
      raise ValueError(f"k must be >= 1, got {self.k}")
    for q in self.queries:
      if not isinstance(q, str) or not q.strip():
        raise ValueError("a query is empty")
      if not texts.searchable(q):
        raise ValueError(f"the query {q!r} has no searchable text (only whitespace, control "
                         "or format characters)")

  @property
  def params(self) -> SearchParams:
    return SearchParams(self.nprobe, self.ef_search)


def warn_if_unverified(verify: str, flag: str = "--verify") -> None:
  """The opt-out said at a command's start-up (`serve`, `query`): a bundle loaded without
  its sha256 check serves a same-size file of another bundle or model as it is."""
  if verify != DEFAULT_VERIFY:
    logger.warning("%s %s: a bundle's files are checked for %s only, so a same-size file of "
                   "another bundle or model is served as it is (the default, %s %s, reads "
                   "every file once at load)", flag, verify,
                   "their size" if verify == "size" else "presence", flag, DEFAULT_VERIFY)


class Retriever:
  """A loaded bundle. Thread-safe: calls are serialised by one lock (the server's
  micro-batcher makes one call per batch)."""

  def __init__(self, path: str, manifest: BundleManifest, dense: searchers_lib.DenseSearcher,
               store: store_lib.PassageStore, bm25: Optional[lucene.Bm25Searcher],
               modes: Sequence[str] = MODES,
               filters: Optional[filters_lib.FilterResolver] = None):
    self.path = path
    #: Checks and resolves each request's filter (the bundle's fields, ids and tombstones).
    self.filters = filters or filters_lib.FilterResolver(
        None, lambda: np.asarray(store.ids(), np.int64), {})
    self.modes = tuple(modes)
    self.manifest = manifest
    self._store = store
    self._lock = threading.Lock()
    self.weight = float(manifest.hybrid.weight)
    self.hybrid_depth = int(manifest.hybrid.depth)
    self.dense = dense
    self.bm25 = bm25
    #: The searcher of each served mode (twotower.core.searching.Searcher).
    self.searchers: dict[str, Searcher] = {"dense": dense}
    if bm25 is not None:
      self.searchers["bm25"] = bm25
      self.searchers["hybrid"] = searchers_lib.FusedSearcher(bm25, dense, self.weight,
                                                             self.hybrid_depth)
    #: Documents searched (an HNSW index may hold more vectors: deleted ones, tombstones).
    self.size = int(manifest.documents.count)

  @property
  def threads(self) -> int:
    """Lucene's batch_search threads (FAISS's and TensorFlow's are process-wide: set_threads)."""
    return self.bm25.threads if self.bm25 is not None else 1

  @threads.setter
  def threads(self, value: int) -> None:
    if self.bm25 is not None:
      self.bm25.threads = max(1, int(value))

  @property
  def _index(self):
    """The FAISS searcher (eval.faiss_searcher.Searcher) under the dense side."""
    return self.dense.index

  @property
  def _encoder(self):
    """The query tower (deploy.serving.query_encoders) under the dense side."""
    return self.dense.encoder

  # -------------------------------------------------------------------------------------------
  # Loading.
  # -------------------------------------------------------------------------------------------

  @classmethod
  def load(cls, path: str, verify: str = DEFAULT_VERIFY, threads: int = 0,
           faiss_threads: int = 0, encoder: str = "auto",
           modes: Sequence[str] = MODES,
           manifest: Optional[BundleManifest] = None) -> "Retriever":
    """Loads and checks a bundle (see the module docstring).

    Args:
      path: the bundle directory.
      verify: "sha256" (default: every file present with its recorded sha256), "size" (with
        its recorded size: cheaper, blind to a same-size file of another bundle) or "none".
      threads: TensorFlow's intra-op threads and Lucene's batch_search threads (0: leave as
        set / the machine's cores).
      faiss_threads: FAISS's OpenMP threads (0: leave as set). A server wants 1: a small
        batch on a busy machine waits for OpenMP's other thread (flat search of 7k vectors,
        one query: 0.15 ms on 1 thread, 8 ms on 2 with other work on the 2 cores).
      encoder: the query tower's runtime, deploy.serving.query_encoders: "auto" (ONNX when
        the bundle carries `query_onnx/`, else the SavedModel), "onnx" or "tensorflow".
      modes: the modes this retriever serves; Lucene (the JVM) is loaded only for "bm25"
        or "hybrid", so a dense-only retriever with an ONNX tower imports no TensorFlow,
        PyTorch or Java.
      manifest: the bundle's manifest when the caller has read it already (`serve` reads it
        before it listens, to fail fast on a path that is no bundle); read here otherwise.

    Raises:
      BundleError: an incomplete bundle or parts that disagree, naming the part.
    """
    if verify not in VERIFY:
      raise ValueError(f"verify must be one of {VERIFY}, got {verify!r}")
    # pylint: disable-next=import-outside-toplevel
    from twotower.eval import faiss_searcher as searcher_lib
    modes = tuple(modes)
    if not modes or any(m not in MODES for m in modes):
      raise ValueError(f"modes must be among {MODES}, got {modes!r}")
    path = path.rstrip("/")
    manifest = manifest or bundle_manifest.read(path)
    started = time.perf_counter()
    manifest.check_files(path, verify)
    logger.info("bundle %s: %d files checked (%s) in %.2f s", path, len(manifest.files),
                VERIFY_CHECKS[verify], time.perf_counter() - started)
    manifest.check_ids(path)
    running = bundle_manifest.running_versions()
    for name, version in manifest.versions.items():
      have = running.get(name)
      if version and have and have != version:
        logger.warning("bundle made with %s %s, running %s", name, version, have)
    if threads or faiss_threads:
      set_threads(threads, faiss_threads)
    part = lambda name: contracts.bundle_path(path, name)  # noqa: E731
    dim, count = manifest.model.embedding_dim, manifest.documents.count

    try:
      query_encoder = query_encoders.load(path, encoder, threads)
    except (ValueError, OSError) as e:
      raise BundleError(f"{path}: the query tower does not load: {e}") from e
    encoder_part = (query_encoders.QUERY_ONNX_DIR if query_encoder.kind == "onnx"
                    else contracts.BUNDLE_QUERY_ENCODER_DIR)
    if query_encoder.dim != dim:
      raise BundleError(f"{path}: part {encoder_part!r} embeds in {query_encoder.dim} dims, "
                        f"the manifest says {dim}")

    try:  # eval.faiss_searcher: per-call parameters, exact re-rank from the vectors beside it
      index = searcher_lib.load_searcher(part(contracts.BUNDLE_INDEX_FILE))
    except (RuntimeError, ValueError) as e:
      raise BundleError(f"{path}: part 'index.faiss' does not load: "
                        f"{str(e).splitlines()[0]}") from e
    tombstones = manifest.index.tombstones
    if index.d != dim or index.ntotal != count + tombstones:
      of = f"{count} documents' and {tombstones} deleted ones'" if tombstones else str(count)
      raise BundleError(f"{path}: part 'index.faiss' holds {index.ntotal} vectors of dim "
                        f"{index.d}; the manifest says {of} of dim {dim}")
    deleted = _tombstones(path, tombstones)

    try:
      store = store_lib.PassageStore.open(part(contracts.BUNDLE_STORE_FILE))
      stored = len(store)
    except (ValueError, OSError, sqlite3.DatabaseError) as e:
      raise BundleError(f"{path}: part 'store.sqlite' does not load: {e}") from e
    if stored != count:
      store.close()
      raise BundleError(f"{path}: part 'store.sqlite' holds {stored} documents; the "
                        f"manifest says {count}")

    metadata = None
    if manifest.format_version >= 3:
      try:
        metadata = bundle_metadata.Metadata.open(path)
      except (ValueError, OSError) as e:
        store.close()
        raise BundleError(f"{path}: part 'metadata' does not load: {e}") from e
      if len(metadata) != count:
        store.close()
        raise BundleError(f"{path}: part 'metadata' holds {len(metadata)} documents; the "
                          f"manifest says {count}")
    filters = filters_lib.FilterResolver(
        metadata, (lambda: metadata.ids) if metadata is not None
        else (lambda: np.asarray(store.ids(), np.int64)),
        manifest.metadata.types() if manifest.metadata else {}, deleted)

    bm25 = None
    if "bm25" in modes or "hybrid" in modes:
      # Lucene through pyserini.pyclass only: the JVM, not PyTorch (twotower.core.lucene).
      bm25 = lucene.Bm25Searcher(part(contracts.BUNDLE_LUCENE_DIR), float(manifest.bm25.k1),
                                 float(manifest.bm25.b), threads or max(1, os.cpu_count() or 1))
      if bm25.num_docs != count:
        bm25.close()
        store.close()
        raise BundleError(f"{path}: part 'lucene' holds {bm25.num_docs} documents; the "
                          f"manifest says {count}")
    logger.info("bundle %s: %d documents, dim %d, index %s, hybrid weight %.2f, query tower "
                "%s, modes %s", path, count, dim, manifest.index.factory,
                float(manifest.hybrid.weight), query_encoder.kind, ",".join(modes))
    dense = searchers_lib.DenseSearcher(index, query_encoder, manifest.model.fingerprint)
    return cls(path, manifest, dense, store, bm25, modes, filters)

  def close(self) -> None:
    with self._lock:
      self._store.close()
      if self.bm25 is not None:
        self.bm25.close()

  def warm_up(self, rounds: int = 3) -> None:
    """A few queries in every mode, single and batched, at the hybrid's depth: the first
    TensorFlow call traces and allocates, the first Lucene calls from a thread attach it to
    the JVM and warm the JIT. Call it from the thread that will search."""
    for i in range(rounds):
      for mode in self.modes:
        self.search(f"warm up {i}", k=10, mode=mode)
        self.search([f"warm up {i}", "a small batch"], k=10, mode=mode)

  # -------------------------------------------------------------------------------------------
  # Searching.
  # -------------------------------------------------------------------------------------------

  def check(self, request: SearchRequest) -> None:
    """Raises ValueError if `request` cannot run on this bundle (e.g. nprobe on a flat
    index): a server checks before batching, so a bad request fails alone."""
    if request.mode not in self.modes:
      raise ValueError(f"mode {request.mode!r} is not served here (modes: "
                       f"{', '.join(self.modes)})")
    if request.filter is not None:
      self.filters.check(request.filter)
    try:
      self.searchers[request.mode].check(request.params)
    except ValueError as e:  # named by the part, not by where the server keeps it
      raise ValueError(str(e).replace(f"{self.path}/", "")) from e

  def search(self, queries: Union[str, Sequence[str]], k: int = 10, mode: str = "dense",
             nprobe: Optional[int] = None, ef_search: Optional[int] = None,
             filter: Union[filters_lib.DocFilter, dict, None] = None,  # noqa: A002
             ) -> Union[list[Hit], list[list[Hit]]]:
    """Hits of one query (a list of Hit) or of each query of a list (a list of lists);
    `filter` (a DocFilter or its JSON) keeps them to the documents it matches."""
    single = isinstance(queries, str)
    request = SearchRequest((queries,) if single else tuple(queries), k, mode, nprobe,
                            ef_search, filter)
    self.check(request)
    (hits,) = self.search_requests([request])
    return hits[0] if single else hits

  def search_requests(self, requests: Sequence[SearchRequest]) -> list[list[list[Hit]]]:
    """Several requests in one go (the micro-batcher's call): every query that needs the
    query tower goes through it in one call; then one search per mode and parameter set (a
    restriction included), at the deepest k its requests want, cut to each request's k.
    Returns hits per request, per query."""
    for request in requests:
      if request.mode not in self.modes:
        raise ValueError(f"mode {request.mode!r} is not served here (modes: "
                         f"{', '.join(self.modes)})")
    with self._lock:
      texts_of = [list(r.queries) for r in requests]
      rows = _rows(texts_of)
      everything = Queries(tuple(q for t in texts_of for q in t))
      self.dense.embed_rows(everything, [row for n, r in enumerate(requests)
                                         if r.mode in ("dense", "hybrid") for row in rows[n]])
      return self._with_text(self._grouped(requests, everything, rows))

  def _grouped(self, requests: Sequence[SearchRequest], everything: Queries,
               rows: list[list[int]]) -> list[list[Ranked]]:
    """Each request's lists: one search per (mode, parameters[, hybrid depth]) group."""
    groups: dict[tuple, list[int]] = {}
    for n, request in enumerate(requests):
      # Requests that share a filter share a restriction, and so one search.
      key = (request.mode, request.params.with_restriction(
          self.filters.restriction(request.filter)))
      if request.mode == "hybrid":  # the fused lists depend on the sides' depth
        key += (self.searchers["hybrid"].side_depth(request.k),)
      groups.setdefault(key, []).append(n)
    out: list[list[Ranked]] = [[] for _ in requests]
    for (mode, params, *_), members in groups.items():
      depth = max(requests[n].k for n in members)
      found = self.searchers[mode].search(
          everything.take([row for n in members for row in rows[n]]), depth, params)
      at = 0
      for n in members:
        out[n] = [Ranked(r.candidate_ids[:requests[n].k], r.scores[:requests[n].k])
                  for r in found[at:at + len(rows[n])]]
        at += len(rows[n])
    return out

  def runs(self, queries: Sequence[tuple[str, str]], depth: int) -> tuple[Run, Run]:
    """(dense run, BM25 run) of (question_id, question) pairs, `depth` deep: what a
    validation split's tuning reads."""
    batch = Queries(tuple(q for _, q in queries))
    params = SearchParams(restriction=self.filters.restriction(None))  # tombstones out
    with self._lock:
      dense = self.dense.search(batch, depth, params)
      sparse = self.bm25.search(batch, depth, params)
    qids = [qid for qid, _ in queries]
    return dict(zip(qids, dense)), dict(zip(qids, sparse))

  def encode(self, queries: Sequence[str]) -> np.ndarray:
    """float32 [len(queries), d]: the query tower (SavedModel or ONNX), one call per
    ENCODE_BATCH queries (a server's micro-batch is one call; a file of a million queries
    does not become one)."""
    return self.dense.encoder.encode(queries)

  def _with_text(self, ranked: list[list[Ranked]]) -> list[list[list[Hit]]]:
    ids = [c for per_request in ranked for r in per_request for c in r.candidate_ids]
    documents = self._store.get(ids)
    out = []
    for per_request in ranked:
      out.append([[_hit(rank, c, s, documents.get(c))
                   for rank, (c, s) in enumerate(zip(r.candidate_ids, r.scores), start=1)]
                  for r in per_request])
    return out


def _rows(texts_of: list[list[str]]) -> list[list[int]]:
  """Each request's rows in the micro-batch's one list of queries."""
  rows, at = [], 0
  for texts_ in texts_of:
    rows.append(list(range(at, at + len(texts_))))
    at += len(texts_)
  return rows


def _tombstones(path: str, count: int) -> Optional[np.ndarray]:
  """The deleted documents' ids the index still holds (bundle_manifest.TOMBSTONES_FILE)."""
  if not count:
    return None
  try:
    ids = np.load(contracts.bundle_path(path, bundle_manifest.TOMBSTONES_FILE))
  except (ValueError, OSError) as e:
    raise BundleError(f"{path}: part {bundle_manifest.TOMBSTONES_FILE!r} does not load: {e}"
                      ) from e
  if ids.dtype != np.int64 or ids.shape != (count,):
    raise BundleError(f"{path}: part {bundle_manifest.TOMBSTONES_FILE!r} holds "
                      f"{ids.dtype}{ids.shape}; the manifest counts {count} tombstones")
  return ids


def _hit(rank: int, doc_id: int, score: float, doc: Optional[store_lib.Document]) -> Hit:
  if doc is None:  # the store is checked against the index at load; kept for safety
    return Hit(rank, doc_id, score, "", "")
  return Hit(rank, doc_id, score, doc.title, doc.text, doc.sentence, doc.page_id, doc.section)


def set_threads(threads: int = 0, faiss_threads: int = 0) -> None:
  """TensorFlow's intra/inter-op threads and FAISS's OpenMP threads (0: leave as set), so
  that a server on a small machine does not oversubscribe its cores (TensorFlow's may only be
  set before its first op: later it keeps its own, with a log line)."""
  if faiss_threads:
    import faiss  # pylint: disable=import-outside-toplevel
    faiss.omp_set_num_threads(faiss_threads)
  if threads:  # applied when TensorFlow loads: an ONNX query tower never imports it
    query_encoders.set_tf_threads(threads, max(1, min(2, threads)))
