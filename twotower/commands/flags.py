"""Flag helpers every command shares (argparse lives in twotower/commands/ only)."""

from __future__ import annotations

import argparse
from typing import Iterable, Sequence

from twotower.pipelines.shared import beam_jobs


def parser(stage: str, doc: str | None) -> argparse.ArgumentParser:
  """A parser named `twotower <stage>`, described by the first paragraph of `doc`, with the
  common `--verbose` flag (read by twotower.cli before the stage starts)."""
  description = (doc or "").strip().split("\n\n")[0]
  p = argparse.ArgumentParser(prog=f"twotower {stage}", description=description,
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  add_verbose(p)
  return p


def add_verbose(p: argparse.ArgumentParser) -> None:
  p.add_argument("-v", "--verbose", action="store_true",
                 help="log everything (libraries' INFO, TensorFlow's C++ lines); default: "
                      "progress, warnings and the result")


def parse_with_beam(p: argparse.ArgumentParser,
                    argv: Iterable[str] | None) -> tuple[argparse.Namespace, tuple[str, ...]]:
  """This stage's flags; every other flag is a Beam pipeline option (Beam examples'
  `parse_known_args` idiom), passed through untouched (`--runner`, `--direct_num_workers`,
  Dataflow options...)."""
  args, beam_args = p.parse_known_args(None if argv is None else list(argv))
  # A bare word is a Beam option's value only right after a `--flag` without `=`: anywhere
  # else it is a stray argument (a glob that caught one file too many, a typo), which Beam
  # would only warn about and drop.
  for before, word in zip([None, *beam_args], beam_args):
    if not word.startswith("-") and not (before and before.startswith("--")
                                         and "=" not in before):
      p.error(f"unrecognized argument: {word}")
  runner = argparse.ArgumentParser(add_help=False)
  runner.add_argument("--runner")
  try:  # a runner that gives wrong results is a usage error, before any work
    beam_jobs.check_runner(runner.parse_known_args(beam_args)[0].runner)
  except ValueError as e:
    p.error(str(e))
  return args, tuple(beam_args)


def add_overwrite(p: argparse.ArgumentParser) -> None:
  """--overwrite: the stage may replace an output that holds another run of it
  (twotower.core.outputs)."""
  p.add_argument("--overwrite", action="store_true",
                 help="replace --out when it holds a run of this stage with other settings "
                      "(a file --out: also a file no stage recorded); a folder's files no "
                      "stage wrote are kept. Never an input or another stage's output")


def csv(value: str) -> tuple[str, ...]:
  """"a, b,c" -> ("a", "b", "c")."""
  return tuple(v.strip() for v in (value or "").split(",") if v.strip())


def ints(value: str) -> tuple[int, ...]:
  return tuple(int(v) for v in csv(value))


def non_negative(p: argparse.ArgumentParser, args: argparse.Namespace,
                 names: Sequence[str]) -> None:
  """A usage error for the first of `names` that is negative."""
  for name in names:
    if getattr(args, name) < 0:
      p.error(f"--{name} must be >= 0, got {getattr(args, name)}")


def positive_int(value: str) -> int:
  """An argparse `type` for counts that must be >= 1 (`--k`, `--hits`, `--depth`): 0 would
  run and give an empty or failing result, so it is a usage error (exit 2)."""
  try:
    n = int(value)
  except ValueError:
    raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value!r}") from None
  if n < 1:
    raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
  return n


def positive_ints(value: str) -> tuple[int, ...]:
  """An argparse `type` for a comma list of counts >= 1 (`--ks 1,5,10`)."""
  values = tuple(positive_int(v) for v in csv(value))
  if not values:
    raise argparse.ArgumentTypeError(f"expected a comma list of integers >= 1, got {value!r}")
  return values


def out_folder(p: argparse.ArgumentParser, path: str, flag: str = "--out") -> str:
  """A usage error for a local output folder that is the working directory or one of its
  parents: a stage writes beside its --out and renames the result over it at the end, which
  the working directory cannot take (it would fail only after the whole job)."""
  import os  # pylint: disable=import-outside-toplevel
  if "://" in path:
    return path
  folder, here = os.path.realpath(path), os.path.realpath(os.getcwd())
  if here == folder or here.startswith(folder.rstrip(os.sep) + os.sep):
    p.error(f"{flag} {path}: is the working directory{'' if here == folder else ' or above it'}; "
            f"a stage replaces its output folder whole when it ends: give a folder of its "
            f"own, e.g. {flag} {os.path.join(path, p.prog.split()[-1])}")
  return path


def hybrid_tuning(p: argparse.ArgumentParser, weight: float | None, tune_split: str,
                  tune_metric: str, weight_flag: str = "--weight") -> None:
  """Usage errors (exit 2, before any work) for the flags that weigh a hybrid (`fuse`,
  `bundle`): a weight outside [0, 1], a tuning split that is not a validation split, a
  metric nothing reports."""
  from twotower.core import contracts  # pylint: disable=import-outside-toplevel
  if weight is not None and not 0.0 <= weight <= 1.0:
    p.error(f"{weight_flag} {weight} is not in [0, 1]")
  if tune_split and contracts.split_side(tune_split) != contracts.VALIDATION_SIDE:
    p.error(f"--tune_split {tune_split!r}: only a validation split (validation-<ratio>) may "
            "choose the weight")
  metrics = (contracts.MEAN_RECALL, contracts.WORST_GAIN, "MRR",
             *(f"R@{k}" for k in contracts.DEFAULT_KS))
  if tune_metric not in metrics:
    p.error(f"--tune_metric {tune_metric!r}: expected one of {', '.join(metrics)}")
