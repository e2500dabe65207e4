"""A stage owns its output: a manifest (`<out>/_twotower.json`, contracts.MANIFEST_FILE, in
a folder; `<main>.twotower.json` beside a file) says which stage wrote it, with which
settings, from which inputs, and which files it holds. An output is a stage's only if its
own manifest says so.

    claim(out, stage, settings)        before writing: refuse a folder of another run
    staged(out, stage, settings)       Beam stages (and bm25): write beside it, then move it
                                       into place
    start(out, stage, settings)        training, after claim: the manifest of a run begun in
                                       place; write_manifest at its end
    file_outputs.owned_files(...)      stages whose output is files, not a folder (vocab,
                                       index, hardneg, search, fuse, query): the same rules,
                                       the manifest beside the main file (file_outputs)
    check_inputs(out, inputs)          refuse an output that is also one of its inputs
    replace_folder(final, new, owned)  put a folder built beside another in its place
    remove(out)                        drop an output a caller no longer needs (its files)
    discard(path)                      drop what the running stage wrote and does not keep

Rules, one for every stage:
  * an absent or empty folder is the stage's; so is one that holds only its inputs;
  * an output that is one of the stage's inputs (the same path; for a file output, a folder
    that holds one) is refused, --overwrite or not;
  * a folder whose manifest has the same stage and settings is this run's: training resumes
    in it, a Beam stage replaces it;
  * other settings of the same stage, or files no stage recorded, are refused with an error
    naming what differs, unless `overwrite`; another stage's output is refused even then
    (--overwrite replaces only this stage's output: removing another's is the user's call);
  * a stage removes only the files its own manifest lists: never an input, never a file it
    did not write (a `my_notes.txt` in the folder survives a replace and an --overwrite;
    where the new run writes a file at its path, the run is refused and changes nothing).

Beam stages write into `<out>.tmp-<id>/` beside the folder and rename it into place when the
job has finished, so a reader never sees half a run or two runs mixed (shards of an older run
with another shard count), and an interrupted or failed job leaves nothing (Beam's
`beam-temp-*` folders go with the temporary one). Object stores (gs://) have no rename: there
the stage writes in place, after the same claim.

Outputs written before manifests (folders: before ae09f05, 2026-11-24; file outputs
such as vocab, index and hardneg's pairs: before f0e988d, 2026-11-25) are not told apart
from the user's files: a stage refuses such a folder or file unless --overwrite, as any
other it did not record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import uuid
from typing import Any, Collection, Iterator, Mapping, Sequence

from twotower.core import files as tio
from twotower.core.contracts import layout
from twotower.core.contracts import manifests
# The manifest readers live in contracts.manifests (a reader needs nothing above the
# contracts); the rules below read them, and stages that write an output find them here.
from twotower.core.contracts.manifests import (file_manifest_path, files_of, listed,  # noqa: F401
                                          listed_beside, manifest_path, read_manifest)

logger = logging.getLogger(__name__)

#: Bumped when the manifest's fields change meaning.
MANIFEST_VERSION = 1


def plain(value: Any) -> Any:
  """Settings as JSON gives them back (tuples as lists), so that a comparison with a read
  manifest sees only real differences."""
  if isinstance(value, Mapping):
    return {str(k): plain(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [plain(v) for v in value]
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
  a, b = _flat(plain(old)), _flat(plain(new))
  missing = object()
  return [f"{k}: {a.get(k, '(unset)')!r} -> {b.get(k, '(unset)')!r}"
          for k in sorted(set(a) | set(b)) if a.get(k, missing) != b.get(k, missing)]


# ------------------------------------------------------------------------------------------
# Inputs: never an output, never removed.
# ------------------------------------------------------------------------------------------


def _real(path: str) -> str:
  return os.path.realpath(os.path.abspath(path))


def _within(path: str, folder: str) -> bool:
  """Local `path` is `folder` or lies under it (symbolic links resolved)."""
  rel = os.path.relpath(_real(path), _real(folder))
  return rel == "." or not (rel == ".." or rel.startswith(".." + os.sep))


def check_inputs(out: str, inputs: Sequence[str], *, file: bool = False,
                 inside: bool = True) -> None:
  """Refuses an output that is also one of its inputs: the same path (a run would read
  what it is replacing: `query --jsonl q.jsonl --out q.jsonl` emptied the queries), or, for
  a file output (`file`) or where the stage writes all over its folder (`inside=False`:
  training's --init), an input inside it. `--overwrite` changes nothing here.

  Raises:
    ValueError: naming the output and the input.
  """
  for path in inputs:
    if not path:
      continue
    if not (tio.is_local(out) and tio.is_local(path)):
      same, holds = path.rstrip("/") == out.rstrip("/"), False
    else:
      same = _real(path) == _real(out)
      holds = (file or not inside) and _within(path, out)
    if same or holds:
      raise ValueError(f"{out}: the output {'is' if same else 'holds'} an input of this run "
                       f"({path}); give another --out")


def _input_paths(out: str, inputs: Sequence[str]) -> set[str]:
  """The inputs inside local folder `out`, relative to it (each with its own manifest
  beside it, `<input>.twotower.json`): kept wherever the stage's output goes."""
  found = set()
  for path in inputs:
    if path and tio.is_local(path) and _within(path, out) and _real(path) != _real(out):
      rel = os.path.relpath(_real(path), _real(out)).replace(os.sep, "/")
      found.update({rel, rel + layout.FILE_MANIFEST_SUFFIX})
  return found


def _under(rel: str, paths: Collection[str]) -> bool:
  """`rel` is one of `paths` or lies in a folder that is."""
  return any(rel == p or rel.startswith(p + "/") for p in paths)


# ------------------------------------------------------------------------------------------
# Folders.
# ------------------------------------------------------------------------------------------


def _entries(out: str) -> list[str]:
  return sorted(os.listdir(out)) if os.path.isdir(out) else []


def files_under(out: str) -> list[str]:
  """Every file under `out`, relative to it, the manifest excepted (local folders)."""
  found = []
  for root, _, names in os.walk(out):
    for name in names:
      rel = os.path.relpath(os.path.join(root, name), out)
      if rel != layout.MANIFEST_FILE:
        found.append(rel.replace(os.sep, "/"))
  return sorted(found)


def _owned(out: str, stage: str, inputs: Sequence[str] = ()) -> set[str]:
  """The files of local folder `out` that are `stage`'s to remove: those its manifest lists
  (and the manifest), never an input."""
  keep = _input_paths(out, inputs)
  manifest = read_manifest(out)
  if manifest is not None and manifest["stage"] == stage and manifest.get("pending"):
    # A run begun in place (`start`) and killed: what it wrote is not listed yet; all but
    # the files it found there are its.
    kept = set(manifest.get("kept", []))
    listed = {f for f in files_under(out) if f not in kept} | {layout.MANIFEST_FILE}
  elif manifest is not None and manifest["stage"] == stage:
    listed = set(manifest.get("files", [])) | {layout.MANIFEST_FILE}
  else:
    return set()
  return {f for f in listed if not _under(f, keep)}


def _remove_files(out: str, names: Collection[str]) -> None:
  """Removes files `names` (relative to `out`), then the folders under `out` they leave
  empty; nothing else."""
  parents = set()
  for name in sorted(names):
    path = os.path.join(out, name)
    if os.path.isdir(path) and not os.path.islink(path):  # a listed folder (older manifests)
      continue
    if os.path.lexists(path):
      os.remove(path)
      parents.add(os.path.dirname(path))
  _prune(out, parents)


def _prune(out: str, folders: Collection[str]) -> None:
  """Removes each of `folders` (under `out`, not `out` itself) that is empty, then its
  parents that become so."""
  top = os.path.abspath(out)
  for folder in sorted(folders, key=len, reverse=True):
    folder = os.path.abspath(folder)
    while folder != top and folder.startswith(top + os.sep) and os.path.isdir(folder) \
        and not os.listdir(folder):
      os.rmdir(folder)
      folder = os.path.dirname(folder)


def claim(out: str, stage: str, settings: Mapping[str, Any], *, overwrite: bool = False,
          inputs: Sequence[str] = (), empty_on_overwrite: bool = True) -> bool:
  """Checks that `out` may take this run; returns True when it already holds this run (same
  stage and settings: resume or replace), False otherwise.

  `inputs`: the run's inputs (files or folders): an output that is one is refused
  (check_inputs); those inside `out` (the experiment writes a dump there) are neither
  foreign nor removed.
  `empty_on_overwrite`: False where the run replaces the folder at its end (`staged`): the
  old output stays readable until then, and stays if the run fails. True (in place): with
  `overwrite`, the files the old run's manifest lists are removed now.

  Raises:
    ValueError: the folder is an input, holds another run (names each differing setting)
      or files without a manifest (both: unless `overwrite`), or another stage's output.
  """
  check_inputs(out, inputs)
  if not tio.is_local(out):
    manifest = read_manifest(out)
    entries = [layout.MANIFEST_FILE] if manifest else []
  else:
    if os.path.exists(out) and not os.path.isdir(out):
      raise ValueError(f"{out}: is a file; --out is a folder")
    keep = _input_paths(out, inputs)
    entries = [e for e in _entries(out) if not _under(e, keep)]
    manifest = read_manifest(out) if entries else None
  if not entries:
    return False
  if manifest is not None and manifest["stage"] != stage:
    raise ValueError(f"{out}: holds the output of `twotower {manifest['stage']}`; give "
                     f"another --out (--overwrite replaces only a `twotower {stage}` output; "
                     "remove that one yourself if you mean to)")
  if manifest is None:
    problem = (f"holds {len(entries)} files or folders ({', '.join(entries[:3])}"
               f"{', ...' if len(entries) > 3 else ''}) that no twotower stage recorded")
    if not overwrite:
      raise ValueError(f"{out}: {problem}; give another --out, or --overwrite to write "
                       "beside them (they are kept)")
    logger.warning("--overwrite: writing into %s, which %s: they are kept", out, problem)
    return False
  diff = differences(manifest.get("settings", {}), settings)
  if not diff:
    return True
  problem = f"holds a `twotower {stage}` run with other settings ({'; '.join(diff)})"
  if not overwrite:
    raise ValueError(f"{out}: {problem}; give another --out, or --overwrite to replace it "
                     "(files it did not write are kept)")
  logger.warning("--overwrite: replacing %s (it %s); files it did not write are kept", out,
                 problem)
  if tio.is_local(out) and empty_on_overwrite:
    _remove_files(out, _owned(out, stage, inputs))
  return False


def start(out: str, stage: str, settings: Mapping[str, Any], inputs: Sequence[str] = (), *,
          resumed: bool = False) -> dict:
  """For a stage that writes its folder in place (training), after `claim`: records the run
  before anything is written, so that a killed run resumes. The files already in the folder
  that are not this run's (the user's, its inputs) are recorded as `kept`: the manifest at
  the run's end (write_manifest) never lists them, so no later run removes them. `resumed`:
  claim said the folder holds this run (its manifest has this stage and settings)."""
  current = read_manifest(out) if tio.is_local(out) else None
  if not tio.is_local(out):
    files, kept = [], []
  elif resumed and current is not None and current.get("pending"):
    # The same run, killed before its end: what it wrote since is its own (listed at the
    # end), what it found there stays kept.
    files, kept = list(current.get("files", [])), list(current.get("kept", []))
  elif resumed and current is not None:
    # A finished run resumed: any file it does not list is not its own (the user's).
    files = list(current.get("files", []))
    kept = sorted(set(current.get("kept", [])) |
                  {f for f in files_under(out) if f not in set(files)})
  else:
    files, kept = [], files_under(out)
  return write_manifest(out, stage, settings, inputs, files=files, kept=kept, pending=True)


def write_manifest(out: str, stage: str, settings: Mapping[str, Any],
                   inputs: Sequence[str] = (), files: Sequence[str] | None = None, *,
                   kept: Sequence[str] | None = None, pending: bool = False) -> dict:
  """Writes `<out>/_twotower.json` (atomically); `files` default to what `out` holds but
  the files `kept` (by default those the manifest there, of this stage, keeps: `start`).
  `pending`: the run has begun, not finished (`start`)."""
  if kept is None:
    current = read_manifest(out) if tio.is_local(out) else None
    kept = current.get("kept", []) if current and current["stage"] == stage else []
  if files is None:
    files = [f for f in files_under(out) if f not in set(kept)] if tio.is_local(out) else []
  manifest = {"version": MANIFEST_VERSION, "stage": stage, "settings": plain(settings),
              "inputs": list(inputs), "files": list(files)}
  if kept:
    manifest["kept"] = sorted(kept)
  if pending:
    manifest["pending"] = True
  tio.write_json(manifest_path(out), manifest)
  return manifest


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


@contextlib.contextmanager
def staged(out: str, stage: str, settings: Mapping[str, Any], *, inputs: Sequence[str] = (),
           overwrite: bool = False) -> Iterator[str]:
  """Yields the folder a stage writes into: `<out>.tmp-<id>` beside `out`. When the block
  ends, the manifest is written into it and it replaces `out` (replace_folder: of the old
  folder only the files its manifest listed go); when it raises (or is interrupted), it is
  removed and `out` is left as it was.

  Inputs inside `out` (the experiment writes the pair pipeline's dump into its folder) are
  read from there while the job runs, then moved into the new folder: never removed."""
  resumed = claim(out, stage, settings, overwrite=overwrite, inputs=inputs,
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
    write_manifest(tmp, stage, settings, inputs, kept=())
    owned = _owned(final, stage, inputs) if os.path.isdir(final) else set()
    replace_folder(final, tmp, owned)
  finally:
    if os.path.exists(tmp):
      shutil.rmtree(tmp, ignore_errors=True)  # this run's own, unfinished folder


def _carried(final: str, new: str, owned: Collection[str], rel: str = "") -> list[str]:
  """The paths (relative) under `final` that go into `new` when it takes final's place:
  everything but the files `owned`, a folder whole where it holds none of them.

  Raises:
    ValueError: `new` has a file where `final` has one that is not `owned` (the new run
      wrote where a file it does not own lies): nothing is moved.
  """
  carried = []
  here = os.path.join(final, rel) if rel else final
  for name in sorted(os.listdir(here)):
    path = f"{rel}/{name}" if rel else name
    source, target = os.path.join(final, path), os.path.join(new, path)
    is_dir = os.path.isdir(source) and not os.path.islink(source)
    if not is_dir and path in owned:
      continue
    if is_dir and not any(o.startswith(path + "/") for o in owned) and \
        not os.path.lexists(target):
      carried.append(path)
    elif is_dir and (not os.path.lexists(target) or
                     (os.path.isdir(target) and not os.path.islink(target))):
      carried.extend(_carried(final, new, owned, path))
    elif os.path.lexists(target):
      raise ValueError(f"{source}: this run writes a file there, and it is not one an "
                       "earlier run of this stage wrote (no manifest lists it); move it away "
                       "and run again (nothing was changed)")
    else:
      carried.append(path)
  return carried


def replace_folder(final: str, new: str, owned: Collection[str]) -> None:
  """Puts local folder `new` in the place of `final`. Of final's files only `owned` (paths
  relative to it: what its manifest lists) are removed; every other file or folder (an
  input, a file of the user's) is moved into `new` first. Renames only (one filesystem): a
  failure half-way puts `final` back as it was."""
  if not os.path.exists(final):
    os.rename(new, final)
    return
  carried = _carried(final, new, set(owned))
  old = f"{final}.old-{uuid.uuid4().hex[:8]}"
  os.rename(final, old)
  moved = []
  try:
    for rel in carried:
      target = os.path.join(new, rel)
      os.makedirs(os.path.dirname(target), exist_ok=True)
      os.rename(os.path.join(old, rel), target)
      moved.append(rel)
    os.rename(new, final)
  except BaseException:
    for rel in reversed(moved):  # they go back first: `new` is removed after this
      os.rename(os.path.join(new, rel), os.path.join(old, rel))
    os.rename(old, final)
    raise
  _remove_files(old, owned)
  # Left: the folders that held the removed files (an empty one included: a SavedModel's
  # assets/, carried as a folder of the new output too), or a file that appeared meanwhile.
  for root, _, _ in sorted(os.walk(old), key=lambda entry: len(entry[0]), reverse=True):
    if not os.listdir(root):
      os.rmdir(root)
  if os.path.isdir(old):  # appeared while the run ran: not ours to remove
    logger.warning("%s: left in place (files that appeared while the run ran: %s)", old,
                   ", ".join(files_under(old)[:3]))


def remove(out: str) -> None:
  """Removes an output a caller made and no longer needs (eval.dense's embeddings and
  index): the files the manifest of folder `out`, or the one beside file `out`, lists, and
  that manifest; nothing else (a folder is removed once empty)."""
  if not tio.is_local(out):
    raise ValueError(f"{out}: removing an output is local only")
  if os.path.isdir(out):
    manifest = read_manifest(out)
    _remove_files(out, set((manifest or {}).get("files", [])) |
                  ({layout.MANIFEST_FILE} if manifest else set()))
    if not os.listdir(out):
      os.rmdir(out)
    return
  files = listed_beside(out) or []
  for path in files:
    if os.path.lexists(path):
      os.remove(path)
  if os.path.exists(file_manifest_path(out)):
    os.remove(file_manifest_path(out))


def discard(path: str) -> None:
  """Removes a file or folder the running stage wrote itself and does not keep (bm25's
  Lucene index with keep_index off, inside its staged folder; a file output's stale shard or
  pending manifest, file_outputs): nothing else may be given. The one place a stage deletes
  a single path; an object-store path (gs://) is a file, deleted through Beam."""
  if not tio.is_local(path):
    from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
    FileSystems.delete([path])
  elif os.path.isdir(path) and not os.path.islink(path):
    shutil.rmtree(path)
  elif os.path.lexists(path):
    os.remove(path)


def settings_of(config: Any, skip: Sequence[str] = ()) -> dict:
  """A config dataclass's fields as manifest settings, without where the output goes, how
  the runner runs, and `skip` (fields that change speed, not what is written)."""
  ignored = {"out", "beam_args", "overwrite", *skip}
  return {k: plain(v) for k, v in dataclasses.asdict(config).items() if k not in ignored}
