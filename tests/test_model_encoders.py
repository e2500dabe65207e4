"""Tokenizer, towers and model: layout of the packed inputs, the padding mask reaching
attention, get_config round trips, jit_compile of the train step."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO
from twotower.core import contracts
from twotower.model import config, data, encoders, train, two_tower
from twotower.model.tokenizer import (Tokenizer, pack_segments, pack_segments_tf_text,
                                      read_vocab)
from twotower.testing import pairs as testing


@pytest.fixture
def tokenizer(tmp_path) -> Tokenizer:
  return Tokenizer.from_file(testing.write_vocab(str(tmp_path / "vocab.txt")), 8, 12)


def _ids(tok: Tokenizer, words: str) -> list[int]:
  return tok.word_pieces(tf.constant([words]))[0].numpy().tolist()


def test_query_layout_is_cls_q_sep_padded(tokenizer):
  out = tokenizer.queries(tf.constant(["The cats sat", "who"]))
  cat, s_, sat = _ids(tokenizer, "the cats sat")[1:]
  the = _ids(tokenizer, "the")[0]
  assert out["token_ids"].shape == (2, 8)
  assert out["token_ids"].numpy()[0].tolist() == [2, the, cat, s_, sat, 3, 0, 0]
  assert out["padding_mask"].numpy()[0].tolist() == [1, 1, 1, 1, 1, 1, 0, 0]
  assert out["token_ids"].dtype == tf.int32


def test_doc_layout_truncates_the_passage_first(tokenizer):
  out = tokenizer.docs(tf.constant(["paris"]), tf.constant(["w1 w2 w3 w4 w5 w6 w7 w8 w9 w10"]))
  ids = out["token_ids"].numpy()[0].tolist()
  paris = _ids(tokenizer, "paris")[0]
  # [CLS] title [SEP] passage... [SEP] in 12 slots: the passage keeps 12 - 3 - 1 = 8 pieces.
  assert ids[:3] == [2, paris, 3] and ids[-1] == 3 and len(ids) == 12
  assert ids[3:11] == _ids(tokenizer, "w1 w2 w3 w4 w5 w6 w7 w8")
  assert out["padding_mask"].numpy().sum() == 12


def _tf_text_pack(segments, length, cls_id=2, sep_id=3, pad_id=0):
  return [x.numpy() for x in pack_segments_tf_text(segments, length, cls_id, sep_id, pad_id)]


@pytest.mark.parametrize("segments", [1, 2, 3])
def test_pack_segments_gives_tensorflow_texts_ids_and_mask(segments):
  # Rows from empty to far over the budget, in every combination the draw makes: the first
  # segment alone over it, the last cut to nothing, every one empty.
  rng = np.random.default_rng(segments)
  for length in (segments + 1, segments + 2, 7, 16):
    rows = 300
    ragged = [tf.ragged.constant([rng.integers(5, 99, size=rng.choice([0, 1, 2, 5, 9, 20]))
                                  .tolist() for _ in range(rows)], dtype=tf.int64,
                                 ragged_rank=1, row_splits_dtype=tf.int64)
              for _ in range(segments)]
    ours = pack_segments(ragged, length, 2, 3, 0)
    assert ours[0].shape == ours[1].shape == (rows, length) and ours[0].dtype == tf.int32
    expected = _tf_text_pack(ragged, length)
    np.testing.assert_array_equal(ours[0].numpy(), expected[0], err_msg=f"length {length}")
    np.testing.assert_array_equal(ours[1].numpy(), expected[1], err_msg=f"length {length}")
  empty = [tf.ragged.constant([], dtype=tf.int64, ragged_rank=1)] * segments
  assert pack_segments(empty, 8, 2, 3, 0)[0].shape == (0, 8)


def test_the_packed_graph_stays_small(tokenizer):
  # The reason pack_segments exists: tensorflow-text's trimmer and combiner built about
  # 1,500 ops for a document, traced again by every tf.data map and tf.function.
  fn = tf.function(lambda title, text: tokenizer.docs(title, text))
  graph = fn.get_concrete_function(tf.TensorSpec([None], tf.string),
                                   tf.TensorSpec([None], tf.string)).graph
  assert len(graph.get_operations()) < 150


@pytest.mark.shared_data
def test_documents_and_questions_of_the_squad_subset_pack_as_tensorflow_text_did(squad_subset,
                                                                                 monkeypatch):
  """Every paragraph of the shared SQuAD subset with its title, and every question, at the
  cpu-small lengths, against the tensorflow-text packing."""
  monkeypatch.syspath_prepend(str(REPO))  # benchmarks/: a folder at the repository root
  from benchmarks.tokenizer_packing import squad_texts, vocabulary
  titles, passages, questions = squad_texts(str(squad_subset))
  tok = Tokenizer(vocabulary(passages), 32, 128)
  t, p = tok.word_pieces(tf.constant(titles)), tok.word_pieces(tf.constant(passages))
  assert max(p.row_lengths().numpy()) > 128  # passages are cut
  expected = _tf_text_pack([t, p], 128, tok.cls_id, tok.sep_id, tok.pad_id)
  ours = tok.docs(tf.constant(titles), tf.constant(passages))
  np.testing.assert_array_equal(ours["token_ids"].numpy(), expected[0])
  np.testing.assert_array_equal(ours["padding_mask"].numpy(), expected[1])
  q = tok.word_pieces(tf.constant(questions))
  expected = _tf_text_pack([q], 32, tok.cls_id, tok.sep_id, tok.pad_id)
  np.testing.assert_array_equal(tok.queries(tf.constant(questions))["token_ids"].numpy(),
                                expected[0])


def test_unknown_words_become_unk_and_accents_fold(tokenizer):
  assert _ids(tokenizer, "zzzz") == [1]
  assert _ids(tokenizer, "PÀRIS") == _ids(tokenizer, "paris")


def test_vocab_without_pad_first_is_rejected(tmp_path):
  path = tmp_path / "bad.txt"
  path.write_text("[UNK]\n[PAD]\n[CLS]\n[SEP]\n[MASK]\n")
  with pytest.raises(ValueError, match="line 1 must be"):
    read_vocab(str(path))


def test_mlm_masking_shapes_and_positions(tokenizer):
  packed = tokenizer.passages(tf.constant(["w1 w2 w3 w4 w5 w6 w7 w8 w9 w10"] * 4), 14)
  out = tokenizer.mask_for_mlm(packed["token_ids"], rate=0.3, max_predictions=5, seed=[1, 2])
  assert out["token_ids"].shape == (4, 14) and out["mask_positions"].shape == (4, 5)
  for row in range(4):
    n = int(out["mask_weights"][row].numpy().sum())
    assert 1 <= n <= 5
    pos = out["mask_positions"][row, :n].numpy()
    # Never [CLS] (0) or [SEP] (11); the original ids are the unmasked ones.
    assert 0 not in pos and 11 not in pos
    np.testing.assert_array_equal(out["mask_ids"][row, :n].numpy(),
                                  packed["token_ids"][row].numpy()[pos])


def _tiny_model_config(**kw) -> config.ModelConfig:
  base = dict(num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.0,
              embedding_dim=8, query_len=8, doc_len=12)
  base.update(kw)
  return config.ModelConfig(**base)


@pytest.mark.parametrize("encoder", ["transformer", "bow_mlp"])
def test_padding_does_not_leak_into_the_embedding(encoder):
  tower = encoders.build_tower(_tiny_model_config(encoder=encoder), 50, 12, "tower")
  ids = np.array([[2, 10, 11, 12, 3, 0, 0, 0]], "int32")
  mask = (ids > 0).astype("int32")
  changed = ids.copy()
  changed[0, 5:] = [40, 41, 42]  # other ids under the padding mask
  a = tower({"token_ids": ids, "padding_mask": mask})
  b = tower({"token_ids": changed, "padding_mask": mask})
  c = tower({"token_ids": changed, "padding_mask": np.ones_like(mask)})
  np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)
  assert np.max(np.abs(a.numpy() - c.numpy())) > 1e-4  # the mask is what hid them
  assert a.shape == (1, 8) and a.dtype == tf.float32


@pytest.mark.parametrize("shared", [False, True], ids=["separate", "shared"])
def test_get_config_round_trip(shared):
  mc = _tiny_model_config(shared_towers=shared)
  model = two_tower.build_two_tower(mc, 50, temperature=0.5)
  cfg = model.get_config()
  clone = two_tower.TwoTowerModel.from_config(json.loads(json.dumps(cfg)))
  assert json.dumps(clone.get_config(), sort_keys=True) == json.dumps(cfg, sort_keys=True)
  assert clone.shared_towers == shared and clone.temperature == 0.5
  assert (model.doc_tower is model.query_tower) == shared
  tower_cfg = model.query_tower.get_config()
  assert encoders.TransformerTower.from_config(tower_cfg).get_config() == tower_cfg
  for layer_norm in (False, True):
    bow = encoders.BowMlpTower(50, 16, 8, layer_norm=layer_norm, name="bow")
    assert encoders.BowMlpTower.from_config(bow.get_config()).get_config() == bow.get_config()
    assert bow.get_config()["layer_norm"] is layer_norm


def test_bow_mlp_layer_norm_gives_scores_the_softmax_can_move():
  """Why the grid's BoW-MLP has a layer norm on its pooled average: at initialization the
  average of 100 random token embeddings is about 0.002 a dimension, so without the norm
  every query-document score is near 0 and the in-batch softmax starts (and, through a
  short fine-tuning at 1e-4, stays) uniform. With it the scores start on the Transformer
  tower's scale."""
  keras.utils.set_random_seed(0)
  rng = np.random.default_rng(0)
  ids = rng.integers(5, 5000, size=(16, 100)).astype("int32")
  inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
  sized = dict(hidden_dim=128, embedding_dim=128)
  towers = {"raw": _tiny_model_config(encoder="bow_mlp", **sized),
            "norm": _tiny_model_config(encoder="bow_mlp", bow_layer_norm=True, **sized),
            "transformer": _tiny_model_config(**sized)}
  spread = {}
  for name, mc in towers.items():
    e = encoders.build_tower(mc, 5000, 100, name)(inputs).numpy()
    spread[name] = float(np.std(e @ e.T))  # the spread of the scores the softmax sees
  assert spread["raw"] < 0.01           # the softmax over 16 such scores is uniform
  assert spread["norm"] > 100 * spread["raw"]
  assert spread["norm"] > 0.1 * spread["transformer"]


def test_bow_layer_norm_is_only_for_the_bow_mlp_and_left_out_of_old_configs():
  with pytest.raises(ValueError, match="bow_layer_norm needs model.encoder=bow_mlp"):
    config.ModelConfig(encoder="transformer", bow_layer_norm=True)
  # Off, the field is not written, so configs (and grid keys) recorded before it are unchanged.
  assert "bow_layer_norm" not in config.TrainingConfig().to_dict()["model"]
  on = config.load("bow-mlp")
  assert on.model.bow_layer_norm and on.to_dict()["model"]["bow_layer_norm"] is True
  assert config.from_dict(on.to_dict()) == on


def test_keras_file_round_trip(tmp_path):
  model = two_tower.build_two_tower(_tiny_model_config(), 50)
  batch = {"query": {"token_ids": np.array([[2, 7, 3, 0, 0, 0, 0, 0]], "int32"),
                     "padding_mask": np.array([[1, 1, 1, 0, 0, 0, 0, 0]], "int32")},
           "doc": {"token_ids": np.array([[2, 9, 3, 8, 3] + [0] * 7], "int32"),
                   "padding_mask": np.array([[1] * 5 + [0] * 7], "int32")}}
  path = str(tmp_path / "m.keras")
  model.save(path)
  loaded = keras.saving.load_model(path)
  for side in ("query", "doc"):
    np.testing.assert_allclose(model(batch)[side].numpy(), loaded(batch)[side].numpy(), atol=1e-6)


def test_train_step_compiles_with_jit(tmp_path):
  vocab = testing.write_vocab(str(tmp_path / "vocab.txt"))
  tok = Tokenizer.from_file(vocab, 8, 12)
  pairs = testing.synthetic_pairs(8)
  ds = tf.data.Dataset.from_tensor_slices([contracts.codecs.encode_pair(p) for p in pairs]).batch(
      8, drop_remainder=True).map(data.tokenize_pairs(tok, 8))
  model = two_tower.build_two_tower(_tiny_model_config(), tok.vocab_size)
  model.compile(optimizer=train.make_optimizer(1e-3, 10, 0.1, 0.0), jit_compile=True)
  before = [w.copy() for w in model.get_weights()]
  history = model.fit(ds.repeat(), steps_per_epoch=2, epochs=1, verbose=0, shuffle=False)
  assert model.jit_compile is True
  assert np.isfinite(history.history["loss"][-1])
  assert any(np.max(np.abs(a - b)) > 0 for a, b in zip(before, model.get_weights()))


def test_the_packing_benchmark_prints_both_packings_with_equal_ids(tmp_path, capsys,
                                                                   monkeypatch):
  # benchmarks/ is a plain folder at the repository root, not part of the installed package.
  monkeypatch.syspath_prepend(str(REPO))
  from benchmarks import tokenizer_packing
  assert tokenizer_packing.main(["--squad", str(tmp_path / "absent.json"), "--batch", "8",
                                 "--batches", "2", "--rounds", "1"]) == 0
  rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()
          if line.startswith("| document") or line.startswith("| question")]
  assert [(r[0], r[1]) for r in rows] == [
      ("| document", "pack_segments"), ("| document", "tensorflow-text"),
      ("| question", "pack_segments"), ("| question", "tensorflow-text")]
  assert all(r[-1] == "yes |" for r in rows)
  ours, theirs = rows[0], rows[1]
  assert int(ours[2].replace(",", "")) < int(theirs[2].replace(",", "")) / 5  # graph ops
