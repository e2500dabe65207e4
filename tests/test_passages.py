"""Sentences and passages: paragraphs packed or cut to the document budget."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that

from twotower.core import contracts
from twotower.pipelines.wiki import pair_tasks
from twotower.pipelines.wiki import passages as passages_lib


def words(n: int, word: str = "word") -> str:
  return " ".join([word] * (n - 1) + [word + "."])


def make_page(sections) -> contracts.Page:
  return contracts.Page(42, "Title", tuple(
      contracts.Section(h, 0 if not h else 2, tuple(ps)) for h, ps in sections), ())


def test_short_paragraphs_are_packed_within_a_section_only():
  page = make_page([("", ["One short lead.", "Another short lead."]),
                    ("History", ["Short one.", "Short two.", "Short three."])])
  sentences = [[[p] for p in s.paragraphs] for s in page.sections]
  passages, counts = passages_lib.pack_page(page, sentences, passages_lib.PassageConfig())
  assert [p.text for p in passages] == ["One short lead. Another short lead.",
                                        "Short one. Short two. Short three."]
  assert [p.is_lead for p in passages] == [True, False]
  assert [p.passage_id for p in passages] == [0, 1]
  assert counts["passages_packed"] == 2


def test_long_paragraph_is_cut_at_sentence_boundaries_to_the_budget():
  config = passages_lib.PassageConfig(max_passage_tokens=130)  # 100 words
  sentence = words(30)
  page = make_page([("", [" ".join([sentence] * 8)]), ("Body", [words(300, "giant")])])
  sentences = [[[sentence] * 8], [[words(300, "giant")]]]
  passages, counts = passages_lib.pack_page(page, sentences, config)
  assert counts["paragraphs_cut"] == 2
  for p in passages:
    assert pair_tasks.estimate_wordpieces(p.text) <= 130
    assert p.text == " ".join(p.sentences)
  lead = [p for p in passages if p.is_lead]
  assert [len(p.sentences) for p in lead] == [3, 3, 2]  # whole sentences, in order
  body_words = sum(len(p.text.split()) for p in passages if not p.is_lead)
  assert body_words == 300  # the giant sentence is cut at word boundaries, nothing lost


def test_default_budget_fits_288_pieces_with_the_title():
  config = passages_lib.PassageConfig()
  title = "A fairly long title of ten words for this test"
  assert config.budget(title) == 288 - 3 - pair_tasks.estimate_wordpieces(title)


def test_make_passages_splits_sentences_with_spacy_in_beam():
  page = make_page([("", ["Anarchism is a philosophy. It rejects rulers. Many agree."]),
                    ("History", ["It began long ago. Then it grew."]), ("Empty", [])])

  def check(elements):
    [(page_id, passages)] = elements
    assert page_id == 42
    assert [p.sentences for p in passages] == [
        ("Anarchism is a philosophy.", "It rejects rulers.", "Many agree."),
        ("It began long ago.", "Then it grew.")]
    assert [p.is_lead for p in passages] == [True, False]
    row = passages[0].to_row()
    assert set(row) == set(contracts.PASSAGE_SCHEMA.names)

  with TestPipeline() as pipeline:
    out = pipeline | beam.Create([page]) | passages_lib.MakePassages()
    assert_that(out, check)
