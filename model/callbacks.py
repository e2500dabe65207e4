"""The callbacks every trainer drives at each checkpoint, on any Keras backend (no
TensorFlow here: the JAX trainer's process never imports it):

  History   one row per checkpoint (its step first) in history.csv and in memory
  KeepBest  the best checkpoint so far by a logged metric (or its moving average), saved
            through a `BestSaver` (TensorFlow: loop.TfBestCheckpoint; JAX:
            jax_checkpoints.BestWeights); with a patience, it stops a run that stopped
            improving
  Progress  a tqdm bar over all steps, or one line per checkpoint, or nothing
  WallBudget  stops training once a wall-clock budget is spent (TrainRunConfig.wall_budget_s:
            a run sized by time, as on a borrowed accelerator), ending with the checkpoint and
            history row of the step it stopped at
"""

from __future__ import annotations

import csv
import io
import logging
import math
import sys
import time
from typing import Protocol

import keras

from twotower.core import files as tio
from twotower.core import logs as logs_lib
from twotower.model.jobs import PROGRESS_MODES
from twotower.model.selection import smoothed, smoothed_name

logger = logging.getLogger(__name__)


class BestSaver(Protocol):
  """Where KeepBest keeps the best checkpoint's weights (one checkpoint, numbered by step)."""

  def latest_step(self) -> int | None:
    """The step of the checkpoint held, None when none is."""

  def save(self, step: int) -> None:
    """Replaces the held checkpoint by the model's weights now."""

  def restore(self, model: keras.Model) -> None:
    """Loads the held checkpoint's weights into `model`."""


def _step(model: keras.Model) -> int:
  return int(model.optimizer.iterations.numpy())


def _floats(logs) -> dict[str, float]:
  return {k: float(v) for k, v in (logs or {}).items()}


class History(keras.callbacks.Callback):
  """One row per checkpoint, `step` and `epoch` first, kept in memory and rewritten to
  history.csv (atomically: a kill never leaves half a row). A resumed run starts from the
  rows of the earlier invocations up to the restored step, so the history covers the run."""

  def __init__(self, path: str | None, start_step: int):
    super().__init__()
    self.path = path
    self.rows: list[dict[str, float]] = []
    if path and tio.match_files(path, missing_ok=True):
      rows = list(csv.DictReader(io.StringIO(tio.read_text(path))))
      self.rows = [{k: float(v) for k, v in r.items() if v not in ("", None)} for r in rows
                   if "step" in r and float(r["step"]) <= start_step]

  def on_epoch_end(self, epoch, logs=None):
    self.rows.append({"step": float(_step(self.model)), "epoch": float(epoch), **_floats(logs)})
    if self.path:
      columns = list(dict.fromkeys(k for row in self.rows for k in row))
      out = io.StringIO()
      writer = csv.DictWriter(out, fieldnames=columns, restval="")
      writer.writeheader()
      writer.writerows({k: (int(v) if k in ("step", "epoch") else v) for k, v in row.items()}
                       for row in self.rows)
      tio.write_text(self.path, out.getvalue())

  def as_dict(self) -> dict[str, list[float]]:
    """{metric: [value per checkpoint]} (NaN where a checkpoint did not log the metric)."""
    columns = list(dict.fromkeys(k for row in self.rows for k in row))
    return {c: [row.get(c, math.nan) for row in self.rows] for c in columns}


def higher_is_better(metric: str) -> bool:
  """Recalls, MRR and accuracies go up; losses go down."""
  return "loss" not in metric


class KeepBest(keras.callbacks.Callback):
  """Keeps the model weights of the checkpoint with the best `monitor` (a key of the epoch
  logs, e.g. "val_R@100") through `saver`, numbered by step; ties keep the earlier step.
  On resume, the best so far comes back from the saver's checkpoint and the history rows.

  `window` > 1 judges each checkpoint by the trailing moving average of `monitor` over the
  last `window` checkpoints (`best_index`; a single point of a small validation split is
  noise), logged as `smoothed_name(monitor, window)`, from the first checkpoint whose window
  is full (`selection.first_judged`). `patience` > 0 stops training once
  that many checkpoints have passed without a new best (`stopped`): the run trains to its
  last step only while it still improves.
  """

  def __init__(self, monitor: str, saver: BestSaver, history: History, window: int = 1,
               patience: int = 0):
    super().__init__()
    self.monitor, self.window, self.patience = monitor, max(1, window), patience
    self.key = smoothed_name(monitor, self.window)
    self.history = history
    self.best_step: int | None = None
    self.best: float | None = None
    self.saver = saver
    step = saver.latest_step()
    if step is not None:
      values = [r[self.key] for r in history.rows if int(r["step"]) == step and self.key in r]
      if values:
        self.best_step, self.best = step, values[-1]

  def _curve(self) -> list[float]:
    """`monitor` at the checkpoints the history holds (this run's and a resumed one's)."""
    return [r[self.monitor] for r in self.history.rows if self.monitor in r]

  @property
  def stopped(self) -> bool:
    """Whether `patience` checkpoints have passed since the best one (a resumed run that had
    stopped trains no further)."""
    if not self.patience or self.best_step is None:
      return False
    later = [r for r in self.history.rows if self.monitor in r and r["step"] > self.best_step]
    return len(later) >= self.patience

  def on_epoch_end(self, epoch, logs=None):
    if self.monitor not in (logs or {}):
      raise ValueError(f"cannot select the checkpoint by {self.monitor!r}: it is not logged "
                       f"(logged: {', '.join(sorted(logs or {}))})")
    # The history has not taken this checkpoint's row yet (History runs after KeepBest).
    curve = self._curve() + [float(logs[self.monitor])]
    value = smoothed(curve, self.window)[-1]
    step = _step(self.model)
    if self.key != self.monitor:
      logs[self.key] = value
    # Only a full window is judged (selection.first_judged); a run whose cap has fewer
    # checkpoints than the window exports its last step, which best_index chooses too.
    judged = len(curve) >= self.window
    better = judged and (self.best is None or (
        value > self.best if higher_is_better(self.monitor) else value < self.best))
    if better:
      self.best, self.best_step = value, step
      self.saver.save(step)
    if self.best_step is None:
      logger.info("%s=%.4f at step %d; not judged (%d of %d checkpoints in its window)",
                  self.key, value, step, len(curve), self.window)
      return
    logger.info("%s=%.4f at step %d; best %.4f at step %d", self.key, value, step,
                self.best, self.best_step)
    # Counted with this checkpoint (History adds its row next).
    later = sum(1 for r in self.history.rows if self.monitor in r and r["step"] > self.best_step)
    if self.patience and not better and later + 1 >= self.patience:
      logger.warning("STOP: %d checkpoints without a better %s than %.4f at step %d",
                     self.patience, self.key, self.best, self.best_step)
      self.model.stop_training = True

  def restore(self, model: keras.Model) -> int | None:
    """Loads the best checkpoint's weights into `model`; returns its step (None if none)."""
    if self.saver.latest_step() is None:
      return None
    self.saver.restore(model)
    return self.best_step


class Progress(keras.callbacks.Callback):
  """What the user sees while it trains (TrainRunConfig.progress):

  "bar"    one tqdm bar over all steps, loss / accuracy as its postfix (refreshed at most
           once a second); the per-checkpoint summary only at INFO (`--verbose`). Where
           stderr is not a terminal (a log file, CI) a bar would write every redraw into
           it, so "bar" falls back to "epoch" there.
  "epoch"  one progress line per checkpoint
  "none"   nothing
  """

  def __init__(self, mode: str, total_steps: int, initial_step: int):
    super().__init__()
    if mode not in PROGRESS_MODES:
      raise ValueError(f"progress={mode!r}: expected one of {PROGRESS_MODES}")
    if mode == "bar" and not sys.stderr.isatty():
      mode = "epoch"
    self.mode, self.total, self.initial = mode, total_steps, initial_step
    self.bar = None
    self._last_postfix = 0.0

  def on_train_begin(self, logs=None):
    if self.mode == "bar":
      from tqdm.auto import tqdm  # pylint: disable=import-outside-toplevel
      self.bar = tqdm(total=self.total, initial=self.initial, unit="step", dynamic_ncols=True,
                      desc="train")

  def on_train_batch_end(self, batch, logs=None):
    if self.bar is None:
      return
    self.bar.update(1)
    now = time.monotonic()
    if logs and now - self._last_postfix >= 1.0:
      self._last_postfix = now
      self.bar.set_postfix({k: f"{v:.4f}" for k, v in _floats(logs).items()}, refresh=False)

  def on_epoch_end(self, epoch, logs=None):
    line = f"step {_step(self.model)}/{self.total}: " + ", ".join(
        f"{k} {v:.4f}" for k, v in _floats(logs).items())
    if self.mode == "epoch":
      logs_lib.progress(line)
    else:
      logger.info(line)

  def on_train_end(self, logs=None):
    if self.bar is not None:
      self.bar.close()
      self.bar = None


class WallBudget(keras.callbacks.Callback):
  """Stops `fit` after the first step that ends `seconds` or more after training began (the
  first step's compilation counts: it is spent on the budget too). Keras then ends the epoch
  as usual, so the checkpoint and history row of the stopping step are written. Each row
  also gets `wall_seconds`, the time since training began (the throughput between two rows,
  held-out batches and checkpoint writes included): the trainers put this callback before
  History. The learning rate schedule still spans the run's `steps`: size them to the
  budget for a full decay."""

  def __init__(self, seconds: float):
    super().__init__()
    if seconds <= 0:
      raise ValueError(f"wall budget {seconds} s: expected > 0")
    self.seconds = seconds
    self.started: float | None = None
    self.stopped_at: int | None = None

  def on_train_begin(self, logs=None):
    self.started = time.monotonic()

  def on_train_batch_end(self, batch, logs=None):
    if self.stopped_at is None and time.monotonic() - self.started >= self.seconds:
      self.stopped_at = _step(self.model)
      self.model.stop_training = True
      logger.warning("wall budget of %.0f s spent: stopping at step %d", self.seconds,
                     self.stopped_at)

  def on_epoch_end(self, epoch, logs=None):
    if logs is not None:
      logs["wall_seconds"] = time.monotonic() - self.started
