"""What a set of vectors is: the model that made it and the ids it covers.

Vectors of one model are meaningless next to another's (a query of one tower against an index
of another ranks at random), and vectors under the wrong ids answer with the wrong text. So
every output of vectors carries a *vectors record*:

    {"model": {"path": "/abs/runs/ict/export/saved_model", "fingerprint": "<sha256 hex>"},
     "ids": {"count": 48, "sha256": "<hex>"}, "dim": 64}

  `twotower embed`   OUT/vectors.json (RECORD_FILE), listed in the folder's manifest
  `twotower index`   <index file>.vectors.json (record_path) beside each index file it writes
  `twotower bundle`  the bundle manifest's `model.fingerprint` and the `ids` of its parts

and `index`, `search` and `bundle` refuse vectors of two models, naming both (`describe`).

The model's fingerprint is a sha256 over the files of the SavedModel's `variables/` and
`assets/` folders (their relative paths and bytes): the weights (and vocabulary files) decide
the vectors. A copy of the export elsewhere matches; another training run, whose weights
differ, does not. `saved_model.pb` is left out: it holds no weights, and its bytes differ
between two exports of the same weights (traced function names). A SavedModel without
variables is fingerprinted by its `saved_model.pb`.

The id set's digest is a sha256 over the sorted ids (int64 little-endian, or UTF-8 strings
each ended by a NUL byte), beside their count: two sets are equal when both are.

Vectors without a record (made by a twotower before this one, or by other tools in the
embedding schema) are accepted by `index` and `search` with a warning (their model cannot be
checked); `bundle --embeddings` refuses them (a bundle serves its answers, so its vectors must
be known to be its tower's).
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from twotower import io as tio

logger = logging.getLogger(__name__)

#: The record inside a `twotower embed` output folder.
RECORD_FILE = "vectors.json"
#: The record beside an index file: `index.faiss` -> `index.faiss.vectors.json`.
RECORD_SUFFIX = ".vectors.json"
#: Hex digits of a fingerprint that messages show.
SHORT = 12
#: The SavedModel folders whose files are fingerprinted.
_MODEL_PARTS = ("variables", "assets")


# ---------------------------------------------------------------------------------------------
# Fingerprints.
# ---------------------------------------------------------------------------------------------


def _model_files(saved_model: str) -> list[tuple[str, str]]:
  """(relative path, path) of the files that identify a SavedModel, sorted."""
  if tio.is_local(saved_model):
    walk = os.walk
  else:  # gs:// and other filesystems TensorFlow reads
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    walk = tf.io.gfile.walk
  root = saved_model.rstrip("/")
  found = []
  for part in _MODEL_PARTS:
    top = f"{root}/{part}"
    for directory, _, names in walk(top):
      for name in names:
        path = f"{directory.rstrip('/')}/{name}"
        found.append((path[len(root) + 1:].replace(os.sep, "/"), path))
  if not any(rel.startswith("variables/") for rel, _ in found):
    found.append(("saved_model.pb", f"{root}/saved_model.pb"))
  return sorted(found)


def _update_with_file(digest, path: str) -> None:
  if tio.is_local(path):
    with open(path, "rb") as f:
      for block in iter(lambda: f.read(1 << 20), b""):
        digest.update(block)
    return
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  with tf.io.gfile.GFile(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)


def file_sha256(path: str) -> str:
  """sha256 hex of one file's bytes, read in 1 MiB blocks (a bundle's files: its manifest)."""
  digest = hashlib.sha256()
  _update_with_file(digest, path)
  return digest.hexdigest()


def model_fingerprint(saved_model: str) -> str:
  """sha256 hex of a SavedModel's variables and assets (see the module docstring).

  Raises:
    ValueError: `saved_model` holds no SavedModel (names it).
  """
  files = _model_files(saved_model)
  if tio.is_local(saved_model) and not all(os.path.isfile(p) for _, p in files):
    raise ValueError(f"{saved_model}: no SavedModel to fingerprint (no variables/ and no "
                     "saved_model.pb)")
  digest = hashlib.sha256()
  for rel, path in files:
    digest.update(rel.encode("utf-8") + b"\0")
    _update_with_file(digest, path)
  return digest.hexdigest()


def model_record(saved_model: str) -> dict:
  """{"path", "fingerprint"} of the SavedModel that makes a set of vectors."""
  path = os.path.abspath(saved_model) if tio.is_local(saved_model) else saved_model
  return {"path": path, "fingerprint": model_fingerprint(saved_model)}


def ids_record(ids: Any) -> dict:
  """{"count", "sha256"} of an id set (int ids or string ids; order does not matter)."""
  array = np.asarray(ids)
  if array.dtype.kind in "iu":
    data = np.sort(array.astype("<i8", copy=False)).tobytes()
  else:
    data = b"".join(str(i).encode("utf-8") + b"\0" for i in sorted(str(i) for i in array))
  return {"count": int(array.size), "sha256": hashlib.sha256(data).hexdigest()}


def file_ids(files: Sequence[str]) -> np.ndarray:
  """The `id` column of embedding shards (no vector is read): int64, or strings."""
  import pyarrow as pa  # pylint: disable=import-outside-toplevel
  parts = []
  for path in files:
    column = tio.open_parquet(path).read(columns=["id"]).column("id")
    parts.append(column.to_numpy() if pa.types.is_integer(column.type)
                 else np.asarray(column.to_pylist(), dtype=object))
  return np.concatenate(parts) if parts else np.empty(0, np.int64)


def describe(model: Optional[dict]) -> str:
  """A model as messages name it: its path and a short fingerprint."""
  if not model:
    return "an unknown model (no vectors record)"
  return f"{model.get('path')} [{str(model.get('fingerprint'))[:SHORT]}]"


def same_model(a: Optional[dict], b: Optional[dict]) -> bool:
  return bool(a and b) and a["fingerprint"] == b["fingerprint"]


# ---------------------------------------------------------------------------------------------
# Records on disk.
# ---------------------------------------------------------------------------------------------


def folder_record_path(folder: str) -> str:
  return f"{folder.rstrip('/')}/{RECORD_FILE}"


def record_path(index_file: str) -> str:
  return f"{index_file}{RECORD_SUFFIX}"


def write_record(path: str, model: Optional[dict], ids: dict, dim: int) -> dict:
  record = {"model": model, "ids": ids, "dim": int(dim)}
  tio.write_json(path, record)
  return record


def read_record(path: str) -> Optional[dict]:
  """The record at `path`, or None when there is none.

  Raises:
    ValueError: a record that is not one (names the file).
  """
  if tio.is_local(path):
    if not os.path.isfile(path):
      return None
  else:
    try:
      tio.match_files(path)
    except FileNotFoundError:
      return None
  try:
    record = tio.read_json(path)
  except ValueError as e:
    raise ValueError(f"{path}: not a vectors record ({e})") from e
  model = record.get("model") if isinstance(record, dict) else None
  if (not isinstance(record, dict) or "model" not in record
      or (model is not None and not isinstance((model or {}).get("fingerprint"), str))):
    raise ValueError(f"{path}: not a vectors record (a JSON object with 'model', 'ids', "
                     "'dim')")
  return record


def embedding_records(files: Sequence[str]) -> list[tuple[str, Optional[dict]]]:
  """(folder, its record or None) of each folder that holds some of embedding `files`."""
  folders = sorted({os.path.dirname(f) if tio.is_local(f) else f.rsplit("/", 1)[0]
                    for f in files})
  return [(folder, read_record(folder_record_path(folder))) for folder in folders]


def one_model(records: Iterable[tuple[str, Optional[dict]]], what: str = "vectors"
              ) -> Optional[dict]:
  """The model of every record (None when none names one); a warning for each source without
  a record (its model cannot be checked).

  Raises:
    ValueError: two sources of two models, naming both.
  """
  first: Optional[tuple[str, dict]] = None
  for source, record in records:
    model = (record or {}).get("model")
    if not model:
      logger.warning("%s: no vectors record names the model of its %s (made before "
                     "twotower recorded models, or by another tool): not checked", source,
                     what)
      continue
    if first is None:
      first = (source, model)
    elif not same_model(first[1], model):
      raise ValueError(f"{source}: {what} of model {describe(model)}, but {first[0]} holds "
                       f"{what} of model {describe(first[1])}; use one model's {what}")
  return first[1] if first else None
