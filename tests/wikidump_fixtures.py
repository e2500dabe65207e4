"""Builds small MediaWiki export-0.10 dumps for tests: `write_dump(path, pages, site=...)`.

Usage:
  from wikidump_fixtures import DumpPage, write_dump
  write_dump(tmp_path / "x.xml.bz2", [DumpPage(1, "Paris", "'''Paris''' is ..."),
                                      DumpPage(2, "Paname", "#REDIRECT [[Paris]]",
                                               redirect="Paris")])

The suffix picks the compression (`.xml`, `.xml.bz2`, `.xml.gz`). Text is XML-escaped, so
pass wikitext as it is written on the wiki.
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import os
from typing import Iterable, Optional, Sequence
from xml.sax.saxutils import escape, quoteattr

EXPORT_NS = "http://www.mediawiki.org/xml/export-0.10/"

#: enwiki's namespace table (the part tests need).
ENWIKI_NAMESPACES: tuple[tuple[int, str], ...] = (
    (-2, "Media"), (-1, "Special"), (0, ""), (1, "Talk"), (2, "User"), (3, "User talk"),
    (4, "Wikipedia"), (5, "Wikipedia talk"), (6, "File"), (7, "File talk"),
    (8, "MediaWiki"), (9, "MediaWiki talk"), (10, "Template"), (11, "Template talk"),
    (12, "Help"), (13, "Help talk"), (14, "Category"), (15, "Category talk"),
    (100, "Portal"), (101, "Portal talk"), (828, "Module"), (829, "Module talk"),
)


@dataclasses.dataclass(frozen=True)
class DumpPage:
  """One `<page>`. `page_id`/`ns` may be any string (or None to omit the element) to build
  bad records; `text=None` omits `<text>`; `redirect` writes `<redirect title=...>`."""
  page_id: object
  title: Optional[str]
  text: Optional[str]
  ns: object = 0
  redirect: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class DumpSite:
  dbname: str = "testwiki"
  case: str = "first-letter"
  namespaces: tuple[tuple[int, str], ...] = ENWIKI_NAMESPACES
  export_ns: str = EXPORT_NS
  version: str = "0.10"


def page_xml(page: DumpPage) -> str:
  parts = ["  <page>\n"]
  if page.title is not None:
    parts.append(f"    <title>{escape(page.title)}</title>\n")
  if page.ns is not None:
    parts.append(f"    <ns>{page.ns}</ns>\n")
  if page.page_id is not None:
    parts.append(f"    <id>{page.page_id}</id>\n")
  if page.redirect is not None:
    parts.append(f"    <redirect title={quoteattr(page.redirect)} />\n")
  parts.append("    <revision>\n      <id>1000</id>\n"
               "      <timestamp>2020-01-01T00:00:00Z</timestamp>\n"
               "      <model>wikitext</model>\n      <format>text/x-wiki</format>\n")
  if page.text is not None:
    size = len(page.text.encode("utf-8"))
    parts.append(f'      <text bytes="{size}" xml:space="preserve">{escape(page.text)}</text>\n')
  parts.append("    </revision>\n  </page>\n")
  return "".join(parts)


def dump_xml(pages: Iterable[DumpPage], site: DumpSite = DumpSite()) -> str:
  """The whole dump as one string."""
  head = [
      f'<mediawiki xmlns="{site.export_ns}" '
      'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
      f'version="{site.version}" xml:lang="en">\n',
      "  <siteinfo>\n    <sitename>Testpedia</sitename>\n"
      f"    <dbname>{site.dbname}</dbname>\n    <case>{site.case}</case>\n"
      "    <namespaces>\n",
  ]
  for key, name in site.namespaces:
    if name:
      head.append(f'      <namespace key="{key}" case="{site.case}">{escape(name)}</namespace>\n')
    else:
      head.append(f'      <namespace key="{key}" case="{site.case}" />\n')
  head.append("    </namespaces>\n  </siteinfo>\n")
  return "".join(head) + "".join(page_xml(p) for p in pages) + "</mediawiki>\n"


def write_bytes(path: "os.PathLike | str", data: bytes) -> str:
  """Writes `data` (uncompressed XML bytes), compressed by the path's suffix."""
  path = os.fspath(path)
  if path.endswith(".bz2"):
    data = bz2.compress(data)
  elif path.endswith(".gz"):
    data = gzip.compress(data)
  with open(path, "wb") as f:
    f.write(data)
  return path


def write_dump(path: "os.PathLike | str", pages: Sequence[DumpPage],
               site: DumpSite = DumpSite()) -> str:
  """Writes a dump of `pages` to `path` (compression by suffix); returns the path."""
  return write_bytes(path, dump_xml(pages, site).encode("utf-8"))


# Articles with a lead, a body section and links, for the pair pipeline's tests.

LEAD = ("{name} is a test page about {topic} with several words in each sentence. "
        "It was written to exercise the pair pipeline of this project. "
        "The third sentence of the lead mentions {topic} once more for good measure.")
BODY = ("The history of {topic} is long and has many parts worth a sentence. "
        "Scholars of {topic} disagree about nearly all of it, as scholars do. "
        "A later period saw {topic} spread to many other places in the world.")


def article(page_id: int, title: str, links: str) -> DumpPage:
  topic = title.lower()
  text = (f"{{{{Infobox thing|name={title}}}}}\n'''{LEAD.format(name=title, topic=topic)}''' "
          f"{links}\n\n{LEAD.format(name='This page', topic=topic + ' again')}\n\n"
          f"== History ==\n{BODY.format(topic=topic)}\n\n{BODY.format(topic=topic + ' lore')}\n"
          "[[Category:Tests]]")
  return DumpPage(page_id, title, text)


def many_pages(n: int) -> list[DumpPage]:
  """n linked articles and a few redirects: every page links to the next three."""
  names = [f"Topic {i}" for i in range(n)]
  pages = [article(i + 1, names[i], " ".join(f"[[{names[(i + k) % n]}]]" for k in (1, 2, 3)))
           for i in range(n)]
  pages += [DumpPage(1000 + i, f"Alias {i}", "#REDIRECT", redirect=names[i]) for i in range(5)]
  return pages
