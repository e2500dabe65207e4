"""Flag helpers every command shares (argparse lives in twotower/commands/ only)."""

from __future__ import annotations

import argparse
from typing import Iterable, Sequence


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
  return args, tuple(beam_args)


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
