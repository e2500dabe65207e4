"""Condenser and coCondenser pre-training: a head that must do masked LM from the last
layer's [CLS] state, beside the in-batch softmax, dropped at export.

Condenser (Gao & Callan, EMNLP 2021, "Condenser: a Pre-training Architecture for Dense
Retrieval") puts a small head of Transformer blocks on the backbone. The head reads the
LAST layer's [CLS] state together with a MIDDLE layer's token states (layer 6 of 12) and
predicts masked word pieces. The middle layer's tokens have not seen the upper layers, so
what the head needs from the upper layers must come through [CLS]: pre-training pushes the
passage into [CLS]. coCondenser (Gao & Callan, ACL 2022, "Unsupervised Corpus Aware Language
Model Pre-training for Dense Passage Retrieval") adds a contrastive loss between two random
spans of one document, in-batch, computed in the same forward pass as the masked LM.

What we follow is the authors' code, luyug/Condenser `modeling.py`:

  CondenserForPretraining.forward
    lm_out = self.lm(**model_input, labels=labels, output_hidden_states=True)
    cls_hiddens = lm_out.hidden_states[-1][:, :1]
    skip_hiddens = lm_out.hidden_states[self.model_args.skip_from]
    hiddens = torch.cat([cls_hiddens, skip_hiddens[:, 1:]], dim=1)
    for layer in self.c_head: hiddens = layer(hiddens, attention_mask)[0]
    loss = self.mlm_loss(hiddens, labels)          # pred_scores = self.lm.cls(hiddens)
    if self.model_args.late_mlm: loss += lm_out.loss
  CoCondenserForPretraining.forward: the same, then `loss + co_loss`, where
    co_loss = compute_contrastive_loss(cls_hiddens) (in-batch cross entropy over the spans)

and its README's command (`--n_head_layers 2 --skip_from 6 --late_mlm`). In twotower:

  * the head: `condenser_head_layers` KerasHub TransformerEncoder blocks of the backbone's
    shape (the authors' `BertLayer(bert.config)`), on `concat(last[:, :1], skip[:, 1:])`
    with the input's padding mask; `hidden_states` are indexed as Hugging Face's (0 = the
    embeddings' output, k = block k), so `condenser_skip_layer` is `skip_from`.
  * the MLM prediction head: one KerasHub `MaskedLMHead` per tower, tied to its token
    embeddings (as `MlmModel`), used by the head's MLM and the backbone's last-layer MLM
    alike (the authors' `self.lm.cls` serves both).
  * the loss (`CondenserTwoTowerModel.compute_losses`):
      loss = in-batch softmax(phi(masked q), psi(masked d))
             + condenser_mlm_weight * (head MLM + backbone MLM)
    Both MLM terms are the mean cross entropy over the masked pieces of the queries and the
    documents together (the authors' one `CrossEntropyLoss` over both spans of the batch);
    the backbone MLM is the authors' `late_mlm`, on in their README and always on here.
  * coCondenser's span pairs are the `crop` pair task (two independent random spans of one
    passage, data.tasks=crop), and its contrastive loss is the model's own in-batch
    softmax (`TwoTowerModel.retrieval_loss`), on the masked inputs as the authors' (their
    spans are masked by `CoCondenserCollator` before the one forward pass).

Departures from the authors' code, each for a reason of this toolkit:
  * the contrastive loss is the paper's in-batch softmax from queries to documents, on the
    [CLS] projection, with `trainer.temperature` and accidental-hit masking; coCondenser's
    is symmetric over the 2B spans (each span against the 2B - 1 others), on the raw [CLS]
    state, without temperature. So the head's MLM reaches the backbone (through [CLS] and
    the skip layer) but not the projection, which only the contrastive loss trains.
  * with separate towers (the paper's default) each tower has its own head and its own MLM
    prediction head: each tower is a Condenser. With `model.shared_towers` there is one.
  * word-piece masking (`Tokenizer.mask_for_mlm`, BERT's 80/10/10), not whole-word masking
    (the authors' collator masks whole words).
  * `condenser_mlm_weight` scales both MLM terms (the authors add them with weight 1, the
    default). The head's blocks start with KerasHub's Glorot initialisation as the
    backbone's (encoders.py says why), not BERT's N(0, 0.02).
  * replicas: each replica's MLM is a mean over its own masked pieces and the replicas'
    losses are averaged, as the contrastive loss (the authors' is a mean over the pieces of
    the global batch).
  * not with the gradient cache nor MoCo (config.TrainingConfig refuses the combinations).

Logs (history.csv): `loss` is the whole objective above, so it does not compare with the
`loss` of a run without the head; `contrastive_loss` and `in_batch_accuracy` are the
in-batch softmax's (on masked inputs), `head_mlm_loss`, `backbone_mlm_loss` and
`head_mlm_accuracy` the MLM terms; held-out batches are masked the same way (`val_*`).

At export (export.py) the model is `towers_only()`: a plain `TwoTowerModel` on the same
towers, so the SavedModel and the .keras file hold the towers and no head. Checkpoints hold
the heads (`query_head`, `doc_head`: one attribute per block, as TransformerBackbone's), so
a killed run resumes with them; fine-tuning's `--init` restores `query_tower` / `doc_tower`
only (train.init_towers).
"""

from __future__ import annotations

import keras
import keras_hub
import tensorflow as tf
from keras import ops

from twotower.model import losses
from twotower.model.encoders import TransformerTower, attach_blocks
from twotower.model.two_tower import TwoTowerModel, apply_gradients

#: The two MLM terms, in the order of the logs.
MLM_TERMS = ("head", "backbone")


@keras.saving.register_keras_serializable(package="twotower")
class CondenserHead(keras.layers.Layer):
  """The Condenser head of one tower: `num_layers` Transformer blocks on the last layer's
  [CLS] and the skip layer's tokens, and the tower's MLM prediction head (tied embeddings).

  Call: (hidden_states, padding_mask, mask_positions) -> (head logits, backbone logits),
  each float [batch, P, vocab] at `mask_positions` int [batch, P]; `hidden_states` as
  `TransformerBackbone.hidden_states` (num_layers + 1 of [batch, length, H]).
  """

  def __init__(self, backbone, num_layers: int, skip_layer: int, **kwargs):
    super().__init__(**kwargs)
    self.num_layers, self.skip_layer = int(num_layers), int(skip_layer)
    if not 0 <= self.skip_layer <= backbone.num_layers:
      raise ValueError(f"condenser skip layer {skip_layer}: expected 0 .. {backbone.num_layers}")
    self.hidden_dim = backbone.hidden_dim
    # The backbone's blocks' shape (the authors' `BertLayer(bert.config)`).
    self.blocks = attach_blocks(self, "condenser_layer", self.num_layers,
                                backbone.intermediate_dim, backbone.num_heads, backbone.dropout)
    self.mlm_head = keras_hub.layers.MaskedLMHead(
        token_embedding=backbone.token_embedding, intermediate_activation="gelu",
        dtype=self.dtype_policy, name="mlm_head")

  def build(self, states_shape):
    for block in self.blocks:
      block.build(states_shape)
    self.mlm_head.build(states_shape)
    self.built = True

  def head_input(self, hidden_states):
    """The authors' `cat([hidden_states[-1][:, :1], hidden_states[skip_from][:, 1:]])`: the
    skip layer's tokens with the last layer's [CLS] in position 0."""
    return ops.concatenate([hidden_states[-1][:, :1], hidden_states[self.skip_layer][:, 1:]],
                           axis=1)

  def call(self, hidden_states, padding_mask, mask_positions, training=None):
    mask = ops.cast(padding_mask, "bool")
    x = self.head_input(hidden_states)
    for block in self.blocks:
      x = block(x, padding_mask=mask, training=training)
    return (self.mlm_head(x, mask_positions=mask_positions),
            self.mlm_head(hidden_states[-1], mask_positions=mask_positions))

  def get_config(self):
    # Built by CondenserTwoTowerModel from its towers (the tied embedding is the tower's).
    return {**super().get_config(), "num_layers": self.num_layers,
            "skip_layer": self.skip_layer}


@keras.saving.register_keras_serializable(package="twotower")
class CondenserTwoTowerModel(TwoTowerModel):
  """`TwoTowerModel` with a Condenser head on each tower, for pre-training on masked pairs
  (`data.mask_pairs_for_mlm`): the loss is the in-batch softmax of the masked inputs plus
  `mlm_weight` x (head MLM + backbone MLM). Export `towers_only()`.

  Batches: the pair batch of data.py with masked "query" / "doc" token ids, and
  "query_mlm" / "doc_mlm": {"mask_positions", "mask_ids", "mask_weights"} [B, P].
  Call (embedding only, as TwoTowerModel): the same keys -> float32 [rows, d].
  """

  def __init__(self, query_tower, doc_tower=None, head_layers: int = 2, skip_layer: int = 0,
               mlm_weight: float = 1.0, **kwargs):
    super().__init__(query_tower, doc_tower, **kwargs)
    if self.grad_cache_chunk:
      raise ValueError("the Condenser head does not combine with the gradient cache yet")
    for tower in {id(t): t for t in (self.query_tower, self.doc_tower)}.values():
      if not isinstance(tower, TransformerTower):
        raise ValueError(f"the Condenser head needs Transformer towers, not "
                         f"{type(tower).__name__}")
    self.head_layers = int(head_layers)
    if self.head_layers < 1:
      raise ValueError(f"head_layers={head_layers}: a Condenser head needs a block")
    num_layers = self.query_tower.backbone.num_layers
    # 0: the middle layer (Condenser: 6 of 12); for one layer, the embeddings' output.
    self.skip_layer = int(skip_layer) or num_layers // 2
    self.mlm_weight = float(mlm_weight)
    self.query_head = CondenserHead(self.query_tower.backbone, self.head_layers,
                                    self.skip_layer, name="query_head")
    self.doc_head = (self.query_head if self.shared_towers else
                     CondenserHead(self.doc_tower.backbone, self.head_layers, self.skip_layer,
                                   name="doc_head"))
    self.contrastive_tracker = keras.metrics.Mean(name="contrastive_loss")
    self.mlm_trackers = {term: keras.metrics.Mean(name=f"{term}_mlm_loss")
                         for term in MLM_TERMS}
    self.head_accuracy_tracker = keras.metrics.Mean(name="head_mlm_accuracy")

  def _head(self, name: str) -> CondenserHead:
    return self.query_head if name == "query" else self.doc_head

  def build(self, input_shape):
    super().build(input_shape)
    for name in ("query", "doc"):
      head = self._head(name)
      if not head.built:
        tower = self._tower(name)
        head.build((None, tower.backbone.max_length, tower.backbone.hidden_dim))
    self.built = True

  @property
  def metrics(self):
    return [self.loss_tracker, self.accuracy_tracker, self.contrastive_tracker,
            *self.mlm_trackers.values(), self.head_accuracy_tracker]

  def compute_losses(self, data, training: bool) -> dict:
    """This replica's losses of a masked pair batch, one forward pass per tower input:
    {"loss": contrastive + mlm_weight * (head + backbone MLM), "contrastive", "logits",
    "labels", "head_mlm", "backbone_mlm", "head_mlm_accuracy", "backbone_mlm_accuracy"}."""
    emb, logits = {}, {term: [] for term in MLM_TERMS}
    targets = {"mask_ids": [], "mask_weights": []}
    for name in ("query", "doc"):  # a fixed order: dropout draws as TwoTowerModel.call's
      inputs, mlm = data[name], data[f"{name}_mlm"]
      emb[name], states = self._tower(name).embed_with_states(inputs, training=training)
      head_logits, backbone_logits = self._head(name)(
          states, inputs["padding_mask"], mlm["mask_positions"], training=training)
      logits["head"].append(head_logits)
      logits["backbone"].append(backbone_logits)
      for key in targets:
        targets[key].append(mlm[key])
    contrastive, retrieval_logits, labels = self.retrieval_loss(data, emb)
    # Queries' and documents' predictions side by side [B, Pq + Pd, V]: one mean over the
    # masked pieces of both, as the authors' one cross entropy over both spans.
    ids, weights = (tf.concat(targets[key], axis=1) for key in ("mask_ids", "mask_weights"))
    out = {"contrastive": contrastive, "logits": retrieval_logits, "labels": labels}
    for term in MLM_TERMS:
      out[f"{term}_mlm"], out[f"{term}_mlm_accuracy"] = losses.masked_lm_loss(
          tf.concat(logits[term], axis=1), ids, weights)
    out["loss"] = contrastive + self.mlm_weight * (out["head_mlm"] + out["backbone_mlm"])
    return out

  def _update_condenser_metrics(self, out):
    self.contrastive_tracker.update_state(out["contrastive"])
    for term in MLM_TERMS:
      self.mlm_trackers[term].update_state(out[f"{term}_mlm"])
    self.head_accuracy_tracker.update_state(out["head_mlm_accuracy"])
    return self._update_metrics(out["loss"], out["logits"], out["labels"])

  def direct_gradients(self, data):
    """(the losses, gradient of each trainable variable: towers and heads), one tape."""
    data, _, _ = keras.utils.unpack_x_y_sample_weight(data)
    with tf.GradientTape() as tape:
      out = self.compute_losses(data, training=True)
      objective = self._objective(out["loss"])
    return out, tape.gradient(objective, self.trainable_variables)

  def train_step(self, data):
    out, grads = self.direct_gradients(data)
    apply_gradients(self, grads)
    return self._update_condenser_metrics(out)

  def test_step(self, data):
    data, _, _ = keras.utils.unpack_x_y_sample_weight(data)
    return self._update_condenser_metrics(self.compute_losses(data, training=False))

  def get_config(self):
    return {**super().get_config(), "head_layers": self.head_layers,
            "skip_layer": self.skip_layer, "mlm_weight": self.mlm_weight}


def build_condenser(cfg, vocab_size: int) -> CondenserTwoTowerModel:
  """The towers of `cfg.model` (as two_tower.build_two_tower) with Condenser heads of
  `cfg.objective`, built."""
  from twotower.model.encoders import build_tower  # pylint: disable=import-outside-toplevel
  m, o = cfg.model, cfg.objective
  max_length = max(m.query_len, m.doc_len)
  query_tower = build_tower(m, vocab_size, max_length, name="query_tower")
  doc_tower = None if m.shared_towers else build_tower(m, vocab_size, max_length, "doc_tower")
  model = CondenserTwoTowerModel(
      query_tower, doc_tower, head_layers=o.condenser_head_layers,
      skip_layer=o.condenser_skip_layer, mlm_weight=o.condenser_mlm_weight,
      temperature=cfg.trainer.temperature, grad_cache_chunk=cfg.trainer.grad_cache_chunk,
      name="two_tower")
  model.build_from_lengths(m.query_len, m.doc_len)
  return model


def pair_masker(cfg, tokenizer):
  """mask(ds, seed) -> ds: `data.mask_pairs_for_mlm` at `objective.condenser_mlm_rate`, with
  as many predicted positions per row as never cap the rate (config.mlm_predictions) at
  `model.query_len` and `model.doc_len`. pretrain.py masks training batches with
  `trainer.seed` and held-out ones with seed + 1, before they are cached (the same masks at
  every evaluation)."""
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  from twotower.model import data  # pylint: disable=import-outside-toplevel
  m, rate = cfg.model, cfg.objective.condenser_mlm_rate
  predictions = (config_lib.mlm_predictions(m.query_len, rate),
                 config_lib.mlm_predictions(m.doc_len, rate))

  def mask(ds, seed: int):
    return data.mask_pairs_for_mlm(ds, tokenizer, rate, *predictions, seed=seed)
  return mask
