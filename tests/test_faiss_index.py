"""FAISS indexes against exact inner-product search on small synthetic embeddings written as
real embedding shards (contracts.embedding_schema)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

faiss = pytest.importorskip("faiss")

from twotower.core import contracts  # noqa: E402
from twotower.eval import embeddings  # noqa: E402
from twotower.eval import faiss_index  # noqa: E402
from twotower.eval import faiss_searcher  # noqa: E402

from outputs_fixtures import write_vectors  # noqa: E402

D = 32


def _clustered(n: int, seed: int) -> np.ndarray:
  """Unit vectors around 20 centres: ANN methods reach high recall on them."""
  rng = np.random.default_rng(seed)
  centres = np.random.default_rng(99).normal(size=(20, D))
  x = centres[rng.integers(0, 20, n)] + 0.3 * rng.normal(size=(n, D))
  return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _write_shards(directory, vectors: np.ndarray, ids: np.ndarray, num_shards: int) -> str:
  directory.mkdir(parents=True, exist_ok=True)
  schema = contracts.embedding_schema(vectors.shape[1])
  for s, part in enumerate(np.array_split(np.arange(len(ids)), num_shards)):
    emb = pa.FixedSizeListArray.from_arrays(pa.array(vectors[part].ravel()), vectors.shape[1])
    table = pa.Table.from_arrays([pa.array(ids[part]), emb], schema=schema)
    pq.write_table(table, directory / f"embeddings-{s:05d}-of-{num_shards:05d}.parquet")
  return str(directory)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  x = _clustered(3000, seed=1)
  ids = (np.arange(3000, dtype=np.int64) * 7919 + (1 << 40))  # arbitrary, not positions
  directory = _write_shards(tmp_path_factory.mktemp("emb") / "embeddings", x, ids, 5)
  return {"x": x, "ids": ids, "dir": directory, "files": embeddings.embedding_files(directory),
          "q": _clustered(50, seed=2)}


def _exact(corpus, k):
  scores = corpus["q"] @ corpus["x"].T
  order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
  return np.take_along_axis(scores, order, 1), corpus["ids"][order]


def test_streamed_flat_reference_equals_numpy(corpus):
  ref_scores, ref_ids = _exact(corpus, 10)
  scores, ids, _ = faiss_index.flat_knn(corpus["q"], corpus["files"], 10, block_rows=700)
  np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-5)
  assert faiss_index.recall_vs_reference(ids, ref_ids, 10) == 1.0


def test_count_vectors_reads_footers(corpus):
  assert faiss_index.count_vectors(corpus["files"]) == (3000, D)


@pytest.mark.parametrize("config,params,min_recall", [
    (faiss_index.IndexSpec("flat"), {}, 1.0),
    (faiss_index.IndexSpec("ivf", nlist=16), {"nprobe": 16}, 1.0),  # every list: exact
    (faiss_index.IndexSpec("ivf", nlist=16), {"nprobe": 4}, 0.8),
    (faiss_index.IndexSpec("hnsw", hnsw_m=16), {"ef_search": 128}, 0.95),
    (faiss_index.IndexSpec("ivfpq", nlist=16, pq_m=32, pq_nbits=6), {"nprobe": 16}, 0.7),
], ids=["flat", "ivf-all-lists", "ivf-nprobe4", "hnsw", "ivfpq"])
def test_index_recall_against_exact(corpus, config, params, min_recall):
  index = faiss_index.build_index(corpus["files"], config, block_rows=500)
  assert index.metric_type == faiss.METRIC_INNER_PRODUCT
  assert index.ntotal == 3000
  _, ids, _ = faiss_index.search(index, corpus["q"], 10, **params)  # per call
  _, ref_ids = _exact(corpus, 10)
  assert set(np.unique(ids)) <= set(corpus["ids"])  # the shards' own ids come back
  assert faiss_index.recall_vs_reference(ids, ref_ids, 10) >= min_recall


def test_factory_string_keeps_inner_product(corpus):
  # FAISS's default metric for IVF is L2: ours must not be.
  index = faiss_index.new_index(faiss_index.IndexSpec(factory="IVF8,SQ8"), D)
  assert index.metric_type == faiss.METRIC_INNER_PRODUCT
  assert faiss.extract_index_ivf(index).metric_type == faiss.METRIC_INNER_PRODUCT


def test_streamed_flat_build_equals_one_shot(corpus):
  streamed = faiss_index.build_index(corpus["files"], faiss_index.IndexSpec("flat"),
                                     block_rows=333)
  one_shot = faiss.IndexIDMap(faiss.IndexFlatIP(D))
  one_shot.add_with_ids(corpus["x"], corpus["ids"])
  s1, i1 = streamed.search(corpus["q"], 20)
  s2, i2 = one_shot.search(corpus["q"], 20)
  np.testing.assert_array_equal(i1, i2)
  np.testing.assert_array_equal(s1, s2)


def test_save_load_round_trip(corpus, tmp_path):
  config = faiss_index.IndexSpec("ivfpq", nlist=8, pq_m=8, pq_nbits=6)
  index = faiss_index.build_index(corpus["files"], config)
  path = str(tmp_path / "sub" / "index.faiss")
  faiss_index.save_index(index, path)
  assert [p.name for p in (tmp_path / "sub").iterdir()] == ["index.faiss"]  # no temp left
  loaded = faiss_searcher.load_searcher(path)
  assert loaded.parts[0].index.metric_type == faiss.METRIC_INNER_PRODUCT
  s1, i1, _ = faiss_index.search(index, corpus["q"], 10, nprobe=4)
  s2, i2, _ = faiss_index.search(loaded, corpus["q"], 10, nprobe=4)
  np.testing.assert_array_equal(i1, i2)
  np.testing.assert_array_equal(s1, s2)


def test_load_refuses_l2_index(tmp_path):
  path = str(tmp_path / "l2.faiss")
  faiss.write_index(faiss.IndexFlatL2(D), path)
  with pytest.raises(ValueError, match="not inner product"):
    faiss_searcher.load_searcher(path)


@pytest.mark.parametrize("num_shards", [3, 7], ids=["by-file", "by-row-range"])
def test_index_shards_equal_single_index(corpus, tmp_path, num_shards):
  config = faiss_index.IndexSpec("ivf", nlist=16)
  single = faiss_index.build_index(corpus["files"], config, block_rows=400)
  paths = faiss_index.shard_paths(str(tmp_path / "index.faiss"), num_shards)
  for path, shard in zip(paths, faiss_index.iter_index_shards(corpus["files"], config,
                                                                num_shards, block_rows=400)):
    assert shard.ntotal > 0  # every shard serves part of the corpus
    faiss_index.save_index(shard, path)
  served = faiss_searcher.load_searcher(str(tmp_path / "index-*.faiss"))
  assert len(served.parts) == num_shards
  assert served.ntotal == single.ntotal == 3000
  for nprobe in (3, 16):
    s1, i1, _ = faiss_index.search(single, corpus["q"], 10, nprobe=nprobe)
    s2, i2, _ = faiss_index.search(served, corpus["q"], 10, nprobe=nprobe)
    np.testing.assert_allclose(s1, s2, rtol=1e-6)
    assert faiss_index.recall_vs_reference(i2, i1, 10) >= 0.99  # equal up to score ties


def test_ivfpq_rerank_default_codes():
  # 8-bit PQ at d/4 bytes a vector (docs/guide/index_search.md: chosen by measurement);
  # --fast_scan: the former default, fast-scan 4-bit codes at the same bytes.
  default = faiss_index.IndexSpec("ivfpq_rerank").resolve(1_000_000, 128)
  assert default.factory_string() == "IVF4096,PQ32x8"
  assert default.nprobe == faiss_index.RERANK_NPROBE and default.store_vectors
  fast = faiss_index.IndexSpec("ivfpq_rerank", fast_scan=True).resolve(1_000_000, 128)
  assert fast.factory_string() == "IVF4096,PQ64x4fs"
  assert default.pq_m * default.pq_nbits == fast.pq_m * fast.pq_nbits == 32 * 8


def test_ivfpq_rerank_on_a_tiny_corpus_takes_fewer_bits_and_builds(tmp_path):
  # 8-bit codes need 256 training vectors per sub-quantizer: 100 vectors get 6 bits.
  x = np.random.default_rng(0).normal(size=(100, 16)).astype(np.float32)
  spec = faiss_index.IndexSpec("ivfpq_rerank", nlist=2).resolve(len(x), 16)
  assert spec.factory_string() == "IVF2,PQ4x6"
  index = faiss_index.new_index(spec, 16)
  index.train(x)
  index.add_with_ids(x, np.arange(len(x), dtype=np.int64))
  assert index.ntotal == len(x)


def test_memory_estimate_ivfpq_is_small():
  config = faiss_index.IndexSpec("ivfpq").resolve(1_000_000, 128)
  assert config.nlist == 4096 and config.pq_m == 32
  est = faiss_index.memory_estimate(config, 1_000_000, 128, 65_536)
  assert est["index"] < est["all_vectors"] / 5


@pytest.mark.parametrize("suffix", [".parquet", ".trec"])
def test_index_and_search_cli_write_the_run_file(corpus, tmp_path, suffix):
  from twotower.commands import index as index_cli
  from twotower.commands import search as search_cli
  from twotower.eval import runs
  qids = [f"q{i}" for i in range(len(corpus["q"]))]
  q_dir = write_vectors(tmp_path / "q_emb", qids, corpus["q"], pa.string())
  # Synthetic vectors: no vectors.json names their model, so they are taken unchecked.
  index_cli.main(["--embeddings", corpus["dir"], "--out", str(tmp_path / "hnsw.faiss"),
                 "--type", "hnsw", "--hnsw_m", "16", "--num_index_shards", "2",
                 "--allow_unchecked_vectors"])
  out = str(tmp_path / f"run{suffix}")
  search_cli.main(["--index", str(tmp_path / "hnsw-*-of-00002.faiss"), "--queries", str(q_dir),
                  "--out", out, "--k", "10", "--ef_search", "64", "--reference", corpus["dir"],
                  "--allow_unchecked_vectors"])
  run = runs.read_run(out)
  _, ref_ids = _exact(corpus, 10)
  assert sorted(run) == sorted(qids)
  found = np.array([run[q].candidate_ids for q in qids])
  assert faiss_index.recall_vs_reference(found, ref_ids, 10) >= 0.95
  assert all(list(r.scores) == sorted(r.scores, reverse=True) for r in run.values())
  import json
  report = json.loads(open(out + ".report.json").read())
  assert report["recall_vs_flat"]["R@10"] >= 0.95 and report["qps"] > 0
