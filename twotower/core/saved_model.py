"""Loading one signature of an exported SavedModel (model/export.py writes them): what the
embedding job (pipelines.embed), the bundle's query tower (deploy.serving.query_encoders)
and the benchmarks share, without Beam.

    fn = saved_model.load_signature(path, contracts.QUERY_SIGNATURE)
    fn(query=tf.constant(["who wrote hamlet?"]))["embedding"]      # float32 [1, d]
    saved_model.embedding_dim(path, contracts.QUERY_SIGNATURE)     # d, without the weights

It lives in the core, not in model/ beside the export, because pipelines/ and model/ may not
import each other (tests/test_layers.py) and the embedding job needs it as much as serving.
Consumers of a tensorflow-text export need `import tensorflow_text` before loading:
load_signature does it. TensorFlow is imported when a function is called, never at import.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from twotower.core import contracts

logger = logging.getLogger(__name__)


class LoadedSignature:
  """A signature plus the loaded object that owns its variables (a bare signature whose
  SavedModel object is garbage-collected loses its weights)."""

  def __init__(self, loaded: Any, fn: Callable):
    self.loaded = loaded
    self.fn = fn

  def __call__(self, **inputs):
    return self.fn(**inputs)


def load_signature(model_path: str, signature: str) -> LoadedSignature:
  """Loads one signature of a SavedModel (after `import tensorflow_text` for its custom ops).

  Raises:
    ValueError: the SavedModel has no such signature (names the ones it has).
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  try:
    import tensorflow_text  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  except ImportError:  # a model without tf-text ops still loads
    logger.warning("tensorflow_text is not importable; a tf-text export will fail to load")
  loaded = tf.saved_model.load(model_path)
  if signature not in loaded.signatures:
    raise ValueError(f"{model_path}: no signature {signature!r}; it has "
                     f"{sorted(loaded.signatures)}")
  return LoadedSignature(loaded, loaded.signatures[signature])


def embedding_dim(model_path: str, signature: str) -> int:
  """d of a signature's `embedding` output: read from saved_model.pb's signature def (no
  variable is loaded), else from one call on one row."""
  try:
    from tensorflow.python.saved_model import loader_impl  # pylint: disable=g-direct-tensorflow-import,import-outside-toplevel
    sig = loader_impl.parse_saved_model(model_path).meta_graphs[0].signature_def[signature]
    dims = sig.outputs[contracts.EMBEDDING_OUTPUT].tensor_shape.dim
    if len(dims) == 2 and dims[-1].size > 0:
      return int(dims[-1].size)
  except (ImportError, KeyError, IndexError, OSError) as e:  # fall back to a real call
    logger.debug("no static embedding dim in %s (%s)", model_path, e)
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  model = load_signature(model_path, signature)
  spec = model.fn.structured_outputs.get(contracts.EMBEDDING_OUTPUT)
  if spec is None:
    raise ValueError(f"{model_path}: signature {signature!r} has no "
                     f"{contracts.EMBEDDING_OUTPUT!r} output")
  names = sorted(model.fn.structured_input_signature[1])
  out = model(**{n: tf.constant(["probe"]) for n in names})[contracts.EMBEDDING_OUTPUT]
  return int(out.shape[-1])
