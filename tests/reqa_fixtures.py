"""Inputs of `twotower reqa` for tests: SQuAD files and Natural Questions records.

Usage:
  from reqa_fixtures import ARTICLES, P1, nq_record, span, squad_file
  squad = squad_file(tmp_path, ARTICLES)               # a SQuAD v1.1 file -> its path
  record = nq_record(1, P1, [span("1978")])            # one NQ (simplified) JSONL record

(The shipped twotower.testing.squad writes one fixed SQuAD file for tests and benchmarks.)
"""

from __future__ import annotations

import json


def squad_file(tmp_path, data, name="squad.json"):
  path = tmp_path / name
  path.write_text(json.dumps({"version": "test", "data": data}), encoding="utf-8")
  return str(path)


# Twelve one-question articles: with validation_percent 50 the 80 % ratio has validation
# questions (8) and the 5 % ratio has none (test_bad_input has a case of each).
ARTICLES = [{"title": f"T{i}", "paragraphs": [{
    "context": f"Topic {i} is about thing {i}. It has colour number {i}.",
    "qas": [{"id": f"q{i}", "question": f"What colour has thing {i}?",
             "answers": [{"text": f"colour number {i}",
                          "answer_start": len(f"Topic {i} is about thing {i}. It has ")}]}]}]}
    for i in range(12)]


# Natural Questions (simplified format): one document, a paragraph P1 and a table.
DOC = ("<H1> Email marketing </H1> <P> Email marketing is the act of sending a commercial "
       "message . It began in 1978 with <A> Gary Thuerk </A> of DEC . </P> <Table> <Tr> "
       "<Td> x </Td> </Tr> </Table> <P> Another paragraph here . </P>")
TOKENS = DOC.split(" ")


def span(words: str, start_at: int = 0) -> tuple[int, int]:
  w = words.split(" ")
  for i in range(start_at, len(TOKENS)):
    if TOKENS[i:i + len(w)] == w:
      return i, i + len(w)
  raise AssertionError(words)


P1 = (TOKENS.index("<P>"), TOKENS.index("</P>") + 1)
TABLE = (TOKENS.index("<Table>"), TOKENS.index("</Table>") + 1)


def nq_record(example_id, long, shorts, question="when did email marketing start"):
  return {
      "example_id": example_id, "question_text": question, "document_text": DOC,
      "document_url": "https://en.wikipedia.org//w/index.php?title=Email_marketing&oldid=1",
      "long_answer_candidates": [{"start_token": P1[0], "end_token": P1[1], "top_level": True},
                                 {"start_token": TABLE[0], "end_token": TABLE[1],
                                  "top_level": True}],
      "annotations": [{"annotation_id": 7, "yes_no_answer": "NONE",
                       "long_answer": {"start_token": long[0], "end_token": long[1],
                                       "candidate_index": 0},
                       "short_answers": [{"start_token": s, "end_token": e} for s, e in shorts]}],
  }
