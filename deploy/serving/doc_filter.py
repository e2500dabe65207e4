"""Metadata filters of a search: what a request may ask, checked against a bundle's fields,
and resolved into the ids a search may return (twotower.core.searching.Restriction).

    {"fields": {"wiki": "enwiki", "page_id": [12, 40]},   equality, or membership in a list
     "section_prefix": "History",                          the section path, or one under it
     "ids": [3, 17], "exclude_ids": [40]}                  document ids to keep / to drop

Every condition given must hold (AND); a list is any of its values (OR). The same JSON is the
`filter` of POST /v1/search (and of GET /v1/search, URL-encoded), of `twotower query
--filter`, and of a `--jsonl` query line; in Python, `DocFilter.from_json(value)` or
`DocFilter(fields=(("wiki", ("enwiki",)),))`.

Refusals name what was wrong, in one line: the shape (`DocFilter.from_json`: an unknown key,
a list that is empty or too long, an id that is not an integer), and, against the bundle
(`check`): a field the bundle does not store, a value of another type than the field's, ids
the bundle does not hold. A bundle of format 2 stores no fields: only `ids` and `exclude_ids`
filter it.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import threading
from typing import Any, Callable, Mapping, Optional

import numpy as np

from twotower.core.contracts import bundle_metadata
from twotower.core.searching import Restriction

#: The filter's keys.
KEYS = ("fields", "section_prefix", "ids", "exclude_ids")
#: Most values one field's list, and one id list, may hold.
MAX_VALUES = 1024
MAX_IDS = 100_000
#: Longest string value (a title, a section path) a filter may name.
MAX_VALUE_CHARS = 1000
#: Resolved filters kept per bundle, most recent first.
CACHE = 64


def _shown(value: Any) -> str:
  text = json.dumps(value, ensure_ascii=False, default=str)
  return text if len(text) <= 40 else text[:39] + "…"


def _int_id(value: Any, where: str) -> int:
  if isinstance(value, bool) or not isinstance(value, int):
    raise ValueError(f"{where} must be an integer document id, got {_shown(value)}")
  if not -2 ** 63 <= value < 2 ** 63:
    raise ValueError(f"{where} is out of the int64 range")
  return value


def _id_list(value: Any, where: str) -> tuple[int, ...]:
  if not isinstance(value, list):
    raise ValueError(f"'{where}' must be a list of document ids, got {_shown(value)}")
  if len(value) > MAX_IDS:
    raise ValueError(f"'{where}' holds {len(value)} ids; the limit is {MAX_IDS}")
  return tuple(sorted({_int_id(v, f"'{where}'[{i}]") for i, v in enumerate(value)}))


def _scalar(value: Any, where: str) -> Any:
  if bundle_metadata.type_of(value) is None:
    raise ValueError(f"{where} must be a string, number or boolean, got {_shown(value)}")
  if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
    raise ValueError(f"{where} has {len(value)} characters; the limit is {MAX_VALUE_CHARS}")
  if isinstance(value, float) and not np.isfinite(value):
    raise ValueError(f"{where} is not a finite number")
  return value


@dataclasses.dataclass(frozen=True)
class DocFilter:
  """A filter (see the module docstring): `fields` as (name, values) pairs sorted by name, one
  value for equality; ids sorted. Frozen and hashable: equal filters batch together."""
  fields: tuple[tuple[str, tuple[Any, ...]], ...] = ()
  section_prefix: Optional[str] = None
  ids: Optional[tuple[int, ...]] = None
  exclude_ids: Optional[tuple[int, ...]] = None

  @classmethod
  def from_json(cls, value: Any) -> "DocFilter":
    """A filter from its JSON value; ValueError naming the key that is wrong."""
    if not isinstance(value, dict):
      raise ValueError(f"'filter' must be an object such as {{\"fields\": {{\"wiki\": "
                       f"\"enwiki\"}}}}, got {_shown(value)}")
    unknown = sorted(k for k in value if k not in KEYS)
    if unknown:
      raise ValueError(f"'filter' has unknown key(s) {unknown}; expected some of "
                       f"{list(KEYS)}")
    fields: list[tuple[str, tuple[Any, ...]]] = []
    given = value.get("fields")
    if given is not None:
      if not isinstance(given, dict) or not given:
        raise ValueError("'filter.fields' must be a non-empty object of field -> value (or a "
                         "list of values)")
      for name, wanted in sorted(given.items()):
        where = f"'filter.fields.{name}'"
        if isinstance(wanted, list):
          if not wanted:
            raise ValueError(f"{where} is an empty list: nothing could match")
          if len(wanted) > MAX_VALUES:
            raise ValueError(f"{where} holds {len(wanted)} values; the limit is {MAX_VALUES}")
          values = tuple(_scalar(v, f"{where}[{i}]") for i, v in enumerate(wanted))
        else:
          values = (_scalar(wanted, where),)
        fields.append((name, values))
    prefix = value.get("section_prefix")
    if prefix is not None:
      if not isinstance(prefix, str) or not prefix.strip():
        raise ValueError(f"'filter.section_prefix' must be a non-empty string, got "
                         f"{_shown(prefix)}")
      _scalar(prefix, "'filter.section_prefix'")
    ids = value.get("ids")
    exclude = value.get("exclude_ids")
    filt = cls(tuple(fields), prefix,
               None if ids is None else _id_list(ids, "filter.ids"),
               None if exclude is None else _id_list(exclude, "filter.exclude_ids"))
    if filt.empty:
      raise ValueError("'filter' is empty; give fields, section_prefix, ids or exclude_ids")
    return filt

  @classmethod
  def parse(cls, text: str) -> "DocFilter":
    """A filter from JSON text (the CLI's --filter, a GET parameter)."""
    try:
      value = json.loads(text)
    except json.JSONDecodeError as e:
      raise ValueError(f"'filter' is not JSON ({e.msg} at character {e.pos})") from None
    return cls.from_json(value)

  @property
  def empty(self) -> bool:
    return not self.fields and self.section_prefix is None and self.ids is None and \
        self.exclude_ids is None

  @property
  def needs_metadata(self) -> bool:
    return bool(self.fields) or self.section_prefix is not None

  def to_json(self) -> dict:
    out: dict[str, Any] = {}
    if self.fields:
      out["fields"] = {name: values[0] if len(values) == 1 else list(values)
                       for name, values in self.fields}
    if self.section_prefix is not None:
      out["section_prefix"] = self.section_prefix
    if self.ids is not None:
      out["ids"] = list(self.ids)
    if self.exclude_ids is not None:
      out["exclude_ids"] = list(self.exclude_ids)
    return out


class FilterResolver:
  """One bundle's filters: checked against its fields and ids, resolved into Restrictions
  (cached: a repeated filter costs a dictionary lookup). `metadata` None: a format-2 bundle;
  `ids` gives the bundle's document ids, sorted (called once, when an id list is first
  checked); `tombstones` ids every search leaves out."""

  def __init__(self, metadata: Optional[bundle_metadata.Metadata],
               ids: Callable[[], np.ndarray], types: Mapping[str, str],
               tombstones: Optional[np.ndarray] = None):
    self.metadata = metadata
    self._ids_of = ids
    self._ids: Optional[np.ndarray] = None
    self.types = dict(types)
    self.tombstones = tombstones if tombstones is not None and len(tombstones) else None
    self._cache: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()

  def check(self, filt: DocFilter) -> None:
    """ValueError naming the field (or the ids) the bundle cannot filter by."""
    if filt.needs_metadata and self.metadata is None:
      raise ValueError("this bundle stores no document fields (bundle format 2): filter it by "
                       "'ids' and 'exclude_ids' only, or rebuild it with `twotower bundle`")
    for name, values in filt.fields:
      if name not in self.types:
        known = ", ".join(sorted(self.types)) or "none"
        raise ValueError(f"'filter.fields.{name}': the bundle has no field {name!r} (its "
                         f"fields: {known})")
      want = self.types[name]
      for value in values:
        if not bundle_metadata.accepts(want, value):
          raise ValueError(f"'filter.fields.{name}' is {want}, got "
                           f"{bundle_metadata.type_of(value)} {_shown(value)}")
    if filt.section_prefix is not None and bundle_metadata.SECTION_FIELD not in self.types:
      raise ValueError("'filter.section_prefix': the bundle stores no section paths")
    for key, ids in (("ids", filt.ids), ("exclude_ids", filt.exclude_ids)):
      if ids:
        missing = np.setdiff1d(np.asarray(ids, dtype=np.int64), self.ids(), assume_unique=True)
        if missing.size:
          raise ValueError(f"'filter.{key}': {missing.size} id(s) not in the bundle (first: "
                           f"{int(missing[0])})")

  def ids(self) -> np.ndarray:
    with self._lock:
      if self._ids is None:
        self._ids = np.asarray(self._ids_of(), dtype=np.int64)
      return self._ids

  def restriction(self, filt: Optional[DocFilter]) -> Optional[Restriction]:
    """The ids a search under `filt` may return (tombstones always left out); None: any."""
    if filt is None:
      return None if self.tombstones is None else Restriction.excluding(self.tombstones)
    with self._lock:
      if filt in self._cache:
        self._cache.move_to_end(filt)
        return self._cache[filt]
    restriction = self._resolve(filt).also_excluding(self.tombstones)
    with self._lock:
      self._cache[filt] = restriction
      while len(self._cache) > CACHE:
        self._cache.popitem(last=False)
    return restriction

  def _resolve(self, filt: DocFilter) -> Restriction:
    exclude = None if filt.exclude_ids is None else np.asarray(filt.exclude_ids, np.int64)
    if not filt.needs_metadata:
      if filt.ids is None:
        return Restriction.excluding(exclude)
      return Restriction.including(np.asarray(filt.ids, np.int64), exclude)
    metadata = self.metadata
    rows = np.ones(len(metadata), dtype=bool)
    for name, values in filt.fields:
      rows &= metadata.equal(name, values)
    if filt.section_prefix is not None:
      rows &= metadata.section_under(filt.section_prefix)
    include = np.asarray(metadata.ids[rows])
    if filt.ids is not None:
      include = np.intersect1d(include, np.asarray(filt.ids, np.int64), assume_unique=True)
    return Restriction.including(include, exclude)
