"""The held-out benchmark of the demo: sentences ICT removed from held-out pages are the
questions, every held-out passage a candidate, and it is a ReQA-layout directory that BM25
and `evaluate` read unchanged."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from twotower import contracts
from twotower.eval import heldout

from twotower.commands import pairs as pairs_cmd
from wikidump_fixtures import many_pages, write_dump

HELDOUT_PERCENT = 40.0


@pytest.fixture(scope="module")
def benchmark(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("heldout")
  dump = write_dump(tmp / "many-pages-articles.xml.bz2", many_pages(30))
  pairs_cmd.main(["--dump", str(dump), "--out", str(tmp / "pairs"), "--ict_per_page", "20",
             "--heldout_percent", str(HELDOUT_PERCENT)])
  counts = heldout.build_heldout_benchmark(str(tmp / "pairs"), str(tmp / "bench"),
                                           HELDOUT_PERCENT)
  candidates = pq.read_table(tmp / "bench" / contracts.CANDIDATES_FILE).to_pylist()
  questions = pq.read_table(tmp / "bench" / contracts.questions_file("all")).to_pylist()
  passages = pq.read_table(tmp / "pairs" / "passages").to_pylist()
  return counts, candidates, questions, passages


def test_candidates_are_exactly_the_heldout_passages(benchmark):
  counts, candidates, _, passages = benchmark
  heldout_uids = {contracts.passage_uid(p["page_id"], p["passage_id"]) for p in passages
                  if contracts.is_heldout(p["page_id"], HELDOUT_PERCENT)}
  assert {c["candidate_id"] for c in candidates} == heldout_uids
  assert counts["candidates"] == len(candidates) > 0
  assert 0 < counts["heldout_pages"] < 30


def test_each_question_has_one_gold_that_no_longer_contains_it(benchmark):
  _, candidates, questions, _ = benchmark
  text_of = {c["candidate_id"]: c["passage"] for c in candidates}
  assert questions
  for q in questions:
    (gold,) = q["gold_candidate_ids"]
    assert q["question"] not in text_of[gold]
  assert len({q["question_id"] for q in questions}) == len(questions)


def test_no_heldout_pairs_is_a_clear_error(tmp_path):
  dump = write_dump(tmp_path / "few-pages-articles.xml", many_pages(6))
  pairs_cmd.main(["--dump", str(dump), "--out", str(tmp_path / "pairs"), "--heldout_percent", "0"])
  with pytest.raises(ValueError, match="no held-out ict pairs"):
    heldout.build_heldout_benchmark(str(tmp_path / "pairs"), str(tmp_path / "bench"), 0.0)
