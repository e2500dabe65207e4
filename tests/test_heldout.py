"""The held-out benchmark of the demo: sentences ICT removed from held-out pages are the
questions, every held-out passage a candidate, and it is a ReQA-layout directory that BM25
and `evaluate` read unchanged."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from twotower.core import contracts
from twotower.commands import heldout as heldout_cmd
from twotower.commands import pairs as pairs_cmd
from twotower.core.contracts import counters as C
from twotower.pipelines.reqa import heldout
from wikidump_fixtures import many_pages, write_dump

HELDOUT_PERCENT = 40.0


@pytest.fixture(scope="module")
def benchmark(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("heldout")
  dump = write_dump(tmp / "many-pages-articles.xml.bz2", many_pages(30))
  pairs_cmd.main(["--dump", str(dump), "--out", str(tmp / "pairs"), "--ict_per_page", "20",
             "--heldout_percent", str(HELDOUT_PERCENT)])
  # The held-out share comes from the pair pipeline's config.json.
  result = heldout.run(heldout.HeldoutConfig(pairs=str(tmp / "pairs"), out=str(tmp / "bench")))
  counts = result.stats
  assert sorted(result.files) == sorted(str(p) for p in (tmp / "bench").iterdir()
                                        if p.name != contracts.MANIFEST_FILE)
  candidates = pq.read_table(tmp / "bench" / contracts.CANDIDATES_FILE).to_pylist()
  questions = pq.read_table(tmp / "bench" / contracts.questions_file("all")).to_pylist()
  passages = pq.read_table(tmp / "pairs" / "passages").to_pylist()
  return counts, candidates, questions, passages


def test_candidates_are_exactly_the_heldout_passages(benchmark):
  counts, candidates, _, passages = benchmark
  heldout_uids = {contracts.passage_uid(p["page_id"], p["passage_id"]) for p in passages
                  if contracts.is_heldout(p["page_id"], HELDOUT_PERCENT)}
  assert {c["candidate_id"] for c in candidates} == heldout_uids
  assert counts[C.CANDIDATES] == len(candidates) > 0
  assert 0 < counts[C.HELDOUT_PAGES] < 30
  assert {c["source"] for c in candidates} == {contracts.HELDOUT_SOURCE}


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
  with pytest.raises(ValueError, match=r"no held-out ict pairs.*was 0.0, from config.json"):
    heldout.run(heldout.HeldoutConfig(pairs=str(tmp_path / "pairs"), out=str(tmp_path / "b")))


def test_command_flags(tmp_path, capsys):
  assert heldout_cmd.parse(["--pairs", "p", "--out", "o"]) == heldout.HeldoutConfig("p", "o")
  assert heldout_cmd.parse(["--pairs", "p", "--out", "o", "--heldout_percent", "5", "--task",
                            "bfs"]) == heldout.HeldoutConfig("p", "o", 5.0, "bfs")
  with pytest.raises(SystemExit):
    heldout_cmd.parse(["--pairs", "p", "--out", "o", "--heldout_percent", "101"])
