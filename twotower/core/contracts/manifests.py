"""Reading the manifests that say which files an output holds: `<out>/_twotower.json` in a
folder (layout.MANIFEST_FILE), `<main>.twotower.json` beside a file output
(layout.FILE_MANIFEST_SUFFIX). Writing them, and every rule of who owns what, is
twotower.core.outputs'; this module only reads, so that a reader of an output (codecs, eval,
training) needs nothing above the contracts.

    read_manifest(out) / read_file_manifest(main)   the manifest, or None
    listed(out) / listed_beside(main)               the paths it lists, or None
    listed_files(out, pattern, main)                the files of an output a reader takes
"""

from __future__ import annotations

import fnmatch
import os

from twotower.core import files as tio
from twotower.core.contracts import layout


def manifest_path(out: str) -> str:
  return f"{out.rstrip('/')}/{layout.MANIFEST_FILE}"


def file_manifest_path(main: str) -> str:
  return f"{main}{layout.FILE_MANIFEST_SUFFIX}"


def exists(path: str) -> bool:
  """A file (or folder) at `path`, on any filesystem."""
  if tio.is_local(path):
    return os.path.exists(path)
  return bool(tio.match_files(path, missing_ok=True))


def read(path: str) -> dict | None:
  """The manifest at `path`, or None when there is none.

  Raises:
    ValueError: the file is there and is not a manifest (names it).
  """
  if not exists(path):
    return None
  try:
    manifest = tio.read_json(path)
  except ValueError as e:
    raise ValueError(f"{path}: not a twotower manifest ({e}); --overwrite to start over") from e
  if not isinstance(manifest, dict) or "stage" not in manifest:
    raise ValueError(f"{path}: not a twotower manifest; --overwrite to start over")
  return manifest


def read_manifest(out: str) -> dict | None:
  """The manifest of folder `out`, or None when it has none."""
  return read(manifest_path(out))


def read_file_manifest(main: str) -> dict | None:
  """The manifest beside file output `main`, or None when there is none."""
  return read(file_manifest_path(main))


def beside(main: str, name: str) -> str:
  """The path of file `name` in the folder of `main`."""
  return os.path.join(os.path.dirname(main), name) if tio.is_local(main) else \
      f"{main.rsplit('/', 1)[0]}/{name}"


def listed(out: str) -> list[str] | None:
  """The paths of the files `out`'s manifest lists, or None when it has no manifest (an
  output the user put together: the reader falls back to its glob)."""
  manifest = read_manifest(out)
  if manifest is None:
    return None
  return [f"{out.rstrip('/')}/{name}" for name in manifest.get("files", [])]


def files_of(out: str) -> tuple[str, ...]:
  """The files its manifest lists in folder `out`; empty where it lists none."""
  return tuple(listed(out) or ())


def listed_beside(main: str) -> list[str] | None:
  """The paths of the files the manifest beside `main` lists, or None when there is none."""
  manifest = read_file_manifest(main)
  if manifest is None:
    return None
  return [beside(main, name) for name in manifest.get("files", [])]


def listed_files(out: str, pattern: str, main: str | None = None) -> list[str]:
  """The files of output folder `out` matching glob `pattern` (a path under `out`) that its
  manifest (or, with `main`, the manifest beside that file) lists, in io.ordered's order:
  a reader never picks up a stray file of another run. A folder without a manifest (files
  the user put together) and object stores (whose manifests list no files) fall back to
  the glob; so does a path without glob characters (read as given). May be empty: the
  caller names what is missing."""
  files = None
  if any(c in pattern for c in "*?[") and tio.is_local(out) and os.path.isdir(out):
    files = listed_beside(main) if main else listed(out)
  if files is None:
    return tio.match_files(pattern, missing_ok=True)
  # Both sides spelled from the same `out` (layout._join strips one trailing slash).
  return tio.ordered(f for f in files if fnmatch.fnmatchcase(f, pattern))
