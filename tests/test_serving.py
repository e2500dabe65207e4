"""The retriever bundle and its Python API (deploy.serving): what `twotower bundle` writes,
what `Retriever.load` refuses, and that every mode answers exactly as the batch path does
(`embed` -> `index` -> `search`, `bm25`, `fuse`) on a bundle the tests build."""

from __future__ import annotations

import json
import os
import shutil

import faiss
import numpy as np
import pytest

from twotower import cli
from twotower.core import contracts
from twotower.core.contracts import bundle_manifest
from twotower.deploy.serving import BundleError, Retriever
from twotower.deploy.bundling import bundle
from twotower.testing import batch_path as check
from twotower.deploy.serving import store as store_lib
from twotower.eval import fusion
from twotower.eval import runs as runs_lib
from twotower.core.contracts import codecs
from twotower.pipelines import embed
from bundle_manifest_fixtures import write_passages

SPLIT = "test-80"


@pytest.fixture(scope="module")
def retriever(serving_bundle):
  r = Retriever.load(serving_bundle["bundle"], verify="sha256")
  yield r
  r.close()


@pytest.fixture(scope="module")
def questions(serving_bundle):
  return [(q.question_id, q.question)
          for q in codecs.read_questions(serving_bundle["reqa"], SPLIT)]


@pytest.fixture(scope="module")
def batch_path(serving_bundle, tmp_path_factory):
  """The batch path's runs over the test split, each stage from its own inputs."""
  weight = json.load(open(os.path.join(serving_bundle["bundle"], "manifest.json"))
                     )["hybrid"]["weight"]
  runs, _ = check.batch_path_runs(serving_bundle["model"], serving_bundle["reqa"], SPLIT,
                                  weight, str(tmp_path_factory.mktemp("batch")))
  return runs


# ---------------------------------------------------------------------------------------------
# What the bundle holds.
# ---------------------------------------------------------------------------------------------


def test_bundle_holds_every_part_with_a_manifest_that_describes_it(serving_bundle):
  path = serving_bundle["bundle"]
  candidates = codecs.read_candidates(serving_bundle["reqa"])
  manifest = json.load(open(os.path.join(path, contracts.BUNDLE_MANIFEST_FILE)))
  # The parts, the bundle's manifest, and the stage's ownership record (twotower.core.outputs).
  assert sorted(os.listdir(path)) == sorted([contracts.BUNDLE_MANIFEST_FILE,
                                             contracts.MANIFEST_FILE, *contracts.BUNDLE_PARTS,
                                             "metadata"])
  assert manifest["format_version"] == bundle_manifest.FORMAT_VERSION
  assert manifest["documents"]["count"] == manifest["index"]["vectors"] == \
      manifest["bm25"]["documents"] == len(candidates) == 48
  assert manifest["model"]["embedding_dim"] == manifest["index"]["dim"] == 64
  assert manifest["index"]["factory"] == "Flat"
  assert manifest["versions"]["faiss-cpu"] and manifest["versions"]["tensorflow"]
  hybrid = manifest["hybrid"]
  assert hybrid["tuned_on"] == "validation-80" and hybrid["questions"] > 0
  assert hybrid["weight"] in fusion.WEIGHT_GRID
  # Every file is listed with its size and checksum; no temporary folder is left beside it.
  listed = {os.path.relpath(os.path.join(root, f), path)
            for root, _, names in os.walk(path) for f in names} - {
                contracts.BUNDLE_MANIFEST_FILE, contracts.MANIFEST_FILE}
  assert set(manifest["files"]) == listed
  assert not [n for n in os.listdir(os.path.dirname(path)) if ".tmp-" in n]


def test_store_returns_each_candidate_with_its_text(serving_bundle):
  store = store_lib.PassageStore.open(
      contracts.bundle_path(serving_bundle["bundle"], contracts.BUNDLE_STORE_FILE))
  candidates = {c["candidate_id"]: c for c in codecs.read_candidates(serving_bundle["reqa"])}
  got = store.get(list(candidates) + [12345])
  assert set(got) == set(candidates)  # an unknown id is simply absent
  for cid, c in candidates.items():
    assert (got[cid].title, got[cid].text, got[cid].sentence) == (
        c["title"], c["passage"], c["sentence"])
  store.close()


def test_tuned_weight_is_what_fuse_chooses_on_the_same_split(serving_bundle, retriever):
  from twotower.eval import evaluate
  (split,) = evaluate.load_splits(serving_bundle["reqa"], ["validation-80"])
  dense, sparse = retriever.runs([(q.question_id, q.question) for q in split.questions], 100)
  assert fusion.tune_weight(sparse, dense, split).weight == retriever.weight


# ---------------------------------------------------------------------------------------------
# Same answers as the batch path.
# ---------------------------------------------------------------------------------------------


def _assert_same(hits, ranked: runs_lib.Ranked, tolerance: float):
  assert [h.id for h in hits] == list(ranked.candidate_ids)
  np.testing.assert_allclose([h.score for h in hits], ranked.scores, atol=tolerance, rtol=0)


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_each_mode_equals_the_batch_path(retriever, questions, batch_path, mode):
  hits = retriever.search([q for _, q in questions], k=100, mode=mode)
  assert len(hits) == len(questions) > 5
  for (qid, _), per_query in zip(questions, hits):
    # BM25 and fused runs are TREC files (scores written to 6 decimals).
    _assert_same(per_query, batch_path[mode][qid], 1e-5)


def test_check_reports_full_agreement(retriever, questions, batch_path):
  report = check.compare(retriever, batch_path, questions, k=100)
  assert [(a.mode, a.questions, a.same_ids, a.same_up_to_ties) for a in report] == [
      (m, len(questions), len(questions), len(questions)) for m in ("dense", "bm25", "hybrid")]
  assert max(a.max_score_diff for a in report) < 1e-5


def test_near_ties_may_swap_but_nothing_else():
  assert check.same_up_to_ties([1, 2, 3], [0.9, 0.5000001, 0.5], [1, 3, 2], [0.9, 0.5, 0.5])
  assert not check.same_up_to_ties([1, 2, 3], [0.9, 0.6, 0.5], [1, 3, 2], [0.9, 0.6, 0.5])
  assert not check.same_up_to_ties([1, 2, 4], [0.9, 0.5, 0.45], [1, 2, 3], [0.9, 0.5, 0.4])
  # The last score's tie group may hold other ids (a tie at the cut-off).
  assert check.same_up_to_ties([1, 2, 4], [0.9, 0.5, 0.5], [1, 2, 3], [0.9, 0.5, 0.5])


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_a_single_query_equals_the_same_query_in_a_batch(retriever, questions, mode):
  texts = [q for _, q in questions[:6]]
  batch = retriever.search(texts, k=10, mode=mode)
  for text, in_batch in zip(texts, batch):
    single = retriever.search(text, k=10, mode=mode)
    assert [h.id for h in single] == [h.id for h in in_batch]
    np.testing.assert_allclose([h.score for h in single], [h.score for h in in_batch],
                               atol=1e-6, rtol=0)


def test_hits_carry_the_candidates_text(retriever, serving_bundle):
  candidates = {c["candidate_id"]: c for c in codecs.read_candidates(serving_bundle["reqa"])}
  hits = retriever.search("When was the castle of Brisk built?", k=3, mode="bm25")
  assert [h.rank for h in hits] == [1, 2, 3]
  top = hits[0]
  assert top.title == "Brisk" and "castle of Brisk was built" in top.sentence
  assert top.text == candidates[top.id]["passage"] and top.page_id is None


def test_k_beyond_the_corpus_returns_every_document_and_no_filler(retriever):
  for mode in ("dense", "hybrid"):
    hits = retriever.search("bridge", k=500, mode=mode)
    assert len(hits) == retriever.size == 48
    assert len({h.id for h in hits}) == 48 and all(h.id >= 0 for h in hits)


def test_hybrid_survives_a_side_that_finds_nothing(retriever):
  stopwords = "the of and"
  assert retriever.search(stopwords, k=10, mode="bm25") == []
  dense = retriever.search(stopwords, k=10, mode="dense")
  hybrid = retriever.search(stopwords, k=10, mode="hybrid")
  assert [h.id for h in hybrid] == [h.id for h in dense]  # the dense side alone, rescaled


def test_bad_requests_are_value_errors(retriever):
  with pytest.raises(ValueError, match="unknown mode"):
    retriever.search("q", mode="sparse")
  with pytest.raises(ValueError, match="k must be >= 1"):
    retriever.search("q", k=0)
  with pytest.raises(ValueError, match="empty"):
    retriever.search(["ok", "  "])
  for nothing in ("\u0000", "\u200b\t", "\x00\x07"):  # would rank every document on nothing
    with pytest.raises(ValueError, match="no searchable text"):
      retriever.search(nothing)
  with pytest.raises(ValueError, match="nprobe is for IVF indexes; this is IndexFlat"):
    retriever.search("q", nprobe=4)


def test_per_request_nprobe_leaves_the_shared_index_alone(serving_bundle, tmp_path):
  out = str(tmp_path / "ivf")
  from twotower.eval import faiss_index
  bundle.run(bundle.BundleConfig(model=serving_bundle["model"], reqa=serving_bundle["reqa"],
                                 out=out, index=faiss_index.IndexSpec(type="ivf", nlist=4),
                                 weight=0.5))
  r = Retriever.load(out)
  try:
    ivf = faiss.extract_index_ivf(r._index.parts[0].index)  # pylint: disable=protected-access
    assert ivf.nlist == 4 and ivf.nprobe == 1
    queries = ["Who designed the tower in Galt?", "When was the river of Arlen built?"]
    everything = r.search(queries, k=10, nprobe=4)  # every list visited: exact
    assert ivf.nprobe == 1  # the request's setting never touched the shared index
  finally:
    r.close()
  flat = Retriever.load(serving_bundle["bundle"])
  try:
    for a, b in zip(everything, flat.search(queries, k=10)):
      assert [h.id for h in a] == [h.id for h in b]
  finally:
    flat.close()


def test_a_compressed_bundle_reranks_exactly_from_its_vectors(serving_bundle, tmp_path):
  from twotower.eval import faiss_index
  out = str(tmp_path / "pq")
  bundle.run(bundle.BundleConfig(
      model=serving_bundle["model"], reqa=serving_bundle["reqa"], out=out, weight=0.5,
      index=faiss_index.IndexSpec(type="ivfpq_rerank", nlist=2, train_size=48)))
  assert any(name.endswith(".vectors.npy") for name in os.listdir(out))
  compressed, flat = Retriever.load(out), Retriever.load(serving_bundle["bundle"])
  try:
    assert ",PQ" in compressed.manifest.index.factory  # compressed codes, re-ranked
    queries = ["Who designed the tower in Galt?", "When was the river of Arlen built?"]
    # Every list visited and every document in the short list (48 <= 10 x 4 x ...): exact.
    for a, b in zip(compressed.search(queries, k=10, nprobe=2), flat.search(queries, k=10)):
      assert [h.id for h in a] == [h.id for h in b]
      np.testing.assert_allclose([h.score for h in a], [h.score for h in b], atol=1e-5)
  finally:
    compressed.close()
    flat.close()


# ---------------------------------------------------------------------------------------------
# Bundles that must be refused, by the part that is wrong.
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def broken(serving_bundle, tmp_path):
  path = str(tmp_path / "bundle")
  shutil.copytree(serving_bundle["bundle"], path)
  return path


def _manifest_edit(path, fn):
  manifest_path = os.path.join(path, contracts.BUNDLE_MANIFEST_FILE)
  manifest = json.load(open(manifest_path))
  fn(manifest)
  json.dump(manifest, open(manifest_path, "w"))


def test_a_missing_part_is_refused_by_name(broken):
  os.remove(os.path.join(broken, contracts.BUNDLE_INDEX_FILE))
  with pytest.raises(BundleError, match="part 'index.faiss' is missing"):
    Retriever.load(broken)


def test_no_manifest_is_refused(broken):
  os.remove(os.path.join(broken, contracts.BUNDLE_MANIFEST_FILE))
  with pytest.raises(BundleError, match="part 'manifest.json' is missing"):
    Retriever.load(broken)


def test_a_truncated_part_is_refused_by_size(broken):
  store = os.path.join(broken, contracts.BUNDLE_STORE_FILE)
  with open(store, "r+b") as f:
    f.truncate(os.path.getsize(store) // 2)
  with pytest.raises(BundleError, match="part 'store.sqlite'.*bytes, the manifest says"):
    Retriever.load(broken)


def test_a_changed_part_is_refused_by_checksum(broken):
  index = os.path.join(broken, contracts.BUNDLE_INDEX_FILE)
  data = bytearray(open(index, "rb").read())
  data[-1] ^= 0xFF
  open(index, "wb").write(bytes(data))
  Retriever.load(broken, verify="size").close()  # same size: only the checksum tells
  with pytest.raises(BundleError, match="part 'index.faiss'.*checksum"):
    Retriever.load(broken, verify="sha256")


def test_parts_that_disagree_on_dims_are_refused(broken):
  _manifest_edit(broken, lambda m: m["model"].update(embedding_dim=128))
  with pytest.raises(BundleError, match="part 'query_encoder' embeds in 64 dims.*128"):
    Retriever.load(broken)


def test_parts_that_disagree_on_counts_are_refused(broken):
  _manifest_edit(broken, lambda m: m["documents"].update(count=47))
  with pytest.raises(BundleError, match="part 'index.faiss' holds 48 vectors"):
    Retriever.load(broken)


def test_another_format_version_is_refused(broken):
  _manifest_edit(broken, lambda m: m.update(format_version=99))
  with pytest.raises(BundleError, match="format version 99.*rebuild"):
    Retriever.load(broken)


def test_bundle_into_a_folder_of_another_bundle_run_is_refused(serving_bundle):
  with pytest.raises(ValueError, match=r"holds a `twotower bundle` run with other settings "
                                       r"\(tune_split: 'validation-80' -> ''; weight: None -> "
                                       r"0.5\); give another --out, or --overwrite"):
    bundle.run(bundle.BundleConfig(model=serving_bundle["model"], reqa=serving_bundle["reqa"],
                                   out=serving_bundle["bundle"], weight=0.5))


def test_embeddings_of_other_documents_are_refused(serving_bundle, tmp_path):
  # Embeddings of other documents (three passages) for 48 candidates: refused, nothing left.
  embeddings = str(tmp_path / "emb")
  embed.run(embed.EmbedConfig(model=serving_bundle["model"], out=embeddings,
                              kind="passages", path=write_passages(tmp_path)))
  with pytest.raises(ValueError, match="vectors for 48 documents"):
    bundle.run(bundle.BundleConfig(model=serving_bundle["model"], reqa=serving_bundle["reqa"],
                                   out=str(tmp_path / "b"), embeddings=embeddings, weight=0.5))
  assert sorted(os.listdir(tmp_path)) == ["emb", "pairs"]


# ---------------------------------------------------------------------------------------------
# `twotower query`.
# ---------------------------------------------------------------------------------------------


def test_query_prints_a_table_of_hits(serving_bundle, capsys):
  code = cli.main(["query", serving_bundle["bundle"], "Who designed the tower in Galt?",
                   "--mode", "hybrid", "--k", "3"])
  out = capsys.readouterr().out.splitlines()
  assert code == 0
  assert out[0] == "hybrid top 3 for: Who designed the tower in Galt?"
  assert len(out) == 1 + 2 * 3 and out[1].lstrip().startswith("1 ")


def test_query_jsonl_writes_a_hit_list_per_query(serving_bundle, retriever, tmp_path, capsys):
  queries = tmp_path / "q.jsonl"
  queries.write_text('{"id": "a", "query": "When was the market of Dunmere built?"}\n'
                     '\n"Who designed the castle in Brisk?"\nplain text about a bridge\n')
  out = tmp_path / "hits.jsonl"
  assert cli.main(["query", serving_bundle["bundle"], "--jsonl", str(queries), "--out",
                   str(out), "--k", "5", "--mode", "bm25"]) == 0
  lines = [json.loads(line) for line in out.read_text().splitlines()]
  assert [line["id"] for line in lines] == ["a", "3", "4"]
  for line in lines:
    expected = retriever.search(line["query"], k=5, mode="bm25")
    assert [h["id"] for h in line["hits"]] == [h.id for h in expected]
  assert "3 queries, bm25 top 5" in capsys.readouterr().out


def test_query_errors_are_one_line(serving_bundle, tmp_path, capsys):
  assert cli.main(["query", str(tmp_path), "q"]) == 1
  assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
      "twotower query: error:")
  assert cli.main(["query", serving_bundle["bundle"], "q", "--k", "0"]) == 2
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"query": "ok"}\n{"id": 2}\n')
  assert cli.main(["query", serving_bundle["bundle"], "--jsonl", str(bad)]) == 1
  assert f"{bad}:2: no query" in capsys.readouterr().err
