"""Exact re-ranking from memory-mapped vectors (eval.rerank, eval.faiss_searcher) and --mmap,
on small synthetic embeddings written as real embedding shards, against exact numpy inner
products."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

faiss = pytest.importorskip("faiss")

from twotower.core import contracts  # noqa: E402
from twotower.eval import faiss_index  # noqa: E402
from twotower.eval import index as index_lib  # noqa: E402
from twotower.eval import rerank as rr  # noqa: E402
from twotower.eval import faiss_searcher as searcher_lib  # noqa: E402

from outputs_fixtures import write_vectors  # noqa: E402

D = 32
N = 3000


@pytest.fixture(autouse=True, scope="module")
def one_faiss_thread():
  """On a shared 2-core machine two OpenMP threads spin against other jobs at every barrier
  (a 50k PQ build took minutes); the data here is small enough for one."""
  before = faiss.omp_get_max_threads()
  faiss.omp_set_num_threads(1)
  yield
  faiss.omp_set_num_threads(before)


def _clustered(n: int, seed: int) -> np.ndarray:
  rng = np.random.default_rng(seed)
  centres = np.random.default_rng(99).normal(size=(20, D))
  x = centres[rng.integers(0, 20, n)] + 0.3 * rng.normal(size=(n, D))
  return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """3000 x 32 in 5 shards with arbitrary int64 ids (not positions, not sorted)."""
  x = _clustered(N, seed=1)
  ids = (np.random.default_rng(5).permutation(N).astype(np.int64) * 7919 + (1 << 40))
  directory = tmp_path_factory.mktemp("emb") / "embeddings"
  directory.mkdir()
  schema = contracts.embedding_schema(D)
  for s, part in enumerate(np.array_split(np.arange(N), 5)):
    emb = pa.FixedSizeListArray.from_arrays(pa.array(x[part].ravel()), D)
    pq.write_table(pa.Table.from_arrays([pa.array(ids[part]), emb], schema=schema),
                   directory / f"embeddings-{s:05d}-of-00005.parquet")
  return {"x": x, "ids": ids, "dir": str(directory), "q": _clustered(40, seed=2)}


def _exact(corpus, k):
  scores = corpus["q"] @ corpus["x"].T
  order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
  return np.take_along_axis(scores, order, 1), corpus["ids"][order]


def _vector_of(corpus, ids):
  pos = {int(i): p for p, i in enumerate(corpus["ids"])}
  return corpus["x"][[pos[int(i)] for i in ids.ravel()]].reshape(*ids.shape, D)


def _build(corpus, out, type_="ivfpq_rerank", shards=1, **config):
  config = faiss_index.IndexSpec(type_, nlist=16, kmeans_niter=4, **config)
  # Synthetic vectors: no vectors.json names their model, so they are taken unchecked.
  return index_lib.run(index_lib.IndexConfig(corpus["dir"], str(out), config, shards,
                                          block_rows=700,
                                          allow_unchecked_vectors=True)).paths


def test_vectors_file_is_in_id_order_with_an_id_map(corpus, tmp_path):
  paths = _build(corpus, tmp_path / "index.faiss")
  vec_path, ids_path = rr.sidecar_paths(paths[0])
  vectors, ids = np.load(vec_path), np.load(ids_path)
  order = np.argsort(corpus["ids"])
  np.testing.assert_array_equal(ids, corpus["ids"][order])
  np.testing.assert_array_equal(vectors, corpus["x"][order])


def test_rerank_returns_flat_topk_when_the_short_list_holds_it(corpus, tmp_path):
  # Constructed short lists: each query's true top-10 hidden among 90 other ids, shuffled,
  # plus -1 fillers (what FAISS returns when it finds fewer than asked).
  k = 10
  ref_scores, ref_ids = _exact(corpus, k)
  rr.write_vectors(str(tmp_path / "i.faiss"), lambda: iter([(corpus["ids"], corpus["x"])]), D)
  vectors = rr.open_vectors(str(tmp_path / "i.faiss"))
  rng = np.random.default_rng(0)
  short = []
  for row in ref_ids:
    others = rng.choice(np.setdiff1d(corpus["ids"], row), 90, replace=False)
    short.append(rng.permutation(np.concatenate([row, others, [-1, -1]])))
  scores, ids = rr.rerank(corpus["q"], np.array(short), vectors, k, chunk=7)
  np.testing.assert_array_equal(ids, ref_ids)
  np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fast_scan", [False, True], ids=["8-bit", "fast-scan"])
def test_rerank_of_everything_equals_flat(corpus, tmp_path, fast_scan):
  # Every list probed and k*r >= n: the short list is the whole corpus, so the re-ranked
  # compressed index must give exactly flat's top-k. fast_scan: the former default's codes
  # (PQ{d/2}x4fs), which indexes and bundles built before keep: the type is read from the file.
  paths = _build(corpus, tmp_path / "index.faiss", fast_scan=fast_scan)
  assert faiss_index.IndexSpec("ivfpq_rerank", nlist=16, fast_scan=fast_scan).resolve(
      N, D).factory_string() == ("IVF16,PQ16x4fs" if fast_scan else "IVF16,PQ8x8")
  s = searcher_lib.load_searcher(paths[0])
  scores, ids = s.search(corpus["q"], 10, nprobe=16, rerank=N // 10)
  ref_scores, ref_ids = _exact(corpus, 10)
  np.testing.assert_array_equal(ids, ref_ids)
  np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-6)


def test_reranked_scores_are_exact_inner_products(corpus, tmp_path):
  paths = _build(corpus, tmp_path / "index.faiss")
  s = searcher_lib.load_searcher(paths[0])
  assert s.rerank == rr.DEFAULT_RERANK  # vectors beside the index: re-ranked by default
  scores, ids = s.search(corpus["q"], 20)
  assert (ids >= 0).all() and all(len(set(row)) == 20 for row in ids)
  exact = np.einsum("qkd,qd->qk", _vector_of(corpus, ids), corpus["q"])
  np.testing.assert_allclose(scores, exact, rtol=1e-5, atol=1e-6)
  assert (np.diff(scores, axis=1) <= 0).all()
  _, ref_ids = _exact(corpus, 20)
  plain_scores, plain_ids = s.search(corpus["q"], 20, rerank=0)
  plain_exact = np.einsum("qkd,qd->qk", _vector_of(corpus, plain_ids), corpus["q"])
  assert not np.allclose(plain_scores, plain_exact, atol=1e-4)  # PQ codes: approximate
  assert (faiss_index.recall_vs_reference(ids, ref_ids, 20)
          >= faiss_index.recall_vs_reference(plain_ids, ref_ids, 20))


def test_per_call_nprobe_leaves_the_index_alone(corpus, tmp_path):
  paths = _build(corpus, tmp_path / "index.faiss")
  s = searcher_lib.load_searcher(paths[0])
  ivf = faiss.extract_index_ivf(s.parts[0].index)
  assert ivf.nprobe == faiss_index.RERANK_NPROBE  # saved with the index
  before = s.search(corpus["q"], 200, rerank=0)  # 200: more than one list's worth
  narrow = s.search(corpus["q"], 200, nprobe=1, rerank=0)
  assert ivf.nprobe == faiss_index.RERANK_NPROBE
  assert (narrow[1] == -1).sum() > (before[1] == -1).sum()  # one list: fewer hits found
  np.testing.assert_array_equal(s.search(corpus["q"], 200, rerank=0)[1], before[1])
  with pytest.raises(ValueError, match="ef_search is for HNSW"):
    s.search(corpus["q"], 10, ef_search=64)


def test_sharded_rerank_equals_single(corpus, tmp_path):
  single = searcher_lib.load_searcher(_build(corpus, tmp_path / "one.faiss")[0])
  paths = _build(corpus, tmp_path / "index.faiss", shards=3)
  assert all(os.path.exists(rr.sidecar_paths(p)[0]) for p in paths)
  sharded = searcher_lib.load_searcher(str(tmp_path / "index-*-of-00003.faiss"))
  assert len(sharded.parts) == 3 and sharded.ntotal == N
  for searcher in (single, sharded):  # exhaustive: both exact
    scores, ids = searcher.search(corpus["q"], 10, nprobe=16, rerank=N // 10)
    np.testing.assert_array_equal(ids, _exact(corpus, 10)[1])
  scores, ids = sharded.search(corpus["q"], 10)
  exact = np.einsum("qkd,qd->qk", _vector_of(corpus, ids), corpus["q"])
  np.testing.assert_allclose(scores, exact, rtol=1e-5, atol=1e-6)


def test_search_cli_reranks(corpus, tmp_path):
  from twotower.commands import search as search_cli
  from twotower.eval import runs
  _build(corpus, tmp_path / "index.faiss")
  qids = [f"q{i}" for i in range(len(corpus["q"]))]
  q_dir = write_vectors(tmp_path / "q_emb", qids, corpus["q"], pa.string())
  out = str(tmp_path / "run.parquet")
  search_cli.main(["--index", str(tmp_path / "index.faiss"), "--queries", str(q_dir), "--out",
                   out, "--k", "10", "--nprobe", "16", "--rerank", "300",
                   "--reference", corpus["dir"], "--allow_unchecked_vectors"])
  run = runs.read_run(out)
  found = np.array([run[q].candidate_ids for q in qids])
  np.testing.assert_array_equal(found, _exact(corpus, 10)[1])


def test_vectors_of_another_index_are_refused(corpus, tmp_path):
  paths = _build(corpus, tmp_path / "index.faiss")
  other = np.arange(N, dtype=np.int64)  # ids 0..n-1: no id map; none of the index's ids
  rr.write_vectors(paths[0], lambda: iter([(other, corpus["x"])]), D)
  assert not os.path.exists(rr.sidecar_paths(paths[0])[1])  # the stale map went too
  with pytest.raises(ValueError, match=r"index\.vectors\.npy: no vector for id"):
    searcher_lib.load_searcher(paths[0]).search(corpus["q"], 10)


def test_rerank_without_vectors_is_a_clear_error(corpus, tmp_path):
  paths = _build(corpus, tmp_path / "ivf.faiss", type_="ivf")
  assert searcher_lib.load_searcher(paths[0]).rerank == 0
  with pytest.raises(ValueError, match=r"ivf\.faiss: no .*ivf\.vectors\.npy to re-rank from"):
    searcher_lib.load_searcher(paths[0], rerank=4)


# ---------------------------------------------------------------------------------------------
# --mmap: every type FAISS can map is mapped (anonymous resident memory does not grow by the
# file's size); the one it cannot is refused by name.
# ---------------------------------------------------------------------------------------------


# In a fresh process each time: in this one, memory freed by an earlier test stays in malloc's
# arenas and hides a read's growth.
_LOAD = """
import sys
def anon():
  for line in open('/proc/self/status'):
    if line.startswith('RssAnon:'):
      return int(line.split()[1])
from twotower.eval import faiss_index
before = anon()
index = faiss_index.read_index_file(sys.argv[1], mmap=sys.argv[2] == 'mmap')
print(anon() - before, index.ntotal)
"""


def _anon_growth_kib(path: str, mode: str, ntotal: int) -> int:
  """RssAnon growth (KiB) of a fresh process loading `path` (mode: mmap | read)."""
  env = {**os.environ, "OMP_NUM_THREADS": "1"}
  out = subprocess.run([sys.executable, "-c", _LOAD, path, mode], check=True, env=env,
                       capture_output=True, text=True).stdout.split()
  assert int(out[1]) == ntotal
  return int(out[0])


@pytest.fixture(scope="module")
def big(tmp_path_factory):
  """20k x 128 random vectors (10 MiB as float32): large enough to see in RSS."""
  if not os.path.exists("/proc/self/status"):
    pytest.skip("needs Linux /proc/self/status")
  x = np.random.default_rng(3).normal(size=(20_000, 128)).astype(np.float32)
  return x, tmp_path_factory.mktemp("mmap")


# IVF-PQ's codes sit in the same inverted lists as IVF-Flat's vectors (mapped alike); a PQ
# file large enough to see in RSS is too slow to build here (guide: 28 MiB read, 1 mapped).
@pytest.mark.parametrize("factory", ["Flat", "IDMap,Flat", "IVF64,Flat",
                                     "HNSW8,Flat"])
def test_mmap_maps(big, factory):
  x, directory = big
  index = faiss.index_factory(128, factory, faiss.METRIC_INNER_PRODUCT)
  if isinstance(index, faiss.IndexHNSWFlat):
    index.hnsw.efConstruction = 8  # a cheap graph: only its memory is under test
  index.train(x[:5000])
  if factory.startswith("IDMap"):
    index.add_with_ids(x, np.arange(len(x), dtype=np.int64) * 3)
  else:
    index.add(x)
  path = str(directory / f"{factory.replace(',', '_')}.faiss")
  faiss.write_index(index, path)
  expected = index.search(x[:5], 5)[1]
  ntotal = index.ntotal
  del index
  np.testing.assert_array_equal(
      faiss_index.read_index_file(path, mmap=True).search(x[:5], 5)[1], expected)
  size_kib = os.path.getsize(path) // 1024
  # Read: the file is copied into anonymous memory. Mapped: only what FAISS keeps in RAM by
  # design (centroids and codebooks, as when read; IDMap's ids, HNSW's graph), so mapping
  # keeps most of the file (the codes) out of anonymous memory.
  read, mapped = (_anon_growth_kib(path, "read", ntotal),
                  _anon_growth_kib(path, "mmap", ntotal))
  assert read > 0.5 * size_kib
  assert read - mapped > 0.5 * size_kib, (read, mapped, size_kib)


def test_mmap_refuses_fast_scan_by_name(big):
  x, directory = big
  index = faiss.index_factory(128, "IVF64,PQ32x4fs", faiss.METRIC_INNER_PRODUCT)
  index.train(x[:5000])
  index.add(x[:10_000])
  path = str(directory / "fastscan.faiss")
  faiss.write_index(index, path)
  with pytest.raises(ValueError, match=r"fastscan\.faiss: cannot memory-map IndexIVFPQFastScan"):
    faiss_index.read_index_file(path, mmap=True)
  assert faiss_index.read_index_file(path).ntotal == 10_000  # without --mmap: read
