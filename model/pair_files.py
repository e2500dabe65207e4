"""Which pair shards a run reads and how its tasks mix, without TensorFlow: the shards a
pair pipeline's manifest lists, a check that they hold a record, each task's pair count (from
stats.json) and the mixture weights (`DataConfig.mixture`). The tf.data input (data.py) and
the JAX trainer's (np_input.py) read the same shards with the same weights.
"""

from __future__ import annotations

import logging
from typing import Sequence

from twotower.core import contracts
from twotower.core import files as tio
from twotower.core.contracts import counters

logger = logging.getLogger(__name__)


def pair_files(pairs_root: str, task: str, split: str) -> list[str]:
  """Shards of `<pairs_root>/pairs/<task>/<split>-SSSSS-of-NNNNN.tfrecord` that the pair
  pipeline's manifest lists (a stray shard of another run is never read; the glob for an
  output without one); a clear error when none."""
  files = contracts.codecs.pair_files(pairs_root, task, split)
  if not files:
    raise FileNotFoundError(f"no pair shards match "
                            f"{contracts.pairs_pattern(pairs_root, task, split)}")
  return files


def require_records(files: Sequence[str], what: str) -> None:
  """A ValueError unless one of `files` holds a record (reads at most one): training on no
  pairs would export untrained towers and exit 0."""
  if next(contracts.codecs.read_tfrecords(files), None) is None:
    shown = files[0] if len(files) == 1 else f"{files[0]} and {len(files) - 1} more"
    raise ValueError(f"no {what} in {shown}: every shard is empty (check the stage that "
                     "wrote them: its stats.json counts what it skipped)")


def count_pairs(pairs_root: str, task: str, split: str) -> int:
  """Pairs of a task in a split: from the pair pipeline's stats.json (`pairs_<task>` counts
  every pair, `pairs_<task>_heldout` the held-out ones), else by reading the shards."""
  stats_path = contracts.stats_path(pairs_root)
  total, heldout = counters.pairs(task), counters.pairs(task, contracts.HELDOUT)
  if split in contracts.PAIR_SPLITS and tio.match_files(stats_path, missing_ok=True):
    stats = tio.read_json(stats_path)
    if total in stats:
      if split == contracts.HELDOUT:
        return int(stats.get(heldout, 0))
      return int(stats[total]) - int(stats.get(heldout, 0))
  files = pair_files(pairs_root, task, split)
  logger.warning("%s has no %s count: counting the records of %d shards", stats_path, total,
                 len(files))
  return sum(1 for _ in contracts.codecs.read_tfrecords(files))


def has_pairs(pairs_root: str, task: str, split: str) -> bool:
  """Whether a task has any pair in a split: from stats.json, else from the first record of
  its shards (FileNotFoundError when it has no shards)."""
  stats_path = contracts.stats_path(pairs_root)
  if split in contracts.PAIR_SPLITS and tio.match_files(stats_path, missing_ok=True):
    if counters.pairs(task) in tio.read_json(stats_path):
      return count_pairs(pairs_root, task, split) > 0
  return any(True for _ in contracts.codecs.read_tfrecords(pair_files(pairs_root, task, split)))


def task_weights(pairs_root: str, tasks: Sequence[str], split: str,
                 mixture: str = "equal") -> dict[str, float]:
  """Sampling probability of each task (DataConfig.mixture): "equal" shares, or "pooled"
  shares proportional to each task's pairs in `split` (count_pairs).

  A task without pairs in `split` (WLP on a corpus with few links often has no held-out
  pair) is left out of that split's mixture, with a warning: the weights have no key for it,
  and `pretrain_dataset` given them does not read it. No task with pairs at all is an error.
  """
  if mixture not in ("equal", "pooled"):
    raise ValueError(f"unknown mixture {mixture!r}; expected 'equal' or 'pooled'")
  if mixture == "equal":
    counts = {task: int(has_pairs(pairs_root, task, split)) for task in tasks}
  else:
    counts = {task: count_pairs(pairs_root, task, split) for task in tasks}
  empty = [task for task, n in counts.items() if n <= 0]
  if len(empty) == len(counts):
    raise ValueError(f"{pairs_root}: no {split} pairs of {empty} to mix")
  if empty:
    logger.warning("%s: no %s pairs of %s: the %s mixture of %s leaves %s out", pairs_root,
                   split, empty, mixture, split, "it" if len(empty) == 1 else "them")
  counts = {task: n for task, n in counts.items() if n > 0}
  if mixture == "equal":
    return {task: 1.0 / len(counts) for task in counts}
  total = sum(counts.values())
  logger.info("pooled mixture of %s pairs: %s", split,
              ", ".join(f"{t} {n} ({n / total:.1%})" for t, n in counts.items()))
  return {task: n / total for task, n in counts.items()}
