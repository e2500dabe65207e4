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

A run trained on JAX writes the `.keras` file, the vocabulary and the config
(`export_keras`), then the SavedModel in a TensorFlow process of its own
(`saved_model_in_tensorflow`: `python -m twotower.model.export EXPORT_DIR`, which loads the
`.keras` file under TensorFlow and traces the same module `export` traces), so that every
consumer finds the folder a TensorFlow run writes. Where TensorFlow is not installed (an
accelerator machine with JAX only) that step is skipped with a warning; the same command
writes the SavedModel later on a machine that has TensorFlow.
"""

from __future__ import annotations

import importlib.machinery
import logging
import os
import shutil
import subprocess
import sys

from twotower.core import contracts
from twotower.core import files as io

logger = logging.getLogger(__name__)


def _export_module(tokenizer, query_tower, doc_tower):
  """Tokenizer + towers behind the two string signatures (a tf.Module)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel

  class ExportModule(tf.Module):
    """Tokenizer + towers behind the two string signatures."""

    def __init__(self):
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

  return ExportModule()


def write_saved_model(model, tokenizer, out_dir: str) -> str:
  """`<out_dir>/saved_model` of the towers of a plain `TwoTowerModel` (TensorFlow)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  module = _export_module(tokenizer, model.query_tower, model.doc_tower)
  saved = os.path.join(out_dir, contracts.SAVED_MODEL_DIR)
  tf.saved_model.save(module, saved, signatures={
      contracts.QUERY_SIGNATURE: module.query_encoder,
      contracts.DOC_SIGNATURE: module.doc_encoder})
  return saved


def export_keras(model, vocab_path: str, out_dir: str, config_yaml: str = "") -> None:
  """`<out_dir>/two_tower.keras`, `vocab.txt`, `config.yaml` of the towers of `model` (on
  either backend)."""
  io.makedirs(out_dir)
  model.towers_only().save(os.path.join(out_dir, contracts.KERAS_FILE))
  if io.is_local(vocab_path) and io.is_local(out_dir):
    shutil.copyfile(vocab_path, os.path.join(out_dir, contracts.VOCAB_FILE))
  else:
    io.write_text(os.path.join(out_dir, contracts.VOCAB_FILE), io.read_text(vocab_path))
  if config_yaml:
    io.write_text(os.path.join(out_dir, contracts.RUN_CONFIG_FILE), config_yaml)


def export(model, tokenizer, vocab_path: str, out_dir: str, config_yaml: str = "") -> str:
  """Writes `<out_dir>/saved_model`, `two_tower.keras`, `vocab.txt`, `config.yaml` of the
  query and document towers of `model` (`TwoTowerModel.towers_only()`), on TensorFlow.

  Returns the SavedModel path.
  """
  io.makedirs(out_dir)
  # The plain two towers: MoCo's momentum tower and queue and a Condenser head are for
  # pre-training only.
  saved = write_saved_model(model.towers_only(), tokenizer, out_dir)
  export_keras(model, vocab_path, out_dir, config_yaml)
  logger.info("exported SavedModel (signatures %s, %s) and .keras to %s",
              contracts.QUERY_SIGNATURE, contracts.DOC_SIGNATURE, out_dir)
  return saved


def saved_model_from_keras(out_dir: str) -> str:
  """The SavedModel of an export folder that holds `two_tower.keras`, `vocab.txt` and
  `config.yaml` (what `export_keras` writes), traced in this process on TensorFlow."""
  import keras  # pylint: disable=import-outside-toplevel
  import yaml  # pylint: disable=import-outside-toplevel
  if keras.backend.backend() != "tensorflow":
    raise RuntimeError(f"writing {out_dir}/{contracts.SAVED_MODEL_DIR} needs Keras on "
                       f"TensorFlow (KERAS_BACKEND=tensorflow), not {keras.backend.backend()}")
  from twotower.model import two_tower  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  from twotower.model.tokenizer import Tokenizer  # pylint: disable=import-outside-toplevel
  model_cfg = (yaml.safe_load(io.read_text(os.path.join(out_dir, contracts.RUN_CONFIG_FILE)))
               or {}).get("model", {})
  model = keras.saving.load_model(os.path.join(out_dir, contracts.KERAS_FILE), compile=False)
  tokenizer = Tokenizer.from_file(os.path.join(out_dir, contracts.VOCAB_FILE),
                                  model_cfg["query_len"], model_cfg["doc_len"])
  saved = write_saved_model(model, tokenizer, out_dir)
  logger.info("exported SavedModel (signatures %s, %s) of %s", contracts.QUERY_SIGNATURE,
              contracts.DOC_SIGNATURE, os.path.join(out_dir, contracts.KERAS_FILE))
  return saved


def tensorflow_installed() -> bool:
  """Whether TensorFlow can be imported here (looked up on the path, not imported: a JAX
  process keeps it out of sys.modules)."""
  return all(importlib.machinery.PathFinder.find_spec(name) is not None
             for name in ("tensorflow", "tensorflow_text"))


def saved_model_in_tensorflow(out_dir: str) -> str | None:
  """Writes the SavedModel of `out_dir` (`saved_model_from_keras`) in a TensorFlow process
  started for it; its path, or None with a warning where TensorFlow is not installed."""
  command = [sys.executable, "-m", "twotower.model.export", out_dir]
  if not tensorflow_installed():
    logger.warning("no TensorFlow here: %s holds the .keras towers but no SavedModel; write "
                   "it where TensorFlow is installed with: %s", out_dir,
                   " ".join(["python"] + command[1:]))
    return None
  env = {**os.environ, "KERAS_BACKEND": "tensorflow"}
  done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                        text=True, check=False)
  if done.returncode:
    tail = "\n".join(done.stderr.strip().splitlines()[-5:])
    raise RuntimeError(f"writing the SavedModel of {out_dir} under TensorFlow failed "
                       f"(exit {done.returncode}): {tail}")
  return os.path.join(out_dir, contracts.SAVED_MODEL_DIR)


if __name__ == "__main__":
  if len(sys.argv) != 2:
    sys.exit("usage: python -m twotower.model.export EXPORT_DIR  (a run's export/ folder "
             "holding two_tower.keras, vocab.txt and config.yaml)")
  os.environ.setdefault("KERAS_BACKEND", "tensorflow")
  logging.basicConfig(level=logging.WARNING)
  print(saved_model_from_keras(sys.argv[1]))
