"""Recall@k and MRR against hand-computed values, under both gold conventions."""

from __future__ import annotations

import pytest

from twotower.core import metrics
from twotower.core.contracts import Question as GoldQuestion

# Candidates 1..6; 1 and 4 share the sentence "S" (in two passages), 2 is "T".
SENTENCE_OF = {1: "S", 2: "T", 3: "U", 4: "S", 5: "V", 6: "W"}
QUESTIONS = [
    GoldQuestion("a", "who?", (1,)),    # gold pair 1
    GoldQuestion("b", "what?", (2,)),   # gold pair 2
    GoldQuestion("c", "where?", (5,)),  # gold pair 5
    GoldQuestion("d", "who?", (3,)),    # same text as "a", another gold
]
RUN = {
    "a": [4, 3, 1, 2],  # pair: 1 at rank 3; sentence: 4 ("S") at rank 1
    "b": [2, 1],        # rank 1 both ways
    "c": [1, 2, 3],     # miss both ways
    "d": [6, 3],        # pair: rank 2
}


def test_pair_convention():
  ranks = metrics.question_ranks(RUN, QUESTIONS, "pair")
  assert ranks == [3, 1, 0, 2]
  values, n = metrics.evaluate_run(RUN, QUESTIONS, "pair", ks=(1, 2, 3))
  assert n == 4
  assert values == pytest.approx({"R@1": 1 / 4, "R@2": 2 / 4, "R@3": 3 / 4,
                                  "MRR": (1 / 3 + 1 + 0 + 1 / 2) / 4})


def test_sentence_convention_groups_question_strings():
  # "who?" = {a: rank 1 (candidate 4 has the gold text "S"), d: rank 2} -> 1;
  # "what?" -> 1; "where?" -> 0.  Three unique question strings.
  ranks = metrics.question_ranks(RUN, QUESTIONS, "sentence", SENTENCE_OF)
  assert sorted(ranks) == [0, 1, 1]
  values, n = metrics.evaluate_run(RUN, QUESTIONS, "sentence", SENTENCE_OF, ks=(1, 5))
  assert n == 3
  assert values == pytest.approx({"R@1": 2 / 3, "R@5": 2 / 3, "MRR": 2 / 3})


def test_missing_question_is_a_miss_and_empty_is_zero():
  values, n = metrics.evaluate_run({}, QUESTIONS[:1], "pair", ks=(1,))
  assert (values, n) == ({"R@1": 0.0, "MRR": 0.0}, 1)
  assert metrics.summarize([], ks=(1, 10)) == {"R@1": 0.0, "R@10": 0.0, "MRR": 0.0}


def test_default_ks_and_bad_convention():
  values = metrics.summarize([1, 7, 60, 0])
  assert values == pytest.approx({"R@1": 0.25, "R@5": 0.25, "R@10": 0.5, "R@50": 0.5,
                                  "R@100": 0.75, "MRR": (1 + 1 / 7 + 1 / 60) / 4})
  with pytest.raises(ValueError, match="unknown gold convention"):
    metrics.question_ranks(RUN, QUESTIONS, "doc")
  with pytest.raises(ValueError, match="needs the candidates"):
    metrics.question_ranks(RUN, QUESTIONS, "sentence")
