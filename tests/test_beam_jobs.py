"""Running a Beam job: the project's counters read back, means derived, runners refused."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline

from twotower.core.contracts import counters as C
from twotower.pipelines.shared import beam_jobs


def test_beam_counters_and_means():
  def count(x):
    beam.metrics.Metrics.counter(C.NAMESPACE, "items").inc()
    beam.metrics.Metrics.counter(C.NAMESPACE, "tokens").inc(x)
    beam.metrics.Metrics.counter("other", "ignored").inc()
    return x

  p = TestPipeline()
  _ = p | beam.Create([1, 2, 3]) | beam.Map(count)
  stats = beam_jobs.beam_counters(p.run())
  assert stats == {"items": 3, "tokens": 6}
  beam_jobs.add_mean(stats, "tokens_mean", "tokens", "items")
  assert stats["tokens_mean"] == 2.0


def test_run_beam_job_writes_its_counters_to_stats_json(tmp_path):
  def build(pipeline):
    _ = (pipeline | beam.Create(["a", "bb", "ccc"])
         | beam.Map(lambda x: beam_jobs.counter("chars").inc(len(x))))

  def finish(counters):
    return {**counters, "zero": counters.get("zero", 0)}

  stats = beam_jobs.run_beam_job(build, (), str(tmp_path / "out"), finish)
  assert stats == {"chars": 6, "zero": 0}
  assert (tmp_path / "out" / "stats.json").read_text() == \
      '{\n  "chars": 6,\n  "zero": 0\n}\n'


@pytest.mark.parametrize("runner", ["DaskRunner", "apache_beam.runners.dask.dask_runner.Dask"])
def test_make_pipeline_refuses_the_dask_runner(runner):
  with pytest.raises(ValueError, match="DaskRunner gives wrong results"):
    beam_jobs.make_pipeline([f"--runner={runner}"])
