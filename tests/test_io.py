"""Shared I/O helpers: globbing through Beam FileSystems, atomic writes, Beam counters."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline

from twotower import io


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


def test_write_json_is_atomic_and_round_trips(tmp_path):
  path = tmp_path / "deep" / "stats.json"
  io.write_json(str(path), {"pages_read": 3})
  assert io.read_json(str(path)) == {"pages_read": 3}
  assert [p.name for p in path.parent.iterdir()] == ["stats.json"]  # no temp file left


def test_beam_counters_and_means():
  def count(x):
    beam.metrics.Metrics.counter(io.counter_names.NAMESPACE, "items").inc()
    beam.metrics.Metrics.counter(io.counter_names.NAMESPACE, "tokens").inc(x)
    beam.metrics.Metrics.counter("other", "ignored").inc()
    return x

  p = TestPipeline()
  _ = p | beam.Create([1, 2, 3]) | beam.Map(count)
  stats = io.beam_counters(p.run())
  assert stats == {"items": 3, "tokens": 6}
  io.add_mean(stats, "tokens_mean", "tokens", "items")
  assert stats["tokens_mean"] == 2.0


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
  """What a stage hands its workers (twotower.io.with_absolute_paths): a worker pool runs in
  another directory, where a relative path names nothing."""
  monkeypatch.chdir(tmp_path)
  assert io.absolute("dumps/a-*.xml.bz2, gs://bucket/b.xml ,/abs/c.txt") == (
      f"{tmp_path}/dumps/a-*.xml.bz2,gs://bucket/b.xml,/abs/c.txt")
  assert io.absolute("") == "" and io.absolute(None) is None
