"""benchmarks/faiss_ann.py's `real` set: embedding shards written with the project's schema
(contracts.embedding_schema) are read back, benchmarked with settings adapted to their size,
and reported in the one table."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

faiss = pytest.importorskip("faiss")

# benchmarks/ is a plain folder at the repository root, not part of the installed package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import faiss_ann  # noqa: E402
from twotower.eval import embeddings  # noqa: E402

D = 32


def _clustered(n: int, seed: int) -> np.ndarray:
  """The benchmark's own clustered set at D dimensions, 20 topics: float32[n, D]."""
  return faiss_ann.clustered(n, D, seed, topics=20)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
  """(candidates dir, questions dir): 3000 x 32 in 2 shards, 200 string-id queries in 2."""
  root = tmp_path_factory.mktemp("real")
  cands, quests = root / "candidates", root / "questions"
  cands.mkdir()
  quests.mkdir()
  faiss_ann.write_shards(_clustered(3000, seed=1), str(cands), 2,
                         ids=np.arange(3000, dtype=np.int64) * 7 + 11)
  faiss_ann.write_shards(_clustered(200, seed=2), str(quests), 2,
                         ids=np.array([f"q{i}" for i in range(200)], dtype=object))
  return str(cands), str(quests)


def test_shards_have_the_embedding_schema(shards):
  cands, quests = shards
  ids, x = embeddings.read_embeddings(cands)
  qids, q = embeddings.read_embeddings(quests)
  assert x.shape == (3000, D) and x.dtype == np.float32 and ids.dtype == np.int64
  assert q.shape == (200, D) and qids[0] == "q0"
  assert len(embeddings.embedding_files(cands)) == 2


def test_real_set_table(shards, capsys):
  cands, quests = shards
  rows = faiss_ann.main([
      "--sets", "real", "--embeddings", cands, "--query_embeddings", quests,
      "--queries", "150", "--nlist", "16", "--nprobes", "2,16", "--pq_m", "8",
      "--pq_nprobes", "4", "--kmeans_niter", "4", "--hnsw_n", "5000", "--hnsw_m", "16",
      "--ef_search", "32,128"])
  assert {r.data for r in rows} == {"real"}
  assert all(r.n == 3000 and r.d == D for r in rows)
  methods = {r.method for r in rows}
  assert {"Flat (exact)", "IVF16,Flat", "IVF16,PQ8x8", "HNSW16,Flat"} <= methods
  flat = [r for r in rows if r.method == "Flat (exact)"]
  assert len(flat) == 1 and flat[0].recall == 1.0  # HNSW over all 3000: no second flat
  assert all(0.0 <= r.recall <= 1.0 and r.qps > 0 for r in rows)
  exhaustive = [r for r in rows if r.method == "IVF16,Flat" and r.setting == "nprobe=16"]
  assert len(exhaustive) == 1 and exhaustive[0].recall == pytest.approx(1.0, abs=1e-3)
  assert [r.setting for r in rows if r.method == "HNSW16,Flat"] == ["efSearch=32",
                                                                    "efSearch=128"]
  out = capsys.readouterr().out
  assert "| real | IVF16,PQ8x8 | nprobe=4 | 3,000 | 32 |" in out
  assert "150 of 200 queries" in out


def test_real_settings_adapt_to_n():
  s = faiss_ann.real_settings(_args([]), 10_384, 128)
  assert s.nlist == 266  # 4*sqrt(n) ~ 408 -> 512, capped at n/39 = 266 (as `twotower index`)
  assert s.train_size == 10_384 and s.pq_train_size == 10_000
  assert s.nprobes == (8, 16, 32, 64, 128, 266) and s.pq_nprobes == (16, 64)
  assert s.pq_m == (16, 32) and s.hnsw_n == 10_384
  s = faiss_ann.real_settings(_args(["--pq_m", "16,32", "--nprobes", "8,512"]), 3000, 100)
  assert s.pq_m == (10, 25)  # largest divisors of d=100 not above 16 and 32
  assert s.nprobes == (8, s.nlist)  # given nprobes: clipped, nothing added
  synthetic = faiss_ann.synthetic_settings(_args([]))
  assert (synthetic.nlist, synthetic.nprobes, synthetic.pq_nprobes) == (
      4096, (8, 16, 32, 64, 128), (16, 64))


def test_fewer_candidates_than_k_is_a_clear_error(tmp_path, shards):
  small = tmp_path / "small"
  small.mkdir()
  faiss_ann.write_shards(_clustered(50, seed=3), str(small), 1)
  with pytest.raises(ValueError, match=r"50 candidates, fewer than k=100"):
    faiss_ann.main(["--sets", "real", "--embeddings", str(small),
                    "--query_embeddings", shards[1]])


def test_real_without_embeddings_is_a_usage_error():
  with pytest.raises(SystemExit):
    faiss_ann.main(["--sets", "real"])


def _args(argv: list[str]):
  return faiss_ann.parser().parse_args(argv)
