"""`TwoTowerModel`: score(q, d) = <phi(q), psi(d)>, trained with the in-batch softmax.

A `keras.Model` subclass with its own `train_step` / `test_step`, so one model runs under
`fit` on one device, under MirroredStrategy and on TPU: each replica embeds its share of
the batch, gathers the documents of all replicas as negatives (losses.py), and divides its
loss by the number of replicas because Keras sums gradients across replicas.

Batches are dicts (data.py):
  {"query": {"token_ids", "padding_mask"}: int32 [B, query_len],
   "doc":   {"token_ids", "padding_mask"}: int32 [B, doc_len],
   "doc_id": int64 [B, 2] (doc_page_id, doc_passage_id) for accidental-hit masking}

`MlmModel` is the masked-LM baseline: one `TransformerBackbone` plus KerasHub's
`MaskedLMHead` with tied embeddings; after MLM both towers start from its backbone.
"""

from __future__ import annotations

import keras
import keras_hub
import tensorflow as tf

from twotower.model import losses
from twotower.model.encoders import TransformerBackbone


def _num_replicas() -> int:
  return tf.distribute.get_strategy().num_replicas_in_sync


def _apply_gradients(model: keras.Model, loss: tf.Tensor, tape: tf.GradientTape) -> None:
  variables = model.trainable_variables
  grads = tape.gradient(loss, variables)
  model.optimizer.apply(grads, variables)


@keras.saving.register_keras_serializable(package="twotower")
class TwoTowerModel(keras.Model):
  """Query tower phi and document tower psi (the same layer when towers are shared).

  Call: a batch dict with "query" and/or "doc" -> {"query": float32 [B, d], "doc": ...}.
  """

  def __init__(self, query_tower: keras.layers.Layer, doc_tower: keras.layers.Layer | None = None,
               temperature: float = 1.0, mask_accidental_hits: bool = True, **kwargs):
    super().__init__(**kwargs)
    self.query_tower = query_tower
    self.doc_tower = query_tower if doc_tower is None else doc_tower
    self.shared_towers = self.doc_tower is self.query_tower
    self.temperature = float(temperature)
    self.mask_accidental_hits = bool(mask_accidental_hits)
    self.loss_tracker = keras.metrics.Mean(name="loss")
    self.accuracy_tracker = keras.metrics.Mean(name="in_batch_accuracy")

  def call(self, inputs, training=None):
    out = {}
    if "query" in inputs:
      out["query"] = self.query_tower(inputs["query"], training=training)
    if "doc" in inputs:
      out["doc"] = self.doc_tower(inputs["doc"], training=training)
    return out

  def build(self, input_shape):
    if not self.query_tower.built:
      self.query_tower.build(input_shape["query"])
    if not self.doc_tower.built:
      self.doc_tower.build(input_shape["doc"])
    self.built = True

  def build_from_config(self, config):
    """Rebuilds the towers' variables when a `.keras` file is loaded."""
    if "input_shape" in config:
      self.build(config["input_shape"])

  def build_from_lengths(self, query_len: int, doc_len: int) -> None:
    """Creates the variables (before restoring a checkpoint or counting parameters)."""
    def spec(n):
      return {"token_ids": (None, n), "padding_mask": (None, n)}
    self.build({"query": spec(query_len), "doc": spec(doc_len)})

  @property
  def metrics(self):
    return [self.loss_tracker, self.accuracy_tracker]

  def compute_retrieval_loss(self, data, training: bool):
    """Per-replica (loss [], logits [B_local, B_global], labels [B_local])."""
    data, _, _ = keras.utils.unpack_x_y_sample_weight(data)
    emb = self(data, training=training)
    doc_ids = data.get("doc_id") if self.mask_accidental_hits else None
    return losses.in_batch_softmax_loss(emb["query"], emb["doc"], doc_ids, self.temperature)

  def _update_metrics(self, loss, logits, labels):
    self.loss_tracker.update_state(loss)
    self.accuracy_tracker.update_state(losses.in_batch_accuracy(logits, labels))
    return {m.name: m.result() for m in self.metrics}

  def train_step(self, data):
    with tf.GradientTape() as tape:
      loss, logits, labels = self.compute_retrieval_loss(data, training=True)
      scaled = self.optimizer.scale_loss(loss / _num_replicas())
    _apply_gradients(self, scaled, tape)
    return self._update_metrics(loss, logits, labels)

  def test_step(self, data):
    loss, logits, labels = self.compute_retrieval_loss(data, training=False)
    return self._update_metrics(loss, logits, labels)

  def get_config(self):
    config = {"query_tower": keras.saving.serialize_keras_object(self.query_tower),
              "doc_tower": None if self.shared_towers
              else keras.saving.serialize_keras_object(self.doc_tower),
              "temperature": self.temperature,
              "mask_accidental_hits": self.mask_accidental_hits,
              "name": self.name}
    return config

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    config["query_tower"] = keras.saving.deserialize_keras_object(config["query_tower"])
    if config.get("doc_tower") is not None:
      config["doc_tower"] = keras.saving.deserialize_keras_object(config["doc_tower"])
    return cls(**config)


@keras.saving.register_keras_serializable(package="twotower")
class MlmModel(keras.Model):
  """BERT masked-LM pre-training of one `TransformerBackbone`.

  Batches: {"token_ids", "padding_mask"} int32 [B, L]; "mask_positions", "mask_ids" int32
  [B, P]; "mask_weights" float32 [B, P] (tokenizer.Tokenizer.mask_for_mlm).
  """

  def __init__(self, backbone: TransformerBackbone, **kwargs):
    super().__init__(**kwargs)
    self.backbone = backbone
    self.mlm_head = keras_hub.layers.MaskedLMHead(
        token_embedding=backbone.token_embedding, intermediate_activation="gelu",
        dtype=backbone.dtype_policy, name="mlm_head")
    self.loss_tracker = keras.metrics.Mean(name="loss")
    self.accuracy_tracker = keras.metrics.Mean(name="mlm_accuracy")

  def call(self, inputs, training=None):
    states = self.backbone(inputs, training=training)
    return self.mlm_head(states, mask_positions=inputs["mask_positions"])

  def build_from_lengths(self, length: int, max_predictions: int) -> None:
    self(self._dummy(length, max_predictions))

  @staticmethod
  def _dummy(length, max_predictions):
    return {"token_ids": tf.zeros((1, length), tf.int32),
            "padding_mask": tf.ones((1, length), tf.int32),
            "mask_positions": tf.zeros((1, max_predictions), tf.int32)}

  @property
  def metrics(self):
    return [self.loss_tracker, self.accuracy_tracker]

  def _loss(self, data, training):
    data, _, _ = keras.utils.unpack_x_y_sample_weight(data)
    logits = self(data, training=training)
    return losses.masked_lm_loss(logits, data["mask_ids"], data["mask_weights"])

  def train_step(self, data):
    with tf.GradientTape() as tape:
      loss, accuracy = self._loss(data, training=True)
      scaled = self.optimizer.scale_loss(loss / _num_replicas())
    _apply_gradients(self, scaled, tape)
    self.loss_tracker.update_state(loss)
    self.accuracy_tracker.update_state(accuracy)
    return {m.name: m.result() for m in self.metrics}

  def test_step(self, data):
    loss, accuracy = self._loss(data, training=False)
    self.loss_tracker.update_state(loss)
    self.accuracy_tracker.update_state(accuracy)
    return {m.name: m.result() for m in self.metrics}

  def get_config(self):
    return {"backbone": keras.saving.serialize_keras_object(self.backbone), "name": self.name}

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
    return cls(**config)


def build_two_tower(model_config, vocab_size: int, temperature: float = 1.0) -> TwoTowerModel:
  """Towers from a ModelConfig, built; both accept up to max(query_len, doc_len) tokens so that
  an MLM backbone (trained at doc_len) fits either."""
  from twotower.model.encoders import build_tower
  c = model_config
  max_length = max(c.query_len, c.doc_len)
  query_tower = build_tower(c, vocab_size, max_length, name="query_tower")
  doc_tower = None if c.shared_towers else build_tower(c, vocab_size, max_length, "doc_tower")
  model = TwoTowerModel(query_tower, doc_tower, temperature=temperature, name="two_tower")
  model.build_from_lengths(c.query_len, c.doc_len)
  return model
