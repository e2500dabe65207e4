"""The ReQA split policy: which questions train, validate and test at each train ratio.

Splits are named by `contracts.reqa_split_names(ratios)`: `all`, then `train-r`,
`validation-r`, `test-r` per ratio r (percent of questions on the train side).

* The unit of assignment is a *question group*: the questions whose text is the same up to
  case and spacing (`question_key`). A group never straddles train and test, so test
  questions are unseen in training (cold start).
* A group goes by a hash of its smallest question id (`unit_hash`), a number u in [0, 1): it
  is on the train side of ratio r when u < r/100, so train-1 ⊂ train-5 ⊂ train-10 ⊂ train-80.
* A second hash of the same id holds out `validation_percent` % of each train side.

Everything is a pure function of the ids, the texts and `seed`: the same input gives the same
splits on any runner and any sharding.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from twotower.core import contracts


@dataclasses.dataclass(frozen=True)
class SplitPolicy:
  ratios: tuple[int, ...] = contracts.REQA_RATIOS
  validation_percent: float = 10.0  # of each train side
  seed: str = "reqa"                # salt of the hashes


def unit_hash(seed: str, purpose: str, key: str) -> float:
  """A deterministic number in [0, 1) for `key`."""
  return (contracts.stable_hash(seed, purpose, key) % 1_000_000) / 1_000_000


def question_key(question: str) -> str:
  """What makes two questions "the same" for cold start: case and spacing do not count."""
  return " ".join(question.casefold().split())


def assign_splits(question_ids: Sequence[str], policy: SplitPolicy = SplitPolicy()) -> list[str]:
  """The splits a group of questions with one question text goes to (beyond `all`): one of
  train-r / validation-r / test-r for each ratio r, in `policy.ratios` order."""
  key = min(question_ids)
  u = unit_hash(policy.seed, "split", key)
  held = unit_hash(policy.seed, "validation", key) < policy.validation_percent / 100
  out = []
  for r in policy.ratios:
    if u < r / 100:
      out.append(contracts.validation_split(r) if held else contracts.train_split(r))
    else:
      out.append(contracts.split_name(contracts.TEST_SIDE, r))
  return out


def is_finetune_split(name: str) -> bool:
  """Splits whose questions become fine-tuning pairs: train-r and validation-r."""
  return contracts.split_side(name) in (contracts.TRAIN_SIDE, contracts.VALIDATION_SIDE)
