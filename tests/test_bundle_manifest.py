"""A retriever bundle's manifest.json (contracts.bundle_manifest, format v3) is a contract:

* what `twotower bundle` writes is byte for byte the golden manifest for the same inputs
  (tests/golden/bundle-manifest-*.json; the values that differ between two builds of one
  bundle are masked: when, where, the stack, and the digests of files holding timestamps,
  random ids or float round-off, and the sizes of TensorFlow's fingerprint.pb and of Lucene's
  segment info, which names the machine). The goldens were first captured from the writer
  before BundleManifest (v2), and regenerated on purpose for v3 (issue 66, document metadata):
  the diff adds `format_version` 3, `index.tombstones` 0, the `metadata` part's field list and
  the `metadata/` files, and changes no other byte;
* a manifest read and written again is the same bytes, a v2 manifest as v2 wrote it;
* a field missing or of the wrong type is refused in one line naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shutil

import pytest

from twotower.core import contracts
from twotower.core.contracts import bundle_manifest as bm
from twotower.deploy.bundling import bundle
from bundle_manifest_fixtures import a_manifest, write_passages

GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"


def masked(text: str, roots: list[str]) -> str:
  """`text` with what differs between two builds of the same bundle replaced by a name."""
  for root in roots:
    text = text.replace(root, "<root>")
  text = re.sub(r'"created": "[^"]*"', '"created": "<created>"', text)
  text = re.sub(r'("versions": \{)([^}]*)(\})', lambda m: m.group(1) + re.sub(
      r'": "[^"]*"', '": "<version>"', m.group(2)) + m.group(3), text)
  text = re.sub(r'("bytes": \d+,\n\s*"sha256": )"[0-9a-f]{64}"', r'\1"<sha256>"', text)
  # TensorFlow's fingerprint.pb holds hashes as varints: even its size differs between builds.
  # Its saved_model.pb names traced functions with a process-wide counter, so its size depends
  # on how many functions the process traced before (another test's model): TensorFlow's
  # bytes, not the manifest's format.
  text = re.sub(r'("query_encoder/(?:fingerprint|saved_model).pb": \{\n\s*"bytes": )\d+',
                r'\1"<bytes>"', text)
  # Lucene's segment info (`_N.si`) records the machine it was written on (os.version, the
  # kernel release, among its diagnostics): its size differs between machines, not formats.
  text = re.sub(r'("lucene/_\w+\.si": \{\n\s*"bytes": )\d+', r'\1"<bytes>"', text)
  return re.sub(r'"fingerprint": "[0-9a-f]{64}"', '"fingerprint": "<fingerprint>"', text)


def manifest_text(bundle_dir: str) -> str:
  return pathlib.Path(bm.manifest_path(bundle_dir)).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# Format v3, byte for byte.
# ---------------------------------------------------------------------------------------------


def test_a_tuned_bundles_manifest_is_the_v3_format_byte_for_byte(serving_bundle):
  text = manifest_text(serving_bundle["bundle"])
  assert masked(text, [serving_bundle["work"]]) == \
      (GOLDEN / "bundle-manifest-tuned.json").read_text(encoding="utf-8")
  # What the mask hides is there, of its type: read back, it checks against the files.
  manifest = bm.read(serving_bundle["bundle"])
  manifest.check_files(serving_bundle["bundle"], "sha256")
  assert manifest.files == bm.file_digests(serving_bundle["bundle"])


def test_a_passages_bundles_manifest_is_the_v3_format_byte_for_byte(serving_bundle, tmp_path):
  out = str(tmp_path / "bundle")
  bundle.run(bundle.BundleConfig(model=serving_bundle["model"], passages=write_passages(tmp_path),
                                 out=out, weight=0.25))
  assert masked(manifest_text(out), [serving_bundle["work"], str(tmp_path)]) == \
      (GOLDEN / "bundle-manifest-passages.json").read_text(encoding="utf-8")


def test_the_grid_cells_manifest_is_the_v3_format_byte_for_byte(serving_bundle, tmp_path):
  """What the grid's bundle cell (experiment.cells) asks for: the fuse cell's weight, with
  where it was chosen; the golden is the manifest the cell wrote by patching it before."""
  run_dir = str(tmp_path / "run")
  shutil.copytree(serving_bundle["model"], contracts.saved_model_path(run_dir))
  out = str(tmp_path / "cell" / "bundle")
  result = bundle.run(bundle.BundleConfig(
      model=contracts.saved_model_path(run_dir), reqa=serving_bundle["reqa"], out=out,
      weight=0.3, chosen_weight=bundle.ChosenWeight("validation-80", "mean_recall", "ict"),
      overwrite=True))
  assert masked(manifest_text(out), [serving_bundle["work"], str(tmp_path)]) == \
      (GOLDEN / "bundle-manifest-grid-cell.json").read_text(encoding="utf-8")
  assert result.manifest == bm.read(out)


def test_a_manifest_read_and_written_again_is_the_same_bytes(serving_bundle, tmp_path):
  bm.read(serving_bundle["bundle"]).write(str(tmp_path))
  assert manifest_text(str(tmp_path)) == manifest_text(serving_bundle["bundle"])
  for manifest in (a_manifest(), a_manifest(questions=None, tuned_on="validation-5",
                                            metric="MRR", partner="ict")):
    manifest.write(str(tmp_path))
    assert bm.read(str(tmp_path)) == manifest
  assert "partner" not in a_manifest().to_json()["hybrid"]  # written only where there is one


def test_a_v2_manifest_reads_and_writes_back_as_v2(tmp_path):
  """A bundle of format 2 (before metadata) keeps loading: its manifest reads, and writes back
  byte for byte without the v3 parts (tests/test_filtered_search.py searches such a bundle)."""
  v2 = a_manifest().to_json()
  v2["format_version"] = 2
  del v2["metadata"], v2["index"]["tombstones"]
  path = bm.manifest_path(str(tmp_path))
  pathlib.Path(path).write_text(json.dumps(v2, indent=2), encoding="utf-8")
  manifest = bm.read(str(tmp_path))
  assert manifest.format_version == 2 and manifest.metadata is None and manifest.lineage is None
  assert manifest.parts == contracts.BUNDLE_PARTS  # no metadata/ to look for
  manifest.write(str(tmp_path))
  assert json.loads(manifest_text(str(tmp_path))) == v2
  v2["index"]["tombstones"] = 0
  pathlib.Path(path).write_text(json.dumps(v2), encoding="utf-8")
  with pytest.raises(bm.BundleError, match="'tombstones', which format 2 does not"):
    bm.read(str(tmp_path))


def test_an_updated_bundles_lineage_reads_back(tmp_path):
  lineage = bm.Lineage(bm.Parent("/b/parent", "2026-11-27T00:00:00+00:00", "c" * 64),
                       (bm.Operation("delete", 2, "/in/ids.txt", "d" * 64),
                        bm.Operation("add", 5, "/in/docs.jsonl", "e" * 64)))
  manifest = dataclasses.replace(a_manifest(), lineage=lineage)
  manifest.write(str(tmp_path))
  assert bm.read(str(tmp_path)) == manifest
  assert list(manifest.to_json())[-3:] == ["metadata", "lineage", "files"]


# ---------------------------------------------------------------------------------------------
# Manifests it cannot read: one line, the file and the field.
# ---------------------------------------------------------------------------------------------


def _set(section: str, field: str, value):
  def edit(m):
    m[section][field] = value
  return edit


def _drop(section: str, field: str):
  def edit(m):
    del m[section][field]
  return edit


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.pop("created"), "the manifest has no str 'created' (got None)"),
    (lambda m: m.update(versions=["3.11"]), "the manifest has no 'versions' object"),
    (_set("hybrid", "weight", "0.5"), "the manifest's 'hybrid' has no float 'weight' "
                                      "(got '0.5')"),
    (_set("hybrid", "weight", True), "the manifest's 'hybrid' has no float 'weight' (got True)"),
    (_set("hybrid", "questions", 1.5), "the manifest's 'hybrid' has no int or null "
                                       "'questions' (got 1.5)"),
    (_drop("bm25", "k1"), "the manifest's 'bm25' has no float 'k1' (got None)"),
    (_set("documents", "ids", [3, "a"]), "the manifest's 'documents' has no 'ids' object"),
    (lambda m: m["index"]["ids"].pop("sha256"), "the manifest's 'index.ids' has no str "
                                                "'sha256' (got None)"),
    (lambda m: m["files"]["index.faiss"].update(bytes="3"), "the manifest's "
                                                            "'files.index.faiss' has no int "
                                                            "'bytes' (got '3')"),
    (lambda m: m.update(format="something-else"), "not a twotower-retriever-bundle manifest"),
    (lambda m: m["metadata"].update(fields={}), "the manifest's 'metadata' has no 'fields' "
                                                "list"),
    (lambda m: m["metadata"]["fields"].append({"name": "wiki", "type": "str",
                                               "documents": "3"}),
     "the manifest's 'metadata.fields[0]' has no int 'documents' (got '3')"),
    (lambda m: m.update(format_version=True), "bundle format version True"),
], ids=["created", "versions", "weight-str", "weight-bool", "questions-float", "no-k1",
        "ids-list", "ids-sha256", "file-bytes", "format", "metadata-fields", "metadata-field",
        "version-bool"])
def test_a_bad_field_is_refused_in_one_line_naming_the_file_and_the_field(tmp_path, edit,
                                                                         message):
  value = a_manifest().to_json()
  edit(value)
  path = bm.manifest_path(str(tmp_path))
  pathlib.Path(path).write_text(json.dumps(value), encoding="utf-8")
  with pytest.raises(bm.BundleError) as caught:
    bm.read(str(tmp_path))
  assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)
  assert message in str(caught.value)


def test_files_that_differ_from_the_manifest_are_refused_by_part(tmp_path):
  folder = str(tmp_path)
  manifest = a_manifest()
  for part in manifest.parts:
    os.makedirs(os.path.join(folder, part), exist_ok=True)
  with pytest.raises(bm.BundleError, match=f"{folder}: part 'index.faiss' is missing its "
                                           "file index.faiss"):
    manifest.check_files(folder, "none")
  os.rmdir(os.path.join(folder, contracts.BUNDLE_INDEX_FILE))
  pathlib.Path(folder, contracts.BUNDLE_INDEX_FILE).write_bytes(b"abc")
  manifest.check_files(folder, "size")  # 3 bytes, as recorded
  with pytest.raises(bm.BundleError, match="index.faiss differs from its sha256 checksum"):
    manifest.check_files(folder, "sha256")
  signed = manifest.signed(folder)
  assert signed.files["index.faiss"] == bm.FileDigest(
      3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")  # sha256("abc")
  signed.check_files(folder, "sha256")
  with pytest.raises(bm.BundleError, match="part 'lucene' holds other ids than part "
                                           "'store.sqlite' \\(3 against 4"):
    dataclasses.replace(signed, documents=dataclasses.replace(
        signed.documents, ids=bm.IdSet(4, "c" * 64)),
        index=dataclasses.replace(signed.index, ids=bm.IdSet(4, "c" * 64))).check_ids(folder)


def test_the_writer_and_the_reader_do_not_import_each_other():
  """The format has one home: the reader imports it, not the writer (the writer may use the
  reader lazily: it tunes the hybrid with the bundle's own searches)."""
  from test_layers import ROOT, imports_of
  serving = ROOT / "deploy" / "serving"
  for reader in ("retriever.py", "app.py", "query.py", "query_encoders.py"):
    assert "twotower.deploy.bundling.bundle" not in imports_of(serving / reader), reader
  assert "twotower.core.contracts.bundle_manifest" in imports_of(serving / "retriever.py")
