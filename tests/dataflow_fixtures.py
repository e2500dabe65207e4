"""Where the Dataflow launch files are and which `twotower` stage each script runs, for
tests/test_packaging.py and tests/test_dataflow_flags.py."""

from __future__ import annotations

import argparse
import importlib
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATAFLOW = ROOT / "deploy" / "dataflow"
FLEX = DATAFLOW / "flex_template"

_LAUNCH = re.compile(r"^\s*launch (\w+)|twotower\.cli (\w+)", re.M)


def script_stage(script: pathlib.Path) -> str:
  """The `twotower` stage a deploy/dataflow/run_*.sh runs (`launch STAGE`, `twotower.cli STAGE`)."""
  stages = {launched or direct for launched, direct in _LAUNCH.findall(script.read_text())}
  assert len(stages) == 1, (script.name, stages)
  return stages.pop()


def launched_stages() -> list[str]:
  return sorted({script_stage(script) for script in DATAFLOW.glob("run_*.sh")})


def stage_parser(stage: str) -> argparse.ArgumentParser:
  from twotower import cli
  return importlib.import_module(cli.command_module(stage)).build_parser()
