"""RawPage -> Page, and the one decision made for every page of a dump (pipelines.wiki.wikitext
cleans the markup).

`parse_page` turns an article's wikitext into a Page; with `ParseConfig.text_cleanup`
(`--text_cleanup`, the default) content templates are rendered and non-prose sections and
disambiguation pages left out (pipelines.wiki.templates, nonprose); off, every template is dropped
and every section and page kept: the text of before, for comparisons.

Beam: `ParsePages` routes every RawPage to exactly one of: the `articles` output, the
`redirects` output (counted `pages_redirect`) or one `pages_skipped_<reason>` counter
(`disambiguation` among them).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterator, Optional

import apache_beam as beam

from twotower.core.contracts import ARTICLE_NAMESPACE, Page, RawPage, Section, SiteInfo
from twotower.core.contracts import counters as C
from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.wiki import nonprose, titles
from twotower.pipelines.wiki.wikitext import MAX_NESTING, clean_wikitext, drop_deep_nesting, paragraphs

logger = logging.getLogger(__name__)

#: Default limit on a page's wikitext, in UTF-8 bytes (enwiki's own limit is 2 MiB).
DEFAULT_MAX_PAGE_BYTES = 5_000_000


def parse_page(raw: RawPage, config: Optional["ParseConfig"] = None,
               counts: Optional[dict[str, int]] = None) -> Page:
  """RawPage (namespace 0, not a redirect) -> Page; raises ParseError on tokenizer failure.

  `Page.title` is the normalised title (pipelines.wiki.titles), the key links resolve against.
  With `config.text_cleanup` (the default), content templates are rendered and non-prose
  sections (pipelines.wiki.nonprose) left out, each counted in `counts` as
  `sections_skipped_<reason>` (their subsections with them, uncounted); a disambiguation
  page gets `counts["disambiguation"] = 1`.

  The Page may have no paragraph at all (`is_empty`); ParsePages counts those.
  """
  cleanup = (config or ParseConfig()).text_cleanup
  sections, links, disambiguation = clean_wikitext(raw.text, raw.site, render=cleanup)
  kept = []
  skip_below = 0  # Inside a dropped section: the level whose headings end it; 0 = none.
  for heading, level, text in sections:
    if skip_below and level > skip_below:
      continue
    skip_below = 0
    reason = nonprose.section_reason(heading) if cleanup and level else None
    if reason is not None:
      skip_below = level
      if counts is not None:
        name = C.sections_skipped(reason)
        counts[name] = counts.get(name, 0) + 1
      continue
    kept.append(Section(heading=heading, level=level, paragraphs=tuple(paragraphs(text))))
  if cleanup and counts is not None and (
      disambiguation or nonprose.is_disambiguation_title(raw.title)):
    counts["disambiguation"] = 1
  return Page(
      page_id=raw.page_id,
      # A dump's titles are canonical already; normalising makes them equal, as join keys,
      # to link targets and redirect titles in every case (e.g. Unicode normal forms).
      title=titles.normalize_title(raw.title, raw.site) or raw.title,
      sections=tuple(kept),
      links=tuple(links),
      source=raw.source)


def is_empty(page: Page) -> bool:
  return not any(section.paragraphs for section in page.sections)


@dataclasses.dataclass(frozen=True)
class ParseConfig:
  """How ParsePages treats pages.

  Attributes:
    max_page_bytes: pages whose wikitext is longer (UTF-8 bytes) are skipped and counted
      `pages_skipped_too_large` (guards a worker against a giant page).
    text_cleanup: render content templates, leave out non-prose sections and disambiguation
      pages (pipelines.wiki.templates, nonprose); False gives the text of before (every template
      dropped, every section kept), for comparisons (`--text_cleanup=off`).
  """
  max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES
  text_cleanup: bool = True


def route_page(raw: RawPage, config: ParseConfig = ParseConfig(),
               counts: Optional[dict[str, int]] = None) -> tuple[str, object]:
  """The one decision ParsePages makes for a RawPage, as (kind, value):

  ("article", Page) | ("redirect", (source_title, target_title)) |
  ("skip", (reason, detail)) with reason the suffix of a `pages_skipped_<reason>` counter.
  `counts`, when given, receives the `sections_skipped_<reason>` counts of a kept page.
  """
  namespaces = raw.site.namespace_names()
  if raw.namespace not in namespaces:
    return ("skip", (C.PageSkip.UNKNOWN_NAMESPACE, f"namespace {raw.namespace} is not in siteinfo"))
  if raw.namespace != ARTICLE_NAMESPACE:
    return ("skip", (C.PageSkip.NAMESPACE, ""))
  if raw.redirect_title is not None:
    source = titles.normalize_title(raw.title, raw.site)
    target = titles.normalize_title(raw.redirect_title, raw.site)
    if source is None or target is None:
      return ("skip", (C.PageSkip.BAD_REDIRECT, f"redirect to {raw.redirect_title!r}"))
    return ("redirect", (source, target))
  text = raw.text
  if len(text) > config.max_page_bytes or (
      len(text) * 4 > config.max_page_bytes
      and len(text.encode("utf-8")) > config.max_page_bytes):
    return ("skip", (C.PageSkip.TOO_LARGE, f"{len(text.encode('utf-8'))} bytes > "
                                   f"{config.max_page_bytes}"))
  page_counts: dict[str, int] = {}
  try:
    page = parse_page(raw, config, page_counts)
  except Exception as e:  # pylint: disable=broad-except  # One page never stops the run.
    return ("skip", (C.PageSkip.PARSE_ERROR, f"{type(e).__name__}: {e}"))
  if page_counts.pop("disambiguation", 0):
    return ("skip", (C.PageSkip.DISAMBIGUATION, ""))
  if counts is not None:
    for name, value in page_counts.items():
      counts[name] = counts.get(name, 0) + value
  if is_empty(page):
    return ("skip", (C.PageSkip.EMPTY, "no text left after cleaning"))
  return ("article", page)


class _ParsePageFn(beam.DoFn):
  """RawPage -> Page (main output) | TaggedOutput("redirects", (source, target))."""

  def __init__(self, config: ParseConfig):
    self._config = config
    self._counters: dict = {}
    self._sites: dict[SiteInfo, SiteInfo] = {}

  def _count(self, name: str, value: int = 1) -> None:
    counter = self._counters.get(name)
    if counter is None:
      counter = self._counters[name] = beam_jobs.counter(name)
    counter.inc(value)

  def _skip(self, reason: str, raw: RawPage, detail: str = "") -> None:
    self._count(C.pages_skipped(reason))
    logger.warning("%s: skipping page id=%d title=%r (%s)%s", raw.source, raw.page_id,
                   raw.title, reason, f": {detail}" if detail else "")

  def process(self, raw: RawPage) -> Iterator:
    # A page that crossed a shuffle carries its own copy of the dump's SiteInfo, and the title
    # caches (pipelines.wiki.titles) would keep one copy per page they miss on (~5 KB each): one
    # shared copy per worker instead.
    site = self._sites.setdefault(raw.site, raw.site)
    if site is not raw.site:
      raw = dataclasses.replace(raw, site=site)
    if raw.namespace == ARTICLE_NAMESPACE and raw.redirect_title is None:
      text, dropped = drop_deep_nesting(raw.text)  # (clean_wikitext's own call is then a no-op)
      if dropped:
        self._count(C.MARKUP_TOO_DEEP, dropped)
        logger.warning("%s: page id=%d title=%r: %d template(s) or link(s) nested deeper than "
                       "%d dropped", raw.source, raw.page_id, raw.title, dropped, MAX_NESTING)
        raw = dataclasses.replace(raw, text=text)
    counts: dict[str, int] = {}
    kind, value = route_page(raw, self._config, counts)
    for name, n in counts.items():
      self._count(name, n)
    if kind == "article":
      yield value
    elif kind == "redirect":
      self._count(C.PAGES_REDIRECT)
      yield beam.pvalue.TaggedOutput(ParsePages.REDIRECTS, value)
    else:
      reason, detail = value
      if reason in (C.PageSkip.NAMESPACE, C.PageSkip.DISAMBIGUATION):
        self._count(C.pages_skipped(reason))  # Expected: no log line per page.
      else:
        self._skip(reason, raw, detail)


class ParsePages(beam.PTransform):
  """PCollection[RawPage] -> articles: PCollection[Page], redirects: PCollection[(str, str)].

  Every RawPage goes to exactly one of: `articles` (namespace 0, not a redirect, some text
  left after cleaning), `redirects` (namespace-0 redirect pages, as (source title, target
  title), both normalised by pipelines.wiki.titles; counted `pages_redirect`), or one
  `pages_skipped_<reason>` counter: `namespace` (another namespace), `unknown_namespace`
  (not in siteinfo), `bad_redirect` (invalid source or target title), `too_large`,
  `parse_error`, `empty`, `disambiguation`. Non-prose sections of kept pages are counted
  `sections_skipped_<reason>`.

  Usage:
    outputs = raw_pages | ParsePages()
    articles, redirects = outputs.articles, outputs.redirects
  """

  ARTICLES = "articles"
  REDIRECTS = "redirects"

  def __init__(self, max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES, text_cleanup: bool = True):
    super().__init__()
    self._config = ParseConfig(max_page_bytes=max_page_bytes, text_cleanup=text_cleanup)

  def expand(self, raw_pages):
    # articles: Page; redirects: (source_title, target_title).
    return raw_pages | "ParsePage" >> beam.ParDo(_ParsePageFn(self._config)).with_outputs(
        self.REDIRECTS, main=self.ARTICLES)
