"""The reading's pre-training section: each pre-training run's held-out in-batch accuracy at
its last step against chance (1 / the documents a held-out query is ranked among: the batch,
or the run's held-out pairs where fewer), so "does not generalise at this scale" is computed,
not asserted. experiment.readings prints it below the claims.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterable, Mapping, Optional, Sequence

from twotower.experiment import plan as plan_lib
from twotower.experiment import row_configs
from twotower.experiment.grid import GridSpec, RowRef
from twotower.experiment.cell_id import CellId


@dataclasses.dataclass(frozen=True)
class PretrainCheck:
  """One pre-training run's last held-out in-batch accuracy against chance."""
  cell: str
  label: str
  steps: int
  batch: int
  eval_examples: int          # eval_steps x batch: the examples each held-out point averages
  heldout_accuracy: float
  train_accuracy: float
  heldout_pairs: Optional[int] = None  # the run's tasks' held-out pairs (None: not recorded)

  @property
  def distinct(self) -> int:
    """The distinct held-out pairs a held-out point can hold: a held-out set smaller than
    the batch or than the point is cycled, and a document repeated in a batch is masked as an
    accidental hit, not counted as a negative."""
    return self.batch if self.heldout_pairs is None else max(1, min(self.batch,
                                                                    self.heldout_pairs))

  @property
  def chance(self) -> float:
    """1 / the documents each query is ranked among: the batch, or fewer held-out pairs."""
    return 1.0 / self.distinct

  @property
  def margin(self) -> float:
    """Two binomial standard errors of an accuracy at chance over the distinct held-out
    examples of one point (its examples, or the held-out pairs where fewer)."""
    n = min(self.eval_examples, self.heldout_pairs or self.eval_examples)
    return 2 * math.sqrt(self.chance * (1 - self.chance) / max(1, n))

  @property
  def above_chance(self) -> bool:
    return self.heldout_accuracy >= self.chance + self.margin


def checks(spec: GridSpec, records: Iterable[Mapping],
           label: Callable[[RowRef], str]) -> list[PretrainCheck]:
  """A check per pre-training record (cells.json values) whose history logs the held-out
  in-batch accuracy (MLM logs none; a record restored from an older file may hold no
  history); rows the grid no longer has are left out. The held-out pair counts come from
  the record of the pair cell the run read (its `stats`), where cells.json holds it."""
  records = list(records)
  pair_stats = {r.get("cell"): r.get("stats") or {} for r in records if r.get("kind") == "pairs"}
  # Whether the grid ran with a SQuAD file (the names of the control row's pair cells say
  # so; without a control row, every row's is pairs/wiki either way).
  have_squad = any("squad" in CellId.parse(cell).dataset for cell in pair_stats)
  out = []
  for record in records:
    history = record.get("history") or {}
    if record.get("kind") != "pretrain" or not history.get("val_in_batch_accuracy"):
      continue
    cell = CellId.parse(record["cell"])
    system, variant = spec.systems.get(cell.system), spec.variants.get(cell.variant)
    if system is None or variant is None or cell.seed is None:
      continue
    cfg = row_configs.pretrain_config(spec, system, variant, cell.seed)
    stats = pair_stats.get(str(plan_lib.pairs_id(
        spec, spec.squad_text_in_pretraining(system), have_squad, spec.pairs_of(system))), {})
    counts = [stats.get(f"pairs_{task}_heldout") for task in cfg.data.tasks]
    out.append(PretrainCheck(
        record["cell"], label(RowRef(system.name, variant.name)),
        int(history["step"][-1]), cfg.data.batch_size, cfg.trainer.eval_steps *
        cfg.data.batch_size, float(history["val_in_batch_accuracy"][-1]),
        float(history["in_batch_accuracy"][-1]),
        sum(int(n or 0) for n in counts) if stats else None))
  return sorted(out, key=lambda c: c.cell)


def markdown(checks: Sequence[PretrainCheck], without_history: int) -> list[str]:
  lines = ["## Pre-training: does each task generalise?", "",
           "Held-out in-batch accuracy at the last logged step of each pre-training run, "
           "against chance: 1 / the documents each held-out query is ranked among, the batch, "
           "or the run's held-out pairs where there are fewer (a smaller held-out set is "
           "cycled, and a document repeated in a batch is masked as an accidental hit, not "
           "counted as a negative). A run is **above chance** when its accuracy is at least "
           "chance + 2 binomial standard errors of an accuracy at chance over the distinct "
           "held-out examples of that point (eval steps × batch, or the held-out pairs where "
           "fewer). Otherwise the task **does not generalise at this scale**: the towers "
           "learn the training pairs (training accuracy beside it) without learning what "
           "they share with held-out ones. A mixture's held-out pairs are its tasks' "
           "together; MLM logs no in-batch accuracy and is not listed."
           + (f" {without_history} pre-training record(s) hold no history (restored from "
              "an earlier records file) and are not listed." if without_history else ""), "",
           "| run | row | steps | batch | held-out pairs | chance | margin | "
           "held-out accuracy | training accuracy | verdict |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
  for c in checks:
    pairs = "–" if c.heldout_pairs is None else f"{c.heldout_pairs:,}"
    lines.append(f"| `{c.cell}` | {c.label} | {c.steps} | {c.batch} | {pairs} | "
                 f"{c.chance:.4f} | {c.margin:.4f} | {c.heldout_accuracy:.4f} | "
                 f"{c.train_accuracy:.4f} | "
                 f"**{'above chance' if c.above_chance else 'does not generalise at this scale'}"
                 f"** |")
  return lines + [""]
