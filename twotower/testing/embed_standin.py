"""A small stand-in SavedModel with the export's signatures, for tests and benchmarks of the
embedding job before (or without) a trained export.

It is a real TensorFlow model, shaped like the paper's BoW-MLP baseline: lower-cased
whitespace tokens are hashed (`tf.strings.to_hash_bucket_fast`) into an embedding table,
averaged, and passed through a 2-layer tanh MLP, then L2-normalised. Its signatures are the
contract's (twotower.core.contracts):

  query_encoder(query: string[None]) -> {"embedding": float32[None, d]}
  doc_encoder(title: string[None], text: string[None]) -> {"embedding": float32[None, d]}

The document side reads `title + " " + text`. Weights are seeded, so two builds with the same
arguments give the same model. No tensorflow-text ops: it loads without `import tensorflow_text`.
"""

from __future__ import annotations

import dataclasses

from twotower.core import contracts


@dataclasses.dataclass(frozen=True)
class StandinConfig:
  dim: int = 64          # output embedding dimension d
  buckets: int = 50_000  # hash buckets of the token embedding table
  hidden: int = 256      # width of the two tanh layers
  seed: int = 0


def build_standin_savedmodel(path: str, config: StandinConfig = StandinConfig()) -> str:
  """Writes the stand-in SavedModel to `path` and returns `path`."""
  import tensorflow as tf

  rng = tf.random.Generator.from_seed(config.seed)

  class _BowMlp(tf.Module):

    def __init__(self):
      super().__init__(name="standin_bow_mlp")
      self.table = tf.Variable(rng.normal([config.buckets, config.hidden]) * 0.1, name="table")
      self.w1 = tf.Variable(rng.normal([config.hidden, config.hidden]) / config.hidden**0.5,
                            name="w1")
      self.w2 = tf.Variable(rng.normal([config.hidden, config.dim]) / config.hidden**0.5,
                            name="w2")

    def _encode(self, text: tf.Tensor) -> tf.Tensor:
      # text: string[batch] -> float32[batch, dim]
      tokens = tf.strings.split(tf.strings.lower(text))            # ragged [batch, (tokens)]
      ids = tf.strings.to_hash_bucket_fast(tokens, config.buckets)  # ragged int64
      vectors = tf.gather(self.table, ids)                          # ragged [batch, (t), hidden]
      total = tf.reduce_sum(vectors, axis=1)                        # [batch, hidden]
      count = tf.cast(tf.maximum(ids.row_lengths(), 1), tf.float32)[:, None]
      hidden = tf.tanh(tf.matmul(tf.tanh(total / count), self.w1))
      return tf.math.l2_normalize(tf.matmul(hidden, self.w2), axis=-1)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="query")])
    def query_encoder(self, query):
      return {contracts.EMBEDDING_OUTPUT: self._encode(query)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="title"),
                                  tf.TensorSpec([None], tf.string, name="text")])
    def doc_encoder(self, title, text):
      return {contracts.EMBEDDING_OUTPUT: self._encode(tf.strings.join([title, text], " "))}

  module = _BowMlp()
  tf.saved_model.save(module, path, signatures={
      contracts.QUERY_SIGNATURE: module.query_encoder,
      contracts.DOC_SIGNATURE: module.doc_encoder,
  })
  return path
