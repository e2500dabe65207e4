"""`twotower vocab`: WordPiece from passages Parquet; a tokenizer built on it round-trips."""

from __future__ import annotations

import collections

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twotower import contracts
from twotower.pipelines import vocab

TEXTS = [
    "Anarchism is a political philosophy and movement that is sceptical of authority.",
    "The Autism spectrum is a range of neurodevelopmental conditions, Ünïcode included.",
    "Albedo is the fraction of sunlight that is diffusely reflected by a body (2019).",
    "Abraham Lincoln was the 16th president of the United States, from 1861 to 1865.",
] * 5


def write_passages(directory, texts) -> None:
  rows = [{"page_id": i // 3, "passage_id": i % 3, "title": f"Page {i // 3}", "text": t,
           "sentences": [t], "is_lead": i % 3 == 0} for i, t in enumerate(texts)]
  directory.mkdir(parents=True, exist_ok=True)
  pq.write_table(pa.Table.from_pylist(rows, schema=contracts.PASSAGE_SCHEMA),
                 directory / "passages-00000-of-00001.parquet")


def roundtrip_failures(vocab_path, texts) -> tuple[int, int, int]:
  """(texts whose detokenized word pieces differ from the basic tokenizer's words, [UNK]
  count, token count)."""
  import tensorflow_text as tf_text
  from tensorflow_text.python.ops import bert_tokenizer
  tokenizer = tf_text.BertTokenizer(str(vocab_path), **vocab.BERT_TOKENIZER_PARAMS)
  basic = bert_tokenizer.BasicTokenizer(**vocab.BERT_TOKENIZER_PARAMS)
  ids = tokenizer.tokenize(texts).merge_dims(-2, -1)
  words = tokenizer.detokenize(ids).to_list()
  expected = basic.tokenize(texts).to_list()
  unk = vocab_path.read_text(encoding="utf-8").splitlines().index("[UNK]")
  flat = ids.flat_values.numpy()
  return sum(w != e for w, e in zip(words, expected)), int((flat == unk).sum()), len(flat)


def test_counts_add_up_across_shards():
  whole = vocab.count_words(TEXTS)
  halves = vocab.count_words(TEXTS[:7]) + vocab.count_words(TEXTS[7:])
  assert whole == halves
  assert whole["anarchism"] == 5 and whole["unicode"] == 5  # lower case, accents stripped


def test_vocab_cli_writes_reserved_first_and_round_trips(tmp_path):
  write_passages(tmp_path / "out" / "passages", TEXTS)
  path = tmp_path / "vocab.txt"
  vocab.run(["--passages", str(tmp_path / "out"), "--out", str(path), "--vocab_size", "300"])
  tokens = path.read_text(encoding="utf-8").splitlines()
  assert tokens[:5] == list(vocab.RESERVED_TOKENS) and tokens[0] == "[PAD]"
  assert len(tokens) <= 300 and len(set(tokens)) == len(tokens)
  bad, unk, _ = roundtrip_failures(path, TEXTS)
  assert bad == 0 and unk == 0


def test_vocab_rejects_missing_passages(tmp_path):
  with pytest.raises(FileNotFoundError):
    vocab.run(["--passages", str(tmp_path / "nothing"), "--out", str(tmp_path / "v.txt")])
