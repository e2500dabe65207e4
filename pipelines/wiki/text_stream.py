"""An input file as decoded text: decompressed by suffix (.bz2, .gz, plain; any Beam
filesystem), read in chunks, invalid UTF-8 and XML-illegal characters marked (DAMAGE_MARK) so
that a damaged record is known, a broken compressed tail reported rather than raised, and
hostile runs capped (RunCaps: whitespace runs, text runs between tags). The dump reader
(pipelines.wiki.wikidump) and the extracted-text readers (pipelines.wiki.textdocs, inputs' format
sniffing) share it.
"""

from __future__ import annotations

import bz2
import codecs
import collections
import gzip
import re
import zlib
from typing import BinaryIO, Iterator

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from twotower.core.contracts import counters as C

#: Characters of decompressed text read and decoded at a time.
CHUNK_BYTES = 1 << 20
#: Longest run of whitespace kept; the rest of a longer run is dropped while reading.
MAX_WHITESPACE_RUN = 1 << 16
#: Longest run of text between two tags kept (characters); longer: the page is too large.
MAX_TEXT_RUN = 8 << 20
#: Put where a text run was cut: a noncharacter (as DAMAGE_MARK), so the page is known cut.
CUT_MARK = "\U0010ffff"
_WHITESPACE = " \t\r\n"
#: A run of whitespace longer than MAX_WHITESPACE_RUN, matched from its first character only
#: (the look-behind), so that the scan stays linear.
_LONG_WHITESPACE = re.compile(r"(?<![ \t\r\n])[ \t\r\n]{%d,}" % (MAX_WHITESPACE_RUN + 1))

DECOMPRESSION_ERRORS = (EOFError, OSError, zlib.error, ValueError)
#: Characters XML 1.0 forbids; expat stops at them, so they become U+FFFD first.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
#: What invalid bytes and XML-illegal characters become: a noncharacter that XML allows and
#: real text does not use, so a page that holds one is known to be damaged (unlike U+FFFD,
#: which a dump may hold legitimately).
DAMAGE_MARK = "\U0010fffe"
_UTF8_ERRORS = "twotower.mark_damage"


def _mark_damage(error: UnicodeDecodeError) -> tuple[str, int]:
  """Codec error handler: "replace", with DAMAGE_MARK."""
  return DAMAGE_MARK, error.end


codecs.register_error(_UTF8_ERRORS, _mark_damage)


def open_decompressed(path: str) -> BinaryIO:
  """A binary stream of the decompressed file, chosen by suffix."""
  raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
  if path.endswith(".bz2"):
    return bz2.BZ2File(raw)
  if path.endswith(".gz"):
    return gzip.GzipFile(fileobj=raw)
  return raw


def text_chunks(stream: BinaryIO, path: str, state: dict) -> Iterator[str]:
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
      except DECOMPRESSION_ERRORS as e:
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


class RunCaps:
  """Decoded text chunks -> the same text with every whitespace run cut to
  MAX_WHITESPACE_RUN characters and every run of text between tags cut to MAX_TEXT_RUN
  (CUT_MARK put where it was cut); runs that span chunks are followed across them."""

  def __init__(self, counts: collections.Counter):
    self.counts = counts
    self.space = 0       # length of the whitespace run the last chunk ended in
    self.space_cut = False  # that run was already cut (and counted)
    self.text = 0        # characters since the last "<"
    self.text_cut = False

  def __call__(self, chunk: str) -> str:
    return self._cap_text(self._cap_whitespace(chunk))

  def _cap_whitespace(self, chunk: str) -> str:
    rest = chunk.lstrip(_WHITESPACE)
    lead = len(chunk) - len(rest)
    if self.space and lead:  # The run the last chunk ended in goes on.
      keep = max(0, min(lead, MAX_WHITESPACE_RUN - self.space))
      if keep < lead:
        if not self.space_cut:
          self.counts[C.DUMP_WHITESPACE_CAPPED] += 1
        self.space_cut = True
        chunk = chunk[:keep] + rest
      if not rest:
        self.space += keep
        return chunk
    elif not rest:  # A chunk of whitespace that starts a run.
      self.space_cut = False
      if lead > MAX_WHITESPACE_RUN:
        self.counts[C.DUMP_WHITESPACE_CAPPED] += 1
        self.space_cut = True
        chunk = chunk[:MAX_WHITESPACE_RUN]
      self.space = len(chunk)
      return chunk
    if len(chunk) > MAX_WHITESPACE_RUN:
      chunk, cut = _LONG_WHITESPACE.subn(lambda m: m.group()[:MAX_WHITESPACE_RUN], chunk)
      if cut:
        self.counts[C.DUMP_WHITESPACE_CAPPED] += cut
    tail = len(chunk) - len(chunk.rstrip(_WHITESPACE))
    self.space_cut = tail >= MAX_WHITESPACE_RUN
    self.space = tail
    return chunk

  def _cap_text(self, chunk: str) -> str:
    # No run inside one chunk can pass the cap (MAX_TEXT_RUN > CHUNK_BYTES): only the run
    # that goes on from the last chunk into this one's head can.
    first = chunk.find("<")
    head = len(chunk) if first < 0 else first
    if self.text + head > MAX_TEXT_RUN:
      keep = max(0, MAX_TEXT_RUN - self.text)
      if not self.text_cut:
        self.counts[C.DUMP_TEXT_CAPPED] += 1
        chunk = chunk[:keep] + CUT_MARK + chunk[head:]
        self.text_cut = True
      else:
        chunk = chunk[head:]
      self.text = MAX_TEXT_RUN
    else:
      self.text += head
    if first >= 0:
      self.text = len(chunk) - chunk.rfind("<") - 1
      self.text_cut = False
    return chunk
