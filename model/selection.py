"""The rule that picks a fine-tuning checkpoint from its validation curve, pure (no
TensorFlow: the grid's planning and records use it too). loop.KeepBest applies it as a run
trains; `best_index` gives the same answer on a finished curve.
"""

from __future__ import annotations

import math
from typing import Sequence


def smoothed(values: Sequence[float], window: int) -> list[float]:
  """The trailing moving average of a curve: point i is the mean of points i-window+1..i (of
  fewer at the start, where fewer exist). window 1: the curve itself."""
  return [math.fsum(values[max(0, i - window + 1):i + 1]) / (i + 1 - max(0, i - window + 1))
          for i in range(len(values))]


def first_judged(count: int, window: int) -> int:
  """The index of the first checkpoint a curve of `count` checkpoints judges: the first whose
  trailing window is full. The checkpoints before it average fewer points; a single point of
  a small validation split is noise, and would otherwise win before the model has fitted its
  training pairs (ReQA SQuAD at 5 %: 72 questions, one of them 1.4 points of R@100). A curve
  shorter than the window is judged at its last checkpoint only."""
  return max(0, min(window, count) - 1)


def best_index(values: Sequence[float], window: int = 1, higher: bool = True) -> int | None:
  """The selection rule KeepBest applies as it trains: among the checkpoints with a full
  window (`first_judged`), the earliest where the trailing `window`-checkpoint moving average
  of the metric is best (None: no checkpoint)."""
  best = None
  first = first_judged(len(values), window)
  for i, v in enumerate(smoothed(values, window)):
    if i >= first and (best is None or (v > best[1] if higher else v < best[1])):
      best = (i, v)
  return None if best is None else best[0]


def smoothed_name(monitor: str, window: int) -> str:
  """The logged name of `monitor`'s moving average ("val_R@100_avg3"); window 1: `monitor`."""
  return monitor if window <= 1 else f"{monitor}_avg{window}"
