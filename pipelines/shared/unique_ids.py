"""One page per page id: the readers of dumps (pipelines.wiki.wikidump) and of extracted text
(pipelines.wiki.textdocs) key every page by its id and keep the first.

A dump never repeats a page id, but a damaged or concatenated one can, and a JSONL file can
repeat an `id`: two pages under one id would mix their passages and links. Each reader gives
every page its place in its input, (rank of its file in the input, position in the file), and
`KeepFirstPerId` groups the pages by id and keeps the one with the smallest place; the others
are counted (`pages_skipped_duplicate_id`) and logged. The place decides, not the order in
which a runner delivers a group, so every runner keeps the same page. Ids are already shifted
into their input's range (pipelines.wiki.inputs), so only pages of one input can meet.

The grouping replaces the Reshuffle that spread the pages over workers before parsing: it
spreads them too, at the cost of one shuffle either way.
"""

from __future__ import annotations

import logging
from typing import Iterator

import apache_beam as beam

from twotower.core.contracts import counters as C
from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.shared import shuffle as shuffle_lib

logger = logging.getLogger(__name__)


class _FirstPerIdFn(beam.DoFn):
  """(page_id, [((file rank, position), page)]) -> the page of the smallest place."""

  def __init__(self):
    self.duplicate = None  # made in the worker

  def process(self, element) -> Iterator:
    page_id, placed = element
    placed = list(placed)
    if len(placed) == 1:
      yield placed[0][1]
      return
    placed.sort(key=lambda item: item[0])
    if self.duplicate is None:
      self.duplicate = beam_jobs.counter(C.pages_skipped(C.PageSkip.DUPLICATE_ID))
    self.duplicate.inc(len(placed) - 1)
    first = placed[0][1]
    logger.warning("%s: page id %d is repeated: keeping the first (title %r), skipping %d "
                   "more (titles %s)", first.source, page_id, first.title, len(placed) - 1,
                   sorted({page.title for _, page in placed[1:]}))
    yield first


class KeepFirstPerId(beam.PTransform):
  """PCollection[(page_id, ((file rank, position), page))] -> PCollection[page]: one page per
  id, the one of the smallest (file rank, position); `page` has `.source` and `.title`."""

  def __init__(self, shuffle: shuffle_lib.Shuffle = shuffle_lib.Shuffle()):
    super().__init__()
    self.shuffle = shuffle

  def expand(self, placed_pages):
    return (placed_pages
            | "GroupById" >> shuffle_lib.GroupByKey(self.shuffle)
            | "KeepFirst" >> beam.ParDo(_FirstPerIdFn()))
