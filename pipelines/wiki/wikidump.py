"""Streaming reader of MediaWiki `pages-articles*.xml[.bz2|.gz]` dumps: dump files -> RawPage.

Each file is opened through Beam's FileSystems (so `gs://` works), decompressed by suffix
(`.bz2`: Python's bz2 module, which reads multi-stream dumps; `.gz`; anything else is plain
XML), decoded to text and fed in chunks to an `xml.etree.ElementTree.XMLPullParser`. Each
`<page>` element is turned into a `RawPage` and then cleared from the tree, so memory stays
flat in dump size. Tags are matched on local names, so any export version (0.3 ... 0.11,
whatever its namespace URI) reads the same.

Damage never loses the rest:

* A file cut mid-page (the XML ends early) or a corrupt/truncated bz2/gz tail (EOFError or
  OSError from the decompressor) yields every complete page before the cut, counts
  `dump_files_truncated` and logs a warning naming the file and the last good page.
* Malformed XML in the middle of a file (`dump_xml_errors`) loses only the page it is in:
  the reader re-synchronises on the next `<page>` line with a fresh parser.
* Invalid UTF-8 cannot reach the XML parser (expat rejects such bytes and would stop): the
  bytes are decoded first, invalid sequences and characters XML forbids (C0 controls)
  replaced by text_stream.DAMAGE_MARK (a noncharacter). A page whose title or text holds one is skipped
  and counted (`pages_skipped_invalid_utf8`); a dump's own U+FFFD characters are kept.
  MediaWiki stores valid UTF-8 only, so such bytes mean corruption, and the page's text is
  not trustworthy.
* A page without `<id>`, with a non-integer id, without `<ns>`, without `<title>` or without
  a `<revision><text>` element is counted (`pages_skipped_missing_id`, `..._bad_id`,
  `..._missing_ns`, `..._missing_title`, `..._no_text`) with a log line naming file and page.

Hostile input is bounded while it is read, so memory stays flat whatever the XML holds:

* a run of whitespace longer than text_stream.MAX_WHITESPACE_RUN characters (between tags or inside
  one's text) keeps its first text_stream.MAX_WHITESPACE_RUN (`dump_whitespace_capped` runs): 1.5 GB of
  whitespace between two tags (a 2 MB .gz) is read as 64 KB of it;
* a run of text between two tags longer than text_stream.MAX_TEXT_RUN characters (no page's wikitext is
  that long: ParsePages skips pages over 5 MB) is cut there (`dump_text_capped`), and the
  page holding it is skipped (`pages_skipped_too_large`);
* XML nested deeper than MAX_XML_DEPTH elements, or a page of more than MAX_PAGE_ELEMENTS
  elements, is skipped (`pages_skipped_too_deep`, `pages_skipped_too_large`) and the reader
  goes on at the next `<page>`, as after malformed XML.

Page ids: `iter_dump_pages(..., id_offset=k)` adds k to every id (pipelines.wiki.inputs gives each
input of a `--dump` list its own range); ids outside [0, inputs.TEXT_ID_STRIDE) are bad ids.
ReadDumpPages keeps one page per id: a repeated id in the files of one input is counted
(`pages_skipped_duplicate_id`) and skipped, the first by (file, position in it) kept.

`pages_read` counts every complete `<page>` element, in every namespace, including those the
reader skips; so `pages_read = pages_kept + pages_redirect + sum(pages_skipped_*)` once
pipelines.wiki.wikitext and pipelines.wiki.pairs have counted theirs.

Redirects: `<redirect title="..."/>` is recorded as `RawPage.redirect_title`. The tag is the
source of truth; `#REDIRECT` text without the tag (and `#đổi`, `#転送` with it) is decided by
the tag alone.
"""

from __future__ import annotations

import collections
import logging
import itertools
import os
import re
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, BinaryIO, Iterator, Optional, Sequence

import apache_beam as beam

from twotower.core.contracts import RawPage, SiteInfo
from twotower.core.contracts import counters as C
from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.shared import shuffle as shuffle_lib
from twotower.pipelines.wiki import text_stream
from twotower.pipelines.shared import unique_ids

if TYPE_CHECKING:  # (pipelines.wiki.inputs imports this module)
  from twotower.pipelines.wiki.inputs import InputFile

logger = logging.getLogger(__name__)

#: Characters fed to the parser before its events are read: what a skipped (too deep) page
#: can take with it at most, see _iter_stream.
FEED_CHARS = 1 << 16
#: Deepest element nesting a dump needs is 5 (mediawiki/page/revision/contributor/username).
MAX_XML_DEPTH = 32
#: Elements of one page (a pages-meta-history page has about 10 per revision).
MAX_PAGE_ELEMENTS = 200_000
#: Page ids a dump may hold: [0, PAGE_ID_LIMIT); pipelines.wiki.inputs gives every input of a
#: `--dump` list a range of this width (inputs.TEXT_ID_STRIDE).
PAGE_ID_LIMIT = 10_000_000_000
_PAGE_LINE = re.compile(r"<page[\s>]")


def _local(tag: str) -> str:
  return tag.rpartition("}")[2]


def _read_siteinfo_element(elem: ET.Element) -> SiteInfo:
  dbname, case, namespaces = "", "first-letter", []
  for child in elem:
    name = _local(child.tag)
    if name == "dbname":
      dbname = (child.text or "").strip()
    elif name == "case":
      case = (child.text or "").strip() or case
    elif name == "namespaces":
      for ns in child:
        try:
          namespaces.append((int(ns.get("key", "")), (ns.text or "").strip()))
        except ValueError:
          logger.warning("siteinfo: ignoring namespace with key %r", ns.get("key"))
  if not any(key == 0 for key, _ in namespaces):
    namespaces.append((0, ""))
  return SiteInfo(dbname=dbname, case=case, namespaces=tuple(sorted(namespaces)))


class _Skip(Exception):
  """A page that cannot become a RawPage: args = (reason, detail)."""


def _page_from_element(elem: ET.Element, path: str, site: SiteInfo,
                       id_offset: int = 0) -> RawPage:
  title = ns = page_id = redirect = None
  text = None
  for child in elem:
    name = _local(child.tag)
    if name == "title":
      title = child.text or ""
    elif name == "ns":
      ns = child.text
    elif name == "id":
      page_id = child.text
    elif name == "redirect":
      redirect = child.get("title", "")
    elif name == "revision":
      # pages-meta-history holds many revisions: the last one is the current text.
      for field in child:
        if _local(field.tag) == "text":
          text = None if field.get("deleted") is not None else (field.text or "")
  if page_id is None:
    raise _Skip(C.PageSkip.MISSING_ID, f"title={title!r}")
  try:
    page_id = int(page_id.strip())
  except ValueError:
    raise _Skip(C.PageSkip.BAD_ID, f"id={page_id!r} title={title!r}") from None
  if not 0 <= page_id < PAGE_ID_LIMIT:  # it would reach into another input's range
    raise _Skip(C.PageSkip.BAD_ID,
                f"id={page_id} is not in [0, {PAGE_ID_LIMIT}) title={title!r}")
  if ns is None:
    raise _Skip(C.PageSkip.MISSING_NS, f"id={page_id} title={title!r}")
  try:
    namespace = int(ns.strip())
  except ValueError:
    raise _Skip(C.PageSkip.BAD_NS, f"id={page_id} title={title!r} ns={ns!r}") from None
  if title is None or not title.strip():
    raise _Skip(C.PageSkip.MISSING_TITLE, f"id={page_id}")
  if text is None:
    raise _Skip(C.PageSkip.NO_TEXT, f"id={page_id} title={title!r}")
  if text_stream.CUT_MARK in text or text_stream.CUT_MARK in title:
    raise _Skip(C.PageSkip.TOO_LARGE, f"id={page_id} title={title!r}: a run of more than "
                                      f"{text_stream.MAX_TEXT_RUN} characters between two tags")
  return RawPage(page_id=id_offset + page_id, title=title, namespace=namespace, text=text,
                 redirect_title=redirect, source=path, site=site)


def read_siteinfo(path: str) -> SiteInfo:
  """The `<siteinfo>` of a dump file (reads only the head of the file)."""
  with text_stream.open_decompressed(path) as stream:
    parser = ET.XMLPullParser(events=("end",))
    state: dict = {}
    for text in text_stream.text_chunks(stream, path, state):
      try:
        parser.feed(text)
        for _, elem in parser.read_events():
          name = _local(elem.tag)
          if name == "siteinfo":
            return _read_siteinfo_element(elem)
          if name == "page":
            break
      except ET.ParseError:
        break
  logger.warning("%s: no <siteinfo>; using the defaults", path)
  return SiteInfo()


def iter_dump_pages(path: str, counts: Optional[collections.Counter] = None,
                    id_offset: int = 0) -> Iterator[RawPage]:
  """Streams the RawPages of one dump file; never raises on damaged input.

  Args:
    path: a dump file on any Beam filesystem (`.xml`, `.xml.bz2`, `.xml.gz`).
    counts: incremented per counter name (`pages_read`, `dump_files_read`,
      `dump_files_truncated`, `dump_xml_errors`, `dump_whitespace_capped`,
      `dump_text_capped`, `pages_skipped_<reason>`), if given.
    id_offset: added to every page id (the input's range, pipelines.wiki.inputs).

  Yields:
    RawPage of every complete, well-formed `<page>` in file order, every namespace.
  """
  counts = counts if counts is not None else collections.Counter()
  counts[C.DUMP_FILES_READ] += 1
  try:
    stream = text_stream.open_decompressed(path)
  except (OSError, ValueError) as e:
    counts[C.DUMP_FILES_UNREADABLE] += 1
    logger.error("%s: cannot open: %s", path, e)
    return
  with stream:
    yield from _iter_stream(stream, path, counts, id_offset)


def _pieces(stream: BinaryIO, path: str, state: dict,
            counts: collections.Counter) -> Iterator[str]:
  """The decoded text, hostile runs capped (text_stream.RunCaps), in pieces of FEED_CHARS."""
  caps = text_stream.RunCaps(counts)
  for chunk in text_stream.text_chunks(stream, path, state):
    chunk = caps(chunk)
    for start in range(0, len(chunk), FEED_CHARS):
      yield chunk[start:start + FEED_CHARS]


class _TooBig(Exception):
  """A page nested too deep or with too many elements: args = (reason, detail, page starts
  seen in the piece up to it)."""


def _iter_stream(stream: BinaryIO, path: str, counts: collections.Counter,
                 id_offset: int = 0) -> Iterator[RawPage]:
  state: dict = {}
  site: Optional[SiteInfo] = None
  last_good = "none (cut before the first page)"
  parser = ET.XMLPullParser(events=("start", "end"))
  root: Optional[ET.Element] = None
  root_open = ""           # The root start tag, fed to a fresh parser after an XML error.
  ended = False            # </mediawiki> seen.
  searching = False        # After an XML error: looking for the next "<page>".
  carry = ""               # Tail kept while searching, in case "<page>" spans chunks.
  lines_fed = 0            # Newlines fed to the current parser before `data`.
  depth = 0                # Open elements of the current parser (the root is 1).
  elements = 0             # Elements of the page being read.

  for data in _pieces(stream, path, state, counts):
    while data:
      if searching:
        data, carry = carry + data, ""
        match = _PAGE_LINE.search(data)
        if match is None:
          carry = data[-8:]
          break
        data, searching = data[match.start():], False
        parser = ET.XMLPullParser(events=("start", "end"))
        parser.feed(root_open or "<mediawiki>")
        root, lines_fed, depth, elements = None, 0, 0, 0
      try:
        parser.feed(data)  # Errors surface from read_events, after the good events.
        page_starts = 0
        for event, elem in parser.read_events():
          if event == "start":
            depth += 1
            elements += 1
            if depth == 2:
              elements = 1
              page_starts += _local(elem.tag) == "page"
            if depth > MAX_XML_DEPTH:
              raise _TooBig(C.PageSkip.TOO_DEEP, f"elements nested deeper than {MAX_XML_DEPTH}",
                            page_starts)
            if elements > MAX_PAGE_ELEMENTS:
              raise _TooBig(C.PageSkip.TOO_LARGE, f"more than {MAX_PAGE_ELEMENTS} elements",
                            page_starts)
            if root is None:
              root = elem
              name = _local(elem.tag)
              uri = elem.tag[:-len(name)]
              root_open = root_open or (f'<{name} xmlns="{uri[1:-1]}">' if uri else f"<{name}>")
            continue
          depth -= 1
          name = _local(elem.tag)
          if name == "page":
            counts[C.PAGES_READ] += 1
            if site is None:
              logger.warning("%s: <page> before <siteinfo>; using the default siteinfo", path)
              site = SiteInfo()
            try:
              page = _page_from_element(elem, path, site, id_offset)
            except _Skip as skip:
              reason, detail = skip.args
              counts[C.pages_skipped(reason)] += 1
              logger.warning("%s: skipping page (%s): %s", path, reason, detail)
            else:
              if text_stream.DAMAGE_MARK in page.text or text_stream.DAMAGE_MARK in page.title:
                counts[C.pages_skipped(C.PageSkip.INVALID_UTF8)] += 1
                logger.warning("%s: skipping page id=%d title=%r: invalid UTF-8 or XML "
                               "characters replaced", path, page.page_id, page.title)
              else:
                last_good = f"id={page.page_id} title={page.title!r}"
                yield page
            root.clear()
          elif name == "siteinfo":
            site = _read_siteinfo_element(elem)
            root.clear()
          elif elem is root:
            ended = True
        lines_fed += data.count("\n")
        data = ""
      except _TooBig as too_big:
        # The page is read (counted) and skipped; the reader goes on at the first "<page"
        # after the ones this piece opened before it (or in the next piece), with a fresh
        # parser: the tree built so far is dropped.
        reason, detail, page_starts = too_big.args
        counts[C.PAGES_READ] += 1
        counts[C.pages_skipped(reason)] += 1
        logger.warning("%s: skipping the page after %s (%s): %s", path, last_good, reason,
                       detail)
        following = next(itertools.islice(_PAGE_LINE.finditer(data), page_starts, None), None)
        data, carry = (data[following.start():], "") if following else ("", data[-8:])
        searching = True
      except ET.ParseError as e:
        # Malformed XML mid-file: drop the broken page, go on from the next "<page>".
        counts[C.DUMP_XML_ERRORS] += 1
        logger.warning("%s: malformed XML (%s) after page %s; resuming at the next <page>",
                       path, e, last_good)
        error_line = (e.position[0] - 1) if e.position else 0
        offset = 0
        if error_line >= lines_fed:
          offset = _nth_newline(data, error_line - lines_fed + 1)
        data, searching = data[offset:], True
  if state.get("truncated") or not ended:
    counts[C.DUMP_FILES_TRUNCATED] += 1
    logger.warning("%s: truncated (%s); kept every complete page up to %s", path,
                   state.get("truncated", "the XML ends before </mediawiki>"), last_good)


def _nth_newline(text: str, n: int) -> int:
  """Offset just after the n-th newline of `text` (n >= 1), or len(text)."""
  pos = -1
  for _ in range(n):
    pos = text.find("\n", pos + 1)
    if pos < 0:
      return len(text)
  return pos + 1


class _ReadDumpFileFn(beam.DoFn):
  """(file rank, InputFile) -> (page_id, ((file rank, position), RawPage)) of every complete
  page of that dump file, ids shifted into its input's range (the place that
  pipelines.shared.unique_ids keeps the first by); counters per file (and per input)."""

  def __init__(self, per_input: bool):
    self.per_input = per_input

  def process(self, ranked) -> Iterator:
    rank, file = ranked
    counts: collections.Counter = collections.Counter()
    pages_read = beam_jobs.counter(C.PAGES_READ)
    reported = 0
    try:
      for position, page in enumerate(iter_dump_pages(file.path, counts, file.id_offset)):
        # pages_read is reported as it goes (progress); the rest once per file.
        pages_read.inc(counts[C.PAGES_READ] - reported)
        reported = counts[C.PAGES_READ]
        yield page.page_id, ((rank, position), page)
    finally:
      if self.per_input:
        counts[C.per_input(file.index, C.PAGES_READ)] = counts[C.PAGES_READ]
      counts[C.PAGES_READ] -= reported
      for name, value in counts.items():
        if value:
          beam_jobs.counter(name).inc(value)


class ReadDumpPages(beam.PTransform):
  """PBegin -> PCollection[RawPage]: every page of the given dump files (InputFile of
  inputs.match_inputs, which matched them at pipeline construction, so that a missing dump
  fails before anything runs), with ids in their input's range. Files are spread over
  workers, read as streams, and the pages grouped by id (through `shuffle`: files on the
  local runner, pipelines.shared.shuffle), which keeps one page per id (pipelines.shared.unique_ids) and
  re-spreads them, so that the expensive parse of one big file is not tied to the worker
  that read it (as TFDS does).

  Counters: dump_files_read, dump_files_truncated, dump_xml_errors, pages_read,
  dump_whitespace_capped, dump_text_capped, pages_skipped_<reason> (see the module
  docstring), and with `per_input` input<k>_pages_read.
  """

  def __init__(self, files: Sequence[InputFile], per_input: bool = False,
               shuffle: shuffle_lib.Shuffle = shuffle_lib.Shuffle()):
    super().__init__()
    self.files = list(files)
    self.per_input = per_input
    self.shuffle = shuffle

  def expand(self, pbegin):
    # Ranked in twotower.core.files.ordered's order, the one every reader of several files reads
    # them in: the first page of a repeated id is kept by it.
    ranked = list(enumerate(sorted(self.files,
                                   key=lambda f: (os.path.basename(f.path), f.path))))
    logger.info("ReadDumpPages: %d file(s): %s", len(ranked),
                ", ".join(f.path for _, f in ranked))
    return (
        pbegin
        # (file rank, InputFile): one dump file
        | "CreateDumpFiles" >> beam.Create(ranked)
        | "SpreadDumpFiles" >> beam.Reshuffle()
        # (page_id, ((file rank, position), RawPage)): every complete page, all namespaces.
        | "ReadPages" >> beam.ParDo(_ReadDumpFileFn(self.per_input))
        # RawPage: the first page of each id
        | "OnePagePerId" >> unique_ids.KeepFirstPerId(self.shuffle))
