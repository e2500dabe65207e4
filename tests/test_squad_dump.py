"""A SQuAD file's articles as a MediaWiki export: one page per article, read back by the dump
reader like any dump, with no question or answer in it."""

from __future__ import annotations

import json

from twotower.pipelines.reqa import squad_dump
from twotower.pipelines.wiki import wikidump


def test_articles_become_pages_the_dump_reader_reads(tmp_path):
  squad = tmp_path / "squad.json"
  squad.write_text(json.dumps({"data": [
      {"title": "AT&T_Inc", "paragraphs": [
          {"context": "AT&T is a <company>.", "qas": [{"id": "q", "question": "What is AT&T?",
                                                       "answers": []}]},
          {"context": "  It is in Dallas.  ", "qas": []}]},
      {"title": "Empty", "paragraphs": [{"context": " ", "qas": []}]},
      {"title": "Paris", "paragraphs": [{"context": "Paris is in France.", "qas": []}]},
  ]}), encoding="utf-8")
  path = squad_dump.squad_articles_dump(str(squad), str(tmp_path / "squad.xml"))
  pages = list(wikidump.iter_dump_pages(path))
  assert [(p.page_id, p.title, p.namespace) for p in pages] == [
      (squad_dump.SQUAD_PAGE_ID_BASE, "AT&T Inc", 0),
      (squad_dump.SQUAD_PAGE_ID_BASE + 2, "Paris", 0)]
  assert pages[0].text == "AT&T is a <company>.\n\nIt is in Dallas."
  assert "What is AT&T?" not in open(path, encoding="utf-8").read()
