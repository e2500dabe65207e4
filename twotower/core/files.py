"""Small I/O helpers every stage shares: the one file matcher (`match_files`), paths through
Beam's FileSystems (so `gs://` works) and atomic writes. The ground floor: it imports no other
module of the project (running a Beam job is pipelines.shared.beam_jobs').
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import logging
import os
import platform
import posixpath
import tempfile
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")


def match_files(pattern: str, *, missing_ok: bool = False) -> list[str]:
  """The paths matching `pattern`, in `ordered`'s order: the one file matcher of the project.

  `pattern` is a glob on any Beam filesystem, or several separated by commas (`--dump
  a.xml,b/*.xml`); a path that has a comma in its name is taken whole when it exists. Local
  patterns go through Python's glob (`**` spans folders; hidden files such as an atomic
  write's `.tmp-*` are not matched by `*`), others through Beam's FileSystems.

  Raises:
    FileNotFoundError: nothing matches (unless `missing_ok`: an empty list).
  """
  paths = _match(pattern) if "," in pattern else []
  if not paths:
    for piece in pattern.split(","):
      if piece.strip():
        paths.extend(_match(piece.strip()))
  if not paths and not missing_ok:
    raise FileNotFoundError(f"no file matches {pattern!r}")
  return ordered(paths)


def ordered(paths: Iterable[str]) -> list[str]:
  """`paths` without repeats, sorted by file name, then by the whole path: the order every
  reader of several files reads them in.

  A pair pipeline's output order (and so a seeded training run) follows the order pages are
  read in. By name first, so that the same files in other folders (a work folder moved or
  made again: the SQuAD articles the grid writes into its pairs cell beside the dump) are
  read in the same order. For the files of one folder (every stage output) this is simply
  the order of their paths."""
  return sorted(set(paths), key=lambda path: (posixpath.basename(path), path))


def _match(pattern: str) -> list[str]:
  if is_local(pattern):
    if not any(c in pattern for c in "*?["):  # a path named whole: itself, a folder too
      return glob.glob(pattern)  # (callers say what is wrong with a folder), as Beam's match
    # A glob matches files, as Beam's does: `run/emb-*` does not list the folders emb-0, ...
    return [p for p in glob.glob(pattern, recursive=True) if not os.path.isdir(p)]
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  return [m.path for m in FileSystems.match([pattern])[0].metadata_list]


def is_local(path: str) -> bool:
  return "://" not in path


def absolute(paths: str | None) -> str | None:
  """A comma list of local paths or globs with each made absolute (remote ones, and an empty
  value, as given): a Beam job's workers may run in another working directory than the
  command that launched it (a worker pool, PortableRunner), where a relative path names
  nothing or another file."""
  if not paths:
    return paths
  return ",".join(p.strip() if not is_local(p.strip()) or not p.strip()
                  else os.path.abspath(p.strip()) for p in paths.split(","))


def with_absolute_paths(config: T, *fields: str) -> T:
  """`config` (a dataclass) with the path fields `fields` made absolute (`absolute`): the
  config a stage hands its pipeline, whose workers may run in another directory."""
  import dataclasses  # pylint: disable=import-outside-toplevel
  return dataclasses.replace(config, **{f: absolute(getattr(config, f)) for f in fields})


def open_parquet(path: str):
  """A `pyarrow.parquet.ParquetFile` on any Beam filesystem (row groups are read lazily).

  Local paths go to pyarrow directly; others through Beam's FileSystems (TF's GFile is not
  usable here: pyarrow sees a GFile as closed until its first read)."""
  import pyarrow.parquet as pq
  if is_local(path):
    return pq.ParquetFile(path)
  from apache_beam.io.filesystems import FileSystems
  return pq.ParquetFile(FileSystems.open(path))


def makedirs(path: str) -> None:
  if is_local(path):
    os.makedirs(path, exist_ok=True)
  # Object stores have no directories: nothing to do.


def _write_local(path: str, write: Callable[[str], None]) -> None:
  """`write(tmp)` into a temp file beside `path`, then renamed over it: a reader sees the old
  file or the new one, never half of one, and a failure (or Ctrl-C) leaves no temp file. The
  parent directory is made if needed."""
  if os.path.isdir(path):
    raise IsADirectoryError(f"{path}: is a directory; give a file path")
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
  os.close(fd)
  try:
    write(tmp)
    # mkstemp makes the file 0600; give it the mode a plain open() would (0666 & ~umask).
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def write_text(path: str, text: str) -> None:
  """Writes a text file atomically (temp file + rename) locally, or through FileSystems."""
  if is_local(path):
    def write(tmp: str) -> None:
      with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    _write_local(path, write)
    return
  from apache_beam.io.filesystems import FileSystems
  with FileSystems.create(path) as f:
    f.write(text.encode("utf-8"))


def write_bytes(path: str, data: bytes) -> None:
  """Writes a binary file atomically (temp file + rename) locally, or through FileSystems."""
  if is_local(path):
    def write(tmp: str) -> None:
      with open(tmp, "wb") as f:
        f.write(data)
    _write_local(path, write)
    return
  from apache_beam.io.filesystems import FileSystems
  with FileSystems.create(path) as f:
    f.write(data)


def write_parquet(path: str, table) -> None:
  """Writes a `pyarrow.Table` as one Parquet file, atomically and into a directory made if
  needed (locally), or through FileSystems."""
  import pyarrow.parquet as pq
  if is_local(path):
    _write_local(path, lambda tmp: pq.write_table(table, tmp))
    return
  from apache_beam.io.filesystems import FileSystems
  with FileSystems.create(path) as f:
    pq.write_table(table, f)


def gzip_bytes(data: bytes) -> bytes:
  """gzip with no time stamp and no file name: the same input, the same bytes (committed
  files re-rendered byte for byte)."""
  buffer = io.BytesIO()
  with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as f:
    f.write(data)
  return buffer.getvalue()


def read_text(path: str) -> str:
  """A UTF-8 text file; a ValueError naming the file and the byte offset if it is not UTF-8
  (the codec's own message names neither the file nor what to do)."""
  if is_local(path):
    with open(path, "rb") as f:
      data = f.read()
  else:
    from apache_beam.io.filesystems import FileSystems
    with FileSystems.open(path) as f:
      data = f.read()
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise ValueError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason}); convert the "
                     "file to UTF-8") from None


def write_json(path: str, obj: Any) -> None:
  write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_json(path: str) -> Any:
  return json.loads(read_text(path))


def log_settings(stage: str, settings: Mapping[str, Any]) -> None:
  """Echoes the effective settings first, as Pyserini does (at INFO: shown with --verbose)."""
  logger.info("%s: %s", stage, ", ".join(f"{k}={v}" for k, v in settings.items()))


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
  """Lists of `size` consecutive items (the last may be shorter): Python 3.12's
  itertools.batched, for 3.11."""
  batch: list[T] = []
  for item in items:
    batch.append(item)
    if len(batch) == size:
      yield batch
      batch = []
  if batch:
    yield batch


# CPU extensions whose presence changes which float kernels TensorFlow (oneDNN) runs, so that
# the same cell made on two machines can differ in its last digits.
FLOAT_ISA = (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("amx_tile", "AMX"))


def machine() -> dict[str, str]:
  """CPU model and its float extensions (`isa`), cores and RAM (from /proc), OS and Python:
  what a result records about the machine that made it."""
  info = {"cores": str(os.cpu_count()), "python": platform.python_version(),
          "os": platform.platform()}
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      lines = f.read().splitlines()
    models = [l.split(":", 1)[1].strip() for l in lines if l.startswith("model name")]
    info["cpu"] = models[0] if models else platform.processor()
    flags = next((l.split(":", 1)[1].split() for l in lines if l.startswith("flags")), [])
    info["isa"] = ", ".join(name for flag, name in FLOAT_ISA if flag in flags)
    with open("/proc/meminfo", encoding="utf-8") as f:
      kib = next(int(l.split()[1]) for l in f if l.startswith("MemTotal"))
    info["ram"] = f"{kib / 2**20:.1f} GiB"
  except (OSError, StopIteration, ValueError):
    info.setdefault("cpu", platform.processor())
  return info


def package_versions(names: Iterable[str]) -> dict[str, str]:
  """Installed versions of `names` ("not installed" for a missing one): what a result or a
  retriever bundle records about the stack that made it."""
  import importlib.metadata  # pylint: disable=import-outside-toplevel
  versions = {}
  for name in names:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      versions[name] = "not installed"
  return versions
