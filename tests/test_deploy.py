"""Scale-out checks that need no cloud: Dataflow options validate with Beam's own validator,
the launch scripts assemble commands each stage's parser accepts, the container pins the
project's Beam, and the Beam stages' graphs (a) hold no corpus-sized side input in one worker
and (b) translate into a Dataflow job with the project's worker container (`--dry_run`, so
nothing is submitted and no Google API is contacted).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from twotower.deploy import options as deploy_options

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATAFLOW = ROOT / "deploy" / "dataflow"
BEAM_STAGES = sorted(deploy_options.STAGES)  # embed, pairs, reqa, vocab
CLOUD = {"project": "my-project", "region": "us-central1", "bucket": "my-bucket",
         "image": "us-central1-docker.pkg.dev/my-project/twotower/worker:0.1.0"}
ENV = {"PROJECT": CLOUD["project"], "REGION": CLOUD["region"], "BUCKET": CLOUD["bucket"],
       "IMAGE": CLOUD["image"]}


def _flag(args: list[str], name: str) -> str:
  values = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
  assert len(values) == 1, (name, args)
  return values[0]


# ---------------------------------------------------------------------------------------------
# Dataflow options.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", BEAM_STAGES)
def test_dataflow_options_validate_for_each_stage(stage):
  from apache_beam.options.pipeline_options import (GoogleCloudOptions, PipelineOptions,
                                                    StandardOptions, WorkerOptions)
  args = deploy_options.dataflow_args(stage, **CLOUD)
  assert deploy_options.validate(args) == []
  options = PipelineOptions(args)
  cloud = options.view_as(GoogleCloudOptions)
  assert options.view_as(StandardOptions).runner == "DataflowRunner"
  assert (cloud.project, cloud.region) == ("my-project", "us-central1")
  assert cloud.temp_location == "gs://my-bucket/dataflow/tmp"
  assert cloud.staging_location == "gs://my-bucket/dataflow/staging"
  assert re.fullmatch(r"twotower-[a-z]+-\d{8}-\d{6}", cloud.job_name)
  workers = options.view_as(WorkerOptions)
  defaults = deploy_options.STAGES[stage]
  assert workers.sdk_container_image == CLOUD["image"]
  assert (workers.machine_type, workers.max_num_workers, workers.disk_size_gb) == (
      defaults.machine_type, defaults.max_num_workers, defaults.disk_size_gb)
  assert "use_runner_v2" in _flag(args, "experiments").split(",")


def test_missing_project_and_temp_location_are_reported():
  args = [a for a in deploy_options.dataflow_args("pairs", **CLOUD)
          if not a.startswith(("--project=", "--temp_location=", "--staging_location="))]
  errors = deploy_options.validate(args)
  assert "Missing required option: project." in errors
  assert "Missing GCS path option: temp_location." in errors


@pytest.mark.parametrize("extra, expected", [
    (["--num_workers=500"], "num_workers (500) cannot exceed max_num_workers (100)"),
    (["--temp_location=/tmp/local", "--staging_location=/tmp/local"],
     "Invalid GCS path (/tmp/local), given for the option: temp_location."),
    (["--job_name=Has_Capitals"], "Invalid job_name (Has_Capitals)"),
], ids=["workers-over-max", "local-temp-location", "bad-job-name"])
def test_bad_dataflow_options_are_reported(extra, expected):
  errors = deploy_options.validate(deploy_options.dataflow_args("pairs", **CLOUD, extra=extra))
  assert any(e.startswith(expected) for e in errors), errors


def test_dataflow_args_overrides_and_bucket_forms():
  args = deploy_options.dataflow_args(
      "embed", project="p-1", region="europe-west4", bucket="gs://b-2/prefix/", image="img:1",
      job_name="embed-squad", machine_type="n1-standard-16", max_num_workers=7,
      num_workers=3, no_public_ips=True, extra=["--number_of_worker_harness_threads=4"])
  assert _flag(args, "temp_location") == "gs://b-2/prefix/dataflow/tmp"
  assert (_flag(args, "job_name"), _flag(args, "machine_type")) == ("embed-squad",
                                                                    "n1-standard-16")
  assert (_flag(args, "max_num_workers"), _flag(args, "num_workers")) == ("7", "3")
  assert "--no_use_public_ips" in args and args[-1] == "--number_of_worker_harness_threads=4"
  assert deploy_options.validate(args) == []


@pytest.mark.parametrize("kwargs, message", [
    ({"stage": "bm25"}, "not a Beam stage"),
    ({"bucket": "my bucket"}, "not a valid GCS bucket name"),
    ({"bucket": "s3://elsewhere"}, "give a bucket name or a gs:// URL"),
    ({"project": ""}, "project is empty"),
], ids=["not-beam", "bucket-name", "not-gcs", "no-project"])
def test_dataflow_args_reject_bad_values(kwargs, message):
  call = {"stage": "pairs", **CLOUD, **kwargs}
  with pytest.raises(ValueError, match=message):
    deploy_options.dataflow_args(call.pop("stage"), **call)


def test_options_cli_prints_the_validated_flags(capsys):
  argv = [f"--{k}={v}" for k, v in CLOUD.items()] + ["--stage=reqa", "--job_name=reqa-1"]
  assert deploy_options.main(argv) == 0
  printed = capsys.readouterr().out.split()
  assert printed == deploy_options.dataflow_args("reqa", **CLOUD, job_name="reqa-1")
  assert deploy_options.main(argv + ["--num_workers=99"]) == 1
  assert "num_workers (99) cannot exceed" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Launch scripts.
# ---------------------------------------------------------------------------------------------

SCRIPTS = {
    "run_pairs.sh": {"DUMP": "gs://my-bucket/dumps/enwiki-*-pages-articles*.xml*.bz2"},
    "run_reqa.sh": {"SQUAD": "gs://my-bucket/squad/dev-v1.1.json"},
    "run_embed.sh": {"MODEL": "gs://my-bucket/runs/pretrain/export",
                     "CANDIDATES": "gs://my-bucket/runs/reqa/candidates.parquet"},
    "run_vocab.sh": {},
}


def _run_script(name: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
  return subprocess.run(["bash", str(DATAFLOW / name), *args], capture_output=True, text=True,
                        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
                        timeout=120, check=False)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_launch_script_is_executable_and_parses(name):
  path = DATAFLOW / name
  assert path.is_file() and os.access(path, os.X_OK), f"{path} is not executable"
  subprocess.run(["bash", "-n", str(path)], check=True)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_launch_script_names_every_missing_variable(name):
  done = _run_script(name, {})
  assert done.returncode == 2
  assert "environment variable(s) not set" in done.stderr
  required = ["BUCKET"] if name == "run_vocab.sh" else ["PROJECT", "REGION", "BUCKET", "IMAGE"]
  required += [k for k in SCRIPTS[name] if k != "CANDIDATES"]
  for var in required:
    assert re.search(rf"^\s+{var} \(", done.stderr, re.M), (var, done.stderr)


def _stage_command(name: str, *extra: str) -> list[str]:
  done = _run_script(name, {**ENV, **SCRIPTS[name], "PYTHON": sys.executable, "DRY_RUN": "1"},
                     *extra)
  assert done.returncode == 0, done.stderr
  cmd = done.stdout.splitlines()
  assert cmd[:3] == [sys.executable, "-m", "twotower.cli"]
  return cmd[3:]  # stage, then its flags


@pytest.mark.parametrize("name, stage", [("run_pairs.sh", "pairs"), ("run_reqa.sh", "reqa"),
                                         ("run_embed.sh", "embed")])
def test_launch_script_command_is_accepted_by_the_stage_and_dataflow(name, stage):
  """The assembled command line: the stage's own parser takes its flags, and what it hands
  to Beam validates for Dataflow."""
  from twotower.core import files as tio
  cmd = _stage_command(name, "--num_shards=64")
  assert cmd[0] == stage
  if stage == "pairs":
    from twotower.commands import pairs as pairs_cmd
    config = pairs_cmd.parse(cmd[1:]); beam_args = list(config.beam_args)
    assert (config.dump, config.out, config.num_shards) == (
        SCRIPTS[name]["DUMP"], "gs://my-bucket/runs/pairs", 64)
  elif stage == "reqa":
    from twotower.commands import reqa as reqa_cmd
    config = reqa_cmd.parse(cmd[1:]); beam_args = list(config.beam_args)
    assert (config.squad, config.out) == (SCRIPTS[name]["SQUAD"], "gs://my-bucket/runs/reqa-squad")
  else:
    from twotower.commands import embed as embed_cmd
    config = embed_cmd.parse(cmd[1:]); beam_args = list(config.beam_args)
    assert (config.model, config.kind, config.path, config.num_shards) == (
        SCRIPTS[name]["MODEL"], "candidates", SCRIPTS[name]["CANDIDATES"], 64)
  assert _flag(beam_args, "runner") == "DataflowRunner"
  assert _flag(beam_args, "sdk_container_image") == ENV["IMAGE"]
  assert deploy_options.validate(beam_args) == []


def test_vocab_script_runs_the_in_process_learner(capsys):
  """`twotower vocab` is one process (word counts + learner), not a Beam job: the script runs
  it directly on gs:// passages, with flags `twotower vocab` documents."""
  from twotower import cli
  cmd = _stage_command("run_vocab.sh", "--vocab_size=32000")
  assert cmd == ["vocab", "--passages", "gs://my-bucket/runs/pairs/passages", "--out",
                 "gs://my-bucket/runs/vocab.txt", "--max_texts", "5000000",
                 "--vocab_size=32000"]
  assert cli.main(["vocab", "--help"]) == 0
  documented = set(re.findall(r"--\w+", capsys.readouterr().out))
  assert {a.split("=")[0] for a in cmd if a.startswith("--")} <= documented


# ---------------------------------------------------------------------------------------------
# Containers and the flex template.
# ---------------------------------------------------------------------------------------------


def _pinned_beam() -> str:
  import tomllib
  deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
  pins = [re.fullmatch(r"apache-beam(\[[^\]]*\])?==([\w.]+)", d.replace(" ", "")) for d in deps]
  versions = [m.group(2) for m in pins if m]
  assert len(versions) == 1, deps
  return versions[0]


def test_worker_image_pins_the_project_beam_version():
  import apache_beam
  dockerfile = (DATAFLOW / "Dockerfile").read_text()
  froms = re.findall(r"^FROM\s+(\S+)", dockerfile, re.M)
  assert froms == [f"apache/beam_python3.11_sdk:{_pinned_beam()}"]
  assert f"apache_beam.__version__ == '{_pinned_beam()}'" in dockerfile
  assert apache_beam.__version__ == _pinned_beam()  # launcher (this venv) == workers
  # Every package folder of pyproject's package-dir is copied into the image.
  import tomllib
  package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
      "package-dir"].values()
  for folder in package_dirs:
    assert re.search(rf"^COPY {folder}/ {folder}/$", dockerfile, re.M), folder
    assert f"!{folder}/" in (DATAFLOW / "Dockerfile.dockerignore").read_text()


# The flex template (metadata.json, main.py): tests/test_packaging.py.


# ---------------------------------------------------------------------------------------------
# Pipeline graphs: no corpus-sized side inputs; Dataflow translation (dry run).
# ---------------------------------------------------------------------------------------------


def _user_side_inputs(pipeline) -> list[tuple[str, str, str]]:
  """(step label, side-input kind, module) for every side input of a step whose function is
  the project's code (Beam's own file sinks pass shard names as side inputs: not ours)."""
  from apache_beam.pipeline import PipelineVisitor
  from apache_beam.transforms.core import CallableWrapperDoFn

  found = []

  class Visitor(PipelineVisitor):

    def visit_transform(self, node):
      if not node.side_inputs:
        return
      fn = getattr(node.transform, "fn", None)
      if isinstance(fn, CallableWrapperDoFn):
        fn = fn._fn  # pylint: disable=protected-access
      module = getattr(fn, "__module__", None) or type(fn).__module__
      if module.startswith("twotower"):
        for side in node.side_inputs:
          found.append((node.full_label, type(side).__name__, module))

  pipeline.visit(Visitor())
  return found


def _transform_urns(pipeline) -> dict[str, str]:
  proto = pipeline.to_runner_api()
  return {t.unique_name: t.spec.urn for t in proto.components.transforms.values()}


def _dataflow_dry_run(pipeline) -> tuple[str, set[str]]:
  """Translates `pipeline` into a Dataflow job without submitting it; returns the job name
  and the container images of its environments."""
  from apache_beam.portability.api import beam_runner_api_pb2
  result = pipeline.run()
  proto = pipeline.runner.proto_pipeline
  images = {beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image
            for env in proto.components.environments.values()}
  return result.job.proto.name, images


def _dataflow_pipeline(stage: str):
  import apache_beam as beam
  from apache_beam.options.pipeline_options import PipelineOptions
  args = deploy_options.dataflow_args(stage, **CLOUD, job_name=f"test-{stage}")
  return beam.Pipeline(options=PipelineOptions(args + ["--dry_run=True"]))


def test_pairs_graph_joins_with_shuffles_and_translates_to_dataflow(tmp_path):
  """Link resolution and WLP are CoGroupByKey joins (GroupByKey steps), no step of ours reads
  a side input (no title -> id dictionary in one worker), and the graph becomes a Dataflow job
  on the project's container."""
  pytest.importorskip("twotower.pipelines.wiki.wikitext")
  from twotower.pipelines.wiki import pairs
  from wikidump_fixtures import write_dump
  # Matched and its format read at construction (pipelines.wiki.inputs.match_inputs).
  write_dump(tmp_path / "enwiki-pages-articles1.xml.bz2", [])
  pipeline = _dataflow_pipeline("pairs")
  pairs.build(pipeline, pairs.PairsConfig(dump=str(tmp_path / "enwiki-*.xml.bz2"),
                                          out="gs://my-bucket/runs/pairs"))
  assert _user_side_inputs(pipeline) == []
  urns = _transform_urns(pipeline)
  gbk = {name for name, urn in urns.items() if urn == "beam:transform:group_by_key:v1"}
  for join in ("ResolveLinks/JoinLinks", "ResolveLinks/JoinHop1",
               "MakePairs/JoinLeadWithInlinks", "MakePairs/JoinRequestsWithPassages"):
    assert any(name.startswith(join + "/") for name in gbk), (join, sorted(gbk))
  job, images = _dataflow_dry_run(pipeline)
  assert job == "test-pairs" and images == {CLOUD["image"]}


def test_reqa_graph_has_only_singleton_side_inputs_and_translates_to_dataflow(tmp_path):
  from twotower.pipelines.reqa import builder as reqa
  squad = tmp_path / "dev-v1.1.json"
  squad.write_text(json.dumps({"version": "1.1", "data": []}))
  import pyarrow.parquet as pq
  from twotower.core import contracts
  (tmp_path / "passages").mkdir()
  pq.write_table(contracts.PASSAGE_SCHEMA.empty_table(), tmp_path / "passages" / "p.parquet")
  pipeline = _dataflow_pipeline("reqa")
  reqa.build(pipeline, reqa.ReqaConfig(out="gs://my-bucket/runs/reqa", squad=str(squad),
                                       extra_passages=str(tmp_path), extra_candidates=1000))
  side = _user_side_inputs(pipeline)
  assert {kind for _, kind, _ in side} <= {"AsSingleton"}, side
  # Extra candidates whose passage is a ReQA paragraph leave by a join (a GroupByKey step),
  # not by a side input of ReQA paragraphs.
  gbk = {name for name, urn in _transform_urns(pipeline).items()
         if urn == "beam:transform:group_by_key:v1"}
  assert any(name.startswith("BuildReqa/DropReqaPages/JoinOnPassage/") for name in gbk), gbk
  assert any(name.startswith("BuildReqa/DropReqaPages/JoinOnPage/") for name in gbk), gbk
  job, images = _dataflow_dry_run(pipeline)
  assert job == "test-reqa" and images == {CLOUD["image"]}
  # The whole pool (`--extra_candidates all`): no side input at all.
  pipeline = _dataflow_pipeline("reqa")
  reqa.build(pipeline, reqa.ReqaConfig(out="gs://my-bucket/runs/reqa", squad=str(squad),
                                       extra_passages=str(tmp_path),
                                       extra_candidates=reqa.ALL_EXTRA))
  assert _user_side_inputs(pipeline) == []


def test_embed_graph_translates_to_dataflow(tmp_path):
  import pyarrow as pa
  import pyarrow.parquet as pq
  from twotower.pipelines import embed
  path = tmp_path / "candidates.parquet"
  pq.write_table(pa.table({"candidate_id": [1], "sentence": ["s"], "passage": ["p"],
                           "title": ["t"]}), path)
  config = embed.EmbedConfig(model="gs://my-bucket/export", out="gs://my-bucket/emb",
                             kind="candidates", path=str(path))
  pipeline = _dataflow_pipeline("embed")
  embed.build(pipeline, config, dim=8)
  assert _user_side_inputs(pipeline) == []
  job, images = _dataflow_dry_run(pipeline)
  assert job == "test-embed" and images == {CLOUD["image"]}


# ---------------------------------------------------------------------------------------------
# TPU VM launch.
# ---------------------------------------------------------------------------------------------

TPU_SCRIPT = ROOT / "deploy" / "tpu" / "launch_tpu_vm.sh"
TPU_ENV = {"PROJECT": "my-project", "ZONE": "europe-west4-a", "TPU_NAME": "twotower-v3-32",
           "BUCKET": "my-bucket", "ACCELERATOR_TYPE": "v3-32",
           "RUNTIME_VERSION": "tpu-vm-tf-2.21.0-pod-pjrt"}


def test_tpu_script_parses_and_names_missing_variables():
  assert os.access(TPU_SCRIPT, os.X_OK)
  subprocess.run(["bash", "-n", str(TPU_SCRIPT)], check=True)
  done = subprocess.run(["bash", str(TPU_SCRIPT), "create"], capture_output=True, text=True,
                        env={"PATH": os.environ["PATH"]}, check=False)
  assert done.returncode == 2
  for var in ("PROJECT", "ZONE", "TPU_NAME", "BUCKET", "ACCELERATOR_TYPE", "RUNTIME_VERSION"):
    assert re.search(rf"^\s+{var} \(", done.stderr, re.M), (var, done.stderr)
  done = subprocess.run(["bash", str(TPU_SCRIPT), "train"], capture_output=True, text=True,
                        env={"PATH": os.environ["PATH"], **TPU_ENV, "OUT": "/local/dir",
                             "DRY_RUN": "1"}, check=False)
  assert done.returncode == 2 and "only GCS" in done.stderr


def test_tpu_script_trains_with_the_tpu_strategy_on_gcs_paths():
  import shlex
  from twotower.commands import pretrain as pretrain_cmd
  done = subprocess.run(["bash", str(TPU_SCRIPT), "train", "--steps", "100"],
                        capture_output=True, text=True, check=True,
                        env={"PATH": os.environ["PATH"], **TPU_ENV, "DRY_RUN": "1"})
  gcloud = shlex.split(done.stdout)
  assert gcloud[:4] == ["gcloud", "compute", "tpus", "tpu-vm"] and "--worker=all" in gcloud
  remote = shlex.split(gcloud[gcloud.index("--command") + 1])
  assert remote[:4] == ["python3", "-m", "twotower.cli", "pretrain"]
  job = pretrain_cmd.parse(remote[4:])
  runtime = job.training.runtime
  assert (runtime.strategy, runtime.tpu, job.training.trainer.steps) == ("tpu", "twotower-v3-32", 100)
  assert all(p.startswith("gs://my-bucket/") for p in (job.pairs, job.vocab, job.out))


# ---------------------------------------------------------------------------------------------
# Portable runners (Flink, Spark, a job server).
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("runner, endpoint, beam_runner", [
    ("flink", "flink-jobmanager:8081", "FlinkRunner"),
    ("spark", "spark://spark-master:7077", "SparkRunner"),
    ("portable", "localhost:8099", "PortableRunner"),
])
def test_portable_runner_options_validate(runner, endpoint, beam_runner):
  from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions
  args = deploy_options.portable_args(runner, endpoint, image=CLOUD["image"], parallelism=8)
  assert deploy_options.validate(args, runner=beam_runner) == []
  portable = PipelineOptions(args).view_as(PortableOptions)
  assert (portable.environment_type, portable.environment_config) == ("DOCKER", CLOUD["image"])
  # A PROCESS environment without its command is caught by Beam's validator.
  bad = deploy_options.portable_args(runner, endpoint, environment="PROCESS")
  assert deploy_options.validate(bad, runner=beam_runner) == [
      "Option process_command is required for environment type PROCESS."]
