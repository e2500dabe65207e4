"""The articles of a QA file (SQuAD v1.1 / v2.0 JSON, simplified Natural Questions): their
titles, a fingerprint of their paragraphs, and where either shows up in a pair set.

The pair pipeline leaves these articles out of pre-training (`twotower pairs --exclude_qa`,
pipelines.wiki.qa_exclusion) so that the towers are tested on articles they were not
pre-trained on; this module says what "these articles" are, and checks a pair set for them.

* **Titles** are normalised as MediaWiki does (pipelines.wiki.titles, English Wikipedia's
  rules: first letter upper case, `_` as a space, percent-encoding decoded, so SQuAD's
  `Financial_crisis_of_2007%E2%80%9308` is `Financial crisis of 2007–08`).
* **Paragraphs** are fingerprinted by word shingles: the text is cut into words (NFKC, case
  folded, `\\w+` runs: punctuation, spacing and footnote marks do not count), every run of
  SHINGLE_WORDS consecutive words is hashed, and the ANCHORS_PER_PARAGRAPH smallest hashes of
  a paragraph are its anchors (a bottom-k sketch). A text *holds* a QA paragraph when at
  least MIN_ANCHORS of the paragraph's anchors are among the text's shingles. Why shingles
  and not a hash of the whole paragraph: a page carries a QA paragraph as part of a longer
  text, cleaned by another tool (SQuAD's 2016 extraction against our wikitext cleaner), often
  edited since; an exact hash would need both sides cut and cleaned alike. Eight-word runs
  shared by chance are rare, three of one paragraph's eight anchors rarer still, and a text
  holding half of a paragraph holds three of its anchors with probability 0.86 (all of them
  when it holds all of it). The anchors of every paragraph of SQuAD v1.1 train + dev (21k
  paragraphs) are 170k integers: 2 MB, a side input every worker holds.
* **The check** (`find_leaks`) reads a pair pipeline output and names every pair whose query
  or document page is a QA article by title, and every pair whose query or document text
  holds a QA paragraph by a stricter rule than the exclusion's, on all shingles, not anchors:
  at least half of the shingles of the shorter of the two texts are shared (a query
  sentence taken from a paragraph; a passage holding half a paragraph). Tests run it on the
  pipeline's own output; it is the same check a reader can run on any pair set.

The QA files are read with the ReQA job's parsers (pipelines.reqa.squad, pipelines.reqa.nq):
a SQuAD article gives every paragraph with text, a Natural Questions record the paragraph the
ReQA job keeps (its long answer, where ReQA keeps the record).
"""

from __future__ import annotations

import collections
import dataclasses
import re
import unicodedata
from typing import Iterable, Iterator, NamedTuple, Optional, Sequence

import numpy as np

from twotower.core import contracts
from twotower.core import files as tio
from twotower.core.contracts import SiteInfo, codecs
from twotower.pipelines.reqa import nq as nq_lib
from twotower.pipelines.reqa import squad as squad_lib
from twotower.pipelines.reqa.qa_records import Paragraph
from twotower.pipelines.wiki import titles as titles_lib

#: Words per shingle: long enough that a run shared by chance is rare, short enough that a
#: paragraph edited here and there keeps most of its runs.
SHINGLE_WORDS = 8
#: Anchors kept per QA paragraph (its smallest shingle hashes).
ANCHORS_PER_PARAGRAPH = 8
#: Anchors of one paragraph a text must hold to hold the paragraph (all of them, for a
#: paragraph with fewer).
MIN_ANCHORS = 3
#: The title rules of the QA files' wiki (English Wikipedia: first letter upper case, the
#: canonical namespaces), as for extracted text (pipelines.wiki.textdocs).
QA_SITE = SiteInfo(dbname="qa")
#: Parsers of the QA formats, by kind.
PARSERS = {"squad": squad_lib.parse_squad, "nq": nq_lib.parse_nq}

_WORD = re.compile(r"\w+")
#: Odd multiplier of the polynomial that combines a shingle's word hashes (mod 2^64).
_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


class QaFile(NamedTuple):
  path: str
  kind: str  # "squad" | "nq"


class QaParagraph(NamedTuple):
  """One paragraph of a QA article: its article's title (as the file writes it) and text."""
  title: str
  text: str


def qa_kind(path: str) -> str:
  """"squad" for `*.json`, "nq" for `*.jsonl[.gz]` (simplified Natural Questions)."""
  name = path.lower()
  if name.endswith((".jsonl", ".jsonl.gz")):
    return "nq"
  if name.endswith(".json"):
    return "squad"
  raise ValueError(f"{path}: not a QA file this stage reads (SQuAD *.json, simplified Natural "
                   "Questions *.jsonl or *.jsonl.gz)")


def match_qa_files(spec: str) -> list[QaFile]:
  """The files of a comma list of globs, each with its kind; a SQuAD file is parsed once here
  so that a malformed one is a one-line error naming it before any work.

  Raises:
    FileNotFoundError: a glob matches nothing (names it).
    ValueError: a file of no known kind, or not a SQuAD file (names it).
  """
  files = []
  for pattern in (p.strip() for p in spec.split(",")):
    if not pattern:
      continue
    for path in tio.match_files(pattern):
      files.append(QaFile(path, qa_kind(path)))
  if not files:
    raise ValueError(f"--exclude_qa {spec!r} names no file")
  for f in files:
    if f.kind == "squad":
      squad_lib.load_squad(f.path)
  return files


def read_qa_file(path: str, kind: str) -> Iterator[QaParagraph]:
  """Every paragraph with text of a QA file (the parsers' counted skips are the ReQA job's
  business: a paragraph whose questions are unusable is still its article's text)."""
  for item in PARSERS[kind](path):
    if isinstance(item, Paragraph) and item.context.strip():
      yield QaParagraph(item.title, item.context)


def title_key(title: str) -> Optional[tuple[int, str]]:
  """A QA article's title as the pair pipeline's title joins key it (the first wiki's title
  space, 0), or None for a title MediaWiki would not accept."""
  normalised = titles_lib.normalize_title(title, QA_SITE)
  return (0, normalised) if normalised else None


# ---------------------------------------------------------------------------------------------
# Paragraph fingerprints.
# ---------------------------------------------------------------------------------------------


def words(text: str) -> list[str]:
  """The words shingles are made of: NFKC, case folded, runs of word characters."""
  return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


#: Word -> its hash, per process; emptied when it holds _WORD_CACHE_SIZE words.
_word_hashes: dict[str, int] = {}
_WORD_CACHE_SIZE = 1 << 20


def _word_hash(word: str) -> int:
  # stable_hash: the same in every worker process, unlike hash().
  value = _word_hashes.get(word)
  if value is None:
    if len(_word_hashes) >= _WORD_CACHE_SIZE:
      _word_hashes.clear()
    value = _word_hashes[word] = contracts.stable_hash("qa-word", word)
  return value


def shingles(text: str) -> np.ndarray:
  """The hash of every run of SHINGLE_WORDS consecutive words of `text` (uint64, in text
  order; empty for a shorter text)."""
  ws = words(text)
  n = len(ws) - SHINGLE_WORDS + 1
  if n <= 0:
    return np.zeros(0, dtype=np.uint64)
  hashes = np.fromiter((_word_hash(w) for w in ws), dtype=np.uint64, count=len(ws))
  out = np.zeros(n, dtype=np.uint64)
  for j in range(SHINGLE_WORDS):  # polynomial in the words' hashes, mod 2^64 (wraps)
    out = out * _MULTIPLIER + hashes[j:j + n]
  return out


def anchors(text: str) -> tuple[int, ...]:
  """A paragraph's anchors: its ANCHORS_PER_PARAGRAPH smallest distinct shingle hashes."""
  return tuple(int(h) for h in np.unique(shingles(text))[:ANCHORS_PER_PARAGRAPH])


@dataclasses.dataclass(frozen=True, eq=False)
class QaIndex:
  """Every QA paragraph's anchors, sorted, for looking a text's shingles up in them.

  Attributes:
    anchors: uint64, sorted: the anchors of every paragraph.
    owners: int32, one per anchor: the paragraph it belongs to (an index into `titles`).
    needed: int32, per paragraph: anchors a text must hold to hold the paragraph.
    titles: per paragraph, its article's title (for log lines).
  """
  anchors: np.ndarray
  owners: np.ndarray
  needed: np.ndarray
  titles: tuple[str, ...]

  @classmethod
  def build(cls, sketches: Iterable[tuple[str, tuple[int, ...]]]) -> "QaIndex":
    """From (article title, anchors) per paragraph; a paragraph under SHINGLE_WORDS words
    (no anchor) is left out, and a paragraph given twice counts once."""
    unique = sorted({(title, sketch) for title, sketch in sketches if sketch})
    owners = np.repeat(np.arange(len(unique), dtype=np.int32), [len(s) for _, s in unique])
    flat = np.fromiter((h for _, s in unique for h in s), dtype=np.uint64, count=len(owners))
    order = np.argsort(flat, kind="stable")
    needed = np.array([min(MIN_ANCHORS, len(s)) for _, s in unique], dtype=np.int32)
    return cls(flat[order], owners[order], needed, tuple(t for t, _ in unique))

  @property
  def paragraphs(self) -> int:
    return len(self.titles)

  def held_in(self, text: str) -> list[int]:
    """The paragraphs `text` holds (indices into `titles`): those with at least `needed`
    of their anchors among the text's shingles."""
    if not len(self.anchors):
      return []
    found = shingles(text)
    hit = np.searchsorted(self.anchors, found, side="left")
    hit = np.unique(hit[self.anchors[np.minimum(hit, len(self.anchors) - 1)] == found])
    if not len(hit):
      return []
    # Each anchor once, however often the text repeats its words; an anchor two paragraphs
    # share (a run of words both hold) counts for both.
    hi = np.searchsorted(self.anchors, self.anchors[hit], side="right")
    owners = np.concatenate([self.owners[a:b] for a, b in zip(hit, hi)])
    counts = np.bincount(owners, minlength=len(self.needed))
    return np.flatnonzero(counts >= self.needed).tolist()


def index_paragraphs(paragraphs: Iterable[QaParagraph]) -> QaIndex:
  return QaIndex.build((p.title, anchors(p.text)) for p in paragraphs)


# ---------------------------------------------------------------------------------------------
# The check: QA articles in a pair set.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Leak:
  """A pair that holds a QA article: by the title of its query or document page, or by the
  text of one of its paragraphs."""
  task: str
  split: str
  field: str    # "query page", "doc page", "query" or "doc_text"
  article: str  # the QA article's title (normalised)
  detail: str   # the page title, or the words shared


def _shown(title: str) -> str:
  """A QA title as a Leak names it: normalised (as written where MediaWiki would refuse it)."""
  key = title_key(title)
  return key[1] if key else title


def _base_title(doc_title: str) -> str:
  # `--doc_title_section` writes "Title › Section".
  return doc_title.split(" › ", 1)[0]


class _ShingleTable:
  """Every shingle of every QA paragraph -> the paragraphs holding it (the check's exact
  table; the pipeline's exclusion uses anchors only)."""

  def __init__(self, paragraphs: Sequence[QaParagraph]):
    self.titles = [_shown(p.title) for p in paragraphs]
    self.sizes = []
    self.owners: dict[int, list[int]] = collections.defaultdict(list)
    for i, p in enumerate(paragraphs):
      hashes = set(shingles(p.text).tolist())
      self.sizes.append(len(hashes))
      for h in hashes:
        self.owners[h].append(i)

  def held(self, text: str) -> list[tuple[int, int, int]]:
    """(paragraph, shared shingles, the text's shingles) for every paragraph that shares at
    least half of the shingles of the shorter of the two."""
    mine = set(shingles(text).tolist())
    shared: collections.Counter = collections.Counter()
    for h in mine:
      for i in self.owners.get(h, ()):
        shared[i] += 1
    return [(i, n, len(mine)) for i, n in shared.items()
            if 2 * n >= min(len(mine), self.sizes[i])]


def find_leaks(pairs_out: str, paragraphs: Sequence[QaParagraph],
               tasks: Sequence[str] = contracts.PAIR_TASKS) -> list[Leak]:
  """Every pair of a pair pipeline output (`pairs_out`: pairs/ and passages/) that holds a
  QA article: its query page or its document page has a QA article's title (normalised), or
  its query or document text holds one of the QA paragraphs (half of the shorter text's
  shingles shared). Empty: no QA article in the pairs."""
  titles = {key[1] for key in map(title_key, (p.title for p in paragraphs)) if key}
  table = _ShingleTable(paragraphs)
  page_titles = {p.page_id: p.title for p in codecs.read_passages(pairs_out,
                                                                    columns=("title",))}
  leaks = []
  for task in tasks:
    for split in contracts.PAIR_SPLITS:
      for pair in codecs.read_pairs(codecs.pair_files(pairs_out, task, split)):
        pages = (("query page", page_titles.get(pair.query_page_id, "")),
                 ("doc page", _base_title(pair.doc_title)))
        for field, page_title in pages:
          key = title_key(page_title) if page_title else None
          if key and key[1] in titles:
            leaks.append(Leak(task, split, field, key[1], page_title))
        for field, text in (("query", pair.query), ("doc_text", pair.doc_text)):
          for i, shared, total in table.held(text):
            leaks.append(Leak(task, split, field, table.titles[i],
                              f"{shared} of its {total} shingles in a paragraph: "
                              f"{text[:80]!r}"))
  return leaks


def read_qa_paragraphs(spec: str) -> list[QaParagraph]:
  """Every paragraph of the QA files of a comma list of globs (match_qa_files)."""
  return [p for f in match_qa_files(spec) for p in read_qa_file(f.path, f.kind)]
