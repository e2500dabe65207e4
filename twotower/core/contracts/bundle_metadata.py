"""A retriever bundle's document metadata (`metadata/`, bundle format 3): per document, what
the pipeline knows of it and any extra scalar fields of a JSONL input, laid out for filters.

    BUNDLE/metadata/fields.json        [{"name", "type", "documents", "values_file",
                                         "codes_file"}, ...] and the row count
    BUNDLE/metadata/ids.npy            int64[n], the documents' ids ascending: row i's id
    BUNDLE/metadata/field-NN.codes.npy int32[n], row i's value of field NN as an index into
                                       its values (-1: the document has no such value)
    BUNDLE/metadata/field-NN.values.json the field's distinct values, sorted

    writer = MetadataWriter(); writer.add(doc_id, {"wiki": "enwiki", "page_id": 12}); ...
    fields = writer.write(bundle_dir)                         # -> [FieldInfo] for the manifest
    metadata = Metadata.open(bundle_dir)                      # codes memory-mapped
    rows = metadata.equal("wiki", ["enwiki"])                 # bool[n]
    metadata.ids[rows & metadata.section_under("History")]

Dictionary codes keep a filter to numpy over one int32 column (a million documents: a few
milliseconds), the values sorted make a section-path prefix one contiguous range of codes,
and nothing but the codes of the fields a filter names is read. Field names are the user's
(JSONL keys), so files are numbered, never named after them.

Built-in fields (BUILTIN_FIELDS): page_id (int), title, section (the path of headings,
"History › Early years"), source (squad, nq, wikipedia, ...), wiki (a dump's database name,
enwiki), language (the wiki's language code, en), input (the pair pipeline input, or JSONL
file, the document came from). Each field has one JSON type (str, int, float or bool; an int is
a float's value too, a bool is never a number); a value of another type is refused, naming
the document and the field.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import os
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from twotower.core import files as tio
from twotower.core.contracts.records import SECTION_SEPARATOR

METADATA_DIR = "metadata"
FIELDS_FILE = "fields.json"
IDS_FILE = "ids.npy"
#: The fields a bundle fills from what the pipeline knows; a JSONL input's other keys follow.
BUILTIN_FIELDS = {"page_id": "int", "title": "str", "section": "str", "source": "str",
                  "wiki": "str", "language": "str", "input": "str"}
#: The field a section-path prefix filters on.
SECTION_FIELD = "section"
TYPES = ("str", "int", "float", "bool")
#: Longest field name, and the most fields one bundle stores.
MAX_NAME_CHARS = 64
MAX_FIELDS = 64


def type_of(value: Any) -> Optional[str]:
  """The JSON type name of a scalar (None for null, lists, objects)."""
  if isinstance(value, bool):
    return "bool"
  if isinstance(value, int):
    return "int"
  if isinstance(value, float):
    return "float"
  if isinstance(value, str):
    return "str"
  return None


def accepts(field_type: str, value: Any) -> bool:
  """Whether `value` is a value of a field of `field_type` (an int is a float field's too)."""
  kind = type_of(value)
  return kind == field_type or (field_type == "float" and kind == "int")


def canonical(field_type: str, value: Any) -> Any:
  """`value` as stored: a float field's ints as floats."""
  return float(value) if field_type == "float" else value


@dataclasses.dataclass(frozen=True)
class FieldInfo:
  """One stored field, as the manifest lists it: its name, type, and how many documents have
  a value for it."""
  name: str
  type: str
  documents: int


# ---------------------------------------------------------------------------------------------
# Writing.
# ---------------------------------------------------------------------------------------------


class MetadataWriter:
  """Collects each document's fields, then writes `metadata/` (see the module docstring).

  `types` fixes field types ahead (an update adds to a bundle whose fields are known: a field
  it does not know is refused, `closed=True`); otherwise a field's first value decides it."""

  def __init__(self, types: Optional[Mapping[str, str]] = None, closed: bool = False):
    self.types: dict[str, str] = dict(types or {})
    self.closed = closed
    self._ids: list[int] = []
    self._values: dict[str, dict[Any, int]] = {name: {} for name in self.types}
    self._codes: dict[str, list[int]] = {name: [] for name in self.types}

  def __len__(self) -> int:
    return len(self._ids)

  def check(self, fields: Mapping[str, Any], where: str, declare: bool = False
            ) -> dict[str, Any]:
    """The fields of a document as stored (nulls dropped), or a ValueError naming `where`
    (a file:line, a document id) and the field: an unknown one (closed writer), a name too
    long, or a value that is not a scalar of the field's type. `declare`: a new field's type
    is fixed now (a reader checking a file line by line before the documents are added)."""
    out = {}
    for name, value in fields.items():
      if value is None:
        continue
      if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
        raise ValueError(f"{where}: field name {str(name)[:80]!r} is not 1 to "
                         f"{MAX_NAME_CHARS} characters")
      kind = type_of(value)
      if kind is None:
        raise ValueError(f"{where}: field {name!r} holds a {type(value).__name__}; a "
                         "metadata field holds one string, number or boolean")
      if kind == "float" and not np.isfinite(value):
        raise ValueError(f"{where}: field {name!r} holds {value}, not a finite number")
      want = self.types.get(name)
      if want is None:
        if self.closed:
          known = ", ".join(sorted(self.types)) or "none"
          raise ValueError(f"{where}: unknown field {name!r} (the bundle's fields: {known})")
        new = sum(1 for n in (*out, name) if n not in self.types)
        if len(self.types) + new > MAX_FIELDS:
          raise ValueError(f"{where}: field {name!r} would be field {MAX_FIELDS + 1}; a "
                           f"bundle stores at most {MAX_FIELDS}")
      elif not accepts(want, value):
        raise ValueError(f"{where}: field {name!r} is {want}, got {kind} "
                         f"{json.dumps(value)[:40]}")
      out[name] = value
    if declare:
      for name, value in out.items():
        self.types.setdefault(name, type_of(value))
    return out

  def add(self, doc_id: int, fields: Mapping[str, Any], where: str = "") -> None:
    fields = self.check(fields, where or f"document {doc_id}")
    for name, value in fields.items():
      self.types.setdefault(name, type_of(value))
      if name not in self._codes:
        self._values[name] = {}
        self._codes[name] = [-1] * len(self._ids)
    for name, codes in self._codes.items():
      if name in fields:
        value = canonical(self.types[name], fields[name])
        table = self._values[name]
        codes.append(table.setdefault(value, len(table)))
      else:
        codes.append(-1)
    self._ids.append(int(doc_id))

  def write(self, bundle_dir: str, order: Sequence[str] = ()) -> list[FieldInfo]:
    """Writes `bundle_dir/metadata/` (a new folder); returns the fields in file order:
    `order` first (the built-in fields), then the others by name."""
    folder = os.path.join(bundle_dir, METADATA_DIR)
    os.makedirs(folder)
    ids = np.asarray(self._ids, dtype=np.int64)
    by_id = np.argsort(ids, kind="stable")
    ids = ids[by_id]
    if len(ids) > 1 and (repeat := np.flatnonzero(ids[1:] == ids[:-1])).size:
      raise ValueError(f"document id {ids[repeat[0]]} repeats")
    np.save(os.path.join(folder, IDS_FILE), ids)
    names = [n for n in order if n in self._codes] + sorted(n for n in self._codes
                                                            if n not in order)
    infos, listing = [], []
    for number, name in enumerate(names):
      values = sorted(self._values[name])
      remap = np.full(len(values) + 1, -1, dtype=np.int32)  # provisional code -> sorted
      for new, value in enumerate(values):
        remap[self._values[name][value]] = new
      codes = np.asarray(self._codes[name], dtype=np.int64)[by_id]
      codes = np.where(codes >= 0, remap[np.maximum(codes, 0)], -1).astype(np.int32)
      stem = f"field-{number:02d}"
      np.save(os.path.join(folder, f"{stem}.codes.npy"), codes)
      tio.write_json(os.path.join(folder, f"{stem}.values.json"), values)
      info = FieldInfo(name, self.types[name], int((codes >= 0).sum()))
      infos.append(info)
      listing.append({**dataclasses.asdict(info), "codes_file": f"{stem}.codes.npy",
                      "values_file": f"{stem}.values.json"})
    tio.write_json(os.path.join(folder, FIELDS_FILE), {"documents": int(len(ids)),
                                                       "fields": listing})
    return infos


# ---------------------------------------------------------------------------------------------
# Reading.
# ---------------------------------------------------------------------------------------------


class Metadata:
  """`metadata/` opened: the ids and each field's codes memory-mapped, values read on first
  use. Row i is the document `ids[i]`."""

  def __init__(self, folder: str, ids: np.ndarray, listing: Sequence[dict]):
    self.folder = folder
    self.ids = ids
    self.fields = {f["name"]: FieldInfo(f["name"], f["type"], int(f["documents"]))
                   for f in listing}
    self._files = {f["name"]: (f["codes_file"], f["values_file"]) for f in listing}
    self._codes: dict[str, np.ndarray] = {}
    self._values: dict[str, list] = {}

  @classmethod
  def open(cls, bundle_dir: str) -> "Metadata":
    """Raises ValueError naming the file when the part is not what the writer writes."""
    folder = os.path.join(bundle_dir, METADATA_DIR)
    listing = tio.read_json(os.path.join(folder, FIELDS_FILE))
    if not isinstance(listing, dict) or not isinstance(listing.get("fields"), list):
      raise ValueError(f"{folder}/{FIELDS_FILE}: not a metadata field list")
    ids = np.load(os.path.join(folder, IDS_FILE), mmap_mode="r")
    if ids.dtype != np.int64 or ids.shape != (listing.get("documents"),):
      raise ValueError(f"{folder}/{IDS_FILE}: expected int64[{listing.get('documents')}], got "
                       f"{ids.dtype}{ids.shape}")
    return cls(folder, ids, listing["fields"])

  def __len__(self) -> int:
    return len(self.ids)

  def codes(self, name: str) -> np.ndarray:
    if name not in self._codes:
      codes = np.load(os.path.join(self.folder, self._files[name][0]), mmap_mode="r")
      if codes.shape != self.ids.shape:
        raise ValueError(f"{self.folder}/{self._files[name][0]}: {codes.shape[0]} rows for "
                         f"{len(self.ids)} documents")
      self._codes[name] = codes
    return self._codes[name]

  def values(self, name: str) -> list:
    if name not in self._values:
      self._values[name] = tio.read_json(os.path.join(self.folder, self._files[name][1]))
    return self._values[name]

  def code_of(self, name: str, value: Any) -> int:
    """The code of `value` in field `name`, -1 when no document has it."""
    values = self.values(name)
    value = canonical(self.fields[name].type, value)
    at = bisect.bisect_left(values, value)
    return at if at < len(values) and values[at] == value else -1

  def equal(self, name: str, wanted: Iterable[Any]) -> np.ndarray:
    """bool[n]: rows whose field `name` is one of `wanted`."""
    codes = [c for c in (self.code_of(name, v) for v in wanted) if c >= 0]
    if not codes:
      return np.zeros(len(self.ids), dtype=bool)
    return np.isin(self.codes(name), np.asarray(codes, dtype=np.int32))

  def section_under(self, prefix: str) -> np.ndarray:
    """bool[n]: rows whose section path is `prefix` or lies under it ("History" takes
    "History" and "History › Early years", not "Historiography")."""
    if SECTION_FIELD not in self.fields:
      return np.zeros(len(self.ids), dtype=bool)
    values = self.values(SECTION_FIELD)
    rows = np.zeros(len(self.ids), dtype=bool)
    codes = self.codes(SECTION_FIELD)
    exact = self.code_of(SECTION_FIELD, prefix)
    if exact >= 0:
      rows |= codes == exact
    below = prefix + SECTION_SEPARATOR
    lo = bisect.bisect_left(values, below)
    hi = bisect.bisect_left(values, below + "\U0010ffff")
    if lo < hi:
      rows |= (codes >= lo) & (codes < hi)
    return rows

  def rows_of(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, found) of document ids."""
    ids = np.asarray(ids, dtype=np.int64)
    if not len(self.ids):
      return np.zeros(len(ids), np.int64), np.zeros(len(ids), bool)
    at = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
    return at, self.ids[at] == ids

  def write_updated(self, keep: np.ndarray, added: Sequence[tuple[int, Mapping[str, Any]]],
                    bundle_dir: str) -> list[FieldInfo]:
    """Writes `bundle_dir/metadata/` for this metadata's rows where `keep` is True plus the
    `added` documents (their fields checked already, MetadataWriter.check): the files a
    build from scratch over the same documents writes, without a pass in Python over the
    kept rows (codes are remapped as arrays)."""
    folder = os.path.join(bundle_dir, METADATA_DIR)
    os.makedirs(folder)
    kept_ids = np.asarray(self.ids[keep], dtype=np.int64)
    ids = np.concatenate([kept_ids, np.asarray([a for a, _ in added], dtype=np.int64)])
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    if len(ids) > 1 and (repeat := np.flatnonzero(ids[1:] == ids[:-1])).size:
      raise ValueError(f"document id {ids[repeat[0]]} repeats")
    np.save(os.path.join(folder, IDS_FILE), ids)
    infos, listing = [], []
    for number, (name, info) in enumerate(self.fields.items()):
      kind = info.type
      fresh = [None if fields.get(name) is None else canonical(kind, fields[name])
               for _, fields in added]
      old_values = self.values(name)
      old_codes = np.asarray(self.codes(name)[keep], dtype=np.int64)
      pool = list(old_values) + [v for v in fresh if v is not None]
      position = {v: i for i, v in enumerate(dict.fromkeys(pool))}
      old_map = np.asarray([position[v] for v in old_values] + [-1], dtype=np.int64)
      codes = np.concatenate([np.where(old_codes >= 0, old_map[old_codes], -1),
                              np.asarray([-1 if v is None else position[v] for v in fresh],
                                         dtype=np.int64)])[order]
      # Only the values some document still has, sorted, as a fresh build writes them.
      distinct = list(position)
      used = np.unique(codes[codes >= 0])
      values = sorted(distinct[u] for u in used.tolist())
      remap = np.full(len(distinct) + 1, -1, dtype=np.int64)
      for new, value in enumerate(values):
        remap[position[value]] = new
      codes = np.where(codes >= 0, remap[np.maximum(codes, 0)], -1).astype(np.int32)
      stem = f"field-{number:02d}"
      np.save(os.path.join(folder, f"{stem}.codes.npy"), codes)
      tio.write_json(os.path.join(folder, f"{stem}.values.json"), values)
      out = FieldInfo(name, kind, int((codes >= 0).sum()))
      infos.append(out)
      listing.append({**dataclasses.asdict(out), "codes_file": f"{stem}.codes.npy",
                      "values_file": f"{stem}.values.json"})
    tio.write_json(os.path.join(folder, FIELDS_FILE), {"documents": int(len(ids)),
                                                       "fields": listing})
    return infos

  def row_fields(self, row: int) -> dict[str, Any]:
    """Every stored field of one row (missing ones left out)."""
    out = {}
    for name in self.fields:
      code = int(self.codes(name)[row])
      if code >= 0:
        out[name] = self.values(name)[code]
    return out


def language_of(wiki: str) -> str:
  """A wiki database name's language code: enwiki -> en, ltgwiki -> ltg ("" otherwise)."""
  return wiki[:-len("wiki")] if wiki.endswith("wiki") and len(wiki) > len("wiki") else ""
