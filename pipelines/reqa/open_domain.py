"""The open-domain pool of ReQA (the paper's Table 6): extra (sentence, passage) candidates from
a `twotower pairs` output, sampled by a hash or taken whole, minus every page the QA data was
written on. Used by pipelines.reqa.builder (`--extra_passages`, `--extra_candidates`); its docstring
tells the whole job.
"""

from __future__ import annotations

from typing import Iterator

import apache_beam as beam

from twotower.core import contracts
from twotower.core.contracts import Candidate
from twotower.core.contracts import counters as C
from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.reqa.qa_records import candidate_id, passage_key

#: `extra_candidates` value (`--extra_candidates all`): every (sentence, passage) of
#: `extra_passages`.
ALL_EXTRA = -1


def _inc(name: str, value: int = 1) -> None:
  beam_jobs.counter(name).inc(value)


def _sentences(passage: contracts.Passage) -> Iterator[int]:
  """Indices of the usable sentences of a passage (none if its text is empty)."""
  if not passage.text.strip():
    return
  for i, sentence in enumerate(passage.sentences):
    if sentence and sentence.strip():
      yield i


def _extra_candidate(passage: contracts.Passage, i: int) -> tuple[int, tuple[int, Candidate]]:
  """(page_id, (candidate_id, Candidate)): the page id travels for DropReqaPages."""
  sentence = passage.sentences[i].strip()
  cid = candidate_id(sentence, passage.text)
  return passage.page_id, (cid, Candidate(cid, sentence, passage.text, passage.title,
                                          contracts.WIKIPEDIA_SOURCE, passage.section))


class SampleExtraCandidates(beam.PTransform):
  """Passage -> (page_id, (candidate_id, Candidate)): N (sentence, passage) candidates sampled
  deterministically, or all of them (n = ALL_EXTRA).

  Every (passage, sentence index) gets a hash; the N smallest hashes win. Only a threshold (the
  N-th smallest hash: one number, a singleton side input) crosses workers, so the sample is the
  same on any runner and any sharding, and nothing corpus-sized sits in one worker beyond N
  integers in the Top combine.
  """

  def __init__(self, n: int, seed: str):
    super().__init__()
    self.n, self.seed = n, seed

  def expand(self, passages):
    if self.n == ALL_EXTRA:
      return passages | "AllSentences" >> beam.FlatMap(
          lambda p: (_extra_candidate(p, i) for i in _sentences(p)))
    seed = self.seed

    def keyed(p: contracts.Passage):
      for i in _sentences(p):
        yield contracts.stable_hash(seed, "extra", p.page_id, p.passage_id, i), (p, i)

    # (hash, (Passage, sentence index))
    hashed = passages | "HashSentences" >> beam.FlatMap(keyed)
    # the N-th smallest hash (a singleton)
    threshold = (hashed
                 | "HashesOnly" >> beam.Keys()
                 | "NSmallest" >> beam.combiners.Top.Smallest(self.n)
                 | "Threshold" >> beam.Map(lambda hs: hs[-1] if hs else -1))

    def to_candidate(element, limit):
      h, (p, i) = element
      if h <= limit:
        yield _extra_candidate(p, i)

    return hashed | "KeepSampled" >> beam.FlatMap(
        to_candidate, limit=beam.pvalue.AsSingleton(threshold))


def _source_pages(element) -> Iterator[tuple[int, int]]:
  """(passage_key, {"extra": [(page_id, (cid, Candidate))], "reqa": [True]}) -> (page_id, n)
  for each page with a passage equal to a ReQA paragraph (n: its candidates there)."""
  _, groups = element
  if not any(True for _ in groups["reqa"]):
    return
  pages: dict[int, int] = {}
  for page_id, _ in groups["extra"]:
    pages[page_id] = pages.get(page_id, 0) + 1
  yield from pages.items()


def _drop_source_pages(element) -> Iterator[tuple[int, Candidate]]:
  """(page_id, {"extra": [(cid, Candidate)], "source": [n, ...]}) -> the page's extra
  candidates, unless the page is a source of ReQA paragraphs (then they are counted)."""
  _, groups = element
  extra = list(groups["extra"])
  exact = sum(groups["source"])
  if not exact:
    yield from extra
    return
  _inc(C.CANDIDATES_EXTRA_SKIPPED_REQA_PASSAGE, exact)
  if len(extra) > exact:
    _inc(C.CANDIDATES_EXTRA_SKIPPED_REQA_PAGE, len(extra) - exact)


class DropReqaPages(beam.PTransform):
  """{"extra": (page_id, (candidate_id, Candidate)), "reqa": passage_key of each ReQA
  paragraph} -> the extra (candidate_id, Candidate) of pages that are no source of a ReQA
  paragraph.

  A page with a passage equal to a ReQA paragraph (normalised text) is an article the QA data
  was written on: its other passages are the same paragraphs packed together, cut, or cleaned
  differently, so the whole page leaves the open-domain pool (counted: the exact matches, and
  the rest of the page). Two joins (CoGroupByKey: on the passage, then on the page id), no
  side input.
  """

  def expand(self, inputs):
    extra = inputs["extra"]
    # (passage_key, (page_id, (cid, Candidate)))
    by_passage = extra | "KeyByPassage" >> beam.Map(
        lambda kv: (passage_key(kv[1][1].passage), kv))
    reqa = inputs["reqa"] | "Mark" >> beam.Map(lambda key: (key, True))
    # (page_id, candidates of that page on a ReQA paragraph)
    sources = ({"extra": by_passage, "reqa": reqa}
               | "JoinOnPassage" >> beam.CoGroupByKey()
               | "SourcePages" >> beam.FlatMap(_source_pages))
    return ({"extra": extra, "source": sources}
            | "JoinOnPage" >> beam.CoGroupByKey()
            | "DropSourcePages" >> beam.FlatMap(_drop_source_pages))
