"""Re-renders a grid's results folder from its own files, without a work directory or a run:

    python -m twotower.experiment.rerender --grid cpu-small \
        --results_dir docs/results/cpu-small --readme docs/results.md

Tables (sample SDs), summary.md, results.json / .csv, the README's Results section and
reading.md come from results.json and cells.json (experiment.render.rerender). Use it when
the rendering changed and the cells did not; `twotower experiment --render_only` re-renders
from a work directory's cells instead, and needs the grid's cell keys to be unchanged.
(A module of its own, so that `python -m` does not run a module the package already imported.)
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Optional, Sequence

from twotower.experiment import grid, readings, render

logger = logging.getLogger(__name__)


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m twotower.experiment.rerender", description=__doc__.split("\n")[0])
  parser.add_argument("--grid", required=True,
                      help="a grid name (grids/<name>.yaml) or a YAML file; its name must be "
                           "the folder's grid")
  parser.add_argument("--results_dir", required=True,
                      help="the folder holding results.json and cells.json")
  parser.add_argument("--readme", default="",
                      help="a Markdown file whose results:<grid> and results:<grid>-reading "
                           "blocks to refresh (default: none)")
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(message)s")
  render.rerender(grid.load(args.grid), args.results_dir, args.readme)
  logger.info("wrote %s", os.path.join(args.results_dir, readings.READING_FILE))
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
