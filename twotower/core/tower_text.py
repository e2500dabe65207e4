"""Text layouts shared by every stage that turns a record into a tower input.

The document a ReQA candidate stands for must be laid out the same way when the towers are
fine-tuned on it (pipelines.reqa.builder writes `doc_title` / `doc_text` of the pair schema) and when
the corpus is embedded (pipelines.embed): a different layout at embedding time silently
costs recall. Both stages call `candidate_doc_text`.
"""

from __future__ import annotations

#: How a ReQA candidate (sentence, passage) becomes the document tower's `text` input:
#:   "sentence":          the answer sentence alone (ReQA's "response" without context);
#:   "sentence+passage":  the sentence, then its whole passage. The paper retrieves (s, p)
#:                        pairs but does not say how a pair becomes the document tower's text;
#:                        this layout is our choice (the sentence first, so that the tower
#:                        sees which sentence of the passage the candidate is).
DOC_TEXT_MODES = ("sentence", "sentence+passage")
DEFAULT_DOC_TEXT = "sentence+passage"


def candidate_doc_text(sentence: str, passage: str, mode: str = DEFAULT_DOC_TEXT) -> str:
  """The document tower's `text` for a candidate; its `title` is the candidate's title.

  Args:
    sentence: the candidate sentence (CANDIDATE_SCHEMA `sentence`).
    passage: the passage it comes from (CANDIDATE_SCHEMA `passage`); may be empty.
    mode: one of DOC_TEXT_MODES.

  Returns:
    The text, with runs of whitespace at the joint collapsed to one space.
  """
  sentence = (sentence or "").strip()
  if mode == "sentence":
    return sentence
  if mode == "sentence+passage":
    passage = (passage or "").strip()
    return f"{sentence} {passage}".strip() if passage else sentence
  raise ValueError(f"unknown doc text mode {mode!r}; expected one of {DOC_TEXT_MODES}")


#: Unicode categories that carry nothing to search for: control and format characters,
#: surrogates, and the separators (space, line, paragraph).
_NOT_SEARCHABLE = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp"})


def searchable(text: str) -> bool:
  """Whether `text` holds a character to search for: a query of only whitespace, control or
  format characters (`"\\u0000"`, a zero-width space) would still rank every document, on
  nothing."""
  import unicodedata  # pylint: disable=import-outside-toplevel
  return any(unicodedata.category(c) not in _NOT_SEARCHABLE for c in text)
