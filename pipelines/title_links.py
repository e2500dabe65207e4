"""Links for text without links: recover `[[link]]` targets by finding other pages' titles
(and redirects) in a page's text, so that WLP has pairs on extracted text (WikiExtractor
output has no links).

    articles (Page) + redirects --BuildIndex (once, a side input)--> TitleIndex per title space
    articles --CountWordCase--> one-word titles that the corpus mostly writes in lower case
    articles --RecoverLinks--> Page with `links` = the titles found in its text

The output is the input of pipelines.links.ResolveLinks, as parsed dump pages are: `links`
holds normalised titles (an article's, or a redirect's name when a redirect matched), so
redirects, self links, duplicate titles and WLP work as for real links, unchanged.

Matching (`TitleIndex.find`): text and titles are split into the same tokens (runs of word
characters, and every other non-space character alone), so a match is whole words. At every
token the longest title starting there wins and its tokens are consumed (leftmost-longest:
"New York City" hides "New York" and "York"); a page links each target once, at its first
mention, within one paragraph (a title never spans two). The rules that make it precise,
each measured against the real links of the English slice and ltgwiki
(benchmarks/link_recovery.py; README of the benchmark for the numbers):

* Case: a title matches as written (MediaWiki titles are case-sensitive after the first
  letter); a title of several words also with its first letter in lower case ("political
  philosophy" for "Political philosophy"), as running text writes a common noun phrase.
* The page's own title (and every alias of it) is matched but never linked, so that it
  hides the titles inside it.
* One-word titles: skipped when the corpus writes the word mostly in lower case
  (`max_lowercase_share`, counted over all pages: "Art", "Atom", "April" are common words;
  "Aristotle", "Paris" are not), when shorter than `min_word_chars`, when only digits and
  punctuation (years), or when in the small list of English function words below.
* Qualifiers (`strip_qualifiers`, off by default): "Mercury (planet)" is also found as
  "Mercury", unless that name is itself a title or a redirect, or is the stripped name of
  another title (ambiguous).
* Hubs: a target found on too many pages (`max_target_share`) is left out.
* Disambiguation pages are never targets.
* Redirects are aliases of their final target (chains followed, dangling ones dropped).

Memory: the index holds every title and redirect of a title space as token tuples
(measured in the benchmark: about 40 MB for the 96k titles of the WikiExtractor corpus), as
a side input: fine for a corpus of that size, not for all of English Wikipedia's 17M titles
and redirects (ResolveLinks' joins are what scale there).

Counters (stats.json): title_links_pages (pages searched), title_links_pages_with_links
(pages that kept their own links, not searched), title_links_found (links recovered; of
which title_links_one_word, title_links_multi_word, title_links_via_alias: a redirect or a
stripped qualifier), title_links_own_title (mentions of the page's own title, not linked),
title_links_common_words (one-word titles left out as common words), title_links_hub
(links found but left out: their target is on too many pages, `max_target_share`).
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Iterable, Iterator, NamedTuple, Optional

import apache_beam as beam

from twotower import io as tio
from twotower.contracts import Page
from twotower.contracts import counters as C
from twotower.pipelines import inputs as inputs_lib
from twotower.pipelines import nonprose

#: Words and single other characters; whitespace separates and is not a token.
_TOKEN = re.compile(r"\w+|[^\w\s]")
_QUALIFIER = re.compile(r"^(.+?) \([^()]+\)$")
_NUMERIC = re.compile(r"^[\W\d_]+$")

#: English function words that are also article titles ("The", "It", "Who", "This", ...):
#: never linked as one-word titles, whatever their case counts say (a sentence starts with
#: them, capitalised).
STOP_WORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before
being below between both but by can could did do does doing down during each few for from
further had has have having he her here hers herself him himself his how i if in into is it
its itself just me more most my myself no nor not now of off on once only or other our ours
out over own same she should so some such than that the their theirs them then there these
they this those through to too under until up very was we were what when where which while
who whom why will with would you your yours yourself
""".split())


@dataclasses.dataclass(frozen=True)
class TitleLinkConfig:
  """How titles are found in text (see the module docstring for why each rule is there).

  Attributes:
    only_unlinked: search only pages without links of their own (extracted text); False
      also adds title mentions to pages of a dump (their real links are kept first).
    lower_first_multiword: a title of several words also matches with its first letter in
      lower case.
    min_word_chars: one-word titles shorter than this are never matched (but acronyms of
      two capitals or more).
    max_lowercase_share: a one-word title is a common word, not matched, when more than this
      share of the word's occurrences in the corpus are in lower case (1.0: never).
    strip_qualifiers: "Name (qualifier)" is also matched as "Name" where unambiguous among
      the titles. Off by default: on the slice and ltgwiki it adds only wrong links, and in
      a partial corpus a qualifier says the plain name means something else in the world
      ("English (2018 film)" made "English" a link on 1 page in 12 of the WikiExtractor
      corpus).
    max_redirect_hops: redirect chains longer than this are dropped.
    max_target_share, min_hub_pages: a target found on more than this share of the searched
      pages, and on more than `min_hub_pages`, is a hub ("Asia", a country): mentioned far
      more often than linked (Wikipedia does not link well-known places), so not linked;
      WLP samples only `wlp_per_page` linking pages of a target anyway.
    skip_name_parts: a one-word title next to another capitalised word or a number is part
      of a longer name ("Apollo" in "Apollo 11"), not matched.
  """
  only_unlinked: bool = True
  lower_first_multiword: bool = True
  min_word_chars: int = 3
  max_lowercase_share: float = 0.2
  strip_qualifiers: bool = False
  max_redirect_hops: int = 5
  skip_name_parts: bool = True
  max_target_share: float = 0.02
  min_hub_pages: int = 20
  stop_words: frozenset[str] = STOP_WORDS

  def __post_init__(self):
    if not 0 <= self.max_lowercase_share <= 1:
      raise ValueError(f"max_lowercase_share must be in [0, 1], got {self.max_lowercase_share}")
    if not 0 < self.max_target_share <= 1:
      raise ValueError(f"max_target_share must be in (0, 1], got {self.max_target_share}")
    if self.min_word_chars < 1:
      raise ValueError(f"min_word_chars must be >= 1, got {self.min_word_chars}")


#: The naive probe of issue 37 (whole words, case-sensitive, longest title first, redirects as
#: aliases): the baseline of the benchmark.
NAIVE = TitleLinkConfig(only_unlinked=False, lower_first_multiword=False, min_word_chars=1,
                        max_lowercase_share=1.0, strip_qualifiers=False, skip_name_parts=False,
                        max_target_share=1.0, stop_words=frozenset())


def tokens(text: str) -> list[str]:
  return _TOKEN.findall(text)


class Entry(NamedTuple):
  """What a token sequence names: `link` (the title to emit: an article's, a redirect's, or
  the article's for a stripped qualifier), `target` (the article it reaches), and whether it
  is an alias (a redirect, a stripped qualifier) rather than the article's own title."""
  link: str
  target: str
  alias: bool = False


class TitleIndex:
  """Token sequences of titles and aliases -> Entry, for leftmost-longest matching.

  `phrases` maps a token tuple to its Entry; `longest` maps a first token to the length of
  the longest phrase starting with it, so that a position whose token starts no title costs
  one dict look-up.
  """

  def __init__(self, phrases: dict[tuple[str, ...], Entry], name_parts: bool = True):
    self.phrases = phrases
    self.name_parts = name_parts
    self.longest: dict[str, int] = {}
    for key in phrases:
      if len(key) > self.longest.get(key[0], 0):
        self.longest[key[0]] = len(key)

  @classmethod
  def build(cls, titles: Iterable[str], redirects: Iterable[tuple[str, str]],
            config: TitleLinkConfig = TitleLinkConfig()) -> "TitleIndex":
    """The index of one title space's article titles and (source, target) redirects."""
    articles = {t for t in titles if not nonprose.is_disambiguation_title(t)}
    redirect_next = {}
    for source, target in sorted(redirects):
      redirect_next.setdefault(source, target)
    names: dict[str, Entry] = {t: Entry(t, t) for t in articles}
    for source in redirect_next:
      target = _follow(source, redirect_next, articles, config.max_redirect_hops)
      if target is not None and source not in articles:
        names[source] = Entry(source, target, True)
    if config.strip_qualifiers:
      stripped: dict[str, list[str]] = collections.defaultdict(list)
      for title in articles:
        match = _QUALIFIER.match(title)
        if match:
          stripped[match.group(1)].append(title)
      for name, owners in stripped.items():
        if len(owners) == 1 and name not in names:
          names[name] = Entry(owners[0], owners[0], True)
    phrases: dict[tuple[str, ...], Entry] = {}
    for name, entry in sorted(names.items()):
      key = tuple(tokens(name))
      if not key or not _usable(key, config):
        continue
      phrases.setdefault(key, entry)
      if len(key) > 1 and config.lower_first_multiword and key[0][:1].isupper():
        lower = (key[0][:1].lower() + key[0][1:],) + key[1:]
        phrases.setdefault(lower, entry)
    return cls(phrases, config.skip_name_parts)

  def one_word(self) -> frozenset[str]:
    return frozenset(key[0] for key in self.phrases if len(key) == 1)

  def without(self, words: Iterable[str]) -> "TitleIndex":
    """This index less the one-word phrases `words` (the corpus's common words)."""
    drop = {(w,) for w in words}
    return TitleIndex({k: v for k, v in self.phrases.items() if k not in drop}, self.name_parts)

  def find(self, page: Page) -> Iterator[tuple[Entry, int]]:
    """(Entry, tokens matched) of every leftmost-longest match in the page's paragraphs,
    the page's own title and aliases included (the caller drops them), in text order."""
    longest, phrases = self.longest, self.phrases
    for section in page.sections:
      for paragraph in section.paragraphs:
        toks = tokens(paragraph)
        i, n = 0, len(toks)
        while i < n:
          most = longest.get(toks[i])
          if most:
            for length in range(min(most, n - i), 0, -1):
              entry = phrases.get(tuple(toks[i:i + length]))
              if entry is not None:
                if length > 1 or not (self.name_parts and _inside_name(toks, i)):
                  yield entry, length
                i += length
                break
            else:
              i += 1
          else:
            i += 1


def _follow(source: str, redirect_next: dict[str, str], articles: set[str],
            max_hops: int) -> Optional[str]:
  """The article a redirect reaches, None for a dangling, looping or too deep chain."""
  seen, title = {source}, redirect_next[source]
  for _ in range(max_hops):
    if title in articles:
      return title
    if title in seen or title not in redirect_next:
      return None
    seen.add(title)
    title = redirect_next[title]
  return None


#: Tokens after which a capitalised word may be a sentence's (or a quotation's) first word.
_OPENERS = frozenset('.!?:;"\'(“‘«[')


def _is_name_word(token: str) -> bool:
  return token[:1].isupper() or token[:1].isdigit()


def _inside_name(toks: list[str], i: int) -> bool:
  """Whether the one-word match at `i` is part of a longer capitalised name that is no title
  ("Apollo" in "Apollo 11", "Mexico" in "New Mexico"): the next token is a capitalised word
  or a number, or the previous one is a capitalised word that does not start a sentence."""
  if i + 1 < len(toks) and _is_name_word(toks[i + 1]):
    return True
  return (i > 0 and toks[i - 1][:1].isupper() and i > 1 and toks[i - 2] not in _OPENERS)


def _usable(key: tuple[str, ...], config: TitleLinkConfig) -> bool:
  """Whether a title's tokens may be matched at all (one-word rules; see the module doc)."""
  if len(key) > 1:
    return any(t[:1].isalnum() for t in key)
  word = key[0]
  # An acronym of two capitals ("UK", "EU") is a name, not a short word.
  long_enough = len(word) >= config.min_word_chars or (len(word) >= 2 and word.isupper())
  return (long_enough and not _NUMERIC.match(word)
          and word.lower() not in config.stop_words)


def word_case_counts(page: Page, words: frozenset[str]) -> collections.Counter:
  """(word, is lower case) -> occurrences in the page's paragraphs, for the one-word titles
  `words` (as titles write them, first letter upper case)."""
  lower = {w[:1].lower() + w[1:]: w for w in words if w[:1].isupper()}
  counts: collections.Counter = collections.Counter()
  for section in page.sections:
    for paragraph in section.paragraphs:
      for token in tokens(paragraph):
        if token in words:
          counts[(token, False)] += 1
        elif token in lower:
          counts[(lower[token], True)] += 1
  return counts


def common_words(counts: dict[tuple[str, bool], int], config: TitleLinkConfig) -> set[str]:
  """One-word titles whose lower-case occurrences exceed `max_lowercase_share`."""
  totals: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
  for (word, is_lower), n in counts.items():
    totals[word][is_lower] += n
  return {w for w, (upper, lower) in totals.items()
          if lower > config.max_lowercase_share * (upper + lower)}


def recover_links(page: Page, index: TitleIndex) -> tuple[list[Entry], dict[str, int]]:
  """(the Entry of each target found in `page`, first mention first, one per target; counts
  by kind: "one_word", "multi_word" (tokens matched), "via_alias" (a redirect or a stripped
  qualifier), "own_title" (mentions of the page itself))."""
  own = page.title
  found: dict[str, Entry] = {}
  counts: dict[str, int] = collections.Counter()
  for entry, length in index.find(page):
    if entry.target == own:
      counts["own_title"] += 1
      continue
    if entry.target in found:
      continue
    found[entry.target] = entry
    counts["one_word" if length == 1 else "multi_word"] += 1
    counts["via_alias"] += entry.alias
  return list(found.values()), counts


def hub_targets(pages_per_target: dict[str, int], searched_pages: int,
                config: TitleLinkConfig) -> set[str]:
  """Targets found on more than max(max_target_share x searched pages, min_hub_pages)."""
  most = max(config.max_target_share * searched_pages, config.min_hub_pages)
  return {t for t, n in pages_per_target.items() if n > most}


def _space_of(page_id: int, own: frozenset[int]) -> int:
  """The title space a page's links resolve in (as pipelines.links keys them)."""
  space = inputs_lib.id_space(page_id)
  return space if space in own else 0


def _scoped_redirect(redirect: tuple) -> tuple[int, tuple[str, str]]:
  """(source, target) of the first title space, or (space, source, target)."""
  space, source, target = (0, *redirect) if len(redirect) == 2 else redirect
  return space, (source, target)


class _RouteFn(beam.DoFn):
  """Page -> (space, Page) to search (main), or the Page as it is (tagged "kept": a page with
  links of its own while `only_unlinked`)."""

  def __init__(self, config: TitleLinkConfig, own: frozenset[int]):
    self.config, self.own = config, own
    self.searched = tio.counter(C.TITLE_LINKS_PAGES)
    self.kept = tio.counter(C.TITLE_LINKS_PAGES_WITH_LINKS)

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
    self.own_title = tio.counter(C.TITLE_LINKS_OWN_TITLE)

  def process(self, element, indexes):
    space, page = element
    entries, counts = recover_links(page, indexes[space])  # the page's own title is there
    self.own_title.inc(counts.get("own_title", 0))
    yield space, (page, tuple(entries))


class _LinkFn(beam.DoFn):
  """(space, (Page, Entries)) + {space: hub targets} -> Page with the links found (after its
  own, if any), hubs left out."""

  def __init__(self):
    self.found = tio.counter(C.TITLE_LINKS_FOUND)
    self.one_word = tio.counter(C.TITLE_LINKS_ONE_WORD)
    self.multi_word = tio.counter(C.TITLE_LINKS_MULTI_WORD)
    self.hub = tio.counter(C.TITLE_LINKS_HUB)
    self.via_alias = tio.counter(C.TITLE_LINKS_VIA_ALIAS)

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
    self.common = tio.counter(C.TITLE_LINKS_COMMON_WORDS)

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

  Put it before pipelines.links.ResolveLinks, on the same two inputs: its output is that
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
    titles = articles | "KeyTitles" >> beam.Map(lambda p: (_space_of(p.page_id, own), p.title))
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
