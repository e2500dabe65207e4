"""What the QA parsers (pipelines.reqa.squad, pipelines.reqa.nq) hand to the ReQA job (pipelines.reqa.builder):
paragraphs with their questions and answer offsets, as read, and counted skips.

These are *parsed-input* records. The benchmark's own rows (a candidate, a question with its
gold candidate ids) are `contracts.Candidate` and `contracts.Question`; a `ParsedQuestion`
still carries raw answer offsets and has no gold candidate yet.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from twotower.core import contracts


@dataclasses.dataclass(frozen=True)
class Answer:
  start: int  # character offset of the answer in the paragraph
  text: str


@dataclasses.dataclass(frozen=True)
class ParsedQuestion:
  """A question as parsed: its answers are offsets into its paragraph."""
  question_id: str
  question: str
  answers: tuple[Answer, ...]


@dataclasses.dataclass(frozen=True)
class Paragraph:
  """One passage with its questions, as parsed; `where` names it in log lines."""
  title: str
  context: str
  questions: tuple[ParsedQuestion, ...]
  source: str  # contracts.SQUAD_SOURCE or NQ_SOURCE
  where: str   # "file: article 3 paragraph 2" or "file:line 17 (example_id 42)"


@dataclasses.dataclass(frozen=True)
class Skip:
  """A counted skip: `reason` is a contracts.counters name (a stats.json key), `message`
  names the file and record ("" counts without a log line)."""
  reason: str
  message: str
  count: int = 1


def fix_answer_start(context: str, answer: Answer) -> tuple[Optional[int], bool]:
  """(start, moved): the answer's start if its text is there, else the nearest occurrence of
  its text (moved=True), else (None, True)."""
  n = len(answer.text)
  if 0 <= answer.start and context[answer.start:answer.start + n] == answer.text:
    return answer.start, False
  best, pos = None, context.find(answer.text)
  while pos != -1:
    if best is None or abs(pos - answer.start) < abs(best - answer.start):
      best = pos
    pos = context.find(answer.text, pos + 1)
  return best, True


# Ids of the benchmark's rows: 63-bit hashes of their texts, so that every worker can name a
# candidate without a global ordering (pipelines.reqa.builder's docstring says why).
INT63 = (1 << 63) - 1


def stable_int63(*parts: object) -> int:
  return contracts.stable_hash(*parts) & INT63


def candidate_id(sentence: str, passage: str) -> int:
  """Deterministic int64 id of a (sentence, passage) candidate."""
  return stable_int63("candidate", sentence, passage)


def passage_id(passage: str) -> int:
  """Deterministic int64 id of a passage text (doc_page_id of the fine-tuning pairs)."""
  return stable_int63("passage", passage)


def passage_key(text: str) -> str:
  """What makes an extra passage "a ReQA paragraph": case and spacing do not count."""
  return " ".join(text.casefold().split())
