"""Natural Questions, simplified format (jsonl[.gz]) -> Paragraphs (pipelines.reqa.qa_records) for
the ReQA job, converted as ReQA's `nq_to_squad.py` does.

A malformed line, a missing field, token offsets out of range, a record ReQA does not keep
(no long answer, not exactly one short answer, a long answer that is not a `<P>` paragraph)
is a counted Skip naming the file, the line and the example id.
"""

from __future__ import annotations

import gzip
import json
import urllib.parse
from typing import Any, Iterator, Sequence

from twotower.core import contracts
from twotower.core import files as tio
from twotower.core.contracts import counters as C
from twotower.pipelines.reqa.qa_records import Answer, Paragraph, ParsedQuestion, Skip


def _is_html(token: str) -> bool:
  return len(token) > 1 and token.startswith("<") and token.endswith(">")


def _join_text(tokens: Sequence[str], start: int, end: int) -> str:
  """The non-HTML tokens of [start, end), one space apart (the simplified format has lost the
  original spacing; ReQA's clean_text puts one space wherever there was whitespace)."""
  return " ".join(t for t in tokens[start:end] if t and not _is_html(t))


def _nq_title(record: dict) -> str:
  if isinstance(record.get("document_title"), str):
    return record["document_title"]
  query = urllib.parse.urlparse(record.get("document_url") or "").query
  titles = urllib.parse.parse_qs(query).get("title")
  return titles[0].replace("_", " ") if titles else ""


def nq_to_paragraph(record: Any, where: str) -> Paragraph | Skip:
  """One simplified-NQ record -> a one-question Paragraph, or a Skip.

  As ReQA's `nq_to_squad`: the first annotation; exactly one short answer (multi-span short
  answers are skipped, as there); a long answer that exists and is a `<P>` paragraph; the
  passage is the long answer's text without HTML tokens, the answer starts after the text of
  the tokens before the short answer.
  """
  if not isinstance(record, dict):
    return Skip(C.NQ_SKIPPED_MALFORMED, f"{where}: not a JSON object")
  rid = record.get("example_id")
  name = f"{where} (example_id {rid})"
  for field in ("example_id", "question_text", "document_text", "annotations"):
    if record.get(field) in (None, ""):
      return Skip(C.NQ_SKIPPED_MISSING_FIELD, f"{name}: no {field!r} field")
  annotations = record["annotations"]
  if not isinstance(annotations, list) or not annotations:
    return Skip(C.NQ_SKIPPED_MISSING_FIELD, f"{name}: no annotation")
  annotation = annotations[0]
  try:
    long_answer = annotation["long_answer"]
    short_answers = annotation["short_answers"]
    ls, le = int(long_answer["start_token"]), int(long_answer["end_token"])
    spans = [(int(s["start_token"]), int(s["end_token"])) for s in short_answers]
  except (KeyError, TypeError, ValueError) as e:
    return Skip(C.NQ_SKIPPED_MISSING_FIELD, f"{name}: malformed annotation ({e!r})")
  if ls == -1:
    return Skip(C.NQ_SKIPPED_NO_LONG_ANSWER, f"{name}: no long answer")
  if len(spans) != 1:
    return Skip(C.NQ_SKIPPED_NOT_ONE_SHORT_ANSWER,
                f"{name}: {len(spans)} short answers (ReQA keeps exactly one)")
  tokens = record["document_text"].split(" ")
  ss, se = spans[0]
  if not (0 <= ls < le <= len(tokens) and ls <= ss < se <= le):
    return Skip(C.NQ_SKIPPED_BAD_OFFSETS,
                f"{name}: token offsets out of range (long [{ls}, {le}), short [{ss}, {se}), "
                f"{len(tokens)} tokens)")
  if tokens[ls] != "<P>":
    return Skip(C.NQ_SKIPPED_NOT_PARAGRAPH, f"{name}: long answer is a {tokens[ls]} block")
  context = _join_text(tokens, ls, le)
  answer = _join_text(tokens, ss, se)
  before = _join_text(tokens, ls, ss)
  if not answer:
    return Skip(C.NQ_SKIPPED_EMPTY_ANSWER, f"{name}: short answer has no text")
  start = len(before) + 1 if before else 0
  question = ParsedQuestion(str(rid), str(record["question_text"]).strip(),
                            (Answer(start, answer),))
  return Paragraph(_nq_title(record), context, (question,), contracts.NQ_SOURCE, name)


def _open_lines(path: str) -> Iterator[str]:
  if tio.is_local(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
      yield from f
    return
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  with FileSystems.open(path) as f:  # decompresses .gz by extension
    for line in f:
      yield line.decode("utf-8")


def parse_nq(path: str) -> Iterator[Paragraph | Skip]:
  """Paragraphs of a simplified-NQ jsonl[.gz] file; a malformed line is a counted skip (every
  well-formed line also yields a message-less Skip counting `nq_records_read`)."""
  for n, line in enumerate(_open_lines(path), start=1):
    if not line.strip():
      continue
    where = f"{path}:{n}"
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      yield Skip(C.NQ_SKIPPED_MALFORMED_JSON, f"{where}: malformed JSON: {e.msg}")
      continue
    yield Skip(C.NQ_RECORDS_READ, "", 1)
    yield nq_to_paragraph(record, where)
