"""Flex-template entry point: the launcher VM runs this file (FLEX_TEMPLATE_PYTHON_PY_FILE)
with the template's parameters as `--name=value` flags plus Dataflow's own options
(`--runner`, `--project`, `--region`, `--temp_location`, `--sdk_container_image`, ...), and
it builds and submits the pairs pipeline exactly as `twotower pairs` does.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
  from twotower import cli
  # --verbose: the launcher VM's log is the only place Dataflow shows what the job set up.
  sys.exit(cli.run_stage("pairs", ["--verbose", *sys.argv[1:]]))
