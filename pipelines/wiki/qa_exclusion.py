"""`twotower pairs --exclude_qa FILE[,FILE]`: the QA files' articles are not pre-trained on,
whichever input holds them (dumps, WikiExtractor text and JSON, JSONL documents).

    QA files --ReadQaArticles--> .titles: title keys of the QA articles (distinct)
                                 .index:  one QaIndex (every paragraph's anchors)
    QA title keys + redirects --ExcludedTitles--> the QA titles, and the target of every
                                                   redirect from one
      --> ResolveLinks' title join: every page of such a title is left out
          (`pages_skipped_qa_article`); its title still resolves, so links count as before
    kept pages --DropQaParagraphPages(index)--> pages that hold no QA paragraph
          (`pages_skipped_qa_paragraph`: a page under another title, e.g. renamed or merged,
          that carries a paragraph of a QA article); counts `pages_kept`

A left-out page gives no passage (passages/ and the open-domain pool never see it) and no
pair: no ICT, BFS or crop pair of its own, and no WLP pair either way, since WLP joins A's
lead sentences with B's passages (pipelines.wiki.pairs.MakePairs): a page B linking to a
left-out page A makes no pair whose query is from A, and a left-out B is no document for A.
B's other pairs stay. A link to A still resolves (to A's id: it is no `links_unresolved`);
A's own links are not counted, as of any page not kept. So a run differs from one without
the exclusion by the left-out pages, their passages, links and pairs, and the WLP pairs
sampled among the inlinks that they were part of.

Why side inputs here, where the rest of the job joins: what is held is the QA files' part,
not the dump's. The title set is the QA file's article titles (44 for the shared SQuAD
subset, about 500 for SQuAD v1.1 train + dev); the paragraph index is 8 anchors per QA
paragraph (2 MB for SQuAD train + dev); both are read from the QA files by the job itself,
so the pipeline graph holds only their paths. The QA titles go into the job's existing title
join (ResolveLinks' GroupByTitle) as one more keyed input, so no page is held for them;
redirects from a QA title are found with the title set as a side input, fused into the stage
that routes redirects.

Redirects: one hop, what MediaWiki itself follows for a reader (a double redirect shows the
redirect page in between), so a QA title that the inputs moved to a new title (SQuAD's
"Financial crisis of 2007–08", today a redirect) leaves out the page it moved to. A page
reached only through a chain of redirects is left to the paragraph check.
Titles are matched in the first wiki's title space (its dumps and every text input); the
pages of another wiki (`--dump enwiki,ltgwiki`) are checked by their paragraphs only.
"""

from __future__ import annotations

import logging
from typing import Sequence

import apache_beam as beam

from twotower.core.contracts import Page
from twotower.core.contracts import counters as C
from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.wiki import qa_articles
from twotower.pipelines.wiki.qa_articles import QaFile, QaIndex

logger = logging.getLogger(__name__)


def _read(qa_file: QaFile):
  """A QA file -> (title, paragraph anchors) per paragraph with text, counted."""
  counter = beam_jobs.counter(C.QA_PARAGRAPHS)
  for paragraph in qa_articles.read_qa_file(qa_file.path, qa_file.kind):
    counter.inc()
    yield paragraph.title, qa_articles.anchors(paragraph.text)


def _title_keys(element):
  key = qa_articles.title_key(element[0])
  if key is not None:
    yield key


def _count_article(key):
  beam_jobs.counter(C.QA_ARTICLES).inc()
  return key


class _BuildIndex(beam.CombineFn):
  """(title, anchors) per paragraph -> one QaIndex."""

  def create_accumulator(self):
    return []

  def add_input(self, accumulator, element):
    accumulator.append(element)
    return accumulator

  def merge_accumulators(self, accumulators):
    return [e for a in accumulators for e in a]

  def extract_output(self, accumulator):
    return QaIndex.build(accumulator)


class ReadQaArticles(beam.PTransform):
  """PBegin -> {"titles": PCollection[(0, title)] (each QA article once, counted
  `qa_articles`), "index": PCollection[QaIndex] (one element; paragraphs counted
  `qa_paragraphs`)}."""

  def __init__(self, files: Sequence[QaFile]):
    super().__init__()
    self.files = list(files)

  def expand(self, pbegin):
    # (title, anchors) per paragraph of every QA file
    sketches = (pbegin
                | "QaFiles" >> beam.Create(self.files)
                | "ReadQaFiles" >> beam.FlatMap(_read))
    # (0, title): the title join's key of each QA article
    titles = (sketches
              | "QaTitleKeys" >> beam.FlatMap(_title_keys)
              | "DistinctQaTitles" >> beam.Distinct()
              | "CountQaArticles" >> beam.Map(_count_article))
    index = sketches | "QaIndex" >> beam.CombineGlobally(_BuildIndex())
    return {"titles": titles, "index": index}


class _RedirectsFromQaTitles(beam.DoFn):
  """A redirect (source, target) of the first wiki -> (0, target) when the source is a QA
  title (counted `qa_articles_redirected`); a redirect of another wiki (space, source,
  target) names no QA article."""

  def __init__(self):
    self.redirected = None

  def setup(self):
    self.redirected = beam_jobs.counter(C.QA_ARTICLES_REDIRECTED)

  def process(self, redirect, qa_titles):
    if len(redirect) == 2 and (0, redirect[0]) in qa_titles:
      self.redirected.inc()
      logger.info("QA article %r is a redirect: leaving out %r", redirect[0], redirect[1])
      yield 0, redirect[1]


class ExcludedTitles(beam.PTransform):
  """{"qa_titles": PCollection[(0, title)], "redirects": PCollection[(source, target) or
  (space, source, target)]} -> PCollection[(0, title)]: the QA titles, and the target of
  each redirect whose source is one (ResolveLinks leaves out the pages of these titles)."""

  def expand(self, inputs):
    qa_titles, redirects = inputs["qa_titles"], inputs["redirects"]
    # (0, target): where the inputs moved a QA article
    moved = redirects | "RedirectsFromQaTitles" >> beam.ParDo(
        _RedirectsFromQaTitles(),
        beam.pvalue.AsDict(qa_titles | "AsKeys" >> beam.Map(lambda key: (key, True))))
    return (qa_titles, moved) | "QaAndMovedTitles" >> beam.Flatten()


class DropQaParagraphPages(beam.DoFn):
  """Page -> Page, unless it holds a QA paragraph (qa_articles.QaIndex.held_in): then it is
  left out, counted `pages_skipped_qa_paragraph` and logged with the QA article. Counts
  `pages_kept` for the pages it keeps (ResolveLinks does not, when this runs after it)."""

  def __init__(self):
    self.counters: dict = {}

  def setup(self):
    self.counters = {name: beam_jobs.counter(name) for name in (
        C.PAGES_KEPT, C.pages_skipped(C.PageSkip.QA_PARAGRAPH))}

  def process(self, page: Page, index: QaIndex):
    text = "\n".join(p for section in page.sections for p in section.paragraphs)
    held = index.held_in(text)
    if held:
      self.counters[C.pages_skipped(C.PageSkip.QA_PARAGRAPH)].inc()
      logger.warning("%s: leaving out page id=%d title=%r: it holds %d paragraph(s) of QA "
                     "article(s) %s", page.source, page.page_id, page.title, len(held),
                     sorted({index.titles[i] for i in held}))
      return
    self.counters[C.PAGES_KEPT].inc()
    yield page
