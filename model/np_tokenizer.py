"""The in-graph tokenizer's ids without TensorFlow: raw strings -> numpy `token_ids` /
`padding_mask`, for the JAX trainer's input (model/np_input.py) and its validation.

The word pieces come from the `tokenizers` WordPiece that `twotower export-hf` ships
(hf_tokenizer.hf_tokenizer: tensorflow-text's normalisation measured code point by code
point, recorded in normalizer_table.py so that no TensorFlow is needed to build it). The
packing is tokenizer.pack_segments' in numpy: `[CLS] q [SEP]`, `[CLS] title [SEP] passage
[SEP]`, each segment cut in order (tensorflow-text's WaterfallTrimmer: the first segment keeps
up to length - 1 - segments pieces, the next what is left), padded with [PAD] = 0.
tests/test_jax_input.py checks the ids equal model/tokenizer.py's on the same strings.
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np

from twotower.core.contracts import CLS, PAD, SEP
from twotower.model import hf_tokenizer

logger = logging.getLogger(__name__)


def pack_segments(segments: Sequence[Sequence[Sequence[int]]], length: int, cls_id: int,
                  sep_id: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
  """`[CLS] s1 [SEP] s2 [SEP] ... [PAD]...` of each row's segments (lists of ids per segment,
  one list of rows per segment), cut to `length` in order: tokenizer.pack_segments in numpy.
  Returns int32 (token_ids, padding_mask), both [rows, length]."""
  rows = len(segments[0])
  ids = np.full((rows, length), pad_id, np.int32)
  mask = np.zeros((rows, length), np.int32)
  ids[:, 0] = cls_id
  for r in range(rows):
    left, pos = length - 1 - len(segments), 1
    for segment in segments:
      pieces = segment[r][:left]
      left -= len(pieces)
      ids[r, pos:pos + len(pieces)] = pieces
      pos += len(pieces)
      ids[r, pos] = sep_id
      pos += 1
    mask[r, :pos] = 1
  return ids, mask


class NumpyTokenizer:
  """Raw query / (title, passage) strings -> {"token_ids", "padding_mask"} int32 numpy
  arrays [batch, length], as tokenizer.Tokenizer gives them in the graph.

  The `tokenizers` object releases the GIL while it encodes, so threads that tokenize
  batches (np_input.Prefetcher) run in parallel.
  """

  def __init__(self, vocab: list[str], query_len: int, doc_len: int):
    self.vocab_size = len(vocab)
    self.query_len, self.doc_len = int(query_len), int(doc_len)
    index = {t: i for i, t in enumerate(vocab)}
    self.pad_id, self.cls_id, self.sep_id = index[PAD], index[CLS], index[SEP]
    # No special tokens in the text, no cut: the raw word pieces of each segment, packed
    # here. A literal "[SEP]" in a text is word pieces, as the in-graph tokenizer reads it.
    self._tokenizer = hf_tokenizer.hf_tokenizer(
        vocab, specials_in_text=False,
        differences=hf_tokenizer.recorded_normalizer_differences())

  @classmethod
  def from_file(cls, path: str, query_len: int, doc_len: int) -> "NumpyTokenizer":
    from twotower.model import vocab_file  # pylint: disable=import-outside-toplevel
    vocab = vocab_file.read_vocab(path)
    logger.info("vocabulary %s: %d tokens", path, len(vocab))
    return cls(vocab, query_len, doc_len)

  def word_pieces(self, texts: Sequence[str]) -> list[list[int]]:
    """Each text's word piece ids, no special tokens."""
    encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
    return [e.ids for e in encodings]

  def _pack(self, segments, length: int) -> dict[str, np.ndarray]:
    token_ids, mask = pack_segments(segments, length, self.cls_id, self.sep_id, self.pad_id)
    return {"token_ids": token_ids, "padding_mask": mask}

  def queries(self, queries: Sequence[str]) -> dict[str, np.ndarray]:
    """`[CLS] q [SEP]` ids/mask, int32 [batch, query_len]."""
    return self._pack([self.word_pieces(queries)], self.query_len)

  def docs(self, titles: Sequence[str], texts: Sequence[str]) -> dict[str, np.ndarray]:
    """`[CLS] title [SEP] passage [SEP]` ids/mask, int32 [batch, doc_len]."""
    return self._pack([self.word_pieces(titles), self.word_pieces(texts)], self.doc_len)
