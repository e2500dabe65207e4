"""The Beam stages through Beam's portable stack: a job service and a 2-worker pool on
127.0.0.1 (started and stopped by `twotower runner`'s launcher), `--runner=PortableRunner
--environment_type=EXTERNAL`, compared with the same command on the DirectRunner, every
output file and every counter.

The commands run from the test's folder with relative paths, while the pool's workers run in
the runner's state folder: a path handed to the workers as given would name nothing there
(tio.with_absolute_paths).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

import pytest

from twotower import cli
from twotower.core.contracts import codecs
from wikidump_fixtures import many_pages, write_dump

#: `<prefix>-SSSSS-of-NNNNN<suffix>`: a sharded output (pipelines.shared.shards, Beam's sinks).
SHARD = re.compile(r"-\d{5}-of-\d{5}(?=\.[a-z]+$)")


def _comparable(name: str, data: bytes):
  """What of a file must be equal between the runs: its bytes; for the two files that
  record how a run was made, its JSON without what differs by design:

  * pairs' config.json records --out (each run has its own) and the Beam flags;
  * the manifest (_twotower.json) lists the files written, whose shard names count the
    shards (see assert_same_outputs): compared as the set of names without shard numbers.
  """
  base = os.path.basename(name)
  if base == "config.json":
    return {k: v for k, v in json.loads(data).items() if k not in ("out", "beam_args")}
  if base == "_twotower.json":
    manifest = json.loads(data)
    manifest["files"] = sorted({SHARD.sub("", f) for f in manifest["files"]})
    return manifest
  return data


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
  """Job service + worker pool on free loopback ports; stopped after the module's tests,
  also when one fails."""
  from twotower.deploy.portable import launcher
  state = str(tmp_path_factory.mktemp("runner"))
  services = launcher.start(launcher.RunnerConfig(state_dir=state, job_port=0, worker_port=0,
                                                  workers=2, python=sys.executable,
                                                  start_timeout_s=120))
  try:
    yield services
  finally:
    launcher.stop(state)
    assert launcher.status(state) == []


def _records(path: str) -> list:
  """A shard's records, each as exact bytes (TFRecord payloads) or exact values (Parquet
  rows, with the file's schema)."""
  if path.endswith(".tfrecord"):
    return list(codecs.read_tfrecords([path]))
  import pyarrow.parquet as pq
  table = pq.read_table(path)
  schema = str(table.schema)  # (with its key-value metadata)
  return [json.dumps({"schema": schema, **row}, sort_keys=True, default=repr)
          for row in table.to_pylist()]


def _files(out: str) -> dict[str, list[str]]:
  """relative name (a sharded output's name without its shard numbers) -> its files."""
  files: dict[str, list[str]] = {}
  for folder, _, names in os.walk(out):
    for name in names:
      path = os.path.join(folder, name)
      files.setdefault(SHARD.sub("", os.path.relpath(path, out)), []).append(path)
  return files


def assert_same_outputs(direct: str, portable: str) -> None:
  """Every file of `portable` is the one of `direct`, byte for byte, and vice versa; except:

  * what Beam's sinks write (.tfrecord, .parquet) is compared as the multiset of its records,
    each byte for byte (Parquet: each row's exact values, and the file's schema), with a
    sharded output's shards (`-SSSSS-of-NNNNN`) taken together: Beam promises no order of
    records, and how many shards there are and which records share a bundle (a shard, a
    Parquet row group) is the runner's choice; 2 SDK workers make 2 bundles where 1 made
    one (the DirectRunner with 2 workers differs from itself with 1 the same way);
  * config.json and the manifest, without what records the run's flags and shard count
    (_comparable).
  """
  a, b = _files(direct), _files(portable)
  assert sorted(a) == sorted(b)
  for name, paths in a.items():
    if name.endswith((".tfrecord", ".parquet")):
      expected = sorted(r for p in paths for r in _records(p))
      got = sorted(r for p in b[name] for r in _records(p))
      assert len(got) == len(expected) and got == expected, name
      continue
    (left,), (right,) = paths, b[name]
    with open(left, "rb") as f, open(right, "rb") as g:
      assert _comparable(name, f.read()) == _comparable(name, g.read()), name


def _both(runner, stage: str, args: list[str], out: str) -> tuple[str, str]:
  """`twotower STAGE ARGS` on the DirectRunner (--out OUT-direct) and through the runner
  (--out OUT-portable); both must exit 0."""
  assert cli.main([stage, *args, "--out", f"{out}-direct"]) == 0
  assert cli.main([stage, *args, "--out", f"{out}-portable", *runner.beam_args()]) == 0
  return f"{out}-direct", f"{out}-portable"


def _children(pid: int) -> list[str]:
  """/proc/<pid>/stat of each child of `pid` (a zombie's too)."""
  stats = []
  for entry in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
        stat = f.read()
    except OSError:
      continue
    if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
      stats.append(stat)
  return stats


def assert_workers_gone(runner, timeout_s: float = 30.0) -> None:
  """After a job, the pool's SDK workers exit and are reaped (no zombie left behind)."""
  deadline = time.monotonic() + timeout_s
  while _children(runner.pids["worker_pool"]) and time.monotonic() < deadline:
    time.sleep(0.2)
  assert _children(runner.pids["worker_pool"]) == []


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  return tmp_path


def test_pairs_through_the_portable_runner_writes_what_the_direct_runner_writes(runner,
                                                                                 in_tmp):
  write_dump(in_tmp / "testwiki-pages-articles.xml.bz2", many_pages(12))
  direct, portable = _both(runner, "pairs", ["--dump", "testwiki-pages-articles.xml.bz2",
                                             "--heldout_percent", "20"], "pairs")
  stats = json.loads((in_tmp / direct / "stats.json").read_text())
  assert stats["pages_kept"] == 12 and all(stats[f"pairs_{t}"] > 0 for t in ("ict", "wlp"))
  assert_same_outputs(direct, portable)
  assert_workers_gone(runner)


def test_with_one_worker_and_beams_shuffle_every_file_is_the_direct_runners(runner, in_tmp):
  """What makes the files differ above is only the runner's bundling: with one SDK worker and
  the same joins (Beam's GroupByKey, `--shuffle beam`: the portable path's), every file the
  job writes is the DirectRunner's byte for byte, the shards' TFRecords and Parquet too."""
  write_dump(in_tmp / "testwiki-pages-articles.xml.bz2", many_pages(12))
  args = ["--dump", "testwiki-pages-articles.xml.bz2", "--heldout_percent", "20",
          "--shuffle", "beam"]
  assert cli.main(["pairs", *args, "--out", "direct"]) == 0
  one_worker = [f for f in runner.beam_args() if not f.startswith("--direct_num_workers")]
  assert cli.main(["pairs", *args, "--out", "portable", *one_worker,
                   "--direct_num_workers=1"]) == 0
  direct, portable = _files("direct"), _files("portable")
  assert sorted(direct) == sorted(portable)
  for name, paths in direct.items():
    assert len(paths) == len(portable[name]), name
    for left, right in zip(sorted(paths), sorted(portable[name])):
      with open(left, "rb") as f, open(right, "rb") as g:
        if name.endswith(("config.json", "_twotower.json")):
          assert _comparable(name, f.read()) == _comparable(name, g.read()), name
        else:
          assert f.read() == g.read(), name


def test_reqa_and_embed_through_the_portable_runner_write_what_the_direct_runner_writes(
    runner, in_tmp):
  from twotower.testing import embed_standin, squad
  squad.write_squad("squad.json", n_articles=6)
  direct, portable = _both(runner, "reqa", ["--squad", "squad.json"], "reqa")
  assert json.loads((in_tmp / direct / "stats.json").read_text())["questions"] == 36
  assert_same_outputs(direct, portable)
  embed_standin.build_standin_savedmodel(
      "model", embed_standin.StandinConfig(dim=8, buckets=500, hidden=16))
  direct, portable = _both(runner, "embed", ["--model", "model", "--candidates",
                                             "reqa-direct/candidates.parquet",
                                             "--batch_size", "8"], "emb")
  stats = json.loads((in_tmp / direct / "stats.json").read_text())
  assert stats["embed_rows_embedded"] == stats["embed_rows_read"] == 36
  assert_same_outputs(direct, portable)


@pytest.mark.shared_data
def test_pairs_on_the_english_slice_through_the_portable_runner(runner, enwiki_slice, in_tmp):
  direct, portable = _both(runner, "pairs", ["--dump", str(enwiki_slice)], "slice")
  stats = json.loads((in_tmp / direct / "stats.json").read_text())
  assert stats["pages_read"] == 206 and stats["pairs_wlp"] > 0
  assert_same_outputs(direct, portable)
