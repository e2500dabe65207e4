"""Tiny, deterministic fixtures for tests and the benchmark's fallback: a WordPiece
vocabulary file and pair TFRecords in the pair schema (contracts.PAIR_FEATURES).

Synthetic pairs are ICT-like: the query is a few words of its document, so a model can learn
them, and several queries share a document (accidental hits happen).
"""

from __future__ import annotations

import os
import random
from typing import Sequence

import tensorflow as tf

from twotower import contracts
from twotower.model.tokenizer import SPECIAL_TOKENS

WORDS = tuple(f"w{i}" for i in range(200)) + (
    "the", "cat", "sat", "on", "mat", "who", "wrote", "paris", "river", "city", "king",
    "queen", "music", "film", "war", "school", "##s", "##ed", ".", ",", "?")


def write_vocab(path: str, words: Sequence[str] = WORDS) -> str:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(list(SPECIAL_TOKENS) + list(words)) + "\n")
  return path


def synthetic_pairs(n: int, seed: int = 0, task: str = "ict", doc_words: int = 30,
                    query_words: int = 5, docs: int | None = None) -> list[dict]:
  """`n` pairs over `docs` documents (default n // 2, so documents repeat)."""
  rng = random.Random(seed)
  vocab = [w for w in WORDS if w.startswith("w")]
  ndocs = docs or max(1, n // 2)
  documents = [(page, " ".join(rng.choice(vocab) for _ in range(doc_words)))
               for page in range(ndocs)]
  pairs = []
  for i in range(n):
    page, text = documents[i % ndocs]
    words = text.split()
    start = rng.randrange(0, len(words) - query_words)
    pairs.append({"task": task, "query": " ".join(words[start:start + query_words]),
                  "doc_title": f"title w{page % 200}", "doc_text": text,
                  "query_page_id": page, "doc_page_id": page, "doc_passage_id": 0})
  return pairs


def pair_example(pair: dict) -> bytes:
  feature = {}
  for name in contracts.PAIR_BYTES_FEATURES:
    feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(
        value=[str(pair[name]).encode("utf-8")]))
  for name in contracts.PAIR_INT64_FEATURES:
    feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(pair[name])]))
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_pairs(root: str, task: str, split: str, pairs: Sequence[dict], shards: int = 2,
                ) -> list[str]:
  """Writes `<root>/pairs/<task>/<split>-SSSSS-of-NNNNN.tfrecord`; returns the paths."""
  prefix = contracts.pairs_prefix(root, task, split)
  os.makedirs(os.path.dirname(prefix), exist_ok=True)
  paths = [f"{prefix}-{i:05d}-of-{shards:05d}{contracts.PAIRS_SUFFIX}" for i in range(shards)]
  writers = [tf.io.TFRecordWriter(p) for p in paths]
  for i, pair in enumerate(pairs):
    writers[i % shards].write(pair_example(pair))
  for w in writers:
    w.close()
  return paths
