"""The ReQA split policy: deterministic, nested train sides, cold start by question text."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from twotower.core import contracts
from twotower.pipelines.reqa import builder as reqa, question_splits as reqa_question_splits
from twotower.pipelines.reqa.question_splits import SplitPolicy, assign_splits, question_key


def test_splits_deterministic_nested_and_cold_start():
  policy = SplitPolicy()
  ids = [f"id{i}" for i in range(3000)]
  first = {i: assign_splits([i], policy) for i in ids}
  assert first == {i: assign_splits([i], policy) for i in ids}  # deterministic
  for r in contracts.REQA_RATIOS:
    train = sum(1 for s in first.values() if f"test-{r}" not in s)
    assert abs(train / len(ids) - r / 100) < 0.03
  # Nested: a question on the train side of 1 % is on the train side of every larger ratio.
  for splits in first.values():
    sides = ["test" if f"test-{r}" in splits else "train" for r in contracts.REQA_RATIOS]
    assert "test" not in sides[sides.index("train"):] if "train" in sides else True
  # A group (one question text) is assigned as one: by its smallest id.
  assert assign_splits(["b", "a"], policy) == assign_splits(["a"], policy)
  # Every name is one of contracts.reqa_split_names.
  names = set(contracts.reqa_split_names())
  assert all(set(s) <= names for s in first.values())


def test_validation_share_and_seed():
  ids = [f"id{i}" for i in range(4000)]
  policy = SplitPolicy(ratios=(80,), validation_percent=25.0)
  sides = [assign_splits([i], policy)[0].split("-")[0] for i in ids]
  train_side = sum(s != "test" for s in sides)
  assert abs(sides.count("validation") / train_side - 0.25) < 0.03
  other = SplitPolicy(ratios=(80,), validation_percent=25.0, seed="other")
  assert [assign_splits([i], other) for i in ids] != [assign_splits([i], policy) for i in ids]
  assert reqa.ReqaConfig(out="x", ratios=(80,), validation_percent=25.0).split_policy == policy


def test_question_key_ignores_case_and_spacing():
  assert question_key("  Who WROTE\tit? ") == question_key("who wrote it?")
  assert reqa_question_splits.is_finetune_split("validation-5")
  assert not reqa_question_splits.is_finetune_split("test-5")


def test_same_question_text_never_straddles_train_and_test():
  records = [reqa.QaRecord(f"id{i}", "Who wrote it?" if i % 2 else " who WROTE it? ", "t",
                           "p", 1, ((i, "s"),), 1) for i in range(40)]
  policy = SplitPolicy()
  with TestPipeline() as p:
    out = (p | beam.Create(records)
           | beam.Map(lambda r: (question_key(r.question), r))
           | beam.GroupByKey()
           | beam.FlatMap(reqa._split_group, policy=policy)  # pylint: disable=protected-access
           | beam.Map(lambda e: e[0])
           | beam.combiners.Count.PerElement()
           | beam.Map(lambda e: e[0]))
    expected = ["all"] + assign_splits([min(r.question_id for r in records)], policy)
    assert_that(out, equal_to(expected))
