"""Every flag the Dataflow launch files pass is a flag of the `twotower` stage they run or a
Beam pipeline option: the scripts (deploy/dataflow/run_*.sh, common.sh), the flags
`twotower.deploy.options` builds, and the flex template (metadata.json declares every
`twotower pairs` flag a template user may set; main.py hands them over). Beam drops an
unknown option with only a warning, so a misspelt one would otherwise vanish on the cloud.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from dataflow_fixtures import DATAFLOW, FLEX, script_stage, stage_parser
from twotower.deploy import options as deploy_options


@functools.lru_cache(maxsize=1)
def _beam_parser() -> argparse.ArgumentParser:
  """Beam's own parser of pipeline options, built as `PipelineOptions.get_all_options`
  builds it (every PipelineOptions subclass known to the launcher, Dataflow's included)."""
  importlib.import_module("apache_beam.runners.dataflow.dataflow_runner")
  from apache_beam.options import pipeline_options
  parser = pipeline_options._BeamArgumentParser(allow_abbrev=False)  # pylint: disable=protected-access
  classes = {str(c): c for c in pipeline_options.PipelineOptions.__subclasses__()}
  for cls in classes.values():
    cls._add_argparse_args(parser)  # pylint: disable=protected-access
  return parser


def _unknown_to_beam(args: list[str]) -> list[str]:
  return [a for a in _beam_parser().parse_known_args(args)[1] if a.startswith("-")]


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
  return set(parser._option_string_actions)  # pylint: disable=protected-access


def test_beam_parser_refuses_a_misspelt_option():
  """The check below relies on this: Beam's parser knows its options and not a typo."""
  assert _unknown_to_beam(["--runner=DataflowRunner", "--sdk_container_image=x",
                           "--no_use_public_ips", "--experiments=use_runner_v2"]) == []
  assert _unknown_to_beam(["--max_num_worker=3", "--sdk_container=x"]) == [
      "--max_num_worker=3", "--sdk_container=x"]


#: Every optional variable of deploy/dataflow/common.sh, so every branch of it is taken.
ALL_OPTIONAL_ENV = {
    "JOB_NAME": "twotower-flags-test", "MACHINE_TYPE": "n1-standard-8", "MAX_NUM_WORKERS": "20",
    "NUM_WORKERS": "2", "DISK_SIZE_GB": "80",
    "SERVICE_ACCOUNT": "runner@my-project.iam.gserviceaccount.com", "NETWORK": "default",
    "SUBNETWORK": "regions/us-central1/subnetworks/default", "NO_PUBLIC_IPS": "1"}
CLOUD_ENV = {"PROJECT": "my-project", "REGION": "us-central1", "BUCKET": "my-bucket",
             "IMAGE": "us-central1-docker.pkg.dev/my-project/twotower/worker:0.1.0"}


def test_every_flag_the_dataflow_scripts_pass_is_the_stages_or_beams():
  """A script's assembled command (DRY_RUN=1, every optional variable of common.sh set, the
  NQ input, a branch test_deploy.py does not take): the stage's parser takes its flags and
  Beam knows every one left. Then, for the branches no run took, every `--flag` written in
  the scripts (comments' examples included) is a flag of the script's stage, of `python -m
  twotower.deploy.options` (what common.sh calls) or of Beam."""
  env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHON": sys.executable,
         "DRY_RUN": "1", "NQ": "gs://my-bucket/nq/*.jsonl.gz", **CLOUD_ENV, **ALL_OPTIONAL_ENV}
  done = subprocess.run(["bash", str(DATAFLOW / "run_reqa.sh")], env=env, capture_output=True,
                        text=True, timeout=300, check=False)
  assert done.returncode == 0, done.stderr
  cmd = done.stdout.splitlines()
  assert cmd[:4] == [sys.executable, "-m", "twotower.cli", "reqa"], cmd
  config_args, rest = stage_parser("reqa").parse_known_args(cmd[4:])
  assert config_args.nq == env["NQ"]
  assert _unknown_to_beam(rest) == [], rest
  passed = {a.split("=")[0] for a in rest}
  assert {"--runner", "--sdk_container_image", "--job_name", "--machine_type", "--network",
          "--subnetwork", "--service_account_email", "--no_use_public_ips",
          "--num_workers", "--max_num_workers", "--disk_size_gb"} <= passed, passed
  beam = _option_strings(_beam_parser())
  options = _option_strings(deploy_options._parser())  # pylint: disable=protected-access
  unknown = []
  for script in sorted(DATAFLOW.glob("*.sh")):
    known = options | beam
    if script.name != "common.sh":
      known |= _option_strings(stage_parser(script_stage(script)))
    for flag in set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_]*", script.read_text())):
      if flag not in known:
        unknown.append(f"{script.name}: {flag}")
  assert not unknown, unknown


@pytest.mark.parametrize("stage", ["pairs", "reqa", "embed"])
def test_no_stage_flag_hides_a_beam_option(stage):
  """A Beam stage parses its own flags first and hands Beam the rest; a stage flag named like
  a Beam option, or starting with one (argparse takes `--X` for an abbreviation of `--Xy`),
  would take that option before Beam sees it."""
  beam = _option_strings(_beam_parser()) - {"-h", "--help"}
  own = _option_strings(stage_parser(stage)) - {"-h", "--help"}
  assert {o for o in own for b in beam if o.startswith(b)} == set()


def test_portable_runner_flags_are_beams():
  for runner in deploy_options.PORTABLE_RUNNERS:
    args = deploy_options.portable_args(runner, "localhost:8099", image="img:1", parallelism=4)
    assert _unknown_to_beam(args) == [], args


# ---------------------------------------------------------------------------------------------
# The flex template.
# ---------------------------------------------------------------------------------------------

#: `twotower pairs` flags the flex template leaves out, and why.
NOT_TEMPLATE_PARAMETERS = {
    "--help": "argparse's",
    "--verbose": "main.py always passes it (the launcher's log is all Dataflow shows)",
    "--shuffle": "auto is Beam's shuffle off the local runner; a disk shuffle cannot span workers",
    "--shuffle_dir": "the disk shuffle's (local runner only)",
    "--shuffle_buckets": "the disk shuffle's (local runner only)",
}


def _flex_main():
  spec = importlib.util.spec_from_file_location("flex_template_main", FLEX / "main.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)  # its launch is under `if __name__ == "__main__"`
  return module


def _metadata() -> dict[str, dict]:
  spec = json.loads((FLEX / "metadata.json").read_text())
  return {p["name"]: p for p in spec["parameters"]}


def test_flex_template_declares_every_pairs_flag():
  """Dataflow validates a flex template's parameters against metadata.json: a `twotower pairs`
  flag it does not declare cannot be passed at all."""
  parser = stage_parser("pairs")
  flags = {a.option_strings[-1] for a in parser._actions}  # pylint: disable=protected-access
  declared = {f"--{name}" for name in _metadata()}
  assert declared == flags - set(NOT_TEMPLATE_PARAMETERS), (
      f"missing: {sorted(flags - set(NOT_TEMPLATE_PARAMETERS) - declared)}, "
      f"not pairs flags: {sorted(declared - flags)}")
  assert set(NOT_TEMPLATE_PARAMETERS) <= flags


def test_flex_template_parameters_take_the_pairs_defaults_through_main():
  """Each parameter, given the flag's default as its value, passes its regexes and reaches
  `twotower pairs` as that default (switches as true/false through main.py); `true` turns a
  switch on; the launcher's own Beam parameters in the Dockerfile's example are Beam's."""
  from twotower.commands import pairs as pairs_cmd
  parser = stage_parser("pairs")
  actions = {a.dest: a for a in parser._actions}  # pylint: disable=protected-access
  required = {"dump": "gs://my-bucket/dumps/x.xml.bz2", "out": "gs://my-bucket/runs/pairs"}
  argv = []
  for name, param in _metadata().items():
    assert param["label"] and param["helpText"], name
    assert param["isOptional"] == (name not in required), name
    default = actions[name].default
    value = required.get(name) or (str(default).lower() if isinstance(default, bool)
                                   else str(default))
    for regex in param.get("regexes", []):
      assert re.match(regex, value), (name, regex, value)
    argv.append(f"--{name}={value}")
  main = _flex_main()
  config = pairs_cmd.parse(main.template_argv(argv, parser))
  assert config == pairs_cmd.parse(["--dump", required["dump"], "--out", required["out"]])
  switched = pairs_cmd.parse(main.template_argv(
      argv + ["--doc_title_section=true", "--overwrite=TRUE"], parser))
  assert switched.pairs.doc_title_section and switched.overwrite
  # A bad switch value is left for argparse, which refuses it (exit 2).
  with pytest.raises(SystemExit) as refused:
    pairs_cmd.parse(main.template_argv(argv + ["--overwrite=maybe"], parser))
  assert refused.value.code == 2
  examples = re.findall(r"--parameters ([^\n\\]+)", (FLEX / "Dockerfile").read_text())
  names = {pair.split("=")[0] for line in examples for pair in line.strip().split(",")}
  assert {"dump", "out", "sdk_container_image"} <= names, names
  beam = _option_strings(_beam_parser())
  assert all(n in _metadata() or f"--{n}" in beam for n in names), names


def test_flex_template_image_runs_main_which_starts_twotower_pairs():
  flex = (FLEX / "Dockerfile").read_text()
  assert "FLEX_TEMPLATE_PYTHON_PY_FILE=/template/main.py" in flex
  assert 'ENTRYPOINT ["/opt/apache/beam/boot"]' in flex
  # The launcher runs the file itself: it must start `twotower pairs` (its usage error names
  # the missing flags; the switch it was given in the template's form was taken).
  done = subprocess.run([sys.executable, str(FLEX / "main.py"), "--overwrite=true"],
                        capture_output=True, text=True, timeout=120, check=False)
  assert done.returncode == 2, done.stderr[-1000:]
  assert "usage: twotower pairs" in done.stderr
  assert "the following arguments are required: --dump, --out" in done.stderr
