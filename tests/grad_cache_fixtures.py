"""The gradient cache's test bench (test_grad_cache.py, in process and in the MirroredStrategy
child process, which imports this module): a batch with hard negatives and accidental hits,
tiny towers, the one-tape reference gradients, and the dropout RNG states saved and restored.

Usage:
  from grad_cache_fixtures import B, K, States, build, make_batch, reference_gradients
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from twotower.model import config, grad_cache, train
from twotower.model import two_tower
from twotower.model.two_tower import TwoTowerModel, build_two_tower

B, K = 8, 1  # global batch, hard negatives per pair


def make_batch(seed: int = 0) -> dict:
  """A batch of B pairs with K hard negatives each (tensors): docs 0/6 and 1/7 are the same
  document (accidental hits); query 3's negative is padding (-1); the negative of pair i is
  the positive of pair i + 1 (a hard negative that is another query's own positive)."""
  rng = np.random.default_rng(seed)

  def side(length, rows):
    ids = rng.integers(5, 60, size=(rows, length)).astype("int32")
    ids[:, 0] = 2
    mask = np.ones((rows, length), "int32")
    mask[:, length - 2:] = 0
    ids[mask == 0] = 0
    return {"token_ids": ids, "padding_mask": mask}
  batch = {"query": side(6, B), "doc": side(10, B), "neg_doc": side(10, B * K),
           "doc_id": np.array([[i % 6, 100 + i % 6] for i in range(B)], "int64"),
           "neg_doc_id": np.array([-1 if i == 3 else 100 + (i + 1) % 6 for i in range(B * K)],
                                  "int64")}
  return tf.nest.map_structure(tf.constant, batch)


def build(dropout: float, grad_cache_chunk: int, model_class=None):
  mc = config.ModelConfig(num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32,
                          dropout=dropout, embedding_dim=8, query_len=6, doc_len=10)
  keras.utils.set_random_seed(1)  # same initial weights and dropout seeds every time
  model = build_two_tower(mc, 64, grad_cache_chunk=grad_cache_chunk)
  if model_class is not None:
    model = model_class(model.query_tower, model.doc_tower, grad_cache_chunk=grad_cache_chunk)
  # Warm-up over 2 of 10 steps: the learning rate differs at every step.
  model.compile(optimizer=train.make_optimizer(1e-2, 10, 0.2, 0.0))
  # As train.py does: an optimizer built before fit is traced once, not twice (slots made
  # in the first trace make tf.function trace the step again).
  model.optimizer.build(model.trainable_variables)
  return model


def reference_gradients(model, data, num_chunks: int):
  """((loss, logits, labels), gradients) of the full-batch loss through one tape, the towers
  called chunk by chunk in the cache's order (the same dropout masks)."""
  chunks = grad_cache.split_chunks(model.tower_inputs(data), num_chunks)
  with tf.GradientTape() as tape:
    parts = [model(tf.nest.map_structure(lambda t, c=c: t[c], chunks), training=True)
             for c in range(num_chunks)]
    emb = {name: tf.concat([p[name] for p in parts], axis=0) for name in parts[0]}
    loss, logits, labels = model.retrieval_loss(data, emb)
    objective = model.optimizer.scale_loss(
        loss / tf.distribute.get_strategy().num_replicas_in_sync)
  return (loss, logits, labels), tape.gradient(objective, model.trainable_variables)


def reference_model_class():
  """A TwoTowerModel whose train_step applies `reference_gradients` (for the fit test)."""

  class ChunkedReference(TwoTowerModel):
    def train_step(self, data):
      (loss, logits, labels), grads = reference_gradients(self, data, self.num_chunks(data))
      two_tower.apply_gradients(self, grads)
      return self._update_metrics(loss, logits, labels)
  return ChunkedReference


def max_diff(a, b) -> float:
  return max(float(np.max(np.abs(np.asarray(tf.convert_to_tensor(x))
                                 - np.asarray(tf.convert_to_tensor(y)))))
             for x, y in zip(a, b))


def weights_after_steps(model, steps: int = 3):
  model.fit(tf.data.Dataset.from_tensors(make_batch()).repeat(steps), epochs=1, verbose=0)
  return model.get_weights()


class States:
  """Saves a model's dropout RNG states and puts them back, so two computations start from
  the same masks."""

  def __init__(self, model):
    self.states = model.seed_states()
    self.saved = [tf.identity(tf.convert_to_tensor(s)) for s in self.states]

  def restore(self):
    for state, value in zip(self.states, self.saved):
      state.assign(value)

  def now(self):
    return [tf.convert_to_tensor(s).numpy() for s in self.states]
