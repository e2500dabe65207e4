"""Finding titles in text, as pure functions: the index of titles and redirects, the
matching and its rules (see pipelines.wiki.title_links for the rules, why, and the Beam
transform that runs them over a corpus). Nothing here imports Beam."""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Iterable, Iterator, NamedTuple, Optional

from twotower.core.contracts import Page
from twotower.pipelines.wiki import nonprose

#: Words and single other characters; whitespace separates and is not a token.
_TOKEN = re.compile(r"\w+|[^\w\s]")
_QUALIFIER = re.compile(r"^(.+?) \([^()]+\)$")
#: The first paragraph of a disambiguation page of extracted text ("Sonder may refer to:",
#: "Giacobbi is a surname and may refer to:"), which WikiExtractor keeps as an article.
#: Name lists ("Daskal is a surname. Notable people with the surname include:") are one too:
#: a surname alone in text names a person, not the list.
_DISAMBIGUATION_LEAD = re.compile(
    r"\b(?:may|might|can|could) (?:also )?(?:refer|be a reference) to\b"
    r"|\bnotable people (?:with (?:the|this|that) (?:\w+ )?name|by (?:the|this|that) name"
    r"|named)\b|\bis an? (?:[\w-]+ ){0,4}?(?:surname|given name)\b", re.IGNORECASE)

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
  """How titles are found in text (see pipelines.wiki.title_links for why each rule is there).

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
_OPENERS = frozenset(".!?:;")
_APOSTROPHES = frozenset("'’")


def _is_name_word(token: str) -> bool:
  return token[:1].isupper() or token[:1].isdigit()


def _inside_name(toks: list[str], i: int) -> bool:
  """Whether the one-word match at `i` is part of a longer capitalised name that is no title
  ("Apollo" in "Apollo 11", "Mexico" in "New Mexico"): the next token is a capitalised word
  or a number (also after an apostrophe: "Stormin' Normans"), or the previous one is a
  capitalised word that does not start a sentence."""
  after = i + 2 if i + 2 < len(toks) and toks[i + 1] in _APOSTROPHES else i + 1
  if after < len(toks) and _is_name_word(toks[after]):
    return True
  return (i > 0 and toks[i - 1][:1].isupper() and i > 1 and toks[i - 2] not in _OPENERS)


def is_disambiguation(page: Page) -> bool:
  """Whether a page lists the meanings of its title, or the people of a name, as its title
  or its first paragraph says: never a link target (its lead would be a WLP query such as
  "X may refer to:")."""
  if nonprose.is_disambiguation_title(page.title):
    return True
  first = next((p for s in page.sections for p in s.paragraphs), "")
  return bool(_DISAMBIGUATION_LEAD.search(first[:300]))


def _usable(key: tuple[str, ...], config: TitleLinkConfig) -> bool:
  """Whether a title's tokens may be matched at all (one-word rules; see the module doc)."""
  if not any(c.isalpha() for t in key for c in t):
    return False  # numbers, years, scores ("3-2")
  if len(key) > 1:
    return True
  word = key[0]
  # An acronym of two capitals ("UK", "EU") is a name, not a short word.
  long_enough = len(word) >= config.min_word_chars or (len(word) >= 2 and word.isupper())
  return long_enough and word.lower() not in config.stop_words


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


def own_names(title: str) -> frozenset[str]:
  """A page's title, and its name without a qualifier ("Sonder" of "Sonder (album)"):
  mentions of either are the page itself, never a link (to the page "Sonder", say)."""
  match = _QUALIFIER.match(title)
  return frozenset((title, match.group(1))) if match else frozenset((title,))


def recover_links(page: Page, index: TitleIndex) -> tuple[list[Entry], dict[str, int]]:
  """(the Entry of each target found in `page`, first mention first, one per target; counts
  by kind: "one_word", "multi_word" (tokens matched), "via_alias" (a redirect or a stripped
  qualifier), "own_title" (mentions of the page itself, `own_names`))."""
  own = own_names(page.title)
  found: dict[str, Entry] = {}
  counts: dict[str, int] = collections.Counter()
  for entry, length in index.find(page):
    if entry.target in own or entry.link in own:
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
