"""Tiny, deterministic training inputs for tests and the training benchmark: a WordPiece
vocabulary file and synthetic pairs written as pair TFRecords with the product's encoder
(`contracts.codecs.write_pairs`), so tests read exactly what the pair pipeline writes.

Synthetic pairs are ICT-like: the query is a few words of its document, so a model can learn
them, and several queries share a document (accidental hits happen).
"""

from __future__ import annotations

import os
import random
from typing import Sequence

from twotower.core import contracts
from twotower.core.contracts import Pair

WORDS = tuple(f"w{i}" for i in range(200)) + (
    "the", "cat", "sat", "on", "mat", "who", "wrote", "paris", "river", "city", "king",
    "queen", "music", "film", "war", "school", "##s", "##ed", ".", ",", "?")


def write_vocab(path: str, words: Sequence[str] = WORDS) -> str:
  """A vocabulary file: contracts.RESERVED_TOKENS, then `words`; returns `path`."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(list(contracts.RESERVED_TOKENS) + list(words)) + "\n")
  return path


def synthetic_pairs(n: int, seed: int = 0, task: str = "ict", doc_words: int = 30,
                    query_words: int = 5, docs: int | None = None,
                    first_page: int = 0) -> list[Pair]:
  """`n` pairs over `docs` documents (default n // 2, so documents repeat); document k is
  page `first_page + k`."""
  rng = random.Random(seed)
  vocab = [w for w in WORDS if w.startswith("w")]
  ndocs = docs or max(1, n // 2)
  documents = [(first_page + k, " ".join(rng.choice(vocab) for _ in range(doc_words)))
               for k in range(ndocs)]
  pairs = []
  for i in range(n):
    page, text = documents[i % ndocs]
    words = text.split()
    start = rng.randrange(0, len(words) - query_words)
    pairs.append(Pair(task=task, query=" ".join(words[start:start + query_words]),
                      doc_title=f"title w{page % 200}", doc_text=text, query_page_id=page,
                      doc_page_id=page, doc_passage_id=0))
  return pairs


def write_pairs(root: str, task: str, split: str, pairs: Sequence[Pair], shards: int = 2,
                ) -> list[str]:
  """Writes `<root>/pairs/<task>/<split>-SSSSS-of-NNNNN.tfrecord` (the pair pipeline's
  layout); returns the paths."""
  return contracts.codecs.write_pairs(contracts.pairs_prefix(root, task, split), pairs, shards)
