"""Grid files: `twotower/experiment/grids/<name>.yaml` (or any YAML file) -> the grid's name
and its mapping, with the grid it `extends` laid under it. grid.parse turns the mapping into a
GridSpec."""

from __future__ import annotations

import dataclasses
import importlib.resources
import os
from typing import Any, Iterable, Mapping, Union

import yaml


def as_tuple(value) -> tuple:
  """A YAML value that may be one item or a list, as a tuple (None: empty)."""
  if value is None:
    return ()
  return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def known_fields(raw: Mapping[str, Any], known: Union[type, Iterable[str]], where: str) -> dict:
  """`raw` as a dict, or a ValueError naming its unknown fields and the known ones (`known`:
  the names, or the dataclass whose fields they are)."""
  names = ({f.name for f in dataclasses.fields(known)} if dataclasses.is_dataclass(known)
           else set(known))
  unknown = sorted(set(raw) - names)
  if unknown:
    raise ValueError(f"{where}: unknown field(s) {unknown}; known: {sorted(names)}")
  return dict(raw)


def grid_names() -> list[str]:
  files = importlib.resources.files("twotower.experiment") / "grids"
  return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".yaml"))


def _read(name_or_path: str) -> tuple[str, str]:
  if os.path.exists(name_or_path) or name_or_path.endswith((".yaml", ".yml")):
    with open(name_or_path, encoding="utf-8") as f:
      return os.path.splitext(os.path.basename(name_or_path))[0], f.read()
  resource = importlib.resources.files("twotower.experiment") / "grids" / \
      f"{name_or_path}.yaml"
  if not resource.is_file():
    raise ValueError(f"--grid {name_or_path!r} is neither a file nor a grid; grids: "
                     f"{', '.join(grid_names())}")
  return name_or_path, resource.read_text(encoding="utf-8")


#: A grid file's key naming the grid it builds on (`extends: cpu-small`).
EXTENDS = "extends"


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict:
  """`base` with `over` laid on it: mappings merge key by key (recursively), anything else
  (a list, a number, a string) is replaced; a key set to null in `over` is dropped, and a
  list under `<key>+` is appended to `base`'s `<key>`."""
  out = dict(base)
  for key, value in over.items():
    if key.endswith("+"):
      key = key[:-1]
      if not isinstance(value, list) or not isinstance(out.get(key, []), list):
        raise ValueError(f"`{key}+` appends a list to the list `{key}`; got {value!r}")
      out[key] = list(out.get(key) or []) + value
    elif value is None:
      out.pop(key, None)
    elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
      out[key] = _merged(out[key], value)
    else:
      out[key] = value
  return out


def _read_merged(name_or_path: str, seen: tuple[str, ...] = ()) -> tuple[str, dict]:
  name, text = _read(name_or_path)
  if name in seen:
    raise ValueError(f"grid {seen[0]}: `{EXTENDS}` goes round in a circle "
                     f"({' -> '.join(seen + (name,))})")
  raw = yaml.safe_load(text) or {}
  if not isinstance(raw, dict):
    raise ValueError(f"grid {name}: expected a mapping at the top level")
  parent = raw.pop(EXTENDS, None)
  if parent is None:
    return name, raw
  _, base = _read_merged(str(parent), seen + (name,))
  return name, _merged(base, raw)


#: A grid file's mapping of named caveats: a row's or reading's `caveat: <name>` is that text.
CAVEATS = "caveats"


def _with_named_caveats(name: str, raw: dict) -> dict:
  """Each `caveat: <name>` of a system or reading replaced by the text of `caveats: {<name>:
  ...}`. A caveat said once by name is restated once by a grid that extends this one (its
  `caveats` merge key by key), where a YAML anchor would be restated at every use, readings
  included (a list the extending grid would have to copy whole)."""
  named = raw.pop(CAVEATS, None) or {}
  if not isinstance(named, Mapping):
    raise ValueError(f"grid {name}: `{CAVEATS}` is a mapping of name: text")

  def resolve(item: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    caveat = item.get("caveat") if isinstance(item, Mapping) else None
    if not isinstance(caveat, str) or caveat.strip() != caveat or " " in caveat:
      return item   # none, or a caveat's own text
    if caveat not in named:
      raise ValueError(f"grid {name}: {where} caveat {caveat!r} names no caveat of "
                       f"`{CAVEATS}` ({', '.join(sorted(named)) or 'none'})")
    return {**item, "caveat": named[caveat]}

  systems = raw.get("systems") or {}
  if isinstance(systems, Mapping):
    raw["systems"] = {k: resolve(v, f"system {k!r}") for k, v in systems.items()}
  readings = raw.get("readings") or []
  if isinstance(readings, list):
    raw["readings"] = [resolve(c, f"reading {c.get('id', '?')!r}")
                       if isinstance(c, Mapping) else c for c in readings]
  return raw


def read(name_or_path: str) -> tuple[str, dict]:
  """The grid's name and mapping, with the grid it `extends` (a grid name or a file) merged
  under it and its named caveats in place."""
  name, raw = _read_merged(name_or_path)
  return name, _with_named_caveats(name, raw)
