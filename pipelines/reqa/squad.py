"""SQuAD v1.1 / v2.0 JSON -> Paragraphs (pipelines.reqa.qa_records) for the ReQA job.

Malformed JSON is a ValueError naming the file and position (one JSON document: nothing
sensible to salvage); a record that cannot be used (a missing field, a v2.0 unanswerable
question, a question without an answer) is a counted Skip naming the file and the record.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

from twotower.core import contracts
from twotower.core import files as tio
from twotower.core.contracts import counters as C
from twotower.pipelines.reqa.qa_records import Answer, Paragraph, ParsedQuestion, Skip


def _parse_json(text: str, path: str) -> Any:
  try:
    return json.loads(text)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: malformed JSON at line {e.lineno} column {e.colno}: "
                     f"{e.msg}") from e


def squad_question(qa: Any, where: str) -> ParsedQuestion | Skip:
  """One entry of a paragraph's `qas`, or a Skip."""
  if not isinstance(qa, dict):
    return Skip(C.QUESTIONS_SKIPPED_MALFORMED, f"{where}: question is not an object")
  qid = qa.get("id")
  name = f"{where} question {qid!r}"
  for field in ("id", "question"):
    if not isinstance(qa.get(field), str) or not qa.get(field).strip():
      return Skip(C.QUESTIONS_SKIPPED_MISSING_FIELD, f"{name}: no {field!r} field")
  if qa.get("is_impossible"):
    return Skip(C.QUESTIONS_SKIPPED_UNANSWERABLE, f"{name}: unanswerable (SQuAD v2.0)")
  raw = qa.get("answers")
  if not isinstance(raw, list):
    return Skip(C.QUESTIONS_SKIPPED_MISSING_FIELD, f"{name}: no 'answers' field")
  answers = []
  for a in raw:
    if (not isinstance(a, dict) or not isinstance(a.get("text"), str)
        or not isinstance(a.get("answer_start"), int)):
      return Skip(C.QUESTIONS_SKIPPED_MISSING_FIELD,
                  f"{name}: an answer lacks 'text' or an integer 'answer_start'")
    answers.append(Answer(a["answer_start"], a["text"]))
  if not answers:
    return Skip(C.QUESTIONS_SKIPPED_NO_ANSWER, f"{name}: no answer")
  return ParsedQuestion(qid, qa["question"], tuple(answers))  # raw: ReQA keys metrics on it


def load_squad(path: str) -> dict:
  """The JSON document of a SQuAD file.

  Raises:
    ValueError: the file is not UTF-8, not JSON, or has no `data` list (names the file).
  """
  doc = _parse_json(tio.read_text(path), path)
  if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
    raise ValueError(f"{path}: not a SQuAD file (no top-level 'data' list)")
  return doc


def parse_squad(path: str) -> Iterator[Paragraph | Skip]:
  """Paragraphs of a SQuAD v1.1/v2.0 file, and Skips for what cannot be used.

  Raises:
    ValueError: as `load_squad`.
  """
  doc = load_squad(path)
  for i, article in enumerate(doc["data"]):
    title = article.get("title") if isinstance(article, dict) else None
    if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
      yield Skip(C.ARTICLES_SKIPPED_MISSING_FIELD, f"{path}: article {i} ({title!r}): "
                 "no 'paragraphs' list")
      continue
    title = title if isinstance(title, str) else ""
    for j, paragraph in enumerate(article["paragraphs"]):
      where = f"{path}: article {i} ({title!r}) paragraph {j}"
      if not isinstance(paragraph, dict) or not isinstance(paragraph.get("context"), str):
        yield Skip(C.PARAGRAPHS_SKIPPED_MISSING_FIELD, f"{where}: no 'context' field")
        continue
      questions = []
      for qa in paragraph.get("qas") or ():
        q = squad_question(qa, where)
        if isinstance(q, Skip):
          yield q
        else:
          questions.append(q)
      yield Paragraph(title.replace("_", " "), paragraph["context"], tuple(questions),
                      contracts.SQUAD_SOURCE, where)
