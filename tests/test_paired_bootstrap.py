"""twotower.core.paired_bootstrap: the per-query paired bootstrap every stage shares (the
grid's readings, `twotower beir`), on values whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from twotower.core import paired_bootstrap


def test_a_constant_difference_has_an_interval_of_that_difference_alone():
  rng = np.random.default_rng(1)
  y = rng.uniform(0, 100, size=300)
  same = paired_bootstrap.paired_values(y, y)
  assert (same.difference, same.low, same.high) == (0.0, 0.0, 0.0)
  # Pairing removes what the systems share: a +5 shift on every query is +5 on every
  # resample, however spread the values are.
  shifted = paired_bootstrap.paired_values(y + 5.0, y)
  assert shifted.low == pytest.approx(5.0, abs=1e-4)
  assert shifted.high == pytest.approx(5.0, abs=1e-4)
  assert shifted.questions == 300 and shifted.resamples == paired_bootstrap.RESAMPLES


def test_the_interval_is_the_percentile_interval_of_resampled_mean_differences():
  """One win of 100 points in n queries: the resampled difference is 100 k / n with k
  ~ Binomial(n, 1/n), so its 95 % interval runs from 0 to 300 / n (k in 0..3) at n = 40."""
  x, y = np.zeros(40), np.zeros(40)
  x[7] = 100.0
  interval = paired_bootstrap.paired_values(x, y)
  assert interval.difference == pytest.approx(2.5)
  assert interval.low == 0.0 and interval.high == pytest.approx(7.5)
  assert np.isnan(interval.ratio_low)  # B's mean is 0 on every resample


def test_the_same_values_give_the_same_interval_and_the_seed_is_fixed():
  rng = np.random.default_rng(2)
  x, y = rng.uniform(0, 100, 500), rng.uniform(0, 100, 500)
  first, again = paired_bootstrap.paired_values(x, y), paired_bootstrap.paired_values(x, y)
  assert first == again
  other = paired_bootstrap.paired_values(x, y, seed=paired_bootstrap.SEED + 1)
  assert other.difference == first.difference and other.low != first.low
  assert first.low < first.difference < first.high
  assert first.ratio_low < first.mean_a / first.mean_b < first.ratio_high


@pytest.mark.parametrize("x, y", [(np.ones(3), np.ones(4)), (np.ones(0), np.ones(0))])
def test_values_of_other_queries_are_refused(x, y):
  with pytest.raises(ValueError, match="expected the same queries"):
    paired_bootstrap.paired_values(x, y)
