"""Sentences and passages: cleaned pages -> passages that fit the document tower.

A passage is a paragraph, *packed* (short consecutive paragraphs of one section merged until
the pack reaches `min_passage_tokens`) or *cut* (a paragraph longer than the budget split at
sentence boundaries; a single sentence longer than the budget split at word boundaries).
Passages never cross a section, so `is_lead` is exact.

The budget defaults to what fits the paper's 288-word-piece document with its title,
`[CLS] title [SEP] passage [SEP]`: 288 - 3 - pieces(title). No vocabulary exists yet at this
stage, so word pieces are estimated as whitespace words x 1.3 (`pair_tasks.estimate_wordpieces`).

Sentences come from a named splitter (`pipelines.sentences.splitters`; by default spaCy's rule-based
sentencizer, computed without spaCy by pipelines.sentences.spacy_sentencizer) built once per worker in
`DoFn.setup` and fed whole batches of pages (a spaCy pipeline's `nlp.pipe` wants many
paragraphs per call).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Iterable, Sequence

import apache_beam as beam

from twotower.core import contracts
from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.wiki import nonprose, pair_tasks
from twotower.core.contracts import Passage
from twotower.core.contracts import counters as C

logger = logging.getLogger(__name__)

#: Document length of the paper's document tower, in word pieces.
DOC_TOKENS = 288
#: [CLS], [SEP], [SEP] around title and passage.
DOC_SPECIAL_TOKENS = 3


@dataclasses.dataclass(frozen=True)
class PassageConfig:
  """How paragraphs become passages (flags of `twotower pairs`)."""
  splitter: str = "spacy"        # pipelines.sentences.splitters name
  max_doc_tokens: int = DOC_TOKENS  # document tower length the passage + title must fit
  max_passage_tokens: int = 0    # fixed passage budget; 0 = max_doc_tokens - 3 - title
  min_passage_tokens: int = 64   # keep packing paragraphs of a section below this
  # Stub floor (pipelines.wiki.nonprose.stub_reason): a packed passage with fewer words, or under
  # 24 words without a sentence end, is not written (counted); 0 writes every passage.
  min_passage_words: int = 5
  batch_pages: int = 16          # pages per splitter call (nlp.pipe batch)

  def budget(self, title: str) -> int:
    if self.max_passage_tokens > 0:
      return self.max_passage_tokens
    budget = self.max_doc_tokens - DOC_SPECIAL_TOKENS - pair_tasks.estimate_wordpieces(title)
    return max(budget, 16)


def _words_budget(tokens: int) -> int:
  """Most whitespace words whose estimate fits `tokens` word pieces."""
  return max(1, math.floor(tokens / pair_tasks.WORDPIECES_PER_WORD))


def _cut(sentences: Sequence[str], max_words: int) -> list[list[str]]:
  """Splits one paragraph's sentences into chunks of at most `max_words` words, at sentence
  boundaries; a longer sentence is split at word boundaries."""
  chunks: list[list[str]] = []
  current: list[str] = []
  words = 0
  for sentence in sentences:
    n = len(sentence.split())
    if n > max_words:
      if current:
        chunks.append(current)
        current, words = [], 0
      tokens = sentence.split()
      chunks.extend([" ".join(tokens[i:i + max_words])] for i in range(0, n, max_words))
      continue
    if current and words + n > max_words:
      chunks.append(current)
      current, words = [], 0
    current.append(sentence)
    words += n
  if current:
    chunks.append(current)
  return chunks


def pack_page(page: contracts.Page, sentences: Sequence[Sequence[Sequence[str]]],
              config: PassageConfig) -> tuple[tuple[Passage, ...], dict[str, int]]:
  """Packs one page's paragraphs into passages.

  Args:
    page: the cleaned page.
    sentences: sentences[section][paragraph] = the paragraph's sentences.
    config: budgets.

  Returns:
    (passages with ids 0.. in page order, counter increments).
  """
  max_words = _words_budget(config.budget(page.title))
  min_words = _words_budget(config.min_passage_tokens)
  passages: list[Passage] = []
  counts = {C.PARAGRAPHS_CUT: 0, C.PASSAGES_PACKED: 0}
  if config.min_passage_words:
    counts.update({C.passages_skipped(r): 0 for r in C.PassageSkip})
  paths = section_paths(page.sections)
  for index, section in enumerate(page.sections):
    units: list[list[str]] = []  # paragraphs, or pieces of cut paragraphs
    for paragraph in sentences[index]:
      paragraph = [s for s in paragraph if s.strip()]
      if not paragraph:
        continue
      if sum(len(s.split()) for s in paragraph) > max_words:
        counts[C.PARAGRAPHS_CUT] += 1
        units.extend(_cut(paragraph, max_words))
      else:
        units.append(list(paragraph))
    packs: list[tuple[list[str], int]] = []  # (sentences, paragraphs merged)
    current: list[str] = []
    merged = words = 0
    for unit in units:
      n = sum(len(s.split()) for s in unit)
      if current and (words >= min_words or words + n > max_words):
        packs.append((current, merged))
        current, merged, words = [], 0, 0
      current = current + unit
      merged += 1
      words += n
    if current:
      packs.append((current, merged))
    for pack, merged in packs:
      text = " ".join(pack)
      if config.min_passage_words:
        reason = nonprose.stub_reason(text, config.min_passage_words)
        if reason is not None:
          counts[C.passages_skipped(reason)] += 1
          continue
      counts[C.PASSAGES_PACKED] += merged > 1
      passages.append(Passage(page.page_id, len(passages), page.title, text, tuple(pack),
                              index == 0, paths[index]))
  return tuple(passages), counts


def section_paths(sections: Sequence[contracts.Section]) -> list[str]:
  """Each section's heading path ("History › Early years"; "" for the lead): its heading
  after those of the enclosing sections (lower levels), as the table of contents nests them."""
  paths: list[str] = []
  open_headings: list[tuple[int, str]] = []  # (level, heading) of the enclosing sections
  for section in sections:
    if section.level == 0:
      open_headings = []
      paths.append("")
      continue
    while open_headings and open_headings[-1][0] >= section.level:
      open_headings.pop()
    open_headings.append((section.level, section.heading))
    paths.append(contracts.SECTION_SEPARATOR.join(h for _, h in open_headings if h))
  return paths


class _PassagesFn(beam.DoFn):
  """list[Page] -> (page_id, tuple[Passage, ...]) per page; the splitter lives per worker."""

  def __init__(self, config: PassageConfig):
    self.config = config
    self.counters = {}

  def setup(self):
    from twotower.pipelines.sentences import splitters
    self.splitter = splitters.get_splitter(self.config.splitter)
    self.counters = {name: beam_jobs.counter(name)
                     for name in (C.PASSAGES, C.PASSAGES_LEAD, C.SENTENCES, C.PARAGRAPHS_CUT,
                                  C.PASSAGES_PACKED, C.PAGES_WITHOUT_PASSAGES,
                                  *(C.passages_skipped(r) for r in C.PassageSkip))}

  def process(self, pages: list[contracts.Page]) -> Iterable[tuple[int, tuple[Passage, ...]]]:
    texts = [p for page in pages for section in page.sections for p in section.paragraphs]
    split = iter(self.splitter.split_many(texts))
    for page in pages:
      page_sentences = [[next(split) for _ in section.paragraphs] for section in page.sections]
      passages, counts = pack_page(page, page_sentences, self.config)
      for name, value in counts.items():
        self.counters[name].inc(value)
      self.counters[C.PASSAGES].inc(len(passages))
      self.counters[C.PASSAGES_LEAD].inc(sum(p.is_lead for p in passages))
      self.counters[C.SENTENCES].inc(sum(len(p.sentences) for p in passages))
      if not passages:
        self.counters[C.PAGES_WITHOUT_PASSAGES].inc()
        logger.info("%s: page %d %r has no passage", page.source, page.page_id, page.title)
      yield page.page_id, passages


class MakePassages(beam.PTransform):
  """PCollection[Page] -> PCollection[(page_id, tuple[Passage, ...])], one element per page
  (pages without text give an empty tuple, so joins still see them)."""

  def __init__(self, config: PassageConfig = PassageConfig()):
    super().__init__()
    self.config = config

  def expand(self, pages):
    return (pages
            # list[Page], a batch per nlp.pipe call
            | "BatchPages" >> beam.BatchElements(min_batch_size=1,
                                                 max_batch_size=self.config.batch_pages)
            # (page_id, tuple[Passage, ...])
            | "SplitAndPack" >> beam.ParDo(_PassagesFn(self.config)))
