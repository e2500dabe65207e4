"""The `twotower` entry point: every stage is wired, usage errors exit 2,
failures exit 1 with one clear stderr line, and `python -m <stage module>` behaves the same."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

from twotower import cli

CONTRACT_STAGES = ("pairs", "vocab", "reqa", "bm25", "evaluate", "pretrain", "finetune",
                   "embed", "index", "search", "experiment", "demo")


def test_every_contract_stage_is_registered():
  assert set(CONTRACT_STAGES) <= set(cli.COMMANDS)


@pytest.mark.parametrize("stage", sorted(cli.COMMANDS))
def test_every_stage_has_a_command_and_a_typed_run(stage):
  command = importlib.import_module(cli.command_module(stage))
  assert callable(command.main) and callable(command.parse)
  module = importlib.import_module(cli.COMMANDS[stage][0])
  assert callable(module.run)


def test_unknown_stage_is_a_usage_error(capsys):
  assert cli.main(["no-such-stage"]) == 2
  assert "unknown stage 'no-such-stage'" in capsys.readouterr().err


def test_help_lists_stages(capsys):
  assert cli.main(["--help"]) == 0
  out = capsys.readouterr().out
  assert all(stage in out for stage in CONTRACT_STAGES)


def test_stage_usage_error_exits_2(capsys):
  assert cli.main(["pairs"]) == 2  # --dump and --out are required
  assert "--dump" in capsys.readouterr().err


@pytest.mark.parametrize("runner", ["DaskRunner", "dask",
                                    "apache_beam.runners.dask.dask_runner.DaskRunner"])
@pytest.mark.parametrize("stage", ["pairs", "reqa", "embed"])
def test_the_dask_runner_is_refused_before_any_work(stage, runner, tmp_path, capsys):
  """Beam's DaskRunner gives wrong results with exit 0 (measured): a usage error, any
  spelling, and nothing is written."""
  required = {"pairs": ["--dump", "d.xml"], "reqa": ["--squad", "s.json"],
              "embed": ["--model", "m", "--candidates", "c.parquet"]}[stage]
  out = tmp_path / "out"
  assert cli.main([stage, *required, "--out", str(out), f"--runner={runner}"]) == 2
  assert "DaskRunner gives wrong results" in capsys.readouterr().err
  assert not out.exists()


def test_failure_exits_1_with_one_line(tmp_path, capsys):
  code = cli.main(["pairs", "--dump", str(tmp_path / "missing-*.xml.bz2"), "--out",
                   str(tmp_path / "out")])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 1
  assert err[-1].startswith("twotower pairs: error:") and "missing-" in err[-1]


def _python_m(module: str, *args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                        timeout=300, check=False, env={**os.environ, "PYTHONWARNINGS": "ignore"})


@pytest.mark.slow  # one interpreter per stage
def test_python_m_and_the_entry_point_behave_the_same(tmp_path):
  for stage, (module, _) in cli.COMMANDS.items():
    done = _python_m(module, "--help")
    assert done.returncode == 0, (stage, done.stderr[-500:])
    assert f"usage: twotower {stage}" in done.stdout, stage
  # A usage error and a failure: the same exit code and line both ways.
  entry = os.path.join(os.path.dirname(sys.executable), "twotower")
  for args, code in ((["--out", str(tmp_path)], 2),
                     (["--dump", str(tmp_path / "none-*.xml"), "--out", str(tmp_path)], 1)):
    a = _python_m("twotower.pipelines.wiki.pairs", *args)
    b = subprocess.run([entry, "pairs", *args], capture_output=True, text=True, timeout=300,
                       check=False)
    assert a.returncode == b.returncode == code
    assert a.stderr.strip().splitlines()[-1] == b.stderr.strip().splitlines()[-1]
