"""`twotower experiment`: the paper's tables (3-6) and our rows beyond it, from one resumable
command, on any QA data and dump.

    twotower experiment --grid cpu-small --out runs/grid \
        --dump data/enwiki-slice-pages-articles.xml.bz2 --squad train-subset-v1.1.json

Split by concern:

  grid      the grid definition as data: grids/<name>.yaml -> GridSpec (rows, sizes, tables,
            ratios, seeds, steps); grid_files reads the YAML (`extends`), row_configs a row's
            model configs
  identity  CellId: which cell (kind, dataset, row, ratio, seed); str() is its name, parse()
            reads one back
  params    each cell kind's typed parameters, and the one serialization its key hashes
  plan      GridSpec -> cells (pairs, vocab, reqa, hardneg, bm25, pretrain, finetune, eval,
            fuse) in dependency order + the table entries that read them (pure)
  estimate  a rough run time per cell (--dry_run), scaled by the cells a work dir timed
  cells     one executor per cell kind: typed stage configs in, results out
  execute   runs the cells once each, resumably; one state per cell, on disk
  ranks     each result cell's per-question gold ranks, kept beside the tables
  finetune_length  the fine-tuning length a row chooses on validation, or carries
  render    tables in the paper's layout, CSV / JSON / PNG, and the README
  readings  the grid's claims checked against the results: verdicts by a rule, as code
  rule      that rule: intervals, paired seeds and qualifier thresholds -> a verdict
  bootstrap the per-question paired bootstrap interval of a difference between two rows

`run(ExperimentConfig)` ties them together; `twotower.commands.experiment` parses flags.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Optional

from twotower.core import files as tio
from twotower.core import logs
from twotower.experiment import estimate, execute, grid, plan as plan_lib, render

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
  """What `twotower experiment` runs."""
  grid: str                                     # a grid name (grids/<name>.yaml) or a file
  out: str                                      # work directory: data, checkpoints, runs
  dump: str                                     # Wikipedia dump glob (pre-training text)
  corpus: str = ""                              # + extracted text (WikiExtractor, JSONL)
  squad: str = ""                               # SQuAD JSON (Tables 3, 5, 6 on SQuAD)
  nq: str = ""                                  # Natural Questions (the paper's Tables 4-6)
  results_dir: str = ""                         # default docs/results/<grid>
  ratios: Optional[tuple[int, ...]] = None      # narrow the grid (None: the grid's)
  tables: Optional[tuple[str, ...]] = None
  systems: Optional[tuple[str, ...]] = None
  seeds: Optional[tuple[int, ...]] = None       # run these seeds' cells (tables: the grid's)
  beam_args: tuple[str, ...] = ()
  keep_embeddings: bool = False
  dry_run: bool = False
  render_only: bool = False                     # tables and README from finished cells only
  readme: str = ""                              # a file whose results:<grid> block to refresh
  progress: str = "bar"
  command: tuple[str, ...] = ()                 # how it was invoked (for the README)
  recheck: int = 0                              # re-make this many finished cells, compare
  recheck_seed: int = 0
  recheck_dir: str = ""                         # their scratch work dir (default OUT/recheck)


@dataclasses.dataclass(frozen=True)
class ExperimentResult:
  plan: str                     # the plan, a line per cell, with its estimate
  ran: tuple[str, ...]          # cells that ran now
  states: dict[str, str]        # every cell's state after the run
  results_dir: str


def load_spec(config: ExperimentConfig) -> grid.GridSpec:
  spec = grid.load(config.grid)
  return grid.restrict(spec, ratios=config.ratios, tables=config.tables,
                       systems=config.systems)


def run(config: ExperimentConfig) -> ExperimentResult:
  spec = load_spec(config)
  the_plan, entries = plan_lib.plan(spec, plan_lib.Inputs(config.dump, config.squad,
                                                         config.nq, config.corpus))
  work = os.path.abspath(config.out)
  results_dir = config.results_dir or os.path.join("docs", "results", spec.name)
  records_file = os.path.join(results_dir, execute.RECORDS_FILE)
  # Read once: refresh() adds this run's records to it (a narrowed run keeps the others').
  records = tio.read_json(records_file) if os.path.exists(records_file) else {}
  # A dry run writes nothing: it counts what a run would restore as done.
  unwritten: list[str] = []
  if config.dry_run and records:
    unwritten = execute.restorable(the_plan, work, records)
  elif not config.recheck and records:
    tio.makedirs(work)
    restored = execute.restore(the_plan, work, records)
    if restored:
      logs.progress("restored %d finished cells from %s", len(restored), records_file)
  states = {**execute.states(work, the_plan), **{name: "done" for name in unwritten}}
  # A run narrowed to some seeds executes (and estimates) those seeds' cells and what they
  # read; the tables and README stay the whole grid's, the other seeds "todo".
  to_run = the_plan if config.seeds is None else the_plan.of_seeds(config.seeds)
  grid_seeds = sorted({c.id.seed for c in the_plan if c.id.seed is not None})
  if config.seeds is not None and not set(config.seeds) & set(grid_seeds):
    raise ValueError(f"--seeds {','.join(map(str, config.seeds))}: the grid "
                     f"{spec.name!r} has no cell of those seeds (its seeds: "
                     f"{', '.join(map(str, grid_seeds))})")
  # A restored cell whose files a cell still to do reads runs again: estimated, shown "redo".
  redo = execute.needed(to_run, work, {c.name: states[c.name] for c in to_run}, unwritten)
  text, _ = estimate.describe(to_run, [n for n, s in states.items() if s == "done"],
                             execute.measured_seconds(the_plan, work, states),
                             redo=[n for n in redo if states[n] == "done"])
  if config.dry_run:
    return ExperimentResult(text, (), states, results_dir)
  if config.recheck:
    from twotower.experiment import recheck  # pylint: disable=import-outside-toplevel
    rows = recheck.recheck(the_plan, work, config.recheck_dir or os.path.join(work, "recheck"),
                           config.recheck, config.recheck_seed, config.progress)
    path = recheck.write(rows, results_dir, config.recheck, config.recheck_seed, work)
    logs.progress("%s", recheck.table(rows))
    logs.progress("wrote %s", path)
    return ExperimentResult(text, tuple(r.cell for r in rows), states, results_dir)
  if config.readme and not render.has_block(config.readme, spec.name):
    # Said before any cell runs, not after the first one.
    raise ValueError(f"{config.readme}: no <!-- results:{spec.name} --> ... "
                     f"<!-- /results:{spec.name} --> block to write the summary into")
  tio.makedirs(work)
  logs.progress(text.splitlines()[0])

  def refresh() -> None:
    written = render.write_tables(spec, the_plan, entries, work, results_dir)
    records.update(execute.export_records(the_plan, work))
    tio.write_json(records_file, records)
    render.write_readme(spec, the_plan, work, config.command, results_dir, written.sections)
    if config.readme:
      render.update_blocks(config.readme, spec, written, results_dir)

  if config.render_only:
    if records and not {c.dirname for c in the_plan} & set(records):
      # Rendering would overwrite the tables with empty ones while the records stay.
      raise ValueError(
          f"{records_file}: none of its {len(records)} records is a cell of this plan, so the "
          "grid's inputs or settings differ from the run that wrote them (a file given by "
          "another path is another input: give the paths of the README's command); nothing "
          "rendered, the tables are kept")
    # What a narrowed or interrupted run has left, shown against the whole grid.
    refresh()
    return ExperimentResult(text, (), states, results_dir)
  ran = execute.run_cells(to_run, work, beam_args=config.beam_args,
                          keep_embeddings=config.keep_embeddings, progress=config.progress,
                          on_result=refresh)
  refresh()
  return ExperimentResult(text, tuple(ran), execute.states(work, the_plan), results_dir)
