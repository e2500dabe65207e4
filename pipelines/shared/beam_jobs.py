"""Running a Beam job the one way every Beam stage runs it: the runner chosen from the
pass-through flags (`make_pipeline`, a runner known to give wrong results refused), the
project's counters (`counter`), and the job run to its stats.json (`run_beam_job`).

Beam itself is imported inside the functions: a stage's module (and `twotower --help`)
loads without it.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from twotower.core import files as tio
from twotower.core.contracts import counters as counter_names
from twotower.core.contracts import layout


def beam_counters(result, namespace: str = counter_names.NAMESPACE) -> dict[str, int]:
  """Every counter of `namespace` in a finished pipeline, summed over steps, as a flat dict."""
  from apache_beam.metrics.metric import MetricsFilter  # pylint: disable=import-outside-toplevel
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


#: `--runner` values that run on this machine, in process (Beam's FnApiRunner).
LOCAL_RUNNERS = (None, "DirectRunner", "direct", "FnApiRunner")


def runs_locally(beam_args: Sequence[str]) -> bool:
  """True when the pass-through flags select the local runner (make_pipeline's FnApiRunner),
  with one process or several (`--direct_num_workers`)."""
  from apache_beam.options.pipeline_options import (  # pylint: disable=import-outside-toplevel
      PipelineOptions, StandardOptions)
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
  import apache_beam as beam  # pylint: disable=import-outside-toplevel
  from apache_beam.options.pipeline_options import (  # pylint: disable=import-outside-toplevel
      PipelineOptions, StandardOptions)
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
  if stats_dir:
    tio.makedirs(stats_dir)
  pipeline = make_pipeline(beam_args)
  build(pipeline)
  result = pipeline.run()
  result.wait_until_finish()
  stats = finish(beam_counters(result))
  if stats_dir:
    tio.write_json(layout.stats_path(stats_dir), stats)
  return stats
