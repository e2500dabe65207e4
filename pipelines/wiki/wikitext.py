"""Wikitext -> cleaned text: sections of paragraphs and outgoing links (`clean_wikitext`);
pipelines.wiki.parse_pages makes Pages of it and routes every RawPage.

One pass per page, built for speed (the whole pair pipeline must run at >= 0.5x the "bare
floor" of mwparserfromhell parse + strip_code):

1. Comments and `<ref>...</ref>` / `<ref .../>` are cut with two regular expressions
   (they are dropped anyway, and citation templates inside refs are most of a page's markup).
2. mwparserfromhell's tokenizer (its C extension) turns the rest into a flat token stream,
   with `skip_style_tags=True` (bold/italic quotes stay text and are removed in step 4).
3. One loop over the tokens keeps visible text, with a stack for nested constructs. This
   skips mwparserfromhell's Builder, which turns tokens into a node tree and takes about
   85 % of `mwparserfromhell.parse` time on the English slice; the loop mirrors the
   Builder's token grammar (parser/builder.py), so it reads the same markup the same way.
4. The text of each section is cut into paragraphs and cleaned.

What is kept and dropped:

* Templates: those that carry article text (`convert`, dates, `lang`, `nowrap`, `frac`, ...)
  are rendered by pipelines.wiki.templates: a TemplateOpen frame collects the name from the
  token stream until the first `|` or `}}`; a name the table does not know drops the rest
  unread (sink None, as before), a known one collects each parameter's visible text
  (positional, or `key=value` split at TemplateParamEquals; nested templates and links
  inside render into it) and appends the rendered text at TemplateClose. A template inside
  a dropped construct is dropped unread. A disambiguation template marks the page.
* Dropped: other templates `{{...}}` and arguments `{{{...}}}`, comments, refs, tables (`{|...|}`
  and `<table>`), file/image/media links with their captions (namespaces File/Image/Media,
  local names included, via the site's namespace table), category links, interlanguage
  links (`[[fr:Paris]]`), the URLs of external links, magic words (`__TOC__`), and the
  contents of non-prose tags (`DROPPED_TAGS`: `<math>`, `<gallery>`, `<pre>`, ...).
* Kept: text; the anchor text of wikilinks, or their target as written when there is no
  anchor (`[[:Category:Foo]]` and `[[wikt:foo]]` links are shown inline, as MediaWiki
  does); external link titles; the text of harmless tags (`<b>`, `<span>`, `<div>`,
  `<blockquote>`, `<nowiki>`, ...); HTML entities, decoded.
* Sections: each heading starts a section (its cleaned text and level); `sections[0]` is
  the lead, heading "" and level 0, possibly with no paragraphs. Non-prose sections
  (References, Notes, External links, See also, ...: pipelines.wiki.nonprose) are left out with
  their subsections by pipelines.wiki.parse_pages, counted `sections_skipped_<reason>`; their
  links still count.
* Paragraphs: lines separated by blank lines, joined with spaces as MediaWiki renders them.
  Each list item (`*`, `#`, `;`, `:` lines and `<li>`) is its own paragraph, so lists are
  kept (WikiExtractor drops most of them) and an item never runs into the next one; a
  paragraph with no letter or digit left (e.g. "()" after a template) is dropped.
* Malformed markup: where the tokenizer gives up (e.g. a `{|` table with HTML rows) it
  returns the rest of the page as plain text; such text is cleaned by regular expressions
  (tables, innermost templates (dropped, not rendered), links -> anchor text, HTML tags),
  and its links counted.
  A dump does not list namespace aliases (ltgwiki writes "Attēls:" for its "Fails:"
  namespace), so `Prefix:Name.jpg`-like targets (media extensions) are media links too.
* Links: every `[[target]]` of the main namespace outside comments and refs, including
  links inside list items, tables, templates' parameters and image captions (they are
  hyperlinks of the rendered page), normalised by pipelines.wiki.titles, deduplicated, in
  first-seen order. File, Category (also `[[:Category:..]]`), other namespaces and
  interwiki targets are not links; nor are links inside `<nowiki>`, `<pre>`, `<math>`
  (the tokenizer does not parse those).

Nesting bombs: mwparserfromhell's tokenizer stops nesting at a fixed depth and leaves the rest
as text, so 10,000 nested `{{` would come out as kilobytes of braces. A template or link
nested deeper than MAX_NESTING (`{{`/`[[` inside each other) is dropped whole before
tokenizing, from its outermost `{{` or `[[` to where it closes (if it never does, to the end
of the paragraph where it went too deep), counted `markup_too_deep` per span; and runs of
MARKUP_RUN or more markup tokens in a row (`<b><b><b>...`, `-{-{-{...`) that survive
cleaning are cut from the text.

`clean_wikitext(..., render=False)` (`--text_cleanup=off`) drops every template: the text of
before, for comparisons.
"""

from __future__ import annotations

import html
import re
from typing import Optional

import mwparserfromhell
from mwparserfromhell.parser import tokens as T

from twotower.core.contracts import ARTICLE_NAMESPACE, SiteInfo
from twotower.pipelines.wiki import templates, titles

#: Tags whose contents are not prose.
DROPPED_TAGS = frozenset({
    "ref", "references", "table", "gallery", "math", "chem", "ce", "timeline", "imagemap",
    "score", "graph", "templatedata", "templatestyles", "mapframe", "maplink", "inputbox",
    "categorytree", "indicator", "syntaxhighlight", "source", "pre", "includeonly", "hiero",
    "charinsert", "section", "style", "script", "tabber", "tabs", "noinclude", "caption",
    "math-chem", "phonos", "langconvert", "dynamicpagelist", "rss", "maplink",
})
#: Tags that start and end a block (a paragraph break around them).
_BLOCK_TAGS = frozenset({
    "p", "div", "blockquote", "center", "ul", "ol", "dl", "h1", "h2", "h3", "h4", "h5", "h6",
    "hr", "poem", "table",
})
#: Tags that are a list item (the wiki markup `*#;:` is tokenized as these).
_ITEM_TAGS = frozenset({"li", "dt", "dd"})

_ITEM = "\x01"   # Marks the start of a list item in the section text.
_HEADING = object()  # Piece kind marking a heading in the page's piece list.

_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_REF = re.compile(r"<ref\b[^>]*/>|<ref\b[^>]*?>.*?</ref\s*>", re.DOTALL | re.IGNORECASE)
_QUOTES = re.compile(r"'{2,}")
_MAGIC = re.compile(r"__[A-Z]+__")
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")

_TOKENIZER = mwparserfromhell.parser.Parser()._tokenizer

# Residue: mwparserfromhell's tokenizer gives up on some malformed constructs (e.g. a `{|`
# table with HTML rows) and returns the rest of the page as one Text token. Such text is
# cleaned with regular expressions instead (tags whose contents are raw are left alone).
_RAW_TAGS = frozenset({"nowiki", "pre", "code", "syntaxhighlight", "source", "math"})
_RESIDUE_TABLE = re.compile(r"^[ \t]*\{\|.*?^[ \t]*\|\}[^\n]*", re.DOTALL | re.MULTILINE)
_RESIDUE_TABLE_LINE = re.compile(r"^[ \t]*(?:\{\||\|\}|\||!).*$", re.MULTILINE)
_RESIDUE_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
_RESIDUE_LINK = re.compile(r"\[\[([^\[\]|\n]*)(?:\|((?:[^\[\]\n]|\[\[[^\[\]\n]*\]\])*))?\]\]")
_RESIDUE_TAG = re.compile(r"</?[A-Za-z][^<>\n]*>")


#: Deepest nesting of `{{...}}` / `[[...]]` kept (real pages nest a few levels).
MAX_NESTING = 24
_NESTING = re.compile(r"\{\{|\}\}|\[\[|\]\]")
#: Runs of this many markup tokens in a row are residue of a nesting bomb, not text.
MARKUP_RUN = 8
_MARKUP_RUN = re.compile(r"(?:(?:\{\{|\}\}|\[\[|\]\]|-\{|\}-|</?[A-Za-z][^<>\n]{0,200}>)\s*)"
                         r"{%d,}" % MARKUP_RUN)


def drop_deep_nesting(text: str) -> tuple[str, int]:
  """(text without the templates and links nested deeper than MAX_NESTING, how many such
  outermost spans were dropped); linear in the text."""
  if text.count("{{") + text.count("[[") <= MAX_NESTING:
    return text, 0
  spans: list[tuple[int, int]] = []
  depth, start, deep, deep_at = 0, 0, False, 0
  for match in _NESTING.finditer(text):
    if match.group() in ("{{", "[["):
      if depth == 0:
        start, deep = match.start(), False
      depth += 1
      if depth > MAX_NESTING and not deep:
        deep, deep_at = True, match.end()
    elif depth:
      depth -= 1
      if depth == 0 and deep:
        spans.append((start, match.end()))
  if depth and deep:  # never closed: to the end of the paragraph where it went too deep
    blank = _PARAGRAPH_BREAK.search(text, deep_at)
    spans.append((start, blank.start() if blank else len(text)))
  if not spans:
    return text, 0
  kept, end = [], 0
  for span_start, span_end in spans:
    kept.append(text[end:span_start])
    end = span_end
  kept.append(text[end:])
  return "".join(kept), len(spans)


class ParseError(ValueError):
  """The tokenizer failed on a page."""


def _clean(text: str) -> str:
  """Inline cleanup: quote markup, magic words, item marks, whitespace."""
  if "''" in text:
    text = _QUOTES.sub("", text)
  if ("{{" in text or "[[" in text or "<" in text or "-{" in text) and _MARKUP_RUN.search(text):
    text = _MARKUP_RUN.sub(" ", text)
  if "__" in text:
    text = _MAGIC.sub("", text)
  return _SPACE.sub(" ", text.replace(_ITEM, " ")).strip()


def paragraphs(text: str) -> list[str]:
  """Section text -> cleaned paragraphs: blank lines split, each list item is its own."""
  paragraphs: list[str] = []
  for block in _PARAGRAPH_BREAK.split(text):
    if _ITEM in block:
      current: list[str] = []
      for line in block.split("\n"):
        if line.lstrip(" \t").startswith(_ITEM):
          paragraphs.append(" ".join(current))
          paragraphs.append(line)
          current = []
        else:
          current.append(line)
      paragraphs.append(" ".join(current))
    else:
      paragraphs.append(block)
  cleaned = (_clean(p) for p in paragraphs)
  return [p for p in cleaned if p and _WORD.search(p)]


class _Frame:
  """An open construct of the token stream: what to restore when it closes."""
  __slots__ = ("parent", "kind", "parts", "shown", "extra")

  def __init__(self, parent, kind, parts=None, extra=None):
    self.parent = parent    # The sink (list or None) of the enclosing text.
    self.kind = kind
    self.parts = parts      # Collected text (link title, tag name, entity).
    self.shown = False      # Link: a separator was seen; tag: name decided.
    self.extra = extra      # External link brackets; heading level; tag name.


#: A dump lists each namespace's local name but not its aliases (ltgwiki's File namespace is
#: "Fails", and pages also write "Attēls:"), so `Prefix:Name.ext` with a media extension and a
#: prefix that is no namespace is taken for a media link too.
_MEDIA_FILE = re.compile(
    r"[^:#|]+:[^:#|]*\.(?:jpe?g|png|gif|svg|tiff?|webp|xcf|bmp|pdf|djvu|og[gva]|webm|mp[34]|"
    r"mpe?g|flac|wav|midi?|opus|stl)\s*", re.IGNORECASE)


def _link_visible(target: str, site: SiteInfo) -> tuple[bool, Optional[str]]:
  """(is the link's text shown, main-namespace title it links to or None)."""
  colon = target.lstrip().startswith(":")
  parsed = titles.parse_title(target, site)
  if parsed is None:
    return True, None
  if (not colon and parsed.namespace == ARTICLE_NAMESPACE and ":" in parsed.text
      and _MEDIA_FILE.fullmatch(parsed.text)):
    return False, None
  main = None
  if not parsed.interwiki and parsed.namespace == ARTICLE_NAMESPACE:
    main = parsed.text
  if colon:
    return True, main
  if parsed.interwiki:
    # Interlanguage links go to the sidebar; other interwiki links are inline.
    return parsed.interwiki in titles.INTERWIKI_PREFIXES, None
  if parsed.namespace in titles.MEDIA_NAMESPACES or (
      parsed.namespace == titles.CATEGORY_NAMESPACE):
    return False, None
  return True, main


def _clean_residue(text: str, site: SiteInfo, links: dict) -> str:
  """Text the tokenizer left unparsed -> visible text; its link targets go to `links`."""
  if "{|" in text:
    text = _RESIDUE_TABLE_LINE.sub("", _RESIDUE_TABLE.sub("", text))
  for _ in range(8):  # Innermost templates first, a few levels deep.
    if "{{" not in text:
      break
    text, n = _RESIDUE_TEMPLATE.subn("", text)
    if not n:
      break

  def link(match: re.Match) -> str:
    target, anchor = match.group(1), match.group(2)
    visible, main = _link_visible(target, site)
    if main is not None:
      links[main] = None
    if not visible:
      return ""
    return target.lstrip().removeprefix(":") if anchor is None else anchor

  if "[[" in text:
    text = _RESIDUE_LINK.sub(link, text)
  if "<" in text:
    text = _RESIDUE_TAG.sub("", text)
  return text


class _TemplateCall:
  """A template that renders (pipelines.wiki.templates), its parameters as they are read."""
  __slots__ = ("name", "positional", "named", "key")

  def __init__(self, name: str):
    self.name = name
    self.positional: list[str] = []
    self.named: dict[str, str] = {}
    self.key: Optional[str] = None  # The key of the parameter being read, if named.

  def add(self, parts: list) -> None:
    value = _SPACE.sub(" ", "".join(parts).replace(_ITEM, " ")).strip()
    if self.key is None:
      self.positional.append(value)
    elif self.key.isdigit() and int(self.key) == len(self.positional) + 1:
      self.positional.append(value)  # {{x|1=a}}: a positional parameter by number.
    else:
      self.named[self.key] = value
    self.key = None

  def render(self) -> Optional[str]:
    return templates.render(self.name, self.positional, self.named)


def clean_wikitext(text: str, site: SiteInfo, render: bool = True
                   ) -> tuple[list[tuple[str, int, str]], list[str], bool]:
  """Wikitext -> ([(heading, level, section text)], [main-namespace link targets],
  whether a disambiguation template was seen).

  `render`: content templates are rendered (pipelines.wiki.templates); False drops every
  template, as before they were (`--text_cleanup=off`). The section text still holds
  list-item marks; `paragraphs` cuts it. Raises ParseError when the tokenizer fails.
  """
  text, _ = drop_deep_nesting(text)
  if "<!--" in text:
    text = _COMMENT.sub("", text)
  if "<ref" in text or "<REF" in text or "<Ref" in text:
    text = _REF.sub("", text)
  try:
    tokens = _TOKENIZER.tokenize(text, 0, True)
  except Exception as e:  # The C tokenizer raises SystemError/ParserError on bad states.
    raise ParseError(f"{type(e).__name__}: {e}") from e

  out: list = []              # Visible text pieces; (_HEADING, level, text) marks sections.
  links: dict[str, None] = {}  # Ordered set of link targets.
  sink: Optional[list] = out  # Where Text goes now; None inside dropped constructs.
  stack: list[_Frame] = []
  flags = {"disambiguation": False}

  for tok in tokens:
    kind = type(tok)
    if kind is T.Text:
      if sink is not None:
        text = tok.text
        if ("[[" in text or "{{" in text or "{|" in text) and not (
            stack and stack[-1].extra in _RAW_TAGS):
          text = _clean_residue(text, site, links)
        sink.append(text)
    elif kind is T.WikilinkOpen:
      frame = _Frame(sink, T.WikilinkOpen, [])
      stack.append(frame)
      sink = frame.parts
    elif kind is T.WikilinkSeparator or kind is T.WikilinkClose:
      frame = stack[-1]
      if kind is T.WikilinkSeparator and frame.shown:
        continue  # A second "|" inside the text part ("thumb|caption"): still text.
      if kind is T.WikilinkClose:
        stack.pop()
      if frame.shown:  # Close after the text part.
        sink = frame.parent
        continue
      target = "".join(frame.parts)
      visible, main = _link_visible(target, site)
      if main is not None:
        links[main] = None
      if kind is T.WikilinkSeparator:
        frame.shown = True
        sink = frame.parent if visible else None
      else:
        sink = frame.parent
        if visible and sink is not None:
          sink.append(target.lstrip().removeprefix(":"))
    elif kind is T.TemplateOpen:
      # Its name is collected (parts) until the first "|" or "}}" decides whether it renders
      # (pipelines.wiki.templates); a template inside a dropped construct is dropped unread.
      frame = _Frame(sink, kind, [] if sink is not None and render else None)
      stack.append(frame)
      sink = frame.parts
    elif kind is T.TemplateParamSeparator or kind is T.TemplateParamEquals:
      frame = stack[-1]
      if frame.kind is not T.TemplateOpen or frame.parts is None:
        continue
      if not frame.shown:  # The name is complete: render or drop.
        frame.shown = True
        name = "".join(frame.parts)
        if templates.is_disambiguation(name):
          flags["disambiguation"] = True
        if templates.renderer(name) is None:
          frame.parts = sink = None
          continue
        frame.extra = _TemplateCall(name)
      elif kind is T.TemplateParamEquals:
        if frame.extra.key is None:  # "=" in a named value is text.
          frame.extra.key = "".join(frame.parts).strip()
          frame.parts = sink = []
          continue
        frame.parts.append("=")
        continue
      else:
        frame.extra.add(frame.parts)
      frame.parts = sink = []
    elif kind is T.TemplateClose:
      frame = stack.pop()
      sink = frame.parent
      if frame.parts is not None and sink is not None:
        if not frame.shown:  # {{name}} without parameters.
          name = "".join(frame.parts)
          if templates.is_disambiguation(name):
            flags["disambiguation"] = True
          frame.extra = _TemplateCall(name)
        else:
          frame.extra.add(frame.parts)
        rendered = frame.extra.render()
        if rendered:
          sink.append(rendered)
    elif kind is T.ArgumentOpen or kind is T.CommentStart:
      stack.append(_Frame(sink, kind))
      sink = None
    elif kind is T.ArgumentClose or kind is T.CommentEnd:
      sink = stack.pop().parent
    elif kind is T.TagOpenOpen:
      frame = _Frame(sink, tok.wiki_markup, [])  # kind: the wiki markup or None.
      stack.append(frame)
      sink = frame.parts
    elif kind is T.TagAttrStart:
      frame = stack[-1]
      if not frame.shown:
        frame.shown, frame.extra = True, "".join(frame.parts).strip().lower()
      sink = None
    elif kind is T.TagCloseOpen:
      frame = stack[-1]
      if not frame.shown:
        frame.shown, frame.extra = True, "".join(frame.parts).strip().lower()
      tag, sink = frame.extra, frame.parent
      if sink is not None:
        if tag in DROPPED_TAGS:
          sink = None
        elif tag in _ITEM_TAGS:
          sink.append("\n" + _ITEM)
        elif tag in _BLOCK_TAGS:
          sink.append("\n\n")
    elif kind is T.TagCloseSelfclose:
      frame = stack.pop()
      tag = frame.extra if frame.shown else "".join(frame.parts).strip().lower()
      sink = frame.parent
      if sink is not None:
        if tag in _ITEM_TAGS:
          # Wiki markup (`*#;:`) sits at a line start already; `<li/>` may not.
          sink.append(_ITEM if frame.kind else "\n" + _ITEM)
        elif tag in _BLOCK_TAGS:
          sink.append("\n\n")
        elif tag == "br":
          sink.append(" ")
    elif kind is T.TagOpenClose:
      sink = None
    elif kind is T.TagCloseClose:
      frame = stack.pop()
      sink = frame.parent
      if sink is not None and frame.extra in _BLOCK_TAGS:
        sink.append("\n\n")
    elif kind is T.ExternalLinkOpen:
      stack.append(_Frame(sink, kind, extra=tok.brackets))
      sink = None
    elif kind is T.ExternalLinkSeparator:
      frame = stack[-1]
      sink = frame.parent if frame.extra else None
    elif kind is T.ExternalLinkClose:
      sink = stack.pop().parent
    elif kind is T.HTMLEntityStart:
      frame = _Frame(sink, kind, ["&"])
      stack.append(frame)
      sink = frame.parts
    elif kind is T.HTMLEntityNumeric:
      sink.append("#")
    elif kind is T.HTMLEntityHex:
      sink.append(tok.char)
    elif kind is T.HTMLEntityEnd:
      frame = stack.pop()
      sink = frame.parent
      if sink is not None:
        sink.append(html.unescape("".join(frame.parts) + ";"))
    elif kind is T.HeadingStart:
      frame = _Frame(sink, kind, [], extra=tok.level)
      stack.append(frame)
      sink = frame.parts if sink is not None else None
    elif kind is T.HeadingEnd:
      frame = stack.pop()
      sink = frame.parent
      if sink is out:
        out.append((_HEADING, frame.extra, _clean("".join(frame.parts))))
      elif sink is not None:  # Inside a rendered template's parameter: its text.
        sink.append("".join(frame.parts))
    # Other tokens (separators, attribute quotes/equals) carry no visible text.

  sections: list[tuple[str, int, str]] = []
  heading, level, start = "", 0, 0
  for i, piece in enumerate(out):
    if type(piece) is tuple:
      sections.append((heading, level, "".join(out[start:i])))
      _, level, heading = piece
      start = i + 1
  sections.append((heading, level, "".join(out[start:])))
  return sections, list(links), flags["disambiguation"]
