"""MediaWiki title normalisation (pipelines.wiki.titles)."""

from __future__ import annotations

import pytest

from twotower.core.contracts import SiteInfo
from twotower.pipelines.wiki import titles
from wikidump_fixtures import ENWIKI_NAMESPACES

ENWIKI = SiteInfo(dbname="enwiki", case="first-letter", namespaces=ENWIKI_NAMESPACES)
LTGWIKI = SiteInfo(dbname="ltgwiki", case="first-letter",
                   namespaces=((0, ""), (6, "Fails"), (10, "Taiss"), (14, "Kategoreja")))
WIKTIONARY = SiteInfo(dbname="enwiktionary", case="case-sensitive",
                      namespaces=ENWIKI_NAMESPACES)


@pytest.mark.parametrize("raw, expected", [
    ("Paris", "Paris"),
    ("paris", "Paris"),
    ("foo_bar", "Foo bar"),
    ("  foo __ bar  ", "Foo bar"),
    ("Foo#History", "Foo"),
    ("foo_bar#Early_life", "Foo bar"),
    ("#History", None),
    ("", None),
    ("   ", None),
    ("A&amp;B", "A&B"),
    ("Caf%C3%A9", "Café"),
    ("Cafe\u0301", "Café"),                  # NFC.
    ("Foo\u00a0bar", "Foo bar"),              # Non-breaking space.
    ("\u200eFoo", "Foo"),                     # Bidi mark.
    ("category:foo", "Category:Foo"),
    ("CATEGORY : foo_bar", "Category:Foo bar"),
    (":Category:Foo", "Category:Foo"),
    ("Image:X.jpg", "File:X.jpg"),           # Canonical alias -> local name.
    ("template talk:x", "Template talk:X"),
    ("Category:", None),
    (":Paris", "Paris"),
    ("Star Wars: Episode I", "Star Wars: Episode I"),  # Not a namespace: main title.
    ("fr:Paris", None),                       # Interlanguage.
    (":fr:Paris", None),                      # Inline interlanguage: still not ours.
    ("wikt:foo", None),                       # Interwiki.
    ("Foo[bar]", None),
    ("Foo|bar", None),
    ("../x", None),
    ("ß-bahn", "ß-bahn"),                    # Upper case is not one character: kept.
    ("éclair", "Éclair"),
    ("x" * 300, None),
])
def test_normalize_title_enwiki(raw, expected):
  assert titles.normalize_title(raw, ENWIKI) == expected


def test_local_namespace_names_are_kept():
  assert titles.normalize_title("kategoreja:latgola", LTGWIKI) == "Kategoreja:Latgola"
  # Canonical English names work on every wiki and become the local name.
  assert titles.normalize_title("Category:latgola", LTGWIKI) == "Kategoreja:Latgola"
  assert titles.normalize_title("File:a.png", LTGWIKI) == "Fails:A.png"
  assert titles.namespace_of("Fails:A.png", LTGWIKI) == 6


def test_case_sensitive_site_keeps_first_letter():
  assert titles.normalize_title("foo_bar", WIKTIONARY) == "foo bar"
  # The namespace name is still canonical.
  assert titles.normalize_title("category:foo", WIKTIONARY) == "Category:foo"


def test_namespace_of():
  assert titles.namespace_of("Category:Foo", ENWIKI) == 14
  assert titles.namespace_of("category:foo", ENWIKI) == 14
  assert titles.namespace_of("Paris", ENWIKI) == 0
  assert titles.namespace_of("Star Wars: Episode I", ENWIKI) == 0
  assert titles.namespace_of("Wikipedia:About", ENWIKI) == 4
  assert titles.namespace_of("Project:About", ENWIKI) == 4


def test_parse_title_reports_interwiki_prefix():
  assert titles.parse_title("fr:Paris", ENWIKI) == titles.Title(0, "Paris", "fr")
  assert titles.parse_title("wikt:foo", ENWIKI).interwiki == "wikt"
  assert titles.parse_title("Commons:Foo", ENWIKI).interwiki == "commons"
  # Upper-case two letters are not an interlanguage link as written: a main title.
  assert titles.parse_title("AC:DC", ENWIKI) == titles.Title(0, "AC:DC", "")


def test_normalisation_is_idempotent():
  for raw in ["foo_bar#x", "category:foo", "A&amp;B", "Caf%C3%A9", "Image:x y.png"]:
    once = titles.normalize_title(raw, ENWIKI)
    assert titles.normalize_title(once, ENWIKI) == once
