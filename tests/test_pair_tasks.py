"""ICT / BFS / WLP sampling as pure functions, and the hand-written tf.train.Example."""

from __future__ import annotations

import dataclasses

import pytest

from twotower.core import contracts
from twotower.pipelines.wiki import pair_tasks
from twotower.core.contracts import Passage, codecs
from twotower.pipelines.wiki.pair_tasks import PairConfig


def passages_of(page_id: int, title: str, paragraphs, lead: int = 1) -> tuple[Passage, ...]:
  return tuple(Passage(page_id, i, title, " ".join(s), tuple(s), i < lead)
               for i, s in enumerate(paragraphs))


PAGE = passages_of(10, "Anarchism", [
    ["Anarchism is a political philosophy and movement.",
     "It is sceptical of all justifications for authority.",
     "It seeks to abolish the institutions it claims maintain coercion."],
    ["Humans lived in societies without formal hierarchies long before states.",
     "With the rise of organised hierarchical bodies, scepticism toward authority rose."],
    ["Short.", "The modern anarchist movement emerged in the nineteenth century in Europe."],
    ["A single sentence passage with enough words in it."],
], lead=1)


def test_ict_document_never_contains_its_query():
  config = PairConfig(ict_per_page=10)
  pairs = pair_tasks.ict_pairs(PAGE, config)
  # The one-sentence passage is skipped; passage 2 would leave only "Short." (< 5 words).
  assert [p.doc_passage_id for p in pairs] == [0, 1]
  for pair in pairs:
    passage = PAGE[pair.doc_passage_id]
    assert pair.query in passage.sentences
    assert pair.query not in pair.doc_text
    assert pair.doc_title == "Anarchism" and pair.task == "ict"
    assert len(pair.query.split()) >= config.min_query_words


def test_ict_keep_prob_one_keeps_the_query():
  pairs = pair_tasks.ict_pairs(PAGE, PairConfig(ict_per_page=10, ict_keep_prob=1.0))
  assert pairs and all(p.query in p.doc_text for p in pairs)


def test_bfs_query_from_lead_and_document_another_passage():
  lead = set(PAGE[0].sentences)
  pairs = pair_tasks.bfs_pairs(PAGE, PairConfig(bfs_per_page=3))
  assert len(pairs) == 3
  for pair in pairs:
    assert pair.query in lead
    assert pair.doc_passage_id != 0
    assert pair.doc_text == PAGE[pair.doc_passage_id].text


def test_bfs_needs_a_second_passage():
  assert pair_tasks.bfs_pairs(PAGE[:1], PairConfig()) == []


def test_wlp_prefers_the_passage_that_mentions_the_target():
  linking = passages_of(20, "Europe", [
      ["Europe is a continent in the northern hemisphere of the world."],
      ["Many political movements began here, anarchism among them in the 1800s."],
      ["The climate is mostly temperate with four seasons every year."]])
  lead = pair_tasks.lead_sentences(PAGE, PairConfig())
  [request] = pair_tasks.wlp_requests(10, "Anarchism", lead, [(20, ("Anarchism",))],
                                      PairConfig())
  assert request.doc_page_id == 20 and request.query in PAGE[0].sentences
  pair = pair_tasks.wlp_pair(request, linking, PairConfig())
  assert (pair.doc_page_id, pair.doc_passage_id, pair.query_page_id) == (20, 1, 10)


def test_sampling_is_a_function_of_the_page_not_of_input_order():
  shuffled = tuple(reversed(PAGE))
  for fn in (pair_tasks.ict_pairs, pair_tasks.bfs_pairs):
    assert fn(PAGE, PairConfig()) == fn(shuffled, PairConfig())
  lead = pair_tasks.lead_sentences(PAGE, PairConfig())
  inlinks = [(b, ("Anarchism",)) for b in range(30, 40)]
  first = pair_tasks.wlp_requests(10, "Anarchism", lead, inlinks, PairConfig())
  assert first == pair_tasks.wlp_requests(10, "Anarchism", lead, inlinks[::-1], PairConfig())
  assert contracts.stable_hash("ict", 10) == contracts.stable_hash("ict", 10)


def test_heldout_share_follows_the_percentage():
  share = sum(contracts.is_heldout(i, 5) for i in range(20_000)) / 20_000
  assert 0.04 < share < 0.06
  assert not any(contracts.is_heldout(i, 0) for i in range(1000))


def test_hand_written_example_parses_in_tensorflow():
  tf = pytest.importorskip("tensorflow")
  pair = contracts.Pair("wlp", "Qué query ✓", "Title", "Doc text", 12, 2**40, 3)
  example = tf.train.Example.FromString(codecs.encode_pair(pair))
  feature = example.features.feature
  assert set(feature) == set(contracts.PAIR_FEATURES)
  assert feature["query"].bytes_list.value == ["Qué query ✓".encode()]
  assert feature["doc_page_id"].int64_list.value == [2**40]
  assert feature["doc_passage_id"].int64_list.value == [3]
  assert feature["task"].bytes_list.value == [b"wlp"]
  negative = dataclasses.replace(pair, doc_passage_id=-1)
  parsed = tf.train.Example.FromString(codecs.encode_pair(negative))
  assert parsed.features.feature["doc_passage_id"].int64_list.value == [-1]
