"""MoCo (`objective.moco_queue`, model/two_tower.py), the negatives Contriever pre-trains with:
the queue holds the last N documents' embeddings from the momentum encoder, the momentum
update is theta_k <- m theta_k + (1 - m) theta_q (checked on the weights), empty slots and a
query's own document are masked, a resumed run equals one run through (queue and momentum
weights included), the same step under MirroredStrategy over two logical CPUs fills the queue
as on one replica, and a MoCo run's towers start fine-tuning (`--init`)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from twotower.core import contracts
from twotower.model import config, losses, pretrain, train
from twotower.model.two_tower import TwoTowerModel, build_two_tower
from twotower.testing import pairs as testing

B, N, M = 8, 12, 0.9  # global batch, queue size, momentum


def _model(queue: int = N, momentum: float = M, dropout: float = 0.0) -> TwoTowerModel:
  mc = config.ModelConfig(num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32,
                          dropout=dropout, embedding_dim=8, query_len=6, doc_len=10,
                          shared_towers=True)
  keras.utils.set_random_seed(1)
  model = build_two_tower(mc, 64, moco_queue=queue, moco_momentum=momentum)
  model.compile(optimizer=train.make_optimizer(1e-2, 10, 0.0, 0.0))
  model.optimizer.build(model.trainable_variables)  # as train.py: the step traced once
  return model


def _batch(seed: int) -> dict:
  rng = np.random.default_rng(seed)

  def side(length):
    ids = rng.integers(5, 60, size=(B, length)).astype("int32")
    ids[:, 0] = 2
    return {"token_ids": ids, "padding_mask": np.ones((B, length), "int32")}
  return tf.nest.map_structure(tf.constant, {
      "query": side(6), "doc": side(10),
      "doc_id": np.array([[seed, i] for i in range(B)], "int64")})


def _values(weights):
  return [w.numpy().copy() for w in weights]


def test_the_momentum_tower_starts_as_the_tower_and_is_not_trained():
  model = _model()
  assert model.momentum_tower is not None and model.shared_towers
  pairs = model._momentum_pairs()
  assert len(pairs) == len(model.query_tower.weights) > 5
  for key, query in pairs:
    np.testing.assert_array_equal(key.numpy(), query.numpy())
  trainable = {id(v) for v in model.trainable_variables}
  assert not any(id(w) in trainable for w in model.momentum_tower.weights)
  assert not any(id(w) in trainable for w in (model.queue, model.queue_ids, model.queue_next))
  assert (model.queue_ids.numpy() == -1).all()


def test_the_momentum_update_is_m_theta_k_plus_one_minus_m_theta_q_on_the_weights():
  model = _model()
  model.train_step(_batch(0))  # the tower moves away from its copy
  pairs = model._momentum_pairs()
  key_before, query_before = _values(k for k, _ in pairs), _values(q for _, q in pairs)
  assert max(np.abs(k - q).max() for k, q in zip(key_before, query_before)) > 1e-4
  model.train_step(_batch(1))
  for (key, query), k0, q0 in zip(pairs, key_before, query_before):
    # The update comes before the step's gradients (MoCo's order): it uses theta_q before.
    np.testing.assert_allclose(key.numpy(), M * k0 + (1 - M) * q0, rtol=1e-5, atol=1e-6)
    assert not np.allclose(query.numpy(), q0)  # the tower itself was trained


def test_the_queue_holds_the_last_n_documents_from_the_momentum_encoder():
  model = _model()
  keys, ids = [], []
  for step in range(3):
    batch = _batch(step)
    model.train_step(batch)
    # The momentum tower is not changed after it embedded this step's documents (no
    # dropout here), so embedding them again gives the keys the step pushed.
    keys.append(model.momentum_tower(batch["doc"], training=False).numpy())
    ids.append(batch["doc_id"].numpy())
  # 24 documents into 12 slots: slots 0-3 hold step 1's last 4, slots 4-11 step 2's 8.
  expected = np.concatenate([keys[1][4:], keys[2]])
  np.testing.assert_allclose(model.queue.numpy(), expected, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(model.queue_ids.numpy(), np.concatenate([ids[1][4:], ids[2]]))
  assert int(model.queue_next.numpy()) == (3 * B) % N == 0
  # Not the online tower's embeddings: the keys come from the momentum copy.
  online = model.query_tower(_batch(2)["doc"], training=False).numpy()
  assert np.abs(online - keys[2]).max() > 1e-5


def test_the_loss_scores_the_batch_then_the_queue_and_masks_empty_slots_and_own_documents():
  model = _model()
  batch = _batch(0)
  loss, logits, labels = model.moco_step(batch)
  assert logits.shape == (B, B + N)
  assert (logits.numpy()[:, B:] == losses.MASKED_LOGIT).all()  # the queue was empty
  np.testing.assert_array_equal(labels.numpy(), np.arange(B))
  # The same documents again: the queue now holds them, each masked for its own query only.
  loss, logits, _ = model.moco_step(batch)
  queued = logits.numpy()[:, B:]
  for i in range(B):
    assert queued[i, i] == losses.MASKED_LOGIT
    assert (np.delete(queued[i, :B], i) != losses.MASKED_LOGIT).all()
    assert (queued[i, B:] == losses.MASKED_LOGIT).all()  # slots 8-11 still empty
  expected = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
  assert abs(float(loss) - float(tf.reduce_mean(expected))) < 1e-5


def test_config_round_trip_and_refusals():
  model = _model()
  config_dict = model.get_config()
  assert config_dict["moco_queue"] == N and config_dict["moco_momentum"] == M
  clone = TwoTowerModel.from_config(config_dict)
  assert clone.moco_queue == N and clone.momentum_tower is not None
  assert "moco_queue" not in _model(queue=0).get_config()  # off: the config of before
  tower = _model(queue=0).query_tower
  with pytest.raises(ValueError, match="shared tower"):
    TwoTowerModel(tower, _model(queue=0).query_tower, moco_queue=4)
  with pytest.raises(ValueError, match="shared_towers"):
    config.load("tiny", ["objective.moco_queue=4"])


# ------------------------------------------------------------------------------------------
# Through the trainer: resume, and fine-tuning's --init.
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pairs_root(tmp_path_factory):
  root = tmp_path_factory.mktemp("moco")
  testing.write_vocab(str(root / "vocab.txt"))
  testing.write_pairs(str(root), "ict", "train", testing.synthetic_pairs(64, 0, "ict"))
  return root


def _pretrain(root, out):
  cfg = config.load("tiny", ["trainer.steps=10", "trainer.eval_steps=0", "model.dropout=0.1",
                             "trainer.checkpoint_every=5", "model.shared_towers=true",
                             "objective.moco_queue=20", "objective.moco_momentum=0.9"])
  pretrain.run(pretrain.PretrainConfig(training=cfg, out=str(out), vocab=str(root / "vocab.txt"),
                                       pairs=str(root), export=False, progress="none"))
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(contracts.checkpoint_dir(str(out))))
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if not name.startswith("_CHECKPOINTABLE")}


def test_a_resumed_moco_run_equals_one_run_through_queue_and_momentum_weights_included(
    pairs_root, tmp_path):
  through = _pretrain(pairs_root, tmp_path / "through")
  names = " ".join(through)
  assert "model/queue/" in names and "model/queue_ids/" in names
  assert "model/momentum_tower/" in names
  queue_ids = next(v for k, v in through.items() if k.startswith("model/queue_ids/"))
  assert (queue_ids >= 0).all()  # 10 steps of 8 filled all 20 slots
  killed = tmp_path / "killed"
  shutil.copytree(tmp_path / "through", killed)
  ckpt_dir = contracts.checkpoint_dir(str(killed))
  for name in glob.glob(os.path.join(ckpt_dir, "ckpt-10.*")):
    os.remove(name)
  with open(os.path.join(ckpt_dir, "checkpoint"), "w", encoding="utf-8") as state:
    state.write('model_checkpoint_path: "ckpt-5"\nall_model_checkpoint_paths: "ckpt-5"\n')
  resumed = _pretrain(pairs_root, killed)
  assert resumed.keys() == through.keys()
  for name in through:
    np.testing.assert_array_equal(resumed[name], through[name], err_msg=name)


def test_a_moco_run_starts_fine_tuning_towers_and_its_key_encoder_follows_init(pairs_root,
                                                                                tmp_path):
  _pretrain(pairs_root, tmp_path / "moco")
  prefix = train.resolve_checkpoint(str(tmp_path / "moco"))
  reader = tf.train.load_checkpoint(prefix)
  # A plain model (fine-tuning's) takes the tower; a MoCo one also copies it into its key
  # encoder (train.two_tower_builder).
  for objective in ([], ["objective.moco_queue=8"]):
    c = config.load("tiny", ["model.shared_towers=true"] + objective)
    model = train.two_tower_builder(c, str(tmp_path / "moco"))(_vocab_size(pairs_root))
    kernel = model.query_tower.projection.kernel
    # A trained variable is saved under the optimizer's path: the one of the kernel's shape.
    (saved,) = [reader.get_tensor(name) for name, shape in reader.get_variable_to_shape_map().items()
                if name.startswith("optimizer/_trainable_variables/")
                and tuple(shape) == tuple(kernel.shape)]
    np.testing.assert_array_equal(kernel.numpy(), saved)
    if model.momentum_tower is not None:
      np.testing.assert_array_equal(model.momentum_tower.projection.kernel.numpy(), saved)


def _vocab_size(root) -> int:
  with open(root / "vocab.txt", encoding="utf-8") as f:
    return sum(1 for _ in f)


# ------------------------------------------------------------------------------------------
# MirroredStrategy over two logical CPUs (a fresh process: devices are set before TF starts).
# ------------------------------------------------------------------------------------------

_MIRRORED = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    sys.path.insert(0, sys.argv[1])
    import test_moco as t

    def two_steps(model):  # through Keras fit, as training runs
      batches = [tf.data.Dataset.from_tensors(t._batch(step)) for step in range(2)]
      model.fit(batches[0].concatenate(batches[1]), epochs=1, verbose=0)
      return model
    single = two_steps(t._model())
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
      mirrored = t._model()
    two_steps(mirrored)
    def local(v):
      return strategy.experimental_local_results(v)
    for name in ("queue", "queue_ids", "queue_next"):
      a, copies = getattr(single, name).numpy(), local(getattr(mirrored, name).value)
      for c in copies:
        np.testing.assert_allclose(c.numpy(), a, rtol=1e-4, atol=1e-5, err_msg=name)
    for (k1, _), (k2, _) in zip(single._momentum_pairs(), mirrored._momentum_pairs()):
      np.testing.assert_allclose(local(k2.value)[1].numpy(), k1.numpy(), rtol=1e-4, atol=1e-5)
    print("MIRRORED_OK", len(local(mirrored.queue.value)))
""")


def test_under_mirrored_strategy_the_queue_holds_every_replicas_documents():
  out = subprocess.run([sys.executable, "-c", _MIRRORED, os.path.dirname(__file__)],
                       capture_output=True, text=True, timeout=600, check=False)
  assert "MIRRORED_OK 2" in out.stdout, out.stderr[-3000:]


def test_export_writes_the_tower_alone(tmp_path):
  """The momentum tower and the queue are for pre-training only: what export writes is the
  plain model of the same tower."""
  from twotower.model import export
  from twotower.model.tokenizer import Tokenizer
  model = _model()
  plain = model.towers_only()
  assert plain.momentum_tower is None and plain.query_tower is model.query_tower
  assert len(plain.weights) == len(model.query_tower.weights)
  vocab = testing.write_vocab(str(tmp_path / "vocab.txt"))
  tokenizer = Tokenizer.from_file(vocab, 6, 10)
  export.export(model, tokenizer, vocab, str(tmp_path / "export"))
  loaded = keras.saving.load_model(str(tmp_path / "export" / contracts.KERAS_FILE))
  assert loaded.momentum_tower is None and "moco_queue" not in loaded.get_config()
  names = [name for name, _ in tf.train.list_variables(
      str(tmp_path / "export" / contracts.SAVED_MODEL_DIR / "variables" / "variables"))
           if not name.startswith("_CHECKPOINTABLE")]
  assert names and not [n for n in names if "momentum" in n or "queue" in n]
