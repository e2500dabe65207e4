"""The contracts: one pair codec that TensorFlow reads and writes alike, TFRecord framing,
the held-out split, counter names, split names and file layouts."""

from __future__ import annotations

import pytest

from twotower.core import contracts
from twotower.core.contracts import codecs, counters

PAIR = contracts.Pair("wlp", "Qué query ✓", "Title", "Doc text", 12, 2**40, 3)
WITH_NEGATIVES = contracts.Pair("reqa", "who?", "T", "text", 5, 5, -7,
                                (("A", "neg one", 11), ("B", "neg two", -2)))


@pytest.mark.parametrize("pair", [PAIR, WITH_NEGATIVES], ids=["plain", "hard-negatives"])
def test_pair_codec_round_trips_and_tensorflow_agrees(pair, tmp_path):
  import tensorflow as tf
  data = codecs.encode_pair(pair)
  assert codecs.decode_pair(data) == pair
  feature = tf.train.Example.FromString(data).features.feature
  assert feature["query"].bytes_list.value[0].decode() == pair.query
  assert feature["doc_page_id"].int64_list.value[0] == pair.doc_page_id
  if pair.hard_negatives:
    assert list(feature["neg_doc_id"].int64_list.value) == [11, -2]
  # TFRecord files: ours read by TensorFlow, TensorFlow's read by ours.
  ours = str(tmp_path / "ours.tfrecord")
  codecs.write_tfrecords(ours, [data, data])
  assert list(tf.data.TFRecordDataset(ours).as_numpy_iterator()) == [data, data]
  theirs = str(tmp_path / "theirs.tfrecord")
  with tf.io.TFRecordWriter(theirs) as writer:
    writer.write(tf.train.Example.FromString(data).SerializeToString())
  assert [codecs.decode_pair(r) for r in codecs.read_tfrecords([theirs])] == [pair]


def test_a_corrupt_record_is_named(tmp_path):
  path = str(tmp_path / "x.tfrecord")
  codecs.write_tfrecords(path, [codecs.encode_pair(PAIR)] * 3)
  data = bytearray(open(path, "rb").read())
  data[-10] ^= 0xFF  # inside the third record's data
  open(path, "wb").write(bytes(data))
  with pytest.raises(ValueError, match=r"x\.tfrecord: record 2: corrupt data"):
    list(codecs.read_tfrecords([path]))


def test_write_and_read_pairs_by_layout(tmp_path):
  prefix = contracts.pairs_prefix(str(tmp_path), "ict", "train")
  paths = codecs.write_pairs(prefix, [PAIR] * 5, shards=2)
  assert [p.rsplit("/", 1)[1] for p in paths] == ["train-00000-of-00002.tfrecord",
                                                  "train-00001-of-00002.tfrecord"]
  assert list(codecs.read_pairs(contracts.pairs_pattern(str(tmp_path), "ict", "train"))) == \
      [PAIR] * 5


def test_a_pair_is_held_out_when_either_page_is():
  held = next(i for i in range(1000) if contracts.is_heldout(i, 50))
  kept = next(i for i in range(1000) if not contracts.is_heldout(i, 50))
  assert contracts.pair_split(kept, kept, 50) == contracts.TRAIN
  assert contracts.pair_split(kept, held, 50) == contracts.HELDOUT
  assert contracts.pair_split(held, kept, 50) == contracts.HELDOUT
  share = sum(contracts.is_heldout(i, 5) for i in range(20_000)) / 20_000
  assert 0.04 < share < 0.06


def test_counter_names():
  assert counters.pages_skipped(counters.PageSkip.EMPTY) == "pages_skipped_empty"
  assert counters.pairs("ict", contracts.HELDOUT) == "pairs_ict_heldout"
  assert counters.questions_in("test-5") == "questions_test_5"
  with pytest.raises(ValueError):
    counters.pages_skipped("not-a-reason")


def test_reqa_split_names_are_made_and_read_in_one_place():
  assert [contracts.train_split(5), contracts.validation_split(5),
          contracts.split_name(contracts.TEST_SIDE, 5)] == ["train-5", "validation-5", "test-5"]
  assert contracts.train_split("80") == "train-80"  # a ratio as a flag gives it
  assert (contracts.scored_split(10), contracts.scored_split(contracts.ZERO_SHOT_RATIO)) == (
      "test-10", contracts.ALL_QUESTIONS)
  assert contracts.reqa_split_names((1,)) == ["all", "train-1", "validation-1", "test-1"]
  for name in contracts.reqa_split_names():
    side = contracts.split_side(name)
    assert side == ("" if name == contracts.ALL_QUESTIONS else name.split("-")[0])
  for other in ("validation", "validation-x", "train-5-hn1", "heldout", "test-"):
    assert contracts.split_side(other) == ""


@pytest.mark.parametrize("given, expected", [
    ("out", "out"), ("out/", "out"), ("out/passages", "out"), ("out/passages/", "out"),
    ("out/passages/*.parquet", "out"), ("out/passages/passages-00000-of-00001.parquet", "out"),
    ("passages", "."), ("passages/*.parquet", "."), ("gs://b/out/passages/*.parquet", "gs://b/out"),
], ids=lambda v: v)
def test_every_form_of_a_passages_input_resolves_to_its_pair_pipeline_output(given, expected):
  assert contracts.pairs_out_dir(given) == expected


def test_layout_paths_of_other_stages_outputs():
  assert contracts.worker_dir("run/", 1) == "run/tmp_workers/worker_1"
  assert contracts.stats_path("out/") == "out/stats.json"
  assert contracts.pairs_config_path("out") == "out/config.json"
  assert contracts.bm25_run_path("bm25/") == "bm25/run.trec"
  assert [contracts.dense_candidates_dir("w"), contracts.dense_questions_dir("w/", "all"),
          contracts.dense_index_path("w"), contracts.dense_run_path("w")] == [
              "w/candidates", "w/questions-all", "w/flat.faiss", "w/run.parquet"]
  for saved_model, config in [("r/export/saved_model/", "r/export/config.yaml"),
                              ("saved_model", "config.yaml"), ("/saved_model", "/config.yaml")]:
    assert contracts.exported_config_path(saved_model) == config
