"""The bundle's query tower behind one call, `encode(queries) -> float32 [n, d]`, run either
by TensorFlow (the SavedModel in `query_encoder/`, tokenizer in the graph) or by onnxruntime
(`query_onnx/`, written by `twotower bundle --onnx`: model/onnx_encoder.py), so that a
dense-only service imports neither TensorFlow nor PyTorch.

    encoder = query_encoders.load(bundle_dir, "auto")   # ONNX when the bundle has it
    encoder.kind, encoder.dim, encoder.encode(["who wrote hamlet?"])

The two give the same embeddings within float error (benchmarks/export_equality.py:
max abs 1e-7 on 10,000 texts) and the same ids (tests/test_export_hf.py).
"""

from __future__ import annotations

import logging
import os
from typing import Sequence

import numpy as np

from twotower.core import contracts
from twotower.core import saved_model

logger = logging.getLogger(__name__)

#: "auto": ONNX when the bundle carries it, else TensorFlow.
ENCODERS = ("auto", "onnx", "tensorflow")
#: The optional bundle part holding the query tower as ONNX.
QUERY_ONNX_DIR = "query_onnx"
#: Largest query-tower call (the embedding job's default batch, pipelines.embed).
ENCODE_BATCH = 256
#: TensorFlow's threads, set when TensorFlow is first loaded (retriever.set_threads).
_tf_threads = {"intra": 0, "inter": 0}


class TensorFlowQueryEncoder:
  """The SavedModel's query signature."""
  kind = "tensorflow"

  def __init__(self, folder: str):
    apply_tf_threads()
    self._fn = saved_model.load_signature(folder, contracts.QUERY_SIGNATURE)
    self.dim = int(saved_model.embedding_dim(folder, contracts.QUERY_SIGNATURE))

  def encode(self, queries: Sequence[str]) -> np.ndarray:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    parts = []
    for start in range(0, len(queries), ENCODE_BATCH):
      chunk = list(queries[start:start + ENCODE_BATCH])
      out = self._fn(query=tf.constant(chunk, dtype=tf.string))
      parts.append(out[contracts.EMBEDDING_OUTPUT].numpy())
    return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)


class OnnxQueryEncoder:
  """The ONNX query tower (onnxruntime + tokenizers)."""
  kind = "onnx"

  def __init__(self, folder: str, threads: int = 0):
    from twotower.model import onnx_encoder  # pylint: disable=import-outside-toplevel
    self._tower = onnx_encoder.OnnxTower(folder, threads=threads)
    if self._tower.layout != "query":
      raise ValueError(f"{folder}: a {self._tower.layout} tower, not the query tower")
    self.dim = self._tower.embedding_dim

  def encode(self, queries: Sequence[str]) -> np.ndarray:
    return np.ascontiguousarray(self._tower.encode(list(queries), ENCODE_BATCH), np.float32)


def has_onnx(bundle_dir: str) -> bool:
  from twotower.model import onnx_encoder  # pylint: disable=import-outside-toplevel
  return onnx_encoder.is_tower(os.path.join(bundle_dir, QUERY_ONNX_DIR))


def load(bundle_dir: str, kind: str = "auto", threads: int = 0):
  """The bundle's query encoder of `kind` (ENCODERS). Raises ValueError / OSError when the
  part is missing or does not load (the caller names the bundle)."""
  if kind not in ENCODERS:
    raise ValueError(f"encoder must be one of {ENCODERS}, got {kind!r}")
  if kind == "auto":
    kind = "onnx" if has_onnx(bundle_dir) else "tensorflow"
  if kind == "onnx":
    folder = os.path.join(bundle_dir, QUERY_ONNX_DIR)
    if not has_onnx(bundle_dir):
      raise ValueError(f"part {QUERY_ONNX_DIR!r} is missing: the bundle has no ONNX query "
                       "tower (`twotower bundle ... --onnx` writes one)")
    return OnnxQueryEncoder(folder, threads)
  return TensorFlowQueryEncoder(contracts.bundle_path(bundle_dir,
                                                      contracts.BUNDLE_QUERY_ENCODER_DIR))


def set_tf_threads(intra: int, inter: int) -> None:
  """TensorFlow's threads: now when TensorFlow is loaded, else when a TensorFlow encoder
  loads it (a process that serves with ONNX never imports it)."""
  _tf_threads.update(intra=intra, inter=inter)
  import sys  # pylint: disable=import-outside-toplevel
  if "tensorflow" in sys.modules:
    apply_tf_threads()


def apply_tf_threads() -> None:
  if not _tf_threads["intra"]:
    return
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  try:
    tf.config.threading.set_intra_op_parallelism_threads(_tf_threads["intra"])
    tf.config.threading.set_inter_op_parallelism_threads(_tf_threads["inter"])
  except RuntimeError as e:  # TensorFlow already initialised
    logger.info("TensorFlow threads unchanged: %s", e)
