"""A rough run-time estimate of a plan's cells (`twotower experiment --dry_run` and the plan
printed before a run), calibrated on this 2-core machine and scaled by the cells a work
directory has timed."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from twotower.experiment.plan import FINETUNE_LENGTH, KINDS, Cell, Plan

#: Seconds per training example per unit of (q+d) x L x H^2, and fixed costs per cell. Measured
#: idle: 100 cpu-small steps at batch 64 (q 32 + d 128, L2, H128) in 40 s.
_EXAMPLE_COST = 1.2e-9
_BOW_EXAMPLE = 1.5e-3
_TRAIN_OVERHEAD, _EVAL_OVERHEAD = 30.0, 45.0
#: Documents embedded per second per unit of d x L x H^2 (forward only, about a third of a
#: training example's cost, one tower).
_CANDIDATES = 11_000


def example_seconds(model: Mapping[str, Any]) -> float:
  if model.get("encoder") == "bow_mlp":
    return _BOW_EXAMPLE
  return _EXAMPLE_COST * (model["query_len"] + model["doc_len"]) * max(model["num_layers"], 1) \
      * model["hidden_dim"] ** 2


def estimate_seconds(cell: Cell, plan_: Plan) -> float:
  """A rough wall time of one cell on 2 cores."""
  fixed = {"pairs": 60.0, "vocab": 30.0, "reqa": 60.0, "datastats": 20.0, "hardneg": 60.0,
           "bm25": 40.0, "fuse": 10.0, "bundle": 90.0}
  if cell.kind in fixed:
    return fixed[cell.kind]
  if cell.kind == "beir" and "model" not in cell.deps:  # BM25 flat on a BEIR folder
    return fixed["bm25"]
  if cell.kind in ("eval", "beir"):  # (a BEIR folder's size is unknown to the plan)
    cfg = plan_[cell.deps["model"]].params.config
    return _EVAL_OVERHEAD + _CANDIDATES * example_seconds(cfg["model"]) / 3
  cfg = cell.params.config
  if cell.kind == "pretrain":
    examples = cfg["trainer"]["steps"] * cfg["data"]["batch_size"]
    return _TRAIN_OVERHEAD + examples * example_seconds(cfg["model"])
  return _finetune_seconds(cell, plan_)


def _finetune_seconds(cell: Cell, plan_: Plan) -> float:
  """A fine-tuning cell: its steps; under `finetune_select` also the validation split scored
  at each checkpoint (about an eval cell's embedding of every candidate), and for a cell that
  carries its length, the chosen length's upper bound: the source's cap, scaled by the two
  ratios (as the training questions scale) where the ratio differs."""
  cfg, params = cell.params.config, cell.params
  per_example = example_seconds(cfg["model"])
  source = plan_[cell.deps[FINETUNE_LENGTH]] if FINETUNE_LENGTH in cell.deps else None
  if source is not None:
    steps = source.params.config["trainer"]["finetune_steps"] * params.ratio / \
        max(source.params.ratio, 1)
  else:
    steps = cfg["trainer"]["finetune_steps"]
  seconds = _TRAIN_OVERHEAD + steps * cfg["trainer"]["finetune_batch_size"] * per_example
  if getattr(params, "select", None):
    seconds += params.select["checkpoints"] * _CANDIDATES * per_example / 3
  return seconds


def format_seconds(seconds: float) -> str:
  if seconds < 90:
    return f"{seconds:.0f} s"
  if seconds < 5400:
    return f"{seconds / 60:.0f} min"
  return f"{seconds / 3600:.1f} h"


#: Finished cells of a kind needed before their measured times scale that kind's estimates.
_CALIBRATION_MIN_CELLS = 3


def calibration(plan_: Plan, measured: Mapping[str, float]) -> dict[str, float]:
  """{kind: measured / estimated wall seconds} over the finished cells this run timed, for
  each kind with enough of them, and under "*" over all of them: the formula above was fit on
  one machine under no load, and a work dir's own cells say what this machine does."""
  actual: dict[str, float] = {}
  guessed: dict[str, float] = {}
  count: dict[str, int] = {}
  for name, seconds in measured.items():
    cell = plan_[name]
    for key in (cell.kind, "*"):
      actual[key] = actual.get(key, 0.0) + seconds
      guessed[key] = guessed.get(key, 0.0) + estimate_seconds(cell, plan_)
      count[key] = count.get(key, 0) + 1
  return {k: actual[k] / guessed[k] for k in actual
          if count[k] >= _CALIBRATION_MIN_CELLS and guessed[k] > 0}


def describe(plan_: Plan, done: Sequence[str] = (),
             measured: Optional[Mapping[str, float]] = None,
             redo: Sequence[str] = ()) -> tuple[str, float]:
  """One line per cell with its state and time, a header line; the seconds left.
  `measured`: {finished cell: its wall seconds} of cells run in this work dir: shown for
  those cells, and they scale the estimates of the others (`calibration`). `redo`: finished
  cells restored without their files that a cell still to do reads: they run again."""
  redo = set(redo)
  done, measured = set(done) - redo, dict(measured or {})
  scale = calibration(plan_, measured)
  lines, remaining = [], 0.0
  for cell in plan_:
    state = "redo" if cell.name in redo else "done" if cell.name in done else "todo"
    if cell.name in measured:
      shown = format_seconds(measured[cell.name])
    else:
      seconds = estimate_seconds(cell, plan_) * scale.get(cell.kind, scale.get("*", 1.0))
      shown = "~" + format_seconds(seconds)
      if state != "done":
        remaining += seconds
    lines.append(f"  {state}  {cell.kind:<8} {cell.name:<58} {shown}")
  counts = {k: len(plan_.of_kind(k)) for k in KINDS if plan_.of_kind(k)}
  basis = (f"scaled by the {len(measured)} cells timed in this work dir"
           if scale else "on 2 cores")
  head = (f"{len(plan_)} cells ({', '.join(f'{v} {k}' for k, v in counts.items())}); rough "
          f"estimate of what is left ({basis}): {format_seconds(remaining)}")
  return "\n".join([head] + lines), remaining
