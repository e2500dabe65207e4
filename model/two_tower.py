"""`TwoTowerModel`: score(q, d) = <phi(q), psi(d)>, trained with the in-batch softmax.

One model on both Keras backends. On TensorFlow it has its own `train_step` / `test_step`
(tf_steps.py), so it runs under `fit` on one device, under MirroredStrategy and on TPU: each
replica embeds its share of the batch, gathers the documents of all replicas as negatives
(losses.py), and divides its loss by the number of replicas because Keras sums gradients
across replicas. On JAX it has no step of its own: Keras's JAX `train_step` differentiates
`compute_loss` (the same loss in `keras.ops`), and `keras.distribution.DataParallel` makes
the arrays the global batch (model/jax_train.py).

Batches are dicts (data.py):
  {"query": {"token_ids", "padding_mask"}: int32 [B, query_len],
   "doc":   {"token_ids", "padding_mask"}: int32 [B, doc_len],
   "doc_id": int64 [B, 2] (doc_page_id, doc_passage_id) for accidental-hit masking,
   optionally, with k hard negatives per pair (`pair_dataset(hard_negatives=k)`):
   "neg_doc": {"token_ids", "padding_mask"}: int32 [B * k, doc_len],
   "neg_doc_id": int64 [B * k] candidate ids, -1 for padding}

`grad_cache_chunk` N > 0 trains with the gradient cache (grad_cache.py): the towers embed
the per-replica batch N pairs at a time, so memory is bounded by N pairs whatever the batch,
and the gradients are the full-batch ones. 0 embeds the whole batch under one tape.

`moco_queue` N > 0 is MoCo as Contriever pre-trains with it (one shared tower): the documents
are embedded by a momentum copy of the tower (no gradient; theta_k <- m theta_k + (1 - m)
theta_q before each step's documents, MoCo's order), and every query is scored against the
global batch's documents and the last N documents' embeddings, a queue that every replica
holds alike and that the global batch is pushed into after each step. Contriever's MoCo scores
a query against its own key and the queue only; we keep the in-batch documents as negatives
too, so that the loss is ours plus the queue. Held-out evaluation (`test_step`) is the plain
in-batch softmax of the online tower, comparable with every other row. The momentum tower and
the queue are model variables, so a checkpoint holds them and a resumed run equals one run
through (tests/test_moco.py).

`MlmModel` is the masked-LM baseline: one `TransformerBackbone` plus KerasHub's
`MaskedLMHead` with tied embeddings; after MLM both towers start from its backbone.
"""

from __future__ import annotations

import keras
import keras_hub
import numpy as np
from keras import ops

from twotower.model import losses
from twotower.model.encoders import TransformerBackbone

#: Batch keys that go through a tower, and which one: the hard negatives are documents.
TOWER_INPUTS = {"query": "query", "doc": "doc", "neg_doc": "doc"}


def _backend_steps(kind: str) -> tuple:
  """The bases before `keras.Model` that give a model its train / test steps: TensorFlow's
  (tf_steps.py) under TensorFlow; none under JAX, where Keras's own steps differentiate
  `compute_loss`. Read once, when this module is imported: a Keras backend is per process."""
  if keras.backend.backend() != "tensorflow":
    return ()
  from twotower.model import tf_steps  # pylint: disable=import-outside-toplevel
  return ({"two_tower": tf_steps.TwoTowerSteps, "mlm": tf_steps.MlmSteps}[kind],)


def apply_gradients(model: keras.Model, grads) -> None:
  """`optimizer.apply` with dense gradients (TensorFlow; tf_steps.apply_gradients)."""
  from twotower.model import tf_steps  # pylint: disable=import-outside-toplevel
  tf_steps.apply_gradients(model, grads)


@keras.saving.register_keras_serializable(package="twotower")
class TwoTowerModel(*_backend_steps("two_tower"), keras.Model):
  """Query tower phi and document tower psi (the same layer when towers are shared).

  Call: a batch dict with any of "query", "doc", "neg_doc" -> the same keys, each
  float32 [rows, d].
  """

  def __init__(self, query_tower: keras.layers.Layer, doc_tower: keras.layers.Layer | None = None,
               temperature: float = 1.0, mask_accidental_hits: bool = True,
               grad_cache_chunk: int = 0, moco_queue: int = 0, moco_momentum: float = 0.999,
               **kwargs):
    super().__init__(**kwargs)
    self.query_tower = query_tower
    self.doc_tower = query_tower if doc_tower is None else doc_tower
    self.shared_towers = self.doc_tower is self.query_tower
    self.temperature = float(temperature)
    self.mask_accidental_hits = bool(mask_accidental_hits)
    self.grad_cache_chunk = int(grad_cache_chunk)
    if self.grad_cache_chunk < 0:
      raise ValueError(f"grad_cache_chunk={grad_cache_chunk}: expected 0 (off) or a chunk size")
    self.moco_queue, self.moco_momentum = int(moco_queue), float(moco_momentum)
    self.momentum_tower = None
    if self.moco_queue:
      if not self.shared_towers or self.grad_cache_chunk:
        raise ValueError("moco_queue needs one shared tower and no gradient cache")
      # A copy of the tower's architecture; its weights are set from the tower's
      # (`sync_momentum_tower`) once the tower is built and, with --init, restored.
      config = {**query_tower.get_config(), "name": "momentum_tower"}
      self.momentum_tower = type(query_tower).from_config(config)
    self.loss_tracker = keras.metrics.Mean(name="loss")
    self.accuracy_tracker = keras.metrics.Mean(name="in_batch_accuracy")

  def _tower(self, name: str) -> keras.layers.Layer:
    return self.query_tower if TOWER_INPUTS[name] == "query" else self.doc_tower

  def call(self, inputs, training=None):
    # Fixed order (query, doc, neg_doc): the gradient cache's re-forward must consume the
    # dropout RNG states as its first pass did.
    return {name: self._tower(name)(inputs[name], training=training)
            for name in TOWER_INPUTS if name in inputs}

  def build(self, input_shape):
    if not self.query_tower.built:
      self.query_tower.build(input_shape["query"])
    if not self.doc_tower.built:
      self.doc_tower.build(input_shape["doc"])
    if self.momentum_tower is not None and not self.momentum_tower.built:
      self.momentum_tower.build(input_shape["doc"])
      self.momentum_tower.trainable = False  # after build: it freezes the variables it has
      dim, ids = self.doc_tower.embedding_dim, 2  # doc_id: (doc_page_id, doc_passage_id)
      # Attributes, so that tf.train.Checkpoint saves them (a resumed run keeps its queue).
      self.queue = self.add_weight(shape=(self.moco_queue, dim), initializer="zeros",
                                   trainable=False, dtype="float32", name="moco_queue")
      self.queue_ids = self.add_weight(shape=(self.moco_queue, ids),
                                       initializer=keras.initializers.Constant(-1),
                                       trainable=False, dtype="int64", name="moco_queue_ids")
      self.queue_next = self.add_weight(shape=(), initializer="zeros", trainable=False,
                                        dtype="int64", name="moco_queue_next")
      self.sync_momentum_tower()
    self.built = True

  # -- MoCo (moco_queue > 0). ---------------------------------------------------------------

  def _momentum_pairs(self):
    """[(momentum weight, tower weight)], paired by path under the tower."""
    def under(tower, weight):  # the path below the tower: "backbone/.../embeddings"
      return weight.path.split(f"{tower.name}/", 1)[1]
    online = {under(self.query_tower, w): w for w in self.query_tower.weights}
    return [(w, online[under(self.momentum_tower, w)]) for w in self.momentum_tower.weights]

  def sync_momentum_tower(self) -> None:
    """theta_k <- theta_q: at build, and after --init restored the tower."""
    for key, query in self._momentum_pairs():
      key.assign(query)

  def momentum_update(self) -> None:
    """theta_k <- m * theta_k + (1 - m) * theta_q (MoCo eq. 2)."""
    m = self.moco_momentum
    for key, query in self._momentum_pairs():
      key.assign(m * key + (1.0 - m) * ops.cast(query, key.dtype))

  def moco_loss(self, data, query_emb, keys):
    """(loss, logits [B_local, B_global + N], labels): the in-batch softmax against the
    momentum encoder's documents, with the queue's documents as further columns."""
    doc_ids = data.get("doc_id") if self.mask_accidental_hits else None
    logits, labels = losses.in_batch_logits(query_emb, keys, doc_ids, self.temperature)
    queued = losses.queue_logits(query_emb, self.queue.value, self.queue_ids.value,
                                 doc_ids, self.temperature)
    return losses.softmax_loss(ops.concatenate([logits, queued], axis=1), labels)

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

  def retrieval_loss(self, data, emb):
    """Per-replica (loss [], logits [B_local, B_global * (1 + k)], labels [B_local]) of the
    embeddings `emb` ({"query", "doc"[, "neg_doc"]} float32) of batch `data`."""
    doc_ids = data.get("doc_id") if self.mask_accidental_hits else None
    return losses.in_batch_softmax_loss(emb["query"], emb["doc"], doc_ids, self.temperature,
                                        emb.get("neg_doc"), data.get("neg_doc_id"))

  def compute_retrieval_loss(self, data, training: bool):
    """Per-replica (loss, logits, labels), the whole batch embedded at once."""
    data, _, _ = keras.utils.unpack_x_y_sample_weight(data)
    return self.retrieval_loss(data, self(data, training=training))

  def _update_metrics(self, loss, logits, labels):
    self.loss_tracker.update_state(loss)
    self.accuracy_tracker.update_state(losses.in_batch_accuracy(logits, labels))
    return {m.name: m.result() for m in self.metrics}

  def tower_inputs(self, data) -> dict:
    """The entries of a batch that go through a tower."""
    return {name: data[name] for name in TOWER_INPUTS if name in data}

  def _dims(self, inputs) -> dict[str, int]:
    return {name: self._tower(name).embedding_dim for name in inputs}

  # -- What Keras differentiates on JAX (no train_step of ours there: tf_steps.py is TF's). --

  def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
    """The in-batch softmax of batch `x` embedded as `y_pred` (`self(x)`): Keras's JAX
    `train_step` takes its gradient. Under `keras.distribution.DataParallel` the arrays are
    the global batch, so every query meets every document of it, as under tf.distribute's
    all_gather."""
    del y, sample_weight, training
    return self.retrieval_loss(x, y_pred)[0]

  def compute_metrics(self, x, y, y_pred, sample_weight=None):
    """The loss and in-batch accuracy, as the TensorFlow steps log them (the logits again
    from the embeddings: a [B, B] product beside the towers' cost)."""
    del y, sample_weight
    return self._update_metrics(*self.retrieval_loss(x, y_pred))

  def towers_only(self) -> "TwoTowerModel":
    """A plain `TwoTowerModel` on the same towers (no copy), built: what export writes. A
    model with parts for pre-training only (MoCo's momentum tower and queue, a Condenser
    head: condenser.py) leaves them out; a plain one is itself."""
    if type(self) is TwoTowerModel and not self.moco_queue:
      return self
    model = TwoTowerModel(self.query_tower, None if self.shared_towers else self.doc_tower,
                          temperature=self.temperature,
                          mask_accidental_hits=self.mask_accidental_hits, name="two_tower")
    model.build_from_config(self.get_build_config())
    return model

  def get_config(self):
    config = {"query_tower": keras.saving.serialize_keras_object(self.query_tower),
              "doc_tower": None if self.shared_towers
              else keras.saving.serialize_keras_object(self.doc_tower),
              "temperature": self.temperature,
              "mask_accidental_hits": self.mask_accidental_hits,
              "grad_cache_chunk": self.grad_cache_chunk,
              "name": self.name}
    if self.moco_queue:
      config.update(moco_queue=self.moco_queue, moco_momentum=self.moco_momentum)
    return config

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    config["query_tower"] = keras.saving.deserialize_keras_object(config["query_tower"])
    if config.get("doc_tower") is not None:
      config["doc_tower"] = keras.saving.deserialize_keras_object(config["doc_tower"])
    return cls(**config)


@keras.saving.register_keras_serializable(package="twotower")
class MlmModel(*_backend_steps("mlm"), keras.Model):
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
    return {"token_ids": np.zeros((1, length), np.int32),
            "padding_mask": np.ones((1, length), np.int32),
            "mask_positions": np.zeros((1, max_predictions), np.int32)}

  @property
  def metrics(self):
    return [self.loss_tracker, self.accuracy_tracker]

  def _loss(self, data, training):
    data, _, _ = keras.utils.unpack_x_y_sample_weight(data)
    logits = self(data, training=training)
    return losses.masked_lm_loss(logits, data["mask_ids"], data["mask_weights"])

  def get_config(self):
    return {"backbone": keras.saving.serialize_keras_object(self.backbone), "name": self.name}

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
    return cls(**config)


def build_two_tower(model_config, vocab_size: int, temperature: float = 1.0,
                    grad_cache_chunk: int = 0, moco_queue: int = 0,
                    moco_momentum: float = 0.999) -> TwoTowerModel:
  """Towers from a ModelConfig, built; both accept up to max(query_len, doc_len) tokens so that
  an MLM backbone (trained at doc_len) fits either. `grad_cache_chunk`: TrainerConfig's;
  `moco_queue`, `moco_momentum`: ObjectiveConfig's."""
  from twotower.model.encoders import build_tower
  c = model_config
  max_length = max(c.query_len, c.doc_len)
  query_tower = build_tower(c, vocab_size, max_length, name="query_tower")
  doc_tower = None if c.shared_towers else build_tower(c, vocab_size, max_length, "doc_tower")
  model = TwoTowerModel(query_tower, doc_tower, temperature=temperature,
                        grad_cache_chunk=grad_cache_chunk, moco_queue=moco_queue,
                        moco_momentum=moco_momentum, name="two_tower")
  model.build_from_lengths(c.query_len, c.doc_len)
  return model
