"""The TensorFlow train and test steps of `TwoTowerModel` and `MlmModel` (two_tower.py):
mixins that two_tower.py puts before `keras.Model` only when Keras runs on TensorFlow.

They stay TensorFlow's own because what they do has no JAX form in Keras's `fit`: a
`GradientTape` per replica under `tf.distribute` (the loss divided by the replica count,
because Keras sums the replicas' gradients), the gradient cache's chunked re-forward
(grad_cache.py), MoCo's queue updated by scatter, and dense gradients for Adam. On JAX the
model has no such step: Keras's own JAX `train_step` differentiates
`TwoTowerModel.compute_loss` (the same loss functions, losses.py).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from twotower.model import grad_cache
from twotower.model import losses
from twotower.model.tf_replicas import num_replicas


def apply_gradients(model: keras.Model, grads) -> None:
  """`optimizer.apply` with dense gradients.

  An embedding lookup's gradient is an IndexedSlices with one slice per occurrence of a
  token, and Keras 3.15's Adam squares the slices one by one: a token that occurs n times in
  a batch ([CLS] and [SEP] occur in every row) gets the sum of its n squared slices as its
  second moment instead of the square of their sum, so its embedding moves by up to sqrt(n)
  times Adam's step. Measured on tests/test_grad_cache.py's batch: after 3 steps, the direct
  path's slices and the cache's dense gradients ended 0.02 apart; dense on both sides, 2e-6.
  Dense gradients give Adam's update, and replicas' gradients sum instead of concatenating
  their slices (which would repeat the error across replicas).
  """
  grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
  model.optimizer.apply(grads, model.trainable_variables)


class TwoTowerSteps:
  """`TwoTowerModel`'s TensorFlow steps: direct (one tape over the batch), cached
  (grad_cache.py) or MoCo."""

  # -- MoCo (moco_queue > 0). ---------------------------------------------------------------

  def enqueue(self, keys, doc_ids) -> None:
    """Pushes the global batch's document embeddings (and ids) into the queue, oldest out."""
    keys, doc_ids = losses.gather_global(keys), losses.gather_global(doc_ids)
    rows = tf.shape(keys)[0]
    slots = (self.queue_next + tf.range(rows, dtype=tf.int64)) % self.moco_queue
    self.queue.assign(tf.tensor_scatter_nd_update(self.queue.value, slots[:, None],
                                                  tf.cast(keys, tf.float32)))
    self.queue_ids.assign(tf.tensor_scatter_nd_update(self.queue_ids.value, slots[:, None],
                                                      tf.cast(doc_ids, tf.int64)))
    self.queue_next.assign((self.queue_next + tf.cast(rows, tf.int64)) % self.moco_queue)

  def moco_step(self, data):
    """One MoCo step: momentum update, keys, the queries' gradients, then the queue."""
    data, _, _ = keras.utils.unpack_x_y_sample_weight(data)
    self.momentum_update()
    # Dropout on as in Contriever, whose key encoder runs in training mode too.
    keys = tf.stop_gradient(self.momentum_tower(data["doc"], training=True))
    with tf.GradientTape() as tape:
      query_emb = self.query_tower(data["query"], training=True)
      loss, logits, labels = self.moco_loss(data, query_emb, keys)
      objective = self._objective(loss)
    apply_gradients(self, tape.gradient(objective, self.trainable_variables))
    self.enqueue(keys, data["doc_id"])
    return loss, logits, labels

  # -- Gradients: direct (one tape over the batch) or cached (grad_cache.py). ----------------

  def _objective(self, loss):
    """What a replica differentiates: its loss over the replicas (Keras sums the replicas'
    gradients), scaled for mixed precision (`apply` unscales)."""
    return self.optimizer.scale_loss(loss / num_replicas())

  def direct_gradients(self, data):
    """((loss, logits, labels), gradient of each trainable variable), one tape."""
    data, _, _ = keras.utils.unpack_x_y_sample_weight(data)
    with tf.GradientTape() as tape:
      loss, logits, labels = self.compute_retrieval_loss(data, training=True)
      objective = self._objective(loss)
    return (loss, logits, labels), tape.gradient(objective, self.trainable_variables)

  def num_chunks(self, data) -> int:
    """Per-replica batch / grad_cache_chunk; an error unless it divides."""
    local = data["query"]["token_ids"].shape[0]
    if local is None:
      raise ValueError("gradient caching needs a static batch dimension (drop_remainder=True)")
    if local % self.grad_cache_chunk:
      raise ValueError(f"trainer.grad_cache_chunk={self.grad_cache_chunk} does not divide the "
                       f"per-replica batch {local} (global batch / {num_replicas()} replicas)")
    return local // self.grad_cache_chunk

  def seed_states(self) -> list:
    """The towers' dropout RNG states (grad_cache.seed_states)."""
    return grad_cache.seed_states([self.query_tower, self.doc_tower])

  def cached_gradients(self, data):
    """((loss, logits, labels), gradients) as `direct_gradients`, by the gradient cache."""
    data, _, _ = keras.utils.unpack_x_y_sample_weight(data)
    inputs = self.tower_inputs(data)

    def loss_fn(emb):
      loss, logits, labels = self.retrieval_loss(data, emb)
      return self._objective(loss), (loss, logits, labels)
    return grad_cache.cached_gradients(
        lambda chunk: self(chunk, training=True), inputs, self.num_chunks(data),
        self._dims(inputs), loss_fn, self.trainable_variables, self.seed_states())

  def train_step(self, data):
    if self.moco_queue:
      return self._update_metrics(*self.moco_step(data))
    if self.grad_cache_chunk:
      (loss, logits, labels), grads = self.cached_gradients(data)
    else:
      (loss, logits, labels), grads = self.direct_gradients(data)
    apply_gradients(self, grads)
    return self._update_metrics(loss, logits, labels)

  def test_step(self, data):
    data, _, _ = keras.utils.unpack_x_y_sample_weight(data)
    if self.grad_cache_chunk:  # a held-out batch as large as training's must fit too
      inputs = self.tower_inputs(data)
      emb, _ = grad_cache.embed_in_chunks(lambda chunk: self(chunk, training=False), inputs,
                                          self.num_chunks(data), self._dims(inputs))
    else:
      emb = self(data, training=False)
    return self._update_metrics(*self.retrieval_loss(data, emb))


class MlmSteps:
  """`MlmModel`'s TensorFlow steps (dense gradients, the loss over the replicas)."""

  def train_step(self, data):
    with tf.GradientTape() as tape:
      loss, accuracy = self._loss(data, training=True)
      scaled = self.optimizer.scale_loss(loss / num_replicas())
    apply_gradients(self, tape.gradient(scaled, self.trainable_variables))
    self.loss_tracker.update_state(loss)
    self.accuracy_tracker.update_state(accuracy)
    return {m.name: m.result() for m in self.metrics}

  def test_step(self, data):
    loss, accuracy = self._loss(data, training=False)
    self.loss_tracker.update_state(loss)
    self.accuracy_tracker.update_state(accuracy)
    return {m.name: m.result() for m in self.metrics}
