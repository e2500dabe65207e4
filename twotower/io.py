"""Small I/O helpers every stage shares: paths through Beam's FileSystems (so `gs://` works),
atomic writes, and running a Beam job to its stats.json (`run_beam_job`).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

from twotower.contracts import counters as counter_names

logger = logging.getLogger(__name__)
T = TypeVar("T")


def match_files(pattern: str) -> list[str]:
  """Paths matching a glob on any Beam filesystem, sorted by file name, then path; a clear
  error if none match.

  The order is the order pages are read in, which the pair pipeline's output order (and so a
  seeded training run) follows. By name first, so that the same files in other directories
  (a work directory moved or made again, e.g. the SQuAD articles the grid writes into its
  pairs cell) are read in the same order."""
  from apache_beam.io.filesystems import FileSystems
  paths: list[str] = []
  for pat in pattern.split(","):
    pat = pat.strip()
    if not pat:
      continue
    result = FileSystems.match([pat])[0]
    paths.extend(m.path for m in result.metadata_list)
  if not paths:
    raise FileNotFoundError(f"no file matches {pattern!r}")
  return sorted(set(paths), key=lambda path: (os.path.basename(path), path))


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


def beam_counters(result, namespace: str = counter_names.NAMESPACE) -> dict[str, int]:
  """Every counter of `namespace` in a finished pipeline, summed over steps, as a flat dict."""
  from apache_beam.metrics.metric import MetricsFilter
  counters: dict[str, int] = {}
  for c in result.metrics().query(MetricsFilter().with_namespace(namespace))["counters"]:
    value = c.committed if c.committed is not None else c.attempted
    counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + int(value or 0)
  return dict(sorted(counters.items()))


def add_mean(stats: dict, name: str, total_key: str, count_key: str) -> None:
  """stats[name] = stats[total_key] / stats[count_key], rounded; 0.0 when the count is 0."""
  count = stats.get(count_key, 0)
  stats[name] = round(stats.get(total_key, 0) / count, 2) if count else 0.0


def counter(name: str):
  """The Beam counter `name` (a contracts.counters name) of the project's namespace."""
  from apache_beam.metrics import Metrics  # pylint: disable=import-outside-toplevel
  return Metrics.counter(counter_names.NAMESPACE, name)


def log_settings(stage: str, settings: Mapping[str, Any]) -> None:
  """Echoes the effective settings first, as Pyserini does (at INFO: shown with --verbose)."""
  logger.info("%s: %s", stage, ", ".join(f"{k}={v}" for k, v in settings.items()))


#: `--runner` values that run on this machine, in process (Beam's FnApiRunner).
LOCAL_RUNNERS = (None, "DirectRunner", "direct", "FnApiRunner")


def runs_locally(beam_args: Sequence[str]) -> bool:
  """True when the pass-through flags select the local runner (make_pipeline's FnApiRunner),
  with one process or several (`--direct_num_workers`)."""
  from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
  return PipelineOptions(list(beam_args)).view_as(StandardOptions).runner in LOCAL_RUNNERS


def check_runner(runner: str | None) -> None:
  """Refuses a runner known to give wrong results with exit 0: Beam's DaskRunner (2.77, on a
  2-worker LocalCluster: branches dropped, tagged outputs sent to the wrong tag, only temp
  shards written, `metrics()` raising). Any spelling: a name, its module path, any case.

  Raises:
    ValueError: naming the runner and why.
  """
  if runner and "dask" in str(runner).lower():
    raise ValueError(f"--runner {runner}: Beam's DaskRunner gives wrong results without an "
                     "error (dropped branches, outputs under the wrong tag, temp shards only); "
                     "use the DirectRunner, the PortableRunner or Dataflow")


def make_pipeline(beam_args: Sequence[str], **defaults: Any):
  """A `beam.Pipeline` for the pass-through flags. With no `--runner` (or DirectRunner) it
  runs on Beam's in-process FnApiRunner directly: Beam 2.77's DirectRunner first tries the
  Prism runner, which downloads a binary from GitHub at run time (and fails offline).
  `--direct_running_mode` and `--direct_num_workers` work as with DirectRunner."""
  import apache_beam as beam
  from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
  options = PipelineOptions(list(beam_args), **defaults)
  runner = options.view_as(StandardOptions).runner
  check_runner(runner)
  if runner in LOCAL_RUNNERS:
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    return beam.Pipeline(runner=fn_runner.FnApiRunner(), options=options)
  return beam.Pipeline(options=options)


def run_beam_job(build: Callable[[Any], None], beam_args: Sequence[str] = (),
                 stats_dir: str | None = None,
                 finish: Callable[[dict[str, int]], dict] = dict) -> dict:
  """Builds a pipeline with `build(pipeline)`, runs it to the end, and returns its stats:
  `finish(counters)` of every counter of the project's namespace (finish adds derived values
  and zeros). With `stats_dir`, the stats are also written to `<stats_dir>/stats.json`.

  Every Beam stage runs through here, so they all treat runners, counters and stats.json the
  same way."""
  from twotower.contracts import layout  # pylint: disable=import-outside-toplevel
  if stats_dir:
    makedirs(stats_dir)
  pipeline = make_pipeline(beam_args)
  build(pipeline)
  result = pipeline.run()
  result.wait_until_finish()
  stats = finish(beam_counters(result))
  if stats_dir:
    write_json(layout.stats_path(stats_dir), stats)
  return stats


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
