"""Vectors carry their model (twotower.core.fingerprints): `embed` and `index` record the model
and the ids of their vectors (`embed` also the digest of the rows it embedded), `index`,
`search` and `bundle` refuse vectors of another model (two stand-in towers with different
seeds), wherever the record lives (a bundle's `index.faiss`: the bundle's manifest), and
vectors no record names unless taken unchecked (`--allow_unchecked_vectors`; `bundle`: never);
`bundle` refuses ids that are not the documents' (shifted by 7) and vectors of the same ids
made from other text; and `Retriever.load` refuses, by default, a same-size part of another
bundle, a garbled store and manifests it cannot read, each with one line naming the file."""

from __future__ import annotations

import json
import os
import random
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from twotower import cli
from twotower.core import contracts
from twotower.core import fingerprints
from twotower.deploy.serving import BundleError, Retriever
from twotower.deploy.bundling import bundle
from twotower.eval import embeddings as embeddings_lib
from twotower.eval import index as index_stage
from twotower.eval import search as search_stage
from twotower.pipelines import embed
from twotower.testing import embed_standin


def _embed(model: str, out: str, kind: str, path: str) -> str:
  embed.run(embed.EmbedConfig(model=model, out=out, kind=kind, path=path))
  return out


@pytest.fixture(scope="module")
def vectors(serving_bundle, tmp_path_factory):
  """Model A = the serving bundle's tower, model B = the same architecture, another seed;
  each one's embeddings of the bundle's candidates, B's of the test questions, A's index."""
  root = tmp_path_factory.mktemp("fingerprints")
  reqa = serving_bundle["reqa"]
  model_a = serving_bundle["model"]
  model_b = embed_standin.build_standin_savedmodel(
      str(root / "model_b"), embed_standin.StandinConfig(buckets=1000, hidden=32, seed=1))
  candidates = contracts.candidates_path(reqa)
  paths = {"root": str(root), "reqa": reqa, "a": model_a, "b": model_b,
           "emb_a": _embed(model_a, str(root / "emb_a"), "candidates", candidates),
           "emb_b": _embed(model_b, str(root / "emb_b"), "candidates", candidates),
           "q_a": _embed(model_a, str(root / "q_a"), "questions",
                         contracts.questions_path(reqa, "test-80")),
           "q_b": _embed(model_b, str(root / "q_b"), "questions",
                         contracts.questions_path(reqa, "test-80"))}
  paths["index_a"] = str(root / "index_a" / "index.faiss")
  index_stage.run(index_stage.IndexConfig(embeddings=paths["emb_a"], out=paths["index_a"]))
  return paths


def _candidate_ids(reqa: str) -> list[int]:
  return pq.read_table(contracts.candidates_path(reqa)).column("candidate_id").to_pylist()


def _unrecorded_copy(source: str, folder) -> str:
  """The embedding shards of `source` in `folder`, without a vectors.json: vectors in the
  embedding schema that no record describes (another tool, an older twotower)."""
  folder.mkdir()
  for f in os.listdir(source):
    if f.endswith(".parquet"):
      shutil.copy(os.path.join(source, f), folder / f)
  return str(folder)


# ---------------------------------------------------------------------------------------------
# Fingerprints and records.
# ---------------------------------------------------------------------------------------------


def test_a_copy_of_an_export_matches_and_another_seed_does_not(vectors, tmp_path):
  copy = str(tmp_path / "elsewhere")
  shutil.copytree(vectors["a"], copy)
  assert fingerprints.model_fingerprint(copy) == fingerprints.model_fingerprint(vectors["a"])
  assert fingerprints.model_fingerprint(vectors["b"]) != \
      fingerprints.model_fingerprint(vectors["a"])


def test_id_digest_is_of_the_set_not_the_order_or_the_count():
  assert fingerprints.ids_record([3, 1, 2]) == fingerprints.ids_record(np.array([1, 2, 3]))
  assert fingerprints.ids_record([1, 2, 3]) != fingerprints.ids_record([8, 9, 10])
  assert fingerprints.ids_record(["q2", "q1"]) == fingerprints.ids_record(["q1", "q2"])
  assert fingerprints.ids_record([1, 2, 3])["count"] == 3


def test_embed_and_index_record_the_model_and_the_ids(vectors):
  ids = fingerprints.ids_record(_candidate_ids(vectors["reqa"]))
  model_a = {"path": os.path.abspath(vectors["a"]),
             "fingerprint": fingerprints.model_fingerprint(vectors["a"])}
  record = json.load(open(os.path.join(vectors["emb_a"], fingerprints.RECORD_FILE)))
  # The rows embedded: each candidate's id and text, as the job read them.
  spec = embed.input_spec("candidates", contracts.candidates_path(vectors["reqa"]))
  rows = pq.read_table(spec.pattern, columns=list(spec.columns)).to_pylist()
  (digest,) = embed.example_digests(spec, rows)
  assert digest.count == ids["count"]
  assert record == {"model": model_a, "ids": ids, "dim": 64, "rows": digest.record()}
  assert fingerprints.RECORD_FILE in json.load(open(os.path.join(
      vectors["emb_a"], contracts.MANIFEST_FILE)))["files"]
  record = json.load(open(fingerprints.record_path(vectors["index_a"])))
  assert record == {"model": model_a, "ids": ids, "dim": 64}


# ---------------------------------------------------------------------------------------------
# index / search refuse another model's vectors.
# ---------------------------------------------------------------------------------------------


def test_index_refuses_shards_of_two_models(vectors, tmp_path):
  shards = ",".join(sorted(
      os.path.join(d, f) for d in (vectors["emb_a"], vectors["emb_b"])
      for f in os.listdir(d) if f.endswith(".parquet")))
  out = str(tmp_path / "index.faiss")
  with pytest.raises(ValueError) as e:
    index_stage.run(index_stage.IndexConfig(embeddings=shards, out=out))
  message = str(e.value)
  for model in ("a", "b"):
    assert os.path.abspath(vectors[model]) in message
    assert fingerprints.model_fingerprint(vectors[model])[:fingerprints.SHORT] in message
  assert os.listdir(tmp_path) == []


def test_search_refuses_queries_of_another_model(vectors, tmp_path):
  out = str(tmp_path / "run.trec")
  with pytest.raises(ValueError, match=r"q_b: vectors of model .*model_b \[[0-9a-f]{12}\], "
                                       r"but .*index.faiss holds vectors of model "):
    search_stage.run(search_stage.SearchConfig(index=vectors["index_a"],
                                               queries=vectors["q_b"], out=out))
  assert not os.path.exists(out)
  # The same index with its own model's queries: a run of every test question.
  result = search_stage.run(search_stage.SearchConfig(index=vectors["index_a"],
                                                      queries=vectors["q_a"], out=out, k=5))
  questions = pq.read_table(contracts.questions_path(vectors["reqa"], "test-80")).num_rows
  assert result.queries == questions > 0
  assert len(open(out).read().splitlines()) == 5 * result.queries


def test_vectors_without_a_record_are_refused_unless_taken_unchecked(vectors, tmp_path,
                                                                     capsys, caplog):
  # Vectors in the embedding schema that no record describes (another tool, an older
  # twotower): refused, one line naming the folder and the flag that takes them; with the
  # flag the index is built, its model unknown, and the warning names the folder.
  folder = _unrecorded_copy(vectors["emb_a"], tmp_path / "external")
  out = str(tmp_path / "index.faiss")
  index_stage.run(index_stage.IndexConfig(embeddings=folder, out=out,
                                          allow_unchecked_vectors=True))
  assert json.load(open(fingerprints.record_path(out)))["model"] is None
  assert f"{folder}: no vectors record names the model" in caplog.text
  assert "taken unchecked (--allow_unchecked_vectors)" in caplog.text
  # An index of unchecked vectors is unchecked downstream: its own queries need the flag.
  run = str(tmp_path / "run.trec")
  with pytest.raises(ValueError, match=r"index.faiss: no vectors record names the model.*"
                                       "--allow_unchecked_vectors"):
    search_stage.run(search_stage.SearchConfig(index=out, queries=vectors["q_a"], out=run))
  search_stage.run(search_stage.SearchConfig(index=out, queries=vectors["q_a"], out=run, k=3,
                                             allow_unchecked_vectors=True))
  assert os.path.isfile(run)
  # Without the flag, through the command (last: it sets up logging its own way).
  refused = str(tmp_path / "refused.faiss")
  capsys.readouterr()  # what came before (a handler an earlier command left may print)
  assert cli.main(["index", "--embeddings", folder, "--out", refused]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert err == [f"twotower index: error: {folder}: no vectors record names the model of its "
                 "vectors (made before twotower recorded models, or by another tool): their "
                 "model cannot be checked; give --allow_unchecked_vectors to use them "
                 "unchecked"]
  assert not os.path.exists(refused)


def test_a_mix_of_recorded_and_unrecorded_vectors_records_no_model(vectors, tmp_path):
  # Taken unchecked, some of the vectors are of no known model: the index does not claim
  # the recorded part's model for all of them.
  folder = _unrecorded_copy(vectors["emb_a"], tmp_path / "external")
  shard = [os.path.join(vectors["emb_a"], f) for f in os.listdir(vectors["emb_a"])
           if f.endswith(".parquet")][0]
  out = str(tmp_path / "index.faiss")
  with pytest.raises(ValueError, match="external: no vectors record names the model"):
    index_stage.run(index_stage.IndexConfig(embeddings=f"{shard},{folder}", out=out))
  records = [(vectors["emb_a"], fingerprints.read_record(
      fingerprints.folder_record_path(vectors["emb_a"]))), (folder, None)]
  assert fingerprints.one_model(records, allow_unchecked=True) is None
  assert fingerprints.one_model(records[:1])["fingerprint"] == \
      fingerprints.model_fingerprint(vectors["a"])


# ---------------------------------------------------------------------------------------------
# search finds the model of a bundle's index in the bundle's manifest.
# ---------------------------------------------------------------------------------------------


def test_search_of_a_bundle_index_checks_the_bundles_model(vectors, serving_bundle, tmp_path,
                                                         capsys, caplog):
  # Before: no index.faiss.vectors.json in a bundle, so another model's queries were searched
  # with a warning and exit 0. Now the bundle's manifest names the model.
  index = contracts.bundle_path(serving_bundle["bundle"], contracts.BUNDLE_INDEX_FILE)
  assert not os.path.exists(fingerprints.record_path(index))
  record = embeddings_lib.index_record(index)
  assert record["model"]["fingerprint"] == fingerprints.model_fingerprint(vectors["a"])
  out = str(tmp_path / "run.trec")
  # Its own model's queries: searched, nothing to warn about.
  search_stage.run(search_stage.SearchConfig(index=index, queries=vectors["q_a"], out=out,
                                             k=5))
  assert os.path.isfile(out) and "no vectors record" not in caplog.text
  os.remove(out)
  capsys.readouterr()  # what came before (a handler an earlier command left may print)
  assert cli.main(["search", "--index", index, "--queries", vectors["q_b"], "--out", out]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1, err
  for model in ("a", "b"):  # both models named: path and short fingerprint
    assert os.path.abspath(vectors[model]) in err[0]
    assert fingerprints.model_fingerprint(vectors[model])[:fingerprints.SHORT] in err[0]
  assert f"but {index} holds vectors of model" in err[0]
  assert not os.path.exists(out)
  # Queries that no record names: refused unless taken unchecked.
  unrecorded = _unrecorded_copy(vectors["q_a"], tmp_path / "q_external")
  other = str(tmp_path / "other.trec")
  assert cli.main(["search", "--index", index, "--queries", unrecorded, "--out", other]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith(f"twotower search: error: {unrecorded}: no "
                                             "vectors record names the model")
  assert err[0].endswith("give --allow_unchecked_vectors to use them unchecked")
  assert not os.path.exists(other)
  assert cli.main(["search", "--index", index, "--queries", unrecorded, "--out", other,
                   "--allow_unchecked_vectors"]) == 0
  assert os.path.isfile(other)


def test_an_index_file_that_is_not_its_bundles_is_refused(copy, vectors, tmp_path):
  index = os.path.join(copy, contracts.BUNDLE_INDEX_FILE)
  with open(index, "ab") as f:
    f.write(b"\0")
  with pytest.raises(ValueError, match=r"index.faiss: \d+ bytes, but the bundle manifest .* "
                                       r"records \d+ bytes: not that bundle's index"):
    search_stage.run(search_stage.SearchConfig(index=index, queries=vectors["q_a"],
                                               out=str(tmp_path / "run.trec")))


def test_a_same_size_index_that_is_not_its_bundles_is_refused(copy, vectors, tmp_path):
  """A byte of the index changed, its size kept: it is not the index the manifest's model
  record vouches for."""
  index = os.path.join(copy, contracts.BUNDLE_INDEX_FILE)
  data = bytearray(open(index, "rb").read())
  data[-1] ^= 0xFF
  with open(index, "wb") as f:
    f.write(data)
  with pytest.raises(ValueError, match=r"index.faiss: differs from its sha256 checksum in the "
                                       r"bundle manifest .*so its model is unknown"):
    search_stage.run(search_stage.SearchConfig(index=index, queries=vectors["q_a"],
                                               out=str(tmp_path / "run.trec")))


# ---------------------------------------------------------------------------------------------
# bundle refuses another model's vectors and other ids.
# ---------------------------------------------------------------------------------------------


def _bundle(vectors, tmp_path, embeddings: str, reqa: str | None = None) -> str:
  out = str(tmp_path / "bundle")
  bundle.run(bundle.BundleConfig(model=vectors["a"], reqa=reqa or vectors["reqa"], out=out,
                                 embeddings=embeddings, weight=0.5))
  return out


def test_bundle_refuses_vectors_of_another_model(vectors, tmp_path):
  with pytest.raises(ValueError) as e:
    _bundle(vectors, tmp_path, vectors["emb_b"])
  message = str(e.value)
  assert message.startswith(f"{vectors['emb_b']}: vectors of model ")
  for model in ("a", "b"):
    assert os.path.abspath(vectors[model]) in message
    assert fingerprints.model_fingerprint(vectors[model])[:fingerprints.SHORT] in message
  assert os.listdir(tmp_path) == []


def test_bundle_refuses_vectors_without_a_record(vectors, tmp_path):
  folder = _unrecorded_copy(vectors["emb_a"], tmp_path / "external")
  with pytest.raises(ValueError, match=f"{folder}: no vectors.json names the model"):
    _bundle(vectors, tmp_path, folder)
  assert os.listdir(tmp_path) == ["external"]


def test_bundle_refuses_vectors_of_the_same_ids_and_other_text(vectors, tmp_path):
  # Before: the same model's vectors of the same ids (and count) passed every check, and the
  # bundle answered with text that was not the text embedded. Now the digest of the rows
  # embedded (ids and text) must be the documents'.
  changed = tmp_path / "reqa_text"
  changed.mkdir()
  table = pq.read_table(contracts.candidates_path(vectors["reqa"]))
  sentences = table.column("sentence").to_pylist()
  sentences[3] = sentences[3].replace(sentences[3][0], "#", 1)  # one character, same size
  column = table.schema.get_field_index("sentence")
  table = table.set_column(column, table.schema.field(column), pa.array(sentences))
  pq.write_table(table, contracts.candidates_path(str(changed)))
  embeddings = _embed(vectors["a"], str(tmp_path / "emb_text"), "candidates",
                      contracts.candidates_path(str(changed)))
  assert json.load(open(fingerprints.folder_record_path(embeddings)))["ids"] == \
      fingerprints.ids_record(_candidate_ids(vectors["reqa"]))
  candidates = contracts.candidates_path(vectors["reqa"])
  with pytest.raises(ValueError, match=rf"emb_text: its vectors were made from other text "
                                       rf"than {candidates} holds for the same ids"):
    _bundle(vectors, tmp_path, embeddings)
  assert sorted(os.listdir(tmp_path)) == ["emb_text", "reqa_text"]
  # The same embeddings with the other --doc_text the bundle would store: refused too.
  with pytest.raises(ValueError, match="or of another --doc_text"):
    bundle.run(bundle.BundleConfig(model=vectors["a"], reqa=vectors["reqa"],
                                   out=str(tmp_path / "b"), embeddings=vectors["emb_a"],
                                   doc_text="sentence", weight=0.5))


def test_bundle_refuses_vectors_whose_record_has_no_rows(vectors, tmp_path):
  # A vectors.json of a twotower before the rows' digest: the model is known, the text not.
  folder = str(tmp_path / "old")
  shutil.copytree(vectors["emb_a"], folder)
  path = fingerprints.folder_record_path(folder)
  record = json.load(open(path))
  del record["rows"]
  json.dump(record, open(path, "w"))
  with pytest.raises(ValueError, match=f"{folder}: its vectors.json records no digest of the "
                                       "rows it embedded"):
    _bundle(vectors, tmp_path, folder)
  # index and search read it as before: its model is recorded.
  out = str(tmp_path / "index.faiss")
  index_stage.run(index_stage.IndexConfig(embeddings=folder, out=out))
  assert json.load(open(fingerprints.record_path(out)))["model"]["fingerprint"] == \
      fingerprints.model_fingerprint(vectors["a"])


def test_bundle_refuses_ids_shifted_by_7(vectors, tmp_path):
  # The same model's vectors, of the same count, under candidate ids + 7.
  shifted = tmp_path / "reqa_shift"
  shifted.mkdir()
  table = pq.read_table(contracts.candidates_path(vectors["reqa"]))
  column = table.schema.get_field_index("candidate_id")
  table = table.set_column(column, table.schema.field(column),
                           pc.add(table.column(column), 7))
  pq.write_table(table, contracts.candidates_path(str(shifted)))
  embeddings = _embed(vectors["a"], str(tmp_path / "emb_shift"), "candidates",
                      contracts.candidates_path(str(shifted)))
  count = len(_candidate_ids(vectors["reqa"]))
  with pytest.raises(ValueError, match=f"emb_shift: vectors of other ids than the {count} "
                                       r"documents' \(id \d+ has a vector but no document\)"):
    _bundle(vectors, tmp_path, embeddings)
  assert sorted(os.listdir(tmp_path)) == ["emb_shift", "reqa_shift"]


def test_bundle_records_the_model_and_each_parts_ids(serving_bundle):
  manifest = json.load(open(os.path.join(serving_bundle["bundle"],
                                         contracts.BUNDLE_MANIFEST_FILE)))
  ids = fingerprints.ids_record(_candidate_ids(serving_bundle["reqa"]))
  assert manifest["model"]["fingerprint"] == \
      fingerprints.model_fingerprint(serving_bundle["model"])
  assert manifest["documents"]["ids"] == manifest["index"]["ids"] == \
      manifest["bm25"]["ids"] == ids
  assert not [f for f in manifest["files"] if f.endswith(fingerprints.RECORD_SUFFIX)]


# ---------------------------------------------------------------------------------------------
# Retriever.load refuses tampered bundles by default, one line naming the file.
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def copy(serving_bundle, tmp_path):
  path = str(tmp_path / "bundle")
  shutil.copytree(serving_bundle["bundle"], path)
  return path


def test_a_same_size_index_of_another_models_vectors_is_refused(vectors, copy, tmp_path):
  other = str(tmp_path / "other.faiss")
  index_stage.run(index_stage.IndexConfig(embeddings=vectors["emb_b"], out=other))
  target = os.path.join(copy, contracts.BUNDLE_INDEX_FILE)
  assert os.path.getsize(other) == os.path.getsize(target)
  shutil.copy(other, target)
  with pytest.raises(BundleError, match=f"{copy}: part 'index.faiss': index.faiss differs "
                                        "from its sha256 checksum"):
    Retriever.load(copy)
  # --verify size, the documented cheaper opt-out, does not see it.
  Retriever.load(copy, verify="size").close()


def _garble(path: str, start: int) -> None:
  size = os.path.getsize(path)
  noise = random.Random(7).randbytes(size - start)
  with open(path, "r+b") as f:
    f.seek(start)
    f.write(noise)
  assert os.path.getsize(path) == size


def test_a_same_size_garbled_store_is_refused(copy):
  store = os.path.join(copy, contracts.BUNDLE_STORE_FILE)
  _garble(store, os.path.getsize(store) // 3)
  with pytest.raises(BundleError, match=f"{copy}: part 'store.sqlite': store.sqlite differs "
                                        "from its sha256 checksum"):
    Retriever.load(copy)
  _garble(store, 100)  # past SQLite's header: with sizes only, the store itself refuses
  with pytest.raises(BundleError, match=f"{copy}: part 'store.sqlite' does not load"):
    Retriever.load(copy, verify="size")


def _edit(path: str, fn) -> None:
  manifest_path = os.path.join(path, contracts.BUNDLE_MANIFEST_FILE)
  manifest = json.load(open(manifest_path))
  json.dump(fn(manifest), open(manifest_path, "w"))


@pytest.mark.parametrize("edit, message", [
    (lambda m: [m], "part 'manifest.json' is a JSON list, not a "
                    "twotower-retriever-bundle manifest"),
    (lambda m: {k: v for k, v in m.items() if k != "model"},
     "the manifest has no 'model' object"),
    (lambda m: {**m, "model": {**m["model"], "embedding_dim": None}},
     "the manifest's 'model' has no int 'embedding_dim'"),
    (lambda m: {**m, "index": {**m["index"], "ids": {"count": 48, "sha256": "0" * 64}}},
     "part 'index.faiss' holds other ids than part 'store.sqlite'"),
    (lambda m: {**m, "format_version": 1}, "bundle format version 1, this twotower reads "
                                           "versions 2, 3: rebuild it with `twotower bundle`"),
], ids=["json-list", "no-model", "null-dim", "other-ids", "before-fingerprints"])
def test_manifests_it_cannot_read_give_one_line(copy, capsys, edit, message):
  _edit(copy, edit)
  with pytest.raises(BundleError, match=message):
    Retriever.load(copy)
  assert cli.main(["query", copy, "who built the castle?"]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith(f"twotower query: error: {copy}")
  assert message.split(":")[0] in err[0]
