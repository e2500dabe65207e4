"""A SQuAD file's articles as a MediaWiki export, so that `twotower pairs` reads them like any
dump (pre-training on the QA articles' text, as the paper's Wikipedia corpus contains them).

Only the unlabelled text is written: one page per article, its paragraphs as wikitext
paragraphs; no questions or answers. Page ids start at SQUAD_PAGE_ID_BASE, far above those of
a real Wikipedia slice, so the two can be read together (`--dump slice.xml.bz2,squad.xml`):
its siteinfo names no wiki (no `<dbname>`), so `pairs` reads it as part of the run's first
wiki: one id and title space with the slice (pipelines.wiki.inputs).
"""

from __future__ import annotations

import json
import logging
from xml.sax.saxutils import escape

from twotower.core import files as tio

logger = logging.getLogger(__name__)

#: Page id of the first SQuAD article (the i-th gets SQUAD_PAGE_ID_BASE + i).
SQUAD_PAGE_ID_BASE = 1_000_000_000


def squad_articles_dump(squad_path: str, out_path: str) -> str:
  """Writes the SQuAD file's articles as a MediaWiki export (one page per article, its
  paragraphs as wikitext paragraphs) so that `twotower pairs` reads them like any dump.
  No questions or answers are written: only the unlabelled text, which Wikipedia (the paper's
  pre-training corpus) contains anyway. Returns `out_path`."""
  data = json.loads(tio.read_text(squad_path))
  pages = []
  for i, article in enumerate(data.get("data", [])):
    title = str(article.get("title", f"SQuAD article {i}")).replace("_", " ")
    paragraphs = [p.get("context", "").strip() for p in article.get("paragraphs", [])]
    text = "\n\n".join(p for p in paragraphs if p)
    if not text:
      continue
    pages.append(
        f"  <page>\n    <title>{escape(title)}</title>\n    <ns>0</ns>\n"
        f"    <id>{SQUAD_PAGE_ID_BASE + i}</id>\n    <revision>\n      <id>1</id>\n"
        f"      <model>wikitext</model>\n      <format>text/x-wiki</format>\n"
        f"      <text xml:space=\"preserve\">{escape(text)}</text>\n    </revision>\n"
        f"  </page>\n")
  xml = ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" '
         'xml:lang="en">\n  <siteinfo>\n    <sitename>SQuAD articles</sitename>\n'
         '    <case>first-letter</case>\n    <namespaces>\n'
         '      <namespace key="0" case="first-letter" />\n    </namespaces>\n  </siteinfo>\n'
         + "".join(pages) + "</mediawiki>\n")
  tio.write_text(out_path, xml)
  logger.info("wrote %d SQuAD articles as a dump: %s", len(pages), out_path)
  return out_path
