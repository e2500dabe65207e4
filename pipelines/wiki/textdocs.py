"""Extracted text as input of the pair pipeline: WikiExtractor output and JSONL documents -> Page.

`twotower pairs --dump A,B,...` reads, beside MediaWiki dumps (pipelines.wiki.wikidump), files of
extracted text, plain or `.bz2` / `.gz`, by glob. Each file's format is decided from its first
bytes (`sniff_format`), so one run can mix a dump and a corpus:

* `mediawiki`: a `pages-articles*.xml` export (`<mediawiki ...>`): pipelines.wiki.wikidump.
* `wikiextractor`: WikiExtractor's default output, `<doc id=".." url=".." title="..">`, the
  title line, then one paragraph per line, `</doc>`. Text is HTML-escaped (`&amp;`), which is
  undone. Section headings are lines of their own, WikiExtractor appends a period ("Early
  life."); `is_heading` recognises them (see there; levels are lost: every heading is level 2).
  With `--links` a link is `<a href="Target%20title">anchor</a>`: the anchor stays in the
  text, the target becomes a link (so WLP works); without it a page has no links.
* `wikiextractor-json`: WikiExtractor `--json`, one object per line with `id`, `url`, `title`,
  `text` (the same lines as above, without the title line).
* `jsonl`: one document per line: `id` (an integer, or a string of digits), `title`, `text`;
  optional `sections` (a list of `{"heading": str, "text": str}` or `{"heading": str,
  "paragraphs": [str]}`, optional `"level": int`) that follow `text`, and `links` (titles of
  the pages it links to). `text` is the lead: paragraphs are separated by blank lines (or, in
  a text without a blank line, one per line). Without `sections` the whole text is the lead.

Anything else (another XML root, a JSON line that is not an object with `text`, an empty file)
is a ValueError naming the file, raised when the pipeline is built.

Page ids. The first wiki's dumps keep their ids: they are one wiki's id space (enwiki comes
as 27 files), as before; another wiki's dumps move into a range of their own as text does,
and their links resolve within that wiki only (pipelines.wiki.inputs). A text file's ids are
shifted into a range of their own by the position of its glob in the comma list (`index`, from 0): `page_id = (index + 1) * TEXT_ID_STRIDE + id`.
So `--dump slice.xml.bz2,wiki_*.txt.bz2` gives the corpus ids 2e10 + id, which no dump id
(< 1e10) and no other input can reach; an id outside [0, TEXT_ID_STRIDE) is a bad record. Pair
sampling and the held-out split are seeded by page id, so ids depend on the order of the
comma list and nothing else: the same command writes the same pairs.

Bad records are counted and skipped (`pages_skipped_<reason>`: malformed, missing_id, bad_id,
missing_title, bad_title, no_text, invalid_utf8, empty, too_large, and duplicate_id: an id
already read in the same input, the first by file and line kept, pipelines.shared.unique_ids);
text outside any `<doc>` is counted as `text_stray_lines`; a file cut mid-document (or a damaged compressed tail) keeps
every complete document and counts `text_files_truncated`. So for every input
`pages_read = pages_kept + sum(pages_skipped_<reason>)` (text has no redirects).
"""

from __future__ import annotations

import collections
import html
import json
import logging
import re
from typing import Iterable, Iterator, Optional, Sequence

import apache_beam as beam

from twotower.core.contracts import ARTICLE_NAMESPACE, Page, Section, SiteInfo
from twotower.core.contracts import counters as C
from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.shared import shuffle as shuffle_lib
from twotower.pipelines.wiki import parse_pages, text_stream, titles
from twotower.pipelines.shared import unique_ids
from twotower.pipelines.wiki.inputs import (DOC_OPEN, JSONL, MEDIAWIKI, TEXT_ID_STRIDE,
                                       WIKIEXTRACTOR, WIKIEXTRACTOR_JSON, InputFile)

logger = logging.getLogger(__name__)

#: Text inputs carry no <siteinfo>: titles are normalised as on an English wiki.
TEXT_SITE = SiteInfo(dbname="text")
#: Level given to every heading of extracted text (WikiExtractor drops the levels).
HEADING_LEVEL = 2

_DOC_CLOSE = "</doc>"
_ATTR_ID = re.compile(r'\bid="([^"]*)"')
#: `title` is the last attribute in every WikiExtractor version and is not escaped, so it may
#: hold quotes: greedy up to the last one.
_ATTR_TITLE = re.compile(r'\btitle="(.*)"')
_ANCHOR = re.compile(r'<a\s+href="([^"]*)"\s*>(.*?)</a>', re.DOTALL)
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*\b[^<>\n]*>")
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
#: Words of a sentence, not of a heading: a short line holding one is a one-sentence paragraph.
_SENTENCE_WORDS = frozenset(
    "is was are were be been being has have had will would can could may might shall should "
    "did does do not he she it they his her its their him them we our you who which whom "
    "whose there".split())
_HEADING_MAX_WORDS = 10
_HEADING_MAX_CHARS = 80


# ---------------------------------------------------------------------------------------------
# Records -> Page.
# ---------------------------------------------------------------------------------------------


class _Skip(Exception):
  """A record that cannot become a Page: args = (reason, detail)."""


def is_heading(line: str) -> bool:
  """Whether a line of WikiExtractor text is a section heading.

  WikiExtractor writes a heading as a line of its own with a period appended ("Early life.")
  and only when text follows it; a paragraph is a line too. A heading is taken to be a line
  that ends with one period, is short (<= 10 words, <= 80 characters), starts with a capital,
  a digit or a quote, holds no ". " inside, and no word that marks a sentence ("is", "was",
  "has", ...). A one-sentence paragraph without such a word ("Second World War.") reads as a
  heading: it then starts a section instead of adding a sentence to one. Headings that end
  in "!" or "?" (no period appended) read as paragraphs.
  """
  if not line.endswith(".") or line.endswith("..") or len(line) > _HEADING_MAX_CHARS:
    return False
  words = line[:-1].split()
  if not words or len(words) > _HEADING_MAX_WORDS or ". " in line:
    return False
  if not (line[0].isupper() or line[0].isdigit() or line[0] in "\"'“("):
    return False
  return not any(w.strip(",;:\"'()“”").lower() in _SENTENCE_WORDS for w in words)


def _anchors(line: str) -> tuple[str, list[str]]:
  """A WikiExtractor line -> (text with anchors in place of `<a href>` links and other tags
  dropped, link targets as written)."""
  targets: list[str] = []
  if "<a" in line:
    def anchor(match: re.Match) -> str:
      targets.append(match.group(1))
      return match.group(2)
    line = _ANCHOR.sub(anchor, line)
  if "<" in line:
    line = _TAG.sub(" ", line)
  return line, targets


def wikiextractor_sections(lines: Iterable[str], title: str
                           ) -> tuple[list[tuple[str, list[str]]], list[str]]:
  """Lines of one WikiExtractor document (text or JSON) -> ([(heading, paragraphs)], link
  targets). The first section is the lead (heading ""); a first line equal to the title (the
  text format repeats it) is dropped."""
  cleaned: list[str] = []
  targets: list[str] = []
  for line in lines:
    if "&" in line:
      line = html.unescape(line)
    text, found = _anchors(line)
    targets.extend(found)
    text = _SPACE.sub(" ", text).strip()
    if text:
      cleaned.append(text)
  if cleaned and cleaned[0] == title.strip():
    cleaned = cleaned[1:]
  sections: list[tuple[str, list[str]]] = [("", [])]
  for i, text in enumerate(cleaned):
    # WikiExtractor writes a heading only before text: the last line is never one.
    if i + 1 < len(cleaned) and is_heading(text):
      sections.append((text[:-1], []))
    else:
      sections[-1][1].append(text)
  return sections, targets


def _plain_paragraphs(text: str) -> list[str]:
  """JSONL text -> paragraphs: blank-line separated (lines joined), else one per line."""
  blocks = _BLANK_LINE.split(text) if _BLANK_LINE.search(text) else text.split("\n")
  return [b for b in (_SPACE.sub(" ", block).strip() for block in blocks) if b]


def _jsonl_sections(record: dict
                    ) -> tuple[list[tuple[str, list[str]]], list[str], list[int]]:
  """A JSONL document's (sections, link targets, level of its headings)."""
  sections = [("", _plain_paragraphs(record["text"]))]
  levels = []
  extra = record.get("sections") or []
  if not isinstance(extra, list):
    raise _Skip(C.PageSkip.MALFORMED, "'sections' is not a list")
  for section in extra:
    if not isinstance(section, dict) or not isinstance(section.get("heading", ""), str):
      raise _Skip(C.PageSkip.MALFORMED, "a section is not an object with a 'heading' string")
    paragraphs = section.get("paragraphs")
    if paragraphs is None:
      paragraphs = _plain_paragraphs(section.get("text") or "")
    elif not (isinstance(paragraphs, list) and all(isinstance(p, str) for p in paragraphs)):
      raise _Skip(C.PageSkip.MALFORMED, "section 'paragraphs' is not a list of strings")
    level = section.get("level", HEADING_LEVEL)
    if not isinstance(level, int) or isinstance(level, bool) or not 1 <= level <= 6:
      raise _Skip(C.PageSkip.MALFORMED, f"section 'level' {level!r} is not in 1..6")
    levels.append(level)
    sections.append((_SPACE.sub(" ", section.get("heading", "")).strip(),
                     [_SPACE.sub(" ", p).strip() for p in paragraphs]))
  links = record.get("links") or []
  if not (isinstance(links, list) and all(isinstance(t, str) for t in links)):
    raise _Skip(C.PageSkip.MALFORMED, "'links' is not a list of titles")
  return sections, links, levels


def make_page(file: InputFile, raw_id: object, title: object,
              sections: Sequence[tuple[str, Sequence[str]]], link_targets: Iterable[str],
              levels: Sequence[int] = ()) -> Page:
  """The Page of one document of a text input; raises _Skip(reason, detail) for a bad one.
  `levels` are the headings' levels (default HEADING_LEVEL)."""
  if raw_id is None or (isinstance(raw_id, str) and not raw_id.strip()):
    raise _Skip(C.PageSkip.MISSING_ID, f"title={title!r}")
  try:
    if isinstance(raw_id, bool) or isinstance(raw_id, float):
      raise ValueError
    page_id = int(str(raw_id).strip())
  except ValueError:
    raise _Skip(C.PageSkip.BAD_ID, f"id={raw_id!r} title={title!r}") from None
  if not 0 <= page_id < TEXT_ID_STRIDE:
    raise _Skip(C.PageSkip.BAD_ID, f"id={raw_id!r} is not in [0, {TEXT_ID_STRIDE})")
  if not isinstance(title, str) or not title.strip():
    raise _Skip(C.PageSkip.MISSING_TITLE, f"id={raw_id}")
  normalized = titles.normalize_title(title, TEXT_SITE)
  if normalized is None:
    raise _Skip(C.PageSkip.BAD_TITLE, f"id={raw_id} title={title!r}")
  paragraphs = [p for _, ps in sections for p in ps]
  if text_stream.DAMAGE_MARK in title or any(text_stream.DAMAGE_MARK in p
                                              for p in paragraphs):
    raise _Skip(C.PageSkip.INVALID_UTF8, f"id={raw_id} title={title!r}")
  kept = [(heading, tuple(p for p in ps if p and _WORD.search(p))) for heading, ps in sections]
  if not any(ps for _, ps in kept):
    raise _Skip(C.PageSkip.EMPTY, f"id={raw_id} title={title!r}: no text")
  levels = list(levels) or [HEADING_LEVEL] * (len(kept) - 1)
  links: dict[str, None] = {}
  for target in link_targets:
    parsed = titles.parse_title(target, TEXT_SITE)
    if parsed is not None and not parsed.interwiki and parsed.namespace == ARTICLE_NAMESPACE:
      links[parsed.text] = None
  return Page(page_id=file.id_offset + page_id, title=normalized,
              sections=tuple(Section(heading, 0 if i == 0 else levels[i - 1], ps)
                             for i, (heading, ps) in enumerate(kept)),
              links=tuple(links), source=file.path)


def _lines(path: str, state: dict) -> Iterator[str]:
  """The file's lines (without "\\n"), damage marked (text_stream.DAMAGE_MARK); sets
  state["truncated"] on a broken compressed tail."""
  with text_stream.open_decompressed(path) as stream:
    rest = ""
    for chunk in text_stream.text_chunks(stream, path, state):
      lines = (rest + chunk).split("\n")
      rest = lines.pop()
      yield from lines
    if rest:
      state["partial_line"] = True  # no "\n" at the end: maybe cut mid-line
      yield rest


def _wikiextractor_records(file: InputFile, state: dict, counts: collections.Counter,
                           max_doc_bytes: int) -> Iterator[tuple[str, object]]:
  """("page", (header attrs, body lines)) per closed `<doc>`; ("skip", (reason, detail)) per
  broken one. A `<doc>` still open at the end of the file is cut: not a record."""
  attrs: Optional[str] = None
  body: list[str] = []
  size = 0
  for line in _lines(file.path, state):
    opened = DOC_OPEN.match(line) if line.startswith("<doc") else None
    if attrs is None:
      if opened:
        attrs, body, size = opened.group("attrs"), [], 0
      elif line.strip():
        counts[C.TEXT_STRAY_LINES] += 1
      continue
    if line.rstrip() == _DOC_CLOSE:
      if size > max_doc_bytes:
        yield "skip", (C.PageSkip.TOO_LARGE, f"{attrs.strip()}: more than {max_doc_bytes} bytes")
      else:
        yield "page", (attrs, body)
      attrs, body = None, []
    elif opened:  # A <doc> inside a <doc>: the first one was never closed.
      yield "skip", (C.PageSkip.MALFORMED, f"{attrs.strip()}: no </doc> before the next <doc>")
      attrs, body, size = opened.group("attrs"), [], 0
    else:
      size += len(line) + 1
      if size <= max_doc_bytes:  # Past the limit: only counted (skipped at </doc>).
        body.append(line)
  if attrs is not None:
    state.setdefault("truncated", f"the file ends inside <doc{attrs}>")
  elif state.get("partial_line"):  # WikiExtractor ends every file with "</doc>\n"
    state.setdefault("truncated", "the file ends mid-line, outside a <doc>")


def _wikiextractor_page(file: InputFile, record) -> Page:
  attrs, body = record
  raw_id = _ATTR_ID.search(attrs)
  title = _ATTR_TITLE.search(attrs)
  title = title.group(1) if title else None
  sections, targets = wikiextractor_sections(body, title or "")
  return make_page(file, raw_id.group(1) if raw_id else None, title, sections, targets)


def _json_records(file: InputFile, state: dict) -> Iterator[tuple[str, object]]:
  for number, line in enumerate(_lines(file.path, state), 1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except ValueError as e:
      yield "skip", (C.PageSkip.MALFORMED, f"line {number}: not JSON ({e})")
      continue
    if not isinstance(record, dict):
      yield "skip", (C.PageSkip.MALFORMED, f"line {number}: a {type(record).__name__}, not an "
                                           "object")
      continue
    yield "page", (number, record)


def _json_page(file: InputFile, numbered) -> Page:
  number, record = numbered
  text = record.get("text")
  if text is None:
    raise _Skip(C.PageSkip.NO_TEXT, f"line {number}: no 'text'")
  if not isinstance(text, str):
    raise _Skip(C.PageSkip.MALFORMED, f"line {number}: 'text' is a {type(text).__name__}")
  title = record.get("title")
  try:
    if file.format == WIKIEXTRACTOR_JSON:
      sections, targets = wikiextractor_sections(text.split("\n"),
                                                 title if isinstance(title, str) else "")
      levels: Sequence[int] = ()
    else:
      sections, targets, levels = _jsonl_sections(record)
    return make_page(file, record.get("id"), title, sections, targets, levels)
  except _Skip as skip:
    reason, detail = skip.args
    raise _Skip(reason, f"line {number}: {detail}") from None


def iter_text_pages(file: InputFile, counts: Optional[collections.Counter] = None,
                    max_doc_bytes: int = parse_pages.DEFAULT_MAX_PAGE_BYTES) -> Iterator[Page]:
  """Streams the Pages of one text file (WikiExtractor text or JSON, JSONL); never raises on
  damaged records.

  Args:
    file: the file, its format and its place in the comma list (`match_inputs`).
    counts: incremented per counter name (`text_files_read`, `text_files_truncated`,
      `text_stray_lines`, `pages_read`, `pages_skipped_<reason>`), if given.
    max_doc_bytes: longer documents are skipped (`pages_skipped_too_large`).
  """
  counts = counts if counts is not None else collections.Counter()
  counts[C.TEXT_FILES_READ] += 1
  state: dict = {}
  if file.format == WIKIEXTRACTOR:
    records, to_page = _wikiextractor_records(file, state, counts, max_doc_bytes), \
        _wikiextractor_page
  else:
    records, to_page = _json_records(file, state), _json_page
  last_good = "none"
  try:
    for kind, value in records:
      counts[C.PAGES_READ] += 1
      try:
        if kind == "skip":
          raise _Skip(*value)
        page = to_page(file, value)
      except _Skip as skip:
        reason, detail = skip.args
        counts[C.pages_skipped(reason)] += 1
        if reason != C.PageSkip.EMPTY:  # WikiExtractor writes many empty stubs: no log line.
          logger.warning("%s: skipping document (%s): %s", file.path, reason, detail)
        continue
      last_good = f"id={page.page_id - file.id_offset} title={page.title!r}"
      yield page
  except OSError as e:  # An unreadable file: counted, as a cut one.
    state["truncated"] = f"{type(e).__name__}: {e}"
  if state.get("truncated"):
    counts[C.TEXT_FILES_TRUNCATED] += 1
    logger.warning("%s: truncated (%s); kept every complete document up to %s", file.path,
                   state["truncated"], last_good)


class _ReadTextFileFn(beam.DoFn):
  """(file rank, InputFile) -> (page_id, ((file rank, position), Page)) of every good
  document (the place pipelines.shared.unique_ids keeps the first by); counters per file (and per
  input)."""

  def __init__(self, per_input: bool):
    self.per_input = per_input

  def process(self, ranked) -> Iterator:
    rank, file = ranked
    counts: collections.Counter = collections.Counter()
    links = 0
    try:
      for position, page in enumerate(iter_text_pages(file, counts)):
        links += len(page.links)
        yield page.page_id, ((rank, position), page)
    finally:
      if self.per_input:
        counts[C.per_input(file.index, C.PAGES_READ)] = counts[C.PAGES_READ]
        # 0 says why the input gives no WLP pair (text without links), stats.json keeps it.
        counts[C.per_input(file.index, C.LINKS_TOTAL)] = links
      for name, value in counts.items():
        if value or name.startswith("input"):
          beam_jobs.counter(name).inc(value)


class ReadTextPages(beam.PTransform):
  """PBegin -> PCollection[Page]: every good document of the given text files (InputFile of
  `match_inputs`), with ids in their input's range, one per id (pipelines.shared.unique_ids; the
  grouping also re-spreads them over workers: one big file is read by one worker; its pages
  are then split into sentences by all of them).

  Counters: text_files_read, text_files_truncated, text_stray_lines, pages_read,
  pages_skipped_<reason>, and with `per_input` input<k>_pages_read and input<k>_links_total
  (the outgoing links of its documents, before resolution: 0 for text without links).
  """

  def __init__(self, files: Sequence[InputFile], per_input: bool = False,
               shuffle: shuffle_lib.Shuffle = shuffle_lib.Shuffle()):
    super().__init__()
    if any(f.format == MEDIAWIKI for f in files):
      raise ValueError("ReadTextPages reads text inputs; dumps go to wikidump.ReadDumpPages")
    self.files = list(files)
    self.per_input = per_input
    self.shuffle = shuffle

  def expand(self, pbegin):
    logger.info("ReadTextPages: %d file(s): %s", len(self.files),
                ", ".join(f"{f.path} ({f.format})" for f in self.files))
    return (
        pbegin
        # (file rank, InputFile): one text file
        | "CreateTextFiles" >> beam.Create(list(enumerate(self.files)))
        | "SpreadTextFiles" >> beam.Reshuffle()
        # (page_id, (place, Page)): every good document, ids shifted into the input's range
        | "ReadDocuments" >> beam.ParDo(_ReadTextFileFn(self.per_input))
        # Page: the first document of each id (a repeated id is counted and skipped)
        | "OnePagePerId" >> unique_ids.KeepFirstPerId(self.shuffle))
