"""SQuAD JSON -> Paragraphs: fields, skips named by file and record, answer offsets."""

from __future__ import annotations

import json

import pytest

from twotower.core.contracts import counters as C
from twotower.pipelines.reqa import squad
from twotower.pipelines.reqa.qa_records import Answer, Paragraph, Skip, fix_answer_start


def test_parse_squad_paragraphs_and_skips(tmp_path):
  path = tmp_path / "s.json"
  path.write_text(json.dumps({"data": [
      {"title": "New_York", "paragraphs": [
          {"context": "NYC is big.", "qas": [
              {"id": "a", "question": "Is NYC big?", "answers": [{"text": "big",
                                                                  "answer_start": 7}]},
              {"id": "b", "question": "Who?", "answers": [], "is_impossible": True},
              {"id": "c", "answers": []},
              "not an object"]},
          {"qas": []}]},
      {"title": "x"}]}), encoding="utf-8")
  items = list(squad.parse_squad(str(path)))
  paragraphs = [i for i in items if isinstance(i, Paragraph)]
  reasons = sorted(i.reason for i in items if isinstance(i, Skip))
  assert reasons == sorted([C.QUESTIONS_SKIPPED_UNANSWERABLE, C.QUESTIONS_SKIPPED_MISSING_FIELD,
                            C.QUESTIONS_SKIPPED_MALFORMED, C.PARAGRAPHS_SKIPPED_MISSING_FIELD,
                            C.ARTICLES_SKIPPED_MISSING_FIELD])
  (p,) = paragraphs
  assert (p.title, p.context, p.source) == ("New York", "NYC is big.", "squad")
  assert [q.question_id for q in p.questions] == ["a"]
  assert p.questions[0].answers == (Answer(7, "big"),)


def test_not_squad_is_a_named_error(tmp_path):
  path = tmp_path / "other.json"
  path.write_text('{"version": 1}', encoding="utf-8")
  with pytest.raises(ValueError, match=r"other\.json: not a SQuAD file"):
    list(squad.parse_squad(str(path)))


def test_fix_answer_start():
  ctx = "the cat and the cat"
  assert fix_answer_start(ctx, Answer(4, "cat")) == (4, False)
  assert fix_answer_start(ctx, Answer(14, "cat")) == (16, True)  # nearest occurrence
  assert fix_answer_start(ctx, Answer(0, "dog")) == (None, True)
