"""Nothing a user owns is lost (issue 34, items 1 and 2; twotower.core.outputs' rules): an output
that is also an input is refused, --overwrite and same-settings re-runs remove only the files
the stage's own manifest lists, file outputs (search, fuse, query --out) are judged like
folders, and a failed run leaves no partial output. Each case runs the real stage on inputs
the test writes and checks the user's file byte for byte."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pyarrow as pa
import pytest

from twotower import cli
from twotower.core import contracts, file_outputs, outputs
from twotower.testing import pairs as testing
from outputs_fixtures import write_embeddings
from reqa_fixtures import ARTICLES

NOTES = b"my notes: do not lose me\n"


def run_cli(capsys, *args):
  code = cli.main([str(a) for a in args])
  return code, capsys.readouterr().err.strip().splitlines()


def snapshot(folder) -> dict[str, bytes]:
  """Every file under `folder`, relative path -> bytes."""
  found = {}
  for root, _, names in os.walk(folder):
    for name in names:
      path = os.path.join(root, name)
      found[os.path.relpath(path, folder)] = open(path, "rb").read()
  return found


def no_temp(folder) -> bool:
  return not [n for n in os.listdir(folder) if ".tmp-" in n or ".old-" in n]


# ------------------------------------------------------------------------------------------
# The rules, on plain folders.
# ------------------------------------------------------------------------------------------


def test_an_output_that_is_an_input_is_refused_overwrite_or_not(tmp_path):
  folder = tmp_path / "d"
  folder.mkdir()
  (folder / "q.jsonl").write_bytes(NOTES)
  for overwrite in (False, True):
    with pytest.raises(ValueError, match=r"d/q.jsonl: the output is an input of this run "
                                         r"\(.*d/q.jsonl\); give another --out"):
      file_outputs.check_file(str(folder / "q.jsonl"), "query", {}, overwrite=overwrite,
                         inputs=[str(folder / "q.jsonl")])
    with pytest.raises(ValueError, match="the output is an input of this run"):
      outputs.claim(str(folder), "bm25", {}, overwrite=overwrite, inputs=[str(folder)])
  # A file output whose place is a folder holding an input; a run dir holding --init.
  with pytest.raises(ValueError, match=r"the output holds an input of this run"):
    file_outputs.check_file(str(folder), "search", {}, inputs=[str(folder / "q.jsonl")])
  with pytest.raises(ValueError, match=r"the output holds an input of this run"):
    outputs.check_inputs(str(folder), [str(folder / "checkpoints" / "ckpt-5")], inside=False)
  # A symbolic link to the input is the input.
  os.symlink(folder / "q.jsonl", tmp_path / "link.jsonl")
  with pytest.raises(ValueError, match="the output is an input"):
    outputs.check_inputs(str(tmp_path / "link.jsonl"), [str(folder / "q.jsonl")], file=True)
  assert (folder / "q.jsonl").read_bytes() == NOTES


def test_overwrite_removes_only_what_the_old_manifest_lists(tmp_path):
  """In place (training): --overwrite of a run with other settings removes its listed files
  and the folders they leave empty; the user's file and an input inside stay; another
  stage's output is refused even with --overwrite."""
  out = tmp_path / "run"
  (out / "checkpoints").mkdir(parents=True)
  (out / "checkpoints" / "ckpt-1.index").write_bytes(b"old")
  (out / "config.yaml").write_text("a: 1\n")
  outputs.write_manifest(str(out), "train", {"a": 1})
  (out / "my_notes.txt").write_bytes(NOTES)
  (out / "vocab.txt").write_bytes(b"[PAD]\n")
  with pytest.raises(ValueError, match=r"other settings \(a: 1 -> 2\); give another --out, or "
                                       r"--overwrite to replace it \(files it did not write "
                                       r"are kept\)"):
    outputs.claim(str(out), "train", {"a": 2}, inputs=[str(out / "vocab.txt")])
  with pytest.raises(ValueError, match="holds the output of `twotower train`; give another "
                                       r"--out \(--overwrite replaces only a `twotower bm25`"):
    outputs.claim(str(out), "bm25", {}, overwrite=True)
  assert outputs.claim(str(out), "train", {"a": 2}, overwrite=True,
                       inputs=[str(out / "vocab.txt")]) is False
  assert snapshot(out) == {"my_notes.txt": NOTES, "vocab.txt": b"[PAD]\n"}
  # The new run records what it found as kept: its manifest never lists them.
  outputs.start(str(out), "train", {"a": 2}, inputs=[str(out / "vocab.txt")])
  (out / "config.yaml").write_text("a: 2\n")
  manifest = outputs.write_manifest(str(out), "train", {"a": 2})
  assert manifest["files"] == ["config.yaml"]
  assert manifest["kept"] == ["my_notes.txt", "vocab.txt"] and "pending" not in manifest


def test_a_killed_run_in_place_owns_what_it_wrote_but_not_what_it_found(tmp_path):
  out = tmp_path / "run"
  out.mkdir()
  (out / "my_notes.txt").write_bytes(NOTES)
  assert outputs.claim(str(out), "train", {"a": 1}, overwrite=True) is False
  outputs.start(str(out), "train", {"a": 1})
  (out / "ckpt-1").write_bytes(b"written before the kill")
  # Resumed: what the killed run wrote is its own, listed at the end.
  assert outputs.claim(str(out), "train", {"a": 1}) is True
  outputs.start(str(out), "train", {"a": 1}, resumed=True)
  assert outputs.write_manifest(str(out), "train", {"a": 1})["files"] == ["ckpt-1"]
  # Killed again, then replaced with other settings: its checkpoint goes, the notes stay.
  outputs.start(str(out), "train", {"a": 1}, resumed=True)
  (out / "ckpt-2").write_bytes(b"")
  assert outputs.claim(str(out), "train", {"a": 3}, overwrite=True) is False
  assert snapshot(out) == {"my_notes.txt": NOTES}


def test_a_replace_keeps_foreign_files_and_refuses_to_write_over_one(tmp_path):
  """Staged (Beam stages, bm25): a same-settings replace keeps the user's file, also inside
  a folder of the output; a run that writes where such a file lies is refused, nothing
  changed, no temporary folder left."""
  out = tmp_path / "out"
  with outputs.staged(str(out), "s", {"a": 1}) as tmp:
    os.makedirs(f"{tmp}/shards")
    open(f"{tmp}/shards/part-0", "wb").write(b"old")
    open(f"{tmp}/stats.json", "w").write("{}")
  (out / "my_notes.txt").write_bytes(NOTES)
  (out / "shards" / "notes-in-shards.txt").write_bytes(NOTES)
  (out / "empty").mkdir()
  with outputs.staged(str(out), "s", {"a": 1}) as tmp:
    os.makedirs(f"{tmp}/shards")
    open(f"{tmp}/shards/part-1", "wb").write(b"new")
    open(f"{tmp}/stats.json", "w").write("{}")
  assert snapshot(out) == {contracts.MANIFEST_FILE: snapshot(out)[contracts.MANIFEST_FILE],
                           "my_notes.txt": NOTES, "shards/notes-in-shards.txt": NOTES,
                           "shards/part-1": b"new", "stats.json": b"{}"}
  assert (out / "empty").is_dir() and outputs.listed(str(out)) == [
      f"{out}/shards/part-1", f"{out}/stats.json"]
  before = snapshot(out)
  with pytest.raises(ValueError, match=r"out/my_notes.txt: this run writes a file there, and "
                                       "it is not one an earlier run of this stage wrote"):
    with outputs.staged(str(out), "s", {"a": 1}) as tmp:
      open(f"{tmp}/my_notes.txt", "w").write("the stage's own")
  assert snapshot(out) == before and no_temp(tmp_path)


def test_replace_folder_undoes_a_failure_half_way(tmp_path, monkeypatch):
  final, new = tmp_path / "final", tmp_path / "new"
  final.mkdir()
  new.mkdir()
  (final / "a").write_bytes(b"owned")
  (final / "b").write_bytes(NOTES)
  (final / "c").write_bytes(NOTES)
  (new / "a").write_bytes(b"new")
  rename, calls = os.rename, []

  def failing(src, dst):
    calls.append(dst)
    if len(calls) == 3:  # final -> old, b, then c fails
      raise OSError("disk trouble")
    rename(src, dst)
  monkeypatch.setattr(outputs.os, "rename", failing)
  with pytest.raises(OSError, match="disk trouble"):
    outputs.replace_folder(str(final), str(new), {"a"})
  monkeypatch.undo()
  assert snapshot(final) == {"a": b"owned", "b": NOTES, "c": NOTES}
  assert snapshot(new) == {"a": b"new"}


# ------------------------------------------------------------------------------------------
# Stages, item 1: inputs deleted by --overwrite.
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reqa_dir(tmp_path_factory):
  """A ReQA folder (and its SQuAD file beside it); tests that change it copy it."""
  from twotower.pipelines.reqa import builder as reqa
  root = tmp_path_factory.mktemp("ownership")
  squad = root / "squad.json"
  squad.write_text(json.dumps({"data": ARTICLES}), encoding="utf-8")
  reqa.run(reqa.ReqaConfig(out=str(root / "reqa"), squad=str(squad), validation_percent=50))
  return root / "reqa"


def test_bm25_refuses_its_reqa_folder_as_out(reqa_dir, capsys):
  before = snapshot(reqa_dir)
  code, err = run_cli(capsys, "bm25", "--reqa", reqa_dir, "--out", reqa_dir, "--overwrite")
  assert code == 1
  assert err[-1] == (f"twotower bm25: error: {reqa_dir}: the output is an input of this run "
                     f"({reqa_dir}); give another --out")
  assert snapshot(reqa_dir) == before


def test_finetune_refuses_its_init_as_out(reqa_dir, tmp_path, capsys):
  """`finetune --init X --out X --overwrite` deleted X's checkpoints and export, then
  failed: now refused before anything is read or written."""
  run = tmp_path / "X"
  (run / "checkpoints").mkdir(parents=True)
  (run / "checkpoints" / "ckpt-7.index").write_bytes(b"pre-trained")
  (run / "export").mkdir()
  (run / "export" / "saved_model.pb").write_bytes(b"exported")
  outputs.write_manifest(str(run), "pretrain", {"steps": 7})
  before = snapshot(run)
  vocab = testing.write_vocab(str(tmp_path / "vocab.txt"))
  for init in (run, run / "checkpoints" / "ckpt-7"):
    code, err = run_cli(capsys, "finetune", "--config", "tiny", "--init", init, "--out", run,
                        "--overwrite", "--reqa", reqa_dir, "--split", "80", "--vocab", vocab,
                        "--steps", "1", "--progress", "none", "--no_recall")
    assert code == 1
    assert err[-1] == (f"twotower finetune: error: {run}: the output "
                       f"{'is' if init == run else 'holds'} an input of this run ({init}); "
                       "give another --out")
  assert snapshot(run) == before


@pytest.mark.slow  # two tiny pre-training runs (~20 s each on a busy 2-core machine)
def test_training_keeps_its_vocabulary_and_my_notes_in_its_run_dir(tmp_path, capsys):
  """`pretrain --vocab D/vocab.txt --out D --overwrite` deleted the vocabulary: the
  vocabulary (and its manifest) is an input, kept; a note of the user's survives an
  --overwrite, while the replaced run's checkpoints go (the new run does not resume)."""
  root = tmp_path / "pairs"
  testing.write_pairs(str(root), "ict", "train", testing.synthetic_pairs(32, task="ict"))
  out = tmp_path / "D"
  vocab = testing.write_vocab(str(out / "vocab.txt"))
  (out / ("vocab.txt" + contracts.FILE_MANIFEST_SUFFIX)).write_text("{}")  # `twotower vocab`'s
  vocab_bytes = snapshot(out)
  args = ["pretrain", "--config", "tiny", "--pairs", root, "--tasks", "ict", "--vocab", vocab,
          "--out", out, "--progress", "none", "--no_export"]
  assert run_cli(capsys, *args, "--steps", "2", "--overwrite")[0] == 0
  (out / "my_notes.txt").write_bytes(NOTES)
  code, err = run_cli(capsys, *args, "--steps", "1", "--overwrite")
  assert code == 0 and not any("RESUME" in line for line in err)
  files = snapshot(out)
  assert files["my_notes.txt"] == NOTES
  assert {k: files[k] for k in vocab_bytes} == vocab_bytes
  manifest = json.loads(files[contracts.MANIFEST_FILE])
  assert not {"my_notes.txt", "vocab.txt"} & set(manifest["files"])
  assert any(f.startswith("checkpoints/ckpt-1") for f in manifest["files"])
  assert not any(f.startswith("checkpoints/ckpt-2") for f in files)  # the replaced run's


# ------------------------------------------------------------------------------------------
# Stages, item 2: files replaced without a check.
# ------------------------------------------------------------------------------------------


def test_reqa_keeps_my_notes_on_a_same_settings_replace_and_on_overwrite(reqa_dir, tmp_path,
                                                                        capsys):
  squad = reqa_dir.parent / "squad.json"
  reqa_dir = tmp_path / "reqa"
  shutil.copytree(squad.parent / "reqa", reqa_dir)
  (reqa_dir / "my_notes.txt").write_bytes(NOTES)
  args = ["reqa", "--squad", squad, "--out", reqa_dir, "--validation_percent", "50"]
  assert run_cli(capsys, *args)[0] == 0
  assert (reqa_dir / "my_notes.txt").read_bytes() == NOTES
  code, err = run_cli(capsys, *args, "--num_shards", "2")
  assert code == 1 and err[-1].endswith("give another --out, or --overwrite to replace it "
                                        "(files it did not write are kept)")
  assert run_cli(capsys, *args, "--num_shards", "2", "--overwrite")[0] == 0
  assert (reqa_dir / "my_notes.txt").read_bytes() == NOTES
  manifest = json.loads((reqa_dir / contracts.MANIFEST_FILE).read_text())
  shards = [f for f in snapshot(reqa_dir) if f.startswith("finetune/")]
  assert shards and all("-of-00002" in f for f in shards)  # none of the 1-shard run is left
  assert "my_notes.txt" not in manifest["files"] and no_temp(tmp_path)


def _runs(tmp_path):
  a, b = tmp_path / "a.trec", tmp_path / "b.trec"
  a.write_text("q1 Q0 1 1 2.000000 a\nq1 Q0 2 2 1.000000 a\n")
  b.write_text("q1 Q0 2 1 2.000000 b\nq1 Q0 3 2 1.000000 b\n")
  return a, b


def test_fuse_refuses_its_own_input_run_and_a_file_no_stage_wrote(tmp_path, capsys):
  a, b = _runs(tmp_path)
  a_bytes = a.read_bytes()
  base = ["fuse", "--run", a, b, "--weight", "0.5"]
  for extra in ((), ("--overwrite",)):
    code, err = run_cli(capsys, *base, "--out", a, *extra)
    assert code == 1 and err[-1] == (f"twotower fuse: error: {a}: the output is an input of "
                                     f"this run ({a}); give another --out")
    assert a.read_bytes() == a_bytes
  mine = tmp_path / "results.trec"
  mine.write_bytes(NOTES)
  code, err = run_cli(capsys, *base, "--out", mine)
  assert code == 1 and err[-1] == (f"twotower fuse: error: {mine}: exists, and no twotower "
                                   "stage recorded how it was made; give another --out, or "
                                   "--overwrite to replace it")
  assert mine.read_bytes() == NOTES
  # A fused run of its own: the same settings replace it, others are refused.
  out = tmp_path / "fused.trec"
  assert run_cli(capsys, *base, "--out", out)[0] == 0
  fused = out.read_bytes()
  assert run_cli(capsys, *base, "--out", out)[0] == 0 and out.read_bytes() == fused
  code, err = run_cli(capsys, "fuse", "--run", a, b, "--weight", "0.3", "--out", out)
  assert code == 1 and "other settings (weight: 0.5 -> 0.3)" in err[-1]
  assert out.read_bytes() == fused
  manifest = json.loads((tmp_path / ("fused.trec" + contracts.FILE_MANIFEST_SUFFIX)).read_text())
  assert manifest["stage"] == "fuse" and manifest["files"] == ["fused.trec"]


def test_search_refuses_a_file_no_stage_wrote_and_its_query_folder(tmp_path, capsys):
  docs = write_embeddings(tmp_path / "docs", list(range(30)))
  queries = write_embeddings(tmp_path / "q", [f"q{i}" for i in range(4)], id_type=pa.string(),
                             seed=1)
  index = tmp_path / "index.faiss"
  # Hand-written vectors: no vectors.json names their model, so they are taken unchecked.
  assert run_cli(capsys, "index", "--embeddings", docs, "--out", index,
                 "--allow_unchecked_vectors")[0] == 0
  base = ["search", "--index", index, "--queries", queries, "--k", "3",
          "--allow_unchecked_vectors"]
  mine = tmp_path / "results.trec"
  mine.write_bytes(NOTES)
  code, err = run_cli(capsys, *base, "--out", mine)
  assert code == 1 and err[-1].startswith(f"twotower search: error: {mine}: exists, and no "
                                          "twotower stage recorded how it was made")
  assert mine.read_bytes() == NOTES
  before = snapshot(queries)
  code, err = run_cli(capsys, *base, "--out", queries, "--overwrite")
  assert code == 1 and "the output is an input of this run" in err[-1]
  code, err = run_cli(capsys, *base, "--out", tmp_path, "--overwrite")
  assert code == 1 and "the output holds an input of this run" in err[-1]
  code, err = run_cli(capsys, *base, "--out", index, "--overwrite")
  assert code == 1 and "the output is an input of this run" in err[-1]
  assert snapshot(queries) == before
  # Named with --overwrite, the user's file is replaced (never another stage's output).
  assert run_cli(capsys, *base, "--out", mine, "--overwrite")[0] == 0
  assert mine.read_text().startswith("q0 Q0 ")
  code, err = run_cli(capsys, *base, "--out", queries / "run.trec", "--k", "2")
  assert code == 0, err[-1]  # a file in an input's folder is not the input


class _Retriever:
  """Stands in for a loaded bundle: query's own path is what is under test."""

  @classmethod
  def load(cls, bundle, verify=None):
    return cls()

  def search(self, queries, **_):
    return [[] for _ in queries]

  def close(self):
    pass


def test_query_refuses_its_queries_as_out_and_a_bad_line_leaves_nothing(tmp_path, capsys,
                                                                         monkeypatch):
  from twotower.deploy.serving import query
  monkeypatch.setattr(query, "Retriever", _Retriever)
  queries = tmp_path / "q.jsonl"
  queries.write_bytes(b'{"id": "1", "query": "what is a city"}\n')
  for extra in ((), ("--overwrite",)):
    code, err = run_cli(capsys, "query", tmp_path / "bundle", "--jsonl", queries, "--out",
                        queries, *extra)
    assert code == 1 and err[-1] == (f"twotower query: error: {queries}: the output is an "
                                     f"input of this run ({queries}); give another --out")
    assert queries.read_bytes() == b'{"id": "1", "query": "what is a city"}\n'
  # A bad line after a first batch was written: no partial output, the old one untouched.
  lines = [json.dumps({"id": str(i), "query": f"question {i}"})
           for i in range(query.BATCH + 10)]
  queries.write_text("\n".join(lines + ["{not json"]) + "\n")
  hits = tmp_path / "hits.jsonl"
  code, err = run_cli(capsys, "query", tmp_path / "bundle", "--jsonl", queries, "--out", hits)
  assert code == 1 and f"{queries}:{query.BATCH + 11}: not JSON" in err[-1]
  assert sorted(os.listdir(tmp_path)) == ["q.jsonl"]  # no output, no temp, no manifest
  queries.write_text("\n".join(lines) + "\n")
  assert run_cli(capsys, "query", tmp_path / "bundle", "--jsonl", queries, "--out", hits)[0] == 0
  good = hits.read_bytes()
  assert len(good.splitlines()) == len(lines)
  queries.write_text("\n".join(lines + ["{not json"]) + "\n")
  code, _ = run_cli(capsys, "query", tmp_path / "bundle", "--jsonl", queries, "--out", hits)
  assert code == 1 and hits.read_bytes() == good
  assert sorted(os.listdir(tmp_path)) == ["hits.jsonl", "hits.jsonl" +
                                          contracts.FILE_MANIFEST_SUFFIX, "q.jsonl"]


def test_bundle_overwrite_replaces_only_the_old_bundles_files(tmp_path, monkeypatch):
  """`twotower bundle` claims and replaces its folder through twotower.core.outputs like every
  stage (building a real one is slow, the JVM: test_serving builds it; here the parts are
  written by a stand-in): the old bundle run's listed files go, the user's note stays; an
  input inside the folder, another stage's output, and a bundle no stage manifest records
  are refused."""
  from twotower.deploy.bundling import bundle
  from bundle_manifest_fixtures import a_manifest

  def build(config, bundle_dir):  # what run() puts in the stage's new folder
    (tmp_path / "built").write_text(config.reqa)
    lucene_dir = os.path.join(bundle_dir, contracts.BUNDLE_LUCENE_DIR)
    os.makedirs(lucene_dir)
    with open(os.path.join(lucene_dir, "seg2"), "wb") as f:
      f.write(b"new")
    os.makedirs(os.path.join(bundle_dir, contracts.BUNDLE_QUERY_ENCODER_DIR, "assets"))
    manifest = a_manifest()
    manifest.write(bundle_dir)
    return manifest

  monkeypatch.setattr(bundle, "_build", build)
  config = lambda reqa, **kw: bundle.BundleConfig(  # noqa: E731
      model=str(tmp_path / "model"), reqa=reqa, out=str(tmp_path / "bundle"), weight=0.5, **kw)
  out = tmp_path / "bundle"
  bundle.run(config("reqa-1"))
  (out / contracts.BUNDLE_LUCENE_DIR / "seg").write_bytes(b"old")  # as if the run wrote it
  outputs.write_manifest(str(out), bundle.STAGE, outputs.settings_of(config("reqa-1")))
  (out / "my_notes.txt").write_bytes(NOTES)
  with pytest.raises(ValueError, match=r"holds a `twotower bundle` run with other settings "
                                       r"\(reqa: 'reqa-1' -> 'reqa-2'\); give another --out, or "
                                       "--overwrite"):
    bundle.run(config("reqa-2"))
  with pytest.raises(ValueError, match="the output holds an input of this run"):
    bundle.run(config("reqa-2", embeddings=str(out / "emb"), overwrite=True))
  assert (tmp_path / "built").read_text() == "reqa-1"  # refused before anything was built
  bundle.run(config("reqa-2", overwrite=True))
  assert (tmp_path / "built").read_text() == "reqa-2"
  made = snapshot(out)
  assert set(made) == {f"{contracts.BUNDLE_LUCENE_DIR}/seg2", contracts.BUNDLE_MANIFEST_FILE,
                       contracts.MANIFEST_FILE, "my_notes.txt"}
  assert made["my_notes.txt"] == NOTES and os.path.isdir(
      out / contracts.BUNDLE_QUERY_ENCODER_DIR / "assets")  # empty, as TF's
  assert outputs.read_manifest(str(out))["files"] == [
      contracts.BUNDLE_LUCENE_DIR + "/seg2", contracts.BUNDLE_MANIFEST_FILE]
  assert sorted(os.listdir(tmp_path)) == ["built", "bundle"]  # the old folder gone whole
  # The same settings again: this stage's own output, replaced without --overwrite.
  bundle.run(config("reqa-2"))
  assert snapshot(out) == made
  other = tmp_path / "pairs"
  other.mkdir()
  outputs.write_manifest(str(other), "pairs", {})
  with pytest.raises(ValueError, match="holds the output of `twotower pairs`"):
    bundle.run(dataclasses.replace(config("reqa-2", overwrite=True), out=str(other)))
  # A bundle of a twotower before bundles had a stage manifest: refused before any work, with
  # --overwrite too (the new parts would land on files no manifest gives this stage).
  os.remove(out / contracts.MANIFEST_FILE)
  (tmp_path / "built").unlink()
  with pytest.raises(ValueError, match=f"{out}: holds manifest.json, query_encoder, lucene, which no "
                                       r"twotower manifest \(_twotower.json\) records"):
    bundle.run(config("reqa-3", overwrite=True))
  assert not (tmp_path / "built").exists() and snapshot(out) == {
      k: v for k, v in made.items() if k != contracts.MANIFEST_FILE}
