"""FAISS indexes over embedding shards: build (streamed), save/load, shard, search, and the
exact flat inner-product reference every approximate index is measured against.

Inner product everywhere: `index_factory` is always called with METRIC_INNER_PRODUCT (FAISS
defaults IVF to L2, which ranks differently for unnormalised embeddings), and every built or
loaded index is checked for it.

Memory: `build_index` never holds all vectors. It reads `embeddings/*.parquet` block by block
in id order (eval.embeddings.iter_blocks_by_id: the index does not depend on how the vectors
are split into files or input shards); index types that need training (IVF, IVF-PQ) train on
a seeded sample drawn while streaming, then vectors are added block by block with their int64 ids
(`add_with_ids`; flat and HNSW go through an `IDMap`). Only the index itself (for IVF-PQ:
codes + ids, m·nbits/8 + 8 bytes per vector) grows with the corpus; the estimate is logged
first, as FAISS contrib's `big_batch_search` does. `iter_index_shards` builds several
independent shards from one trained template, one at a time, to be served together through
`faiss.IndexShards` (eval.faiss_searcher.load_searcher with several paths: the one loader).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import tempfile
import time
from typing import Iterator, Optional, Sequence

import faiss
import numpy as np
import pyarrow as pa
from tqdm import tqdm

from twotower.core import files as tio
from twotower.eval import embeddings

logger = logging.getLogger(__name__)

INDEX_TYPES = ("flat", "ivf", "hnsw", "ivfpq", "ivfpq_rerank")
#: nprobe saved in an `ivfpq_rerank` index (its search default), from the 1M measurement in
#: docs/guide/index_search.md; other IVF types keep FAISS's default of 1 unless --nprobe.
RERANK_NPROBE = 16


# ---------------------------------------------------------------------------------------------
# Embedding shards (which files and their blocks: eval.embeddings).
# ---------------------------------------------------------------------------------------------


def count_vectors(files: Sequence[str]) -> tuple[int, int]:
  """(rows, d) from the Parquet footers alone: no vector is read."""
  n, d = 0, None
  for f in files:
    pf = tio.open_parquet(f)
    n += pf.metadata.num_rows
    field = pf.schema_arrow.field("embedding")
    if not pa.types.is_fixed_size_list(field.type):
      raise ValueError(f"{f}: 'embedding' is {field.type}, expected a fixed-size float32 list")
    if d is not None and field.type.list_size != d:
      raise ValueError(f"{f}: embedding dim {field.type.list_size} != {d} of earlier shards")
    d = field.type.list_size
  if d is None:
    raise ValueError("no embedding shard given")
  return n, d


# ---------------------------------------------------------------------------------------------
# Configs and memory estimates.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class IndexSpec:
  """How to build an index. Zero means "derive from the corpus size" (`resolve`)."""
  type: str = "flat"             # flat | ivf | hnsw | ivfpq | ivfpq_rerank
  factory: Optional[str] = None  # an index_factory string; overrides type and the fields below
  nlist: int = 0                 # IVF lists (0: the power of two nearest 4·sqrt(n))
  pq_m: int = 0                  # PQ sub-quantizers (0: d/4, 4 dims each; ivfpq_rerank with
                                 # fast_scan: d/2)
  pq_nbits: int = 8              # bits per PQ code
  hnsw_m: int = 32               # HNSW graph degree
  ef_construction: int = 40      # HNSW build beam width
  train_size: int = 0            # training sample (0: max(64·nlist, 2^nbits·64), ≤ n)
  kmeans_niter: int = 10         # k-means iterations (IVF coarse quantizer, PQ codebooks)
  seed: int = 0
  nprobe: int = 0                # IVF nprobe saved in the index (0: FAISS's 1; ivfpq_rerank:
                                 # RERANK_NPROBE)
  opq: bool = False              # ivfpq / ivfpq_rerank: learn an OPQ rotation before the PQ
  fast_scan: bool = False        # ivfpq / ivfpq_rerank: 4-bit fast-scan PQ (PQ{m}x4fs)
  store_vectors: bool = False    # write float32 vectors beside the index for exact re-ranking
                                 # (eval.rerank; always on for ivfpq_rerank)

  def resolve(self, n: int, d: int) -> IndexSpec:
    nlist = self.nlist or max(1, min(2 ** round(math.log2(max(4 * math.sqrt(n), 1))),
                                     max(1, n // 39)))
    pq_m = self.pq_m or max(1, d // 4)
    nbits, nprobe, store, fast = self.pq_nbits, self.nprobe, self.store_vectors, self.fast_scan
    if self.type == "ivfpq_rerank" and not self.factory:
      # 8-bit PQ with d/4 sub-quantizers (d/4 bytes a vector: 32 at d 128). Measured on 1M
      # clustered vectors (d 128, IVF4096, nprobe 16, re-rank of the top 4k from the mapped
      # vectors; benchmarks/faiss_rerank.py --compare_codes): PQ32x8 keeps 0.995 of the exact
      # top 100 and 0.951 of the top 10 where fast-scan PQ64x4fs, at the same 32 bytes and the
      # former default, keeps 0.968 and 0.751, at 0.56x its batched queries/s and 1.2x its
      # single-query p50 (0.37 against 0.31 ms); filtered, the same or better recall at 0.9-1.1x
      # its speed. Recall first while the speed stays within 2x; 8-bit IVF lists can also be
      # memory-mapped (--mmap), fast-scan ones cannot. --fast_scan keeps PQ{d/2}x4fs.
      # docs/guide/index_search.md has the table.
      fast = self.fast_scan
      pq_m = self.pq_m or (max(1, d // 2) if fast else _divisor_at_most(d, max(1, d // 4)))
      nprobe, store = nprobe or RERANK_NPROBE, True
      if not fast:
        # 2^nbits centroids per sub-quantizer need as many training vectors: a corpus (or
        # --train_size) under 256 gets fewer bits rather than a FAISS error.
        nbits = min(nbits, max(1, int(math.log2(max(2, min(n, self.train_size or n))))))
    if fast:
      nbits = 4
    train = self.train_size or max(64 * nlist, (2 ** nbits) * 64)
    return dataclasses.replace(self, nlist=nlist, pq_m=pq_m, pq_nbits=nbits, nprobe=nprobe,
                               store_vectors=store, fast_scan=fast, train_size=min(n, train))

  def factory_string(self) -> str:
    if self.factory:
      return self.factory
    if self.type == "flat":
      return "Flat"
    if self.type == "ivf":
      return f"IVF{self.nlist},Flat"
    if self.type == "hnsw":
      return f"HNSW{self.hnsw_m},Flat"
    opq = f"OPQ{self.pq_m}," if self.opq else ""
    pq = f"PQ{self.pq_m}x4fs" if self.fast_scan else f"PQ{self.pq_m}x{self.pq_nbits}"
    if self.type in ("ivfpq", "ivfpq_rerank"):
      return f"{opq}IVF{self.nlist},{pq}"
    raise ValueError(f"unknown index type {self.type!r}; expected one of {INDEX_TYPES}")


def _divisor_at_most(d: int, at_most: int) -> int:
  """The largest sub-quantizer count that divides d and is at most `at_most` (PQ needs d % m
  == 0)."""
  return max(m for m in range(1, min(d, at_most) + 1) if d % m == 0)


def memory_estimate(config: IndexSpec, n: int, d: int, block_rows: int) -> dict[str, int]:
  """Bytes the build will hold: the index, the training sample, one block in flight."""
  spec = config.factory_string()
  per_vector = 4 * d + 8  # flat-coded vector + id
  fixed = 0
  if "PQ" in spec:
    per_vector = config.pq_m * (4 if "fs" in spec else config.pq_nbits) // 8 + 8
    fixed += (2 ** config.pq_nbits) * d * 4
  if "HNSW" in spec:
    per_vector += int(2 * config.hnsw_m * 4 * 1.1)  # level-0 links + upper levels
  if "IVF" in spec:
    fixed += config.nlist * d * 4
  train = config.train_size * d * 4 if "IVF" in spec else 0
  return {"index": per_vector * n + fixed, "train_sample": train,
          "block": block_rows * (4 * d + 8), "all_vectors": n * 4 * d}


def _mib(b: int) -> str:
  return f"{b / 2**20:.1f} MiB"


# ---------------------------------------------------------------------------------------------
# Building.
# ---------------------------------------------------------------------------------------------


def check_inner_product(index: faiss.Index, what: str = "index") -> None:
  if index.metric_type != faiss.METRIC_INNER_PRODUCT:
    raise ValueError(f"{what}: metric_type {index.metric_type} is not inner product "
                     f"({faiss.METRIC_INNER_PRODUCT})")


def new_index(config: IndexSpec, d: int) -> faiss.Index:
  """An empty index with inner product set explicitly, accepting `add_with_ids` (IVF natively;
  others through an IDMap)."""
  spec = config.factory_string()
  index = faiss.index_factory(d, spec, faiss.METRIC_INNER_PRODUCT)
  if faiss.try_extract_index_ivf(index) is None and not spec.startswith("IDMap"):
    index = faiss.index_factory(d, "IDMap," + spec, faiss.METRIC_INNER_PRODUCT)
  check_inner_product(index, spec)
  return index


def sample_vectors(files: Sequence[str], n_total: int, size: int, seed: int,
                   block_rows: int = 65_536) -> np.ndarray:
  """A seeded uniform sample of about `size` vectors, drawn while streaming the shards."""
  rng = np.random.default_rng(seed)
  p = min(1.0, 1.1 * size / max(n_total, 1))  # oversample a little, then cut
  parts = []
  for _, x in embeddings.iter_blocks_by_id(files, block_rows):
    parts.append(x[rng.random(len(x)) < p])
  sample = np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)
  if len(sample) > size:
    sample = sample[rng.choice(len(sample), size, replace=False)]
  return np.ascontiguousarray(sample)


def train_template(files: Sequence[str], config: IndexSpec, block_rows: int = 65_536
                   ) -> tuple[faiss.Index, IndexSpec]:
  """An empty, trained index for the corpus, and the resolved config. Logs the memory
  estimate before any vector is read."""
  n, d = count_vectors(files)
  config = config.resolve(n, d)
  est = memory_estimate(config, n, d, block_rows)
  logger.info("index %s over %d x %d from %d shards: estimated index %s + train sample %s + "
              "block %s (all vectors would be %s)", config.factory_string(), n, d, len(files),
              _mib(est["index"]), _mib(est["train_sample"]), _mib(est["block"]),
              _mib(est["all_vectors"]))
  index = new_index(config, d)
  if not index.is_trained:
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
      ivf = faiss.downcast_index(ivf)
      ivf.cp.niter = config.kmeans_niter
      if hasattr(ivf, "pq"):  # IVF-PQ and its fast-scan variant
        ivf.pq.cp.niter = config.kmeans_niter
      if getattr(ivf, "do_polysemous_training", False):
        # index_factory turns it on for "PQ{m}x8" (off only with "np"): minutes of simulated
        # annealing over the codebooks (326 s of a 1M build here, the same at 10k) for a
        # Hamming pre-filter that inner-product search never uses.
        ivf.do_polysemous_training = False
    t0 = time.perf_counter()
    sample = sample_vectors(files, n, config.train_size, config.seed, block_rows)
    logger.info("training on a sample of %d vectors", len(sample))
    index.train(sample)
    del sample
    logger.info("trained in %.1f s", time.perf_counter() - t0)
  if config.nprobe:
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None:
      raise ValueError(f"nprobe {config.nprobe} given for {config.factory_string()}, which is "
                       "not an IVF index")
    ivf.nprobe = config.nprobe  # saved with the index: its default for search
  return index, config


def add_blocks(index: faiss.Index, blocks: Iterator[tuple[np.ndarray, np.ndarray]]) -> None:
  for ids, x in blocks:
    if ids.dtype != np.int64:
      raise ValueError(f"document ids must be int64, got {ids.dtype}")
    index.add_with_ids(x, ids)


def build_index(files: Sequence[str], config: IndexSpec, block_rows: int = 65_536,
                progress: bool = False) -> faiss.Index:
  """One index over all shards, streamed (see the module docstring)."""
  index, _ = train_template(files, config, block_rows)
  add_blocks(index, embeddings.iter_blocks_by_id(files, block_rows, progress))
  logger.info("index holds %d vectors", index.ntotal)
  return index


def iter_index_shards(files: Sequence[str], config: IndexSpec, num_shards: int,
                      block_rows: int = 65_536, progress: bool = False
                      ) -> Iterator[faiss.Index]:
  """`num_shards` indexes over disjoint parts of the corpus, yielded one at a time (so the
  caller can write each and free it). All share one trained template (same coarse centroids
  and codebooks): their union is the single index's content. With at least as many files as
  shards, files are dealt round-robin (one pass over the data); otherwise shard s takes the
  s-th contiguous range of rows (one pass per shard)."""
  template, _ = train_template(files, config, block_rows)
  n, _ = count_vectors(files)
  for s in range(num_shards):
    shard = faiss.clone_index(template)
    add_blocks(shard, shard_blocks(files, s, num_shards, n, block_rows, progress))
    logger.info("shard %d/%d holds %d vectors", s + 1, num_shards, shard.ntotal)
    yield shard


def shard_blocks(files: Sequence[str], s: int, num_shards: int, n: int,
                 block_rows: int = 65_536, progress: bool = False
                 ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
  """The blocks of index shard s of `num_shards` (see `iter_index_shards`); n: all rows."""
  if num_shards <= 1:
    return embeddings.iter_blocks_by_id(files, block_rows, progress)
  if len(files) >= num_shards:
    return embeddings.iter_blocks_by_id(files[s::num_shards], block_rows, progress)
  return _row_range(embeddings.iter_blocks_by_id(files, block_rows, progress),
                    s * n // num_shards, (s + 1) * n // num_shards)


def _row_range(blocks: Iterator[tuple[np.ndarray, np.ndarray]], start: int, stop: int
               ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
  """The rows [start, stop) of a stream of blocks, in order."""
  offset = 0
  for ids, x in blocks:
    lo, hi = max(start - offset, 0), min(stop - offset, len(ids))
    if lo < hi:
      yield ids[lo:hi], x[lo:hi]
    offset += len(ids)
    if offset >= stop:
      return


# ---------------------------------------------------------------------------------------------
# Save, load, serve as shards.
# ---------------------------------------------------------------------------------------------


def save_index(index: faiss.Index, path: str) -> None:
  """Writes atomically: a temp file beside `path`, then os.replace (local); one upload
  through FileSystems otherwise."""
  if tio.is_local(path):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".faiss")
    os.close(fd)
    try:
      faiss.write_index(index, tmp)
      os.replace(tmp, path)
    finally:
      if os.path.exists(tmp):
        os.remove(tmp)
    return
  from apache_beam.io.filesystems import FileSystems
  with FileSystems.create(path) as f:
    f.write(faiss.serialize_index(index).tobytes())


def index_ids(index: faiss.Index) -> np.ndarray:
  """int64 ids an index holds, read from the index itself (IDMap's map, IVF's inverted lists,
  shards' union): what its searches can return, whatever the manifest says."""
  index = faiss.downcast_index(index)
  if isinstance(index, faiss.IndexShards):
    parts = [index_ids(index.at(s)) for s in range(index.count())]
    return np.concatenate(parts) if parts else np.empty(0, np.int64)
  if isinstance(index, (faiss.IndexIDMap, faiss.IndexIDMap2)):
    return faiss.vector_to_array(index.id_map).astype(np.int64, copy=False)
  ivf = faiss.try_extract_index_ivf(index)
  if ivf is None:
    raise ValueError(f"cannot list the ids of a {type(index).__name__} (built without ids)")
  lists = ivf.invlists
  parts = []
  for list_no in range(ivf.nlist):
    size = lists.list_size(list_no)
    if size:
      pointer = lists.get_ids(list_no)
      parts.append(faiss.rev_swig_ptr(pointer, size).astype(np.int64, copy=True))
      lists.release_ids(list_no, pointer)
  return np.concatenate(parts) if parts else np.empty(0, np.int64)


def shard_paths(path: str, num_shards: int) -> list[str]:
  """`index.faiss` -> `index-00000-of-00004.faiss`, ... (one path when num_shards is 1)."""
  if num_shards <= 1:
    return [path]
  stem, ext = os.path.splitext(path)
  return [f"{stem}-{s:05d}-of-{num_shards:05d}{ext or '.faiss'}" for s in range(num_shards)]


def _unmappable(index: faiss.Index) -> Optional[str]:
  """Why FAISS leaves this (mmap-loaded) index's bulk in RAM, or None when it is mapped."""
  index = faiss.downcast_index(index)
  while isinstance(index, (faiss.IndexIDMap, faiss.IndexIDMap2, faiss.IndexPreTransform)):
    index = faiss.downcast_index(index.index)
  ivf = faiss.try_extract_index_ivf(index)
  if ivf is not None:
    lists = faiss.downcast_InvertedLists(ivf.invlists)
    if not isinstance(lists, (faiss.ArrayInvertedLists, faiss.OnDiskInvertedLists)):
      return f"its inverted lists are {type(lists).__name__}, which FAISS reads into memory"
    return None
  if isinstance(index, (faiss.IndexFlatCodes, faiss.IndexHNSW)):
    return None
  return f"FAISS maps the codes of flat, HNSW and IVF indexes, not {type(index).__name__}"


def read_index_file(path: str, mmap: bool = False) -> faiss.Index:
  """One index file. mmap: map it rather than read it, so resident memory is the pages
  searches touch (and the kernel may drop them again).

  FAISS's IO_FLAG_MMAP maps only IVF inverted lists: on a flat or HNSW index it silently reads
  everything into memory. IO_FLAG_MMAP_IFC (FAISS >= 1.10) maps the flat codes of flat, HNSW
  storage, PQ/SQ and IVF array lists alike, so it is the one flag used here; an HNSW graph
  (2·M int32 a vector) stays in memory. An index whose bulk FAISS cannot map (fast-scan IVF
  lists) is refused with a ValueError naming the file and type, not silently read."""
  if not tio.is_local(path):
    if mmap:
      raise ValueError(f"{path}: --mmap needs a local index file")
    from apache_beam.io.filesystems import FileSystems
    with FileSystems.open(path) as f:
      return faiss.deserialize_index(np.frombuffer(f.read(), dtype=np.uint8))
  if not mmap:
    return faiss.read_index(path)
  if not os.path.exists(path):
    raise ValueError(f"{path}: no such index file")
  flag = getattr(faiss, "IO_FLAG_MMAP_IFC", None)
  index = faiss.read_index(path, flag if flag is not None else faiss.IO_FLAG_MMAP)
  if flag is None and faiss.try_extract_index_ivf(index) is None:
    why = f"FAISS {faiss.__version__} has no IO_FLAG_MMAP_IFC to map non-IVF indexes"
  else:
    why = _unmappable(index)
  if why:
    raise ValueError(f"{path}: cannot memory-map {type(faiss.downcast_index(index)).__name__}: "
                     f"{why}; load it without --mmap")
  return index


def _unwrap(index: faiss.Index) -> faiss.Index:
  """The index under IDMap / PreTransform wrappers (what nprobe / efSearch apply to)."""
  index = faiss.downcast_index(index)
  while isinstance(index, (faiss.IndexIDMap, faiss.IndexIDMap2, faiss.IndexPreTransform)):
    index = faiss.downcast_index(index.index)
  return index


def search_params(index: faiss.Index, what: str, nprobe: Optional[int] = None,
                  ef_search: Optional[int] = None) -> Optional[faiss.SearchParameters]:
  """A FAISS SearchParameters for one call, or None (the index's own settings). A parameter
  the index has no use for is an error rather than silently ignored."""
  inner = _unwrap(index)
  is_ivf = faiss.try_extract_index_ivf(index) is not None
  is_hnsw = isinstance(inner, faiss.IndexHNSW)
  if nprobe is not None and not is_ivf:
    raise ValueError(f"{what}: nprobe is for IVF indexes; this is {type(inner).__name__}")
  if ef_search is not None and not is_hnsw:
    raise ValueError(f"{what}: ef_search is for HNSW indexes; this is {type(inner).__name__}")
  if nprobe is not None:
    if nprobe < 1:
      raise ValueError(f"{what}: nprobe must be >= 1, got {nprobe}")
    return faiss.SearchParametersIVF(nprobe=int(nprobe))
  if ef_search is not None:
    if ef_search < 1:
      raise ValueError(f"{what}: ef_search must be >= 1, got {ef_search}")
    return faiss.SearchParametersHNSW(efSearch=int(ef_search))
  return None



# ---------------------------------------------------------------------------------------------
# Search and the flat reference.
# ---------------------------------------------------------------------------------------------


def search(index, queries: np.ndarray, k: int, batch_size: int = 4096,
           progress: bool = False, **params) -> tuple[np.ndarray, np.ndarray, float]:
  """(scores float32[nq, k], ids int64[nq, k], seconds). Missing hits have id -1.

  index: a faiss.Index, or an eval.faiss_searcher.Searcher (re-ranks when its vectors exist);
  params (nprobe=, ef_search=, rerank=) go to Searcher.search for this call only."""
  queries = np.ascontiguousarray(queries, dtype=np.float32)
  scores = np.empty((len(queries), k), np.float32)
  ids = np.empty((len(queries), k), np.int64)
  t0 = time.perf_counter()
  params = {key: v for key, v in params.items() if v is not None}
  if params and isinstance(index, faiss.Index):  # per call, the index left as it is
    params = {"params": search_params(index, "index", **params)}
  for i in tqdm(range(0, len(queries), batch_size), desc="search",
                disable=None if progress else True):
    scores[i:i + batch_size], ids[i:i + batch_size] = index.search(
        queries[i:i + batch_size], k, **params)
  return scores, ids, time.perf_counter() - t0


def flat_knn(queries: np.ndarray, files: Sequence[str], k: int, block_rows: int = 262_144,
             progress: bool = False) -> tuple[np.ndarray, np.ndarray, float]:
  """Exact inner-product top-k over streamed shards (FAISS contrib's knn_ground_truth: each
  block's `faiss.knn` is folded into a ResultHeap), keeping the shards' own ids.

  Returns (scores float32[nq, k], ids int64[nq, k], seconds)."""
  queries = np.ascontiguousarray(queries, dtype=np.float32)
  n, d = count_vectors(files)
  logger.info("flat reference: %d queries x %d vectors of dim %d; memory %s per block + "
              "heap %s", len(queries), n, d, _mib(block_rows * (4 * d + 8)),
              _mib(len(queries) * k * 12))
  heap = faiss.ResultHeap(len(queries), k, keep_max=True)
  t0 = time.perf_counter()
  for ids, x in embeddings.iter_blocks(files, block_rows, progress):
    D, I = faiss.knn(queries, x, min(k, len(x)), metric=faiss.METRIC_INNER_PRODUCT)
    labels = np.where(I >= 0, ids[np.maximum(I, 0)], -1)
    if D.shape[1] < k:  # a block smaller than k: pad
      pad = k - D.shape[1]
      D = np.hstack([D, np.full((len(D), pad), -np.inf, np.float32)])
      labels = np.hstack([labels, np.full((len(D), pad), -1, np.int64)])
    heap.add_result(np.ascontiguousarray(D), np.ascontiguousarray(labels))
  heap.finalize()
  return heap.D, heap.I, time.perf_counter() - t0


def recall_vs_reference(ids: np.ndarray, reference: np.ndarray, k: int) -> float:
  """Mean |top-k ∩ reference top-k| / k: the share of the exact top-k an index finds."""
  hits = 0
  for row, ref in zip(ids[:, :k], reference[:, :k]):
    hits += len(np.intersect1d(row[row >= 0], ref[ref >= 0], assume_unique=False))
  return hits / (k * len(ids))
