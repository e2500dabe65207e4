"""The JAX trainer's input without TensorFlow (model/np_input.py, np_tokenizer.py): the same ids
as the in-graph tokenizer and the same batches as tf.data where both read in file order, a
seeded order of its own that repeats, a resumed run's skip, the task mixture, hard negatives,
ids renumbered without losing which are equal, and a corrupt record named. TensorFlow here is
only the reference the numpy side is compared with."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import tensorflow as tf

from twotower.core import contracts
from twotower.core.contracts import Pair, codecs
from twotower.model import data, hf_tokenizer, np_input
from twotower.model.np_tokenizer import NumpyTokenizer, pack_segments
from twotower.model.tokenizer import Tokenizer
from twotower.testing import pairs as testing

QUERIES = ["w1 w2 the cat", "WHO wrote w3?", "", "w4 " * 40, "café naïve w5", "東京 w6",
           "nul\x00char w7", "ＡＢＣ w8 ß", "[SEP] w9", "w10,w11.w12", "  ", "\u200bw13\u00ad"]
DOCS = [("title w1", "w2 w3 w4 the cat sat on the mat"), ("", "w5 w6 empty title"),
        ("long w7", "w8 " * 60), ("Zürich", "Über façade 北京 w9"), ("t", ""),
        ("w10 w11", "w12\tw13\nw14 …"), ("w1 " * 40, "w2 w3"), ("", "")]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return testing.write_vocab(str(tmp_path_factory.mktemp("vocab") / "vocab.txt"))


@pytest.mark.slow  # ~12 s: every code point through tensorflow-text's normaliser
def test_the_recorded_normalizer_table_is_what_tensorflow_text_measures():
  assert hf_tokenizer.recorded_normalizer_differences() == hf_tokenizer.normalizer_differences()


@pytest.mark.parametrize("lengths", [(12, 24), (5, 6)])
def test_numpy_ids_equal_the_in_graph_tokenizers(vocab, lengths):
  graph, numpy_ = Tokenizer.from_file(vocab, *lengths), NumpyTokenizer.from_file(vocab, *lengths)
  for want, got in ((graph.queries(tf.constant(QUERIES)), numpy_.queries(QUERIES)),
                    (graph.docs(tf.constant([t for t, _ in DOCS]), tf.constant([d for _, d in DOCS])),
                     numpy_.docs([t for t, _ in DOCS], [d for _, d in DOCS]))):
    for key in ("token_ids", "padding_mask"):
      np.testing.assert_array_equal(got[key], want[key].numpy(), err_msg=key)
      assert got[key].dtype == np.int32


def test_packing_cuts_each_segment_in_order():
  ids, mask = pack_segments([[[5, 6, 7, 8]], [[9, 10]]], 7, cls_id=2, sep_id=3, pad_id=0)
  # length 7 - [CLS] - 2 [SEP] leaves 4 pieces: the first segment takes them all.
  assert ids.tolist() == [[2, 5, 6, 7, 8, 3, 3]] and mask.tolist() == [[1] * 7]
  ids, mask = pack_segments([[[5]], [[9, 10]]], 8, cls_id=2, sep_id=3, pad_id=0)
  assert ids.tolist() == [[2, 5, 3, 9, 10, 3, 0, 0]] and mask.tolist() == [[1] * 6 + [0] * 2]


def _hard_negative_pairs(n: int, k: int) -> list[Pair]:
  rng = random.Random(3)
  out = []
  for i, p in enumerate(testing.synthetic_pairs(n, seed=2)):
    negatives = tuple((f"neg w{j}", f"w{j} w{j + 1}", 2 ** 40 + j)
                      for j in rng.sample(range(50), i % (k + 2)))
    # ReQA's candidate ids are 63-bit hashes; one negative is the pair's own positive.
    cid = 2 ** 62 + i
    if i % 5 == 0:
      negatives = negatives + (("own", "positive", cid),)
    out.append(Pair(task="reqa", query=p.query, doc_title=p.doc_title, doc_text=p.doc_text,
                    query_page_id=p.query_page_id, doc_page_id=2 ** 61 + p.doc_page_id,
                    doc_passage_id=cid, hard_negatives=negatives))
  return out


def _same_equalities(a: np.ndarray, b: np.ndarray) -> None:
  """`a` and `b` say which entries are equal alike (ids renumbered keep exactly that)."""
  a, b = np.asarray(a).reshape(len(a), -1), np.asarray(b).reshape(len(b), -1)
  for col in range(a.shape[1]):
    np.testing.assert_array_equal(a[:, col, None] == a[None, :, col],
                                  b[:, col, None] == b[None, :, col])
    np.testing.assert_array_equal(a[:, col] < 0, b[:, col] < 0)


@pytest.mark.parametrize("k", [0, 2])
def test_batches_in_file_order_equal_tf_datas(vocab, tmp_path, k):
  pairs = _hard_negative_pairs(40, k) if k else testing.synthetic_pairs(40, seed=4)
  files = testing.write_pairs(str(tmp_path), "ict", "train", pairs, shards=3)
  graph, numpy_ = Tokenizer.from_file(vocab, 12, 24), NumpyTokenizer.from_file(vocab, 12, 24)
  want = list(data.pair_dataset({"ict": files}, graph, 8, shuffle=False, repeat=False,
                                hard_negatives=k).as_numpy_iterator())
  got = list(np_input.pair_batches({"ict": files}, numpy_, 8, shuffle=False, repeat=False,
                                   hard_negatives=k))
  assert len(got) == len(want) == 5
  for g, w in zip(got, want):
    sides = ("query", "doc", "neg_doc") if k else ("query", "doc")
    assert sorted(g) == sorted(w)
    for side in sides:
      for key in ("token_ids", "padding_mask"):
        np.testing.assert_array_equal(g[side][key], w[side][key], err_msg=f"{side}/{key}")
    assert g["doc_id"].dtype == np.int32
    _same_equalities(g["doc_id"], w["doc_id"])
    if k:
      # The positives' and the negatives' candidate ids are one id space.
      joint = np.concatenate([g["doc_id"][:, 1], g["neg_doc_id"]])
      ref = np.concatenate([w["doc_id"][:, 1], w["neg_doc_id"]])
      _same_equalities(joint[:, None], ref[:, None])


def _queries(batches) -> list[list[int]]:
  return [b["query"]["token_ids"].tolist() for b in batches]


def test_a_seed_repeats_its_order_and_a_resumed_run_skips_unread(vocab, tmp_path):
  files = {"ict": testing.write_pairs(str(tmp_path), "ict", "train",
                                      testing.synthetic_pairs(64, seed=1), shards=3)}
  tok = NumpyTokenizer.from_file(vocab, 12, 24)

  def take(n, **kwargs):
    return np_input.first_batches(np_input.pair_batches(files, tok, 8, shuffle_buffer=20,
                                                        **kwargs), n)
  first, again, other = take(12, seed=0), take(12, seed=0), take(12, seed=1)
  assert _queries(first) == _queries(again) and _queries(first) != _queries(other)
  # 12 batches of 8 from 64 pairs: the stream repeats, each pass in another order.
  assert _queries(take(7, seed=0, skip=5)) == _queries(first[5:])
  in_order = np_input.first_batches(np_input.pair_batches(files, tok, 8, shuffle=False), 8)
  assert _queries(first[:8]) != _queries(in_order)


def test_each_pass_holds_every_pair_once(tmp_path):
  """As tf.data's shuffle before repeat: the shuffle buffer never carries a pair into the next
  pass, so every pass over the shards is a permutation of the pairs, in an order of its own."""
  files = testing.write_pairs(str(tmp_path), "ict", "train",
                              testing.synthetic_pairs(50, seed=3), shards=3)
  records = np_input.task_records(files, seed=0, shuffle=True, repeat=True, shuffle_buffer=20)
  passes = [[next(records) for _ in range(50)] for _ in range(3)]
  every = sorted(codecs.read_tfrecords(files))
  assert all(sorted(p) == every for p in passes)
  assert passes[0] != passes[1] != passes[2] and passes[0] != every


def test_tasks_are_mixed_by_their_weights(tmp_path):
  files = {}
  for task, seed in (("ict", 0), ("bfs", 1)):
    pairs = [dataclass_replace(p, query=task) for p in testing.synthetic_pairs(50, seed, task)]
    files[task] = testing.write_pairs(str(tmp_path), task, "train", pairs)
  records = np_input.mixed_records(files, {"ict": 0.8, "bfs": 0.2}, seed=0, shuffle=True,
                                   repeat=True, shuffle_buffer=10)
  drawn = [codecs.decode_example(r)["query"][0] for _, r in zip(range(2000), records)]
  share = drawn.count(b"ict") / len(drawn)
  assert 0.76 < share < 0.84, share


def dataclass_replace(pair: Pair, **changes) -> Pair:
  import dataclasses  # pylint: disable=import-outside-toplevel
  return dataclasses.replace(pair, **changes)


def test_ids_renumbered_keep_which_are_equal():
  big = np.asarray([2 ** 62, 5, 2 ** 62, -1, 2 ** 40], np.int64)
  (a,) = np_input.renumber_ids(big)
  assert a.dtype == np.int32 and a.tolist() == [2, 0, 2, -1, 1]
  pos, neg = np_input.renumber_ids(np.asarray([7, 2 ** 50]), np.asarray([2 ** 50, -1, 9]))
  assert pos.tolist() == [0, 2] and neg.tolist() == [2, -1, 1]


def test_a_corrupt_record_is_named_by_file_and_record(vocab, tmp_path):
  (path,) = testing.write_pairs(str(tmp_path), "ict", "train", testing.synthetic_pairs(20),
                                shards=1)
  blob = bytearray(open(path, "rb").read())
  blob[len(blob) // 2] ^= 0xFF  # a byte inside a record's data
  with open(path, "wb") as f:
    f.write(blob)
  batches = np_input.pair_batches({"ict": [path]}, NumpyTokenizer.from_file(vocab, 12, 24), 4,
                                  shuffle=False, repeat=False)
  with pytest.raises(ValueError,
                     match=rf"{path}: record \d+: corrupt (data|length) \(CRC mismatch\)"):
    list(batches)


def test_the_jax_input_reads_no_tensorflow(vocab, tmp_path):
  """The input modules in a process that keeps TensorFlow out, as the JAX trainer's does."""
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  files = testing.write_pairs(str(tmp_path), "ict", "train", testing.synthetic_pairs(16))
  code = (
      "import sys\n"
      "from twotower.model import jax_launch\n"
      "jax_launch.keep_tensorflow_out()\n"
      "from twotower.model import np_input\n"
      "from twotower.model.np_tokenizer import NumpyTokenizer\n"
      f"tok = NumpyTokenizer.from_file({vocab!r}, 12, 24)\n"
      f"b = next(np_input.pair_batches({{'ict': {files!r}}}, tok, 8))\n"
      "print(b['doc']['token_ids'].shape, jax_launch.loaded_tensorflow())\n")
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        env={**os.environ, "KERAS_BACKEND": "jax"}, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.strip() == "(8, 24) []"
