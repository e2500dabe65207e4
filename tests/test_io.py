"""Shared I/O helpers: the one file matcher, atomic writes, the machine a result names."""

from __future__ import annotations

import pytest

from twotower.core import files as io


def test_match_files_sorted_and_comma_separated(tmp_path):
  for name in ("b.xml", "a.xml", "c.txt"):
    (tmp_path / name).write_text("x")
  got = io.match_files(f"{tmp_path}/*.xml,{tmp_path}/c.txt")
  assert [p.rsplit("/", 1)[1] for p in got] == ["a.xml", "b.xml", "c.txt"]


def test_match_files_order_does_not_depend_on_the_directories(tmp_path):
  """The same two files read in the same order wherever the second one lives (a pair
  pipeline's output order follows it): a grid's work directory on either side of the dump."""
  (tmp_path / "dump").mkdir()
  (tmp_path / "dump" / "wiki-pages.xml").write_text("x")
  for work in ("a-work", "z-work"):
    (tmp_path / work).mkdir()
    (tmp_path / work / "squad-articles.xml").write_text("x")
    got = io.match_files(f"{tmp_path}/dump/wiki-pages.xml,{tmp_path}/{work}/squad-articles.xml")
    assert [p.rsplit("/", 1)[1] for p in got] == ["squad-articles.xml", "wiki-pages.xml"]


def test_match_files_names_the_pattern(tmp_path):
  with pytest.raises(FileNotFoundError, match="nothing-"):
    io.match_files(str(tmp_path / "nothing-*"))


def test_match_files_missing_ok_gives_an_empty_list(tmp_path):
  assert io.match_files(str(tmp_path / "nothing-*"), missing_ok=True) == []


def test_a_path_with_a_comma_in_its_name_is_taken_whole(tmp_path):
  folder = tmp_path / "runs,2026"
  folder.mkdir()
  (folder / "b.txt").write_text("x")
  (folder / "a.txt").write_text("x")
  assert io.match_files(f"{folder}/*.txt") == [f"{folder}/a.txt", f"{folder}/b.txt"]


def test_match_files_leaves_out_hidden_temp_files(tmp_path):
  # An atomic write's temp file (`.tmp-*`, io._write_local) is never read as a shard.
  (tmp_path / "s-00000.parquet").write_text("x")
  (tmp_path / ".tmp-abcs-00001.parquet").write_text("x")
  assert io.match_files(f"{tmp_path}/*.parquet") == [f"{tmp_path}/s-00000.parquet"]


def test_a_glob_matches_files_and_a_path_named_whole_itself(tmp_path):
  # As Beam's match: `run/emb-*` gives the files it matches, not the folders emb-0, emb-1
  # (a reader of folders globs them itself); a folder named whole is returned, for its
  # caller to say what is wrong with it.
  (tmp_path / "emb-0").mkdir()
  (tmp_path / "emb-1.parquet").write_text("x")
  assert io.match_files(f"{tmp_path}/emb-*") == [f"{tmp_path}/emb-1.parquet"]
  assert io.match_files(f"{tmp_path}/emb-0") == [f"{tmp_path}/emb-0"]


def test_one_order_with_or_without_a_manifest(tmp_path):
  """A reader of an output gets its files in the same order whether the manifest lists them
  or the glob finds them (contracts.manifests.listed_files falls back to io.match_files)."""
  from twotower.core import outputs
  from twotower.core.contracts import manifests
  out = tmp_path / "out"
  (out / "pairs").mkdir(parents=True)
  names = ["train-00010-of-00011.tfrecord", "train-00002-of-00011.tfrecord",
           "train-00001-of-00011.tfrecord"]
  for name in names:
    (out / "pairs" / name).write_text("x")
  pattern = f"{out}/pairs/train-*.tfrecord"
  globbed = manifests.listed_files(str(out), pattern)
  outputs.write_manifest(str(out), "pairs", {}, files=[f"pairs/{n}" for n in names])
  assert manifests.listed_files(str(out), pattern) == globbed == \
      [f"{out}/pairs/{n}" for n in sorted(names)]


def test_write_json_is_atomic_and_round_trips(tmp_path):
  path = tmp_path / "deep" / "stats.json"
  io.write_json(str(path), {"pages_read": 3})
  assert io.read_json(str(path)) == {"pages_read": 3}
  assert [p.name for p in path.parent.iterdir()] == ["stats.json"]  # no temp file left


def test_write_text_gives_the_mode_of_a_plain_open(tmp_path):
  # mkstemp's 0600 would make results unreadable to other users of a shared machine.
  import os
  import stat
  umask = os.umask(0o022)
  try:
    path = tmp_path / "a.txt"
    io.write_text(str(path), "x")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
  finally:
    os.umask(umask)


def test_absolute_makes_local_paths_absolute_and_leaves_remote_ones(tmp_path, monkeypatch):
  """What a stage hands its workers (twotower.core.files.with_absolute_paths): a worker pool runs in
  another directory, where a relative path names nothing."""
  monkeypatch.chdir(tmp_path)
  assert io.absolute("dumps/a-*.xml.bz2, gs://bucket/b.xml ,/abs/c.txt") == (
      f"{tmp_path}/dumps/a-*.xml.bz2,gs://bucket/b.xml,/abs/c.txt")
  assert io.absolute("") == "" and io.absolute(None) is None


def test_machine_names_the_cpu_and_its_float_extensions():
  m = io.machine()
  assert m["cpu"] and int(m["cores"]) >= 1 and m["python"].count(".") == 2
  names = [name for _, name in io.FLOAT_ISA]
  assert all(part in names for part in m["isa"].split(", ") if part)
