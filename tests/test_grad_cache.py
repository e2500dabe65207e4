"""Gradient cache (model/grad_cache.py): the loss and every gradient computed in chunks equal
the full-batch ones, dropout on, hard negatives and accidental hits in the batch, on one
replica and under MirroredStrategy over two logical CPUs; a few optimizer steps land on the
same weights.

The reference is the gradient of the full-batch loss through one tape. With dropout on, the
masks must be the same on both sides: the reference calls the towers chunk by chunk (as the
cache's first pass does, from the same RNG states), so it draws the same masks, and the
gradient still flows through all B queries x B (1 + k) documents at once. With one chunk,
the cache is compared with the production direct path itself (`direct_gradients`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from twotower.model import grad_cache, two_tower
from grad_cache_fixtures import (B, K, States, build, make_batch, max_diff, reference_gradients,
                                 reference_model_class, weights_after_steps)

# ------------------------------------------------------------------------------------------
# One replica, in process.
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["eager", "tf.function",
                                  pytest.param("xla", marks=pytest.mark.slow)])
def test_chunked_loss_and_every_gradient_equal_the_full_batch_ones(mode):
  model = build(dropout=0.1, grad_cache_chunk=2)  # 4 chunks of 2 pairs (+ 2 negatives)
  batch = make_batch()
  states = States(model)

  def compiled(fn):
    # XLA draws other random numbers from the same seeds: both sides compiled alike.
    return fn if mode == "eager" else tf.function(fn, jit_compile=mode == "xla")
  (loss, logits, _), cached = compiled(model.cached_gradients)(batch)
  after_cache = states.now()
  states.restore()
  reference = compiled(lambda b: reference_gradients(model, b, 4))
  (ref_loss, ref_logits, _), ref = reference(batch)
  assert len(cached) == len(ref) == len(model.trainable_variables)
  assert all(g is not None for g in ref)
  assert logits.shape == (B, B * (1 + K))
  assert abs(float(loss) - float(ref_loss)) < 1e-5
  np.testing.assert_allclose(logits.numpy(), ref_logits.numpy(), atol=1e-5)
  assert max_diff(cached, ref) < 1e-5
  # The re-forward restored each chunk's RNG state and left them where the first pass did.
  for a, b in zip(after_cache, states.now()):
    np.testing.assert_array_equal(a, b)
  # Dropout is on: other masks give other gradients (without the restore too, below).
  assert max_diff(ref, reference(batch)[1]) > 1e-4


def test_without_restoring_dropout_states_the_gradients_are_wrong():
  model = build(dropout=0.1, grad_cache_chunk=2)
  batch = make_batch()
  inputs = model.tower_inputs(batch)
  states = States(model)

  def loss_fn(emb):
    out = model.retrieval_loss(batch, emb)
    return out[0], out
  dims = {name: 8 for name in inputs}  # the towers' embedding_dim
  _, unrestored = grad_cache.cached_gradients(
      lambda chunk: model(chunk, training=True), inputs, 4, dims, loss_fn,
      model.trainable_variables, states=())
  states.restore()
  _, ref = reference_gradients(model, batch, 4)
  assert max_diff(unrestored, ref) > 1e-3


def test_one_chunk_equals_the_direct_path_with_dropout():
  model = build(dropout=0.1, grad_cache_chunk=B)
  batch = make_batch()
  states = States(model)
  (loss, _, _), cached = model.cached_gradients(batch)
  states.restore()
  (direct_loss, _, _), direct = model.direct_gradients(batch)
  assert abs(float(loss) - float(direct_loss)) < 1e-6
  assert max_diff(cached, direct) < 1e-5


def test_mixed_bfloat16():
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    model = build(dropout=0.1, grad_cache_chunk=2)
    assert model.query_tower.compute_dtype == "bfloat16"
    batch = make_batch()
    states = States(model)
    (loss, _, _), cached = model.cached_gradients(batch)
    states.restore()
    (ref_loss, _, _), ref = reference_gradients(model, batch, 4)
  finally:
    keras.mixed_precision.set_global_policy("float32")
  assert abs(float(loss) - float(ref_loss)) < 1e-5
  assert max_diff(cached, ref) < 1e-5


#: Weights after 3 AdamW steps agree to a few 1e-6 (measured 2-4e-6): Adam divides each
#: gradient by sqrt(v) + eps (1e-6), so float rounding of a near-zero gradient, ~1e-9, moves
#: a weight by up to lr * 1e-9 / eps = 1e-5. As tests/test_model_losses.py's replica test.
WEIGHTS_ATOL = 1e-4


@pytest.mark.slow  # four models, three fit steps each
def test_optimizer_steps_land_on_the_same_weights():
  # Dropout off: the cache against the production direct path.
  direct = weights_after_steps(build(dropout=0.0, grad_cache_chunk=0))
  cached = weights_after_steps(build(dropout=0.0, grad_cache_chunk=2))
  start = build(dropout=0.0, grad_cache_chunk=0).get_weights()
  assert max_diff(direct, start) > 1e-3  # the weights did move
  assert max_diff(cached, direct) < WEIGHTS_ATOL
  # Dropout on: against the one-tape reference drawing the same masks.
  reference = weights_after_steps(build(0.1, 2, reference_model_class()))
  cached = weights_after_steps(build(dropout=0.1, grad_cache_chunk=2))
  assert max_diff(cached, reference) < WEIGHTS_ATOL


def test_repeated_tokens_get_adams_update():
  # Token 0 occurs twice in the batch: its gradient is two slices of 1, i.e. 2. Keras' Adam
  # on the slices takes v = 1 + 1 instead of 2^2 (a step sqrt(2) too large at step 2);
  # apply_gradients hands the optimizer the dense gradient.
  import types  # pylint: disable=import-outside-toplevel
  slices = tf.IndexedSlices(tf.constant([[1.0], [1.0]]), tf.constant([0, 0]), tf.constant([3, 1]))

  def two_steps(apply):
    v = keras.Variable(np.zeros((3, 1), "float32"))
    stub = types.SimpleNamespace(optimizer=keras.optimizers.Adam(learning_rate=0.1),
                                 trainable_variables=[v])
    stub.optimizer.build([v])
    for _ in range(2):
      apply(stub)
    return v.numpy()[0, 0]
  dense = two_steps(
      lambda m: m.optimizer.apply([tf.convert_to_tensor(slices)], m.trainable_variables))
  sliced = two_steps(lambda m: m.optimizer.apply([slices], m.trainable_variables))
  ours = two_steps(lambda m: two_tower.apply_gradients(m, [slices]))
  assert ours == pytest.approx(dense, abs=1e-7)
  assert sliced == pytest.approx(dense * 2 ** 0.5, rel=1e-3), (
      "Keras' Adam now handles repeated slices: apply_gradients' densifying is moot")


def test_held_out_loss_in_chunks_equals_the_whole_batch():
  ds = tf.data.Dataset.from_tensors(make_batch())
  whole = build(dropout=0.1, grad_cache_chunk=0).evaluate(ds, verbose=0, return_dict=True)
  chunked = build(dropout=0.1, grad_cache_chunk=2).evaluate(ds, verbose=0, return_dict=True)
  assert chunked["loss"] == pytest.approx(whole["loss"], abs=1e-5)
  assert chunked["in_batch_accuracy"] == pytest.approx(whole["in_batch_accuracy"])


def test_a_chunk_that_does_not_divide_the_batch_is_a_clear_error():
  model = build(dropout=0.0, grad_cache_chunk=3)
  with pytest.raises(ValueError, match=r"grad_cache_chunk=3 does not divide the per-replica "
                                       r"batch 8"):
    model.cached_gradients(make_batch())


# ------------------------------------------------------------------------------------------
# MirroredStrategy over two logical CPUs (a fresh process: devices are set before TF starts).
# ------------------------------------------------------------------------------------------

_MIRRORED = textwrap.dedent("""
    import json, sys
    import numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    sys.path.insert(0, sys.argv[1])
    import grad_cache_fixtures as t

    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    def build(*args):
      with mirrored.scope():
        return t.build(*args)
    model = build(0.1, 2)  # 4 pairs per replica: 2 chunks of 2
    batch = next(iter(mirrored.experimental_distribute_dataset(
        tf.data.Dataset.from_tensors(t.make_batch()))))
    states = t.States(model)

    @tf.function
    def per_replica(fn):
      return mirrored.run(fn, args=(batch,))
    cached = per_replica(model.cached_gradients)
    states.restore()
    reference = per_replica(lambda b: t.reference_gradients(model, b, model.num_chunks(b)))
    local = mirrored.experimental_local_results
    (loss_c, logits_c, labels_c), grads_c = cached
    (loss_r, _, _), grads_r = reference
    result = {
        "replicas": mirrored.num_replicas_in_sync,
        "logits_shapes": [x.shape.as_list() for x in local(logits_c)],
        "labels": [x.numpy().tolist() for x in local(labels_c)],
        "loss_diff": max(abs(float(a) - float(b)) for a, b in zip(local(loss_c), local(loss_r))),
        "grad_diff": [t.max_diff([local(g)[r] for g in grads_c], [local(g)[r] for g in grads_r])
                      for r in range(2)],
        "grads": len(grads_c),
    }
    # Three optimizer steps: the cache with dropout against the one-tape reference under the
    # same strategy, and without dropout against the direct path on one replica.
    result["weights_dropout"] = t.max_diff(
        t.weights_after_steps(build(0.1, 2)),
        t.weights_after_steps(build(0.1, 2, t.reference_model_class())))
    result["weights_vs_one_replica"] = t.max_diff(
        t.weights_after_steps(build(0.0, 2)), t.weights_after_steps(t.build(0.0, 0)))
    print(json.dumps(result))
""")


@pytest.mark.slow
def test_mirrored_two_logical_cpus():
  out = subprocess.run([sys.executable, "-c", _MIRRORED, os.path.dirname(__file__)],
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  result = json.loads(out.stdout.strip().splitlines()[-1])
  assert result["replicas"] == 2
  # Each replica scores its 4 queries against the 8 positives and 8 hard negatives of the
  # global batch; its positives sit at columns r * 4 + i.
  assert result["logits_shapes"] == [[4, 16], [4, 16]]
  assert result["labels"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
  assert result["loss_diff"] < 1e-5
  assert max(result["grad_diff"]) < 1e-5, result
  assert result["weights_dropout"] < WEIGHTS_ATOL, result
  assert result["weights_vs_one_replica"] < WEIGHTS_ATOL, result
