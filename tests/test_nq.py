"""Natural Questions (simplified format) -> Paragraphs, converted as ReQA's nq_to_squad.py."""

from __future__ import annotations

import gzip
import json

import pytest

from twotower.core.contracts import counters as C
from twotower.pipelines.reqa import nq
from twotower.pipelines.reqa.qa_records import Paragraph, Skip
from reqa_fixtures import DOC, P1, TABLE, TOKENS, nq_record, span

def test_nq_conversion_like_reqa():
  record = nq_record(1, P1, [span("1978")])
  paragraph = nq.nq_to_paragraph(record, "nq.jsonl:1")
  assert paragraph.title == "Email marketing"
  assert paragraph.source == "nq"
  assert paragraph.context == ("Email marketing is the act of sending a commercial message . "
                               "It began in 1978 with Gary Thuerk of DEC .")
  (question,) = paragraph.questions
  assert question.question_id == "1"
  (answer,) = question.answers
  assert paragraph.context[answer.start:answer.start + len(answer.text)] == "1978"
  # A short answer spanning an HTML token keeps only the text.
  paragraph = nq.nq_to_paragraph(nq_record(2, P1, [span("<A> Gary Thuerk </A>")]), "x")
  (answer,) = paragraph.questions[0].answers
  assert answer.text == "Gary Thuerk"
  assert paragraph.context[answer.start:].startswith("Gary Thuerk")


@pytest.mark.parametrize("record,reason", [
    (nq_record(3, P1, []), C.NQ_SKIPPED_NOT_ONE_SHORT_ANSWER),
    (nq_record(4, P1, [span("1978"), span("DEC")]), C.NQ_SKIPPED_NOT_ONE_SHORT_ANSWER),
    (nq_record(5, (-1, -1), []), C.NQ_SKIPPED_NO_LONG_ANSWER),
    (nq_record(6, TABLE, [span("x")]), C.NQ_SKIPPED_NOT_PARAGRAPH),
    (nq_record(7, (P1[0], len(TOKENS) + 5), [span("1978")]), C.NQ_SKIPPED_BAD_OFFSETS),
    (nq_record(8, P1, [(len(TOKENS) + 1, len(TOKENS) + 3)]), C.NQ_SKIPPED_BAD_OFFSETS),
    ({"example_id": 9, "question_text": "q", "document_text": DOC}, C.NQ_SKIPPED_MISSING_FIELD),
], ids=["no-short", "two-short", "no-long", "table", "long-out-of-range", "short-out-of-range",
        "no-annotations"])
def test_nq_skips(record, reason):
  skip = nq.nq_to_paragraph(record, "nq.jsonl:1")
  assert isinstance(skip, Skip) and skip.reason == reason
  assert f"example_id {record['example_id']}" in skip.message


def test_parse_nq_counts_lines_and_skips_malformed_json(tmp_path):
  path = tmp_path / "nq.jsonl.gz"
  with gzip.open(path, "wt", encoding="utf-8") as f:
    f.write(json.dumps(nq_record(1, P1, [span("1978")])) + "\n\n{not json\n")
  items = list(nq.parse_nq(str(path)))
  assert [type(i) for i in items] == [Skip, Paragraph, Skip]
  assert [i.reason for i in items if isinstance(i, Skip)] == [C.NQ_RECORDS_READ,
                                                              C.NQ_SKIPPED_MALFORMED_JSON]
  assert f"{path}:3" in items[2].message
