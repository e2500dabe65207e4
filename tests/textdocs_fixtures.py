"""Builds small extracted-text inputs for tests, as WikiExtractor and JSONL writers do.

Usage:
  from textdocs_fixtures import Doc, write_wikiextractor, write_wikiextractor_json, write_jsonl
  docs = [Doc(12, "Paris", ["Paris is ...", "It is ..."], {"History": ["Long ago ..."]})]
  write_wikiextractor(tmp_path / "wiki_00.bz2", docs)       # <doc id url title> text
  write_wikiextractor_json(tmp_path / "wiki_00.json", docs)  # --json
  write_jsonl(tmp_path / "docs.jsonl.gz", [jsonl_record(d) for d in docs])

The suffix picks the compression (wikidump_fixtures.write_bytes). Paragraph text may hold
`[[Target|anchor]]` / `[[Target]]` marks: written as `<a href="Target">anchor</a>` with
`links=True` (WikiExtractor's --links), as the bare anchor otherwise.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
import urllib.parse
from typing import Iterable, Sequence

from wikidump_fixtures import write_bytes

_LINK = re.compile(r"\[\[([^|\]]+)(?:\|([^\]]+))?\]\]")


@dataclasses.dataclass(frozen=True)
class Doc:
  """A document: lead paragraphs, then (heading, paragraphs) sections."""
  doc_id: object
  title: str
  lead: Sequence[str]
  sections: Sequence[tuple[str, Sequence[str]]] = ()


def _render(text: str, links: bool, escape: bool) -> str:
  def link(match: re.Match) -> str:
    target, anchor = match.group(1), match.group(2) or match.group(1)
    anchor = html.escape(anchor, quote=False) if escape else anchor
    return f'<a href="{urllib.parse.quote(target)}">{anchor}</a>' if links else anchor
  pieces, last = [], 0
  for match in _LINK.finditer(text):
    plain = text[last:match.start()]
    pieces += [html.escape(plain, quote=False) if escape else plain, link(match)]
    last = match.end()
  tail = text[last:]
  pieces.append(html.escape(tail, quote=False) if escape else tail)
  return "".join(pieces)


def wikiextractor_lines(doc: Doc, links: bool = False, escape: bool = True) -> list[str]:
  """The text lines WikiExtractor writes for a document (no title line): paragraphs, and a
  heading with a period appended before each section's paragraphs."""
  lines = [_render(p, links, escape) for p in doc.lead]
  for heading, paragraphs in doc.sections:
    lines.append(heading if heading[-1:] in "!?" else heading + ".")
    lines += [_render(p, links, escape) for p in paragraphs]
  return lines


def wikiextractor_text(docs: Iterable[Doc], links: bool = False) -> str:
  """WikiExtractor's default output (`<doc id url title>`, the title line, a blank line, the
  lines, `</doc>`), HTML-escaped as it writes it."""
  out = []
  for doc in docs:
    out.append(f'<doc id="{doc.doc_id}" url="https://en.wikipedia.org/wiki?curid={doc.doc_id}" '
               f'title="{doc.title}">\n{doc.title}\n\n')
    out.append("\n".join(wikiextractor_lines(doc, links)))
    out.append("\n</doc>\n")
  return "".join(out)


def write_wikiextractor(path, docs: Iterable[Doc], links: bool = False) -> str:
  return write_bytes(path, wikiextractor_text(docs, links).encode("utf-8"))


def write_wikiextractor_json(path, docs: Iterable[Doc], links: bool = False) -> str:
  """WikiExtractor `--json`: one object per line, id/revid/url/title/text."""
  lines = [json.dumps({"id": str(d.doc_id), "revid": "1",
                       "url": f"https://en.wikipedia.org/wiki?curid={d.doc_id}",
                       "title": d.title,
                       "text": "\n".join(wikiextractor_lines(d, links, escape=False))})
           for d in docs]
  return write_bytes(path, ("\n".join(lines) + "\n").encode("utf-8"))


def jsonl_record(doc: Doc, links: bool = True) -> dict:
  """A JSONL document: text = the lead (blank-line separated), sections, links."""
  def plain(text):
    return _LINK.sub(lambda m: m.group(2) or m.group(1), text)
  targets = [m.group(1) for p in list(doc.lead) + [p for _, ps in doc.sections for p in ps]
             for m in _LINK.finditer(p)]
  record = {"id": doc.doc_id, "title": doc.title,
            "text": "\n\n".join(plain(p) for p in doc.lead)}
  if doc.sections:
    record["sections"] = [{"heading": h, "paragraphs": [plain(p) for p in ps]}
                          for h, ps in doc.sections]
  if links and targets:
    record["links"] = targets
  return record


def write_jsonl(path, records: Iterable[object]) -> str:
  """One JSON value per line; a str record is written as it is (to build bad lines)."""
  lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in records]
  return write_bytes(path, ("\n".join(lines) + "\n").encode("utf-8"))


# Documents with a lead, a body section and links, for the pair pipeline's tests: each links
# to the next two (by title), as wikidump_fixtures.many_pages does for dumps.

LEAD = ("{title} is a test document about {topic} with several words in each sentence. "
        "It was written to exercise the text readers of this project. "
        "The third sentence of the lead mentions {topic} once more for good measure.")
BODY = ("The history of {topic} is long and has many parts worth a sentence. "
        "Scholars of {topic} disagree about nearly all of it, as scholars do & argue. "
        "A later period saw {topic} spread to many other places in the world.")


def linked_docs(n: int, first_id: int = 1, prefix: str = "Subject") -> list[Doc]:
  names = [f"{prefix} {i}" for i in range(n)]
  docs = []
  for i, name in enumerate(names):
    topic = name.lower()
    refs = " ".join(f"See [[{names[(i + k) % n]}]]." for k in (1, 2))
    docs.append(Doc(first_id + i, name,
                    [LEAD.format(title=name, topic=topic) + " " + refs,
                     LEAD.format(title="This document", topic=topic + " again")],
                    [("Early history", [BODY.format(topic=topic)]),
                     ("Later years", [BODY.format(topic=topic + " lore")])]))
  return docs
