"""Which files a `--dump` comma list names, and in which format: MediaWiki XML dumps,
WikiExtractor output (text or `--json`) or JSONL documents, sniffed from the first bytes of
each file (pipelines.wiki.textdocs reads the text formats; pipelines.wiki.wikidump the dumps). Also the
id space of each input, so that several inputs in one run cannot collide:

* a dump belongs to the wiki its `<siteinfo>` names (`<dbname>`: enwiki, ltgwiki). The dumps
  of the first wiki of the list (and dumps that name none) keep their page ids (space 0): a
  run over one wiki (enwiki comes as 27 files; the grid adds the SQuAD articles as an enwiki
  dump, pipelines.reqa.squad_dump) writes the wiki's own ids, as it always did;
* every other wiki moves into a range of its own, that of the first glob naming it: ids of
  the glob at position k become (k + 1) * TEXT_ID_STRIDE + id (space k + 1);
* a text input (WikiExtractor, JSONL) too, by its own position, at position 0 as well.

Titles resolve per wiki (pipelines.wiki.links): the links of a second wiki's pages reach only
its own pages. Extracted text carries no wiki name: it is read as text of the first wiki,
whose titles (and every text input's) its links resolve against, as before.
Two id spaces may not meet in one glob (a glob of two other wikis, or of text and another
wiki's dump): that is refused, naming the glob.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Optional, Sequence

from twotower.core import files as tio
from twotower.core.contracts import counters as C
from twotower.pipelines.wiki import text_stream, wikidump

FORMATS = ("mediawiki", "wikiextractor", "wikiextractor-json", "jsonl")
MEDIAWIKI, WIKIEXTRACTOR, WIKIEXTRACTOR_JSON, JSONL = FORMATS

#: Width of each text input's page-id range (ids of input i: (i + 1) * stride + id). 1e10 is
#: far above any wiki's page ids, and (index + 1) * 1e10 << 20 fits passage_uid's int64 for
#: up to 800 inputs.
TEXT_ID_STRIDE = wikidump.PAGE_ID_LIMIT
#: Bytes of a file read to decide its format.
SNIFF_BYTES = 1 << 16

_XML_DECLARATION = re.compile(r"<\?xml[^>]*\?>\s*(?:<!--.*?-->\s*)*", re.DOTALL)
_XML_ROOT = re.compile(r"<([A-Za-z_][\w.:-]*)")
#: The opening line of a WikiExtractor document (pipelines.wiki.textdocs reads its attributes).
DOC_OPEN = re.compile(r"<doc\b(?P<attrs>[^\n]*)>\s*$")


@dataclasses.dataclass(frozen=True)
class InputFile:
  """One file of a `--dump` comma list: its format and the position of its glob."""
  path: str
  format: str
  index: int     # position of the glob that matched it in the comma list, from 0
  pattern: str   # that glob
  wiki: str = ""  # a dump's <dbname> ("" for text, or a dump that names none)
  id_offset: int = -1  # added to its page ids (module docstring); -1: by position
  size: int = 0  # bytes as stored (compressed or not), from the match

  def __post_init__(self):
    if self.id_offset < 0:  # alone (tests, callers outside match_inputs): by position
      offset = 0 if self.format == MEDIAWIKI else (self.index + 1) * TEXT_ID_STRIDE
      object.__setattr__(self, "id_offset", offset)


def own_title_spaces(files: list[InputFile]) -> frozenset[int]:
  """The id spaces whose titles resolve apart: those of wikis other than the first."""
  return frozenset(id_space(f.id_offset) for f in files
                   if f.format == MEDIAWIKI and f.id_offset)


def id_space(page_id: int) -> int:
  """The id space of a page id: 0 for the first wiki's dumps, k + 1 for the input at k."""
  return page_id // TEXT_ID_STRIDE


def input_of(page_id: int) -> Optional[int]:
  """The comma-list position of the input a page id comes from (for another wiki's dumps:
  the first glob naming the wiki); None for the pages of the first wiki's dumps (they keep
  the dump's ids)."""
  space = id_space(page_id)
  return space - 1 if space > 0 else None


def per_input_counter(page_id: int, name: str) -> str:
  """`input<k>_<name>` for a page of text input k, `mediawiki_<name>` for a dump page."""
  index = input_of(page_id)
  return C.MEDIAWIKI_PREFIX + name if index is None else C.per_input(index, name)

# ---------------------------------------------------------------------------------------------
# Which files, in which format.
# ---------------------------------------------------------------------------------------------


def _head(path: str) -> str:
  """The first SNIFF_BYTES of the decompressed file, decoded leniently."""
  try:
    with text_stream.open_decompressed(path) as stream:
      read = getattr(stream, "read1", stream.read)
      pieces, size = [], 0
      while size < SNIFF_BYTES:
        try:
          piece = read(SNIFF_BYTES - size)
        except text_stream.DECOMPRESSION_ERRORS as e:
          if not pieces:
            raise ValueError(f"{path}: cannot be decompressed ({type(e).__name__}: {e}); "
                             "is it the file you meant?") from None
          break
        if not piece:
          break
        pieces.append(piece)
        size += len(piece)
  except OSError as e:
    raise ValueError(f"{path}: cannot be read: {e}") from None
  return b"".join(pieces).decode("utf-8", errors="replace")


def sniff_format(path: str) -> str:
  """The format of a file (one of FORMATS) from its first bytes; ValueError naming the file
  and saying what was found when it is none of them."""
  head = _head(path).lstrip("\ufeff \t\r\n")
  if not head:
    raise ValueError(f"{path}: empty file; give a MediaWiki dump, WikiExtractor output or "
                     "JSONL documents")
  first_lines = [line for line in head.split("\n")[:-1] if line.strip()][:5]
  if any(DOC_OPEN.match(line) for line in first_lines):
    return WIKIEXTRACTOR  # (a stray line or two before the first <doc> is counted, not fatal)
  if head.startswith("<"):
    body = _XML_DECLARATION.sub("", head, count=1) if head.startswith("<?xml") else head
    root = _XML_ROOT.match(body)
    name = root.group(1) if root else body[:20]
    if name.rpartition(":")[2] == "mediawiki":
      return MEDIAWIKI
    raise ValueError(
        f"{path}: an XML file whose root is <{name}>, not a MediaWiki export (<mediawiki>, a "
        "pages-articles*.xml dump) nor WikiExtractor output (<doc ...>)")
  if head.startswith("{"):
    line = head.split("\n", 1)[0]
    try:
      record = json.loads(line)
    except ValueError:
      raise ValueError(f"{path}: starts with '{{' but its first line is not a JSON object; "
                       "JSONL documents need one object per line") from None
    if not isinstance(record, dict) or "text" not in record:
      keys = sorted(record) if isinstance(record, dict) else type(record).__name__
      raise ValueError(f"{path}: JSON lines without a 'text' field (first line: {keys}); "
                       "JSONL documents need 'id', 'title' and 'text'")
    return WIKIEXTRACTOR_JSON if "url" in record else JSONL
  raise ValueError(f"{path}: not a MediaWiki dump, WikiExtractor output or JSONL documents "
                   f"(it starts with {head[:40]!r})")


def match_inputs(pattern: str) -> list[InputFile]:
  """Every file of a `--dump` comma list of globs, with its format; errors (naming the glob
  or file, and what to do) for a glob that matches nothing, a directory, a file matched by
  two globs, or a file in no known format."""
  entries = [p.strip() for p in pattern.split(",") if p.strip()]
  if not entries:
    raise ValueError(f"--dump {pattern!r} names no file")
  files: list[InputFile] = []
  seen: dict[str, str] = {}
  for index, entry in enumerate(entries):
    if tio.is_local(entry) and os.path.isdir(entry):
      raise ValueError(f"{entry} is a directory; give the files in it as a glob, e.g. "
                       f"--dump '{entry.rstrip('/')}/*.bz2'")
    paths = tio.match_files(entry, missing_ok=True)
    if not paths:
      what = f"(one of the inputs of --dump {pattern!r})" if len(entries) > 1 else ""
      raise FileNotFoundError(f"no file matches {entry!r} {what}".rstrip())
    sizes = _sizes(entry, paths)
    for path in paths:
      if tio.is_local(path) and os.path.isdir(path):
        raise ValueError(f"{path} (matched by {entry!r}) is a directory; make the glob match "
                         "files only")
      if path in seen:
        raise ValueError(f"{path} is matched by two inputs, {seen[path]!r} and {entry!r}: it "
                         "would be read twice")
      seen[path] = entry
      fmt = sniff_format(path)
      wiki = wikidump.read_siteinfo(path).dbname if fmt == MEDIAWIKI else ""
      files.append(InputFile(path, fmt, index, entry, wiki, size=sizes.get(path, 0)))
  return _with_id_offsets(files)


def with_absolute_paths(files: Sequence[InputFile]) -> list[InputFile]:
  """`files` with local paths made absolute (tio.absolute): the list a job's workers read,
  which may run in another working directory (a worker pool)."""
  return [dataclasses.replace(f, path=tio.absolute(f.path)) for f in files]


def _sizes(entry: str, paths: Sequence[str]) -> dict[str, int]:
  """The matched files' sizes in bytes (they size the disk shuffle): local ones from the disk,
  remote ones from one listing of their glob (not one request per file)."""
  if tio.is_local(entry):
    return {path: os.path.getsize(path) for path in paths if not os.path.isdir(path)}
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  return {m.path: m.size_in_bytes for m in FileSystems.match([entry])[0].metadata_list}


def _with_id_offsets(files: list[InputFile]) -> list[InputFile]:
  """Each file with its id offset (module docstring); a ValueError naming the glob where two
  id spaces would meet."""
  first_wiki = next((f.wiki for f in files if f.format == MEDIAWIKI and f.wiki), "")
  first_glob: dict[str, int] = {}
  placed, owners = [], {}
  for f in files:
    if f.format != MEDIAWIKI:
      offset, owner = (f.index + 1) * TEXT_ID_STRIDE, "extracted text"
    elif f.wiki in ("", first_wiki):
      offset, owner = 0, f"the {first_wiki or 'first'} dump"
    else:
      offset = (first_glob.setdefault(f.wiki, f.index) + 1) * TEXT_ID_STRIDE
      owner = f"the {f.wiki} dump"
    if owners.setdefault(offset, owner) != owner:
      raise ValueError(f"{f.pattern!r} holds {owners[offset]} and {owner} (or two wikis): "
                       "each needs an id range of its own; give them as separate inputs of "
                       "--dump")
    placed.append(dataclasses.replace(f, id_offset=offset))
  return placed
