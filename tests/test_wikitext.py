"""Wikitext cleaning (pipelines.wiki.wikitext) and the ReadDumpPages | ParsePages pipeline."""

from __future__ import annotations

import collections
import functools
import logging

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
import pytest

from twotower.core.contracts import Page, RawPage, Section, SiteInfo
from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.wiki import inputs, parse_pages, wikidump, wikitext
from wikidump_fixtures import ENWIKI_NAMESPACES, DumpPage, write_dump

ENWIKI = SiteInfo(dbname="enwiki", case="first-letter", namespaces=ENWIKI_NAMESPACES)
LTGWIKI = SiteInfo(dbname="ltgwiki", case="first-letter",
                   namespaces=((0, ""), (6, "Fails"), (10, "Taiss"), (14, "Kategoreja")))

ARTICLE = """{{Infobox city|name=Paris|country=[[France]]}}
'''Paris''' is the [[capital city|capital]] of [[france]].<ref name="a">{{cite web|url=http://x}}</ref> It has [[Seine|a river]].<ref name="b"/>
Same paragraph, [[Eiffel_Tower#History]]s.

[[File:Paris.jpg|thumb|The city, seen from [[Montmartre]]]]
Second lead paragraph &amp; an entity.<!-- a hidden comment -->
__TOC__
== History ==
The [[Romans]] came.
{| class="wikitable"
|-
| table cell [[Lutetia]]
|}
=== Middle Ages ===
* first item with [[Clovis I|Clovis]]
* second item
# numbered [[:Category:French kings|kings]]
Text after the list.
== See also ==
[http://example.org an external site] and http://bare.example.org
[[Category:Capitals in Europe]]
[[fr:Paris]]
[[wikt:Paris|the word]]
"""


def _raw(text: str, site: SiteInfo = ENWIKI, title: str = "Paris", page_id: int = 1,
         namespace: int = 0, redirect: str | None = None) -> RawPage:
  return RawPage(page_id=page_id, title=title, namespace=namespace, text=text,
                 redirect_title=redirect, source="test.xml", site=site)


def test_parse_page_sections_paragraphs_and_links():
  page = parse_pages.parse_page(_raw(ARTICLE))
  assert page.title == "Paris" and page.page_id == 1
  assert page.sections == (
      Section("", 0, (
          "Paris is the capital of france. It has a river. Same paragraph, "
          "Eiffel_Tower#Historys.",
          "Second lead paragraph & an entity.")),
      Section("History", 2, ("The Romans came.",)),
      Section("Middle Ages", 3, (
          "first item with Clovis", "second item", "numbered kings",
          "Text after the list.")),
      # "See also" is no prose (pipelines.wiki.nonprose): left out, its links still counted.
  )
  assert page.lead.heading == ""
  # Links: normalised, deduplicated, first-seen order, from templates/tables/captions too;
  # no File/Category/interwiki targets.
  assert page.links == ("France", "Capital city", "Seine", "Eiffel Tower", "Montmartre",
                        "Romans", "Lutetia", "Clovis I")


@pytest.mark.parametrize("text, expected", [
    ("{{a|{{b|c}}}} kept", ("kept",)),
    ("a<ref>x [[Hidden]]</ref> b <ref name=q/>c", ("a b c",)),
    ("x <math>e^{i\\pi}</math> y", ("x y",)),
    ("<gallery>\nFile:A.jpg|[[Cap]]\n</gallery>\nafter", ("after",)),
    ("<b>bold</b> and <span style='x'>span</span><br/>next", ("bold and span next",)),
    ("''italic'' and '''bold''' and '''''both'''''", ("italic and bold and both",)),
    ("<nowiki>[[not a link]]</nowiki>", ("[[not a link]]",)),
    ("<div>block one</div>block two", ("block one", "block two")),
    ("<ul><li>one</li><li>two</li></ul>", ("one", "two")),
    (";Term: definition", ("Term definition",)),
    ("line one\nline two\n\n\n\nline three", ("line one line two", "line three")),
    ("{{only a template}}\n\n()\n\n.", ()),
    ("[[Kategoreja:Latgola]][[Fails:A.png|thumb|x]] text", ("text",)),
    ("[[:Kategoreja:Latgola|visible]] text", ("visible text",)),
    # A namespace alias the dump does not list ("Attēls" = File on ltgwiki): by extension.
    ("[[Attēls:Puma.jpg|thumb|250px|caption]]\nPuma text", ("Puma text",)),
])
def test_clean_cases(text, expected):
  page = parse_pages.parse_page(_raw(text, site=LTGWIKI))
  assert page.sections[0].paragraphs == expected


def test_colon_category_link_is_not_a_main_link():
  page = parse_pages.parse_page(_raw("See [[:Category:Foo]] and [[:Foo bar]].", ENWIKI))
  assert page.sections[0].paragraphs == ("See Category:Foo and Foo bar.",)
  assert page.links == ("Foo bar",)


def test_text_the_tokenizer_gives_up_on_is_still_cleaned():
  # A `{|` table with HTML rows (real, from ltgwiki): mwparserfromhell returns the rest of
  # the page as plain text, markup included.
  text = ("Intro.\n{| class=\"wikitable\"\n<tr><td>a<td>b\n<tr><td>[[X]]<td>d\n|}\n\n"
          "After the table, [[Link target|anchor]] and {{tmpl|{{inner}}}} more.\n"
          "[[Category:Hidden]]")
  page = parse_pages.parse_page(_raw(text))
  paragraphs = page.sections[0].paragraphs
  assert paragraphs[0] == "Intro."
  assert paragraphs[-1] == "After the table, anchor and more."
  assert "Link target" in page.links and "Category:Hidden" not in page.links


def test_heading_only_page_is_empty():
  page = parse_pages.parse_page(_raw("== A ==\n{{stub}}\n== B ==\n"))
  assert [s.heading for s in page.sections] == ["", "A", "B"]
  assert parse_pages.is_empty(page)


def test_route_page_decisions():
  route = lambda raw, **kw: parse_pages.route_page(raw, parse_pages.ParseConfig(**kw))
  assert route(_raw("text"))[0] == "article"
  assert route(_raw("#đổi [[Pari]]", redirect="pari#x")) == ("redirect", ("Paris", "Pari"))
  # The tag is the source of truth: "#REDIRECT" text without a tag is an article.
  kind, page = route(_raw("#REDIRECT [[Somewhere]]"))
  assert kind == "article" and page.links == ("Somewhere",)
  assert route(_raw("x", namespace=10)) == ("skip", ("namespace", ""))
  assert route(_raw("x", namespace=99))[1][0] == "unknown_namespace"
  assert route(_raw("x" * 101), max_page_bytes=100)[1][0] == "too_large"
  assert route(_raw("é" * 60), max_page_bytes=100)[1][0] == "too_large"
  assert route(_raw("{{stub}}"))[1][0] == "empty"
  assert route(_raw("x", redirect="#only fragment"))[1][0] == "bad_redirect"


def test_tokenizer_failure_is_a_parse_error(monkeypatch):
  class Broken:
    def tokenize(self, *args):
      raise SystemError("tokenizer broke")
  monkeypatch.setattr(wikitext, "_TOKENIZER", Broken())
  kind, (reason, detail) = parse_pages.route_page(_raw("text"))
  assert (kind, reason) == ("skip", "parse_error") and "tokenizer broke" in detail


PIPELINE_PAGES = [
    DumpPage(1, "Paris", "'''Paris''' is in [[France]].\n== History ==\nOld [[lutetia]]."),
    DumpPage(2, "Paname", "#REDIRECT [[Paris]]", redirect="Paris"),
    DumpPage(3, "Template:Stub", "{{{1}}} stub", ns=10),
    DumpPage(4, "Empty", "{{Only template}}"),
    DumpPage(5, "Huge", "word " * 300),
    DumpPage(6, "Odd namespace", "text", ns=3000),
    DumpPage(7, "Lutetia", "'''Lutetia''' was a town."),
    DumpPage("x", "Bad id", "text"),
    DumpPage(9, "No text", None),
    DumpPage(10, "Bad redirect", "#REDIRECT [[#x]]", redirect="#x"),
]


def test_read_and_parse_pipeline_counters(tmp_path, caplog):
  path = write_dump(tmp_path / "testwiki-pages-articles.xml.bz2", PIPELINE_PAGES)
  caplog.set_level(logging.WARNING)
  p = TestPipeline()
  outputs = (p | wikidump.ReadDumpPages(inputs.match_inputs(str(tmp_path / "*.xml.bz2")))
             | parse_pages.ParsePages(max_page_bytes=1000))
  titles_and_links = outputs.articles | beam.Map(lambda page: (page.page_id, page.title,
                                                               page.links))
  assert_that(titles_and_links, equal_to([(1, "Paris", ("France", "Lutetia")),
                                          (7, "Lutetia", ())]), label="CheckArticles")
  assert_that(outputs.redirects, equal_to([("Paname", "Paris")]), label="CheckRedirects")
  result = p.run()
  result.wait_until_finish()
  counters = beam_jobs.beam_counters(result)
  assert counters == {
      "dump_files_read": 1,
      "pages_read": 10,
      "pages_redirect": 1,
      "pages_skipped_bad_id": 1,
      "pages_skipped_bad_redirect": 1,
      "pages_skipped_empty": 1,
      "pages_skipped_namespace": 1,
      "pages_skipped_no_text": 1,
      "pages_skipped_too_large": 1,
      "pages_skipped_unknown_namespace": 1,
  }
  # Articles (2) + redirects + skips balance pages_read exactly.
  skipped = sum(v for k, v in counters.items() if k.startswith("pages_skipped_"))
  assert 2 + counters["pages_redirect"] + skipped == counters["pages_read"]
  # Each skip is logged with the file and the page.
  for needle in ["'Bad id'", "'No text'", "'Huge'", "'Odd namespace'", "'Empty'"]:
    assert any(needle in r.getMessage() and path in r.getMessage()
               for r in caplog.records), needle


@functools.lru_cache(maxsize=None)
def _route_all(path) -> tuple[collections.Counter, dict[str, Page]]:
  """(counters as ParsePages would count them, kept articles by title) of a dump."""
  counts: collections.Counter = collections.Counter()
  articles: dict[str, Page] = {}
  for raw in wikidump.iter_dump_pages(str(path), counts):
    kind, value = parse_pages.route_page(raw)
    if kind == "article":
      articles[value.title] = value
    counts["pages_kept" if kind == "article" else
           "pages_redirect" if kind == "redirect" else f"pages_skipped_{value[0]}"] += 1
  return counts, articles


def _route_counts(path) -> collections.Counter:
  return _route_all(path)[0]


def test_ltgwiki_accounting(ltgwiki):
  # A complete small wiki, all namespaces. The 7 empty pages are galleries and tables only;
  # the 7 disambiguation pages carry {{Zeimeibu škiršona}} or "(zeimeibu škiršona)".
  assert _route_counts(ltgwiki) == {
      "dump_files_read": 1, "pages_read": 2004, "pages_kept": 889, "pages_redirect": 147,
      "pages_skipped_namespace": 954, "pages_skipped_empty": 7,
      "pages_skipped_disambiguation": 7}


def test_enwiki_slice_accounting(enwiki_slice):
  assert _route_counts(enwiki_slice) == {
      "dump_files_read": 1, "pages_read": 206, "pages_kept": 98, "pages_redirect": 99,
      "pages_skipped_namespace": 1, "pages_skipped_disambiguation": 8}


def test_enwiki_slice_articles(enwiki_slice):
  pages = _route_all(enwiki_slice)[1]
  anarchism = pages["Anarchism"]
  assert anarchism.lead.paragraphs[0].startswith("Anarchism is")
  assert len(anarchism.sections) > 5 and all(s.heading for s in anarchism.sections[1:])
  assert "Political philosophy" in anarchism.links
  text = " ".join(p for s in anarchism.sections for p in s.paragraphs)
  for noise in ["{{", "}}", "[[", "]]", "<ref", "'''", "__TOC__", "thumb|"]:
    assert noise not in text, noise
