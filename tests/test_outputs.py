"""A stage owns its output folder (twotower.core.outputs): re-running into it with other settings is
refused naming them, with the same settings it resumes or replaces, --overwrite starts over,
and a reader never sees two runs mixed. Real stages on tiny inputs the tests write."""

from __future__ import annotations

import json
import os

import pytest

from twotower import cli
from twotower.core import contracts, outputs
from reqa_fixtures import ARTICLES
from wikidump_fixtures import many_pages, write_dump


def run_cli(capsys, *args):
  code = cli.main([str(a) for a in args])
  return code, capsys.readouterr().err.strip().splitlines()


def test_claim_rules(tmp_path):
  """The rules on plain folders: empty is free, the same settings are this run's, others and
  unrecorded files are refused naming what differs, --overwrite removes what the old run's
  manifest lists (here: only the manifest)."""
  out = str(tmp_path / "out")
  assert outputs.claim(out, "s", {"a": 1}) is False  # absent
  os.makedirs(out)
  outputs.write_manifest(out, "s", {"a": 1, "b": {"c": (1, 2)}})
  assert outputs.claim(out, "s", {"a": 1, "b": {"c": [1, 2]}}) is True
  with pytest.raises(ValueError, match=r"other settings \(a: 1 -> 2; b.c: \[1, 2\] -> "
                                       r"\[3\]\); give another --out, or --overwrite"):
    outputs.claim(out, "s", {"a": 2, "b": {"c": [3]}})
  with pytest.raises(ValueError, match="holds the output of `twotower s`"):
    outputs.claim(out, "other", {"a": 1})
  (tmp_path / "loose").mkdir()
  (tmp_path / "loose" / "x.parquet").write_bytes(b"")
  with pytest.raises(ValueError, match=r"holds 1 files or folders \(x.parquet\) that no "
                                       "twotower stage recorded"):
    outputs.claim(str(tmp_path / "loose"), "s", {})
  assert outputs.claim(out, "s", {"a": 2}, overwrite=True) is False
  assert os.listdir(out) == []


def test_staged_failure_leaves_the_old_output_and_no_temp(tmp_path):
  out = tmp_path / "out"
  with outputs.staged(str(out), "s", {"a": 1}) as tmp:
    (tmp_path / os.path.basename(tmp) / "f.txt").write_text("one")
  with pytest.raises(KeyboardInterrupt):
    with outputs.staged(str(out), "s", {"a": 1}) as tmp:
      (tmp_path / os.path.basename(tmp) / "g.txt").write_text("half")
      raise KeyboardInterrupt
  assert sorted(os.listdir(tmp_path)) == ["out"]
  assert sorted(os.listdir(out)) == [contracts.MANIFEST_FILE, "f.txt"]
  assert outputs.listed(str(out)) == [f"{out}/f.txt"]


@pytest.mark.slow  # three pair-pipeline runs on a 12-page dump (~10 s each)
def test_pairs_refuses_other_settings_and_never_mixes_shards(tmp_path, capsys):
  dump = write_dump(tmp_path / "a-pages-articles.xml", many_pages(12))
  other = write_dump(tmp_path / "b-pages-articles.xml", many_pages(6))
  out = tmp_path / "pairs"
  base = ["pairs", "--dump", dump, "--out", out, "--heldout_percent", "0"]
  assert run_cli(capsys, *base, "--num_shards", "2")[0] == 0
  code, err = run_cli(capsys, "pairs", "--dump", other, "--out", out, "--heldout_percent", "0",
                      "--num_shards", "1")
  assert code == 1
  assert err[-1] == (f"twotower pairs: error: {out}: holds a `twotower pairs` run with other "
                     f"settings (dump: {str(dump)!r} -> {str(other)!r}; num_shards: 2 -> 1); "
                     "give another --out, or --overwrite to replace it (files it did not "
                     "write are kept)")
  assert run_cli(capsys, "pairs", "--dump", other, "--out", out, "--heldout_percent", "0",
                 "--num_shards", "1", "--overwrite")[0] == 0
  shards = sorted(os.listdir(out / "passages"))
  assert shards == ["passages-00000-of-00001.parquet"]  # none of the 2-shard run is left
  manifest = json.loads((out / contracts.MANIFEST_FILE).read_text())
  assert manifest["inputs"] == [str(other)] and "stats.json" in manifest["files"]
  assert {f"passages/{s}" for s in shards} <= set(manifest["files"])


def test_reqa_same_settings_replaces_other_settings_refused(tmp_path, capsys):
  squad = tmp_path / "squad.json"
  squad.write_text(json.dumps({"data": ARTICLES}), encoding="utf-8")
  out = tmp_path / "reqa"
  assert run_cli(capsys, "reqa", "--squad", squad, "--out", out, "--num_shards", "2")[0] == 0
  (out / "finetune" / "stale-00000-of-00001.tfrecord").write_bytes(b"theirs")
  assert run_cli(capsys, "reqa", "--squad", squad, "--out", out, "--num_shards", "2")[0] == 0
  # Replaced, but a file no run of the stage wrote is kept (not the stage's to remove) and
  # listed nowhere (no reader takes it).
  assert (out / "finetune" / "stale-00000-of-00001.tfrecord").read_bytes() == b"theirs"
  manifest = json.loads((out / contracts.MANIFEST_FILE).read_text())
  assert "finetune/stale-00000-of-00001.tfrecord" not in manifest["files"]
  code, err = run_cli(capsys, "reqa", "--squad", squad, "--out", out, "--num_shards", "1")
  assert code == 1 and "other settings (num_shards: 2 -> 1)" in err[-1]
  assert sorted(p for p in os.listdir(tmp_path) if p != "squad.json") == ["reqa"]  # no temp


def test_finetune_resumes_its_own_run_and_refuses_another(tmp_path, capsys):
  """The issue's cases: a failed re-run with another hidden_dim must not rewrite
  config.yaml; the same settings resume; a run dir without a manifest (one older than
  manifests: its config.yaml no longer speaks for it) is refused as files no stage
  recorded."""
  from twotower.pipelines.reqa import builder as reqa
  squad = tmp_path / "squad.json"
  squad.write_text(json.dumps({"data": ARTICLES}), encoding="utf-8")
  reqa.run(reqa.ReqaConfig(out=str(tmp_path / "reqa"), squad=str(squad),
                           validation_percent=50))
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join([*contracts.RESERVED_TOKENS, "what", "colour", "thing", "topic"])
                   + "\n", encoding="utf-8")
  out = tmp_path / "ft"
  args = ["finetune", "--config", "tiny", "--init", "none", "--reqa", tmp_path / "reqa",
          "--split", "80", "--vocab", vocab, "--out", out, "--steps", "1", "--progress", "none",
          "--no_recall", "--no_export"]
  assert run_cli(capsys, *args)[0] == 0
  config = (out / contracts.RUN_CONFIG_FILE).read_text()
  code, err = run_cli(capsys, *args, "--set", "model.hidden_dim=64")
  assert code == 1 and "other settings (model.hidden_dim: 32 -> 64)" in err[-1]
  assert (out / contracts.RUN_CONFIG_FILE).read_text() == config  # not rewritten
  code, err = run_cli(capsys, *args)
  assert code == 0 and any("nothing to do" in line or "RESUME" in line for line in err)
  # A run dir without a manifest (written before manifests, ae09f05): not taken as a run.
  (out / contracts.MANIFEST_FILE).unlink()
  code, err = run_cli(capsys, *args)
  assert code == 1 and "that no twotower stage recorded" in err[-1], err[-1]
  assert (out / contracts.RUN_CONFIG_FILE).read_text() == config


@pytest.mark.slow  # starts the JVM (~20 s)
def test_bm25_refuses_other_settings_and_keeps_no_lock_after_a_failure(tmp_path, capsys):
  from twotower.pipelines.reqa import builder as reqa
  squad = tmp_path / "squad.json"
  squad.write_text(json.dumps({"data": ARTICLES}), encoding="utf-8")
  reqa.run(reqa.ReqaConfig(out=str(tmp_path / "reqa"), squad=str(squad)))
  out = tmp_path / "bm25"
  args = ["bm25", "--reqa", tmp_path / "reqa", "--out", out, "--split", "all"]
  assert run_cli(capsys, *args)[0] == 0
  (out / "my_notes.txt").write_bytes(b"mine")
  assert run_cli(capsys, *args)[0] == 0  # the same settings: replaced, the user's file kept
  assert (out / "my_notes.txt").read_bytes() == b"mine"
  assert "my_notes.txt" not in json.loads((out / contracts.MANIFEST_FILE).read_text())["files"]
  code, err = run_cli(capsys, *args, "--k1", "1.2")
  assert code == 1 and "other settings (k1: 0.9 -> 1.2)" in err[-1]
  # A failure while indexing (candidates.parquet is not one): the run is built beside the
  # folder (outputs.staged), so the folder is left as it was, and no half index anywhere.
  before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
  (tmp_path / "reqa" / contracts.CANDIDATES_FILE).write_bytes(b"not parquet")
  code, err = run_cli(capsys, *args, "--overwrite")
  assert code == 1 and "Traceback" not in "\n".join(err)
  assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
  assert sorted(os.listdir(tmp_path)) == ["bm25", "reqa", "squad.json"]  # no temp folder
  assert (out / "my_notes.txt").read_bytes() == b"mine"
