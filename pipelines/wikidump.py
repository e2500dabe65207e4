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
  replaced by DAMAGE_MARK (a noncharacter). A page whose title or text holds one is skipped
  and counted (`pages_skipped_invalid_utf8`); a dump's own U+FFFD characters are kept.
  MediaWiki stores valid UTF-8 only, so such bytes mean corruption, and the page's text is
  not trustworthy.
* A page without `<id>`, with a non-integer id, without `<ns>`, without `<title>` or without
  a `<revision><text>` element is counted (`pages_skipped_missing_id`, `..._bad_id`,
  `..._missing_ns`, `..._missing_title`, `..._no_text`) with a log line naming file and page.

`pages_read` counts every complete `<page>` element, in every namespace, including those the
reader skips; so `pages_read = pages_kept + pages_redirect + sum(pages_skipped_*)` once
pipelines.wikitext and pipelines.pairs have counted theirs.

Redirects: `<redirect title="..."/>` is recorded as `RawPage.redirect_title`. The tag is the
source of truth; `#REDIRECT` text without the tag (and `#đổi`, `#転送` with it) is decided by
the tag alone.
"""

from __future__ import annotations

import bz2
import codecs
import collections
import gzip
import logging
import os
import re
import xml.etree.ElementTree as ET
import zlib
from typing import BinaryIO, Iterator, Optional

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from twotower import io as tio
from twotower.contracts import RawPage, SiteInfo
from twotower.contracts import counters as C
from twotower.pipelines import shuffle as shuffle_lib

logger = logging.getLogger(__name__)

#: Characters of decompressed XML fed to the parser at a time.
CHUNK_BYTES = 1 << 20

_DECOMPRESSION_ERRORS = (EOFError, OSError, zlib.error, ValueError)
#: Characters XML 1.0 forbids; expat stops at them, so they become U+FFFD first.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_PAGE_LINE = re.compile(r"<page[\s>]")
#: What invalid bytes and XML-illegal characters become: a noncharacter that XML allows and
#: real text does not use, so a page that holds one is known to be damaged (unlike U+FFFD,
#: which a dump may hold legitimately).
DAMAGE_MARK = "\U0010fffe"
_UTF8_ERRORS = "twotower.mark_damage"


def _mark_damage(error: UnicodeDecodeError) -> tuple[str, int]:
  """Codec error handler: "replace", with DAMAGE_MARK."""
  return DAMAGE_MARK, error.end


codecs.register_error(_UTF8_ERRORS, _mark_damage)


def _open_decompressed(path: str) -> BinaryIO:
  """A binary stream of the decompressed file, chosen by suffix."""
  raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
  if path.endswith(".bz2"):
    return bz2.BZ2File(raw)
  if path.endswith(".gz"):
    return gzip.GzipFile(fileobj=raw)
  return raw


def _text_chunks(stream: BinaryIO, path: str, state: dict) -> Iterator[str]:
  """Decoded text chunks, damage marked; sets state["truncated"] on a broken tail."""
  decoder = codecs.getincrementaldecoder("utf-8")(errors=_UTF8_ERRORS)
  # read1, not read: a decompression error inside read() discards what that call had
  # already decompressed; read1 makes one raw read, so nothing before the damage is lost.
  read = getattr(stream, "read1", stream.read)
  while True:
    pieces, size = [], 0
    while size < CHUNK_BYTES and "truncated" not in state:
      try:
        piece = read(CHUNK_BYTES - size)
      except _DECOMPRESSION_ERRORS as e:
        state["truncated"] = f"decompression failed: {type(e).__name__}: {e}"
        break
      if not piece:
        break
      pieces.append(piece)
      size += len(piece)
    data = b"".join(pieces)
    final = not data
    text = decoder.decode(data, final=final)
    if _XML_ILLEGAL.search(text):
      text = _XML_ILLEGAL.sub(DAMAGE_MARK, text)
    if text:
      yield text
    if final:
      return


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


def _page_from_element(elem: ET.Element, path: str, site: SiteInfo) -> RawPage:
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
  return RawPage(page_id=page_id, title=title, namespace=namespace, text=text,
                 redirect_title=redirect, source=path, site=site)


def read_siteinfo(path: str) -> SiteInfo:
  """The `<siteinfo>` of a dump file (reads only the head of the file)."""
  with _open_decompressed(path) as stream:
    parser = ET.XMLPullParser(events=("end",))
    state: dict = {}
    for text in _text_chunks(stream, path, state):
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


def iter_dump_pages(path: str,
                    counts: Optional[collections.Counter] = None) -> Iterator[RawPage]:
  """Streams the RawPages of one dump file; never raises on damaged input.

  Args:
    path: a dump file on any Beam filesystem (`.xml`, `.xml.bz2`, `.xml.gz`).
    counts: incremented per counter name (`pages_read`, `dump_files_read`,
      `dump_files_truncated`, `dump_xml_errors`, `pages_skipped_<reason>`), if given.

  Yields:
    RawPage of every complete, well-formed `<page>` in file order, every namespace.
  """
  counts = counts if counts is not None else collections.Counter()
  counts[C.DUMP_FILES_READ] += 1
  try:
    stream = _open_decompressed(path)
  except (OSError, ValueError) as e:
    counts[C.DUMP_FILES_UNREADABLE] += 1
    logger.error("%s: cannot open: %s", path, e)
    return
  with stream:
    yield from _iter_stream(stream, path, counts)


def _iter_stream(stream: BinaryIO, path: str,
                 counts: collections.Counter) -> Iterator[RawPage]:
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

  for data in _text_chunks(stream, path, state):
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
        root, lines_fed = None, 0
      try:
        parser.feed(data)  # Errors surface from read_events, after the good events.
        for event, elem in parser.read_events():
          if event == "start":
            if root is None:
              root = elem
              name = _local(elem.tag)
              uri = elem.tag[:-len(name)]
              root_open = root_open or (f'<{name} xmlns="{uri[1:-1]}">' if uri else f"<{name}>")
            continue
          name = _local(elem.tag)
          if name == "page":
            counts[C.PAGES_READ] += 1
            if site is None:
              logger.warning("%s: <page> before <siteinfo>; using the default siteinfo", path)
              site = SiteInfo()
            try:
              page = _page_from_element(elem, path, site)
            except _Skip as skip:
              reason, detail = skip.args
              counts[C.pages_skipped(reason)] += 1
              logger.warning("%s: skipping page (%s): %s", path, reason, detail)
            else:
              if DAMAGE_MARK in page.text or DAMAGE_MARK in page.title:
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
  """path -> RawPage of every complete page of that dump file; counters per file, and per
  input (`input<k>_pages_read`) for the files of `input_index` (path -> comma-list position)."""

  def __init__(self, input_index: Optional[dict[str, int]] = None):
    self.input_index = input_index or {}

  def process(self, path: str) -> Iterator[RawPage]:
    counts: collections.Counter = collections.Counter()
    pages_read = tio.counter(C.PAGES_READ)
    reported = 0
    try:
      for page in iter_dump_pages(path, counts):
        # pages_read is reported as it goes (progress); the rest once per file.
        pages_read.inc(counts[C.PAGES_READ] - reported)
        reported = counts[C.PAGES_READ]
        yield page
    finally:
      if path in self.input_index:
        counts[C.per_input(self.input_index[path], C.PAGES_READ)] = counts[C.PAGES_READ]
      counts[C.PAGES_READ] -= reported
      for name, value in counts.items():
        if value:
          tio.counter(name).inc(value)


class ReadDumpPages(beam.PTransform):
  """PBegin -> PCollection[RawPage]: every page of every dump file matching a glob.

  The glob (comma-separated globs allowed) is expanded at pipeline construction with
  FileSystems (twotower.io.match_files), so a missing dump fails before anything runs. Files
  are spread over workers, read as streams, and the pages re-spread (Reshuffle, through
  `shuffle`: files on the local runner, pipelines.shuffle) so that the expensive parse of
  one big file is not tied to the worker that read it (as TFDS does).

  Counters: dump_files_read, dump_files_truncated, dump_xml_errors, pages_read,
  pages_skipped_<reason> (see the module docstring).
  """

  def __init__(self, file_pattern: str, shuffle: shuffle_lib.Shuffle = shuffle_lib.Shuffle(),
               input_index: Optional[dict[str, int]] = None):
    """`input_index` (path -> position in the --dump comma list; pipelines.textdocs): read
    exactly these files, and count `input<k>_pages_read` per input; `file_pattern` then only
    names them in log lines."""
    super().__init__()
    self.file_pattern = file_pattern
    self.shuffle = shuffle
    self.input_index = dict(input_index or {})

  def expand(self, pbegin):
    paths = (sorted(self.input_index, key=lambda path: (os.path.basename(path), path))
             if self.input_index else tio.match_files(self.file_pattern))
    logger.info("ReadDumpPages: %d file(s) match %s", len(paths), self.file_pattern)
    return (
        pbegin
        # str: one dump file path per element.
        | "CreateDumpPaths" >> beam.Create(paths)
        | "SpreadDumpFiles" >> beam.Reshuffle()
        # RawPage: every complete page of every file, all namespaces.
        | "ReadPages" >> beam.ParDo(_ReadDumpFileFn(self.input_index))
        | "SpreadPages" >> shuffle_lib.Reshuffle(self.shuffle))
