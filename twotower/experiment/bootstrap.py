"""Per-question paired bootstrap of a difference between two rows on one metric.

Each side is a list of runs (one per seed; a seedless BM25 side: its one run), each run
{question id: the 1-based rank of the gold candidate, or None where the gold is not in the
run's top 100} -- the values of `RanksOf` (experiment.readings). Per question, each side's
value is averaged over its runs (R@k: 100 where rank <= k, else 0; MRR: 100 / rank, 0 for
None), the questions are those both sides hold, and `resamples` samples of the questions
with replacement give the percentile 95 % interval of the mean difference A - B (and of the
ratio of the means A / B). The generator's seed is fixed, so an interval is the same on every
run: a reading re-rendered from the same ranks is the same file.

Pairing by question removes what the two rows share (an easy question is easy for both);
averaging over seeds first puts the seeds' spread into the per-question values, not into the
interval, which measures question sampling only (the reading's rule checks the seeds apart).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Optional, Sequence

import numpy as np

Run = Mapping[str, Optional[int]]
RESAMPLES = 2000
SEED = 20240937            # fixed: the same ranks give the same interval on every run
LEVEL = 0.95
# Resamples drawn at once: blocks of (block x questions) int32 indices keep memory at tens of
# MB for 12k questions, where all 2,000 at once would take about 200 MB.
_BLOCK = 250


@dataclasses.dataclass(frozen=True)
class Interval:
  """The bootstrap's answer for one comparison, in the metric's unit (percent points; MRR
  x 100)."""
  questions: int
  mean_a: float
  mean_b: float
  low: float                 # percentile interval of mean(A) - mean(B)
  high: float
  ratio_low: float           # percentile interval of mean(A) / mean(B) (nan: B's mean 0)
  ratio_high: float
  resamples: int

  @property
  def difference(self) -> float:
    return self.mean_a - self.mean_b


def metric_values(ranks: np.ndarray, metric: str) -> np.ndarray:
  """Per-question values in percent from ranks (0 = a miss at every k): "R@k" or "MRR"."""
  if metric == "MRR":
    return np.where(ranks > 0, 100.0 / np.maximum(ranks, 1), 0.0)
  if metric.startswith("R@") and metric[2:].isdigit():
    return np.where((ranks > 0) & (ranks <= int(metric[2:])), 100.0, 0.0)
  raise ValueError(f"bootstrap: metric {metric!r}; expected R@<k> or MRR")


def side_values(runs: Sequence[Run], questions: Sequence[str], metric: str) -> np.ndarray:
  """[questions]: each question's value averaged over the side's runs."""
  ranks = np.array([[run[q] or 0 for q in questions] for run in runs], dtype=np.int64)
  return metric_values(ranks, metric).mean(axis=0)


def common_questions(a: Sequence[Run], b: Sequence[Run]) -> list[str]:
  """The questions every run of both sides holds, sorted (a fixed order: determinism)."""
  keys = None
  for run in (*a, *b):
    keys = set(run) if keys is None else keys & set(run)
  return sorted(keys or ())


def paired(a: Sequence[Run], b: Sequence[Run], metric: str, resamples: int = RESAMPLES,
           seed: int = SEED, questions: Optional[Sequence[str]] = None) -> Optional[Interval]:
  """The interval of A - B over `questions` (default: those both sides hold; given, every
  run must hold each); None without a question or a run on a side."""
  if not a or not b:
    return None
  if questions is None:
    questions = common_questions(a, b)
  if not questions:
    return None
  return paired_values(side_values(a, questions, metric), side_values(b, questions, metric),
                       resamples, seed)


def paired_values(x: np.ndarray, y: np.ndarray, resamples: int = RESAMPLES,
                  seed: int = SEED) -> Interval:
  """The interval from per-question values [n] of A (x) and B (y), in the same order."""
  n = len(x)
  rng = np.random.default_rng(seed)
  # float32 gathers are several times faster than float64 ones; the sums of <= 100-point
  # values lose nothing at the two decimals the reading prints.
  x32, y32 = np.asarray(x, np.float32), np.asarray(y, np.float32)
  mean_x, mean_y = np.empty(resamples), np.empty(resamples)
  for start in range(0, resamples, _BLOCK):
    size = min(_BLOCK, resamples - start)
    idx = rng.integers(0, n, size=(size, n), dtype=np.int32)
    mean_x[start:start + size] = np.take(x32, idx).sum(axis=1, dtype=np.float64) / n
    mean_y[start:start + size] = np.take(y32, idx).sum(axis=1, dtype=np.float64) / n
  tail = 100 * (1 - LEVEL) / 2
  low, high = np.percentile(mean_x - mean_y, [tail, 100 - tail])
  with np.errstate(divide="ignore", invalid="ignore"):
    ratio = mean_x / mean_y
  ratio_low, ratio_high = ((math.nan, math.nan) if not np.all(np.isfinite(ratio))
                           else np.percentile(ratio, [tail, 100 - tail]))
  return Interval(n, float(x.mean()), float(y.mean()), float(low), float(high),
                  float(ratio_low), float(ratio_high), resamples)
