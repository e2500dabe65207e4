"""Is a grid's number what the cell gives when it is made again? Re-makes a seeded sample of
finished result cells in a scratch work directory and compares every metric with the record:

    twotower experiment --grid cpu-small --out runs/cpu-small ... --recheck 8

A sampled evaluation is re-made with the training cell it scores when that is a fine-tuning
(the towers are trained again from the same pre-trained checkpoint, then evaluated); a
zero-shot evaluation re-embeds the pre-trained towers. Pre-training cells are not re-made (the
slowest cells; tests/test_model_determinism.py holds them to the same weights). Everything
else a re-made cell reads is the work directory's own output, linked into the scratch
directory, so the comparison isolates the cells re-made. The sample is stratified by ratio
(round-robin over the ratios, seeded order within each), so that a sample of 8 spans the
ratios and tables. Cells restored from records (run in another work directory) are not
sampled: they have no outputs here to re-make them from.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
from typing import Sequence

from twotower.core import contracts
from twotower.core import files as tio
from twotower.experiment import execute
from twotower.experiment.plan import Cell, Plan

logger = logging.getLogger(__name__)

RECHECK_FILE = "recheck.md"


@dataclasses.dataclass(frozen=True)
class Recheck:
  """One sampled cell: its recorded and re-made metrics on the split its table scores (the
  `pair` gold), and whether every metric of every record (each split, each gold) is the
  same float."""
  cell: str
  split: str
  remade: tuple[str, ...]
  recorded: dict
  now: dict
  identical: bool
  max_abs_diff: float


def remade_cells(plan: Plan, cell: Cell) -> list[Cell]:
  """The cells re-made to check `cell`: its trainer when that is a fine-tuning, then it."""
  model = plan[cell.deps["model"]]
  return ([model] if model.kind == "finetune" else []) + [cell]


def candidates(plan: Plan, work: str) -> list[Cell]:
  """Evaluation cells that ran here, with every cell they and their re-made trainer read."""
  ran_here = {c.name for c in plan if execute.ran_here(work, c)}  # each done.json read once
  out = []
  for cell in plan.of_kind("eval"):
    chain = remade_cells(plan, cell)
    needs = {c.name for c in chain} | {d for c in chain for d in c.deps.values()}
    if needs <= ran_here:
      out.append(cell)
  return out


def sample(cells: Sequence[Cell], n: int, seed: int) -> list[Cell]:
  """`n` cells, round-robin over ratios (a seeded order within each ratio)."""
  rng = random.Random(seed)
  by_ratio: dict[int, list[Cell]] = {}
  for cell in sorted(cells, key=lambda c: c.name):
    by_ratio.setdefault(cell.id.ratio or contracts.ZERO_SHOT_RATIO, []).append(cell)
  for group in by_ratio.values():
    rng.shuffle(group)
  picked: list[Cell] = []
  while len(picked) < n and any(by_ratio.values()):
    for ratio in sorted(by_ratio):
      if by_ratio[ratio] and len(picked) < n:
        picked.append(by_ratio[ratio].pop())
  return picked


def _link_inputs(plan: Plan, work: str, scratch: str, chain: Sequence[Cell]) -> Plan:
  """A plan of `chain` and the cells it reads; those are links to the work directory's."""
  sub = Plan()
  names = {c.name for c in chain}
  for cell in chain:
    for dep in cell.deps.values():
      if dep in names or dep in sub.cells:
        continue
      src, dst = execute.cell_dir(work, plan[dep]), execute.cell_dir(scratch, plan[dep])
      tio.makedirs(os.path.dirname(dst))
      if not os.path.lexists(dst):
        os.symlink(src, dst)
      sub.cells[dep] = plan[dep]
  for cell in chain:
    sub.cells[cell.name] = cell
  return sub


def _metrics(record: dict) -> list[dict]:
  return [r["metrics"] for r in record.get("records", ())]


def _scored(record: dict, split: str) -> dict:
  """The metrics of `split` under the `pair` gold (the tables' convention)."""
  return next(r["metrics"] for r in record["records"]
              if r["split"] == split and r.get("gold", "pair") == "pair")


def recheck(plan: Plan, work: str, scratch: str, n: int, seed: int = 0,
            progress: str = "none") -> list[Recheck]:
  """Re-makes `n` sampled result cells (with their fine-tuning) under `scratch` and compares."""
  picked = sample(candidates(plan, work), n, seed)
  if len(picked) < n:
    logger.warning("recheck: %d cells asked for, %d can be re-made from %s", n, len(picked),
                   work)
  results = []
  for cell in picked:
    chain = remade_cells(plan, cell)
    # A scratch directory per cell: a fine-tuning re-made for one cell is not reused.
    cell_scratch = os.path.join(scratch, cell.dirname.replace("/", "_"))
    for c in chain:  # a re-made cell starts from nothing
      if os.path.exists(execute.cell_dir(cell_scratch, c)):
        raise ValueError(f"recheck: {execute.cell_dir(cell_scratch, c)} exists; give an "
                         "empty --recheck_dir")
    sub = _link_inputs(plan, work, cell_scratch, chain)
    execute.run_cells(sub, cell_scratch, progress=progress, stop_on_failure=True)
    recorded = execute.ran_here(work, cell)
    remade = execute.read_done(execute.cell_dir(cell_scratch, cell))
    before, after = _metrics(recorded), _metrics(remade)
    diffs = [abs(a[k] - b[k]) for a, b in zip(before, after) for k in a]
    same = len(before) == len(after) and all(a == b for a, b in zip(before, after))
    split = contracts.scored_split(cell.id.ratio or contracts.ZERO_SHOT_RATIO)
    results.append(Recheck(cell.name, split, tuple(c.name for c in chain),
                           _scored(recorded, split), _scored(remade, split), same,
                           max(diffs, default=0.0)))
    logger.info("recheck %s: %s", cell.name, "identical" if same else f"differs by {max(diffs)}")
  return results


def table(rows: Sequence[Recheck], metrics: Sequence[str] = ("R@10", "R@100", "MRR")) -> str:
  """Markdown: each sampled cell, what was re-made, recorded vs re-made metrics."""
  head = " | ".join(f"{m} recorded | {m} re-made" for m in metrics)
  lines = [f"| cell | split | re-made | {head} | every metric identical | max abs diff |",
           "|---|---|---|" + "---:|---:|" * len(metrics) + "---|---:|"]
  for r in rows:
    values = " | ".join(f"{100 * r.recorded[m]:.4f} | {100 * r.now[m]:.4f}" for m in metrics)
    lines.append(f"| `{r.cell}` | {r.split} | {len(r.remade)} cell(s) | {values} | "
                 f"{'yes' if r.identical else 'no'} | {r.max_abs_diff:.3g} |")
  return "\n".join(lines) + "\n"


def write(rows: Sequence[Recheck], results_dir: str, n: int, seed: int, work: str) -> str:
  """`<results_dir>/recheck.md`; returns its path."""
  same = sum(r.identical for r in rows)
  text = (f"# Re-made cells\n\nWritten by `twotower experiment --recheck {n}` (seed {seed}): "
          f"a seeded sample of the finished evaluation cells of `{work}`, each re-made with "
          "its fine-tuning in a scratch directory (twotower/experiment/recheck.py). "
          f"{same} of {len(rows)} gave every metric of every split as the same float. Recalls "
          "in percent on the split the tables score (gold `pair`).\n\n" + table(rows))
  path = os.path.join(results_dir, RECHECK_FILE)
  tio.write_text(path, text)
  return path
