"""The Condenser head and coCondenser's loss (model/condenser.py): the head reads the last
layer's [CLS] and a middle layer's tokens, its masked-LM gradient reaches the tower's
backbone, the loss is the in-batch softmax of the masked pairs plus the weighted MLM terms,
the checkpoints hold the head (a killed run resumes to the same weights), fine-tuning's
--init takes the towers, and the export holds the towers and no head; end to end through
`twotower pretrain --tasks crop`."""

from __future__ import annotations

import glob
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from twotower import cli
from twotower.core import contracts
from twotower.model import condenser, config, pretrain, train
from twotower.model.tokenizer import Tokenizer
from twotower.model.two_tower import TwoTowerModel, build_two_tower
from twotower.testing import pairs as testing

#: Two blocks, so that the middle layer (1) is a block and the last block is reached only
#: through [CLS] by the head's MLM.
OVERRIDES = ("objective.condenser_head_layers=1", "model.num_layers=2")


def tiny(*overrides: str) -> config.TrainingConfig:
  return config.load("tiny", [*OVERRIDES, *overrides])


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return testing.write_vocab(str(tmp_path_factory.mktemp("vocab") / "vocab.txt"))


def tokenizer_of(cfg, vocab) -> Tokenizer:
  return Tokenizer.from_file(vocab, cfg.model.query_len, cfg.model.doc_len)


def masked_batch(cfg, vocab, seed=0):
  """(masked batch, unmasked batch): 8 synthetic pairs through `data.mask_pairs_for_mlm`."""
  tok = tokenizer_of(cfg, vocab)
  pairs = testing.synthetic_pairs(8, docs=8, task="crop")
  plain = {"query": tok.queries(tf.constant([p.query for p in pairs])),
           "doc": tok.docs(tf.constant([p.doc_title for p in pairs]),
                           tf.constant([p.doc_text for p in pairs])),
           "doc_id": tf.constant([[p.doc_page_id, p.doc_passage_id] for p in pairs], tf.int64)}
  masker = condenser.pair_masker(cfg, tok)
  masked = next(iter(masker(tf.data.Dataset.from_tensors(plain), seed)))
  return masked, plain


def model_of(cfg, vocab):
  keras.utils.set_random_seed(0)
  return condenser.build_condenser(cfg, tokenizer_of(cfg, vocab).vocab_size)


# -- The head and the loss. ----------------------------------------------------------------


def test_the_head_reads_the_last_cls_and_the_skip_layers_tokens(vocab):
  cfg = tiny()
  model = model_of(cfg, vocab)
  assert model.skip_layer == 1  # 0 means the middle layer: 2 // 2
  batch, _ = masked_batch(cfg, vocab)
  states = model.query_tower.backbone.hidden_states(batch["query"])
  assert len(states) == 3  # the embeddings' output, then each block's
  np.testing.assert_allclose(states[-1], model.query_tower.backbone(batch["query"]), atol=1e-6)
  head_input = model.query_head.head_input(states)
  np.testing.assert_array_equal(head_input[:, 0], states[2][:, 0])
  np.testing.assert_array_equal(head_input[:, 1:], states[1][:, 1:])
  # The tower's embedding is the [CLS] projection of the same forward pass.
  emb, _ = model.query_tower.embed_with_states(batch["query"])
  np.testing.assert_allclose(emb, model.query_tower(batch["query"]), atol=1e-6)


def _grads(model, batch, key):
  with tf.GradientTape() as tape:
    out = model.compute_losses(batch, training=True)
  return dict(zip([v.path for v in model.trainable_variables],
                  tape.gradient(out[key], model.trainable_variables)))


def _norm(g):
  return 0.0 if g is None else float(tf.norm(tf.convert_to_tensor(g)))


def test_the_heads_mlm_gradient_reaches_every_backbone_variable_and_not_the_projection(vocab):
  cfg = tiny()
  model = model_of(cfg, vocab)
  batch, _ = masked_batch(cfg, vocab)
  head = _grads(model, batch, "head_mlm")
  for tower in (model.query_tower, model.doc_tower):
    backbone = [v.path for v in tower.backbone.trainable_variables]
    # Every backbone variable: the embeddings and block 1 through the skip layer's tokens,
    # block 2 (the last) through [CLS] alone.
    assert all(_norm(head[p]) > 0 for p in backbone), [p for p in backbone if not _norm(head[p])]
    assert any("transformer_layer_1" in p for p in backbone)
    # The projection serves the contrastive loss only (the authors' MLM reads the raw [CLS]).
    assert all(_norm(head[v.path]) == 0 for v in tower.projection.trainable_variables)
  # The head's own blocks learn from it too.
  assert all(_norm(head[v.path]) > 0 for v in model.query_head.blocks[0].trainable_variables)
  # The whole loss reaches the projections as well.
  total = _grads(model, batch, "loss")
  for tower in (model.query_tower, model.doc_tower):
    assert all(_norm(total[v.path]) > 0 for v in tower.projection.trainable_variables)


def test_the_last_block_reaches_the_heads_mlm_through_cls_only(vocab):
  cfg = tiny()
  model = model_of(cfg, vocab)
  batch, _ = masked_batch(cfg, vocab)
  states = model.query_tower.backbone.hidden_states(batch["query"])
  mlm = batch["query_mlm"]
  # Change the last layer's states everywhere but [CLS]: the head's logits do not move.
  changed = states[:-1] + [tf.concat([states[-1][:, :1], states[-1][:, 1:] + 1.0], axis=1)]
  head = lambda s: model.query_head(s, batch["query"]["padding_mask"], mlm["mask_positions"])[0]
  np.testing.assert_allclose(head(states), head(changed), atol=1e-5)
  # ... and a change of [CLS] moves them.
  cls = states[:-1] + [tf.concat([states[-1][:, :1] + 1.0, states[-1][:, 1:]], axis=1)]
  assert np.abs(head(states) - head(cls)).max() > 1e-3


def test_the_loss_is_the_masked_in_batch_softmax_plus_weight_times_both_mlm_terms(vocab):
  cfg = tiny("objective.condenser_mlm_weight=0.5")
  model = model_of(cfg, vocab)
  assert model.mlm_weight == 0.5
  batch, plain = masked_batch(cfg, vocab)
  out = model.compute_losses(batch, training=False)
  np.testing.assert_allclose(
      out["loss"], out["contrastive"] + 0.5 * (out["head_mlm"] + out["backbone_mlm"]),
      rtol=1e-6)
  assert out["head_mlm"] > 0 and out["backbone_mlm"] > 0
  # The contrastive part is the plain towers' in-batch softmax of the MASKED inputs.
  towers = model.towers_only()
  masked_loss, _, _ = towers.retrieval_loss(batch, towers(batch, training=False))
  plain_loss, _, _ = towers.retrieval_loss(plain, towers(plain, training=False))
  np.testing.assert_allclose(out["contrastive"], masked_loss, rtol=1e-6)
  assert abs(float(plain_loss) - float(masked_loss)) > 1e-6
  # Each MLM term is one mean over the masked pieces of the queries and documents together.
  per_side = {}
  for name in ("query", "doc"):
    states = model._tower(name).backbone.hidden_states(batch[name])
    mlm = batch[f"{name}_mlm"]
    head_logits, _ = model._head(name)(states, batch[name]["padding_mask"],
                                       mlm["mask_positions"])
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(mlm["mask_ids"], head_logits)
    per_side[name] = (float(tf.reduce_sum(ce * mlm["mask_weights"])),
                      float(tf.reduce_sum(mlm["mask_weights"])))
  assert per_side["query"][1] > 0 and per_side["doc"][1] > 0
  expected = sum(s for s, _ in per_side.values()) / sum(n for _, n in per_side.values())
  np.testing.assert_allclose(out["head_mlm"], expected, rtol=1e-5)


def test_a_train_step_logs_each_part_of_the_loss(vocab):
  cfg = tiny()
  model = model_of(cfg, vocab)
  model.compile(optimizer=keras.optimizers.Adam(1e-3))
  batch, _ = masked_batch(cfg, vocab)
  logs = model.train_step(batch)
  assert set(logs) == {"loss", "in_batch_accuracy", "contrastive_loss", "head_mlm_loss",
                       "backbone_mlm_loss", "head_mlm_accuracy"}
  np.testing.assert_allclose(
      logs["loss"], logs["contrastive_loss"] + logs["head_mlm_loss"] + logs["backbone_mlm_loss"],
      rtol=1e-5)


def test_shared_towers_have_one_head(vocab):
  model = model_of(tiny("model.shared_towers=true"), vocab)
  assert model.query_head is model.doc_head
  model = model_of(tiny(), vocab)
  assert model.query_head is not model.doc_head
  assert model.query_head.mlm_head.token_embedding is model.query_tower.backbone.token_embedding
  assert model.doc_head.mlm_head.token_embedding is model.doc_tower.backbone.token_embedding


def test_get_config_round_trip(vocab):
  model = model_of(tiny("objective.condenser_skip_layer=2", "objective.condenser_mlm_weight=2"),
                   vocab)
  again = condenser.CondenserTwoTowerModel.from_config(model.get_config())
  again.build_from_config(model.get_build_config())
  assert isinstance(again, condenser.CondenserTwoTowerModel)
  assert (again.head_layers, again.skip_layer, again.mlm_weight) == (1, 2, 2.0)
  def names(m):  # towers deserialised on their own are not under the model's name scope
    return [v.path.removeprefix("two_tower/") for v in m.weights]
  assert names(again) == names(model)
  assert [v.shape for v in again.weights] == [v.shape for v in model.weights]


@pytest.mark.parametrize("overrides, message", [
    (("objective.moco_queue=16", "model.shared_towers=true"), "do not combine"),
    (("trainer.grad_cache_chunk=4",), "do not combine yet"),
    (("model.encoder=bow_mlp",), "needs model.encoder=transformer"),
    (("objective.condenser_skip_layer=3",), "condenser_skip_layer=3 > model.num_layers=2"),
], ids=["moco", "grad-cache", "bow-mlp", "skip-above-top"])
def test_combinations_the_head_does_not_support_are_refused(overrides, message):
  with pytest.raises(ValueError, match=message):
    tiny(*overrides)


# -- Masking the pair batches. ---------------------------------------------------------------


def test_masking_a_pair_batch_keeps_its_keys_and_records_what_it_replaced(vocab):
  cfg = tiny()
  batch, plain = masked_batch(cfg, vocab)
  np.testing.assert_array_equal(batch["doc_id"], plain["doc_id"])
  for name in ("query", "doc"):
    ids, original = batch[name]["token_ids"].numpy(), plain[name]["token_ids"].numpy()
    np.testing.assert_array_equal(batch[name]["padding_mask"], plain[name]["padding_mask"])
    mlm = {k: v.numpy() for k, v in batch[f"{name}_mlm"].items()}
    predicted = mlm["mask_weights"] > 0
    rows = np.nonzero(predicted)[0]
    positions = mlm["mask_positions"][predicted]
    np.testing.assert_array_equal(mlm["mask_ids"][predicted], original[rows, positions])
    # Only predicted positions change, and never [CLS], [SEP] or padding.
    changed = ids != original
    assert set(zip(*np.nonzero(changed))) <= set(zip(rows, positions))
    assert changed.any() and (positions > 0).all()
    length = cfg.model.query_len if name == "query" else cfg.model.doc_len
    assert mlm["mask_ids"].shape == (8, config.mlm_predictions(length, 0.15))


def test_masking_is_seeded_by_batch_so_a_resumed_stream_masks_the_same(vocab):
  cfg = tiny()
  tok = tokenizer_of(cfg, vocab)
  plain = [masked_batch(cfg, vocab)[1]] * 3  # the same pairs thrice: only the masks differ
  ds = tf.data.Dataset.from_tensor_slices(tf.nest.map_structure(lambda *x: tf.stack(x), *plain))
  masked = list(condenser.pair_masker(cfg, tok)(ds, 7))
  again = list(condenser.pair_masker(cfg, tok)(ds, 7).skip(2))
  tf.nest.map_structure(np.testing.assert_array_equal, masked[2], again[0])
  assert not np.array_equal(masked[0]["doc"]["token_ids"], masked[1]["doc"]["token_ids"])
  other = list(condenser.pair_masker(cfg, tok)(ds, 8))
  assert not np.array_equal(masked[0]["doc"]["token_ids"], other[0]["doc"]["token_ids"])


# -- End to end: twotower pretrain --tasks crop, resume, --init, export. ---------------------


@pytest.fixture(scope="module")
def pairs_dir(tmp_path_factory, vocab):
  root = tmp_path_factory.mktemp("condenser")
  shutil.copy(vocab, root / "vocab.txt")
  testing.write_pairs(str(root), "crop", "train", testing.synthetic_pairs(64, task="crop"))
  testing.write_pairs(str(root), "crop", "heldout",
                      testing.synthetic_pairs(16, seed=5, task="crop"))
  return root


def _argv(root, out, *extra):
  return ["pretrain", "--config", "tiny", "--pairs", str(root), "--vocab",
          str(root / "vocab.txt"), "--out", str(out), "--tasks", "crop", "--steps", "10",
          "--progress", "none", "--set", "objective.condenser_head_layers=1",
          "--set", "model.num_layers=2", *extra]


@pytest.fixture(scope="module")
def condenser_run(pairs_dir):
  out = pairs_dir / "run"
  assert cli.main(_argv(pairs_dir, out)) == 0
  return out


def test_twotower_pretrain_crop_with_the_condenser_head_end_to_end(condenser_run):
  import pandas as pd
  history = pd.read_csv(contracts.history_path(str(condenser_run)))
  assert history["step"].tolist() == [5, 10]
  for column in ("loss", "contrastive_loss", "head_mlm_loss", "backbone_mlm_loss",
                 "val_loss", "val_head_mlm_loss"):
    assert np.isfinite(history[column]).all(), column
  # The MLM terms are on, each a cross entropy over ~230 word pieces at first.
  assert (history["head_mlm_loss"] > 1.0).all()
  import yaml
  recorded = yaml.safe_load(open(contracts.run_config_path(str(condenser_run))))
  assert recorded["objective"]["condenser_head_layers"] == 1


def test_the_export_holds_the_towers_and_no_head(condenser_run, pairs_dir):
  export_dir = contracts.export_dir(str(condenser_run))
  loaded = keras.saving.load_model(os.path.join(export_dir, contracts.KERAS_FILE))
  assert type(loaded) is TwoTowerModel
  paths = [v.path for v in loaded.weights]
  assert paths and not [p for p in paths if "head" in p or "condenser" in p]
  # The SavedModel's variables: the towers' alone, as many as the plain model's.
  saved_dir = os.path.join(export_dir, contracts.SAVED_MODEL_DIR)
  names = [n for n, _ in tf.train.list_variables(os.path.join(saved_dir, "variables",
                                                                "variables"))
           if n.endswith("VARIABLE_VALUE") and not n.startswith("save_counter")]
  assert len(names) == len(loaded.weights) == 76  # 2 towers x (2 blocks x 16 + 6)
  assert all(n.startswith(("query_tower/", "doc_tower/")) for n in names), names
  saved = tf.saved_model.load(saved_dir)
  # ... and they are the trained towers: the same embeddings as the checkpoint's towers.
  cfg = tiny()  # the run's model
  tok = tokenizer_of(cfg, str(pairs_dir / "vocab.txt"))
  model = condenser.build_condenser(cfg, tok.vocab_size)
  tf.train.Checkpoint(model=model).restore(
      train.resolve_checkpoint(str(condenser_run))).expect_partial().assert_existing_objects_matched()
  queries = tf.constant(["w1 w2 w3", "w7 w8"])
  np.testing.assert_allclose(
      saved.signatures[contracts.QUERY_SIGNATURE](query=queries)[contracts.EMBEDDING_OUTPUT],
      model.query_tower(tok.queries(queries), training=False), atol=1e-5)


def test_the_checkpoint_holds_the_heads(condenser_run, pairs_dir):
  prefix = train.resolve_checkpoint(str(condenser_run))
  assert {"query_head", "doc_head", "query_tower", "doc_tower"} <= train._children(prefix, "model")
  assert {"condenser_layer_0", "mlm_head"} <= train._children(prefix, "model", "query_head")
  cfg = tiny()  # the run's model
  model = model_of(cfg, str(pairs_dir / "vocab.txt"))
  before = model.query_head.blocks[0].weights[0].numpy().copy()
  tf.train.Checkpoint(model=model).restore(prefix).expect_partial().assert_existing_objects_matched()
  assert not np.array_equal(before, model.query_head.blocks[0].weights[0].numpy())


def test_fine_tuning_init_takes_the_towers_of_a_condenser_run(condenser_run, pairs_dir):
  cfg = tiny()  # the run's model
  vocab_size = tokenizer_of(cfg, str(pairs_dir / "vocab.txt")).vocab_size
  reference = condenser.build_condenser(cfg, vocab_size)
  tf.train.Checkpoint(model=reference).restore(
      train.resolve_checkpoint(str(condenser_run))).expect_partial()
  plain = build_two_tower(cfg.model, vocab_size)
  train.init_towers(plain, str(condenser_run))
  for tower in ("query_tower", "doc_tower"):
    got, want = getattr(plain, tower).weights, getattr(reference, tower).weights
    assert len(got) == len(want) and any("transformer_layer_1" in v.path for v in got)
    for g, w in zip(got, want):
      np.testing.assert_array_equal(g.numpy(), w.numpy(), err_msg=g.path)


def test_a_killed_run_resumes_to_the_weights_of_one_run_through(condenser_run, pairs_dir):
  # Kill at step 5: the run dir as the SIGKILL left it, checkpoint 5 the latest.
  out = pairs_dir / "resumed"
  shutil.copytree(condenser_run, out)
  ckpts = contracts.checkpoint_dir(str(out))
  for path in glob.glob(os.path.join(ckpts, "ckpt-10.*")):
    os.remove(path)
  shutil.rmtree(contracts.export_dir(str(out)))
  with open(os.path.join(ckpts, "checkpoint"), "w", encoding="utf-8") as f:
    f.write('model_checkpoint_path: "ckpt-5"\nall_model_checkpoint_paths: "ckpt-5"\n')
  assert tf.train.latest_checkpoint(ckpts).endswith("ckpt-5")
  assert cli.main(_argv(pairs_dir, out)) == 0
  resumed = tf.train.load_checkpoint(os.path.join(ckpts, "ckpt-10"))
  through = tf.train.load_checkpoint(train.resolve_checkpoint(str(condenser_run)))
  # Every saved value (a variable is saved under its first path, often the optimizer's):
  # the towers, the heads, the optimizer's moments and step.
  names = [n for n, _ in tf.train.list_variables(os.path.join(ckpts, "ckpt-10"))
           if n.endswith("VARIABLE_VALUE") and not n.startswith("save_counter")]
  assert len(names) > 3 * 118  # 118 trainable variables, two moments each, and more
  for name in names:
    np.testing.assert_allclose(resumed.get_tensor(name), through.get_tensor(name), atol=1e-6,
                               err_msg=name)


def test_without_the_head_pretraining_builds_the_plain_model(pairs_dir):
  cfg = config.load("tiny", ["data.tasks=crop", "trainer.steps=1", "trainer.eval_steps=0"])
  job = pretrain.PretrainConfig(training=cfg, out=str(pairs_dir / "plain"),
                                vocab=str(pairs_dir / "vocab.txt"), pairs=str(pairs_dir),
                                progress="none", export=False)
  result = pretrain.run(job)
  assert "head_mlm_loss" not in result.history and "loss" in result.history
  assert "query_head" not in train._children(train.resolve_checkpoint(job.out), "model")
