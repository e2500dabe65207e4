"""Content templates rendered (pipelines.wiki.templates through pipelines.wiki.wikitext), non-prose
sections, disambiguation pages and stub passages left out (pipelines.wiki.nonprose), and the
section path of a passage, on wikitext the tests write."""

from __future__ import annotations

import json
import sqlite3

import pytest

from twotower.core import contracts
from twotower.commands import pairs as pairs_cmd
from twotower.core.contracts import RawPage, SiteInfo
from twotower.core.contracts import counters as C
from twotower.pipelines.wiki import passages as passages_lib
from twotower.pipelines.wiki import parse_pages, templates
from twotower.deploy.serving import store as store_lib
from wikidump_fixtures import ENWIKI_NAMESPACES, DumpPage, write_dump

ENWIKI = SiteInfo(dbname="enwiki", case="first-letter", namespaces=ENWIKI_NAMESPACES)


def _raw(text: str, title: str = "Page", page_id: int = 1) -> RawPage:
  return RawPage(page_id, title, 0, text, None, "test.xml", ENWIKI)


def _lead(text: str) -> tuple[str, ...]:
  return parse_pages.parse_page(_raw(text)).sections[0].paragraphs


@pytest.mark.parametrize("wikitext_in, expected", [
    # units: value and unit as written, no conversion; ranges; compound input; symbols
    ("a distance of {{convert|377349|km|mi}} from Earth.", "a distance of 377349 km from Earth."),
    ("from {{convert|1|to|2|km|mi}} wide", "from 1 to 2 km wide"),
    ("area {{cvt|52419|sqmi|km2|abbr=out}}.", "area 52419 sq mi."),
    ("He was {{convert|5|ft|6|in|cm}} tall.", "He was 5 ft 6 in tall."),
    ("at {{convert|-40|C|F}} here", "at -40 °C here"),
    ("mass {{val|1.00794|(7)}} u and {{val|6.241|e=18}} and {{val|1.2|0.1|u=m}}",
     "mass 1.00794(7) u and 6.241×10^18 and 1.2±0.1 m"),
    ("height {{height|ft=5|in=11}}", "height 5 ft 11 in"),
    ("landed at {{coord|13|19|N|169|9|W|type:event}}, in the Pacific",
     "landed at 13°19′N 169°9′W, in the Pacific"),
    ("{{coord|32.7|-86.7|display=title}}Alabama.", "Alabama."),
    # dates and ages
    ("launched {{start date|1968|12|21}}.", "launched December 21, 1968."),
    ("born {{birth date|df=y|1894|7|26}}", "born 26 July 1894"),
    ("born {{birth date and age|1947|04|01}}", "born April 1, 1947"),
    ("died {{death date and age|1865|4|15|1809|2|12}}", "died April 15, 1865 (aged 56)"),
    ("on {{dts|1777|12|16}} and {{date|2006-01-02}}", "on December 16, 1777 and January 2, 2006"),
    ("{{as of|2010|lc=y}}, and {{As of|1999|5}}", "as of 2010, and As of May 1999"),
    ("built {{circa|1850}} and {{c.|1900}}", "built c. 1850 and c. 1900"),
    ("aged {{age|1900|1|1|1950|6|1}} then", "aged 50 then"),
    # text wrappers
    ("{{nowrap|Paris, France}} and {{nobr|x y}}", "Paris, France and x y"),
    ("Albania ({{lang-sq|Shqipëri}}, {{IPA-sq|ʃcipəˈɾi}})", "Albania (Shqipëri, ʃcipəˈɾi)"),
    ("a {{lang|fr|[[Paris|ville]]}} word", "a ville word"),
    ("{{transl|ar|ALA|al-lāh}} and {{transl|ar|ilāh}}", "al-lāh and ilāh"),
    ("{{nihongo|Tokyo|東京|Tōkyō}} city", "Tokyo (東京, Tōkyō) city"),
    ("said {{IPAc-en|ˈ|eɪ|b|r|ə|h|æ|m}} or {{respell|AL|bə|nee|ə}}",
     "said /ˈeɪbrəhæm/ or AL-bə-nee-ə"),
    ("{{IPAc-en|audio=x.ogg|æ|l|ˈ|b|eɪ|n|i|ə|,|_|ɔː|l}}", "/ælˈbeɪniə, ɔːl/"),
    ("{{abbr|UN|United Nations}} and {{sic|teh}}", "UN and teh"),
    ("water is {{chem|H|2|O}} and {{math|x + 1}}", "water is H2O and x + 1"),
    ("{{quote|To be or not to be.|Shakespeare}}", "To be or not to be."),
    ("see {{ill|Gymnasium Gotha|de|Gymnasium Ernestinum}} now", "see Gymnasium Gotha now"),
    # numbers and money
    ("{{frac|3|1|2}} cups, {{sfrac|1|4}}, {{frac|2}}", "3 1/2 cups, 1/4, 1/2"),
    ("the {{ordinal|21}} and {{ordinal|2}} and {{ordinal|13}}", "the 21st and 2nd and 13th"),
    ("cost {{US$|2 billion}} or {{GBP|5}}", "cost US$2 billion or £5"),
    ("{{formatnum:1234567}} people", "1,234,567 people"),
    ("{{uc:nasa}} and {{lc:ABC}} and {{ucfirst:paris}}", "NASA and abc and Paris"),
    # punctuation templates
    ("1990{{ndash}}1995 {{mdash}} done", "1990–1995 — done"),
    # nested: a rendered template inside a rendered one
    ("{{nowrap|{{convert|5|ft}} tall}}", "5 ft tall"),
])
def test_content_templates_render_their_text(wikitext_in, expected):
  assert _lead(wikitext_in) == (expected,)


@pytest.mark.parametrize("written", [
    "{{Convert|100|km|mi}}", "{{convert |100|km|mi}}", "{{ convert|100|km}}",
    "{{Template:Convert|100|km}}", "{{template:convert|100|km}}", "{{subst:convert|100|km}}",
    "{{CONVERT|100|km}}", "{{cvt|100|km}}", "{{Cvt|100|km}}",
])
def test_names_are_normalised_as_mediawiki_does(written):
  assert _lead(f"It is {written} long.") == ("It is 100 km long.",)


def test_name_normalisation_underscores_case_and_prefixes():
  assert templates.normalize_name("  Birth_date_and__age ") == "birth date and age"
  assert templates.normalize_name("Template:Nowrap") == "nowrap"
  assert templates.renderer("Birth_date") is templates.renderer("birth date") is not None
  assert templates.renderer("Lang-fr") is templates.renderer("vol-en") is not None
  assert templates.renderer("cite web") is None


@pytest.mark.parametrize("wikitext_in, expected", [
    ("Text{{cite web|url=http://x|title=Hidden title}} more.", "Text more."),
    ("{{Infobox country|name=Albania|capital=[[Tirana]]}}Albania is a country.",
     "Albania is a country."),
    ("A{{unknown template|visible?}}B", "AB"),
    ("A{{citation needed|date=May 2010}}.", "A."),
    ("A {{inflation|US|100|1900}} dollars", "A dollars"),  # needs data the dump lacks
    ("born {{age|1950|1|1}} years ago", "born years ago"),  # depends on the day
    # a content template inside a dropped one is dropped with it
    ("x{{infobox|area={{convert|5|km}}}} y", "x y"),
    ("{{#if:yes|shown|not}}z", "z"),
])
def test_unknown_templates_are_still_dropped(wikitext_in, expected):
  assert _lead(wikitext_in) == (expected,)


def test_links_inside_rendered_and_dropped_templates_are_still_links():
  page = parse_pages.parse_page(_raw("{{lang|fr|[[Paris|la ville]]}} and {{cite web|"
                                  "publisher=[[Le Monde]]}} end."))
  assert page.sections[0].paragraphs == ("la ville and end.",)
  assert page.links == ("Paris", "Le Monde")


def test_text_cleanup_off_drops_every_template_and_keeps_every_section():
  text = "Far {{convert|5|km}} away.\n== References ==\n* A book, 1990."
  page = parse_pages.parse_page(_raw(text), parse_pages.ParseConfig(text_cleanup=False))
  assert [(s.heading, s.paragraphs) for s in page.sections] == [
      ("", ("Far away.",)), ("References", ("A book, 1990.",))]


NON_PROSE = [
    ("References", C.SectionSkip.REFERENCES), ("Citations", C.SectionSkip.REFERENCES),
    ("Sources", C.SectionSkip.REFERENCES), ("Notes", C.SectionSkip.NOTES),
    ("Footnotes", C.SectionSkip.NOTES), ("Bibliography", C.SectionSkip.BIBLIOGRAPHY),
    ("Works cited", C.SectionSkip.BIBLIOGRAPHY),
    ("Further reading", C.SectionSkip.FURTHER_READING),
    ("External links", C.SectionSkip.EXTERNAL_LINKS), ("See also", C.SectionSkip.SEE_ALSO),
    ("see also:", C.SectionSkip.SEE_ALSO),
    # Latgalian (ltgwiki) and Latvian
    ("Nūruodis", C.SectionSkip.REFERENCES), ("Nūruodis i olūti", C.SectionSkip.REFERENCES),
    ("Atsaucis", C.SectionSkip.REFERENCES), ("Literatura", C.SectionSkip.BIBLIOGRAPHY),
    ("Teiklavītys", C.SectionSkip.EXTERNAL_LINKS), ("Verīs taipoš", C.SectionSkip.SEE_ALSO),
    ("Atsauces", C.SectionSkip.REFERENCES), ("Ārējās saites", C.SectionSkip.EXTERNAL_LINKS),
]


@pytest.mark.parametrize("heading, reason", NON_PROSE)
def test_each_non_prose_section_kind_is_left_out_and_counted(heading, reason):
  text = (f"Lead text of the page.\n== History ==\nIt happened.\n== {heading} ==\n"
          f"* A listed book, 1990.\n=== Online ===\n* [http://x.org A site].\n"
          f"== Legacy ==\nIt lasted.")
  counts: dict = {}
  kind, page = parse_pages.route_page(_raw(text), counts=counts)
  assert kind == "article"
  # The section and its subsection are out; the next section of its level is in.
  assert [(s.heading, s.paragraphs) for s in page.sections] == [
      ("", ("Lead text of the page.",)), ("History", ("It happened.",)),
      ("Legacy", ("It lasted.",))]
  assert counts == {C.sections_skipped(reason): 1}


def test_prose_headings_that_look_alike_are_kept():
  text = "Lead.\n== Literature ==\nHe wrote novels.\n== Notes on the text ==\nMore prose."
  page = parse_pages.parse_page(_raw(text))
  assert [s.heading for s in page.sections] == ["", "Literature", "Notes on the text"]


def test_a_page_whose_every_section_is_non_prose_is_empty():
  text = ("{{Infobox person|name=X}}\n== References ==\n{{reflist}}\n== Notes ==\n* a note, 1."
          "\n== External links ==\n* [http://x.org site]")
  counts: dict = {}
  assert parse_pages.route_page(_raw(text), counts=counts) == (
      "skip", (C.PageSkip.EMPTY, "no text left after cleaning"))
  assert counts == {"sections_skipped_references": 1, "sections_skipped_notes": 1,
                    "sections_skipped_external_links": 1}


@pytest.mark.parametrize("text, title", [
    ("'''Ada''' may refer to:\n* [[Ada Lovelace]], a mathematician\n{{disambiguation}}", "Ada"),
    ("'''Rēzne''' var byut:\n* [[Rēzekne]]\n{{Zeimeibu škiršona}}", "Rēzne"),
    ("'''Austin''' is:\n* [[Austin, Texas]]", "Austin (disambiguation)"),
])
def test_disambiguation_pages_are_not_articles(text, title):
  assert parse_pages.route_page(_raw(text, title=title)) == (
      "skip", (C.PageSkip.DISAMBIGUATION, ""))
  off = parse_pages.route_page(_raw(text, title=title), parse_pages.ParseConfig(text_cleanup=False))
  assert off[0] == "article"


def _packed(sections, **config):
  page = contracts.Page(7, "Title", tuple(
      contracts.Section(h, lv, tuple(ps)) for h, lv, ps in sections), ())
  sentences = [[[p] for p in s.paragraphs] for s in page.sections]
  return passages_lib.pack_page(page, sentences, passages_lib.PassageConfig(**config))


def test_stub_passages_are_left_out_and_counted():
  long_list = " ".join(f"Item{i} (19{i:02d})" for i in range(15))  # 30 words, no sentence end
  passages, counts = _packed([
      ("", 0, ["A whole sentence of lead text.", ]),
      ("Awards", 2, ["Best Film 1997 Best Actress"]),   # no sentence end
      ("Data", 2, ["Hair dryer: 15 A."]),                # a sentence of 4 words
      ("Works", 2, [long_list]),
  ])
  assert [p.text for p in passages] == ["A whole sentence of lead text.", long_list]
  assert [p.passage_id for p in passages] == [0, 1]
  assert counts["passages_skipped_no_sentence"] == 1
  assert counts["passages_skipped_short"] == 1
  passages, counts = _packed([("Awards", 2, ["Best Film 1997"])], min_passage_words=0)
  assert [p.text for p in passages] == ["Best Film 1997"]
  assert "passages_skipped_short" not in counts


def test_passages_carry_their_section_path():
  body = "A sentence that is long enough to stay."
  passages, _ = _packed([("", 0, [body]), ("History", 2, [body]), ("Early years", 3, [body]),
                         ("Rome", 4, [body]), ("Legacy", 2, [body]), ("Films", 3, [body])])
  assert [p.section for p in passages] == [
      "", "History", "History › Early years", "History › Early years › Rome", "Legacy",
      "Legacy › Films"]
  assert contracts.title_with_section("Paris", passages[2].section) == (
      "Paris › History › Early years")
  assert contracts.title_with_section("Paris", "") == "Paris"
  row = passages[1].to_row()
  assert row["section"] == "History" and contracts.Passage.from_row(row) == passages[1]
  # A row written before the column existed reads with section "".
  del row["section"]
  assert contracts.Passage.from_row(row).section == ""


def test_pairs_run_counts_what_it_leaves_out_and_writes_sections(tmp_path):
  dump = write_dump(tmp_path / "testwiki-pages-articles.xml.bz2", [
      DumpPage(1, "Apollo 8", "'''Apollo 8''' flew {{convert|377349|km|mi}} from Earth on "
                              "{{start date|1968|12|21}}. It orbited the Moon ten times.\n"
                              "== Flight ==\nThe crew saw Earthrise from lunar orbit. They "
                              "read from Genesis on Christmas Eve.\n== Notes ==\n{{notelist}}\n"
                              "== References ==\n* A book about the flight, 1969.\n"
                              "== See also ==\n* [[Apollo 9]]"),
      DumpPage(2, "Apollo (disambiguation)", "'''Apollo''' may refer to:\n* [[Apollo 8]]"),
  ])
  out = tmp_path / "out"
  pairs_cmd.main(["--dump", str(dump), "--out", str(out), "--heldout_percent", "0"])
  stats = json.loads((out / contracts.STATS_FILE).read_text())
  assert {k: stats[k] for k in C.CLEANUP_ALWAYS} == {
      "pages_skipped_disambiguation": 1, "sections_skipped_references": 1,
      "sections_skipped_notes": 1, "sections_skipped_bibliography": 0,
      "sections_skipped_further_reading": 0, "sections_skipped_external_links": 0,
      "sections_skipped_see_also": 1, "passages_skipped_no_sentence": 0,
      "passages_skipped_short": 0}
  rows = sorted((p.passage_id, p.section, p.text) for p in
                contracts.codecs.read_passages(str(out)))
  assert rows == [
      (0, "", "Apollo 8 flew 377349 km from Earth on December 21, 1968. It orbited the Moon "
              "ten times."),
      (1, "Flight", "The crew saw Earthrise from lunar orbit. They read from Genesis on "
                    "Christmas Eve.")]


def test_store_keeps_the_section_and_reads_stores_without_it(tmp_path):
  path = str(tmp_path / "store.sqlite")
  store_lib.write_store(path, [store_lib.Document(1, "Paris", "text", section="History"),
                               store_lib.Document(2, "Lyon", "lead text")])
  store = store_lib.PassageStore.open(path)
  assert [(d.title, d.section) for d in store.get([1, 2]).values()] == [
      ("Paris", "History"), ("Lyon", "")]
  store.close()
  old = str(tmp_path / "old.sqlite")  # a store written before the section column
  connection = sqlite3.connect(old)
  connection.execute("CREATE TABLE documents (id INTEGER PRIMARY KEY, title TEXT NOT NULL, "
                     "text TEXT NOT NULL, sentence TEXT NOT NULL, page_id INTEGER, "
                     "source TEXT NOT NULL)")
  connection.execute("INSERT INTO documents VALUES (3, 'Rome', 'old text', '', 9, 'wikipedia')")
  connection.commit()
  connection.close()
  store = store_lib.PassageStore.open(old)
  assert store.get([3])[3] == store_lib.Document(3, "Rome", "old text", "", 9, "wikipedia", "")
  store.close()


def test_the_document_tower_reads_the_section_only_when_asked():
  from twotower.pipelines.wiki import pair_tasks
  passages = (
      contracts.Passage(7, 0, "Paris", "Paris is a city. It is large.",
                        ("Paris is a city.", "It is large."), True, ""),
      contracts.Passage(7, 1, "Paris", "The Romans came here. They built a town.",
                        ("The Romans came here.", "They built a town."), False, "History"))
  off = pair_tasks.PairConfig(min_query_words=2, min_doc_words=2)
  on = pair_tasks.PairConfig(min_query_words=2, min_doc_words=2, doc_title_section=True)
  assert {p.doc_title for p in pair_tasks.bfs_pairs(passages, off)} == {"Paris"}
  assert {p.doc_title for p in pair_tasks.bfs_pairs(passages, on)} == {"Paris › History"}
  assert "doc_title_section" not in off.settings()  # runs before the setting keep their keys
  assert on.settings()["doc_title_section"] is True
