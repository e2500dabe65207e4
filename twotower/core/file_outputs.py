"""Outputs that are files, not a folder: vocab, index, search, fuse and query write a main
file (and its shards), hardneg a set of files in another stage's folder. The rules are
`outputs`' (see its docstring), judged by the manifest beside the main file,
`<main>.twotower.json`.

    check_file(main, stage, settings)    the checks alone, before a stage's work
    owned_files(main, stage, settings)   the block that writes the files and records them
    atomic_text(path)                    a streamed file output, renamed into place at its end
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from typing import Any, Iterator, Mapping, Sequence, TextIO

from twotower.core import files as tio
from twotower.core.contracts import manifests
from twotower.core.contracts.manifests import file_manifest_path
from twotower.core.outputs import MANIFEST_VERSION, check_inputs, differences, discard, plain

logger = logging.getLogger(__name__)


def check_file(main: str, stage: str, settings: Mapping[str, Any], *,
               overwrite: bool = False, inputs: Sequence[str] = ()) -> dict | None:
  """The checks of `owned_files`, alone: a stage calls it before its work (search, fuse,
  query), so that a refused --out costs nothing; returns the manifest beside `main` (None:
  none, or an unreadable one replaced with `overwrite`).

  Raises:
    ValueError: as owned_files.
  """
  check_inputs(main, inputs, file=True)
  if tio.is_local(main) and os.path.isdir(main):
    raise ValueError(f"{main}: is a folder; --out is a file")
  try:
    manifest = manifests.read_file_manifest(main)
  except ValueError:
    if not overwrite:
      raise
    manifest = None
  problem = None
  if manifest is not None and manifest["stage"] != stage:
    raise ValueError(f"{main}: is the output of `twotower {manifest['stage']}`; give another "
                     f"--out (--overwrite replaces only a `twotower {stage}` output)")
  if manifest is None and manifests.exists(main):
    problem = "exists, and no twotower stage recorded how it was made"
  elif manifest is not None:
    diff = differences(manifest.get("settings", {}), settings)
    if diff:
      problem = f"was made by a `twotower {stage}` run with other settings ({'; '.join(diff)})"
  if problem and not overwrite:
    raise ValueError(f"{main}: {problem}; give another --out, or --overwrite to replace it")
  if problem:
    logger.warning("--overwrite: replacing %s (it %s)", main, problem)
  return manifest


@contextlib.contextmanager
def owned_files(main: str, stage: str, settings: Mapping[str, Any], *,
                overwrite: bool = False, inputs: Sequence[str] = ()) -> Iterator[list[str]]:
  """For a stage whose --out is a file (vocab, index, search, fuse, query) or a set of files
  in another stage's folder (hardneg): the rules of `claim`, judged by the manifest beside
  `main`.

  An output that is one of `inputs` (or a folder that holds one) is refused. An existing
  `main` without a manifest (a file of the user's, or an output older than manifests) is
  refused unless `overwrite` (the user named that file: it is replaced); another stage's
  output is refused. The block appends the paths
  it writes (each written atomically) to the list it is given; at its end the manifest lists
  them and the files of this stage's run before that are not among them are removed (a
  4-shard index replaced by a 1-shard one). Before the block, the manifest says "this run,
  files pending": an interrupted run is re-run with the same settings, not refused."""
  manifest = check_file(main, stage, settings, overwrite=overwrite, inputs=inputs)
  before = [manifests.beside(main, f) for f in (manifest or {}).get("files", [])]
  path = file_manifest_path(main)
  previous = tio.read_text(path) if manifests.exists(path) else None
  made = _missing_root(path)
  written: list[str] = []
  _write_file_manifest(main, stage, settings, inputs, files=None)
  try:
    yield written
  except BaseException:
    if not written:  # nothing replaced yet: the old record stays true, no folder is left
      if previous is None:
        discard(path)
      else:
        tio.write_text(path, previous)
      if made and not any(files for _, _, files in os.walk(made)):
        discard(made)  # folders this run made, holding no file
    raise
  for stale in sorted(set(before) - set(written)):
    if manifests.exists(stale):
      discard(stale)
  _write_file_manifest(main, stage, settings, inputs, files=written)


@contextlib.contextmanager
def atomic_text(path: str) -> Iterator[TextIO]:
  """A local text file written as a stream (`query --out`): into a temp file beside
  `path`, renamed over it when the block ends; a failure (a bad line half-way) or an
  interrupt leaves `path` as it was and no temp file."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
  try:
    with os.fdopen(fd, "w", encoding="utf-8") as f:
      yield f
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600: the mode a plain open() gives
    os.replace(tmp, path)
  finally:
    discard(tmp)  # still there: the block did not end


def _missing_root(path: str) -> str | None:
  """The outermost folder above local `path` that does not exist yet (None: all do)."""
  if not tio.is_local(path):
    return None
  missing = None
  parent = os.path.dirname(os.path.abspath(path))
  while not os.path.exists(parent):
    missing, parent = parent, os.path.dirname(parent)
  return missing


def _write_file_manifest(main: str, stage: str, settings: Mapping[str, Any],
                         inputs: Sequence[str], files: Sequence[str] | None) -> None:
  """`files` None: pending (the run has not finished)."""
  tio.write_json(file_manifest_path(main), {
      "version": MANIFEST_VERSION, "stage": stage, "settings": plain(settings),
      "inputs": list(inputs), "pending": files is None,
      "files": [f.replace("\\", "/").rsplit("/", 1)[-1] for f in files or ()]})
