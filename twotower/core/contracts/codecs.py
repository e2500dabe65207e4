"""One encoder and one decoder per file format, shared by the stages, the tests and the
benchmarks.

* Pairs: `encode_pair(Pair) -> bytes` writes a serialised `tf.train.Example` by hand and
  `decode_pair(bytes) -> Pair` reads one, so that Beam workers and evaluation never import
  TensorFlow (seconds per process) for a three-level protobuf. In-graph parsing for training
  (`model.data`) uses `tf.io.parse_example` on the same feature names.
* TFRecord files: `write_tfrecords` / `read_tfrecords`, the framing (length, masked CRC-32C)
  that `tf.data.TFRecordDataset` and Beam's `WriteToTFRecord` use.
* Parquet rows: `read_passages`, `read_questions`, `read_candidates`.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Iterable, Iterator, Sequence

from twotower.core import files as tio
from twotower.core.contracts import layout
from twotower.core.contracts import manifests
from twotower.core.contracts import records
from twotower.core.contracts.records import Pair

# ---------------------------------------------------------------------------------------------
# Protocol buffers, the two wire types a tf.train.Example uses.
# ---------------------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
  value &= (1 << 64) - 1  # int64 two's complement, as protobuf does for negative values
  out = bytearray()
  while True:
    byte = value & 0x7F
    value >>= 7
    if value:
      out.append(byte | 0x80)
    else:
      out.append(byte)
      return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
  """A length-delimited field (wire type 2)."""
  return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
  value = shift = 0
  while True:
    byte = buf[pos]
    pos += 1
    value |= (byte & 0x7F) << shift
    if not byte & 0x80:
      return value, pos
    shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, object]]:
  """(field number, wire type, value): an int for varints, bytes for length-delimited
  fields; fixed-width fields (floats) are skipped over."""
  pos, end = 0, len(buf)
  while pos < end:
    key, pos = _read_varint(buf, pos)
    number, wire = key >> 3, key & 7
    if wire == 0:
      value, pos = _read_varint(buf, pos)
    elif wire == 2:
      size, pos = _read_varint(buf, pos)
      value, pos = buf[pos:pos + size], pos + size
    elif wire in (1, 5):
      value, pos = None, pos + (8 if wire == 1 else 4)
    else:
      raise ValueError(f"unsupported protobuf wire type {wire}")
    yield number, wire, value


def _signed(value: int) -> int:
  return value - (1 << 64) if value >= 1 << 63 else value


def encode_example(features: dict[str, bytes | int | Sequence[bytes] | Sequence[int]]) -> bytes:
  """Serialised `tf.train.Example` of bytes / int64 features, each a scalar or a list (keys
  in sorted order, as TF writes them, so the bytes are deterministic)."""
  entries = b""
  for key in sorted(features):
    value = features[key]
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if values and all(isinstance(v, int) for v in values):
      packed = b"".join(_varint(v) for v in values)
      feature = _field(3, _field(1, packed))  # Feature.int64_list { packed value }
    else:
      feature = _field(1, b"".join(_field(1, v) for v in values))  # Feature.bytes_list
    entries += _field(1, _field(1, key.encode("utf-8")) + _field(2, feature))
  return _field(1, entries)  # Example.features { feature: map<string, Feature> }


def decode_example(data: bytes) -> dict[str, list]:
  """A serialised `tf.train.Example` -> {name: list of bytes or of ints} (float lists are
  returned empty: no format of ours has one)."""
  out: dict[str, list] = {}
  for number, _, features in _fields(data):
    if number != 1:
      continue
    for entry_number, _, entry in _fields(features):
      if entry_number != 1:
        continue
      key, values = "", []
      for n, _, part in _fields(entry):
        if n == 1:
          key = part.decode("utf-8")
        elif n == 2:
          for kind, _, lst in _fields(part):
            for vn, wire, v in _fields(lst):
              if vn != 1:
                continue
              if kind == 1:
                values.append(bytes(v))
              elif kind == 3 and wire == 2:  # packed int64s
                pos = 0
                while pos < len(v):
                  raw, pos = _read_varint(v, pos)
                  values.append(_signed(raw))
              elif kind == 3:
                values.append(_signed(v))
      out[key] = values
  return out


def encode_pair(pair: Pair) -> bytes:
  """A Pair as a serialised tf.train.Example with records.PAIR_FEATURES (+ the hard-negative
  list features when it has hard negatives)."""
  values = dataclasses.asdict(pair)
  features: dict = {name: values[name].encode("utf-8") for name in records.PAIR_BYTES_FEATURES}
  features.update({name: int(values[name]) for name in records.PAIR_INT64_FEATURES})
  if pair.hard_negatives:
    titles, texts, ids = zip(*pair.hard_negatives)
    features["neg_doc_title"] = [t.encode("utf-8") for t in titles]
    features["neg_doc_text"] = [t.encode("utf-8") for t in texts]
    features["neg_doc_id"] = [int(i) for i in ids]
  return encode_example(features)


def decode_pair(data: bytes) -> Pair:
  """The inverse of `encode_pair`; a missing feature is an error naming it."""
  features = decode_example(data)
  missing = [n for n in records.PAIR_FEATURES if not features.get(n)]
  if missing:
    raise ValueError(f"not a pair record: no {missing} feature")
  text = {n: features[n][0].decode("utf-8") for n in records.PAIR_BYTES_FEATURES}
  ids = {n: int(features[n][0]) for n in records.PAIR_INT64_FEATURES}
  negatives = tuple(zip((t.decode("utf-8") for t in features.get("neg_doc_title", ())),
                        (t.decode("utf-8") for t in features.get("neg_doc_text", ())),
                        features.get("neg_doc_id", ())))
  return Pair(**text, **ids, hard_negatives=negatives)


# ---------------------------------------------------------------------------------------------
# TFRecord framing: uint64 length, masked CRC-32C of the length, data, masked CRC-32C of data.
# ---------------------------------------------------------------------------------------------


def _masked_crc(data: bytes) -> int:
  import google_crc32c  # pylint: disable=import-outside-toplevel  (a dependency of the project)
  crc = google_crc32c.value(data)
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord_frame(data: bytes) -> bytes:
  """One record in TFRecord framing, ready to append to a file."""
  length = struct.pack("<Q", len(data))
  return (length + struct.pack("<I", _masked_crc(length)) + data
          + struct.pack("<I", _masked_crc(data)))


def write_tfrecords(path: str, items: Iterable[bytes]) -> int:
  """Writes one uncompressed TFRecord file (local path); returns the number of records."""
  n = 0
  with open(path, "wb") as f:
    for data in items:
      f.write(tfrecord_frame(data))
      n += 1
  return n


def _open_binary(path: str):
  if "://" in path:
    from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
    return FileSystems.open(path)
  return open(path, "rb")


def read_tfrecords(paths: Sequence[str]) -> Iterator[bytes]:
  """The records of uncompressed TFRecord files, in order; a bad length or CRC is a
  ValueError naming the file and the record."""
  for path in paths:
    with _open_binary(path) as f:
      index = 0
      while True:
        head = f.read(12)
        if not head:
          break
        if len(head) < 12:
          raise ValueError(f"{path}: record {index}: truncated header")
        length, length_crc = struct.unpack("<QI", head)
        if _masked_crc(head[:8]) != length_crc:
          raise ValueError(f"{path}: record {index}: corrupt length (CRC mismatch)")
        data = f.read(length)
        tail = f.read(4)
        if len(data) < length or len(tail) < 4:
          raise ValueError(f"{path}: record {index}: truncated data")
        if _masked_crc(data) != struct.unpack("<I", tail)[0]:
          raise ValueError(f"{path}: record {index}: corrupt data (CRC mismatch)")
        yield data
        index += 1


def read_pairs(pattern: str | Sequence[str]) -> Iterator[Pair]:
  """Every Pair of the TFRecord shards matching `pattern` (e.g. layout.pairs_pattern), or of
  a list of shards (pair_files)."""
  files = tio.match_files(pattern, missing_ok=True) if isinstance(pattern, str) else pattern
  for data in read_tfrecords(files):
    yield decode_pair(data)


def pair_files(pairs_out: str, task: str, split: str) -> list[str]:
  """The pair shards of a task and split in a pair pipeline output (may be empty)."""
  return manifests.listed_files(pairs_out, layout.pairs_pattern(pairs_out, task, split))


def passage_files(path: str) -> list[str]:
  """The passages shards of a pair pipeline output dir, its passages/ dir, a file or a glob
  (may be empty)."""
  return manifests.listed_files(layout.pairs_out_dir(path), layout.passages_pattern(path))


def write_pairs(prefix: str, pairs: Sequence[Pair], shards: int = 1) -> list[str]:
  """Writes pairs round-robin to `<prefix>-SSSSS-of-NNNNN.tfrecord` (local), as the pipelines
  name their shards; returns the paths."""
  import os  # pylint: disable=import-outside-toplevel
  os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
  paths = [f"{prefix}-{i:05d}-of-{shards:05d}{layout.PAIRS_SUFFIX}" for i in range(shards)]
  for i, path in enumerate(paths):
    write_tfrecords(path, (encode_pair(p) for p in pairs[i::shards]))
  return paths


# ---------------------------------------------------------------------------------------------
# Parquet rows.
# ---------------------------------------------------------------------------------------------


#: The columns that tell each Parquet layout of the contracts apart, by what a reader wants:
#: a file of another kind (a candidates file given as questions) is named as such.
PARQUET_KINDS = {
    "passages": ("page_id", "passage_id", "text"),
    "candidates": ("candidate_id", "sentence", "passage"),
    "questions": ("question_id", "question", "gold_candidate_ids"),
    "embeddings": ("id", "embedding"),
}


def parquet_kind(names: Sequence[str]) -> str | None:
  """Which contract layout a Parquet file with these column names is, or None."""
  return next((kind for kind, needed in PARQUET_KINDS.items()
               if set(needed) <= set(names)), None)


def require_kind(path: str, names: Sequence[str], kind: str,
                 needed: Sequence[str] | None = None) -> None:
  """A ValueError naming the file, what it holds and what was expected, unless it has the
  columns of `kind` (PARQUET_KINDS), or `needed` where a reader needs fewer."""
  needed = tuple(needed or PARQUET_KINDS[kind])
  if any(c not in names for c in needed):
    found = parquet_kind(names)
    what = f"a {found} file" if found else f"columns {', '.join(names) or 'none'}"
    raise ValueError(f"{path}: expected {kind} (columns {', '.join(needed)}), found {what}")


def _parquet_rows(pattern: str | Sequence[str], columns: Sequence[str] | None = None,
                  kind: str | None = None) -> Iterator[dict]:
  """Rows of every file matching `pattern` (or of a list of files); with `kind`, a file of
  another layout is a named ValueError before any of its rows is read."""
  for path in tio.match_files(pattern, missing_ok=True) if isinstance(pattern, str) else pattern:
    pf = tio.open_parquet(path)
    if kind:
      require_kind(path, pf.schema_arrow.names, kind)
    for i in range(pf.num_row_groups):
      yield from pf.read_row_group(i, columns=list(columns) if columns else None).to_pylist()


def read_passages(path: str, columns: Sequence[str] | None = None) -> Iterator[records.Passage]:
  """Passages of a pair pipeline output dir, its passages/ dir, a file or a glob, streamed
  one row group at a time. With `columns` (page_id and passage_id always among them), only
  those are read; the others keep Passage.from_row's empty defaults."""
  if columns is not None:
    columns = ["page_id", "passage_id", *(c for c in columns if c not in ("page_id",
                                                                          "passage_id"))]
  for row in _parquet_rows(passage_files(path), columns, kind="passages"):
    yield records.Passage.from_row(row)


def read_questions(reqa_dir: str, split: str) -> tuple[records.Question, ...]:
  path = layout.questions_path(reqa_dir, split)
  if not tio.match_files(path, missing_ok=True):
    raise FileNotFoundError(f"{path}: no such split {split!r}")
  return tuple(records.Question.from_row(r) for r in _parquet_rows(path, kind="questions"))


def read_candidates(reqa_dir: str, columns: Sequence[str] | None = None) -> list[dict]:
  """Rows of candidates.parquet (all columns, or `columns`)."""
  path = layout.candidates_path(reqa_dir)
  if not tio.match_files(path, missing_ok=True):
    raise FileNotFoundError(f"{path}: no candidates (is {reqa_dir} a `twotower reqa` output?)")
  return list(_parquet_rows(path, columns, kind="candidates"))


def read_heldout_percent(pairs_out: str) -> float:
  """The held-out share a pair pipeline output was made with (its config.json); 0 when the
  file is absent (an output of an older version: nothing is known to be held out)."""
  path = layout.pairs_config_path(pairs_out)
  if not tio.match_files(path, missing_ok=True):
    return 0.0
  return float(tio.read_json(path).get("heldout_percent", 0.0))
