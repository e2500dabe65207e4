"""Recall@k and MRR of a ranked run against ReQA golds, under both gold conventions.

A *run* maps a question id to its ranked candidate ids (best first). A question's rank is the
1-based position of its first gold candidate in its list, 0 when no gold is retrieved.

  R@k = mean over questions of [0 < rank <= k]      MRR = mean of 1/rank (0 when rank is 0)

Gold conventions (every table says which one it uses):
  * ``pair`` (the paper's): the golds are the exact (sentence, passage) candidates of
    `gold_candidate_ids`; averaged over question ids.
  * ``sentence`` (ReQA's `squad_eval.py`): any candidate whose sentence text equals a gold
    sentence's text is a hit; questions with the same text (exact string) are one question
    whose rank is the best rank among them; averaged over unique question strings.
MRR is computed over the run's depth (a question whose gold is not in its list adds 0); ReQA
ranks the whole index, so its MRR can only be higher by the tail beyond the depth.

Below the stage folders: `twotower evaluate` (eval) and fine-tuning's validation Recall@k
(model.finetune) score with the same code.
"""

from __future__ import annotations

import logging
from typing import Iterable, Mapping, Sequence

import numpy as np

from twotower.core import contracts
from twotower.core.contracts import Question

logger = logging.getLogger(__name__)

GOLD_CONVENTIONS = ("pair", "sentence")


def first_hit_rank(ranked: Sequence[int], is_gold) -> int:
  """1-based rank of the first candidate for which `is_gold(candidate)` holds, 0 if none."""
  for i, candidate in enumerate(ranked, start=1):
    if is_gold(candidate):
      return i
  return 0


def summarize(ranks: Iterable[int], ks: Sequence[int] = contracts.DEFAULT_KS) -> dict[str, float]:
  """{"R@k": fraction, ..., "MRR": float} of first-hit ranks (0 = miss). Empty -> zeros."""
  r = np.asarray(list(ranks), dtype=np.int64)
  out: dict[str, float] = {}
  if r.size == 0:
    return {**{f"R@{k}": 0.0 for k in ks}, "MRR": 0.0}
  hit = r > 0
  for k in ks:
    out[f"R@{k}"] = float(np.mean(hit & (r <= k)))
  out["MRR"] = float(np.mean(np.where(hit, 1.0 / np.maximum(r, 1), 0.0)))
  return out


def question_ranks(run: Mapping[str, Sequence[int]], questions: Sequence[Question],
                   gold: str = "pair",
                   sentence_of: Mapping[int, str] | None = None) -> list[int]:
  """First-hit ranks, one per evaluated unit (question id for `pair`, unique question string
  for `sentence`). `sentence_of` maps candidate id -> sentence text (needed for `sentence`).
  A question missing from the run ranks 0 (logged once with the count)."""
  if gold not in GOLD_CONVENTIONS:
    raise ValueError(f"unknown gold convention {gold!r}; expected one of {GOLD_CONVENTIONS}")
  missing = sum(1 for q in questions if q.question_id not in run)
  if missing:
    logger.warning("%d of %d questions have no ranked list in the run (counted as misses)",
                   missing, len(questions))
  if gold == "pair":
    return [first_hit_rank(run.get(q.question_id, ()), set(q.gold_candidate_ids).__contains__)
            for q in questions]
  if sentence_of is None:
    raise ValueError("the `sentence` convention needs the candidates' sentences")
  best: dict[str, int] = {}
  for q in questions:
    gold_texts = {sentence_of[c] for c in q.gold_candidate_ids if c in sentence_of}
    rank = first_hit_rank(run.get(q.question_id, ()),
                          lambda c, g=gold_texts: sentence_of.get(c) in g)
    previous = best.get(q.question)
    if previous is None or (rank and (previous == 0 or rank < previous)):
      best[q.question] = rank
  return list(best.values())


def evaluate_run(run: Mapping[str, Sequence[int]], questions: Sequence[Question],
                 gold: str = "pair", sentence_of: Mapping[int, str] | None = None,
                 ks: Sequence[int] = contracts.DEFAULT_KS) -> tuple[dict[str, float], int]:
  """(metrics, number of evaluated units) of `run` on `questions` under `gold`."""
  ranks = question_ranks(run, questions, gold, sentence_of)
  return summarize(ranks, ks), len(ranks)
