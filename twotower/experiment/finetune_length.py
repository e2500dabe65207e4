"""How long each grid row fine-tunes when its length is chosen on validation (issue 37: "each
row fits its training pairs"): the grid's `training.finetune_select` (FinetuneSelect), and
what a fine-tuning cell records of its choice.

The rule, the same for every row, ratio and seed: train up to a cap, score the ratio's
validation split (never the test side) at evenly spaced checkpoints, keep the earliest
checkpoint where the trailing 3-checkpoint moving average of validation R@100 is best, judged
from the first checkpoint whose window is full (model.selection.best_index), and stop after
`patience` checkpoints without a new best. A ratio whose validation split is too small to
choose on (ReQA SQuAD at 1 %: 18 questions, one of them 5.6 points of R@100) trains the
length its row chose at another ratio, scaled by the two ratios' training questions (the
same number of passes over its pairs). Optionally (`share_seed`) one seed chooses and the
others carry its length.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence

from twotower.experiment import grid_files
from twotower.model import selection


@dataclasses.dataclass(frozen=True)
class FinetuneSelect:
  """How long each row fine-tunes, chosen on its own validation curve (`training:
  finetune_select:` in a grid file), the same rule for every row, ratio and seed.

  A cell at a ratio of `max_steps` trains up to that cap, scores the ratio's validation
  split (never the test side) at `checkpoints` evenly spaced checkpoints, and keeps the
  earliest checkpoint whose trailing moving average of `metric` over `window` checkpoints is
  best (model.selection.best_index); it stops once `patience` checkpoints pass without a new best.
  A ratio of `carry` has too few validation questions to choose on (under `min_questions`):
  it trains the length its row chose at the ratio `carry` names (same variant), scaled by
  the two ratios' training questions, i.e. as many passes over its pairs. With `share_seed`
  set, only that seed chooses; the row's other seeds train the length it chose (a third of
  the validation scoring; a seed's spread then leaves out the choice's own noise).
  A carried length runs the source's schedule (warm-up, decay to 0 at the cap), scaled
  like the length, and stops at the chosen step.
  """
  max_steps: Mapping[int, int]                 # per ratio: the cap
  carry: Mapping[int, int] = dataclasses.field(default_factory=dict)  # ratio -> source ratio
  metric: str = "R@100"
  window: int = 3
  checkpoints: int = 8
  patience: int = 2
  min_questions: int = 50
  share_seed: Optional[int] = None

  def source(self, ratio: int, seed: int) -> Optional[tuple[int, int]]:
    """(ratio, seed) of the cell whose chosen length a cell carries; None: it chooses."""
    source = (self.carry.get(ratio, ratio),
              seed if self.share_seed is None else self.share_seed)
    return None if source == (ratio, seed) else source

  def selection(self) -> dict:
    """What a selecting cell's parameters record (FinetuneParams.select)."""
    return {"metric": self.metric, "window": self.window, "checkpoints": self.checkpoints,
            "patience": self.patience, "min_questions": self.min_questions}

  def describe(self, ratio: int) -> Optional[str]:
    """How a ratio's length is set, for the README (None: not by this rule)."""
    seeds = "" if self.share_seed is None else f" (seed {self.share_seed}'s)"
    if ratio in self.carry:
      return f"the {self.carry[ratio]} % length{seeds}, scaled by training questions"
    if ratio in self.max_steps:
      return f"chosen on validation {self.metric}{seeds}, up to {self.max_steps[ratio]}"
    return None

  def check(self, trained_ratios, where: str) -> None:
    """Every trained ratio of the grid chooses its length or carries one."""
    missing = [r for r in trained_ratios if r not in self.max_steps and r not in self.carry]
    if missing:
      raise ValueError(f"{where}: training.finetune_select has no max_steps or carry for "
                       f"ratio(s) {missing}")

  def checkpoint_every(self, ratio: int) -> int:
    """Steps between the validation checkpoints of a ratio's cap."""
    return self.max_steps[ratio] // self.checkpoints


def parse_select(raw: Optional[Mapping[str, Any]], where: str) -> Optional[FinetuneSelect]:
  if raw is None:
    return None
  where = f"{where}: training.finetune_select"
  raw = grid_files.known_fields(raw, FinetuneSelect, where)
  raw["max_steps"] = {int(k): int(v) for k, v in (raw.get("max_steps") or {}).items()}
  raw["carry"] = {int(k): int(v) for k, v in (raw.get("carry") or {}).items()}
  sel = FinetuneSelect(**raw)
  if sel.window < 1 or sel.checkpoints < 1 or sel.patience < 0 or sel.min_questions < 0:
    raise ValueError(f"{where}: window and checkpoints >= 1, patience and min_questions >= 0")
  # A cap that the checkpoints divide: the trainer would otherwise checkpoint at another
  # divisor of the cap (model.train.checkpoint_interval), i.e. score validation more often.
  bad = [r for r, s in sel.max_steps.items() if s < sel.checkpoints or s % sel.checkpoints]
  if bad:
    raise ValueError(f"{where}: max_steps of ratio(s) {bad} not a multiple of "
                     f"{sel.checkpoints} checkpoints")
  for ratio, source in sel.carry.items():
    if source not in sel.max_steps:
      raise ValueError(f"{where}: carry {ratio}: {source}, but ratio {source} has no "
                       "max_steps to choose a length on")
  return sel


def carried(source: Mapping[str, Any], train_questions: int,
            source_train_questions: int) -> tuple[int, int]:
  """(schedule steps, stop step) of a carried length: the source's cap and chosen step (its
  `record`), scaled by the two ratios' training questions (as many passes over the pairs;
  1 for a seed of the same ratio), at least 1."""
  if source_train_questions <= 0:
    raise ValueError("the source ratio has no training questions to scale by")
  scale = train_questions / source_train_questions
  return (max(1, round(source["cap"] * scale)), max(1, round(source["chosen_step"] * scale)))


def record(history: Mapping[str, list], select: Mapping[str, Any], selected_step: int,
           cap: int, validation_questions: int) -> dict:
  """What a selecting cell's done record says of its choice: the validation curve, its moving
  average, the rule's step (recomputed from the curve: the one the run exported), the steps
  trained and the cap."""
  metric, window = f"val_{select['metric']}", int(select["window"])
  steps = [int(s) for s, v in zip(history.get("step", ()), history.get(metric, ()))]
  values = [float(v) for v in history.get(metric, ())]
  chosen = selection.best_index(values, window)
  if chosen is not None and steps[chosen] != selected_step:
    raise ValueError(f"the run exported step {selected_step}, the rule chooses "
                     f"{steps[chosen]} on its curve")
  return {"rule": dict(select), "metric": metric, "steps": steps, "values": values,
          "smoothed": selection.smoothed(values, window), "chosen_step": selected_step,
          "steps_trained": int(history["step"][-1]) if history.get("step") else 0,
          "cap": cap, "validation_questions": validation_questions}


def lengths_markdown(records: Sequence[Mapping[str, Any]]) -> list[str]:
  """The grid README's section on the fine-tuning lengths: per fine-tuning cell that chose or
  carried its length, how, the step kept, the steps trained and the cap, the validation
  curve's smoothed value there and the training in-batch accuracy at that step (whether the
  row fits its pairs). A length chosen at the cap is marked: its curve may still be rising."""
  rows = [r for r in records if r.get("kind") == "finetune" and r.get("selection")]
  if not rows:
    return []
  lines = ["", "## Fine-tuning lengths", "",
           "Each row's fine-tuning length, chosen on its ratio's validation split or carried "
           "(training.finetune_select of the grid file). Validation R@100 is the trailing "
           "average the rule compares, from the first checkpoint whose window is full; "
           "training accuracy is the in-batch accuracy of the training batches at the kept "
           "step. \"at the cap\": the best average was the last "
           "checkpoint, so a longer cap might have gone further.", "",
           "| cell | length | kept step | trained | cap | validation R@100 (avg) | "
           "training accuracy |", "|---|---|---:|---:|---:|---:|---:|"]
  for record in sorted(rows, key=lambda r: r["cell"]):
    sel, history = record["selection"], record.get("history") or {}
    step = int(sel["chosen_step"])
    if sel.get("carried_from"):
      source = sel["carried_from"]
      how = f"carried from {source['ratio']} %, seed {source['seed']} (step {sel['source_step']})"
      smoothed = "–"
    else:
      values = sel.get("smoothed") or []
      at = sel["steps"].index(step) if step in sel.get("steps", ()) else None
      smoothed = f"{100 * values[at]:.2f}" if at is not None and at < len(values) else "–"
      how = f"chosen on {sel.get('validation_questions', '?')} validation questions" + (
          ", at the cap" if step == sel.get("cap") else "")
    accuracy = dict(zip(history.get("step", ()), history.get("in_batch_accuracy", ())))
    acc = f"{accuracy[step]:.2f}" if step in accuracy else "–"
    trained = sel.get("steps_trained") or step
    lines.append(f"| `{record['cell']}` | {how} | {step:,} | {int(trained):,} | "
                 f"{int(sel['cap']):,} | {smoothed} | {acc} |")
  return lines
