"""The embedding job: RunInference with our SavedModel handler, checked against direct calls
of the same SavedModel, and end to end on tiny Parquet inputs written here."""

from __future__ import annotations

import glob
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

tf = pytest.importorskip("tensorflow")

import apache_beam as beam  # noqa: E402
from apache_beam.ml.inference.base import KeyedModelHandler, RunInference  # noqa: E402
from apache_beam.testing.test_pipeline import TestPipeline  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402

from twotower.core import contracts, tower_text as texts  # noqa: E402
from twotower.commands import embed as embed_cmd  # noqa: E402
from twotower.core.contracts import counters as C  # noqa: E402
from twotower.pipelines import embed  # noqa: E402
from twotower.testing.embed_standin import StandinConfig, build_standin_savedmodel  # noqa

DIM = 16


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  return build_standin_savedmodel(str(tmp_path_factory.mktemp("model") / "standin"),
                                  StandinConfig(dim=DIM, buckets=1000, hidden=32))


@pytest.fixture(scope="module")
def direct(model_dir):
  """Direct SavedModel calls: the reference the job must reproduce."""
  loaded = tf.saved_model.load(model_dir)

  def doc(titles, texts_):
    return loaded.signatures[contracts.DOC_SIGNATURE](
        title=tf.constant(titles), text=tf.constant(texts_))["embedding"].numpy()

  def query(queries):
    return loaded.signatures[contracts.QUERY_SIGNATURE](
        query=tf.constant(queries))["embedding"].numpy()
  return doc, query


def _close_to(expected: dict):
  """Matcher: (id, vector) pairs equal `expected` {id: vector} up to float noise."""
  def check(actual):
    got = dict(actual)
    assert sorted(got) == sorted(expected), (sorted(got), sorted(expected))
    for key, vector in expected.items():
      np.testing.assert_allclose(got[key], vector, rtol=1e-5, atol=1e-6)
  return check


def test_keyed_handler_matches_direct_calls(model_dir, direct):
  examples = [(10, ("Paris", "the capital of france")), (11, ("Rome", "the eternal city")),
              (12, ("", "no title at all")), (13, ("Oslo", "capital of norway"))]
  doc, _ = direct
  expected = {k: v for (k, _), v in zip(examples, doc([t for _, (t, _) in examples],
                                                      [x for _, (_, x) in examples]))}
  handler = embed.SavedModelHandler(model_dir, contracts.DOC_SIGNATURE, embed.DOC_INPUTS,
                                    min_batch_size=3, max_batch_size=3)  # batches 3 + 1
  with TestPipeline() as p:
    out = (p | beam.Create(examples)
           | RunInference(KeyedModelHandler(handler)))
    assert_that(out, _close_to(expected))


def test_embed_transform_skips_and_counts_bad_rows(model_dir):
  spec = embed.input_spec("questions", "mem://questions")
  rows = [{"question_id": "q1", "question": "who wrote hamlet?"},
          {"question_id": "q2", "question": "   "},     # empty: counted, skipped
          {"question_id": None, "question": "no id"},   # no id: counted, skipped
          {"question_id": "q3", "question": "where is oslo?"}]
  handler = embed.SavedModelHandler(model_dir, spec.signature, spec.input_names,
                                    min_batch_size=2, max_batch_size=2)
  p = TestPipeline()
  # Tables of the embedding schema -> (id, embedding length) rows
  ids = (p | beam.Create(rows) | embed.Embed(spec, handler, DIM)
         | beam.FlatMap(lambda t: [(r["id"], len(r["embedding"])) for r in t.to_pylist()]))
  assert_that(ids, equal_to([("q1", DIM), ("q3", DIM)]))
  result = p.run()
  result.wait_until_finish()
  from twotower.pipelines.shared import beam_jobs
  counters = beam_jobs.beam_counters(result)
  assert counters == {C.EMBED_ROWS_READ: 4, C.EMBED_ROWS_EMBEDDED: 2,
                      C.EMBED_ROWS_SKIPPED_EMPTY: 1, C.EMBED_ROWS_SKIPPED_BAD_ID: 1}


def _read_shards(out_dir):
  files = sorted(glob.glob(f"{out_dir}/embeddings-*-of-*.parquet"))
  assert files, f"no shards in {out_dir}"
  tables = [pq.read_table(f) for f in files]
  return files, pa.concat_tables(tables)


def test_run_candidates_end_to_end(model_dir, direct, tmp_path):
  n = 40
  candidates = pa.table({
      "candidate_id": [1000 + 3 * i for i in range(n)],
      # 7: nothing to embed (skipped); 8: no sentence, so the passage alone is the document.
      "sentence": ["" if i in (7, 8) else f"sentence number {i} mentions topic {i % 5}."
                   for i in range(n)],
      "passage": ["" if i == 7 else f"a passage about topic {i % 5}, with several words."
                  for i in range(n)],
      "title": [f"Topic {i % 5}" for i in range(n)],
      "source": ["squad"] * n, "section": [""] * n,
  }, schema=contracts.CANDIDATE_SCHEMA)
  pq.write_table(candidates, tmp_path / contracts.CANDIDATES_FILE)
  out = tmp_path / "embeddings"
  embed_cmd.main(["--model", model_dir, "--out", str(out), "--num_shards", "2", "--batch_size",
                  "8", "--candidates", str(tmp_path / contracts.CANDIDATES_FILE)])

  files, table = _read_shards(out)
  assert len(files) == 2
  assert table.schema == contracts.embedding_schema(DIM, pa.int64())
  rows = candidates.to_pylist()
  kept = [r for r in rows if r["sentence"] or r["passage"]]
  got = dict(zip(table.column("id").to_pylist(),
                 table.column("embedding").combine_chunks().flatten().to_numpy().reshape(-1, DIM)))
  assert sorted(got) == [r["candidate_id"] for r in kept]
  doc, _ = direct
  expected = doc([r["title"] for r in kept],
                 [texts.candidate_doc_text(r["sentence"], r["passage"]) for r in kept])
  np.testing.assert_allclose(np.stack([got[r["candidate_id"]] for r in kept]), expected,
                             rtol=1e-5, atol=1e-6)
  stats = json.loads((out / contracts.STATS_FILE).read_text())
  assert stats == {C.EMBED_ROWS_READ: n, C.EMBED_ROWS_EMBEDDED: n - 1,
                   C.EMBED_ROWS_SKIPPED_EMPTY: 1, C.EMBED_ROWS_SKIPPED_BAD_ID: 0}


def test_run_passages_and_questions(model_dir, direct, tmp_path):
  (tmp_path / "passages").mkdir()
  passages = pa.table({
      "page_id": [5, 5, 9, 9], "passage_id": [0, 1, 0, 1 << 20],  # the last: id out of range
      "title": ["Five", "Five", "Nine", "Nine"],
      "text": ["first passage of five.", "second passage of five.", "nine's only passage.", "x"],
      "sentences": [["a"], ["b"], ["c"], ["x"]], "is_lead": [True, False, True, False],
      "section": ["", "History", "", ""],
  }, schema=contracts.PASSAGE_SCHEMA)
  pq.write_table(passages, tmp_path / "passages" / "passages-00000-of-00001.parquet")
  result = embed.run(embed.EmbedConfig(model=model_dir, out=str(tmp_path / "doc_emb"),
                                       kind="passages", path=str(tmp_path / "passages")))
  stats = result.stats
  # The result names every file the run wrote, and nothing else.
  assert sorted(result.files) == sorted(str(p) for p in (tmp_path / "doc_emb").iterdir()
                                        if p.name != contracts.MANIFEST_FILE)
  _, table = _read_shards(tmp_path / "doc_emb")
  assert sorted(table.column("id").to_pylist()) == [
      contracts.passage_uid(5, 0), contracts.passage_uid(5, 1), contracts.passage_uid(9, 0)]
  assert stats == json.loads((tmp_path / "doc_emb" / contracts.STATS_FILE).read_text())
  assert stats[C.EMBED_ROWS_SKIPPED_BAD_ID] == 1 and stats[C.EMBED_ROWS_EMBEDDED] == 3

  questions = pa.table({"question_id": ["q-a", "q-b"],
                        "question": ["what is five?", "what is nine?"],
                        "gold_candidate_ids": [[1], [2]]}, schema=contracts.QUESTION_SCHEMA)
  pq.write_table(questions, tmp_path / contracts.questions_file("test-5"))
  embed.run(embed.EmbedConfig(model=model_dir, out=str(tmp_path / "q_emb"), kind="questions",
                              path=str(tmp_path / contracts.questions_file("test-5"))))
  _, table = _read_shards(tmp_path / "q_emb")
  assert table.schema == contracts.embedding_schema(DIM, pa.string())
  got = dict(zip(table.column("id").to_pylist(),
                 table.column("embedding").combine_chunks().flatten().to_numpy().reshape(-1, DIM)))
  _, query = direct
  np.testing.assert_allclose(np.stack([got["q-a"], got["q-b"]]),
                             query(["what is five?", "what is nine?"]), rtol=1e-5, atol=1e-6)


def test_candidate_doc_text_layout():
  assert texts.candidate_doc_text("S.", "P p.", "sentence") == "S."
  assert texts.candidate_doc_text("S.", " P p. ", "sentence+passage") == "S. P p."
  assert texts.candidate_doc_text("S.", "", "sentence+passage") == "S."
  with pytest.raises(ValueError, match="unknown doc text mode"):
    texts.candidate_doc_text("S.", "P.", "passage")


def test_command_flags_map_to_the_config(capsys):
  config = embed_cmd.parse(["--model", "m", "--out", "o", "--questions", "q.parquet",
                            "--batch_size", "64", "--min_batch_size", "8", "--model_copies", "2",
                            "--runner", "DirectRunner"])
  assert config == embed.EmbedConfig(model="m", out="o", kind="questions", path="q.parquet",
                                     batch_size=64, min_batch_size=8, model_copies=2,
                                     beam_args=("--runner", "DirectRunner"))
  for bad in (["--batch_size", "0"], ["--min_batch_size", "9", "--batch_size", "8"]):
    with pytest.raises(SystemExit):
      embed_cmd.parse(["--model", "m", "--out", "o", "--questions", "q", *bad])
  with pytest.raises(ValueError, match="unknown input kind"):
    embed.run(embed.EmbedConfig(model="m", out="o", kind="sentences", path="p"))
  handler = embed.handler(config, embed.input_spec(config.kind, config.path))
  assert handler.batch_elements_kwargs() == {"min_batch_size": 8, "max_batch_size": 64}
