"""The paired bootstrap of a difference between two systems scored on the same queries.

    interval = paired_bootstrap.paired_values(x, y)   # x, y: [queries], one query order
    interval.difference, interval.low, interval.high   # mean(x) - mean(y), its 95 % interval

`x` and `y` are per-query values of two systems on one metric, in one query order and one
unit (percent points here: ReQA's Recall@k as 0 / 100, BEIR's nDCG@10 x 100).
`resamples` samples of the queries with replacement, the same indices for both sides, give
the percentile 95 % interval of the mean difference A - B, and of the ratio of the means
A / B. Pairing by query removes what the two systems share (an easy query is easy for both).
The generator's seed is fixed, so an interval is the same on every run: a table re-rendered
from the same values is the same file.

One implementation on the ground floor for every stage that compares two systems per query:
the grid's readings (twotower.experiment.bootstrap, over first-hit ranks averaged across
seeds) and `twotower beir` (eval.beir_eval, over trec_eval's per-query values), which, being
below the experiment, cannot import it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

RESAMPLES = 2000
SEED = 20240937            # fixed: the same values give the same interval on every run
LEVEL = 0.95
# Resamples drawn at once: blocks of (block x queries) int32 indices keep memory at tens of
# MB for 12k queries, where all 2,000 at once would take about 200 MB.
_BLOCK = 250


@dataclasses.dataclass(frozen=True)
class Interval:
  """The bootstrap's answer for one comparison, in the values' unit (percent points)."""
  questions: int             # the queries resampled
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


def paired_values(x: np.ndarray, y: np.ndarray, resamples: int = RESAMPLES,
                  seed: int = SEED) -> Interval:
  """The interval from per-query values [n] of A (x) and B (y), in the same order.

  Raises:
    ValueError: x and y of different lengths, or empty.
  """
  x, y = np.asarray(x), np.asarray(y)
  n = len(x)
  if n != len(y) or not n:
    raise ValueError(f"paired bootstrap: {n} values of A and {len(y)} of B; expected the "
                     "same queries, at least one")
  rng = np.random.default_rng(seed)
  # float32 gathers are several times faster than float64 ones; the sums of <= 100-point
  # values lose nothing at the two decimals a table prints.
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
