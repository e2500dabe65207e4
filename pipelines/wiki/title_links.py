"""Links for text without links: recover `[[link]]` targets by finding other pages' titles
(and redirects) in a page's text, so that WLP has pairs on extracted text (WikiExtractor
output has no links). The matching itself is pure Python: pipelines.wiki.title_index.

    articles (Page) --NoDisambiguation--> titles; + redirects --BuildIndex--> (space, TitleIndex)
    articles --Route--> pages to search (pages with links of their own pass, `only_unlinked`)
    pages --CountWordCase--> one-word titles the corpus writes mostly in lower case: dropped
    pages --FindTitles (index as a side input)--> (Page, Entries)
    Entries --PagesPerTarget--> hub targets; --Link--> Page with `links` = the titles found

The output is the input of pipelines.wiki.links.ResolveLinks, as parsed dump pages are: `links`
holds normalised titles (an article's, or a redirect's name when a redirect matched), so
redirects, self links, duplicate titles and WLP work as for real links, unchanged.

Matching (`TitleIndex.find`): text and titles are split into the same tokens (runs of word
characters, and every other non-space character alone), so a match is whole words. At every
token the longest title starting there wins and its tokens are consumed (leftmost-longest:
"New York City" hides "New York" and "York"); a page links each target once, at its first
mention, within one paragraph (a title never spans two). The rules that make it precise,
measured against the real links of the English slice and ltgwiki and read on samples of the
WikiExtractor corpus (`python -m benchmarks.link_recovery`, with `--errors N`, `--corpus`):

* Case: a title matches as written (MediaWiki titles are case-sensitive after the first
  letter); a title of several words also with its first letter in lower case ("political
  philosophy" for "Political philosophy"), as running text writes a common noun phrase.
* The page's own title (and every alias of it, and its name without a qualifier: "Sonder" in
  "Sonder (album)") is matched but never linked, so that it hides the titles inside it.
* One-word titles: skipped when the corpus writes the word mostly in lower case
  (`max_lowercase_share`, counted over all searched pages: "Art", "Atom", "April" are common
  words; "Aristotle", "Paris" are not), when shorter than `min_word_chars` (acronyms such as
  "UK" excepted), when an English function word (title_index.STOP_WORDS), and where the word
  is part of a longer name that is no title ("Apollo" in "Apollo 11", "Seberg" in "Jean
  Seberg"; `skip_name_parts`).
* Titles without a letter (years, scores such as "3-2") are never matched.
* Hubs: a target found on more than `max_target_share` of the searched pages is left out
  (a place mentioned far more often than linked, "Asia").
* Disambiguation pages and name lists are never targets: by title, or by a first paragraph
  "X may refer to:" / "X is a surname. Notable people with the surname include:"
  (WikiExtractor keeps them as articles).
* Qualifiers (`strip_qualifiers`, off by default: on the WikiExtractor corpus nearly every
  stripped name named something else, "Time" for "Time (Leo Ieiri album)"): "Mercury
  (planet)" is also found as "Mercury", unless that name is a title, a redirect, or the
  stripped name of another title.
* Redirects are aliases of their final target (chains followed, dangling ones dropped).

Memory: the index holds every title and redirect of a title space as token tuples, one
side input (tracemalloc: 18.6 MB for the 66,196 phrases of the 36,542 titles of the
WikiExtractor corpus, 23 MB while built). Fine for a corpus of that size, not for all of
English Wikipedia's 17M titles and redirects (ResolveLinks' joins are what scale there).
The searching steps wait for the side inputs, so a runner holds the pages meanwhile (the
corpus through ReadTextPages -> this -> ResolveLinks -> MakePassages -> MakePairs on the
DirectRunner: 1.0 GB peak RSS, `benchmarks.link_recovery --corpus`).

Counters (stats.json): title_links_pages (pages searched), title_links_pages_with_links
(pages that kept their own links, not searched), title_links_found (links recovered; of
which title_links_one_word, title_links_multi_word, title_links_via_alias: a redirect or a
stripped qualifier), title_links_own_title (mentions of the page's own title, not linked),
title_links_common_words (one-word titles left out as common words),
title_links_disambiguation (pages that are no target: disambiguation pages), title_links_hub
(links found but left out: their target is on too many pages, `max_target_share`).
"""

from __future__ import annotations

import collections
import dataclasses

import apache_beam as beam

from twotower.core.contracts import Page
from twotower.core.contracts import counters as C
from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.wiki import inputs as inputs_lib
# The matching itself (pure functions) lives in pipelines.wiki.title_index; re-exported here, the
# one module callers import.
from twotower.pipelines.wiki.title_index import (  # noqa: F401
    _QUALIFIER, NAIVE, STOP_WORDS, Entry, TitleIndex, TitleLinkConfig, common_words,
    hub_targets, is_disambiguation, own_names, recover_links, tokens, word_case_counts)


def _space_of(page_id: int, own: frozenset[int]) -> int:
  """The title space a page's links resolve in (as pipelines.wiki.links keys them)."""
  space = inputs_lib.id_space(page_id)
  return space if space in own else 0


def _scoped_redirect(redirect: tuple) -> tuple[int, tuple[str, str]]:
  """(source, target) of the first title space, or (space, source, target)."""
  space, source, target = (0, *redirect) if len(redirect) == 2 else redirect
  return space, (source, target)


class _TargetFn(beam.DoFn):
  """Page -> the Page if it may be a link target (not a disambiguation page, counted)."""

  def __init__(self):
    self.disambiguation = beam_jobs.counter(C.TITLE_LINKS_DISAMBIGUATION)

  def process(self, page: Page):
    if is_disambiguation(page):
      self.disambiguation.inc()
      return
    yield page


class _RouteFn(beam.DoFn):
  """Page -> (space, Page) to search (main), or the Page as it is (tagged "kept": a page with
  links of its own while `only_unlinked`)."""

  def __init__(self, config: TitleLinkConfig, own: frozenset[int]):
    self.config, self.own = config, own
    self.searched = beam_jobs.counter(C.TITLE_LINKS_PAGES)
    self.kept = beam_jobs.counter(C.TITLE_LINKS_PAGES_WITH_LINKS)

  def process(self, page: Page):
    if page.links and self.config.only_unlinked:
      self.kept.inc()
      yield beam.pvalue.TaggedOutput("kept", page)
      return
    self.searched.inc()
    yield _space_of(page.page_id, self.own), page


class _FindFn(beam.DoFn):
  """(space, Page) + {space: TitleIndex} + {space: common words} -> (space, (Page,
  tuple[Entry])): the Entries of the targets found, first mention first."""

  def __init__(self):
    self.own_title = beam_jobs.counter(C.TITLE_LINKS_OWN_TITLE)

  def process(self, element, indexes):
    space, page = element
    entries, counts = recover_links(page, indexes[space])  # the page's own title is there
    self.own_title.inc(counts.get("own_title", 0))
    yield space, (page, tuple(entries))


class _LinkFn(beam.DoFn):
  """(space, (Page, Entries)) + {space: hub targets} -> Page with the links found (after its
  own, if any), hubs left out."""

  def __init__(self):
    self.found = beam_jobs.counter(C.TITLE_LINKS_FOUND)
    self.one_word = beam_jobs.counter(C.TITLE_LINKS_ONE_WORD)
    self.multi_word = beam_jobs.counter(C.TITLE_LINKS_MULTI_WORD)
    self.hub = beam_jobs.counter(C.TITLE_LINKS_HUB)
    self.via_alias = beam_jobs.counter(C.TITLE_LINKS_VIA_ALIAS)

  def process(self, element, hubs):
    space, (page, entries) = element
    drop = hubs.get(space, frozenset())
    links = dict.fromkeys(page.links)
    for entry in entries:
      if entry.target in drop:
        self.hub.inc()
        continue
      if entry.link not in links:
        links[entry.link] = None
        self.found.inc()
        self.via_alias.inc(entry.alias)
        words = len(tokens(_QUALIFIER.sub(r"\1", entry.target)))
        (self.one_word if words == 1 else self.multi_word).inc()
    yield dataclasses.replace(page, links=tuple(links))


def _case_counts(element, words: dict[int, frozenset[str]]):
  """(space, Page) -> ((space, (word, is lower)), n) for its one-word titles."""
  space, page = element
  for key, n in word_case_counts(page, words[space]).items():
    yield (space, key), n


def _build_indexes(element, config: TitleLinkConfig):
  """(space, {"titles": [title], "redirects": [(source, target)]}) -> (space, TitleIndex)."""
  space, groups = element
  return space, TitleIndex.build(groups["titles"], groups["redirects"], config)


class _DropCommonFn(beam.DoFn):
  """(space, {"index": [TitleIndex], "counts": [((word, is lower), n)]}) -> (space, the index
  less the one-word titles the space's text mostly writes in lower case)."""

  def __init__(self, config: TitleLinkConfig):
    self.config = config
    self.common = beam_jobs.counter(C.TITLE_LINKS_COMMON_WORDS)

  def process(self, element):
    space, groups = element
    total: collections.Counter = collections.Counter()
    for key, n in groups["counts"]:
      total[key] += n
    common = common_words(total, self.config)
    self.common.inc(len(common))
    for index in groups["index"]:
      yield space, index.without(common)


def _hubs(element, config: TitleLinkConfig):
  """(space, {"targets": [(target, pages)], "pages": [n]}) -> (space, frozenset of hubs)."""
  space, groups = element
  return space, frozenset(hub_targets(dict(groups["targets"]), sum(groups["pages"]), config))


class RecoverTitleLinks(beam.PTransform):
  """{"articles": PCollection[Page], "redirects": PCollection[(source, target) or (id space,
  source, target)]} -> PCollection[Page], every article, those searched with `links` = the
  titles found in their text (first mention first; see the module docstring).

  Put it before pipelines.wiki.links.ResolveLinks, on the same two inputs: its output is that
  transform's "articles". `own_title_spaces` as ResolveLinks takes it: a page's titles are
  looked up in its own wiki's titles.
  """

  def __init__(self, config: TitleLinkConfig = TitleLinkConfig(),
               own_title_spaces: frozenset[int] = frozenset()):
    super().__init__()
    self.config = config
    self.own = frozenset(own_title_spaces)

  def expand(self, inputs):
    articles, redirects = inputs["articles"], inputs["redirects"]
    config, own = self.config, self.own
    # (space, TitleIndex): every title and redirect of a space, in one worker
    titles = (articles
              | "NoDisambiguation" >> beam.ParDo(_TargetFn())
              | "KeyTitles" >> beam.Map(lambda p: (_space_of(p.page_id, own), p.title)))
    scoped = redirects | "ScopeRedirects" >> beam.Map(_scoped_redirect)
    indexes = ({"titles": titles, "redirects": scoped}
               | "GroupTitles" >> beam.CoGroupByKey()
               | "BuildIndex" >> beam.Map(_build_indexes, config))
    # (space, Page) to search; tagged "kept": Page with its own links
    routed = articles | "Route" >> beam.ParDo(_RouteFn(config, own)).with_outputs(
        "kept", main="search")
    search = routed.search
    if config.max_lowercase_share < 1:
      # ((space, (word, is lower)), n): how the searched text writes each one-word title
      words = beam.pvalue.AsDict(indexes | "OneWordTitles" >> beam.MapTuple(
          lambda space, index: (space, index.one_word())))
      counts = (search
                | "CountWordCase" >> beam.FlatMap(_case_counts, words)
                | "SumWordCase" >> beam.CombinePerKey(sum)
                | "BySpace" >> beam.MapTuple(lambda sk, n: (sk[0], (sk[1], n))))
      # (space, TitleIndex without the common words)
      indexes = ({"index": indexes, "counts": counts}
                 | "GroupWordCase" >> beam.CoGroupByKey()
                 | "DropCommonWords" >> beam.ParDo(_DropCommonFn(config)))
    # (space, (Page, Entries))
    found = search | "FindTitles" >> beam.ParDo(_FindFn(), beam.pvalue.AsDict(indexes))
    # (space, hub targets): targets on too many of the space's searched pages
    targets = (found
               | "Targets" >> beam.FlatMapTuple(
                   lambda space, pe: ((space, e.target) for e in pe[1]))
               | "PagesPerTarget" >> beam.combiners.Count.PerElement()
               | "TargetBySpace" >> beam.MapTuple(lambda st, n: (st[0], (st[1], n))))
    pages = (search | "PageSpace" >> beam.MapTuple(lambda space, _: (space, 1))
             | "PagesPerSpace" >> beam.CombinePerKey(sum))
    hubs = ({"targets": targets, "pages": pages}
            | "GroupTargets" >> beam.CoGroupByKey()
            | "Hubs" >> beam.Map(_hubs, config))
    linked = found | "Link" >> beam.ParDo(_LinkFn(), beam.pvalue.AsDict(hubs))
    return (linked, routed.kept) | "AllPages" >> beam.Flatten()
