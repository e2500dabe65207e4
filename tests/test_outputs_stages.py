"""A stage owns its output, stage by stage (the rules are twotower.core.outputs'; test_outputs.py
has pairs, reqa, finetune and bm25): re-running into it with other settings is refused with
an error naming the setting, with the same settings the output is replaced whole, and a
reader takes only the files a manifest lists. Real stages on tiny inputs the tests write."""

from __future__ import annotations

import json
import os
import shutil

import pyarrow.parquet as pq
import pytest

from twotower import cli
from twotower.core import contracts, outputs
from twotower.core.contracts import codecs
from twotower.core.contracts import manifests
from outputs_fixtures import write_embeddings
from reqa_fixtures import ARTICLES
from wikidump_fixtures import many_pages, write_dump


def run_cli(capsys, *args):
  code = cli.main([str(a) for a in args])
  return code, capsys.readouterr().err.strip().splitlines()


def no_temp(folder) -> bool:
  return not [n for n in os.listdir(folder) if ".tmp-" in n or ".old-" in n]


@pytest.fixture(scope="module")
def pairs_out(tmp_path_factory):
  """One pair pipeline run with held-out pages (for `heldout`), and its dump."""
  root = tmp_path_factory.mktemp("stages")
  dump = write_dump(root / "many-pages-articles.xml", many_pages(30))
  assert cli.main(["pairs", "--dump", dump, "--out", str(root / "pairs"), "--ict_per_page",
                   "20", "--heldout_percent", "40"]) == 0
  return root / "pairs"


def test_readers_take_only_the_passages_and_pairs_the_manifest_lists(pairs_out, tmp_path):
  """A stray shard in a pairs folder (another run's, another shard count) is read by no
  reader: vocab, MLM and heldout see the manifest's passages, pretraining its pairs."""
  from twotower.model import data
  copy = tmp_path / "pairs"
  shutil.copytree(pairs_out, copy)
  listed = codecs.passage_files(str(copy))
  stray = copy / "passages" / "passages-00000-of-00002.parquet"
  shutil.copy(listed[0], stray)
  ict = data.pair_files(str(copy), "ict", contracts.TRAIN)
  shutil.copy(ict[0], copy / "pairs" / "ict" / "train-00000-of-00002.tfrecord")
  for path in (str(copy), f"{copy}/passages", f"{copy}/passages/*.parquet"):
    assert codecs.passage_files(path) == listed and str(stray) not in listed
  assert data.pair_files(str(copy), "ict", contracts.TRAIN) == ict
  # Without a manifest (an older output) the glob is all there is.
  (copy / contracts.MANIFEST_FILE).unlink()
  assert str(stray) in codecs.passage_files(str(copy))
  assert len(data.pair_files(str(copy), "ict", contracts.TRAIN)) == len(ict) + 1


def test_pairs_same_settings_replace_and_keep_a_dump_inside_the_folder(tmp_path, capsys):
  """The experiment writes its dump into the pairs folder: a re-run reads it there and
  keeps it; the rest is replaced (a stray file no run wrote is kept, listed nowhere)."""
  out = tmp_path / "pairs"
  out.mkdir()
  dump = write_dump(out / "inside-pages-articles.xml", many_pages(8))
  args = ["pairs", "--dump", dump, "--out", out, "--heldout_percent", "0"]
  assert run_cli(capsys, *args)[0] == 0
  (out / "passages" / "stray.parquet").write_bytes(b"")
  assert run_cli(capsys, *args)[0] == 0
  assert (out / "inside-pages-articles.xml").exists()
  assert (out / "passages" / "stray.parquet").exists()
  manifest = json.loads((out / contracts.MANIFEST_FILE).read_text())
  assert "inside-pages-articles.xml" not in manifest["files"] and no_temp(tmp_path)
  assert "passages/stray.parquet" not in manifest["files"]
  code, err = run_cli(capsys, *args, "--ict_per_page", "3")
  assert code == 1 and "other settings (pairs.ict_per_page: " in err[-1], err[-1]


def test_heldout_refuses_another_task_and_replaces_its_own(pairs_out, tmp_path, capsys):
  out = tmp_path / "bench"
  args = ["heldout", "--pairs", pairs_out, "--out", out]
  assert run_cli(capsys, *args)[0] == 0
  questions = pq.read_table(out / contracts.questions_file("all")).num_rows
  (out / "stray.parquet").write_bytes(b"")
  assert run_cli(capsys, *args)[0] == 0
  # Replaced; the file no run wrote is kept, and listed nowhere.
  assert sorted(os.listdir(out)) == sorted([contracts.MANIFEST_FILE, contracts.STATS_FILE,
                                            contracts.CANDIDATES_FILE,
                                            contracts.questions_file("all"), "stray.parquet"])
  assert "stray.parquet" not in json.loads((out / contracts.MANIFEST_FILE).read_text())["files"]
  code, err = run_cli(capsys, *args, "--task", "bfs")
  assert code == 1 and err[-1] == (
      f"twotower heldout: error: {out}: holds a `twotower heldout` run with other settings "
      "(task: 'ict' -> 'bfs'); give another --out, or --overwrite to replace it "
      "(files it did not write are kept)")
  assert pq.read_table(out / contracts.questions_file("all")).num_rows == questions
  assert no_temp(tmp_path)


def test_vocab_file_refuses_other_settings_and_is_replaced_atomically(pairs_out, tmp_path,
                                                                      capsys, monkeypatch):
  monkeypatch.chdir(tmp_path)  # a temporary file would show up here
  out = tmp_path / "vocab.txt"
  args = ["vocab", "--passages", pairs_out, "--out", out, "--vocab_size", "200"]
  assert run_cli(capsys, *args)[0] == 0
  first = out.read_text()
  assert run_cli(capsys, *args)[0] == 0 and out.read_text() == first
  code, err = run_cli(capsys, *args[:-1], "300")
  assert code == 1 and err[-1] == (
      f"twotower vocab: error: {out}: was made by a `twotower vocab` run with other settings "
      "(vocab_size: 200 -> 300); give another --out, or --overwrite to replace it")
  assert out.read_text() == first
  assert run_cli(capsys, *args[:-1], "300", "--overwrite")[0] == 0
  with open(outputs.file_manifest_path(str(out)), encoding="utf-8") as f:
    manifest = json.load(f)
  assert manifest["settings"]["vocab_size"] == 300 and manifest["files"] == ["vocab.txt"]
  assert sorted(os.listdir(tmp_path)) == ["vocab.txt",
                                          "vocab.txt" + contracts.FILE_MANIFEST_SUFFIX]
  # A vocabulary no stage recorded (a user's file) is not replaced silently.
  (tmp_path / "mine.txt").write_text("[PAD]\n")
  code, err = run_cli(capsys, "vocab", "--passages", pairs_out, "--out", tmp_path / "mine.txt")
  assert code == 1 and "no twotower stage recorded how it was made" in err[-1]
  assert (tmp_path / "mine.txt").read_text() == "[PAD]\n"


def test_index_refuses_other_settings_and_leaves_no_shard_of_the_run_it_replaces(
    tmp_path, capsys):
  emb = write_embeddings(tmp_path / "emb", list(range(40)))
  outputs.write_manifest(str(emb), "embed", {})
  out = tmp_path / "idx" / "index.faiss"
  args = ["index", "--embeddings", emb, "--out", out, "--allow_unchecked_vectors"]
  assert run_cli(capsys, *args, "--num_index_shards", "2")[0] == 0
  sharded = sorted(os.listdir(out.parent))
  assert "index-00001-of-00002.faiss" in sharded
  code, err = run_cli(capsys, *args)
  assert code == 1 and "other settings (num_index_shards: 2 -> 1)" in err[-1], err[-1]
  assert sorted(os.listdir(out.parent)) == sharded
  assert run_cli(capsys, *args, "--overwrite")[0] == 0
  assert sorted(os.listdir(out.parent)) == ["index.faiss",
                                            "index.faiss" + contracts.FILE_MANIFEST_SUFFIX,
                                            "index.faiss.vectors.json"]
  assert run_cli(capsys, *args)[0] == 0  # the same settings: replaced


def test_evaluate_refuses_other_settings_and_replaces_its_report(tmp_path, capsys):
  from twotower.pipelines.reqa import builder as reqa
  squad = tmp_path / "squad.json"
  squad.write_text(json.dumps({"data": ARTICLES}), encoding="utf-8")
  reqa.run(reqa.ReqaConfig(out=str(tmp_path / "reqa"), squad=str(squad)))
  cands = [r["candidate_id"] for r in codecs.read_candidates(str(tmp_path / "reqa"))]
  questions = codecs.read_questions(str(tmp_path / "reqa"), "all")
  run = tmp_path / "run.trec"
  run.write_text("".join(f"{q.question_id} Q0 {cands[0]} 1 1.0 x\n" for q in questions),
                 encoding="utf-8")
  out = tmp_path / "ev"
  args = ["evaluate", "--reqa", tmp_path / "reqa", "--run", run, "--out", out]
  assert run_cli(capsys, *args)[0] == 0
  assert run_cli(capsys, *args, "--stem", "other")[0] == 1  # would sit beside the first
  code, err = run_cli(capsys, *args, "--ks", "1,5")
  assert code == 1 and "other settings (ks: [1, 5, 10, 50, 100] -> [1, 5])" in err[-1], err
  assert run_cli(capsys, *args, "--ks", "1,5", "--overwrite")[0] == 0
  assert sorted(os.listdir(out)) == [contracts.MANIFEST_FILE, "metrics.csv", "metrics.json",
                                     "metrics.md", "metrics.png"]
  assert no_temp(tmp_path)


@pytest.mark.slow  # Lucene (~20 s)
def test_hardneg_refuses_other_settings_and_finetune_reads_only_its_shards(tmp_path, capsys):
  from twotower.pipelines.reqa import builder as reqa
  squad = tmp_path / "squad.json"
  squad.write_text(json.dumps({"data": ARTICLES}), encoding="utf-8")
  out = tmp_path / "reqa"
  reqa.run(reqa.ReqaConfig(out=str(out), squad=str(squad), ratios=(80,)))
  args = ["hardneg", "--reqa", out, "--ratios", "80", "--k", "1", "--threads", "1"]
  assert run_cli(capsys, *args, "--num_shards", "2")[0] == 0
  code, err = run_cli(capsys, *args)
  assert code == 1 and "other settings (num_shards: 2 -> 1)" in err[-1], err[-1]
  assert run_cli(capsys, *args, "--overwrite")[0] == 0
  pattern = contracts.hard_negatives_pattern(str(out), "train-80", 1)
  main = contracts.hard_negatives_stats_path(str(out), 1)
  files = manifests.listed_files(str(out), pattern, main=main)
  assert [os.path.basename(f) for f in files] == ["train-80-hn1-00000-of-00001.tfrecord"]
  assert not os.path.exists(files[0].replace("of-00001", "of-00002"))  # replaced: removed
  # A stray shard (another run's) is not read; the plain pairs are reqa's, not hardneg's.
  shutil.copy(files[0], files[0].replace("00000-of-00001", "00000-of-00003"))
  assert manifests.listed_files(str(out), pattern, main=main) == files
  plain = manifests.listed_files(str(out), contracts.finetune_pattern(str(out), "train-80"))
  assert plain and not any("-hn" in f for f in plain)
