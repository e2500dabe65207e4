"""`twotower evaluate` and the run/report helpers, on a ReQA directory the test writes."""

from __future__ import annotations

import csv
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twotower.core import contracts
from twotower.commands import evaluate as evaluate_cmd
from twotower.eval import evaluate, report, runs
from twotower.eval.runs import Ranked


def write_reqa(directory):
  directory.mkdir()
  cands = [{"candidate_id": i, "sentence": s, "passage": f"passage {i}", "title": "t",
            "source": "squad"} for i, s in [(10, "S"), (11, "T"), (12, "S"), (13, "U")]]
  pq.write_table(pa.Table.from_pylist(cands, schema=contracts.CANDIDATE_SCHEMA),
                 directory / contracts.CANDIDATES_FILE)
  questions = [{"question_id": "q1", "question": "one?", "gold_candidate_ids": [10]},
               {"question_id": "q2", "question": "two?", "gold_candidate_ids": [11]}]
  for split, rows in (("all", questions), ("test-5", questions[1:])):
    pq.write_table(pa.Table.from_pylist(rows, schema=contracts.QUESTION_SCHEMA),
                   directory / contracts.questions_file(split))


def test_run_files_round_trip(tmp_path):
  run = {"q1": Ranked((12, 10), (2.5, 1.0)), "q2": Ranked((11,), (3.0,))}
  for name in ("run.trec", "run.parquet"):
    runs.write_run(str(tmp_path / name), run, tag="x")
    assert runs.read_run(str(tmp_path / name)) == run
  assert (tmp_path / "run.trec").read_text().splitlines()[0] == "q1 Q0 12 1 2.500000 x"
  (tmp_path / "bad.trec").write_text("q1 Q0 12 1 2.5 x\nq1 Q0 oops\n")
  with pytest.raises(ValueError, match=r"bad\.trec:2: expected"):
    runs.read_run(str(tmp_path / "bad.trec"))
  (tmp_path / "bad.trec").write_text("q1 Q0 12 1 2.5 x\n\nq1 Q0 d13 2 1.0 x\n")
  with pytest.raises(ValueError, match=r"bad\.trec:3: non-numeric docid, rank or score"):
    runs.read_run(str(tmp_path / "bad.trec"))


def test_evaluate_writes_md_csv_json_png_for_several_systems(tmp_path):
  write_reqa(tmp_path / "reqa")
  runs.write_run(str(tmp_path / "a.trec"), {"q1": Ranked((12, 10), (2.0, 1.0)),
                                            "q2": Ranked((11,), (1.0,))})
  runs.write_run(str(tmp_path / "b.parquet"), {"q1": Ranked((13,), (1.0,)),
                                               "q2": Ranked((13, 11), (2.0, 1.0))})
  evaluate_cmd.main(["--reqa", str(tmp_path / "reqa"), "--run", str(tmp_path / "a.trec"),
                str(tmp_path / "b.parquet"), "--names", "A", "B", "--split", "all,test-5",
                "--gold", "pair,sentence", "--ks", "1,2", "--out", str(tmp_path / "out")])
  records = json.loads((tmp_path / "out" / "metrics.json").read_text())
  assert isinstance(records, list) and len(records) == 2 * 2 * 2
  got = {(r["system"], r["split"], r["gold"]): r["metrics"] for r in records}
  # A on all: q1 pair rank 2, sentence rank 1 (12 is "S"); q2 rank 1.
  assert got[("A", "all", "pair")] == pytest.approx({"R@1": 0.5, "R@2": 1.0, "MRR": 0.75})
  assert got[("A", "all", "sentence")] == pytest.approx({"R@1": 1.0, "R@2": 1.0, "MRR": 1.0})
  # B: q1 missed; q2 at rank 2.
  assert got[("B", "test-5", "pair")] == pytest.approx({"R@1": 0.0, "R@2": 1.0, "MRR": 0.5})
  assert all(r["candidates"] == 4 for r in records)
  assert {r["questions"] for r in records if r["split"] == "test-5"} == {1}
  md = (tmp_path / "out" / "metrics.md").read_text()
  assert "| A | all | pair | 2 | 4 | 50.00 | 100.00 | 75.00 |" in md
  rows = list(csv.DictReader((tmp_path / "out" / "metrics.csv").open()))
  assert rows[0]["system"] == "A" and rows[0]["R@1"] == "0.5000"
  assert (tmp_path / "out" / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_is_generic():
  records = [contracts.metrics_record("x", "all", 3, 9, {"MRR": 0.5, "R@10": 0.9, "R@1": 0.1})]
  assert report.metric_names(records) == ["R@1", "R@10", "MRR"]
  assert report.csv_text(records).splitlines() == [
      "system,split,questions,candidates,R@1,R@10,MRR", "x,all,3,9,0.1000,0.9000,0.5000"]


def test_missing_split_is_a_named_error(tmp_path):
  write_reqa(tmp_path / "reqa")
  with pytest.raises(FileNotFoundError, match="no such split 'test-80'"):
    evaluate.load_splits(str(tmp_path / "reqa"), ["test-80"])
