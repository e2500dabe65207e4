"""A stage owns its output folder: a manifest (`<out>/_twotower.json`,
contracts.MANIFEST_FILE) says which stage wrote the folder, with which settings, from which
inputs, and which files it holds.

    claim(out, stage, settings)        before writing: refuse a folder of another run
    staged(out, stage, settings)       Beam stages: write beside it, then move into place
    write_manifest(out, ...)           training: the manifest of a folder written in place
    owned_files(main, stage, ...)      stages whose output is files, not a folder (vocab,
                                       index, hardneg): the same rules, the manifest beside
                                       the main file (`<main>.twotower.json`)

Rules, one for every stage:
  * an absent or empty folder is the stage's;
  * a folder whose manifest has the same stage and settings is this run's: training resumes
    in it, a Beam stage replaces it whole;
  * anything else (other settings, another stage, files without a manifest) is refused with
    an error naming what differs, unless `overwrite`, which empties the folder first.

Beam stages write into `<out>.tmp-<id>/` beside the folder and rename it into place when the
job has finished, so a reader never sees half a run or two runs mixed (shards of an older run
with another shard count), and an interrupted or failed job leaves nothing (Beam's
`beam-temp-*` folders go with the temporary one). Object stores (gs://) have no rename: there
the stage writes in place, after the same claim.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import logging
import os
import shutil
import uuid
from typing import Any, Iterator, Mapping, Sequence

from twotower import io as tio
from twotower.contracts import layout

logger = logging.getLogger(__name__)

#: Bumped when the manifest's fields change meaning.
MANIFEST_VERSION = 1


def manifest_path(out: str) -> str:
  return f"{out.rstrip('/')}/{layout.MANIFEST_FILE}"


def read_manifest(out: str) -> dict | None:
  """The manifest of folder `out`, or None when it has none."""
  return _read(manifest_path(out))


def _exists(path: str) -> bool:
  if tio.is_local(path):
    return os.path.exists(path)
  try:
    return bool(tio.match_files(path))
  except FileNotFoundError:  # match_files: nothing matches
    return False


def _read(path: str) -> dict | None:
  if not _exists(path):
    return None
  try:
    manifest = tio.read_json(path)
  except ValueError as e:
    raise ValueError(f"{path}: not a twotower manifest ({e}); --overwrite to start over") from e
  if not isinstance(manifest, dict) or "stage" not in manifest:
    raise ValueError(f"{path}: not a twotower manifest; --overwrite to start over")
  return manifest


def _plain(value: Any) -> Any:
  """Settings as JSON gives them back (tuples as lists), so that a comparison with a read
  manifest sees only real differences."""
  if isinstance(value, Mapping):
    return {str(k): _plain(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_plain(v) for v in value]
  return value


def _flat(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  out: dict[str, Any] = {}
  for key, value in settings.items():
    name = f"{prefix}{key}"
    if isinstance(value, Mapping):
      out.update(_flat(value, f"{name}."))
    else:
      out[name] = value
  return out


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
  """`name: old -> new` for each setting (nested ones as section.field) that differs."""
  a, b = _flat(_plain(old)), _flat(_plain(new))
  missing = object()
  return [f"{k}: {a.get(k, '(unset)')!r} -> {b.get(k, '(unset)')!r}"
          for k in sorted(set(a) | set(b)) if a.get(k, missing) != b.get(k, missing)]


def _entries(out: str) -> list[str]:
  return sorted(os.listdir(out)) if os.path.isdir(out) else []


def empty(out: str, keep: Sequence[str] = ()) -> None:
  """Removes everything in `out` but the entries `keep` (the folder itself stays)."""
  for name in _entries(out):
    if name in keep:
      continue
    path = os.path.join(out, name)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path)
    else:
      os.remove(path)


def inside(out: str, paths: Sequence[str]) -> set[str]:
  """The entries of `out` that hold one of `paths` (inputs a caller put in the folder)."""
  found = set()
  for path in paths:
    if tio.is_local(path):
      rel = os.path.relpath(os.path.abspath(path), os.path.abspath(out))
      if not rel.startswith(".."):
        found.add(rel.split(os.sep)[0])
  return found


def claim(out: str, stage: str, settings: Mapping[str, Any], *, overwrite: bool = False,
          legacy: Mapping[str, Any] | None = None, markers: Sequence[str] = (),
          inputs: Sequence[str] = (), empty_on_overwrite: bool = True) -> bool:
  """Checks that `out` may take this run; returns True when it already holds this run (same
  stage and settings: resume or replace), False when it is absent or empty.

  `legacy`: the settings of a folder written before manifests existed, read from the stage's
  own record of them (a training run's config.yaml); None where there is none.
  `markers`: files that together mark this stage's output of a version before manifests
  (reqa: candidates.parquet and stats.json): such a folder is taken as this run's, with a
  warning (its settings are unknown). `inputs`: input files inside `out` (the experiment
  writes a dump there): neither foreign nor removed.
  `empty_on_overwrite`: False where the run replaces the folder whole at its end (`staged`):
  the old output stays readable until then, and stays if the run fails.

  Raises:
    ValueError: the folder holds another run (names each differing setting), another stage's
      output, or files without a manifest; unless `overwrite`, which empties it.
  """
  mine: set[str] = set()
  if not tio.is_local(out):
    manifest = read_manifest(out)
    entries = [layout.MANIFEST_FILE] if manifest else []
  else:
    if os.path.exists(out) and not os.path.isdir(out):
      raise ValueError(f"{out}: is a file; --out is a folder")
    mine = inside(out, inputs)
    entries = [e for e in _entries(out) if e not in mine]
    manifest = read_manifest(out) if entries else None
  if not entries:
    return False
  if manifest is None and legacy is not None:
    manifest = {"stage": stage, "settings": legacy}
  if (manifest is None and markers and tio.is_local(out)
      and all(os.path.exists(os.path.join(out, m)) for m in markers)):
    logger.warning("%s: output of `twotower %s` without a manifest (an older version): its "
                   "settings are unknown; replacing it", out, stage)
    return True
  if manifest is None:
    problem = (f"holds {len(entries)} files or folders ({', '.join(entries[:3])}"
               f"{', ...' if len(entries) > 3 else ''}) that no twotower stage recorded")
  elif manifest["stage"] != stage:
    problem = f"holds the output of `twotower {manifest['stage']}`"
  else:
    diff = differences(manifest.get("settings", {}), settings)
    if not diff:
      return True
    problem = f"holds a `twotower {stage}` run with other settings ({'; '.join(diff)})"
  if not overwrite:
    raise ValueError(f"{out}: {problem}; give another --out, or --overwrite to empty it")
  logger.warning("--overwrite: replacing %s (it %s)", out, problem)
  if tio.is_local(out) and empty_on_overwrite:
    empty(out, keep=mine)
  return False


def files_under(out: str) -> list[str]:
  """Every file under `out`, relative to it, the manifest excepted (local folders)."""
  found = []
  for root, _, names in os.walk(out):
    for name in names:
      rel = os.path.relpath(os.path.join(root, name), out)
      if rel != layout.MANIFEST_FILE:
        found.append(rel.replace(os.sep, "/"))
  return sorted(found)


def write_manifest(out: str, stage: str, settings: Mapping[str, Any],
                   inputs: Sequence[str] = (), files: Sequence[str] | None = None) -> dict:
  """Writes `<out>/_twotower.json` (atomically); `files` default to what `out` holds."""
  manifest = {"version": MANIFEST_VERSION, "stage": stage, "settings": _plain(settings),
              "inputs": list(inputs),
              "files": list(files) if files is not None else
                       (files_under(out) if tio.is_local(out) else [])}
  tio.write_json(manifest_path(out), manifest)
  return manifest


def listed(out: str) -> list[str] | None:
  """The paths of the files `out`'s manifest lists, or None when it has no manifest (an
  older output: the reader falls back to its glob)."""
  manifest = read_manifest(out)
  if manifest is None:
    return None
  return [f"{out.rstrip('/')}/{name}" for name in manifest.get("files", [])]


@dataclasses.dataclass(frozen=True)
class StageResult:
  """What a stage that writes a folder returns (pairs, heldout, reqa, embed): the folder,
  every file it wrote (its manifest's list; empty where the manifest lists none: object
  stores), and its counters as stats.json holds them."""
  out: str
  files: tuple[str, ...]
  stats: dict

  @classmethod
  def of(cls, out: str, stats: dict) -> "StageResult":
    """The result of the run that just wrote `out` (its manifest is in place)."""
    return cls(out, files_of(out), stats)


def files_of(out: str) -> tuple[str, ...]:
  """The files its manifest lists in folder `out`; empty where it lists none."""
  return tuple(listed(out) or ())


def listed_beside(main: str) -> list[str] | None:
  """The paths of the files the manifest beside `main` lists (owned_files), or None when
  there is none."""
  manifest = _read(file_manifest_path(main))
  if manifest is None:
    return None
  return [_beside(main, name) for name in manifest.get("files", [])]


def matching(out: str, pattern: str, main: str | None = None) -> list[str]:
  """The files matching glob `pattern` (a path under `out`) that `out`'s manifest lists (or,
  with `main`, the manifest beside that file: owned_files), sorted: a reader never picks up
  a stray file of another run. A folder without a manifest (an older output, or files the
  user put together) and object stores (whose manifests list no files) fall back to the
  glob. May be empty: the caller names what is missing."""
  files = None
  if tio.is_local(out) and os.path.isdir(out):
    files = listed_beside(main) if main else listed(out)
  if files is None:
    from twotower.contracts import codecs  # pylint: disable=import-outside-toplevel
    return codecs.match(pattern)
  # Both sides spelled from the same `out` (layout._join strips one trailing slash).
  return sorted(f for f in files if fnmatch.fnmatchcase(f, pattern))


@contextlib.contextmanager
def staged(out: str, stage: str, settings: Mapping[str, Any], *, inputs: Sequence[str] = (),
           overwrite: bool = False, markers: Sequence[str] = ()) -> Iterator[str]:
  """Yields the folder a Beam stage writes into: `<out>.tmp-<id>` beside `out`. When the
  block ends, the manifest is written into it and it replaces `out` whole; when it raises
  (or is interrupted), it is removed and `out` is left as it was.

  Inputs inside `out` (the experiment writes the pair pipeline's dump into its folder) are
  read from there while the job runs, then moved into the new folder: never removed."""
  claim(out, stage, settings, overwrite=overwrite, markers=markers, inputs=inputs,
        empty_on_overwrite=not tio.is_local(out))
  if not tio.is_local(out):
    yield out
    write_manifest(out, stage, settings, inputs)
    return
  final = out.rstrip("/") or "."
  tmp = f"{final}.tmp-{uuid.uuid4().hex[:8]}"
  os.makedirs(tmp)
  try:
    yield tmp
    write_manifest(tmp, stage, settings, inputs)
    _swap(final, tmp, keep=inside(final, inputs) if os.path.isdir(final) else set())
  finally:
    if os.path.exists(tmp):
      shutil.rmtree(tmp, ignore_errors=True)


def _swap(final: str, tmp: str, keep: set[str]) -> None:
  """Puts folder `tmp` in the place of `final`, moving `final`'s entries `keep` into it.
  Renames only (one filesystem): a failure half-way puts `final` back as it was."""
  if not os.path.exists(final):
    os.rename(tmp, final)
    return
  old = f"{final}.old-{uuid.uuid4().hex[:8]}"
  os.rename(final, old)
  moved = []
  try:
    for name in sorted(keep):
      os.rename(os.path.join(old, name), os.path.join(tmp, name))
      moved.append(name)
    os.rename(tmp, final)
  except BaseException:
    for name in moved:  # the inputs go back first: `tmp` is removed after this
      os.rename(os.path.join(tmp, name), os.path.join(old, name))
    os.rename(old, final)
    raise
  shutil.rmtree(old)


def file_manifest_path(main: str) -> str:
  return f"{main}{layout.FILE_MANIFEST_SUFFIX}"


@contextlib.contextmanager
def owned_files(main: str, stage: str, settings: Mapping[str, Any], *,
                overwrite: bool = False, inputs: Sequence[str] = (),
                legacy: Mapping[str, Any] | None = None) -> Iterator[list[str]]:
  """For a stage whose --out is a file (vocab, index) or a set of files in another stage's
  folder (hardneg): the rules of `claim`, judged by the manifest beside `main`.

  An existing `main` without a manifest (an older version's output, or a file of the
  user's) is refused unless `legacy` (its settings, from the stage's own record) or
  `overwrite`. The block appends the paths it writes (each written atomically) to the list
  it is given; at its end the manifest lists them and the files of the run before that are
  not among them are removed (a 4-shard index replaced by a 1-shard one). Before the block,
  the manifest says "this run, files pending": an interrupted run is re-run with the same
  settings, not refused."""
  try:
    manifest = _read(file_manifest_path(main))
  except ValueError:
    if not overwrite:
      raise
    manifest = None
  if manifest is None and legacy is not None:
    manifest = {"stage": stage, "settings": legacy}
  problem = None
  if manifest is None and _exists(main):
    problem = "exists, and no twotower stage recorded how it was made"
  elif manifest is not None and manifest["stage"] != stage:
    problem = f"is the output of `twotower {manifest['stage']}`"
  elif manifest is not None:
    diff = differences(manifest.get("settings", {}), settings)
    if diff:
      problem = f"was made by a `twotower {stage}` run with other settings ({'; '.join(diff)})"
  if problem and not overwrite:
    raise ValueError(f"{main}: {problem}; give another --out, or --overwrite to replace it")
  if problem:
    logger.warning("--overwrite: replacing %s (it %s)", main, problem)
  before = [_beside(main, f) for f in (manifest or {}).get("files", [])]
  path = file_manifest_path(main)
  previous = tio.read_text(path) if _exists(path) else None
  made = _missing_root(path)
  written: list[str] = []
  _write_file_manifest(main, stage, settings, inputs, files=None)
  try:
    yield written
  except BaseException:
    if not written:  # nothing replaced yet: the old record stays true, no folder is left
      if previous is None:
        _remove(path)
      else:
        tio.write_text(path, previous)
      if made and not any(files for _, _, files in os.walk(made)):
        shutil.rmtree(made)
    raise
  for stale in sorted(set(before) - set(written)):
    if _exists(stale):
      _remove(stale)
  _write_file_manifest(main, stage, settings, inputs, files=written)


def _missing_root(path: str) -> str | None:
  """The outermost folder above local `path` that does not exist yet (None: all do)."""
  if not tio.is_local(path):
    return None
  missing = None
  parent = os.path.dirname(os.path.abspath(path))
  while not os.path.exists(parent):
    missing, parent = parent, os.path.dirname(parent)
  return missing


def _remove(path: str) -> None:
  if tio.is_local(path):
    os.remove(path)
  else:
    from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
    FileSystems.delete([path])


def _beside(main: str, name: str) -> str:
  return os.path.join(os.path.dirname(main), name) if tio.is_local(main) else \
      f"{main.rsplit('/', 1)[0]}/{name}"


def _write_file_manifest(main: str, stage: str, settings: Mapping[str, Any],
                         inputs: Sequence[str], files: Sequence[str] | None) -> None:
  """`files` None: pending (the run has not finished)."""
  tio.write_json(file_manifest_path(main), {
      "version": MANIFEST_VERSION, "stage": stage, "settings": _plain(settings),
      "inputs": list(inputs), "pending": files is None,
      "files": [f.replace("\\", "/").rsplit("/", 1)[-1] for f in files or ()]})


def settings_of(config: Any, skip: Sequence[str] = ()) -> dict:
  """A config dataclass's fields as manifest settings, without where the output goes, how
  the runner runs, and `skip` (fields that change speed, not what is written)."""
  import dataclasses  # pylint: disable=import-outside-toplevel
  ignored = {"out", "beam_args", "overwrite", *skip}
  return {k: _plain(v) for k, v in dataclasses.asdict(config).items() if k not in ignored}
