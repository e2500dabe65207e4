"""`twotower embed --num_input_shards N --input_shard i`: two shards embedded by two processes
at once give, together, exactly the rows of one unsharded run (ids and vector bytes, and the
digests of the rows embedded add up to the single run's), and the index built from their
union is the unsharded run's index, byte for byte; `index` refuses a union with a shard
missing, given twice, of another N or another input, and shards recorded by file names only
unless taken unchecked. (Shards of two inputs of the same names and row counts, and the
digests' properties: tests/test_shard_inputs.py.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("tensorflow")

from twotower import cli  # noqa: E402
from twotower.core import contracts, fingerprints, outputs
from twotower.commands import embed as embed_cmd  # noqa: E402
from twotower.core.contracts import counters as C  # noqa: E402
from twotower.eval import embeddings  # noqa: E402
from twotower.eval import faiss_index  # noqa: E402
from twotower.eval import index as index_stage  # noqa: E402
from twotower.pipelines import embed  # noqa: E402
from twotower.testing.embed_standin import StandinConfig, build_standin_savedmodel  # noqa

DIM = 16
ROWS = 90


def _candidates(path: str) -> None:
  """ROWS candidates; one with nothing to embed and one without an id (counted, skipped)."""
  table = pa.table({
      "candidate_id": [None if i == 5 else 7000 + 11 * i for i in range(ROWS)],
      "sentence": ["" if i == 9 else f"sentence {i} is about topic {i % 7}." for i in range(ROWS)],
      "passage": ["" if i == 9 else f"a passage on topic {i % 7} and more." for i in range(ROWS)],
      "title": [f"Topic {i % 7}" for i in range(ROWS)],
      "source": ["squad"] * ROWS, "section": [""] * ROWS,
  }, schema=contracts.CANDIDATE_SCHEMA)
  pq.write_table(table, path)


def _embed_process(model: str, candidates: str, out: str, *shard: str) -> subprocess.Popen:
  # --batch_size 1: a row's vector then depends on the row alone. In a batch, TensorFlow's
  # matmul kernels may round a row differently with other rows beside it (seen here: the
  # last bit of some floats), and a shard's batches hold other rows than the single run's.
  return subprocess.Popen(
      [sys.executable, "-m", "twotower.cli", "embed", "--model", model, "--candidates",
       candidates, "--out", out, "--batch_size", "1", *shard],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """One unsharded run and shards 0 and 1 of 2, all three embedded at once, each by its own
  process."""
  root = tmp_path_factory.mktemp("shards")
  model = build_standin_savedmodel(str(root / "model"), StandinConfig(dim=DIM, buckets=500,
                                                                      hidden=16))
  candidates = str(root / contracts.CANDIDATES_FILE)
  _candidates(candidates)
  folders = {"single": str(root / "single"), 0: str(root / "parts" / "emb-0"),
             1: str(root / "parts" / "emb-1")}
  procs = {name: _embed_process(model, candidates, out, *(
      () if name == "single" else ("--num_input_shards", "2", "--input_shard", str(name))))
           for name, out in folders.items()}
  for name, proc in procs.items():
    log, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"embed {name}: {log[-3000:]}"
  return {"root": root, "model": model, **folders}


def _rows(folder: str) -> list[tuple[int, bytes]]:
  table = pa.concat_tables([pq.read_table(f) for f in embeddings.folder_files(folder)])
  vectors = np.stack(table.column("embedding").to_numpy(zero_copy_only=False))
  return sorted(zip(table.column("id").to_pylist(),
                    (v.astype(np.float32).tobytes() for v in vectors)))


def _stats(folder: str) -> dict:
  with open(contracts.stats_path(folder), encoding="utf-8") as f:
    return json.load(f)


def _vectors_record(folder: str) -> dict:
  with open(fingerprints.folder_record_path(folder), encoding="utf-8") as f:
    return json.load(f)


@pytest.mark.slow  # three embed processes (TensorFlow, Beam) at once
def test_shards_union_is_the_unsharded_run(runs):
  single, part0, part1 = _rows(runs["single"]), _rows(runs[0]), _rows(runs[1])
  assert part0 and part1, "each shard holds rows"
  assert not {i for i, _ in part0} & {i for i, _ in part1}  # disjoint
  assert sorted(part0 + part1) == single  # ids and vector bytes
  assert len(single) == ROWS - 2
  # Each shard is its own output: a manifest listing its files, its stats and shard record.
  stats = {name: _stats(runs[name]) for name in ("single", 0, 1)}
  assert contracts.EMBED_INPUT_SHARD_KEY not in stats["single"]
  for i in (0, 1):
    listed = {os.path.basename(f) for f in outputs.listed(runs[i])}
    assert {contracts.STATS_FILE, "vectors.json"} <= listed
    assert any(f.endswith(contracts.EMBEDDINGS_SUFFIX) for f in listed)
    assert not [f for f in os.listdir(runs[i]) if f.startswith(".")]  # the job's digests file
    record = stats[i][contracts.EMBED_INPUT_SHARD_KEY]
    assert (record["index"], record["count"]) == (i, 2)
    assert record["input"] == stats[0][contracts.EMBED_INPUT_SHARD_KEY]["input"]
    assert record["input"]["rows"] == ROWS and record["input"]["kind"] == "candidates"
    assert len(record["input"]["content_sha256"]) == 64
  # The digests of the rows each shard embedded add up to the single run's.
  rows = {name: fingerprints.RowsDigest.of_record(_vectors_record(runs[name])["rows"])
          for name in ("single", 0, 1)}
  assert rows[0].count + rows[1].count == rows["single"].count == ROWS - 2
  assert fingerprints.RowsDigest().merge(rows[0]).merge(rows[1]) == rows["single"]
  # Every row counted by exactly one shard: the shards' counters add up to the single run's.
  for name in C.EMBED_ALWAYS:
    assert stats[0][name] + stats[1][name] == stats["single"][name], name
  assert stats["single"][C.EMBED_ROWS_SKIPPED_BAD_ID] == 1
  assert stats[0][C.EMBED_ROWS_SKIPPED_BAD_ID] == 1  # a row without an id: shard 0's


@pytest.mark.slow  # three embed processes (TensorFlow, Beam) at once
@pytest.mark.parametrize("spec", [faiss_index.IndexSpec("flat"),
                                  faiss_index.IndexSpec("ivf", nlist=4)])
def test_index_of_the_union_is_byte_identical(runs, tmp_path, spec):
  union = f"{runs[1]},{runs[0]}"  # in any order: read in shard order, added in id order
  single = index_stage.run(index_stage.IndexConfig(runs["single"], str(tmp_path / "one.faiss"),
                                                   index=spec, block_rows=16))
  sharded = index_stage.run(index_stage.IndexConfig(union, str(tmp_path / "two.faiss"),
                                                    index=spec, block_rows=16))
  globbed = index_stage.run(index_stage.IndexConfig(
      str(runs["root"] / "parts" / "emb-*"), str(tmp_path / "glob.faiss"), index=spec))
  assert single.vectors == sharded.vectors == ROWS - 2
  one = open(single.paths[0], "rb").read()
  assert open(sharded.paths[0], "rb").read() == one
  assert open(globbed.paths[0], "rb").read() == one
  assert (open(f"{single.paths[0]}.vectors.json").read()
          == open(f"{sharded.paths[0]}.vectors.json").read())


def _copy_with_record(source: str, target: str, **changes) -> str:
  """A copy of shard folder `source` whose input shard record has `changes` (`input`: the
  whole input record; `content_sha256`: its digest)."""
  shutil.copytree(source, target)
  stats = _stats(target)
  record = stats[contracts.EMBED_INPUT_SHARD_KEY]
  for key, value in changes.items():
    if key == "content_sha256":
      record["input"]["content_sha256"] = value
    else:
      record[key] = value
  with open(contracts.stats_path(target), "w", encoding="utf-8") as f:
    json.dump(stats, f)
  return target


@pytest.mark.slow  # three embed processes (TensorFlow, Beam) at once
def test_incomplete_or_mixed_shards_are_refused(runs, tmp_path):
  other_n = _copy_with_record(runs[1], str(tmp_path / "of3"), count=3)
  other_input = _copy_with_record(runs[1], str(tmp_path / "input"), content_sha256="0" * 64)
  cases = {
      runs[0]: "input shard 1 of 2 missing",
      f"{runs[0]},{other_input}": r"input.* \(input shard 1 of 2\) embedded another input than "
                                  r".*emb-0 \(input shard 0 of 2\).*shards of two inputs",
      f"{runs[0]},{other_n}": "is input shard 1 of 3, but",
      f"{runs[0]},{runs[1]},{runs['single']}": "is not an input shard",
  }
  for source, message in cases.items():
    with pytest.raises(ValueError, match=message):
      embeddings.embedding_files(source)
  twice = _copy_with_record(runs[1], str(tmp_path / "again"))
  with pytest.raises(ValueError, match=r"input shard 1 of 2 given twice: .*emb-1 and .*again"):
    embeddings.embedding_files(f"{runs[0]},{runs[1]},{twice}")
  # Through the command: exit 1, nothing written.
  out = tmp_path / "index.faiss"
  assert cli.main(["index", "--embeddings", runs[0], "--out", str(out)]) == 1
  assert not out.exists()


@pytest.mark.slow  # three embed processes (TensorFlow, Beam) at once
def test_shards_recorded_by_file_names_are_refused_unless_unchecked(runs, tmp_path, capsys,
                                                                    caplog):
  """Shards of a twotower before content digests (their input by file names and row counts)
  cannot be told from shards of another input of the same names: refused, naming the flag
  that takes them; with it, read (compared by their old records) with a warning."""
  old_input = {"kind": "candidates", "doc_text": "sentence+passage", "files": 1,
               "rows": ROWS, "sha256": "ab" * 32}
  old = [_copy_with_record(runs[i], str(tmp_path / f"old-{i}"), input=old_input)
         for i in (0, 1)]
  source = ",".join(old)
  with pytest.raises(ValueError, match=r"old-0: input shard 0 of 2 records its input by file "
                                       r"names and row counts only.*give "
                                       r"--allow_unchecked_vectors to use them unchecked"):
    embeddings.embedding_files(source)
  out = tmp_path / "index.faiss"
  result = index_stage.run(index_stage.IndexConfig(source, str(out),
                                                   allow_unchecked_vectors=True))
  assert result.vectors == ROWS - 2
  assert "taken unchecked (--allow_unchecked_vectors)" in caplog.text
  refused = tmp_path / "refused.faiss"  # the command last: it sets up logging its own way
  capsys.readouterr()  # what came before (a handler an earlier command left may print)
  assert cli.main(["index", "--embeddings", source, "--out", str(refused)]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "--allow_unchecked_vectors" in err[0] and not refused.exists()
  # Old records still tell two inputs apart by their names and counts.
  other = _copy_with_record(runs[1], str(tmp_path / "old-other"),
                            input={**old_input, "rows": ROWS + 1})
  with pytest.raises(ValueError, match="shards of two inputs"):
    embeddings.embedding_files(f"{old[0]},{other}", allow_unchecked=True)


@pytest.mark.parametrize("flags", [("--num_input_shards", "0"),
                                   ("--num_input_shards", "2", "--input_shard", "2"),
                                   ("--input_shard", "-1"),
                                   ("--input_shard", "1")])
def test_shard_flags_are_checked(flags, tmp_path, capsys):
  with pytest.raises(SystemExit) as e:
    embed_cmd.parse(["--model", str(tmp_path), "--out", str(tmp_path / "o"), "--candidates",
                     "c.parquet", *flags])
  assert e.value.code == 2
  assert "input_shard" in capsys.readouterr().err


def test_row_shard_is_a_stable_hash_of_the_id():
  # Pinned: a shard must not move between versions, machines or processes (str hashes are
  # salted per process; blake2b is not).
  assert [embed.row_shard(i, 2) for i in (0, 1, 2, 3, 7000, -5)] == [0, 1, 1, 0, 0, 1]
  assert [embed.row_shard(s, 3) for s in ("q1", "q2", "q3", "é")] == [2, 1, 2, 0]
  assert embed.row_shard(None, 4) == 0 and embed.row_shard(123, 1) == 0
  counts = np.bincount([embed.row_shard(i, 4) for i in range(4000)], minlength=4)
  assert counts.min() > 900  # about a quarter each


def test_blocks_by_id_spill_and_memory_paths_agree(tmp_path):
  """Above one bucket the vectors are spilled by id range and sorted bucket by bucket: the
  same blocks' content as sorting in memory."""
  rng = np.random.default_rng(3)
  ids = rng.permutation(np.arange(3000, dtype=np.int64) * 7 - 900)
  x = rng.standard_normal((3000, 8)).astype(np.float32)
  folder = tmp_path / "emb"
  folder.mkdir()
  schema = contracts.embedding_schema(8, pa.int64())
  for part, rows in enumerate(np.array_split(np.arange(3000), 3)):
    emb = pa.FixedSizeListArray.from_arrays(pa.array(x[rows].ravel()), 8)
    pq.write_table(pa.Table.from_arrays([pa.array(ids[rows]), emb], schema=schema),
                   folder / f"embeddings-0000{part}-of-00003.parquet")
  files = embeddings.embedding_files(str(folder))
  spilled = list(embeddings.iter_blocks_by_id(files, block_rows=50))   # 60 buckets
  in_memory = list(embeddings.iter_blocks_by_id(files, block_rows=5000))
  assert max(len(b[0]) for b in spilled) <= 50
  got_ids = np.concatenate([b[0] for b in spilled])
  assert np.array_equal(got_ids, np.sort(ids))
  assert np.array_equal(got_ids, np.concatenate([b[0] for b in in_memory]))
  order = np.argsort(ids)
  assert np.concatenate([b[1] for b in spilled]).tobytes() == x[order].tobytes()


@pytest.mark.slow  # three embeddings and two bundles (Lucene included)
def test_bundle_of_the_union_holds_the_unsharded_index(serving_bundle, tmp_path):
  """`bundle --embeddings` of the shards' folders: the index of a bundle of one unsharded run,
  byte for byte (the bundle checks that it holds exactly the documents' ids); one shard
  alone is refused."""
  from twotower.deploy.bundling import bundle  # pylint: disable=import-outside-toplevel
  candidates = contracts.candidates_path(serving_bundle["reqa"])
  # The same candidates with one sentence changed: the same file name and row count.
  table = pq.read_table(candidates)
  sentences = table.column("sentence").to_pylist()
  sentences[0] = sentences[0][::-1]
  changed = tmp_path / "changed" / contracts.CANDIDATES_FILE
  changed.parent.mkdir()
  pq.write_table(table.set_column(table.schema.get_field_index("sentence"), "sentence",
                                  pa.array(sentences)), changed)
  made = {}
  for name, shard, path in (("single", (1, 0), candidates), ("s0", (2, 0), candidates),
                            ("s1", (2, 1), candidates), ("c1", (2, 1), str(changed))):
    made[name] = str(tmp_path / name)
    embed.run(embed.EmbedConfig(model=serving_bundle["model"], out=made[name],
                                kind="candidates", path=path, batch_size=1,
                                num_input_shards=shard[0], input_shard=shard[1]))
  built = {}
  for name, source in (("single", made["single"]), ("union", f"{made['s0']},{made['s1']}")):
    built[name] = str(tmp_path / f"bundle-{name}")
    bundle.run(bundle.BundleConfig(model=serving_bundle["model"], reqa=serving_bundle["reqa"],
                                   out=built[name], embeddings=source, weight=0.5))
  index = [open(contracts.bundle_path(built[n], contracts.BUNDLE_INDEX_FILE), "rb").read()
           for n in ("single", "union")]
  assert index[0] == index[1]
  with pytest.raises(ValueError, match="input shard 1 of 2 missing"):
    bundle.run(bundle.BundleConfig(model=serving_bundle["model"], reqa=serving_bundle["reqa"],
                                   out=str(tmp_path / "b"), embeddings=made["s0"], weight=0.5))
  # Shard 1 of the changed candidates beside shard 0 of the bundle's: two inputs, both named.
  with pytest.raises(ValueError, match=r"c1 \(input shard 1 of 2\) embedded another input "
                                       r"than .*s0 \(input shard 0 of 2\)"):
    bundle.run(bundle.BundleConfig(model=serving_bundle["model"], reqa=serving_bundle["reqa"],
                                   out=str(tmp_path / "b"),
                                   embeddings=f"{made['s0']},{made['c1']}", weight=0.5))
  assert not (tmp_path / "b").exists()
