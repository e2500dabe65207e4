"""The `twotower` entry point: every stage of the DESIGN contract is wired, usage errors exit 2,
failures exit 1 with one clear stderr line."""

from __future__ import annotations

import importlib

import pytest

from twotower import cli

CONTRACT_STAGES = ("pairs", "vocab", "reqa", "bm25", "evaluate", "pretrain", "finetune",
                   "embed", "index", "search", "experiment", "demo")


def test_every_contract_stage_is_registered():
  assert set(CONTRACT_STAGES) <= set(cli.COMMANDS)


@pytest.mark.parametrize("stage", sorted(cli.COMMANDS))
def test_every_stage_command_has_main(stage):
  module = importlib.import_module(cli.COMMANDS[stage][0])
  assert callable(module.main)


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


def test_failure_exits_1_with_one_line(tmp_path, capsys):
  code = cli.main(["pairs", "--dump", str(tmp_path / "missing-*.xml.bz2"), "--out",
                   str(tmp_path / "out")])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 1
  assert err[-1].startswith("twotower pairs: error:") and "missing-" in err[-1]
