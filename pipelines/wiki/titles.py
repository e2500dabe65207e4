"""MediaWiki title normalisation, as `Title::newFromText` does it for `[[link]]` targets.

A link target and a page title name the same page when their normalised forms are equal, so
link resolution (pipelines.wiki.pairs) joins on `normalize_title(...)` strings. The rules, in
MediaWiki's order (includes/title/MediaWikiTitleCodec.php `splitTitleString`):

1. HTML entities are decoded (`A&amp;B` -> `A&B`) and, when the text holds a `%`,
   percent-encoding too (`Caf%C3%A9` -> `Café`), as the parser does for `[[...]]` targets;
   Unicode is NFC-normalised; bidi marks (U+200E/U+200F/U+202A-U+202E) are dropped.
2. `_` and every Unicode space are a space; runs collapse to one; ends are stripped.
3. One leading `:` is dropped (`[[:Category:Foo]]` is a link to the category page).
4. A prefix before the first `:` that names a namespace of the site's `<siteinfo>` table,
   case-insensitively, or one of MediaWiki's canonical English names and aliases (`File`,
   `Image`, `Category`, ...) which every wiki accepts, selects that namespace; the title keeps
   the site's local name (`category:foo` -> `Category:Foo` on enwiki, `Kategoreja:Foo` on
   ltgwiki).
5. `#fragment` is dropped; a bare fragment (`[[#History]]`) is a link to the page itself:
   None.
6. With `<case>first-letter</case>` the first letter is upper-cased (that of the title part,
   after the namespace prefix).
7. Invalid titles are None: empty, only a namespace prefix, characters MediaWiki forbids
   (`<>[]{}|`, controls, U+FFFD), relative paths (`.`, `../x`), `~~~`, over 255 bytes.

Interwiki links. A dump carries no interwiki table, so a prefix that is not a namespace is
recognised as interwiki by a documented heuristic: a Wikimedia project prefix
(`INTERWIKI_PREFIXES`: `wikt`, `commons`, `w`, ...; case-insensitive) or a language code
written in lower case as interlanguage links are (`fr`, `zh-yue`, `be-x-old`, `simple`). Such
a target names no page of this wiki: `parse_title` returns it with `interwiki` set and
`normalize_title` returns None. Any other prefix is part of a main-namespace title
(`Star Wars: Episode I`), which is what MediaWiki does when the prefix is not an interwiki.
"""

from __future__ import annotations

import functools
import html
import re
import unicodedata
import urllib.parse
from typing import NamedTuple, Optional

from twotower.core.contracts import SiteInfo

#: MediaWiki's canonical namespace names (and built-in aliases), accepted on every wiki in
#: addition to the local names of `<siteinfo>`.
CANONICAL_NAMESPACES: dict[str, int] = {
    "media": -2, "special": -1, "talk": 1, "user": 2, "user talk": 3, "project": 4,
    "project talk": 5, "file": 6, "image": 6, "file talk": 7, "image talk": 7,
    "mediawiki": 8, "mediawiki talk": 9, "template": 10, "template talk": 11, "help": 12,
    "help talk": 13, "category": 14, "category talk": 15, "module": 828,
    "module talk": 829,
}

#: Namespaces whose links embed media rather than link to a page (dropped from text).
MEDIA_NAMESPACES = frozenset({-2, 6})
#: Links into this namespace categorise the page (dropped), unless written `[[:Category:..]]`.
CATEGORY_NAMESPACE = 14

#: Wikimedia interwiki prefixes (meta.wikimedia.org/wiki/Interwiki_map, the project ones).
INTERWIKI_PREFIXES = frozenset({
    "w", "wikipedia", "wikt", "wiktionary", "n", "wikinews", "b", "wikibooks", "q",
    "wikiquote", "s", "wikisource", "species", "wikispecies", "v", "wikiversity", "voy",
    "wikivoyage", "d", "wikidata", "c", "commons", "m", "meta", "metawiki", "metawikimedia",
    "mw", "mediawikiwiki", "wmf", "foundation", "wikimedia", "incubator", "outreach",
    "phab", "phabricator", "wikitech", "translatewiki", "betawikiversity", "oldwikisource",
    "wikifunctions", "f", "bugzilla", "mediazilla", "gerrit", "doi", "imdbname",
    "imdbtitle", "google", "wikia", "wikiquote",
})

#: An interlanguage prefix as written in wikitext: a lower-case language code.
_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]{1,8})*|simple")

_BIDI = re.compile("[\u200e\u200f\u202a-\u202e]")
_SPACES = re.compile("[ _\t\n\r\xa0\u1680\u180e\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")
_INVALID = re.compile("[<>\\[\\]{}|\x00-\x1f\x7f\ufffd]|~~~")
_RELATIVE = re.compile(r"^\.\.?(?:/|$)|/\.\.?(?:/|$)")
_MAX_TITLE_BYTES = 255


class Title(NamedTuple):
  """A parsed link target or page title.

  Attributes:
    namespace: namespace key (0 for the main namespace; 0 for interwiki targets too).
    text: the normalised full title, e.g. "Category:Foo" or "Paris" (for interwiki
      targets, the text after the prefix, normalised as a main-namespace title).
    interwiki: "" for a page of this wiki, else the interwiki/interlanguage prefix as
      written, lower-cased ("fr", "wikt").
  """
  namespace: int
  text: str
  interwiki: str


@functools.lru_cache(maxsize=64)
def _namespace_table(site: SiteInfo) -> tuple[dict[str, int], dict[int, str]]:
  """(lower-cased name or alias -> key, key -> local name) for one site."""
  by_name = dict(CANONICAL_NAMESPACES)
  local: dict[int, str] = {}
  for key, name in site.namespaces:
    name = _SPACES.sub(" ", name).strip()
    local[key] = name
    if name:
      by_name[name.lower()] = key
  for key in set(CANONICAL_NAMESPACES.values()) - local.keys():
    # A canonical namespace the site does not list keeps its canonical English name.
    local[key] = next(n for n, k in CANONICAL_NAMESPACES.items() if k == key).capitalize()
  local[0] = ""
  return by_name, local


def namespace_key(name: str, site: SiteInfo) -> Optional[int]:
  """The key of namespace `name` (local or canonical, any case), None if unknown."""
  return _namespace_table(site)[0].get(_SPACES.sub(" ", name).strip().lower())


def _upper_first(text: str) -> str:
  first = text[0]
  upper = first.upper()
  # MediaWiki keeps characters whose upper case is not one character (e.g. "ß" -> "SS").
  return upper + text[1:] if len(upper) == 1 and upper != first else text


def _is_interwiki(prefix: str) -> bool:
  return prefix.lower() in INTERWIKI_PREFIXES or _LANGUAGE_CODE.fullmatch(prefix) is not None


@functools.lru_cache(maxsize=1 << 16)
def parse_title(raw: str, site: SiteInfo) -> Optional[Title]:
  """Parses a link target or title; None when it is invalid or only a `#fragment`.

  Args:
    raw: the target as written between `[[` and `|`/`]]`, or a page/redirect title.
    site: the dump's siteinfo (namespace table and `<case>`).
  """
  text = raw
  if "&" in text:
    text = html.unescape(text)
  if "%" in text:
    text = urllib.parse.unquote(text)
  if not text.isascii():
    text = unicodedata.normalize("NFC", _BIDI.sub("", text))
  text = _SPACES.sub(" ", text).strip()
  if text.startswith(":"):
    text = text[1:].lstrip()

  namespace, interwiki = 0, ""
  prefix, colon, rest = text.partition(":")
  if colon:
    prefix = prefix.rstrip()
    key = namespace_key(prefix, site)
    if key is not None:
      namespace, text = key, rest.lstrip()
    elif _is_interwiki(prefix):
      interwiki, text = prefix.lower(), rest.lstrip()
      if text.startswith(":"):
        text = text[1:].lstrip()

  text = text.partition("#")[0].rstrip()
  if not text or _INVALID.search(text) or _RELATIVE.search(text):
    return None
  if site.case == "first-letter":
    text = _upper_first(text)
  if namespace:
    text = f"{_namespace_table(site)[1][namespace]}:{text}"
  if len(text.encode("utf-8")) > _MAX_TITLE_BYTES:
    return None
  return Title(namespace, text, interwiki)


def normalize_title(raw: str, site: SiteInfo) -> Optional[str]:
  """The normalised title of a page of this wiki, or None (invalid, self link, interwiki).

  Examples on enwiki: "foo_bar#History" -> "Foo bar"; "category:foo" -> "Category:Foo";
  ":Category:Foo" -> "Category:Foo"; "#History" -> None; "fr:Paris" -> None.
  """
  title = parse_title(raw, site)
  if title is None or title.interwiki:
    return None
  return title.text


def namespace_of(title: str, site: SiteInfo) -> int:
  """Namespace key of a title (normalised or not); 0 when it has no namespace prefix or is
  invalid."""
  parsed = parse_title(title, site)
  return parsed.namespace if parsed is not None else 0
