"""pipelines.wiki.title_links: links recovered from titles in text, as pure functions and as the
Beam transform (TestPipeline), and end to end into WLP pairs (pages -> RecoverTitleLinks ->
ResolveLinks -> MakePassages -> MakePairs)."""

from __future__ import annotations

import dataclasses

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from twotower.core import contracts
from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.wiki import links as links_lib
from twotower.pipelines.wiki import pair_tasks, passages
from twotower.pipelines.wiki import title_links as tl
from twotower.pipelines.wiki.pairs import MakePairs

#: Rules of the defaults, minus the corpus-wide ones (hubs, common words), for tests of one page.
LOCAL = tl.TitleLinkConfig(max_lowercase_share=1.0, max_target_share=1.0)


def page(page_id: int, title: str, *paragraphs: str, links: tuple[str, ...] = ()):
  return contracts.Page(page_id, title, (contracts.Section("", 0, tuple(paragraphs)),), links,
                        source="test")


def found(text: str, titles, redirects=(), own="Page", config=LOCAL) -> list[str]:
  index = tl.TitleIndex.build([own, *titles], redirects, config)
  return [e.link for e in tl.recover_links(page(1, own, text), index)[0]]


def test_longest_match_wins_and_consumes_its_words():
  titles = ["New York", "New York City", "York", "City Hall"]
  assert found("He moved to New York City Hall in 1990.", titles) == ["New York City"]
  assert found("He moved to New York in 1990, not to York.", titles) == ["New York", "York"]


def test_first_mention_only_in_text_order_and_whole_words():
  titles = ["Paris", "Berlin"]
  assert found("Berlin, then Paris, then Berlin and Parisian food.", titles) == [
      "Berlin", "Paris"]
  assert found("Parisian and Berliner food.", titles) == []


def test_own_title_is_skipped_and_hides_titles_inside_it():
  titles = ["Mexico", "New Mexico State University"]
  assert found("New Mexico State University is in Mexico.", titles,
               own="New Mexico State University") == ["Mexico"]


def test_case_rules():
  titles = ["Political philosophy", "Aristotle", "Ayn Rand"]
  # A multi-word title also with a lower-case first letter; not otherwise.
  assert found("political philosophy began with Aristotle.", titles) == [
      "Political philosophy", "Aristotle"]
  assert found("ayn rand and aristotle.", titles) == []
  assert found("POLITICAL PHILOSOPHY.", titles) == []


def test_one_word_rules_stop_words_numbers_short_and_name_parts():
  titles = ["The", "1984", "Ox", "Apollo", "Mexico"]
  assert found("The book of 1984 by an Ox.", titles) == []
  # "Apollo" of "Apollo 11" and "Mexico" of "New Mexico" are parts of longer names.
  assert found("The Apollo 11 crew flew over New Mexico.", titles) == []
  assert found("Stormin' Normans and Apollo's lyre.", ["Stormin", "Apollo"]) == ["Apollo"]
  assert found("In Mexico, Apollo was a god.", titles) == ["Mexico", "Apollo"]


def test_redirects_are_aliases_and_qualifiers_are_stripped_when_unambiguous():
  titles = ["Mercury (planet)", "Venus (planet)", "Venus (mythology)", "United Kingdom"]
  redirects = [("UK", "United Kingdom"), ("Great Britain and Ireland", "United Kingdom"),
               ("Dangling", "Nowhere")]
  strip = dataclasses.replace(LOCAL, strip_qualifiers=True)
  assert found("Mercury, Venus and the UK; Dangling.", titles, redirects, config=strip) == [
      "Mercury (planet)", "UK"]
  assert found("Mercury, Venus and the UK; Dangling.", titles, redirects) == ["UK"]
  # A stripped name that is a title itself is not an alias.
  assert found("Mercury.", ["Mercury (planet)", "Mercury"], config=strip) == ["Mercury"]


def test_disambiguation_titles_are_never_targets():
  assert found("See Mercury here.", ["Mercury (disambiguation)"]) == []
  assert tl.is_disambiguation(page(2, "Sonder", "Sonder may refer to:", "Sonder (album)"))
  assert tl.is_disambiguation(page(3, "Giacobbi", "Giacobbi is a surname and may refer to:"))
  assert tl.is_disambiguation(page(5, "Daskal", "Daskal is a surname. Notable people with "
                                   "the surname include:"))
  assert tl.is_disambiguation(page(6, "Mikito", "Mikito is a masculine Japanese given name."))
  assert not tl.is_disambiguation(page(4, "Sonder (album)", "Sonder is an album."))
  assert not tl.is_disambiguation(page(7, "Ann Smith", "Ann Smith is a painter, known by "
                                  "her surname."))


def test_own_name_without_qualifier_and_titles_without_letters():
  assert found("Sonder is the fourth album of Sonder fans.", ["Sonder"],
               own="Sonder (album)") == []
  assert found("They won 3-2 in 1984.", ["3-2", "1984"]) == []


def test_a_capitalised_word_after_a_quote_still_makes_a_name():
  assert found('as well as "Jean Seberg, Shirley MacLaine".', ["Seberg"]) == []
  assert found('He said: Seberg is a film.', ["Seberg"]) == ["Seberg"]


def test_common_words_and_hubs_from_corpus_counts():
  config = tl.TitleLinkConfig(min_hub_pages=1, max_target_share=0.5)
  pages = [page(1, "Art", "Art is old."), page(2, "Rome", "The art of Rome and Gaul."),
           page(3, "Gaul", "Gaul had art and Rome."), page(4, "Vase", "A vase of Rome.")]
  index = tl.TitleIndex.build([p.title for p in pages], [], config)
  counts: dict = {}
  for p in pages:
    for key, n in tl.word_case_counts(p, index.one_word()).items():
      counts[key] = counts.get(key, 0) + n
  # "Art": 1 capitalised (a sentence start), 2 lower case; "vase" only lower case; "Rome" and
  # "Gaul" never.
  assert counts[("Art", True)] == 2 and counts[("Rome", False)] == 3
  assert tl.common_words(counts, config) == {"Art", "Vase"}
  assert tl.hub_targets({"Rome": 3, "Gaul": 1}, 4, config) == {"Rome"}


def _run_transform(pages, redirects, config):
  pipeline = TestPipeline()
  out = ({"articles": pipeline | "Pages" >> beam.Create(pages),
          "redirects": pipeline | "Redirects" >> beam.Create(redirects)}
         | tl.RecoverTitleLinks(config))
  return pipeline, out


def test_transform_emits_pages_with_links_and_counts_every_branch():
  config = tl.TitleLinkConfig(min_hub_pages=2, max_target_share=0.4)
  pages = [
      page(1, "Aristotle", "Aristotle taught in Athens. His art was philosophy."),
      page(2, "Athens", "Athens is a city. Plato and Aristotle lived in Athens.",
           "The art of Athens."),
      page(3, "Plato", "Plato was a student. He taught Aristotle in the Academy of Athens."),
      page(4, "Art", "Art is made. The art of Greece; art in Plato's Republic."),
      page(5, "Linked", "Aristotle again.", links=("Plato",)),
      page(6, "Academy of Athens", "The Academy was founded by Plato."),
      page(7, "Greece", "Greece may refer to: a country, or a ship."),  # no target
  ]
  pipeline, out = _run_transform(pages, [("Academy", "Academy of Athens")], config)
  assert_that(out | beam.Map(lambda p: (p.page_id, p.links)), equal_to([
      (1, ("Athens",)),  # "art": a common word (the corpus writes it 4 times of 5 in lower case)
      (2, ("Aristotle",)),  # its own title 3 times; "Plato": a hub
      (3, ("Aristotle", "Academy of Athens")),  # first mention first; longest match
      (4, ()),  # "Plato" (a hub: on 3 of 6 searched pages > max(0.4 x 6, 2)); "Greece" no target
      (5, ("Plato",)),  # its own links: not searched
      (6, ()),  # the own-title alias "Academy" is skipped; "Plato" a hub
      (7, ()),
  ]))
  result = pipeline.run()
  result.wait_until_finish()
  counters = beam_jobs.beam_counters(result)
  assert counters["title_links_pages"] == 6
  assert counters["title_links_disambiguation"] == 1
  assert counters["title_links_pages_with_links"] == 1
  assert counters["title_links_found"] == 4
  assert counters["title_links_multi_word"] == 1
  assert counters["title_links_one_word"] == 3
  assert counters["title_links_hub"] == 3  # Plato on pages 2, 4, 6
  assert counters["title_links_common_words"] == 1  # Art
  # Aristotle 1, Athens 3, Plato 1, Academy 1 (Art, a common word, and Greece, no target,
  # are in no index)
  assert counters["title_links_own_title"] == 6
  assert counters.get("title_links_via_alias", 0) == 0


def test_pages_become_wlp_pairs_end_to_end():
  """Text without links -> recovered links -> ResolveLinks -> passages -> WLP pairs: the
  WLP pair builder of the pair pipeline, unchanged."""
  lead = "{} is a {} of the test world, known to everybody who reads these pages."
  pages = [
      page(1, "Silver Lake", lead.format("Silver Lake", "lake"),
           "Fishing boats cross Silver Lake every summer since the old times."),
      page(2, "Green Town", lead.format("Green Town", "town"),
           "Green Town lies on the shore of Silver Lake, where the ferry stops twice."),
      page(3, "Red Hill", lead.format("Red Hill", "hill"),
           "From Red Hill one sees Green Town and the water of Silver Lake twice."),
  ]
  config = pair_tasks.PairConfig()
  pipeline = TestPipeline()
  articles = pipeline | "Pages" >> beam.Create(pages)
  redirects = pipeline | "Redirects" >> beam.Create([])
  linked = {"articles": articles, "redirects": redirects} | tl.RecoverTitleLinks(LOCAL)
  resolved = {"articles": linked, "redirects": redirects} | links_lib.ResolveLinks()
  made = resolved["pages"] | passages.MakePassages(passages.PassageConfig(min_passage_tokens=0))
  pairs = {"passages": made, "inlinks": resolved["inlinks"]} | MakePairs(config)
  # (A = the linked page of the query, B = the linking page of the document): Green Town and
  # Red Hill link Silver Lake; Red Hill links
  # Green Town.
  assert_that(pairs["wlp"] | beam.Map(lambda p: (p.query_page_id, p.doc_page_id)),
              equal_to([(1, 2), (1, 3), (2, 3)]))
  pipeline.run().wait_until_finish()


@pytest.mark.parametrize("field,value", [("max_lowercase_share", 1.5), ("min_word_chars", 0),
                                         ("max_target_share", 0.0)])
def test_bad_config_is_refused(field, value):
  with pytest.raises(ValueError, match=field):
    tl.TitleLinkConfig(**{field: value})
