"""`twotower vocab --passages DIR --out FILE`: a WordPiece vocabulary from passages/*.parquet.

This is tensorflow-text's `bert_vocab_from_dataset` cut in its two halves, so that the first
can be distributed when a corpus outgrows one process:

  1. `count_words`: BERT's basic tokenizer (lower case, accents stripped, punctuation split)
     over titles and passage texts -> Counter of words. Counters add, so the same function
     can run per shard (e.g. in a Beam `CombinePerKey(sum)`) and the results summed.
  2. `learn_vocab`: the learner library (`wordpiece_tokenizer_learner_lib`), one process,
     whose input is only the word counts.

Held-out pages never feed training: by default (`exclude_heldout`) the passages of pages the
pair pipeline held out are skipped, with the held-out share that pipeline wrote in its
config.json (contracts.codecs.read_heldout_percent) and the same page test
(contracts.is_heldout). A passages/ without config.json holds nothing known to be held out.

The vocabulary starts with contracts.RESERVED_TOKENS ([PAD] [UNK] [CLS] [SEP] [MASK], so [PAD]
has id 0) and is written one token per line, atomically. Build the tokenizer with the same
`lower_case=True`, e.g. `tensorflow_text.BertTokenizer(path, lower_case=True)`.

`run(VocabConfig) -> VocabResult` is the typed entry point; `twotower vocab`
(twotower.commands.vocab) is its flag parser.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import sys
from typing import Iterable, Iterator

from twotower.core import contracts
from twotower.core import file_outputs
from twotower.core import files as tio
from twotower.core import outputs
from twotower.core.contracts import codecs

logger = logging.getLogger(__name__)

#: The BertTokenizer settings the vocabulary is learned for; use the same when tokenizing.
BERT_TOKENIZER_PARAMS = {"lower_case": True}


@dataclasses.dataclass(frozen=True)
class VocabConfig:
  """Everything `twotower vocab` needs."""
  passages: str              # a `twotower pairs` output dir, its passages/ dir, or a glob
  out: str                   # the vocabulary file
  vocab_size: int = 30_000   # largest vocabulary size, reserved tokens included
  max_texts: int = 0         # passages read at most (0: all), after the held-out ones
  exclude_heldout: bool = True  # skip the passages of held-out pages
  overwrite: bool = False    # replace an --out made with other settings (file_outputs.owned_files)


@dataclasses.dataclass(frozen=True)
class VocabResult:
  path: str
  tokens: int                # tokens written, reserved ones included
  distinct_words: int        # distinct basic-tokenizer words counted
  words: int                 # words counted
  passages: int              # passages read (titles come with them)
  passages_heldout: int      # passages of held-out pages, skipped
  heldout_percent: float     # the share the pair pipeline held out (0: none known)


@dataclasses.dataclass
class PassageCounts:
  """Filled in by `passage_texts` as it goes."""
  read: int = 0
  heldout: int = 0


def passage_texts(passages: Iterable[contracts.Passage], max_texts: int = 0,
                  heldout_percent: float = 0.0,
                  counts: PassageCounts | None = None) -> Iterator[str]:
  """Each page's title once (with its passage 0) and every passage text, skipping passages of
  pages held out at `heldout_percent` (0: none); at most `max_texts` passages."""
  counts = counts if counts is not None else PassageCounts()
  for passage in passages:
    if heldout_percent and contracts.is_heldout(passage.page_id, heldout_percent):
      counts.heldout += 1
      continue
    if passage.passage_id == 0 and passage.title:
      yield passage.title
    yield passage.text
    counts.read += 1
    if max_texts and counts.read >= max_texts:
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
                          reserved_tokens=list(contracts.RESERVED_TOKENS))
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
  reserved = contracts.RESERVED_TOKENS
  if tuple(vocab[:len(reserved)]) != reserved:
    vocab = list(reserved) + [t for t in vocab if t not in reserved]
  return vocab


def check(config: VocabConfig) -> None:
  """A ValueError / FileNotFoundError for settings the stage cannot run with."""
  if config.vocab_size <= len(contracts.RESERVED_TOKENS):
    raise ValueError(f"vocab_size must exceed {len(contracts.RESERVED_TOKENS)}, got "
                     f"{config.vocab_size}")
  if config.max_texts < 0:
    raise ValueError(f"max_texts must be >= 0, got {config.max_texts}")
  if tio.is_local(config.out) and os.path.isdir(config.out):  # before minutes of counting
    raise IsADirectoryError(f"{config.out}: is a directory; --out is the vocabulary file "
                            f"(e.g. {config.out.rstrip('/')}/vocab.txt)")
  if not codecs.passage_files(config.passages):
    raise FileNotFoundError(f"no passages Parquet at {config.passages!r} (expected a "
                            "`twotower pairs` output dir, its passages/ dir, or a glob)")


def run(config: VocabConfig) -> VocabResult:
  """Counts words over the passages (held-out pages excluded), learns the vocabulary, writes
  it; returns what was written."""
  tio.log_settings("twotower vocab", dataclasses.asdict(config))
  check(config)
  percent = 0.0
  if config.exclude_heldout:
    pairs_out = contracts.pairs_out_dir(config.passages)
    percent = codecs.read_heldout_percent(pairs_out)
    if not tio.match_files(contracts.pairs_config_path(pairs_out), missing_ok=True):
      logger.warning("%s: no %s beside passages/: no page is known to be held out, all are "
                     "read", pairs_out, contracts.PAIRS_CONFIG_FILE)
  # Refused before minutes of counting when --out is another run's vocabulary; replaced
  # atomically (tio.write_text: a temp file beside it, never in the working directory).
  with file_outputs.owned_files(config.out, "vocab", outputs.settings_of(config),
                           overwrite=config.overwrite,
                           inputs=codecs.passage_files(config.passages)) as written:
    counts = PassageCounts()
    passages = codecs.read_passages(config.passages, columns=("title", "text"))
    words = count_words(passage_texts(passages, config.max_texts, percent, counts))
    logger.info("%d passages read, %d of held-out pages excluded (heldout_percent %g); %d "
                "distinct words, %d in all", counts.read, counts.heldout, percent, len(words),
                sum(words.values()))
    vocab = learn_vocab(words, config.vocab_size)
    tio.write_text(config.out, "\n".join(vocab) + "\n")
    written.append(config.out)
  return VocabResult(path=config.out, tokens=len(vocab), distinct_words=len(words),
                     words=sum(words.values()), passages=counts.read,
                     passages_heldout=counts.heldout, heldout_percent=percent)


def summary(result: VocabResult) -> str:
  """The command's result line."""
  heldout = (f"; {result.passages_heldout} passages of held-out pages excluded "
             f"({result.heldout_percent:g} %)" if result.passages_heldout else "")
  return (f"vocabulary of {result.tokens} tokens ({result.distinct_words} distinct words in "
          f"{result.passages} passages{heldout}) -> {result.path}")


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("vocab"))
