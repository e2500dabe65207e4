"""Flex-template entry point: the launcher VM runs this file (FLEX_TEMPLATE_PYTHON_PY_FILE)
with the template's parameters as `--name=value` flags plus Dataflow's own options
(`--runner`, `--project`, `--region`, `--temp_location`, `--sdk_container_image`, ...), and
it builds and submits the pairs pipeline exactly as `twotower pairs` does.

A template parameter always has a value, so the switches of `twotower pairs` (store_true
flags such as `--doc_title_section`) arrive as `--name=true|false`, which argparse refuses:
`template_argv` turns them into the bare flag or drops it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no", "")


def template_argv(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
  """`argv` with `--switch=true` -> `--switch` and `--switch=false` -> nothing, for the
  store_true flags of `parser`; every other argument unchanged (a bad value stays for
  argparse to refuse with its usage error)."""
  switches = {option for action in parser._actions  # pylint: disable=protected-access
              if isinstance(action, argparse._StoreTrueAction)  # pylint: disable=protected-access
              for option in action.option_strings}
  out = []
  for arg in argv:
    name, sep, value = arg.partition("=")
    if sep and name in switches and value.lower() in _TRUE + _FALSE:
      if value.lower() in _TRUE:
        out.append(name)
      continue
    out.append(arg)
  return out


if __name__ == "__main__":
  from twotower import cli
  from twotower.commands import pairs as pairs_cmd
  # --verbose: the launcher VM's log is the only place Dataflow shows what the job set up.
  sys.exit(cli.run_stage(
      "pairs", ["--verbose", *template_argv(sys.argv[1:], pairs_cmd.build_parser())]))
