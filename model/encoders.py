"""The towers: a BERT-style Transformer with a linear layer on [CLS] (the paper's towers) and
the BoW-MLP baseline. Both map `{"token_ids", "padding_mask"}` int32 [batch, length] to an
embedding float32 [batch, d].

Transformer blocks are KerasHub's `TransformerEncoder` (post-LayerNorm, GELU, as BERT),
randomly initialised; nothing is downloaded. Blocks use Glorot initialisation (KerasHub's
default) rather than BERT's N(0, 0.02): with the smaller init the [CLS] state of a freshly
initialised small tower barely depends on its input (embeddings of different inputs differ by
~1e-4) and the in-batch softmax sat at log(B) for hundreds of steps. Embeddings and the
[CLS] projection keep N(0, 0.02), so that initial logits are O(1) (a Glorot projection
starts at loss 2x log(B)). Measured on synthetic ICT-like pairs, L2/H128, batch 32: in-batch
accuracy 0.50 after 100 steps, against 0.014 (chance 0.03) with N(0, 0.02) everywhere. The padding mask is passed to every block
explicitly (as KerasHub's BertBackbone does), so padded positions never receive attention:
`tests/test_model_encoders.py` checks that changing the ids under padding leaves the
embedding unchanged.
"""

from __future__ import annotations

import keras
import keras_hub
from keras import ops


def _init(seed_stddev: float = 0.02):
  return keras.initializers.TruncatedNormal(stddev=seed_stddev)


def attach_blocks(layer: keras.layers.Layer, prefix: str, count: int, intermediate_dim: int,
                  num_heads: int, dropout: float) -> list:
  """`count` BERT-style blocks (KerasHub `TransformerEncoder`: post-LayerNorm, GELU, Glorot)
  in `layer`'s dtype policy, named and attached as `<prefix>_<i>`.

  tf.train.Checkpoint follows attributes, not Keras-tracked lists: without one attribute per
  block, a checkpoint of the model (fine-tuning's --init, a resumed run) would hold the
  embeddings and the projection but none of the blocks.
  """
  blocks = [keras_hub.layers.TransformerEncoder(
      intermediate_dim=intermediate_dim, num_heads=num_heads, dropout=dropout,
      activation="gelu", layer_norm_epsilon=1e-12, kernel_initializer="glorot_uniform",
      dtype=layer.dtype_policy, name=f"{prefix}_{i}") for i in range(count)]
  for i, block in enumerate(blocks):
    setattr(layer, f"{prefix}_{i}", block)
  return blocks


@keras.saving.register_keras_serializable(package="twotower")
class TransformerBackbone(keras.layers.Layer):
  """Token + position embeddings, LayerNorm, dropout, then L Transformer blocks.

  Call: {"token_ids", "padding_mask"} int [batch, length] -> float [batch, length, H].
  This is the part that masked-LM pre-training trains and that both towers copy after MLM.
  """

  def __init__(self, vocab_size: int, max_length: int, num_layers: int, hidden_dim: int,
               num_heads: int, intermediate_dim: int, dropout: float = 0.1, **kwargs):
    super().__init__(**kwargs)
    self.vocab_size, self.max_length = int(vocab_size), int(max_length)
    self.num_layers, self.hidden_dim = int(num_layers), int(hidden_dim)
    self.num_heads, self.intermediate_dim = int(num_heads), int(intermediate_dim)
    self.dropout = float(dropout)
    # Layers.
    self.token_embedding = keras_hub.layers.ReversibleEmbedding(
        self.vocab_size, self.hidden_dim, embeddings_initializer=_init(), dtype=self.dtype_policy,
        name="token_embedding")
    self.position_embedding = keras_hub.layers.PositionEmbedding(
        self.max_length, initializer=_init(), dtype=self.dtype_policy, name="position_embedding")
    self.embeddings_norm = keras.layers.LayerNormalization(
        epsilon=1e-12, dtype=self.dtype_policy, name="embeddings_layer_norm")
    self.embeddings_dropout = keras.layers.Dropout(self.dropout, name="embeddings_dropout")
    self.blocks = attach_blocks(self, "transformer_layer", self.num_layers,
                                self.intermediate_dim, self.num_heads, self.dropout)

  def build(self, input_shape):
    length = input_shape["token_ids"][-1]
    if length is not None and length > self.max_length:
      raise ValueError(f"token_ids length {length} exceeds max_length {self.max_length}")
    shape = (input_shape["token_ids"][0], length)
    self.token_embedding.build(shape)
    self.position_embedding.build(shape + (self.hidden_dim,))
    self.embeddings_norm.build(shape + (self.hidden_dim,))
    for block in self.blocks:
      block.build(shape + (self.hidden_dim,))
    self.built = True

  def call(self, inputs, training=None):
    return self.hidden_states(inputs, training=training)[-1]

  def hidden_states(self, inputs, training=None) -> list:
    """Every layer's token states, float [batch, length, H] each: index 0 the embeddings'
    output, index k the output of block k (1-based), the last one what `call` returns.

    The order of Hugging Face's `output_hidden_states`, which the Condenser head
    (model/condenser.py) indexes as the authors' code does (`hidden_states[skip_from]`).
    The same layers in the same order as `call`: no variable added or renamed.
    """
    token_ids = inputs["token_ids"]
    padding_mask = ops.cast(inputs["padding_mask"], "bool")
    x = self.token_embedding(token_ids)
    x = x + self.position_embedding(x)
    x = self.embeddings_dropout(self.embeddings_norm(x), training=training)
    states = [x]
    for block in self.blocks:
      x = block(x, padding_mask=padding_mask, training=training)
      states.append(x)
    return states

  def get_config(self):
    return {**super().get_config(), "vocab_size": self.vocab_size,
            "max_length": self.max_length, "num_layers": self.num_layers,
            "hidden_dim": self.hidden_dim, "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim, "dropout": self.dropout}


@keras.saving.register_keras_serializable(package="twotower")
class TransformerTower(keras.layers.Layer):
  """The paper's tower: backbone, the [CLS] state, a linear layer to d.

  Call: {"token_ids", "padding_mask"} [batch, length] -> float32 [batch, embedding_dim].
  """

  def __init__(self, vocab_size: int, max_length: int, num_layers: int, hidden_dim: int,
               num_heads: int, intermediate_dim: int, embedding_dim: int, dropout: float = 0.1,
               **kwargs):
    super().__init__(**kwargs)
    self.embedding_dim = int(embedding_dim)
    self.backbone = TransformerBackbone(
        vocab_size, max_length, num_layers, hidden_dim, num_heads, intermediate_dim, dropout,
        dtype=self.dtype_policy, name="backbone")
    self.projection = keras.layers.Dense(self.embedding_dim, kernel_initializer=_init(),
                                         dtype=self.dtype_policy, name="projection")

  def build(self, input_shape):
    self.backbone.build(input_shape)
    self.projection.build((input_shape["token_ids"][0], self.backbone.hidden_dim))
    self.built = True

  def call(self, inputs, training=None):
    return self.project(self.backbone(inputs, training=training))

  def project(self, last_states):
    """The embedding float32 [batch, embedding_dim] of the last layer's token states
    [batch, length, H]: the linear layer on [CLS]."""
    return ops.cast(self.projection(last_states[:, 0, :]), "float32")

  def embed_with_states(self, inputs, training=None):
    """(embedding, every layer's token states) in one forward pass: what `call` returns,
    and `TransformerBackbone.hidden_states` for a pre-training head that reads the layers
    (the Condenser head)."""
    states = self.backbone.hidden_states(inputs, training=training)
    return self.project(states[-1]), states

  def get_config(self):
    b = self.backbone
    return {**super().get_config(), "vocab_size": b.vocab_size, "max_length": b.max_length,
            "num_layers": b.num_layers, "hidden_dim": b.hidden_dim, "num_heads": b.num_heads,
            "intermediate_dim": b.intermediate_dim, "embedding_dim": self.embedding_dim,
            "dropout": b.dropout}


@keras.saving.register_keras_serializable(package="twotower")
class BowMlpTower(keras.layers.Layer):
  """Baseline tower: unigram embeddings, masked average pooling, 2-layer tanh MLP to d.

  Call: {"token_ids", "padding_mask"} [batch, length] -> float32 [batch, embedding_dim].
  [CLS]/[SEP] are ordinary unigrams here; padding never enters the average. `layer_norm`
  normalizes the average before the MLP (`ModelConfig.bow_layer_norm`): the average of a
  hundred embeddings of scale 0.02 is about 0.002 a dimension, so without it the scores start
  near 0 and the softmax near uniform.
  """

  def __init__(self, vocab_size: int, hidden_dim: int, embedding_dim: int, dropout: float = 0.1,
               layer_norm: bool = False, **kwargs):
    super().__init__(**kwargs)
    self.vocab_size, self.hidden_dim = int(vocab_size), int(hidden_dim)
    self.embedding_dim, self.dropout = int(embedding_dim), float(dropout)
    self.token_embedding = keras.layers.Embedding(
        self.vocab_size, self.hidden_dim, embeddings_initializer=_init(),
        dtype=self.dtype_policy, name="token_embedding")
    self.pooled_norm = keras.layers.LayerNormalization(
        epsilon=1e-12, dtype=self.dtype_policy, name="pooled_layer_norm") if layer_norm else None
    self.hidden = keras.layers.Dense(self.hidden_dim, activation="tanh",
                                     dtype=self.dtype_policy, name="hidden")
    self.dropout_layer = keras.layers.Dropout(self.dropout, name="dropout")
    self.projection = keras.layers.Dense(self.embedding_dim, activation="tanh",
                                         dtype=self.dtype_policy, name="projection")

  def build(self, input_shape):
    batch, length = input_shape["token_ids"]
    self.token_embedding.build((batch, length))
    if self.pooled_norm is not None:
      self.pooled_norm.build((batch, self.hidden_dim))
    self.hidden.build((batch, self.hidden_dim))
    self.projection.build((batch, self.hidden_dim))
    self.built = True

  def call(self, inputs, training=None):
    x = self.token_embedding(inputs["token_ids"])
    mask = ops.cast(inputs["padding_mask"], x.dtype)[..., None]
    pooled = ops.sum(x * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1.0)
    if self.pooled_norm is not None:
      pooled = self.pooled_norm(pooled)
    h = self.dropout_layer(self.hidden(pooled), training=training)
    return ops.cast(self.projection(h), "float32")

  def get_config(self):
    return {**super().get_config(), "vocab_size": self.vocab_size,
            "hidden_dim": self.hidden_dim, "embedding_dim": self.embedding_dim,
            "dropout": self.dropout, "layer_norm": self.pooled_norm is not None}


def build_tower(model_config, vocab_size: int, max_length: int, name: str) -> keras.layers.Layer:
  """One tower from a `ModelConfig`; `max_length` is the longest input it will see."""
  c = model_config
  if c.encoder == "bow_mlp":
    return BowMlpTower(vocab_size, c.hidden_dim, c.embedding_dim, c.dropout,
                       layer_norm=c.bow_layer_norm, name=name)
  return TransformerTower(vocab_size, max_length, c.num_layers, c.hidden_dim, c.num_heads,
                          c.intermediate_dim, c.embedding_dim, c.dropout, name=name)
