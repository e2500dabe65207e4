"""Dataflow pipeline options for each Beam stage, assembled in one place.

The launch scripts in `deploy/dataflow/` and the tests share this module, so what a script
passes to Dataflow is exactly what the tests validate with Beam's own
`PipelineOptionsValidator` (no network: validation runs with `--dry_run`, which skips the
GCS soft-delete probe and never submits a job).

The Beam stages of the project (`twotower pairs|reqa|embed`) hand flags they do not know to
`PipelineOptions` (`twotower.commands.flags.parse_with_beam`), so the flags built here are
simply appended to the stage's own flags (`vocab` has defaults here for a Beam word count,
but `twotower vocab` runs in one process today):

  twotower pairs --dump 'gs://B/dumps/enwiki-*-pages-articles*.xml*.bz2' --out gs://B/runs/en \
      $(python -m twotower.deploy.options --stage pairs --project P --region R \
            --bucket B --image IMAGE)

Per-stage defaults (`STAGES`) are starting points sized from what each stage does per
element (see docs/full_scale.md); every one can be overridden.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import logging
import re
import sys
from typing import Iterable, Sequence

logger = logging.getLogger(__name__)

#: Runner v2 is required for custom SDK containers (the worker image in deploy/dataflow/).
RUNNER_V2_EXPERIMENT = "use_runner_v2"


@dataclasses.dataclass(frozen=True)
class StageDefaults:
  """Worker-pool defaults for one Beam stage on Dataflow.

  Attributes:
    machine_type: Compute Engine machine type of each worker.
    max_num_workers: autoscaling ceiling.
    disk_size_gb: boot + shuffle disk per worker.
    experiments: extra `--experiments` beyond Runner v2.
    why: one line on the sizing, shown by `--help`.
  """
  machine_type: str
  max_num_workers: int
  disk_size_gb: int
  experiments: tuple[str, ...] = ()
  why: str = ""


#: stage -> defaults. Keys are the `twotower` subcommands that are Beam pipelines.
STAGES: dict[str, StageDefaults] = {
    # CPU-bound (mwparserfromhell + sentencizer ~6.5 pages/s/core here); state is per page,
    # joins are CoGroupByKey shuffles, so many small workers scale linearly.
    "pairs": StageDefaults("n1-standard-4", 100, 50,
                           why="parse-bound, per-page state, shuffle joins"),
    # For a Beam word count feeding the WordPiece learner. `twotower vocab` is one process
    # today (pipelines/vocab.py), so deploy/dataflow/run_vocab.sh runs it directly.
    "vocab": StageDefaults("n1-highmem-4", 20, 50, why="word counts; in-process today"),
    # SQuAD / NQ are small (NQ simplified train ~ 4 GB gz): a few workers suffice.
    "reqa": StageDefaults("n1-standard-4", 10, 50, why="small inputs"),
    # RunInference: one model copy per SDK process; highmem leaves room for the towers.
    "embed": StageDefaults("n1-highmem-8", 50, 100, why="TF inference, model per process"),
}

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")


def bucket_url(bucket: str) -> str:
  """`my-bucket` or `gs://my-bucket[/prefix]` -> `gs://my-bucket[/prefix]` (no trailing /)."""
  bucket = bucket.strip()
  if not bucket:
    raise ValueError("bucket is empty: give a GCS bucket name such as 'my-bucket'")
  if bucket.startswith("gs://"):
    url = bucket.rstrip("/")
    name = url[len("gs://"):].split("/", 1)[0]
  else:
    if "/" in bucket or ":" in bucket:
      raise ValueError(f"bucket {bucket!r}: give a bucket name or a gs:// URL")
    url, name = f"gs://{bucket}", bucket
  if not _BUCKET_RE.match(name):
    raise ValueError(f"bucket {bucket!r}: {name!r} is not a valid GCS bucket name")
  return url


def default_job_name(stage: str, now: datetime.datetime | None = None) -> str:
  """`twotower-<stage>-YYYYMMDD-HHMMSS`, matching Dataflow's `[a-z]([-a-z0-9]*[a-z0-9])?`."""
  now = now or datetime.datetime.now(datetime.timezone.utc)
  return f"twotower-{stage}-{now:%Y%m%d-%H%M%S}"


def dataflow_args(stage: str,
                  project: str,
                  region: str,
                  bucket: str,
                  image: str,
                  *,
                  job_name: str | None = None,
                  machine_type: str | None = None,
                  max_num_workers: int | None = None,
                  num_workers: int | None = None,
                  disk_size_gb: int | None = None,
                  service_account: str | None = None,
                  network: str | None = None,
                  subnetwork: str | None = None,
                  no_public_ips: bool = False,
                  extra: Sequence[str] = ()) -> list[str]:
  """Beam flags that run `stage` on Dataflow with the project's worker container.

  Args:
    stage: a key of `STAGES` (a Beam stage of the `twotower` CLI).
    project: Google Cloud project id.
    region: Dataflow regional endpoint, e.g. "us-central1".
    bucket: bucket name or gs:// URL; temp files go to `<bucket>/dataflow/tmp`, staged files
      to `<bucket>/dataflow/staging`.
    image: the worker image built from deploy/dataflow/Dockerfile
      (e.g. "us-central1-docker.pkg.dev/P/twotower/worker:0.1.0").
    job_name: defaults to `default_job_name(stage)`.
    machine_type, max_num_workers, num_workers, disk_size_gb: override `STAGES[stage]`.
    service_account, network, subnetwork, no_public_ips: optional worker networking.
    extra: further Beam flags, appended last (so they win).

  Returns:
    The flags, one list element each (`--name=value`), for `PipelineOptions(flags)` or for
    appending to a `twotower <stage>` command line.
  """
  if stage not in STAGES:
    raise ValueError(f"stage {stage!r}: not a Beam stage; choose one of {sorted(STAGES)}")
  for name, value in (("project", project), ("region", region), ("image", image)):
    if not value or not value.strip():
      raise ValueError(f"{name} is empty: Dataflow needs a {name}")
  defaults = STAGES[stage]
  root = bucket_url(bucket)
  experiments = (RUNNER_V2_EXPERIMENT,) + defaults.experiments
  args = [
      "--runner=DataflowRunner",
      f"--project={project}",
      f"--region={region}",
      f"--job_name={job_name or default_job_name(stage)}",
      f"--temp_location={root}/dataflow/tmp",
      f"--staging_location={root}/dataflow/staging",
      f"--sdk_container_image={image}",
      # The container already has Beam and the project installed: stage neither.
      "--sdk_location=container",
      f"--experiments={','.join(experiments)}",
      f"--machine_type={machine_type or defaults.machine_type}",
      f"--max_num_workers={max_num_workers or defaults.max_num_workers}",
      f"--disk_size_gb={disk_size_gb or defaults.disk_size_gb}",
      "--autoscaling_algorithm=THROUGHPUT_BASED",
  ]
  if num_workers is not None:
    args.append(f"--num_workers={num_workers}")
  if service_account:
    args.append(f"--service_account_email={service_account}")
  if network:
    args.append(f"--network={network}")
  if subnetwork:
    args.append(f"--subnetwork={subnetwork}")
  if no_public_ips:
    args.append("--no_use_public_ips")
  args.extend(extra)
  return args


#: Portable runners: name -> (Beam runner, the flag naming where the cluster / job server is).
PORTABLE_RUNNERS: dict[str, tuple[str, str]] = {
    "flink": ("FlinkRunner", "flink_master"),
    "spark": ("SparkRunner", "spark_master_url"),
    "portable": ("PortableRunner", "job_endpoint"),
}


def portable_args(runner: str,
                  endpoint: str,
                  *,
                  image: str | None = None,
                  environment: str = "DOCKER",
                  parallelism: int | None = None,
                  extra: Sequence[str] = ()) -> list[str]:
  """Beam flags for a Flink / Spark cluster or any portable job server (deploy/portable/).

  Args:
    runner: "flink", "spark" or "portable" (a job server you started, e.g. Beam's Flink or
      Spark job server container).
    endpoint: `--flink_master` (host:port of the Flink REST endpoint), `--spark_master_url`
      (spark://host:7077) or `--job_endpoint` (host:8099).
    image: with environment "DOCKER", the worker image of deploy/dataflow/Dockerfile (the same
      image serves every portable runner); None = Beam's default SDK image, without twotower.
    environment: "DOCKER" (workers start the image), "LOOPBACK" (the SDK runs in the
      launching process: for a local cluster and tests) or "PROCESS"/"EXTERNAL" with
      `extra=["--environment_config=..."]`.
    parallelism: Flink parallelism (ignored by the others).
    extra: further Beam flags, appended last.
  """
  if runner not in PORTABLE_RUNNERS:
    raise ValueError(f"runner {runner!r}: choose one of {sorted(PORTABLE_RUNNERS)}")
  if not endpoint:
    raise ValueError(f"{PORTABLE_RUNNERS[runner][1]} is empty")
  beam_runner, endpoint_flag = PORTABLE_RUNNERS[runner]
  args = [f"--runner={beam_runner}", f"--{endpoint_flag}={endpoint}",
          f"--environment_type={environment}"]
  if environment == "DOCKER" and image:
    args.append(f"--environment_config={image}")
  if runner == "flink" and parallelism:
    args.append(f"--parallelism={parallelism}")
  args.extend(extra)
  return args


def validate(args: Iterable[str], runner: str = "DataflowRunner") -> list[str]:
  """Beam's own validation of `args` for `runner`; returns the error strings (empty = valid).

  Uses `PipelineOptionsValidator` with a real runner instance, exactly as
  `Pipeline.__init__` does, but offline: `--dry_run=True` makes Beam skip the bucket
  soft-delete probe, and when neither `--temp_location` nor `--staging_location` is a valid
  gs:// path (where Beam would call the GCS API to create a default bucket) those two errors
  are reported and the rest is validated with placeholder locations. Nothing is submitted.
  """
  from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions
  from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
  from apache_beam.runners import create_runner

  args = list(args) + ["--dry_run=True"]
  validator = PipelineOptionsValidator(PipelineOptions(args), create_runner(runner))
  location_errors: list[str] = []
  if validator.is_service_runner():
    cloud = validator.options.view_as(GoogleCloudOptions)
    temp = validator.validate_gcs_path(cloud, "temp_location")
    staging = validator.validate_gcs_path(cloud, "staging_location")
    if temp and staging:
      location_errors = temp + staging
      placeholder = "gs://twotower-offline-validation/tmp"
      validator = PipelineOptionsValidator(
          PipelineOptions(args + [f"--temp_location={placeholder}",
                                  f"--staging_location={placeholder}"]),
          create_runner(runner))
  return location_errors + validator.validate()


def _parser() -> argparse.ArgumentParser:
  stages = "; ".join(f"{k}: {v.machine_type} x<= {v.max_num_workers} ({v.why})"
                     for k, v in STAGES.items())
  p = argparse.ArgumentParser(
      prog="python -m twotower.deploy.options",
      description="Print the Dataflow flags for one stage, one per line (validated by Beam). "
      f"Stage defaults: {stages}.",
      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument("--stage", required=True, choices=sorted(STAGES), help="Beam stage")
  p.add_argument("--project", required=True, help="Google Cloud project id")
  p.add_argument("--region", required=True, help="Dataflow region, e.g. us-central1")
  p.add_argument("--bucket", required=True, help="GCS bucket name or gs:// URL for temp/staging")
  p.add_argument("--image", required=True, help="worker image (deploy/dataflow/Dockerfile)")
  p.add_argument("--job_name", default=None, help="Dataflow job name (default: timestamped)")
  p.add_argument("--machine_type", default=None, help="override the stage's machine type")
  p.add_argument("--max_num_workers", type=int, default=None, help="override the ceiling")
  p.add_argument("--num_workers", type=int, default=None, help="initial workers")
  p.add_argument("--disk_size_gb", type=int, default=None, help="override the disk size")
  p.add_argument("--service_account", default=None, help="worker service account email")
  p.add_argument("--network", default=None, help="VPC network")
  p.add_argument("--subnetwork", default=None, help="VPC subnetwork URL")
  p.add_argument("--no_public_ips", action="store_true", help="workers without public IPs")
  p.add_argument("--no_validate", action="store_true", help="skip Beam's validation")
  return p


def main(argv: list[str] | None = None) -> int:
  """Prints the flags one per line; exit 1 with the validator's errors if they are invalid."""
  args, extra = _parser().parse_known_args(argv)
  try:
    flags = dataflow_args(args.stage, args.project, args.region, args.bucket, args.image,
                          job_name=args.job_name, machine_type=args.machine_type,
                          max_num_workers=args.max_num_workers, num_workers=args.num_workers,
                          disk_size_gb=args.disk_size_gb,
                          service_account=args.service_account, network=args.network,
                          subnetwork=args.subnetwork, no_public_ips=args.no_public_ips,
                          extra=extra)
  except ValueError as e:
    print(f"twotower.deploy.options: error: {e}", file=sys.stderr)
    return 1
  if not args.no_validate:
    errors = validate(flags)
    if errors:
      print("twotower.deploy.options: invalid Dataflow options: " + "; ".join(errors),
            file=sys.stderr)
      return 1
  print("\n".join(flags))
  return 0


if __name__ == "__main__":
  sys.exit(main())
