"""Resolve `[[link]]` targets to page ids with Beam joins only (CoGroupByKey).

No worker ever holds a title -> id dict or a side input: every step is a join by title, so
the stage scales with the runner, not with one machine's memory.

    articles (Page) --DedupeTitles--> kept pages, (title, page_id)
    redirects (source, target) --FollowRedirects x hops--> (source, Resolution)
    (title, page_id) + (source, Resolution) = resolution table by title
    links (target_title, linking_page_id) --JoinTable--> (target_id, linking_id) inlinks

Redirect chains are followed on the (small) redirect table, not on the links: one round per
hop, each a join of the chains still open against article titles and redirect sources. A
chain that comes back to a title it passed is a loop; one still open after `max_hops` rounds
is too deep. Links to either are counted and dropped.

Titles resolve within their wiki: every join key is (title space, title). A page's title
space is its id space (pipelines.wiki.inputs.id_space) when that is one of `own_title_spaces`
(the wikis after the first of a run), else 0 (the first wiki, and extracted text, which
resolves against it as before). So with `--dump enwiki,ltgwiki` an English link never
reaches a Latgalian page, and an English and a Latgalian article of one title are both
kept. Redirects come as (source, target) of space 0 or as (id space, source, target).

Titles to leave out (`"excluded_titles"`, the QA articles of `--exclude_qa`:
pipelines.wiki.qa_exclusion) join the pages in the same title join; every page of such a title
is left out of "pages" (`pages_skipped_qa_article`) but its title still resolves (to the page
id it would have kept): a link to a left-out page is resolved, not unresolved, and finds no
passage to pair with. The left-out page's own links are not counted (it is not kept).

Accounting (stats.json):
  pages: every article ends as `pages_kept`, `pages_skipped_duplicate_title` (two articles
    of one input with one normalised title: the smallest page id wins, the others are
    logged) or `pages_skipped_qa_article`. With `count_kept=False` the pages are counted
    kept by the stage after this one (qa_exclusion.DropQaParagraphPages, which leaves out
    some more).
  links: links_total = links_resolved + links_unresolved + links_redirect_loop, where
    links_unresolved includes links_redirect_too_deep and links_redirect_dangling (a redirect
    to a missing page); links_via_redirect and links_self
    (a page linking to itself, dropped from the inlinks) are parts of links_resolved;
    links_duplicate counts resolved links of one page that reach a target it already links to.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import apache_beam as beam

from twotower.core.contracts import counters as C
from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.wiki import inputs as inputs_lib
from twotower.pipelines.shared import shuffle as shuffle_lib

logger = logging.getLogger(__name__)

DEFAULT_MAX_HOPS = 5


class Resolution(NamedTuple):
  """What a title resolves to: a page id (`hops` redirects away), or a failure `status`."""
  page_id: int = -1
  hops: int = 0
  status: str = "ok"  # "ok" | "loop" | "too_deep" | "dangling"


class _Chain(NamedTuple):
  """An open redirect chain: started at `source`, passed `path`, now at the join key."""
  source: str
  path: tuple[str, ...]


def _title_key(page_id: int, title: str, own: frozenset[int]) -> tuple[int, str]:
  """The join key of a title seen on page `page_id`: (its title space, the title)."""
  space = inputs_lib.id_space(page_id)
  return (space if space in own else 0), title


def _scoped_redirect(redirect: tuple) -> tuple[tuple[int, str], tuple[int, str]]:
  """(source, target) of the first id space, or (space, source, target) -> their keys."""
  space, source, target = (0, *redirect) if len(redirect) == 2 else redirect
  return (space, source), (space, target)


class _DedupeTitles(beam.DoFn):
  """(title key, [Page, ...]) -> kept Page (main) and (title key, page_id) (tagged "ids").

  With titles to leave out, the element is (title key, {"pages": [Page, ...], "excluded":
  [True, ...]}): a title in "excluded" keeps no page (each counted
  `pages_skipped_qa_article`), and still gives its id for link resolution."""

  def __init__(self, count_kept: bool = True):
    self.count_kept = count_kept
    self.kept = beam_jobs.counter(C.PAGES_KEPT)
    self.duplicate = beam_jobs.counter(C.pages_skipped(C.PageSkip.DUPLICATE_TITLE))
    self.excluded = beam_jobs.counter(C.pages_skipped(C.PageSkip.QA_ARTICLE))

  def process(self, element):
    title, pages = element
    excluded = False
    if isinstance(pages, dict):  # joined with the titles to leave out
      pages, excluded = pages["pages"], bool(list(pages["excluded"]))
    pages = sorted(pages, key=lambda p: p.page_id)
    if not pages:  # a title to leave out that no page has
      return
    winner = pages[0]
    yield beam.pvalue.TaggedOutput("ids", (title, winner.page_id))
    if excluded:
      self.excluded.inc(len(pages))
      # Asked for (--exclude_qa), and one per QA article: not a warning.
      logger.info("leaving out page(s) %s (%s): %r is a QA article's title, or where a "
                  "redirect from one leads", [p.page_id for p in pages],
                  ", ".join(sorted({p.source for p in pages})), title[1])
      return
    if len(pages) > 1:
      self.duplicate.inc(len(pages) - 1)
      logger.warning("duplicate title %r: keeping page %d, skipping %s (%s)", title[1],
                     winner.page_id, [p.page_id for p in pages[1:]],
                     ", ".join(sorted({p.source for p in pages})))
    if self.count_kept:
      self.kept.inc()
    yield winner


def _follow(element, max_hops: int, last_round: bool):
  """One hop of every open chain at title `key`.

  element: (key, {"chains": [_Chain], "ids": [page_id], "next": [redirect target]}).
  Yields ("done", (source, Resolution)) or ("open", (next_title, _Chain)).
  """
  key, groups = element
  ids, targets = sorted(groups["ids"]), sorted(groups["next"])
  for chain in groups["chains"]:
    hops = len(chain.path)
    if ids:
      yield beam.pvalue.TaggedOutput("done", (chain.source, Resolution(ids[0], hops)))
    elif not targets:
      yield beam.pvalue.TaggedOutput("done", (chain.source, Resolution(status="dangling")))
    elif targets[0] in chain.path or targets[0] == key:
      yield beam.pvalue.TaggedOutput("done", (chain.source, Resolution(status="loop")))
    elif last_round:
      yield beam.pvalue.TaggedOutput("done", (chain.source, Resolution(status="too_deep")))
    else:
      yield beam.pvalue.TaggedOutput("open", (targets[0], _Chain(chain.source,
                                                                 chain.path + (key,))))


class _ResolveLinksFn(beam.DoFn):
  """(title key, {"links": [linking_id], "table": [Resolution]}) -> (target_id, (linking_id,
  title)) for each resolved link."""

  def __init__(self):
    self.counters = {name: beam_jobs.counter(name) for name in (
        C.LINKS_TOTAL, C.LINKS_RESOLVED, C.LINKS_UNRESOLVED, C.LINKS_REDIRECT_LOOP,
        C.LINKS_REDIRECT_TOO_DEEP, C.LINKS_REDIRECT_DANGLING, C.LINKS_VIA_REDIRECT, C.LINKS_SELF)}
    self.failures = {"dangling": self.counters[C.LINKS_REDIRECT_DANGLING],
                     "too_deep": self.counters[C.LINKS_REDIRECT_TOO_DEEP]}

  def process(self, element):
    title, groups = element
    links, table = list(groups["links"]), list(groups["table"])
    self.counters[C.LINKS_TOTAL].inc(len(links))
    if not links:
      return
    # An article title wins over a redirect of the same name; among equals the lowest id.
    best = min(table, key=lambda r: (r.status != "ok", r.hops, r.page_id), default=None)
    if best is None or best.status in ("dangling", "too_deep"):
      self.counters[C.LINKS_UNRESOLVED].inc(len(links))
      if best is not None:
        self.failures[best.status].inc(len(links))
      return
    if best.status == "loop":
      self.counters[C.LINKS_REDIRECT_LOOP].inc(len(links))
      return
    self.counters[C.LINKS_RESOLVED].inc(len(links))
    if best.hops:
      self.counters[C.LINKS_VIA_REDIRECT].inc(len(links))
    for linking_id in links:
      if linking_id == best.page_id:
        self.counters[C.LINKS_SELF].inc()
        continue
      yield best.page_id, (linking_id, title[1])


class _DedupeInlinks(beam.DoFn):
  """((target_id, linking_id), [title, ...]) -> (target_id, (linking_id, link_titles))."""

  def __init__(self):
    self.duplicate = beam_jobs.counter(C.LINKS_DUPLICATE)

  def process(self, element):
    (target_id, linking_id), titles = element
    titles = sorted(set(titles))
    self.duplicate.inc(len(titles) - 1)
    yield target_id, (linking_id, tuple(titles))


class ResolveLinks(beam.PTransform):
  """{"articles": PCollection[Page], "redirects": PCollection[(source, target) or (id space,
  source, target)]} ->
  {"pages": PCollection[Page] (unique titles), "inlinks": PCollection[(target_id,
  (linking_id, link_titles))] (one per linked page pair, self-links dropped)}.

  An optional input "excluded_titles": PCollection[title key] names titles whose pages are
  left out of "pages" (the module docstring). Titles in every input are already normalised
  (pipelines.wiki.titles). Every grouping goes through `shuffle` (Beam's GroupByKey, or files
  on the local runner: pipelines.shared.shuffle). `count_kept=False`: pages_kept is counted
  by the caller, after a filter of its own.
  """

  def __init__(self, max_hops: int = DEFAULT_MAX_HOPS,
               shuffle: shuffle_lib.Shuffle = shuffle_lib.Shuffle(),
               own_title_spaces: frozenset[int] = frozenset(), count_kept: bool = True):
    super().__init__()
    if max_hops < 1:
      raise ValueError(f"max_hops must be >= 1, got {max_hops}")
    self.max_hops = max_hops
    self.shuffle = shuffle
    self.own = frozenset(own_title_spaces)
    self.count_kept = count_kept

  def expand(self, inputs):
    articles, redirects = inputs["articles"], inputs["redirects"]
    own = self.own

    # (title key, Page)
    keyed = articles | "KeyByTitle" >> beam.Map(lambda page: (
        _title_key(page.page_id, page.title, own), page))
    if "excluded_titles" in inputs:
      # (title key, {"pages": [Page], "excluded": [True]})
      grouped = ({"pages": keyed, "excluded": inputs["excluded_titles"]
                  | "MarkExcluded" >> beam.Map(lambda key: (key, True))}
                 | "GroupByTitle" >> shuffle_lib.CoGroupByKey(self.shuffle))
    else:
      # (title key, [Page])
      grouped = keyed | "GroupByTitle" >> shuffle_lib.GroupByKey(self.shuffle)
    # kept Page, tagged "ids": (title key, page_id)
    deduped = grouped | "DedupeTitles" >> beam.ParDo(
        _DedupeTitles(self.count_kept)).with_outputs("ids", main="pages")
    pages, ids = deduped.pages, deduped.ids

    # (source, target): one target per source (the smallest, should a dump disagree)
    redirect_next = (redirects
                     | "ScopeRedirects" >> beam.Map(_scoped_redirect)
                     | "GroupRedirects" >> shuffle_lib.GroupByKey(self.shuffle)
                     | "OneTargetPerSource" >> beam.MapTuple(lambda s, ts: (s, min(ts))))

    # Open chains, keyed by the title they are at: (title, _Chain)
    open_chains = redirect_next | "StartChains" >> beam.MapTuple(
        lambda source, target: (target, _Chain(source, (source,))))
    done = []
    for hop in range(1, self.max_hops + 1):
      # (title, {"chains": [_Chain], "ids": [page_id], "next": [target]})
      stepped = ({"chains": open_chains, "ids": ids, "next": redirect_next}
                 | f"JoinHop{hop}" >> shuffle_lib.CoGroupByKey(self.shuffle)
                 | f"FollowHop{hop}" >> beam.FlatMap(
                     _follow, self.max_hops, hop == self.max_hops).with_outputs("done", "open"))
      done.append(stepped.done)  # (source, Resolution)
      open_chains = stepped.open
    # (title, Resolution): articles first-class, redirects by their chain's end; the join
    # takes them as one "table" input ("table:<n>" names)
    table = {"table": ids | "ArticleResolution" >> beam.MapTuple(
        lambda t, i: (t, Resolution(i, 0)))}
    table.update({f"table:{hop}": chains for hop, chains in enumerate(done, 1)})

    # (target title key, linking_id)
    links = pages | "Links" >> beam.FlatMap(
        lambda page: ((_title_key(page.page_id, target, own), page.page_id)
                      for target in page.links))
    # (target_id, (linking_id, link_title))
    resolved = ({"links": links, **table}
                | "JoinLinks" >> shuffle_lib.CoGroupByKey(self.shuffle)
                | "ResolveTargets" >> beam.ParDo(_ResolveLinksFn()))
    inlinks = (resolved
               | "KeyByEdge" >> beam.MapTuple(lambda t, v: ((t, v[0]), v[1]))
               | "GroupEdges" >> shuffle_lib.GroupByKey(self.shuffle)
               | "DedupeInlinks" >> beam.ParDo(_DedupeInlinks()))
    return {"pages": pages, "inlinks": inlinks}
