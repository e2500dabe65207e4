"""`twotower vocab --passages DIR --out FILE`: a WordPiece vocabulary from passages/*.parquet.

This is tensorflow-text's `bert_vocab_from_dataset` cut in its two halves, so that the first
can be distributed when a corpus outgrows one process:

  1. `count_words`: BERT's basic tokenizer (lower case, accents stripped, punctuation split)
     over titles and passage texts -> Counter of words. Counters add, so the same function
     can run per shard (e.g. in a Beam `CombinePerKey(sum)`) and the results summed.
  2. `learn_vocab`: the learner library (`wordpiece_tokenizer_learner_lib`), one process,
     whose input is only the word counts.

The vocabulary starts with the reserved tokens [PAD] [UNK] [CLS] [SEP] [MASK] (so [PAD] has
id 0) and is written one token per line, atomically. Build the tokenizer with the same
`lower_case=True`, e.g. `tensorflow_text.BertTokenizer(path, lower_case=True)`.
"""

from __future__ import annotations

import argparse
import collections
import logging
import sys
from typing import Iterable, Iterator

from twotower import contracts
from twotower import io as tio

logger = logging.getLogger(__name__)

RESERVED_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
#: The BertTokenizer settings the vocabulary is learned for; use the same when tokenizing.
BERT_TOKENIZER_PARAMS = {"lower_case": True}


def passage_files(passages: str) -> list[str]:
  """The Parquet shards under `passages` (a directory, a pipeline output dir, or a glob)."""
  if any(ch in passages for ch in "*?[") or passages.endswith(".parquet"):
    return tio.match_files(passages)
  for pattern in (f"{passages.rstrip('/')}/*.parquet",
                  f"{passages.rstrip('/')}/passages/*.parquet"):
    try:
      return tio.match_files(pattern)
    except FileNotFoundError:
      continue
  raise FileNotFoundError(f"no passages/*.parquet under {passages!r}")


def passage_texts(paths: Iterable[str], max_texts: int = 0) -> Iterator[str]:
  """Each page's title once (with its passage 0) and every passage text."""
  import pyarrow.parquet as pq
  from apache_beam.io.filesystems import FileSystems
  emitted = 0
  for path in paths:
    with FileSystems.open(path) as f:
      table = pq.read_table(f, columns=["passage_id", "title", "text"])
    for batch in table.to_batches():
      columns = batch.to_pydict()
      for passage_id, title, text in zip(columns["passage_id"], columns["title"],
                                         columns["text"]):
        if passage_id == 0 and title:
          yield title
        yield text
        emitted += 1
        if max_texts and emitted >= max_texts:
          return


def count_words(texts: Iterable[str], batch_size: int = 1024) -> collections.Counter:
  """Counter of BERT basic-tokenizer words (lower case) over `texts`."""
  import numpy as np
  from tensorflow_text.python.ops import bert_tokenizer
  tokenizer = bert_tokenizer.BasicTokenizer(**BERT_TOKENIZER_PARAMS)
  counts: collections.Counter = collections.Counter()

  def flush(batch: list[str]) -> None:
    words = tokenizer.tokenize(batch).flat_values.numpy()
    counts.update(w.decode("utf-8") for w in np.reshape(words, [-1]))

  batch: list[str] = []
  for text in texts:
    batch.append(text)
    if len(batch) >= batch_size:
      flush(batch)
      batch = []
  if batch:
    flush(batch)
  return counts


def learn_vocab(word_counts: collections.Counter, vocab_size: int,
                slack_ratio: float = 0.05) -> list[str]:
  """The learner library on word counts; reserved tokens first ([PAD] = id 0).

  tensorflow-text's `learn` bisects the count threshold linearly over [10, max count], and
  every probe is a full pure-Python pass over all words (~10 s per probe for the 34k distinct
  words of the English slice, ~14 probes). The vocabulary size falls as the threshold rises,
  so we bracket the threshold geometrically from an estimate (the count of the
  `vocab_size`-th most frequent word) and bisect inside the bracket: the same learner
  (`learn_with_thresh`, same input filtering), about half as many probes. The result is the
  largest vocabulary <= vocab_size found, preferring one within `slack_ratio` of it.
  """
  from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner
  if not word_counts:
    raise ValueError("no words to learn a vocabulary from (empty passages?)")
  params = learner.Params(upper_thresh=None, lower_thresh=None, num_iterations=4,
                          max_input_tokens=int(5e6), max_token_length=50,
                          max_unique_chars=1000, vocab_size=vocab_size, slack_ratio=slack_ratio,
                          include_joiner_token=True, joiner="##",
                          reserved_tokens=list(RESERVED_TOKENS))
  all_counts = learner.get_input_words(word_counts.items(), params.reserved_tokens,
                                       params.max_token_length)
  allowed = learner.get_allowed_chars(all_counts, params.max_unique_chars)
  counts = learner.filter_input_words(all_counts, allowed, params.max_input_tokens)

  probes: dict[int, list[str]] = {}

  def probe(thresh: int) -> int:
    if thresh not in probes:
      probes[thresh] = learner.learn_with_thresh(counts, thresh, params)
      logger.info("count threshold %d -> %d tokens", thresh, len(probes[thresh]))
    return len(probes[thresh])

  def good(size: int) -> bool:
    return vocab_size * (1 - slack_ratio) <= size <= vocab_size

  ranked = sorted((c for _, c in counts), reverse=True)
  max_count = ranked[0] + 1
  hi = max(2, ranked[min(vocab_size, len(ranked)) - 1])  # estimate of the threshold
  lo = 0  # invariant: threshold lo gives > vocab_size tokens (0: none is known)
  while probe(hi) > vocab_size and hi < max_count:  # too many tokens: raise geometrically
    lo, hi = hi, min(2 * hi, max_count)
  while lo == 0 and hi > 1 and not good(probe(hi)):  # too few: lower geometrically
    lower = max(1, hi // 2)
    if probe(lower) > vocab_size:
      lo = lower
    else:
      hi = lower
  while hi - lo > 1 and lo > 0 and not good(probe(hi)):  # bisect the bracket
    mid = (lo + hi) // 2
    if probe(mid) > vocab_size:
      lo = mid
    else:
      hi = mid
  if probe(hi) > vocab_size:
    logger.warning("%d tokens even at count threshold %d: more than --vocab_size %d "
                   "(the characters alone need that many)", probe(hi), hi, vocab_size)
  vocab = probes[hi]
  if tuple(vocab[:len(RESERVED_TOKENS)]) != RESERVED_TOKENS:
    vocab = list(RESERVED_TOKENS) + [t for t in vocab if t not in RESERVED_TOKENS]
  return vocab


def run(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(prog="twotower vocab", description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument("--passages", required=True,
                 help="passages Parquet: the `twotower pairs` output dir, its passages/ dir, "
                      "or a glob")
  p.add_argument("--out", required=True, help="vocabulary file to write (one token a line)")
  p.add_argument("--vocab_size", type=int, default=30_000, help="largest vocabulary size")
  p.add_argument("--max_texts", type=int, default=0,
                 help="read at most this many passages (0 = all)")
  args = p.parse_args(argv)
  if args.vocab_size <= len(RESERVED_TOKENS):
    p.error(f"--vocab_size must exceed {len(RESERVED_TOKENS)}, got {args.vocab_size}")
  tio.log_settings("twotower vocab", vars(args))
  paths = passage_files(args.passages)
  logger.info("counting words in %d Parquet file(s)", len(paths))
  counts = count_words(passage_texts(paths, args.max_texts))
  logger.info("%d distinct words, %d in all", len(counts), sum(counts.values()))
  vocab = learn_vocab(counts, args.vocab_size)
  tio.write_text(args.out, "\n".join(vocab) + "\n")
  print(f"vocabulary of {len(vocab)} tokens ({len(counts)} distinct words) -> {args.out}")


if __name__ == "__main__":
  from twotower import cli
  cli.setup_logging()
  run(sys.argv[1:])
