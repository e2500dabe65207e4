"""Searchers that compose (twotower.core.searching): BM25 through Anserini's SimpleSearcher
without Pyserini's Python wrapper gives Pyserini's hits and scores to the bit; a dense searcher
is FAISS's search; a fused searcher of any two (a fused one included) is `twotower fuse`'s
interpolation of their runs; a restriction is one value whatever order its ids came in."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from twotower.core import lucene
from twotower.core import pyserini_env
from twotower.core.contracts import Ranked
from twotower.core.searching import Queries, Restriction, SearchParams
from twotower.eval import faiss_searcher, fusion
from twotower.eval.searchers import DenseSearcher, FusedSearcher
from search_fixtures import corpus, queries

@pytest.fixture(scope="module")
def lucene_index(tmp_path_factory) -> str:
  path = str(tmp_path_factory.mktemp("lucene") / "index")
  lucene.build_index(iter(corpus()), path, threads=1)
  return path


@pytest.fixture(scope="module")
def bm25(lucene_index):
  searcher = lucene.Bm25Searcher(lucene_index, threads=2)
  yield searcher
  searcher.close()


def test_bm25_equals_pyserinis_searcher_to_the_bit(lucene_index, bm25):
  pyserini_searcher = pyserini_env.import_lucene_searcher()(lucene_index)
  pyserini_searcher.set_bm25(lucene.DEFAULT_K1, lucene.DEFAULT_B)
  texts = queries()
  one_by_one = bm25.search(texts, 50, sequential=True)
  batched = bm25.search(texts, 50, sequential=False)
  ties = 0
  for text, a, b in zip(texts, one_by_one, batched):
    hits = pyserini_searcher.search(text, k=50)
    expected = Ranked(tuple(int(h.docid) for h in hits), tuple(float(h.score) for h in hits))
    assert a == expected and b == expected
    ties += len(expected.scores) - len(set(round(s, 4) for s in expected.scores))
  pyserini_searcher.close()
  assert ties > 20  # the corpus's copies tie, and the tie order is Pyserini's too
  assert bm25.num_docs == 600
  assert sorted(bm25.ids().tolist()) == [i * 3 + 1 for i in range(600)]


def test_bm25_ignores_dense_parameters(bm25):
  params = SearchParams(nprobe=8, ef_search=16)
  bm25.check(params)
  assert bm25.search(["w1 w2"], 5, params) == bm25.search(["w1 w2"], 5)


def _dense(seed: int, n: int = 300, d: int = 16) -> tuple[DenseSearcher, np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((n, d)).astype(np.float32)
  ids = np.arange(n, dtype=np.int64) * 3 + 1  # the same ids as the BM25 corpus
  index = faiss.index_factory(d, "IDMap,Flat", faiss.METRIC_INNER_PRODUCT)
  index.add_with_ids(x, ids)
  searcher = faiss_searcher.Searcher([faiss_searcher.Part("mem", index, None)])

  class Encoder:  # a "query tower": each text's hash seeds its vector
    dim = d

    def encode(self, texts):
      return np.stack([np.random.default_rng(abs(hash((seed, t))) % 2**32)
                       .standard_normal(d).astype(np.float32) for t in texts])
  return DenseSearcher(searcher, Encoder(), model_key=f"model-{seed}"), x, ids


def test_dense_searcher_is_faiss_search_and_embeds_once():
  dense, x, ids = _dense(0)
  batch = Queries(tuple(queries(8)))
  ranked = dense.search(batch, 10)
  vectors = batch.vectors[dense.model_key]
  scores = vectors @ x.T
  for row, r in zip(scores, ranked):
    order = np.argsort(-row, kind="stable")[:10]
    assert list(r.candidate_ids) == ids[order].tolist()
    np.testing.assert_allclose(r.scores, row[order], rtol=0, atol=1e-5)
  again = dense.search(batch, 10)  # from the vectors kept on the batch
  assert again == ranked and batch.vectors[dense.model_key] is vectors
  # k beyond the corpus: every document, no filler
  assert len(dense.search(["w1"], 1000)[0].candidate_ids) == 300


def test_a_fused_searcher_of_any_two_is_the_interpolation_of_their_runs(bm25):
  dense_a, _, _ = _dense(0)
  dense_b, _, _ = _dense(1)
  texts = queries(12)
  for first, second, weight in ((bm25, dense_a, 0.3), (dense_a, dense_b, 0.6)):
    fused = FusedSearcher(first, second, weight, depth=40)
    got = fused.search(texts, 10)
    a, b = first.search(texts, 40), second.search(texts, 40)
    expected = fusion.interpolate({str(i): r for i, r in enumerate(a)},
                                  {str(i): r for i, r in enumerate(b)}, weight, 40)
    for i, r in enumerate(got):
      assert r == Ranked(expected[str(i)].candidate_ids[:10], expected[str(i)].scores[:10])
  # A fused searcher is a searcher: it composes again.
  nested = FusedSearcher(FusedSearcher(bm25, dense_a, 0.5, 40), dense_b, 0.5, 40)
  assert [len(r.candidate_ids) for r in nested.search(texts, 7)] == [7] * len(texts)


def test_fused_searcher_checks_both_sides():
  dense, _, _ = _dense(0)
  with pytest.raises(ValueError, match="nprobe is for IVF indexes"):
    FusedSearcher(dense, dense, 0.5, 10).check(SearchParams(nprobe=4))
  with pytest.raises(ValueError, match="weight 1.5"):
    FusedSearcher(dense, dense, 1.5, 10)


def test_a_restriction_is_its_ids_whatever_their_order():
  a = Restriction.including([5, 3, 3, 9])
  b = Restriction.including(np.array([9, 5, 3]))
  assert a == b and hash(a) == hash(b) and a.include.tolist() == [3, 5, 9]
  assert Restriction.including([3, 5, 9], exclude=[5, 7]) == Restriction.including([3, 9])
  assert Restriction.excluding([2]) != Restriction.including([2])
  assert Restriction.excluding([4, 2]).allows(np.array([1, 2, 4, 5])).tolist() == [
      True, False, False, True]
  assert Restriction.including([1, 2]).also_excluding(np.array([2])) == \
      Restriction.including([1])
  assert Restriction.excluding([1]).also_excluding(np.array([2])) == Restriction.excluding([1, 2])
  with pytest.raises(ValueError):
    a.include[0] = 7  # read-only: a cached selector is built from it
