"""Input shards are tied to their input by its content: shard 0 of input A and shard 1 of input
B, whose files have the same names and row counts (what the shard record digested before), are
refused by `index`, naming both folders; the digests the Beam job records are those of the
streamed functions (pipelines.embed.input_digest, example_digests); and any same-size change
of the input's rows (one character of a text, two ids swapped) changes the input's digest and
is refused beside an unchanged shard (a Hypothesis property, on real shard folders).
"""

from __future__ import annotations

import json
import os
import shutil
import string
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

pytest.importorskip("tensorflow")

from twotower import cli  # noqa: E402
from twotower.core import contracts, fingerprints
from twotower.eval import embeddings  # noqa: E402
from twotower.eval import index as index_stage  # noqa: E402
from twotower.pipelines import embed  # noqa: E402
from twotower.testing.embed_standin import StandinConfig, build_standin_savedmodel  # noqa

ROWS = 40
TEXTS = ("sentence", "passage", "title")
#: Replacement characters: ASCII, as the fixture's texts are, so a change keeps the size.
CHARS = string.ascii_letters + string.digits + ".,;!?"


def _candidates(path, change=None) -> None:
  """ROWS candidates (one without an id) into `path`; `change(columns)` edits them first."""
  columns = {
      "candidate_id": [None if i == 5 else 9000 + 13 * i for i in range(ROWS)],
      "sentence": [f"sentence {i} is about topic {i % 5}." for i in range(ROWS)],
      "passage": [f"a passage on topic {i % 5} and more." for i in range(ROWS)],
      "title": [f"Topic {i % 5}" for i in range(ROWS)],
      "source": ["squad"] * ROWS, "section": [""] * ROWS,
  }
  if change:
    change(columns)
  path.parent.mkdir(parents=True, exist_ok=True)
  pq.write_table(pa.table(columns, schema=contracts.CANDIDATE_SCHEMA), path)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
  """Shards 0 and 1 of 2 of input A, and shard 1 of input B: A with one character of one
  sentence changed, in a file of the same name and row count."""
  root = tmp_path_factory.mktemp("shard_inputs")
  model = build_standin_savedmodel(str(root / "model"), StandinConfig(dim=8, buckets=200,
                                                                      hidden=8))

  def change(columns):
    columns["sentence"][7] = columns["sentence"][7].replace("about", "abXut")

  inputs = {"a": root / "a" / contracts.CANDIDATES_FILE,
            "b": root / "b" / contracts.CANDIDATES_FILE}
  _candidates(inputs["a"])
  _candidates(inputs["b"], change)
  made = {"root": root, "inputs": {k: str(v) for k, v in inputs.items()}}
  for name, source, shard in (("a0", "a", 0), ("a1", "a", 1), ("b1", "b", 1)):
    made[name] = str(root / "emb" / name)
    embed.run(embed.EmbedConfig(model=model, out=made[name], kind="candidates",
                                path=made["inputs"][source], num_input_shards=2,
                                input_shard=shard))
  return made


def _stats(folder: str) -> dict:
  with open(contracts.stats_path(folder), encoding="utf-8") as f:
    return json.load(f)


def _rows(path: str, spec: embed.InputSpec) -> list[dict]:
  return pq.read_table(path, columns=list(spec.columns)).to_pylist()


def _input(folder: str) -> dict:
  return _stats(folder)[contracts.EMBED_INPUT_SHARD_KEY]["input"]


def test_shards_of_two_inputs_of_the_same_names_and_counts_are_refused(shards, tmp_path,
                                                                      capsys):
  a, b = shards["inputs"]["a"], shards["inputs"]["b"]
  # What the shard record digested before: the file names and row counts, here the same.
  assert os.path.basename(a) == os.path.basename(b)
  assert pq.ParquetFile(a).metadata.num_rows == pq.ParquetFile(b).metadata.num_rows
  assert _input(shards["a0"]) == _input(shards["a1"]) != _input(shards["b1"])
  # One input's shards: one index.
  both = index_stage.run(index_stage.IndexConfig(f"{shards['a0']},{shards['a1']}",
                                                 str(tmp_path / "ok.faiss")))
  assert both.vectors == ROWS - 1
  # Shard 0 of A and shard 1 of B: refused, in either order, one line naming both folders.
  named = {"a0": f"{shards['a0']} (input shard 0 of 2)",
           "b1": f"{shards['b1']} (input shard 1 of 2)"}
  for first, second in (("a0", "b1"), ("b1", "a0")):
    out = tmp_path / "mixed.faiss"
    source = f"{shards[first]},{shards[second]}"
    capsys.readouterr()  # what came before (a handler an earlier command left may print)
    assert cli.main(["index", "--embeddings", source, "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"twotower index: error: {source}: ")
    assert f"{named[second]} embedded another input than {named[first]}" in err[0]
    assert err[0].endswith("shards of two inputs")
    assert not out.exists()
  # The flag for unrecorded vectors does not take shards of two inputs.
  with pytest.raises(ValueError, match="shards of two inputs"):
    embeddings.embedding_files(f"{shards['a0']},{shards['b1']}", allow_unchecked=True)


def test_the_jobs_digests_are_the_streamed_functions(shards):
  spec = embed.input_spec("candidates", shards["inputs"]["a"])
  rows = _rows(shards["inputs"]["a"], spec)
  whole = embed.input_digest(spec, rows)
  assert whole.count == ROWS
  per_shard = embed.example_digests(spec, rows, 2)
  for i in (0, 1):
    folder = shards[f"a{i}"]
    assert _input(folder) == embed.input_record(spec, whole)
    with open(fingerprints.folder_record_path(folder), encoding="utf-8") as f:
      assert json.load(f)["rows"] == per_shard[i].record()
  # The shards' rows add up to the whole input's rows embedded (one has no id: not embedded).
  (union,) = embed.example_digests(spec, rows)
  assert fingerprints.RowsDigest().merge(per_shard[0]).merge(per_shard[1]) == union
  assert union.count == ROWS - 1
  b_spec = embed.input_spec("candidates", shards["inputs"]["b"])
  assert _input(shards["b1"]) == embed.input_record(
      b_spec, embed.input_digest(b_spec, _rows(shards["inputs"]["b"], b_spec)))


def test_row_encoding_tells_apart_what_concatenation_would_not():
  hashes = {fingerprints.row_hash(v) for v in
            [("ab", "c"), ("a", "bc"), (1, "x"), ("1", "x"), (None, "x"), ("", "x"),
             (True, "x"), (1.0, "x")]}
  assert len(hashes) == 8
  digest = fingerprints.RowsDigest()
  for values in [(1, "x"), (2, "y")]:
    digest.add(values)
  other = fingerprints.RowsDigest().add((2, "y")).add((1, "x"))
  assert digest == other  # order-free
  assert fingerprints.RowsDigest.of_record(digest.record()) == digest
  # A sum, not a XOR: a row twice is not the same as no row at all.
  twice = fingerprints.RowsDigest().add((1, "x")).add((1, "x"))
  assert twice.total != 0 and twice != fingerprints.RowsDigest(2, 0)


def _mutations(rows: int):
  char = st.tuples(st.just("char"), st.integers(0, rows - 1), st.sampled_from(TEXTS),
                   st.integers(0, 1000), st.sampled_from(CHARS))
  swap = st.tuples(st.just("swap"), st.integers(0, rows - 1), st.integers(0, rows - 1))
  return st.one_of(char, swap)


def _mutate(rows: list[dict], mutation: tuple) -> list[dict]:
  """A copy of `rows` with one same-size change: a character of a text replaced by
  another, or the ids of two rows of different content swapped."""
  rows = [dict(r) for r in rows]
  if mutation[0] == "char":
    _, i, field, position, char = mutation
    text = rows[i][field]
    assume(text)
    position %= len(text)
    assume(text[position] != char)
    rows[i][field] = text[:position] + char + text[position + 1:]
  else:
    _, i, j = mutation
    content = lambda r: tuple(r[f] for f in TEXTS)  # noqa: E731
    # The same multiset of rows otherwise: not a change of the input at all.
    assume(rows[i]["candidate_id"] != rows[j]["candidate_id"])
    assume(content(rows[i]) != content(rows[j]))
    rows[i]["candidate_id"], rows[j]["candidate_id"] = (rows[j]["candidate_id"],
                                                        rows[i]["candidate_id"])
  return rows


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(mutation=_mutations(ROWS))
def test_any_same_size_change_of_the_input_is_refused_beside_an_unchanged_shard(shards,
                                                                                 mutation):
  spec = embed.input_spec("candidates", shards["inputs"]["a"])
  rows = _rows(shards["inputs"]["a"], spec)
  changed = _mutate(rows, mutation)
  before = embed.input_record(spec, embed.input_digest(spec, rows))
  after = embed.input_record(spec, embed.input_digest(spec, changed))
  assert after["rows"] == before["rows"] and after != before
  with tempfile.TemporaryDirectory() as tmp:
    # Shard 1 as `embed` records it for the changed input, beside A's own shard 0.
    folder = os.path.join(tmp, "changed-1")
    shutil.copytree(shards["a1"], folder)
    stats = _stats(folder)
    stats[contracts.EMBED_INPUT_SHARD_KEY]["input"] = after
    with open(contracts.stats_path(folder), "w", encoding="utf-8") as f:
      json.dump(stats, f)
    with pytest.raises(ValueError, match=r"changed-1 \(input shard 1 of 2\) embedded another "
                                         r"input than .*a0 \(input shard 0 of 2\)"):
      embeddings.embedding_files(f"{shards['a0']},{folder}")
