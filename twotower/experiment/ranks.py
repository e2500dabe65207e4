"""A grid's per-question gold ranks: every result cell's, kept beside the tables, given back by
cell name to the reading's paired comparisons.

Every result cell (bm25, eval, fuse) records, beside its run file, the rank of each scored
question's gold candidate (twotower.eval.gold_ranks: the `pair` convention, the tables'), for
the questions its table entries are scored on: its ratio's test side, every question
zero-shot. A BM25 cell scores every ratio in one run: it records every question it scores
(validation sides left out), and a consumer pairs it with another cell by the intersection of
their question ids.

    <cell dir>/ranks.gz, <cell dir>/questions-<digest>.txt.gz     (the cell writes them)
    <results>/ranks/<kind>_<rest>-<key>.ranks.gz                  one per cell directory
    <results>/ranks/questions-<digest>.txt.gz                     one per question set
    <results>/ranks/index.json        {cell name: ranks file} of the plan last rendered

`export` copies them into the results directory when the tables refresh (experiment.render);
`reader` (a run's plan and work directory, the results directory otherwise) and
`results_reader` (a results directory alone: a re-render) give them back as a `RanksOf`.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Callable, Mapping, Optional

from twotower.core import contracts
from twotower.core import files as tio
from twotower.eval import gold_ranks
from twotower.experiment import cells, execute
from twotower.experiment.plan import RESULT_KINDS, Cell, Plan

logger = logging.getLogger(__name__)

#: Cell name -> {question id: 1-based gold rank, None for a miss}, or None where the cell has
#: no recorded ranks (a grid run before they were recorded). The interface experiment.readings
#: codes to.
RanksOf = Callable[[str], Optional[Mapping[str, Optional[int]]]]
#: In the results directory's ranks folder: which file holds each cell's ranks.
INDEX_FILE = "index.json"


# ---------------------------------------------------------------------------------------------
# A grid's ranks: its cells' files, the results directory's copies, and readers of both.
# ---------------------------------------------------------------------------------------------


def results_name(cell: Cell) -> str:
  """The file name of `cell`'s ranks in the results directory's ranks folder: its directory
  (`eval/squad_ict_base_r5_s0-0123456789`) with the kind's `/` as `_` (kinds have none)."""
  return cell.dirname.replace("/", "_", 1) + contracts.RANKS_SUFFIX


def _backfill(plan: Plan, work: str, cell: Cell) -> bool:
  """Records the ranks of a cell that finished here before cells recorded them, from its run
  file and ReQA directory; False when either is gone (a cell, or its ReQA cell, restored
  without outputs)."""
  run_file = cells.run_file_in(execute.cell_dir(work, cell), execute.ran_here(work, cell) or {})
  if not run_file or not os.path.exists(run_file) or "reqa" not in cell.deps:
    return False
  reqa_dir = execute.cell_dir(work, plan[cell.deps["reqa"]])
  splits = gold_ranks.scored_splits(cell.params.splits)
  if not all(os.path.exists(contracts.questions_path(reqa_dir, s)) for s in splits):
    return False
  gold_ranks.record(run_file, reqa_dir, splits, execute.cell_dir(work, cell))
  return True


def export(plan: Plan, work: str, results_dir: str) -> int:
  """Copies each finished result cell's ranks (and their question ids) into
  `<results_dir>/ranks/`, recording them first for a cell that ran before they were
  recorded; rewrites the folder's index of the plan's cells. A cell restored without its
  outputs keeps the file the results directory has. Returns the number of cells copied."""
  folder = os.path.join(results_dir, contracts.RANKS_DIR)
  index, copied, backfilled = {}, 0, 0
  for cell in plan:
    if cell.kind not in RESULT_KINDS:
      continue
    source = os.path.join(execute.cell_dir(work, cell), contracts.RANKS_FILE)
    if not os.path.exists(source) and execute.state_of(work, cell) == "done":
      backfilled += _backfill(plan, work, cell)
    name = results_name(cell)
    if os.path.exists(source):
      ranks = gold_ranks.read(source)
      gold_ranks.write({q: r or 0 for q, r in ranks.items()}, folder, name)
      copied += 1
    if os.path.exists(os.path.join(folder, name)):
      index[cell.name] = name
  write_index(folder, index)
  if backfilled:
    logger.info("recorded the ranks of %d cells that finished before ranks were recorded",
                backfilled)
  return copied


def write_index(folder: str, index: Mapping[str, str]) -> None:
  """Writes `<folder>/index.json` (cell name -> its file in the folder) when there is
  anything to index or an index to replace: a plan without such cells leaves no empty file."""
  if index or os.path.exists(os.path.join(folder, INDEX_FILE)):
    tio.write_text(os.path.join(folder, INDEX_FILE),
                   json.dumps(index, indent=2, sort_keys=True) + "\n")


def read_index(folder: str) -> dict[str, str]:
  """`<folder>/index.json` ({} where the folder has none)."""
  path = os.path.join(folder, INDEX_FILE)
  return tio.read_json(path) if os.path.exists(path) else {}


def _cached(find: Callable[[str], Optional[str]]) -> RanksOf:
  """A RanksOf that reads the file `find(name)` names once (None: no ranks)."""
  cache: dict[str, Optional[Mapping[str, Optional[int]]]] = {}

  def ranks_of(name: str) -> Optional[Mapping[str, Optional[int]]]:
    if name not in cache:
      path = find(name)
      cache[name] = gold_ranks.read(path) if path else None
    return cache[name]
  return ranks_of


def reader(plan: Plan, work: str, results_dir: str) -> RanksOf:
  """The ranks of the plan's result cells by cell name: the work directory's file, else the
  results directory's copy (a cell restored without outputs); None where neither has one,
  or for a name that is not one of the plan's result cells."""
  folder = os.path.join(results_dir, contracts.RANKS_DIR)

  def find(name: str) -> Optional[str]:
    cell = plan.cells.get(name)
    if cell is None or cell.kind not in RESULT_KINDS:
      return None
    for path in (os.path.join(execute.cell_dir(work, cell), contracts.RANKS_FILE),
                 os.path.join(folder, results_name(cell))):
      if os.path.exists(path):
        return path
    return None
  return _cached(find)


def results_reader(results_dir: str) -> RanksOf:
  """The ranks a results directory holds, by cell name, through its index (the cells of the
  plan last rendered into it): for a re-render with no plan or work directory
  (experiment.rerender). None for a cell the index lacks."""
  folder = os.path.join(results_dir, contracts.RANKS_DIR)
  index = read_index(folder)

  def find(name: str) -> Optional[str]:
    return os.path.join(folder, index[name]) if name in index else None
  return _cached(find)
