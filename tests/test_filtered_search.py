"""Filtered search is exact: under a filter, every searcher returns the true top k among the
documents the filter matches (brute force over them is the reference), for every FAISS index
type (flat: the same ids and scores; IVF and HNSW: recall of the filtered top 10, and exact
once the filter is selective enough for exact scoring), for BM25 (a Lucene filter clause: the
unfiltered ranking with the others left out) and for the hybrid (fusion of the filtered
lists). Metadata filters resolve to exactly the documents a scan of the fields finds; bad
filters are refused by name (Python, CLI, HTTP); a bundle of format 2 keeps loading; requests
that share a filter share one search. benchmarks/filtered_search.py runs the same checks on
1,000 filters per selectivity over a larger corpus."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from fastapi.testclient import TestClient

from twotower import cli
from twotower.core import contracts
from twotower.core import lucene
from twotower.core.contracts import bundle_manifest, bundle_metadata
from twotower.core.searching import Queries, Restriction, SearchParams
from twotower.deploy.serving import Retriever, SearchRequest
from twotower.deploy.serving import app as app_lib
from twotower.deploy.serving.doc_filter import DocFilter, FilterResolver
from twotower.eval import faiss_index, faiss_searcher, fusion
from twotower.eval import rerank as rr
from twotower.eval.searchers import DenseSearcher, FusedSearcher
from search_fixtures import (brute_force, clustered_vectors, corpus, queries, random_allowed,
                             recall)

N, D, K = 3000, 24, 10
SELECTIVITIES = (0.001, 0.01, 0.1, 0.5)
FILTERS = 12  # per selectivity here; the benchmark runs 1,000


@pytest.fixture(scope="module")
def vectors():
  x = clustered_vectors(N, D, seed=0)
  ids = np.arange(N, dtype=np.int64) * 7 + 5
  q = clustered_vectors(FILTERS * len(SELECTIVITIES), D, seed=1)
  return x, ids, q


def _searcher(kind: str, x: np.ndarray, ids: np.ndarray, folder) -> faiss_searcher.Searcher:
  spec = faiss_index.IndexSpec(type=kind, nlist=32, hnsw_m=16).resolve(len(x), x.shape[1])
  index = faiss_index.new_index(spec, x.shape[1])
  if not index.is_trained:
    index.train(x)
  if spec.nprobe:
    faiss_index.faiss.extract_index_ivf(index).nprobe = spec.nprobe
  index.add_with_ids(x, ids)
  path = str(folder / f"{kind}.faiss")
  faiss_index.save_index(index, path)
  if spec.store_vectors:
    rr.write_vectors(path, lambda: iter([(ids, x)]), x.shape[1])
  return faiss_searcher.load_searcher(path)


@pytest.mark.parametrize("kind, params, exact_max", [
    ("flat", {}, 50),
    ("ivf", {"nprobe": 8}, 50),
    ("hnsw", {"ef_search": 64}, 50),
    ("ivfpq_rerank", {}, 50),
    ("hnsw", {"ef_search": 64}, N),  # every filter scored exactly
], ids=["flat", "ivf", "hnsw", "ivfpq-rerank", "hnsw-exact"])
def test_faiss_filtered_search_equals_brute_force(vectors, tmp_path, kind, params, exact_max):
  """Flat, and every index under a filter small enough for exact scoring: the brute force's
  ids and scores. Approximate indexes under a broader filter: at least the recall of the
  true top 10 that the same index reaches unfiltered (less 0.05): the filter costs nothing."""
  x, ids, q = vectors
  searcher = _searcher(kind, x, ids, tmp_path)
  searcher.exact_max = exact_max  # filters of at most this many documents: exact scoring
  _, unfiltered = searcher.search(q, K, **params)
  baseline = recall(unfiltered, brute_force(q, x, ids, ids, K)[1])
  rng = np.random.default_rng(2)
  for s, selectivity in enumerate(SELECTIVITIES):
    found, reference = [], []
    for f in range(FILTERS):
      allowed = random_allowed(ids, selectivity, rng)
      query = q[s * FILTERS + f:s * FILTERS + f + 1]
      scores, got = searcher.search(query, K, restriction=Restriction.including(allowed),
                                    **params)
      ref_scores, ref = brute_force(query, x, ids, allowed, K)
      assert np.isin(got[got >= 0], allowed).all()  # nothing outside the filter, ever
      assert (got >= 0).sum() == min(K, len(allowed))  # k hits, or every allowed document
      if len(allowed) <= exact_max or kind == "flat":
        assert got[0, :ref.shape[1]].tolist() == ref[0].tolist(), (kind, selectivity)
        np.testing.assert_allclose(scores[0, :ref.shape[1]], ref_scores[0], atol=1e-4, rtol=0)
      found.append(got[0, :ref.shape[1]])
      reference.append(ref[0])
    assert recall(found, reference) >= min(1.0, baseline) - 0.05, (kind, selectivity, baseline)
  if kind == "flat":
    assert baseline == 1.0


def test_an_exclude_list_is_honoured_by_every_index_type(vectors, tmp_path):
  x, ids, q = vectors
  excluded = random_allowed(ids, 0.5, np.random.default_rng(3))
  kept = np.setdiff1d(ids, excluded)
  for kind in ("flat", "ivf", "hnsw", "ivfpq_rerank"):
    searcher = _searcher(kind, x, ids, tmp_path)
    _, got = searcher.search(q[:8], K, restriction=Restriction.excluding(excluded))
    assert not np.isin(got, excluded).any() and (got >= 0).all(), kind
    if kind == "flat":
      assert got.tolist() == brute_force(q[:8], x, ids, kept, K)[1].tolist()


def test_an_ivf_index_without_vectors_scores_a_selective_filter_over_every_list(vectors,
                                                                                tmp_path):
  x, ids, q = vectors
  searcher = _searcher("ivf", x, ids, tmp_path)  # nprobe 1, no float vectors beside it
  assert not searcher.can_score_exactly
  allowed = random_allowed(ids, 0.01, np.random.default_rng(4))
  _, got = searcher.search(q[:5], K, restriction=Restriction.including(allowed))
  assert got.tolist() == brute_force(q[:5], x, ids, allowed, K)[1].tolist()


# ---------------------------------------------------------------------------------------------
# Metadata filters resolve to what a scan of the fields finds.
# ---------------------------------------------------------------------------------------------


def _documents(n: int, seed: int) -> list[tuple[int, dict]]:
  rng = np.random.default_rng(seed)
  sections = ["", "History", "History › Early years", "History › Late", "Historiography",
              "Geography", "Geography › Rivers"]
  docs = []
  for i in range(n):
    fields = {"page_id": int(rng.integers(0, 40)), "title": f"T{rng.integers(0, 30)}",
              "section": sections[rng.integers(0, len(sections))],
              "wiki": ["enwiki", "ltgwiki"][rng.integers(0, 2)],
              "year": int(rng.integers(1990, 2000)), "score": float(rng.random() // 0.25),
              "featured": bool(rng.integers(0, 2))}
    if rng.random() < 0.2:
      del fields["wiki"]  # a document without a value for a field
    docs.append((i * 11 + 2, fields))
  return docs


def _matches(fields: dict, filt: DocFilter, doc_id: int) -> bool:
  for name, values in filt.fields:
    if name not in fields or not any(fields[name] == v and type(fields[name]) is type(
        bundle_metadata.canonical(bundle_metadata.type_of(fields[name]), v)) for v in values):
      return False
  if filt.section_prefix is not None:
    section = fields.get("section", "")
    if section != filt.section_prefix and not section.startswith(filt.section_prefix + " › "):
      return False
  if filt.ids is not None and doc_id not in filt.ids:
    return False
  return filt.exclude_ids is None or doc_id not in filt.exclude_ids


def test_metadata_filters_resolve_to_what_a_scan_finds(tmp_path):
  docs = _documents(500, seed=5)
  writer = bundle_metadata.MetadataWriter()
  for doc_id, fields in reversed(docs):  # any order in: rows come out by id
    writer.add(doc_id, fields)
  infos = writer.write(str(tmp_path), order=tuple(bundle_metadata.BUILTIN_FIELDS))
  assert [f.name for f in infos] == ["page_id", "title", "section", "wiki", "featured",
                                     "score", "year"]
  assert {f.name: f.type for f in infos}["score"] == "float"
  metadata = bundle_metadata.Metadata.open(str(tmp_path))
  resolver = FilterResolver(metadata, lambda: metadata.ids, {f.name: f.type for f in infos})
  rng = np.random.default_rng(6)
  all_ids = [d for d, _ in docs]
  cases = [{"fields": {"wiki": "enwiki"}}, {"section_prefix": "History"},
           {"section_prefix": "History › Early years"}, {"fields": {"score": 0}},
           {"fields": {"featured": True, "year": [1991, 1995]}, "exclude_ids": all_ids[:50]},
           {"fields": {"title": ["T1", "T2", "nobody"]}, "ids": all_ids[::3]},
           {"exclude_ids": all_ids[5:9]}, {"ids": all_ids[:3]}]
  for _ in range(40):
    cases.append({"fields": {"page_id": [int(v) for v in rng.integers(0, 40, 3)],
                             "wiki": "ltgwiki"}, "section_prefix": "Geography"})
  for case in cases:
    filt = DocFilter.from_json(case)
    resolver.check(filt)
    restriction = resolver.restriction(filt)
    expected = [d for d, fields in docs if _matches(fields, filt, d)]
    assert np.asarray(all_ids)[restriction.allows(np.asarray(all_ids))].tolist() == \
        sorted(expected), case
  # "History" takes its subsections, not "Historiography".
  history = resolver.restriction(DocFilter(section_prefix="History"))
  assert {docs[(i - 2) // 11][1]["section"] for i in history.include} == {
      "History", "History › Early years", "History › Late"}


@pytest.mark.parametrize("value, message", [
    ({"fields": {"colour": "red"}}, "'filter.fields.colour': the bundle has no field 'colour' "
                                    "(its fields: page_id, section, title, year)"),
    ({"fields": {"year": "1991"}}, "'filter.fields.year' is int, got str \"1991\""),
    ({"fields": {"year": True}}, "'filter.fields.year' is int, got bool true"),
    ({"fields": {"title": [1]}}, "'filter.fields.title' is str, got int 1"),
    ({"ids": [2, 999]}, "'filter.ids': 1 id(s) not in the bundle (first: 999)"),
    ({"exclude_ids": [999]}, "'filter.exclude_ids': 1 id(s) not in the bundle"),
], ids=["unknown-field", "wrong-type", "bool-for-int", "int-for-str", "ids", "exclude-ids"])
def test_a_filter_the_bundle_cannot_honour_is_refused_naming_the_field(tmp_path, value,
                                                                       message):
  writer = bundle_metadata.MetadataWriter()
  writer.add(2, {"page_id": 1, "title": "A", "section": "", "year": 1991})
  infos = writer.write(str(tmp_path))
  metadata = bundle_metadata.Metadata.open(str(tmp_path))
  resolver = FilterResolver(metadata, lambda: metadata.ids, {f.name: f.type for f in infos})
  with pytest.raises(ValueError) as caught:
    resolver.check(DocFilter.from_json(value))
  assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("value, message", [
    ({"field": {"a": 1}}, "'filter' has unknown key(s) ['field']"),
    ([1], "'filter' must be an object"),
    ({}, "'filter' is empty"),
    ({"fields": {"a": []}}, "'filter.fields.a' is an empty list"),
    ({"fields": {"a": {"b": 1}}}, "'filter.fields.a' must be a string, number or boolean"),
    ({"fields": {"a": [1, [2]]}}, "'filter.fields.a'[1] must be a string, number or boolean"),
    ({"section_prefix": " "}, "'filter.section_prefix' must be a non-empty string"),
    ({"ids": [1, "2"]}, "'filter.ids'[1] must be an integer document id, got \"2\""),
    ({"ids": 3}, "'filter.ids' must be a list of document ids"),
    ({"exclude_ids": [2 ** 64]}, "'filter.exclude_ids'[0] is out of the int64 range"),
], ids=["unknown-key", "not-object", "empty", "empty-list", "object-value", "nested-list",
        "blank-prefix", "string-id", "ids-not-list", "huge-id"])
def test_a_filter_of_the_wrong_shape_is_refused_in_one_line(value, message):
  with pytest.raises(ValueError) as caught:
    DocFilter.from_json(value)
  assert message in str(caught.value) and "\n" not in str(caught.value)


# ---------------------------------------------------------------------------------------------
# BM25 and the hybrid under a restriction.
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bm25(tmp_path_factory):
  path = str(tmp_path_factory.mktemp("lucene") / "index")
  lucene.build_index(iter(corpus()), path, threads=1)
  searcher = lucene.Bm25Searcher(path)
  yield searcher
  searcher.close()


def test_bm25_filtered_search_is_the_unfiltered_ranking_of_the_allowed(bm25):
  ids = np.array([i * 3 + 1 for i in range(600)], dtype=np.int64)
  texts = queries(20)
  everything = bm25.search(texts, 600)  # every matching document, Lucene's order
  rng = np.random.default_rng(7)
  compared = 0
  for selectivity in SELECTIVITIES[1:]:
    for _ in range(5):
      restriction = Restriction.including(random_allowed(ids, selectivity, rng),
                                          exclude=random_allowed(ids, 0.05, rng))
      for text, full, got in zip(texts, everything,
                                 bm25.search(texts, K, SearchParams(restriction=restriction))):
        keep = restriction.allows(np.asarray(full.candidate_ids, dtype=np.int64))
        want = np.asarray(full.candidate_ids)[keep][:K].tolist()
        assert list(got.candidate_ids) == want, (text, selectivity)
        # Anserini rounds scores to 1e-4 and nudges ties by 1e-6 within the list it returns.
        np.testing.assert_allclose(got.scores, np.asarray(full.scores)[keep][:K], atol=2e-4)
        compared += len(want)
  excluded = ids[:300]
  for full, got in zip(everything, bm25.search(texts, K, SearchParams(
      restriction=Restriction.excluding(excluded)))):
    keep = ~np.isin(np.asarray(full.candidate_ids, dtype=np.int64), excluded)
    assert list(got.candidate_ids) == np.asarray(full.candidate_ids)[keep][:K].tolist()
  assert compared > 300


def test_the_hybrid_fuses_the_filtered_lists(bm25):
  x = clustered_vectors(600, 8, seed=8)
  ids = np.array([i * 3 + 1 for i in range(600)], dtype=np.int64)
  index = faiss_index.new_index(faiss_index.IndexSpec(), 8)
  index.add_with_ids(x, ids)
  dense = DenseSearcher(faiss_searcher.Searcher([faiss_searcher.Part("mem", index, None)]),
                        model_key="m")
  texts = queries(10)
  batch = Queries(tuple(texts), {"m": clustered_vectors(10, 8, seed=9)})
  hybrid = FusedSearcher(bm25, dense, 0.4, depth=50)
  restriction = Restriction.including(random_allowed(ids, 0.1, np.random.default_rng(10)))
  params = SearchParams(restriction=restriction)
  got = hybrid.search(batch, K, params)
  sparse, dense_lists = bm25.search(batch, 50, params), dense.search(batch, 50, params)
  for n, r in enumerate(got):
    assert set(r.candidate_ids) <= set(restriction.include.tolist())
    want = fusion.interpolate({"q": sparse[n]}, {"q": dense_lists[n]}, 0.4, 50)["q"]
    assert r.candidate_ids == want.candidate_ids[:K]
    # and the dense side is the brute force of the filter
    _, ref = brute_force(batch.vectors["m"][n:n + 1], x, ids, restriction.include, 50)
    assert list(dense_lists[n].candidate_ids) == ref[0].tolist()


# ---------------------------------------------------------------------------------------------
# Through a bundle: Python, CLI, HTTP, format 2, batching.
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def retriever(serving_bundle):
  r = Retriever.load(serving_bundle["bundle"])
  yield r
  r.close()


def test_a_bundle_stores_its_documents_fields(retriever, serving_bundle):
  assert {f.name: f.type for f in retriever.manifest.metadata.fields} == {
      "title": "str", "section": "str", "source": "str"}
  candidates = {c["candidate_id"]: c for c in
                contracts.codecs.read_candidates(serving_bundle["reqa"])}
  metadata = bundle_metadata.Metadata.open(serving_bundle["bundle"])
  assert sorted(candidates) == metadata.ids.tolist()
  for row, doc_id in enumerate(metadata.ids.tolist()):
    assert metadata.row_fields(row) == {"title": candidates[doc_id]["title"], "section": "",
                                        "source": "squad"}


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_a_bundle_search_under_a_filter_is_the_unfiltered_one_without_the_others(
    retriever, mode):
  question = "Who designed the tower in Galt?"
  everything = retriever.search(question, k=48, mode=mode)
  for titles in (["Galt"], ["Brisk", "Dunmere"]):
    got = retriever.search(question, k=5, mode=mode, filter={"fields": {"title": titles}})
    assert got and {h.title for h in got} <= set(titles)
    if mode != "hybrid":  # a hybrid renormalises its (filtered) sides
      assert [h.id for h in got] == [h.id for h in everything if h.title in titles][:5]
  ids = [h.id for h in everything[:12]]
  got = retriever.search(question, k=5, mode=mode, filter={"ids": ids[::2],
                                                           "exclude_ids": ids[:2]})
  assert {h.id for h in got} <= set(ids[2::2])


def test_requests_that_share_a_filter_share_one_search(retriever):
  calls = []
  dense = retriever.searchers["dense"]
  original = dense.search

  def counted(queries_, k, params=SearchParams()):
    calls.append((len(queries_), params.restriction))
    return original(queries_, k, params)
  dense.search = counted
  try:
    galt = {"fields": {"title": "Galt"}}
    results = retriever.search_requests([
        SearchRequest(("tower", "castle"), 3, "dense", filter=galt),
        SearchRequest(("market",), 5, "dense", filter=dict(galt)),
        SearchRequest(("harbour",), 3, "dense", filter={"fields": {"title": "Brisk"}})])
  finally:
    dense.search = original
  assert sorted(n for n, _ in calls) == [1, 3]  # the two Galt requests in one call
  assert [len(r) for r in results] == [2, 1, 1]
  assert all(h.title == "Galt" for r in results[:2] for hits in r for h in hits)


def test_query_takes_a_filter_and_refuses_a_bad_one(serving_bundle, tmp_path, capsys):
  bundle = serving_bundle["bundle"]
  assert cli.main(["query", bundle, "Who designed the tower?", "--k", "3", "--filter",
                   '{"fields": {"title": "Brisk"}}']) == 0
  out = capsys.readouterr().out.splitlines()
  assert [line.split()[-1] for line in out[1::2]] == ["Brisk"] * 3
  assert cli.main(["query", bundle, "q", "--filter", '{"fields": {"colour": "red"}}']) == 1
  assert capsys.readouterr().err.strip().endswith(
      "'filter.fields.colour': the bundle has no field 'colour' (its fields: section, source, "
      "title)")
  assert cli.main(["query", bundle, "q", "--filter", "{not json"]) == 2
  queries_file = tmp_path / "q.jsonl"
  queries_file.write_text('{"id": "a", "query": "tower", "filter": {"fields": {"title": '
                          '"Galt"}}}\n{"id": "b", "query": "tower"}\n', encoding="utf-8")
  out_file = tmp_path / "hits.jsonl"
  assert cli.main(["query", bundle, "--jsonl", str(queries_file), "--out", str(out_file),
                   "--filter", '{"fields": {"title": "Brisk"}}']) == 0
  lines = [json.loads(line) for line in out_file.read_text().splitlines()]
  assert [{h["title"] for h in line["hits"]} for line in lines] == [{"Galt"}, {"Brisk"}]
  queries_file.write_text('{"query": "tower", "filter": {"fields": {"nope": 1}}}\n')
  assert cli.main(["query", bundle, "--jsonl", str(queries_file)]) == 1
  assert "the bundle has no field 'nope'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def client(serving_bundle):
  app = app_lib.create_app(app_lib.ServeConfig(bundle=serving_bundle["bundle"]),
                           load_in_background=False)
  with TestClient(app, base_url="http://127.0.0.1") as c:
    yield c


def test_http_search_takes_a_filter(client, retriever):
  body = {"query": "Who designed the tower?", "k": 4, "mode": "hybrid",
          "filter": {"fields": {"title": ["Galt", "Brisk"]}}}
  response = client.post("/v1/search", json=body)
  assert response.status_code == 200
  got = response.json()
  assert got["filter"] == {"fields": {"title": ["Galt", "Brisk"]}}
  expected = retriever.search(body["query"], k=4, mode="hybrid", filter=body["filter"])
  assert [h["id"] for h in got["hits"]] == [h.id for h in expected]
  response = client.get("/v1/search", params={"q": "tower", "k": 2,
                                              "filter": '{"fields": {"title": "Galt"}}'})
  assert response.status_code == 200 and {h["title"] for h in response.json()["hits"]} == {
      "Galt"}


@pytest.mark.parametrize("filt, message", [
    ({"fields": {"colour": "red"}}, "'filter.fields.colour': the bundle has no field 'colour'"),
    ({"fields": {"title": 3}}, "'filter.fields.title' is str, got int 3"),
    ({"feilds": {}}, "'filter' has unknown key(s) ['feilds']"),
    ({"ids": [123]}, "'filter.ids': 1 id(s) not in the bundle (first: 123)"),
    ("{\"fields\": 1", "'filter' is not JSON"),
    (7, "'filter' must be an object"),
], ids=["unknown-field", "wrong-type", "unknown-key", "unknown-id", "not-json", "not-object"])
def test_http_refuses_a_bad_filter_with_a_400_naming_the_field(client, filt, message):
  response = client.post("/v1/search", json={"query": "tower", "filter": filt})
  assert response.status_code == 400
  assert message in response.json()["error"]


def _as_format_2(bundle: str, out: str) -> str:
  """A copy of `bundle` as format 2 wrote it: no metadata/, a v2 manifest (re-signed)."""
  shutil.copytree(bundle, out)
  shutil.rmtree(os.path.join(out, bundle_metadata.METADATA_DIR))
  manifest = bundle_manifest.read(out)
  import dataclasses
  v2 = dataclasses.replace(manifest, format_version=2, metadata=None).signed(out)
  v2.write(out)
  return out


def test_a_format_2_bundle_loads_searches_alike_and_filters_by_ids(serving_bundle, retriever,
                                                                   tmp_path):
  path = _as_format_2(serving_bundle["bundle"], str(tmp_path / "v2"))
  text = open(bundle_manifest.manifest_path(path), encoding="utf-8").read()
  assert '"format_version": 2' in text and '"metadata"' not in text and "tombstones" not in text
  old = Retriever.load(path)
  try:
    question = "Who designed the tower in Galt?"
    for mode in ("dense", "bm25", "hybrid"):
      assert [h.id for h in old.search(question, k=10, mode=mode)] == \
          [h.id for h in retriever.search(question, k=10, mode=mode)]
    ids = [h.id for h in retriever.search(question, k=20)][5:15]
    assert {h.id for h in old.search(question, k=5, filter={"ids": ids})} <= set(ids)
    with pytest.raises(ValueError, match=r"stores no document fields \(bundle format 2\)"):
      old.search(question, filter={"fields": {"title": "Galt"}})
  finally:
    old.close()
