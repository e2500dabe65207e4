"""Losses: eq. 4 against a hand computation, accidental-hit masking, and one replica vs
MirroredStrategy over 2 logical CPUs on the same global batch (loss, cross-replica negatives,
learning-rate schedule and weights)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from twotower.model import losses


def test_in_batch_softmax_matches_hand_computation():
  # q = [[1, 0], [0, 1]], d = [[1, 0], [1, 1]]: logits = q d^T = [[1, 1], [0, 1]].
  # Query 0 (positive d0): -log(e^1 / (e^1 + e^1)) = log 2.
  # Query 1 (positive d1): -log(e^1 / (e^0 + e^1)) = log(1 + e^-1).
  q = tf.constant([[1.0, 0.0], [0.0, 1.0]])
  d = tf.constant([[1.0, 0.0], [1.0, 1.0]])
  loss, logits, labels = losses.in_batch_softmax_loss(q, d)
  np.testing.assert_allclose(logits.numpy(), [[1, 1], [0, 1]])
  np.testing.assert_array_equal(labels.numpy(), [0, 1])
  expected = (math.log(2.0) + math.log(1.0 + math.exp(-1.0))) / 2
  assert loss.numpy() == pytest.approx(expected, abs=1e-6)


def test_temperature_divides_logits():
  q = tf.constant([[1.0, 0.0], [0.0, 1.0]])
  d = tf.constant([[1.0, 0.0], [1.0, 1.0]])
  loss, logits, _ = losses.in_batch_softmax_loss(q, d, temperature=0.5)
  np.testing.assert_allclose(logits.numpy(), [[2, 2], [0, 2]])
  expected = (math.log(2.0) + math.log(1.0 + math.exp(-2.0))) / 2
  assert loss.numpy() == pytest.approx(expected, abs=1e-6)


def test_accidental_hits_do_not_count():
  # Docs 0 and 2 are the same passage (page 7, passage 1): for query 0, column 2 is not a
  # negative, and for query 2, column 0 is not; query 1 keeps all columns.
  rng = np.random.default_rng(0)
  q = tf.constant(rng.normal(size=(3, 4)), tf.float32)
  d = tf.constant(rng.normal(size=(3, 4)), tf.float32)
  ids = tf.constant([[7, 1], [8, 0], [7, 1]], tf.int64)
  loss, logits, _ = losses.in_batch_softmax_loss(q, d, ids)
  raw = (q.numpy() @ d.numpy().T)
  assert logits[0, 2] == losses.MASKED_LOGIT and logits[2, 0] == losses.MASKED_LOGIT
  np.testing.assert_allclose(np.diag(logits.numpy()), np.diag(raw), rtol=1e-6)

  def ce(row, pos, cols):
    z = raw[row, cols]
    return -(raw[row, pos] - np.log(np.exp(z).sum()))
  expected = np.mean([ce(0, 0, [0, 1]), ce(1, 1, [0, 1, 2]), ce(2, 2, [1, 2])])
  assert loss.numpy() == pytest.approx(expected, abs=1e-5)
  # Without ids, the copies count as negatives and the loss is different.
  unmasked, _, _ = losses.in_batch_softmax_loss(q, d)
  assert unmasked.numpy() != pytest.approx(loss.numpy(), abs=1e-4)


def test_hard_negatives_join_the_softmax_hand_computed():
  # B = 2 pairs, d = 3, k = 1 hard negative each; ids (passage, candidate).
  #   q  = [[1, 0, 0], [0, 1, 0]]
  #   d  = [[1, 0, 0], [0, 1, 0]]   positives, candidates 10 and 11
  #   n  = [[0.5, 2, 0],            query 0's negative: candidate 11 = query 1's positive
  #         [1, 1, 1]]              query 1's: padding (id -1)
  # Logits [2, B * (1 + k)] = [q.d0, q.d1, q.n0, q.n1]:
  #   query 0: [1, 0, 0.5, (1: padding, masked)]
  #   query 1: [0, 1, (2: its own positive's candidate, masked), (1: padding, masked)]
  # Loss 0 = -log(e / (e + 1 + e^0.5)); loss 1 = -log(e / (1 + e)) = log(1 + e^-1).
  q = tf.constant([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
  d = tf.constant([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
  n = tf.constant([[0.5, 2.0, 0.0], [1.0, 1.0, 1.0]])
  doc_ids = tf.constant([[5, 10], [6, 11]], tf.int64)
  neg_ids = tf.constant([11, -1], tf.int64)
  loss, logits, labels = losses.in_batch_softmax_loss(q, d, doc_ids, neg_emb=n, neg_ids=neg_ids)
  m = losses.MASKED_LOGIT
  np.testing.assert_allclose(logits.numpy(), [[1, 0, 0.5, m], [0, 1, m, m]])
  np.testing.assert_array_equal(labels.numpy(), [0, 1])
  e = math.e
  expected = (-math.log(e / (e + 1 + math.exp(0.5))) + math.log(1 + math.exp(-1))) / 2
  assert loss.numpy() == pytest.approx(expected, abs=1e-6)
  # Without ids to compare (mask_accidental_hits off), padding is still masked; the negative
  # that is query 1's own positive counts against it.
  _, unmasked, _ = losses.in_batch_softmax_loss(q, d, None, neg_emb=n, neg_ids=neg_ids)
  np.testing.assert_allclose(unmasked.numpy(), [[1, 0, 0.5, m], [0, 1, 2, m]])


def test_no_hard_negatives_is_eq4_exactly():
  rng = np.random.default_rng(1)
  q = tf.constant(rng.normal(size=(4, 3)), tf.float32)
  d = tf.constant(rng.normal(size=(4, 3)), tf.float32)
  ids = tf.constant([[1, 0], [2, 0], [1, 0], [3, 0]], tf.int64)
  plain = losses.in_batch_softmax_loss(q, d, ids)
  for neg in (None, tf.zeros((0, 3))):
    with_none = losses.in_batch_softmax_loss(q, d, ids, neg_emb=neg,
                                             neg_ids=tf.zeros((0,), tf.int64))
    for a, b in zip(plain, with_none):
      np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_hard_negatives_need_ids():
  q = tf.ones((2, 3))
  with pytest.raises(ValueError, match="hard negatives need their ids"):
    losses.in_batch_logits(q, q, neg_emb=tf.ones((2, 3)))


def test_masked_lm_loss_ignores_padding_slots():
  logits = tf.constant([[[2.0, 0.0, 0.0], [0.0, 5.0, 0.0]]])  # [B=1, P=2, V=3]
  ids = tf.constant([[0, 2]])
  weights = tf.constant([[1.0, 0.0]])
  loss, acc = losses.masked_lm_loss(logits, ids, weights)
  expected = -(2.0 - math.log(math.exp(2.0) + 2.0))
  assert loss.numpy() == pytest.approx(expected, abs=1e-6)
  assert acc.numpy() == pytest.approx(1.0)


_MIRRORED_SCRIPT = textwrap.dedent("""
    import json, numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    import keras
    from twotower.model import config, train
    from twotower.model.two_tower import build_two_tower

    mc = config.ModelConfig(num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32,
                            dropout=0.0, embedding_dim=8, query_len=6, doc_len=10)
    rng = np.random.default_rng(0)
    B = 8
    def side(n):
      ids = rng.integers(5, 60, size=(B, n)).astype("int32"); ids[:, 0] = 2
      mask = np.ones((B, n), "int32"); mask[:, n - 2:] = 0; ids[mask == 0] = 0
      return {"token_ids": ids, "padding_mask": mask}
    batch = {"query": side(6), "doc": side(10),
             "doc_id": np.array([[i % 6, 0] for i in range(B)], "int64")}  # docs 0,6 / 1,7 repeat

    def make(strategy):
      keras.utils.set_random_seed(1)
      with strategy.scope():
        m = build_two_tower(mc, 64)
        # Warm-up over 2 of 10 steps: the learning rate differs at every step, so a schedule
        # that counted per-replica steps would show up as a weight difference after 3 steps.
        m.compile(optimizer=train.make_optimizer(1e-2, 10, 0.2, 0.0))
        m.optimizer.build(m.trainable_variables)  # as train.py: the step traced once
      return m

    one = make(tf.distribute.get_strategy())
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    two = make(mirrored)
    two.set_weights(one.get_weights())
    loss_one = float(one.compute_retrieval_loss(batch, training=False)[0])
    ds = tf.data.Dataset.from_tensors(batch)
    dist = mirrored.experimental_distribute_dataset(ds)
    per_replica = mirrored.run(lambda b: two.compute_retrieval_loss(b, training=False),
                               args=(next(iter(dist)),))
    loss_two = float(mirrored.reduce(tf.distribute.ReduceOp.MEAN, per_replica[0], axis=None))
    logits = [t.shape.as_list() for t in mirrored.experimental_local_results(per_replica[1])]
    labels = [t.numpy().tolist() for t in mirrored.experimental_local_results(per_replica[2])]
    steps = ds.repeat(3)  # 3 optimizer steps on the same global batch of B pairs
    one.fit(steps, epochs=1, verbose=0)
    two.fit(steps, epochs=1, verbose=0)
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(one.get_weights(), two.get_weights()))
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(one.get_weights(), make(tf.distribute.get_strategy()).get_weights()))
    value = lambda v: float(tf.convert_to_tensor(getattr(v, "value", v)))
    lr = lambda m: value(m.optimizer.learning_rate)
    print(json.dumps({"replicas": mirrored.num_replicas_in_sync, "loss_one": loss_one,
                      "loss_two": loss_two, "weight_diff": diff, "moved": moved,
                      "logits_shapes": logits, "labels": labels,
                      "iterations": [value(one.optimizer.iterations), value(two.optimizer.iterations)],
                      "lr": [lr(one), lr(two)]}))
""")


@pytest.mark.slow
def test_one_replica_equals_mirrored_two_logical_cpus():
  # Logical devices must be configured before TF initialises them: a fresh process.
  out = subprocess.run([sys.executable, "-c", _MIRRORED_SCRIPT], capture_output=True,
                       text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  result = json.loads(out.stdout.strip().splitlines()[-1])
  assert result["replicas"] == 2
  # The configured batch is the global one: each of 2 replicas embeds B/2 = 4 pairs and scores
  # them against all 8 documents (cross-replica negatives); replica r's positives sit at
  # columns r * 4 + i of the gathered documents.
  assert result["logits_shapes"] == [[4, 8], [4, 8]]
  assert result["labels"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
  assert result["loss_two"] == pytest.approx(result["loss_one"], abs=1e-5)
  # The schedule counts global steps: after 3 steps both optimizers sit at iteration 3 with the
  # same learning rate, not at 6 (one per replica).
  assert result["iterations"] == [3, 3]
  assert result["lr"][1] == pytest.approx(result["lr"][0])
  # Three optimizer steps on the same global batch give the same weights: the per-replica
  # loss is divided by the number of replicas before Keras sums the gradients.
  assert result["moved"] > 1e-4
  assert result["weight_diff"] < 1e-4
