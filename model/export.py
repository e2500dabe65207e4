"""Export: a SavedModel whose signatures take raw strings, and a `.keras` file.

  query_encoder(query: string[None])             -> {"embedding": float32[None, d]}
  doc_encoder(title: string[None], text: string[None]) -> {"embedding": float32[None, d]}

(names from twotower.core.contracts). The tokenizer (tensorflow-text ops, vocabulary baked into
the graph) and the towers are traced into the SavedModel, so a consumer needs only

    import tensorflow as tf, tensorflow_text  # registers the custom tokenizer ops
    m = tf.saved_model.load(path)
    m.signatures["query_encoder"](query=tf.constant(["who wrote ..."]))["embedding"]

and none of our code. The `.keras` file holds the `TwoTowerModel` on token ids (reload with
`keras.saving.load_model` after `import twotower.model.two_tower`); `vocab.txt` and
`config.yaml` sit beside it.

Layout under `<run>/export/` (contracts.export_dir): `saved_model/`, `two_tower.keras`,
`vocab.txt`, `config.yaml` (contracts.SAVED_MODEL_DIR, KERAS_FILE, VOCAB_FILE,
RUN_CONFIG_FILE).
"""

from __future__ import annotations

import logging
import os

import tensorflow as tf

from twotower.core import contracts
from twotower.core import files as io

logger = logging.getLogger(__name__)


class ExportModule(tf.Module):
  """Tokenizer + towers behind the two string signatures."""

  def __init__(self, tokenizer, query_tower, doc_tower):
    super().__init__(name="two_tower_export")
    self.tokenizer = tokenizer
    self.query_tower = query_tower
    self.doc_tower = doc_tower

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="query")])
  def query_encoder(self, query):
    """string [N] -> {"embedding": float32 [N, d]}."""
    emb = self.query_tower(self.tokenizer.queries(query), training=False)
    return {contracts.EMBEDDING_OUTPUT: tf.cast(emb, tf.float32)}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="title"),
                                tf.TensorSpec([None], tf.string, name="text")])
  def doc_encoder(self, title, text):
    """string [N] x2 -> {"embedding": float32 [N, d]}."""
    emb = self.doc_tower(self.tokenizer.docs(title, text), training=False)
    return {contracts.EMBEDDING_OUTPUT: tf.cast(emb, tf.float32)}


def export(model, tokenizer, vocab_path: str, out_dir: str, config_yaml: str = "") -> str:
  """Writes `<out_dir>/saved_model`, `two_tower.keras`, `vocab.txt`, `config.yaml` of the
  query and document towers of `model` (`TwoTowerModel.towers_only()`).

  Returns the SavedModel path.
  """
  io.makedirs(out_dir)
  # The plain two towers: MoCo's momentum tower and queue and a Condenser head are for
  # pre-training only.
  model = model.towers_only()
  module = ExportModule(tokenizer, model.query_tower, model.doc_tower)
  saved = os.path.join(out_dir, contracts.SAVED_MODEL_DIR)
  tf.saved_model.save(module, saved, signatures={
      contracts.QUERY_SIGNATURE: module.query_encoder,
      contracts.DOC_SIGNATURE: module.doc_encoder})
  model.save(os.path.join(out_dir, contracts.KERAS_FILE))
  tf.io.gfile.copy(vocab_path, os.path.join(out_dir, contracts.VOCAB_FILE), overwrite=True)
  if config_yaml:
    io.write_text(os.path.join(out_dir, contracts.RUN_CONFIG_FILE), config_yaml)
  logger.info("exported SavedModel (signatures %s, %s) and .keras to %s",
              contracts.QUERY_SIGNATURE, contracts.DOC_SIGNATURE, out_dir)
  return saved
