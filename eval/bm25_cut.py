"""The text the towers read, as text: what BM25 indexes and searches when it is to be compared
with the towers on the same words (`twotower bm25 --vocab V --doc_pieces 128
--query_pieces 32`; the grid's `truncate: tower` rows).

The towers read `[CLS] title [SEP] text [SEP]` cut to doc_len word pieces, the text cut first
(queries: `[CLS] q [SEP]` cut to query_len), where `text` is texts.candidate_doc_text
(pipelines.embed and pipelines.reqa.builder lay candidates out so). The cut here is not a copy of that
rule: every candidate's (title, text) and every question go through model.tokenizer.Tokenizer's
own `docs` / `queries`, the special tokens are dropped from what they return and the pieces
are joined back into words (a `##` continuation glued to the piece before it). So the words
BM25 sees are the tower's: lower-cased, accents stripped, punctuation split off, nothing past
the cut, and a word the vocabulary cannot spell ([UNK]) left out (the tower sees no more of
it than that it was there; as a term "unk" it would match every other [UNK]).

    cut = bm25_cut.TowerText("vocab.txt", doc_pieces=128, query_pieces=32)
    cut.docs(["Hamlet"], ["Hamlet is a tragedy ..."])  # ['hamlet hamlet is a tragedy ...']
    cut.queries(["Who wrote Hamlet?"])                 # ['who wrote hamlet ?']
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterator, Sequence

from twotower.core import tower_text as texts
from twotower.core.contracts import CLS, PAD, SEP, UNK, codecs

logger = logging.getLogger(__name__)

#: Texts tokenised per call (one TensorFlow call per batch; candidates run to 10^5).
BATCH = 1024
#: Pieces of the tower's input that carry no word: the markers, padding and unknown words.
_DROPPED = (PAD, CLS, SEP, UNK)


def join_pieces(pieces: Sequence[str]) -> str:
  """Word pieces as text: a `##` continuation glued to the piece before it, words spaced."""
  words: list[str] = []
  for piece in pieces:
    if piece.startswith("##") and len(piece) > 2 and words:
      words[-1] += piece[2:]
    else:
      words.append(piece)
  return " ".join(words)


@dataclasses.dataclass
class CutCounts:
  """How many texts the cut shortened (their pieces before the cut were more than it keeps)."""
  candidates: int = 0
  candidates_cut: int = 0
  candidate_pieces: int = 0     # title + text pieces before the cut, summed
  questions: int = 0
  questions_cut: int = 0
  question_pieces: int = 0

  def as_dict(self) -> dict:
    out = dataclasses.asdict(self)
    out["candidates_cut_share"] = self.candidates_cut / max(self.candidates, 1)
    out["questions_cut_share"] = self.questions_cut / max(self.questions, 1)
    out["candidate_pieces_mean"] = self.candidate_pieces / max(self.candidates, 1)
    out["question_pieces_mean"] = self.question_pieces / max(self.questions, 1)
    return out


class TowerText:
  """Titles, texts and questions -> the words of what the towers keep of them.

  `doc_pieces` / `query_pieces` are the towers' doc_len / query_len (their [CLS] and [SEP]
  included, as the model config counts them); 0 leaves that side whole."""

  def __init__(self, vocab_path: str, doc_pieces: int, query_pieces: int):
    # TensorFlow only where a cut is asked for: plain BM25 never loads it.
    from twotower.model import tokenizer as tokenizer_lib  # pylint: disable=import-outside-toplevel
    if doc_pieces < 0 or query_pieces < 0 or 0 < doc_pieces < 4 or 0 < query_pieces < 3:
      raise ValueError(f"doc_pieces={doc_pieces}, query_pieces={query_pieces}: 0 (no cut) or "
                       "room for a piece besides the markers (documents >= 4, queries >= 3)")
    self.vocab = tokenizer_lib.read_vocab(vocab_path)
    self.doc_pieces, self.query_pieces = doc_pieces, query_pieces
    # Lengths of 0 are the side left whole; the Tokenizer takes any length for it.
    self._tokenizer = tokenizer_lib.Tokenizer(self.vocab, query_len=query_pieces or 3,
                                              doc_len=doc_pieces or 4)
    self._dropped = {self.vocab.index(t) for t in _DROPPED}
    self.counts = CutCounts()

  def _words(self, token_ids) -> list[str]:
    return [join_pieces([self.vocab[i] for i in row if i not in self._dropped])
            for row in token_ids.numpy().tolist()]

  def _lengths(self, strings: Sequence[str]) -> list[int]:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return self._tokenizer.word_pieces(tf.constant(list(strings))).row_lengths().numpy().tolist()

  def docs(self, titles: Sequence[str], doc_texts: Sequence[str]) -> list[str]:
    """The words of `[CLS] title [SEP] text [SEP]` as the document tower keeps them."""
    if not titles:
      return []
    if not self.doc_pieces:
      return list(doc_texts)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    ids = self._tokenizer.docs(tf.constant(list(titles)), tf.constant(list(doc_texts)))
    pieces = [a + b for a, b in zip(self._lengths(titles), self._lengths(doc_texts))]
    self.counts.candidates += len(pieces)
    self.counts.candidate_pieces += sum(pieces)
    self.counts.candidates_cut += sum(n > self.doc_pieces - 3 for n in pieces)
    return self._words(ids["token_ids"])

  def queries(self, questions: Sequence[str]) -> list[str]:
    """The words of `[CLS] q [SEP]` as the query tower keeps them."""
    if not questions or not self.query_pieces:
      return list(questions)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    ids = self._tokenizer.queries(tf.constant(list(questions)))
    pieces = self._lengths(questions)
    self.counts.questions += len(pieces)
    self.counts.question_pieces += sum(pieces)
    self.counts.questions_cut += sum(n > self.query_pieces - 2 for n in pieces)
    return self._words(ids["token_ids"])


def candidate_documents(reqa_dir: str, doc_text: str, cut: TowerText) -> Iterator[dict]:
  """lucene.candidate_documents' documents (by candidate id), each holding the words the
  document tower keeps of the candidate: its title, then its text, cut."""
  rows = codecs.read_candidates(reqa_dir,
                                columns=["candidate_id", "title", "sentence", "passage"])
  rows.sort(key=lambda r: r["candidate_id"])
  for start in range(0, len(rows), BATCH):
    batch = rows[start:start + BATCH]
    words = cut.docs([r["title"] or "" for r in batch],
                     [texts.candidate_doc_text(r["sentence"], r["passage"], doc_text)
                      for r in batch])
    for row, contents in zip(batch, words):
      yield {"id": str(row["candidate_id"]), "contents": contents}


def cut_queries(queries: Sequence[tuple[str, str]],
                cut: TowerText) -> list[tuple[str, str]]:
  """(question_id, question) -> (question_id, the words the query tower keeps of it)."""
  out: list[tuple[str, str]] = []
  for start in range(0, len(queries), BATCH):
    batch = queries[start:start + BATCH]
    out += zip([qid for qid, _ in batch], cut.queries([q for _, q in batch]))
  return out
