"""The reading's verdict rule: one comparison of two rows (A against B, one metric, one
ratio) -> a verdict, from each row's per-seed values, the seed-aware bootstrap interval
(seeds, then questions) where both rows recorded ranks (experiment.bootstrap), and the
claim's qualifier threshold.
`RULE` states it in the words the reading prints; `judge` applies it.

Everything is read in the claim's frame: the **gain** is A - B for a claim that A is above B
(`expect: higher`), B - A for one that A is below; the **ratio** is A / B (B / A).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

from twotower.experiment.bootstrap import Interval

HOLDS = "holds, resolved"
SIZE_MISSED = "direction holds, size contradicted"
SIZE_OPEN = "direction holds, size not resolved"
CONTRADICTED = "contradicted"
NOT_RESOLVED = "not resolved"
SEEDS_AS = "seeds agree, as claimed"
SEEDS_AGAINST = "seeds agree, against the claim"
SEEN_AS = "observation, as claimed"
SEEN_AGAINST = "observation, against the claim"
EQUAL = "equal"
VERDICTS = (HOLDS, SIZE_MISSED, SIZE_OPEN, CONTRADICTED, NOT_RESOLVED, SEEDS_AS,
            SEEDS_AGAINST, SEEN_AS, SEEN_AGAINST, EQUAL)
#: Paired seeds that must all agree in sign before agreement counts (sign-flip test
#: p = 2 / 2^n).
MIN_SIGN_SEEDS = 3

RULE = (
    "Every comparison is read in the claim's frame: the **gain** is A − B for a claim that A "
    "is above B (B − A for one that A is below), the **ratio** A / B (B / A). A claim with a "
    "qualifier (\"only marginally\", \"much more\") states its size in the grid file as a "
    "threshold on the gain in points or on the ratio; a claim without one claims a gain above "
    "0. A **seed** is a whole training chain, pre-training i then fine-tuning i (a row "
    "without pre-training: fine-tuning i), so a row's seeds are distinct pre-trainings and "
    "its ratios share them; each **paired seed** is seed i of A against seed i of B (a BM25 "
    "row, which has no seed, against every seed of the other). Each comparison gets an "
    "interval of the gain:\n\n"
    "* **Where both rows recorded per-question ranks**: a two-stage bootstrap with the seeds "
    "in it (experiment/bootstrap.py; 2,000 resamples, a fixed generator seed). Each resample "
    "draws a row's seeds with replacement (the same seed numbers on both sides where both "
    "rows have the same seeds, so seed i of A stays with seed i of B), then the questions "
    "both rows were scored on with replacement, one draw for every drawn seed and both rows "
    "(the seeds answer the same questions); the interval is the 95 % percentile interval of "
    "the mean gain over the drawn seeds and questions. It moves with another pre-training as "
    "well as with other questions: with three seeds its lower end lies near the worst seed's "
    "gain and its upper end near the best one's. **holds, resolved**: the interval lies "
    "above 0 and inside the qualifier's bounds, every paired seed above 0. **contradicted**: "
    "the interval lies below 0, every paired seed below 0. **direction holds, size "
    "contradicted**: above 0 (paired seeds too), but wholly outside the qualifier's bounds; "
    "**direction holds, size not resolved**: above 0, across a bound. Anything else: **not "
    "resolved**. Two rows without seeds (BM25 against BM25) have no seed to draw: their "
    "interval is the question bootstrap's. With one seed on a side that has seeds, the "
    "interval shown is the question bootstrap's alone and the verdict is an **observation, "
    "as claimed** or **observation, against the claim** (by the point estimate, the "
    "qualifier's bounds included): seed spreads of a few points are common at this scale, "
    "and one seed cannot show them.\n"
    "* **Without ranks** (results recorded before ranks were): the interval is mean gain ± "
    "2 × max(SD A, SD B), the SDs being sample standard deviations (n − 1) over seeds, with "
    "at least two seeds on each side (a BM25 row: SD 0 by construction, one run serves). It "
    "leaves question sampling out: a small gain over tightly clustered seeds can pass it where "
    "a bootstrap over the questions would not. The same reading of the interval gives **holds, resolved** / **contradicted** / the two size "
    "verdicts. Where the interval crosses 0 but every one of n ≥ 3 paired seeds has the same "
    "sign, the verdict is **seeds agree, as claimed** (or **seeds agree, against the "
    "claim**), with the exact two-sided sign-flip test over the paired seeds beside it: its "
    "unit is the seed, a pre-training, never a run, and n paired seeds of one sign give "
    "p = 2 / 2^n (0.25 at 3 seeds: agreement, not proof; as claimed also needs the mean gain "
    "within the qualifier's bounds); otherwise **not resolved**. One "
    "seed on a side that has seeds: an observation, as above.\n\n"
    "**equal**: A and B score the same at every paired seed and, where they recorded "
    "ranks, on every question (a hybrid whose tuning kept BM25 alone is BM25): not the gain "
    "a claim of \"above\" asks for, and not a reversal either.\n\n"
    "A ratio threshold reads the bootstrap's interval of the ratio of means, or, without "
    "ranks, 1 + the gain's interval / the mean of the row claimed to be lower. Each claim is "
    "counted per comparison: per (pair, metric, ratio), as its summary line says. Below a "
    "claim read at several ratios, its paired runs over every ratio are summed up per seed "
    "(each seed's mean gain over the ratios, which share its pre-training), with the exact "
    "sign-flip test over those seeds: one pre-training is one unit, however many ratios "
    "fine-tune it (three seeds give p = 0.25 at best).")


def mean_and_sd(values: Sequence[float]) -> tuple[float, float]:
  """Mean and sample standard deviation (n - 1; 0.0 for a single value)."""
  mean = sum(values) / len(values)
  if len(values) < 2:
    return mean, 0.0
  return mean, math.sqrt(sum((x - mean) ** 2 for x in values) / (len(values) - 1))


@dataclasses.dataclass(frozen=True)
class Side:
  """One row's values (percent) on one metric at one ratio, one per seed."""
  label: str
  values: tuple[float, ...]
  seedless: bool = False      # BM25: the same value on every seed
  seeds: tuple[int, ...] = ()  # the seed of each value (() = 0, 1, ...)

  @property
  def mean(self) -> float:
    return mean_and_sd(self.values)[0]

  @property
  def sd(self) -> float:
    return mean_and_sd(self.values)[1]

  @property
  def measured(self) -> bool:
    """Whether the side's spread is known: two seeds or more, or no seed to vary."""
    return self.seedless or len(self.values) >= 2

  def by_seed(self) -> dict[int, float]:
    return dict(zip(self.seeds or range(len(self.values)), self.values))

  def text(self) -> str:
    if len(self.values) < 2:
      return f"{self.mean:.2f}" + (" (no seed)" if self.seedless else " (1 seed)")
    return f"{self.mean:.2f} ± {self.sd:.2f} ({len(self.values)} seeds)"


@dataclasses.dataclass(frozen=True)
class Size:
  """A qualifier as an effect size, in the claim's frame (see the module docstring)."""
  word: str = ""                       # the sentence's word, e.g. "only marginally"
  min_gain: Optional[float] = None     # points
  max_gain: Optional[float] = None
  min_ratio: Optional[float] = None

  @property
  def bounded(self) -> bool:
    return any(x is not None for x in (self.min_gain, self.max_gain, self.min_ratio))

  def text(self) -> str:
    parts = []
    if self.min_gain is not None:
      parts.append(f"a gain of at least {self.min_gain:g} points")
    if self.max_gain is not None:
      parts.append(f"a gain of at most {self.max_gain:g} points (and above 0)")
    if self.min_ratio is not None:
      parts.append(f"a ratio of at least {self.min_ratio:g}")
    return " and ".join(parts)

  def inside(self, gain: tuple[float, float], ratio: tuple[float, float]) -> Optional[bool]:
    """True: the whole interval meets every bound; False: it lies wholly outside one; None:
    it crosses a bound (or a ratio bound has no ratio interval)."""
    verdicts = []
    if self.min_gain is not None:
      verdicts.append(_side_of(gain, self.min_gain, above=True))
    if self.max_gain is not None:
      verdicts.append(_side_of(gain, self.max_gain, above=False))
    if self.min_ratio is not None:
      verdicts.append(None if any(math.isnan(r) for r in ratio)
                      else _side_of(ratio, self.min_ratio, above=True))
    if False in verdicts:
      return False
    return None if None in verdicts else True

  def point_inside(self, gain: float, ratio: float) -> bool:
    return self.inside((gain, gain), (ratio, ratio)) is not False and gain > 0


def _side_of(interval: tuple[float, float], bound: float, above: bool) -> Optional[bool]:
  low, high = interval
  if above:
    return True if low >= bound else False if high < bound else None
  return True if high <= bound else False if low > bound else None


@dataclasses.dataclass(frozen=True)
class Judgement:
  """A comparison's verdict and what it rests on, in the claim's frame."""
  verdict: str
  gain: float
  interval: Optional[tuple[float, float]]     # the gain's interval (None: an observation)
  paired: tuple[float, ...]                   # the paired seeds' gains
  sign_p: Optional[float] = None              # the sign-flip test's p where it decided


def paired_gains(a: Side, b: Side, sign: int) -> tuple[float, ...]:
  """The gain of each paired seed: seed i of A against seed i of B; a seedless side against
  every seed of the other."""
  xa, xb = a.by_seed(), b.by_seed()
  if a.seedless and b.seedless:
    return (sign * (a.mean - b.mean),)
  if b.seedless:
    return tuple(sign * (x - b.mean) for _, x in sorted(xa.items()))
  if a.seedless:
    return tuple(sign * (a.mean - x) for _, x in sorted(xb.items()))
  return tuple(sign * (xa[s] - xb[s]) for s in sorted(set(xa) & set(xb)))


def paired_seeds(a: Side, b: Side) -> tuple[int, ...]:
  """The seed of each of `paired_gains`' gains, in its order (() for two seedless sides)."""
  if a.seedless and b.seedless:
    return ()
  if b.seedless:
    return tuple(sorted(a.by_seed()))
  if a.seedless:
    return tuple(sorted(b.by_seed()))
  return tuple(sorted(set(a.by_seed()) & set(b.by_seed())))


def sign_flip_test(gains: Sequence[float]) -> float:
  """Exact two-sided sign-flip (paired permutation) test of a mean gain of 0, one unit per
  gain: the share of the 2^n sign assignments whose |sum| is at least the observed |sum|.
  Exact under the null that each unit's gain is as likely negative as positive (Fisher's
  randomization test on paired differences); n gains all of one sign give 2 / 2^n, the sign
  test's p. A unit is a seed, a pre-training: gains that share one are averaged into its
  unit before they come here."""
  values = np.asarray(gains, dtype=np.float64)
  n = len(values)
  if n == 0:
    return 1.0
  signs = 1 - 2 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1)   # [2^n, n] of +-1
  sums = np.abs(signs @ values)
  observed = abs(values.sum())
  # A tolerance for float sums: an assignment that reaches the observed sum counts.
  return float(np.mean(sums >= observed - 1e-9 * max(1.0, observed)))


def judge(a: Side, b: Side, expect: str = "higher", size: Size = Size(),
          boot: Optional[Interval] = None) -> Judgement:
  """The rule of `RULE`."""
  sign = 1 if expect == "higher" else -1
  gain = sign * (a.mean - b.mean)
  lower = b if sign > 0 else a                     # the row claimed to be lower
  paired = paired_gains(a, b, sign)
  if paired and all(g == 0 for g in paired) and (boot is None or boot.low == boot.high == 0):
    return Judgement(EQUAL, gain, None if boot is None else (0.0, 0.0), paired)
  if not (a.measured and b.measured):
    ratio = (a.mean / b.mean) ** sign if a.mean and b.mean else math.nan
    return Judgement(SEEN_AS if size.point_inside(gain, ratio) else SEEN_AGAINST, gain, None,
                     paired)
  if boot is not None:
    interval = (boot.low, boot.high) if sign > 0 else (-boot.high, -boot.low)
    ratio = ((boot.ratio_low, boot.ratio_high) if sign > 0 else
             (1 / boot.ratio_high, 1 / boot.ratio_low) if boot.ratio_low > 0 else
             (math.nan, math.nan))
    seeds_as = bool(paired) and all(g > 0 for g in paired)
    seeds_against = bool(paired) and all(g < 0 for g in paired)
    above, below = interval[0] > 0, interval[1] < 0
  else:
    bar = 2 * max(a.sd, b.sd)
    interval = (gain - bar, gain + bar)
    ratio = ((1 + interval[0] / lower.mean, 1 + interval[1] / lower.mean) if lower.mean > 0
             else (math.nan, math.nan))
    # The seed-SD rule resolves on the interval alone (|gain| >= the bar, a gap of 0 never).
    seeds_as = seeds_against = True
    above, below = gain > 0 and interval[0] >= 0, gain < 0 and interval[1] <= 0
  if below and seeds_against:
    return Judgement(CONTRADICTED, gain, interval, paired)
  if above and seeds_as:
    inside = size.inside(interval, ratio) if size.bounded else True
    verdict = HOLDS if inside else SIZE_MISSED if inside is False else SIZE_OPEN
    return Judgement(verdict, gain, interval, paired)
  if boot is None and len(paired) >= MIN_SIGN_SEEDS:
    # The sign test speaks of the direction; "as claimed" also needs the mean gain within
    # the qualifier's bounds.
    point_ratio = (a.mean / b.mean) ** sign if a.mean and b.mean else math.nan
    if all(g < 0 for g in paired) or (all(g > 0 for g in paired) and
                                      size.point_inside(gain, point_ratio)):
      return Judgement(SEEDS_AS if paired[0] > 0 else SEEDS_AGAINST, gain, interval, paired,
                       sign_flip_test(paired))
  return Judgement(NOT_RESOLVED, gain, interval, paired)
