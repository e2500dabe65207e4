"""Per-question bootstrap of a difference between two rows on one metric, with the seeds'
variance in it.

Each side is a list of runs (one per seed; a seedless BM25 side: its one run), each run
{question id: the 1-based rank of the gold candidate, or None where the gold is not in the
run's top 100} -- the values of `RanksOf` (experiment.readings). Per run and question the
value is 100 where the rank is <= k (R@k) or 100 / rank (MRR), 0 for None; the questions are
those every run of both sides holds.

**The seed-aware interval** (`Resampler.interval`, what the reading's verdicts rest on). A
row's number is a mean over its seeds (in these grids a seed is the whole training chain:
pre-training i, then fine-tuning i) and over the test questions, and both are samples: another
pre-training would move it, as would other questions. The seeds and the questions are
*crossed*, not nested: every seed answers the same questions. So each of the `resamples`
draws

1. draws the seeds with replacement: as many as the side has, from its seeds (paired: one
   draw of seed numbers serves both sides where both have the same seeds, so seed i of A
   stays with seed i of B; rows that share pre-trainings, such as a row and its hybrid, keep
   what they share), and
2. draws the questions with replacement, one draw for every drawn seed and both sides (an
   easy question is easy for every seed and both rows),

and takes mean(A) - mean(B) over the drawn (seed, question) cells; the 2.5th and 97.5th
percentiles of the draws are the 95 % interval (and likewise of the ratio of the means).
This is the two-stage bootstrap for hierarchical data (Davison & Hinkley 1997, *Bootstrap
Methods and their Application*, section 3.8: resample the top-level units, then the units
within them) in the form that fits a crossed design, where stage 2's draw is shared instead
of made anew inside each stage-1 unit: Owen (2007), "The pigeonhole bootstrap", Ann. Appl.
Stat. 1(2), resampling rows and columns independently, which he shows to be mildly
conservative (it counts the seed-by-question interaction more than once), where a nested
per-seed question draw would divide the question variance by the number of seeds and so
understate it. McCullagh (2000), "Resampling and exchangeable arrays", Bernoulli 6(2), shows
that no bootstrap is exactly right for a crossed array; erring wide is the side a verdict
should err on. Bouthillier et al. (2021), "Accounting for variance in machine learning
benchmarks", MLSys, make the case for counting the training seeds among the sources of
variance of a comparison at all.

With three seeds the seed draw has 27 outcomes, one of which (1 in 27, 3.7 %) is the worst
seed three times: the interval's lower end sits near the worst seed's gain (minus question
noise), its upper end near the best one's. An interval that excludes a bar therefore says that
every seed clears it by more than the questions' noise -- a stricter and plainer statement
than "the seed-averaged gain clears it", which is what the question-only interval (the rule
before issue 67: `seed_aware=False`, each question's value averaged over the seeds first)
tested. A side with one run (a seedless BM25 row; a row run at one seed) has no seed to draw:
its interval is the question bootstrap's, and the reading calls a one-seed comparison an
observation.

Deterministic: the question draws come from a generator seeded with SEED, the same stream
the question-only bootstrap has always used (`question_counts`), and the seed draws from one
seeded with (SEED, 1) afresh for every comparison; the same ranks give the same interval, in
any order, on every run. Identical seeds reduce it to the question bootstrap exactly.

Fast: the question draws of n questions are kept as counts (how often each question was
drawn, uint8 [resamples, n]), so a run's resampled sums are one matrix product, cached per
(run, question set) across every comparison that reads the run (`Resampler`).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Mapping, Optional, Sequence

import numpy as np

from twotower.core import contracts

Run = Mapping[str, Optional[int]]
RESAMPLES = 2000
SEED = 20240937            # fixed: the same ranks give the same interval on every run
LEVEL = 0.95
# Resamples drawn at once: blocks of (block x questions) int32 indices keep memory at tens of
# MB for 12k questions, where all 2,000 at once would take about 200 MB.
_BLOCK = 250
#: The metrics a run's resampled sums are computed for together (one pass over the draws).
METRICS = tuple(f"R@{k}" for k in contracts.DEFAULT_KS) + ("MRR",)
#: Question sets whose draws a Resampler keeps (uint8 [resamples, n]: 24 MB at 12k
#: questions); the reading walks its claims ratio by ratio, so a few cover every split.
_KEPT_DRAWS = 8


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
  # The seeds drawn at stage 1 (0: none, the question bootstrap alone): on each side; where
  # both sides hold the same seeds they are drawn together (`paired_seeds`).
  seeds_a: int = 0
  seeds_b: int = 0
  paired_seeds: bool = False

  @property
  def difference(self) -> float:
    return self.mean_a - self.mean_b

  @property
  def seed_aware(self) -> bool:
    return bool(self.seeds_a or self.seeds_b)


@dataclasses.dataclass(frozen=True)
class Runs:
  """One side of a comparison: its runs and the seed of each (() for a seedless side,
  whose one run stands for every seed)."""
  runs: tuple[Run, ...]
  seeds: tuple[int, ...] = ()


def metric_values(ranks: np.ndarray, metric: str) -> np.ndarray:
  """Per-question values in percent from ranks (0 = a miss at every k): "R@k" or "MRR"."""
  if metric == "MRR":
    return np.where(ranks > 0, 100.0 / np.maximum(ranks, 1), 0.0)
  if metric.startswith("R@") and metric[2:].isdigit():
    return np.where((ranks > 0) & (ranks <= int(metric[2:])), 100.0, 0.0)
  raise ValueError(f"bootstrap: metric {metric!r}; expected R@<k> or MRR")


def run_ranks(run: Run, questions: Sequence[str]) -> np.ndarray:
  """[questions]: the run's ranks in the questions' order, 0 for a miss."""
  return np.fromiter((run[q] or 0 for q in questions), dtype=np.int64, count=len(questions))


def side_values(runs: Sequence[Run], questions: Sequence[str], metric: str) -> np.ndarray:
  """[questions]: each question's value averaged over the side's runs."""
  ranks = np.array([run_ranks(run, questions) for run in runs], dtype=np.int64)
  return metric_values(ranks, metric).mean(axis=0)


def common_questions(a: Sequence[Run], b: Sequence[Run]) -> list[str]:
  """The questions every run of both sides holds, sorted (a fixed order: determinism)."""
  keys = None
  for run in (*a, *b):
    keys = set(run) if keys is None else keys & set(run)
  return sorted(keys or ())


def paired(a: Sequence[Run], b: Sequence[Run], metric: str, resamples: int = RESAMPLES,
           seed: int = SEED, questions: Optional[Sequence[str]] = None) -> Optional[Interval]:
  """The question-only interval of A - B (each question's value averaged over the side's
  runs first) over `questions` (default: those both sides hold; given, every run must hold
  each); None without a question or a run on a side."""
  if not a or not b:
    return None
  if questions is None:
    questions = common_questions(a, b)
  if not questions:
    return None
  return paired_values(side_values(a, questions, metric), side_values(b, questions, metric),
                       resamples, seed)


def _percentiles(mean_x: np.ndarray, mean_y: np.ndarray) -> tuple[float, float, float, float]:
  """The percentile interval of the draws' differences and of their ratios (nan, nan where
  a draw's B mean is 0)."""
  tail = 100 * (1 - LEVEL) / 2
  low, high = np.percentile(mean_x - mean_y, [tail, 100 - tail])
  with np.errstate(divide="ignore", invalid="ignore"):
    ratio = mean_x / mean_y
  ratio_low, ratio_high = ((math.nan, math.nan) if not np.all(np.isfinite(ratio))
                           else np.percentile(ratio, [tail, 100 - tail]))
  return tuple(_exact(v) for v in (low, high, ratio_low, ratio_high))


def _exact(value: float) -> float:
  """`value` to 1e-9 (and -0 as 0): sums of one run taken three ways (a row whose seeds all
  equal BM25's run) differ from BM25's in the last bit, and "equal" asks for an interval
  of exactly [0, 0]; nothing the reading prints has more than two decimals."""
  return float(round(float(value), 9)) + 0.0


def paired_values(x: np.ndarray, y: np.ndarray, resamples: int = RESAMPLES,
                  seed: int = SEED) -> Interval:
  """The question-only interval from per-question values [n] of A (x) and B (y), in the
  same order (what `twotower beir` and the rule before issue 67 use)."""
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
  return Interval(n, float(np.mean(x)), float(np.mean(y)), *_percentiles(mean_x, mean_y),
                  resamples)


# ---------------------------------------------------------------------------------------------
# The draws, as counts.
# ---------------------------------------------------------------------------------------------


def draw_counts(draws: np.ndarray, units: int) -> np.ndarray:
  """[draws, units]: how often each unit is drawn in each row of `draws` [rows, size]."""
  rows = draws.shape[0]
  flat = draws + (np.arange(rows, dtype=np.int64) * units)[:, None]
  return np.bincount(flat.ravel(), minlength=rows * units).reshape(rows, units)


def question_counts(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
  """uint8 [resamples, n]: how often each of n questions is in each resample, from the
  stream `paired_values` draws its indices from (blocks of _BLOCK rows), so a count-based
  sum is the same resample."""
  rng = np.random.default_rng(seed)
  out = np.empty((resamples, n), dtype=np.uint8)
  for start in range(0, resamples, _BLOCK):
    size = min(_BLOCK, resamples - start)
    idx = rng.integers(0, n, size=(size, n), dtype=np.int32)
    # A question drawn 256 times among n draws: beyond any n this module sees (P < 1e-300).
    out[start:start + size] = draw_counts(idx, n)
  return out


def seed_counts(units: Sequence[int], resamples: int = RESAMPLES, seed: int = SEED
                ) -> list[np.ndarray]:
  """Per entry of `units` (a side's seed count; 0 or 1: nothing to draw), float64
  [resamples, units]: how often each seed is drawn in each resample (all ones for 1), drawn
  one after the other from a generator seeded with (seed, 1)."""
  rng = np.random.default_rng([seed, 1])
  out = []
  for k in units:
    if k <= 1:
      out.append(np.ones((resamples, max(k, 1))))
    else:
      out.append(draw_counts(rng.integers(0, k, size=(resamples, k)), k).astype(np.float64))
  return out


class Resampler:
  """Seed-aware intervals (the module docstring) over a grid's runs, each run's resampled
  sums computed once per question set and metric and reused by every comparison that reads
  it. A run is known by its identity: give the same Mapping object for the same run (the
  readers of experiment.ranks cache theirs)."""

  def __init__(self, resamples: int = RESAMPLES, seed: int = SEED):
    self.resamples = resamples
    self.seed = seed
    self._draws: collections.OrderedDict = collections.OrderedDict()
    # (question set, id(run)) -> (run, {metric: float64 [resamples] of sums over questions})
    self._sums: dict[tuple, tuple[Run, dict[str, np.ndarray]]] = {}

  def _counts(self, questions: tuple[str, ...]) -> np.ndarray:
    n = len(questions)
    if n not in self._draws:
      self._draws[n] = question_counts(n, self.resamples, self.seed)
      while len(self._draws) > _KEPT_DRAWS:
        self._draws.popitem(last=False)
    self._draws.move_to_end(n)
    return self._draws[n]

  def sums(self, runs: Sequence[Run], questions: tuple[str, ...], metric: str) -> np.ndarray:
    """float64 [runs, resamples]: each run's sum of `metric` over each resample's questions."""
    missing = list({id(r): r for r in runs if (questions, id(r)) not in self._sums}.values())
    if missing:
      metrics = METRICS if metric in METRICS else METRICS + (metric,)
      ranks = np.array([run_ranks(r, questions) for r in missing], dtype=np.int64)
      # [n, metrics x runs]: questions first, so that each block's product is one BLAS call
      # over contiguous rows (the other order is several times slower under load).
      values = np.ascontiguousarray(
          np.concatenate([metric_values(ranks, m) for m in metrics]).T)
      counts = self._counts(questions)
      out = np.empty((values.shape[1], self.resamples))
      for start in range(0, self.resamples, _BLOCK):
        block = counts[start:start + _BLOCK].astype(np.float64)
        out[:, start:start + len(block)] = (block @ values).T
      for i, run in enumerate(missing):
        self._sums[(questions, id(run))] = (run, {
            m: out[j * len(missing) + i] for j, m in enumerate(metrics)})
    return np.array([self._sums[(questions, id(r))][1][metric] for r in runs])

  def interval(self, a: Runs, b: Runs, metric: str,
               questions: Optional[Sequence[str]] = None,
               seed_aware: bool = True) -> Optional[Interval]:
    """The interval of A - B over `questions` (default: those every run of both sides
    holds); `seed_aware` False: the question-only interval of seed-averaged values. None
    without a question or a run on a side."""
    if not a.runs or not b.runs:
      return None
    if questions is None:
      questions = common_questions(a.runs, b.runs)
    questions = tuple(questions)
    if not questions:
      return None
    metric_values(np.zeros(1, dtype=np.int64), metric)        # a bad metric: its error
    n = len(questions)
    sums_a, sums_b = self.sums(a.runs, questions, metric), self.sums(b.runs, questions, metric)
    count_a, count_b = len(a.runs), len(b.runs)
    paired_seeds = bool(a.seeds) and a.seeds == b.seeds and count_a > 1
    if not seed_aware:
      weights_a, weights_b = np.ones((1, count_a)), np.ones((1, count_b))
    elif paired_seeds:
      (weights_a,) = seed_counts([count_a], self.resamples, self.seed)
      weights_b = weights_a
    else:
      weights_a, weights_b = seed_counts([count_a, count_b], self.resamples, self.seed)
    mean_x = (weights_a * sums_a.T).sum(axis=1) / (count_a * n)
    mean_y = (weights_b * sums_b.T).sum(axis=1) / (count_b * n)
    point = [float(np.mean(metric_values(np.array([run_ranks(r, questions) for r in s.runs]),
                                         metric))) for s in (a, b)]
    drawn = (lambda k: k if seed_aware and k > 1 else 0)
    return Interval(n, _exact(point[0]), _exact(point[1]), *_percentiles(mean_x, mean_y),
                    self.resamples,
                    drawn(count_a), drawn(count_b), paired_seeds and seed_aware)


def hierarchical(a: Runs, b: Runs, metric: str, questions: Optional[Sequence[str]] = None,
                 resamples: int = RESAMPLES, seed: int = SEED) -> Optional[Interval]:
  """`Resampler().interval(a, b, metric, questions)`: one seed-aware interval."""
  return Resampler(resamples, seed).interval(a, b, metric, questions)
