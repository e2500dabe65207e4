"""What a set of vectors is: the model that made it, the ids it covers and the rows it was
made from.

Vectors of one model are meaningless next to another's (a query of one tower against an index
of another ranks at random), vectors under the wrong ids answer with the wrong text, and
vectors of another version of the documents answer with text they were not made from. So
every output of vectors carries a *vectors record*:

    {"model": {"path": "/abs/runs/ict/export/saved_model", "fingerprint": "<sha256 hex>"},
     "ids": {"count": 48, "sha256": "<hex>"}, "dim": 64,
     "rows": {"count": 48, "sha256_sum": "<hex>"}}

  `twotower embed`   OUT/vectors.json (RECORD_FILE), listed in the folder's manifest; with
                     `rows`, and (input shards) stats.json's `input_shard.input`
  `twotower index`   <index file>.vectors.json (record_path) beside each index file it writes
  `twotower bundle`  the bundle manifest's `model.fingerprint` and the `ids` of its parts

Every reader finds the record where it lives (eval.embeddings: an embed folder's
vectors.json, an index file's own record, or, for a bundle's `index.faiss`, the bundle's
manifest), and `index`, `search` and `bundle` refuse vectors of two models, naming both
(`describe`).

The model's fingerprint is a sha256 over the files of the SavedModel's `variables/` and
`assets/` folders (their relative paths and bytes): the weights (and vocabulary files) decide
the vectors. A copy of the export elsewhere matches; another training run, whose weights
differ, does not. `saved_model.pb` is left out: it holds no weights, and its bytes differ
between two exports of the same weights (traced function names). A SavedModel without
variables is fingerprinted by its `saved_model.pb`.

The id set's digest is a sha256 over the sorted ids (int64 little-endian, or UTF-8 strings
each ended by a NUL byte), beside their count: two sets are equal when both are.

Row contents (`rows`, and an input shard's input) are digested by what they hold, never by
the names of the files they came from: each row's values (`encode_values`: its id and the
text fields the tower read, or an input row's columns) are hashed with sha256, and the
digest of a set of rows is the count and the sum of those hashes mod 2^256 (`RowsDigest`).
A sum needs no order and no memory: a Beam job adds rows as they come, on any number of
workers, and input shards' digests add up to the digest of their union; a changed character
or two swapped ids change a row's hash, so the sum, but for a chance of about 2^-256. (It
guards against mistakes, not forgery: rows crafted to collide are far cheaper to find for a
sum of hashes than for one sha256 over sorted rows, which would need a sort of the whole
input.) `bundle` computes the digest of the documents it stores, as the embedding job reads
them, and refuses vectors whose `rows` differ. Only `embed` writes `rows`: an index's record
holds the model and its ids.

Vectors without a record (made by a twotower before this one, or by other tools in the
embedding schema) are refused by `index` and `search` unless the user takes them unchecked
with UNCHECKED_FLAG (then a warning names them, and an index of them records no model);
`bundle --embeddings` always refuses them (a bundle serves its answers, so its vectors must
be known to be its tower's, made from its documents).
"""

from __future__ import annotations

import hashlib
import logging
import numbers
import os
import struct
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from twotower.core import files as tio

logger = logging.getLogger(__name__)

#: The record inside a `twotower embed` output folder.
RECORD_FILE = "vectors.json"
#: The record beside an index file: `index.faiss` -> `index.faiss.vectors.json`.
RECORD_SUFFIX = ".vectors.json"
#: Hex digits of a fingerprint that messages show.
SHORT = 12
#: The flag of `index` and `search` that takes vectors no record vouches for, unchecked.
UNCHECKED_FLAG = "--allow_unchecked_vectors"
#: The SavedModel folders whose files are fingerprinted.
_MODEL_PARTS = ("variables", "assets")
#: Row digests are summed modulo 2^256 (the width of one sha256).
_SUM_MASK = (1 << 256) - 1


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
# Row contents.
# ---------------------------------------------------------------------------------------------


def encode_values(values: Sequence[Any]) -> bytes:
  """The bytes a row's values are hashed as: each value tagged by its type and, for text,
  prefixed by its length, so that no two different rows share an encoding ("ab", "c" is not
  "a", "bc"; 1 is not "1"; None is not "").

  Raises:
    TypeError: a value that is not None, a bool, an integer, a float, str or bytes.
  """
  parts = [struct.pack("<Q", len(values))]
  for value in values:
    if value is None:
      parts.append(b"n")
    elif isinstance(value, bool):
      parts.append(b"b1" if value else b"b0")
    elif isinstance(value, numbers.Integral):
      value = int(value)
      if -(1 << 63) <= value < (1 << 63):
        parts.append(b"i" + value.to_bytes(8, "little", signed=True))
      else:  # wider than Parquet's int64: by its digits
        digits = str(value).encode("ascii")
        parts.append(b"I" + struct.pack("<Q", len(digits)) + digits)
    elif isinstance(value, float):
      parts.append(b"f" + struct.pack("<d", value))
    elif isinstance(value, str):
      data = value.encode("utf-8")
      parts.append(b"s" + struct.pack("<Q", len(data)) + data)
    elif isinstance(value, (bytes, bytearray)):
      parts.append(b"y" + struct.pack("<Q", len(value)) + bytes(value))
    else:
      raise TypeError(f"a row value of type {type(value).__name__} has no digest: {value!r}")
  return b"".join(parts)


def row_sha256(values: Sequence[Any]) -> bytes:
  """sha256 of one row's values (encode_values)."""
  return hashlib.sha256(encode_values(values)).digest()


def row_hash(values: Sequence[Any]) -> int:
  """row_sha256 as the integer a RowsDigest adds."""
  return int.from_bytes(row_sha256(values), "big")


class RowsDigest:
  """The digest of a multiset of rows: their count and the sum of their row_hash mod 2^256.

  Order-free and additive (see the module docstring): rows may be added in any order, on
  any number of workers (`merge`), and the digests of input shards add up to their union's.
  Constant memory, whatever the number of rows."""

  __slots__ = ("count", "total")

  def __init__(self, count: int = 0, total: int = 0):
    self.count = int(count)
    self.total = int(total) & _SUM_MASK

  def add(self, values: Sequence[Any]) -> "RowsDigest":
    return self.add_hash(row_hash(values))

  def add_hash(self, value: int) -> "RowsDigest":
    self.count += 1
    self.total = (self.total + value) & _SUM_MASK
    return self

  def merge(self, other: "RowsDigest") -> "RowsDigest":
    self.count += other.count
    self.total = (self.total + other.total) & _SUM_MASK
    return self

  def record(self) -> dict:
    """{"count", "sha256_sum"}: what vectors.json and stats.json hold."""
    return {"count": self.count, "sha256_sum": f"{self.total:064x}"}

  @classmethod
  def of_record(cls, record: Mapping[str, Any]) -> "RowsDigest":
    """From `record()`'s {"count", "sha256_sum"}.

    Raises:
      ValueError: not such a record.
    """
    try:
      return cls(int(record["count"]), int(str(record["sha256_sum"]), 16))
    except (KeyError, TypeError, ValueError) as e:
      raise ValueError(f"not a rows digest ({{'count', 'sha256_sum'}}): {record!r}") from e

  def __eq__(self, other: object) -> bool:
    return (isinstance(other, RowsDigest) and self.count == other.count
            and self.total == other.total)

  def __hash__(self) -> int:
    return hash((self.count, self.total))

  def short(self) -> str:
    """As messages show it: the count and a short sum."""
    return f"{self.count} rows [{f'{self.total:064x}'[:SHORT]}]"

  def __repr__(self) -> str:
    return f"RowsDigest({self.count}, {self.total:064x})"


def rows_sha256(head: str, digest: RowsDigest) -> str:
  """One sha256 hex that stands for a RowsDigest under `head` (what the rows are: an input's
  kind and document layout), for records compared by equality only."""
  return hashlib.sha256(f"{head}\0{digest.count}\0{digest.total:064x}".encode("utf-8")
                        ).hexdigest()


# ---------------------------------------------------------------------------------------------
# Vectors no record vouches for.
# ---------------------------------------------------------------------------------------------


def unchecked(message: str, allow: bool, flag: Optional[str] = UNCHECKED_FLAG) -> None:
  """Vectors whose model (or input) no record names: with `allow` (the user gave `flag`) a
  warning, else a ValueError, one line: `message` and the flag that accepts them (`flag`
  None: the command has none, as `bundle`; the message then says what to do).

  Raises:
    ValueError: `allow` is false.
  """
  if allow:
    logger.warning("%s; taken unchecked (%s)", message, flag)
    return
  raise ValueError(f"{message}; give {flag} to use them unchecked" if flag else message)


# ---------------------------------------------------------------------------------------------
# Records on disk.
# ---------------------------------------------------------------------------------------------


def folder_record_path(folder: str) -> str:
  return f"{folder.rstrip('/')}/{RECORD_FILE}"


def record_path(index_file: str) -> str:
  return f"{index_file}{RECORD_SUFFIX}"


def write_record(path: str, model: Optional[dict], ids: dict, dim: int,
                 rows: Optional[dict] = None) -> dict:
  """Writes a vectors record; `rows` (RowsDigest.record: the rows the vectors were made
  from) where the writer knows them (`embed`)."""
  record = {"model": model, "ids": ids, "dim": int(dim)}
  if rows is not None:
    record["rows"] = rows
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
  if "rows" in record:
    try:
      RowsDigest.of_record(record["rows"])
    except ValueError as e:
      raise ValueError(f"{path}: 'rows' is {e}") from e
  return record


def embedding_records(files: Sequence[str]) -> list[tuple[str, Optional[dict]]]:
  """(folder, its record or None) of each folder that holds some of embedding `files`."""
  folders = sorted({os.path.dirname(f) if tio.is_local(f) else f.rsplit("/", 1)[0]
                    for f in files})
  return [(folder, read_record(folder_record_path(folder))) for folder in folders]


def one_model(records: Iterable[tuple[str, Optional[dict]]], what: str = "vectors", *,
              allow_unchecked: bool = False, flag: Optional[str] = UNCHECKED_FLAG
              ) -> Optional[dict]:
  """The model of every record. A source without a record naming its model is refused
  (`unchecked`: its vectors cannot be checked against the others), or, with
  `allow_unchecked`, warned about; the model is then None, since some of the vectors are of
  no known model (an index of them records none, and stays unchecked downstream).

  Raises:
    ValueError: two sources of two models, naming both; a source without a model record,
      unless `allow_unchecked` (naming it and `flag`).
  """
  first: Optional[tuple[str, dict]] = None
  taken_unchecked = False
  for source, record in records:
    model = (record or {}).get("model")
    if not model:
      unchecked(f"{source}: no vectors record names the model of its {what} (made before "
                "twotower recorded models, or by another tool): their model cannot be "
                "checked", allow_unchecked, flag)
      taken_unchecked = True
      continue
    if first is None:
      first = (source, model)
    elif not same_model(first[1], model):
      raise ValueError(f"{source}: {what} of model {describe(model)}, but {first[0]} holds "
                       f"{what} of model {describe(first[1])}; use one model's {what}")
  return first[1] if first and not taken_unchecked else None
