"""Per-question gold ranks: a run's on a ReQA split as a byte-stable file (twotower.eval.
gold_ranks), recorded by every result cell of a grid, exported beside the tables and read back
by cell name (twotower.experiment.ranks)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import pathlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twotower.core import contracts
from twotower.core import metrics
from twotower.eval import evaluate, gold_ranks, runs
from twotower.eval.runs import Ranked
from twotower.experiment import cells, execute, grid, plan as plan_lib, ranks

# test-80 holds q1..q5, validation-80 q6 (tuned on, never a table's number), all every one.
GOLDS = {"q1": [10], "q2": [11], "q3": [12, 13], "q4": [14], "q5": [15], "q6": [16]}
SPLITS = {"all": list(GOLDS), "validation-80": ["q6"], "test-80": ["q1", "q2", "q3", "q4", "q5"]}
RUN = {"q1": Ranked((10, 20, 21), (3.0, 2.0, 1.0)),     # gold first: rank 1
       "q2": Ranked((20, 21, 11), (3.0, 2.0, 1.0)),     # rank 3
       "q3": Ranked((20, 13, 12), (3.0, 2.0, 1.0)),     # two golds, the first found: rank 2
       "q4": Ranked((20, 21), (2.0, 1.0)),              # gold beyond the run's depth: a miss
       "q6": Ranked((16,), (1.0,))}                     # q5 not in the run at all: a miss
EXPECTED = {"q1": 1, "q2": 3, "q3": 2, "q4": None, "q5": None}
SCORED = gold_ranks.scored_splits(("validation-80", "test-80"))  # test-80


def write_reqa(directory) -> str:
  """A ReQA directory: candidates 10-21, the questions of SPLITS."""
  os.makedirs(directory, exist_ok=True)
  candidates = [{"candidate_id": i, "sentence": f"sentence {i}", "passage": f"passage {i}",
                 "title": "t", "source": "squad"} for i in range(10, 22)]
  pq.write_table(pa.Table.from_pylist(candidates, schema=contracts.CANDIDATE_SCHEMA),
                 contracts.candidates_path(str(directory)))
  for split, ids in SPLITS.items():
    rows = [{"question_id": q, "question": f"question {q}?", "gold_candidate_ids": GOLDS[q]}
            for q in ids]
    pq.write_table(pa.Table.from_pylist(rows, schema=contracts.QUESTION_SCHEMA),
                   contracts.questions_path(str(directory), split))
  return str(directory)


def test_recorded_ranks_are_the_gold_ranks_of_the_questions_the_table_scores(tmp_path):
  reqa = write_reqa(tmp_path / "reqa")
  runs.write_run(str(tmp_path / "run.trec"), RUN)
  summary = gold_ranks.record(str(tmp_path / "run.trec"), reqa, SCORED,
                              str(tmp_path / "cell"))
  got = gold_ranks.read(str(tmp_path / "cell" / contracts.RANKS_FILE))
  assert got == EXPECTED                            # q6 (validation) left out
  assert summary["questions"] == 5 and summary["misses"] == 2
  # The table's numbers come back from the ranks: the gold lookup is evaluate's.
  (split,) = evaluate.load_splits(reqa, ["test-80"])
  (record,) = evaluate.evaluate_run_file(str(tmp_path / "run.trec"), "x", [split])
  assert metrics.summarize([r or 0 for r in got.values()]) == record["metrics"]
  # Zero-shot scores every question: all of them, q6 at rank 1.
  gold_ranks.record(str(tmp_path / "run.trec"), reqa, ["all"], str(tmp_path / "zero"))
  assert gold_ranks.read(str(tmp_path / "zero" / contracts.RANKS_FILE)) == {**EXPECTED, "q6": 1}


def test_the_same_run_gives_the_same_bytes(tmp_path):
  reqa = write_reqa(tmp_path / "reqa")
  runs.write_run(str(tmp_path / "run.trec"), RUN)
  runs.write_run(str(tmp_path / "run.parquet"), RUN)  # the same ranking, another format
  outs = []
  for name, run_file in (("a", "run.trec"), ("b", "run.trec"), ("c", "run.parquet")):
    gold_ranks.record(str(tmp_path / run_file), reqa, SCORED, str(tmp_path / name))
    outs.append({f: (tmp_path / name / f).read_bytes() for f in os.listdir(tmp_path / name)})
  assert outs[0] == outs[1] == outs[2]
  data = outs[0][contracts.RANKS_FILE]
  assert data[4:8] == b"\0\0\0\0"                   # gzip without a time stamp
  header, _, payload = gzip.decompress(data).partition(b"\n")
  header = json.loads(header)
  assert header == {"count": 5, "format": "twotower-ranks", "gold": "pair", "misses": 2,
                    "questions": header["questions"], "version": 1, "width": 1}
  assert payload == bytes([1, 3, 2, 0, 0])          # q1..q5 in id order
  ids = outs[0][contracts.ranks_questions_file(header["questions"])]
  assert gzip.decompress(ids) == b"q1\nq2\nq3\nq4\nq5\n"


def test_deep_runs_widen_the_ranks_and_bad_files_are_named(tmp_path):
  deep = {"a": 300, "b": 0, "c": 1}
  path = gold_ranks.write(deep, str(tmp_path))
  assert gold_ranks.read(path) == {"a": 300, "b": None, "c": 1}
  assert json.loads(gzip.decompress(pathlib.Path(path).read_bytes()).split(b"\n")[0])["width"] == 2
  deeper = gold_ranks.write({"a": 70000}, str(tmp_path / "deeper"))
  assert gold_ranks.read(deeper) == {"a": 70000}
  body = gzip.decompress(pathlib.Path(path).read_bytes())
  (tmp_path / "cut").mkdir()
  for f in os.listdir(tmp_path):
    if f.startswith("questions-"):
      (tmp_path / "cut" / f).write_bytes((tmp_path / f).read_bytes())
  (tmp_path / "cut" / contracts.RANKS_FILE).write_bytes(gzip.compress(body[:-1]))
  with pytest.raises(ValueError, match=r"cut.ranks\.gz: 5 bytes of ranks for 3 questions"):
    gold_ranks.read(str(tmp_path / "cut" / contracts.RANKS_FILE))
  (tmp_path / "alone").mkdir()
  (tmp_path / "alone" / contracts.RANKS_FILE).write_bytes(pathlib.Path(path).read_bytes())
  with pytest.raises(ValueError, match=r"alone.ranks\.gz: its question ids, .* are missing"):
    gold_ranks.read(str(tmp_path / "alone" / contracts.RANKS_FILE))
  (tmp_path / "alone" / contracts.RANKS_FILE).write_bytes(gzip.compress(b"not ranks\n"))
  with pytest.raises(ValueError, match=r"not a twotower-ranks file"):
    gold_ranks.read(str(tmp_path / "alone" / contracts.RANKS_FILE))
  (tmp_path / "alone" / contracts.RANKS_FILE).write_bytes(pathlib.Path(path).read_bytes()[:30])
  with pytest.raises(ValueError, match=r"alone.ranks\.gz: not a whole gzip file"):
    gold_ranks.read(str(tmp_path / "alone" / contracts.RANKS_FILE))
  with pytest.raises(ValueError, match=r"question id 'x\\ny': empty or with a line break"):
    gold_ranks.write({"x\ny": 1}, str(tmp_path))
  odd = {"a\rb": 2, " c ": 0, "d\u2028e": 1}        # any other character is kept whole
  assert gold_ranks.read(gold_ranks.write(odd, str(tmp_path / "odd"))) == {
      "a\rb": 2, " c ": None, "d\u2028e": 1}


# ---------------------------------------------------------------------------------------------
# A grid's cells: the tiny grid's plan (pure: nothing of it runs) over a hand-made work dir.
# ---------------------------------------------------------------------------------------------

BM25, ICT, ICT_HN = "bm25/squad", "eval/squad/ict/base/r80/s0", "eval/squad/ict-hn/base/r80/s0"
FUSE = "fuse/squad/hybrid/base/r80/s0"


@pytest.fixture
def tiny(tmp_path):
  """(plan, work) of the tiny grid: its ReQA directory written; BM25 finished with a run and
  its ranks; the ICT evaluation finished before ranks were recorded (a run, no ranks); the
  ICT-HN evaluation with a run, not finished."""
  the_plan, _ = plan_lib.plan(grid.load("tiny"), plan_lib.Inputs("dump.xml", "squad.json"))
  work = str(tmp_path / "work")
  reqa = write_reqa(execute.cell_dir(work, the_plan["reqa/squad"]))
  records = {"reqa/squad": {}}
  other = {q: Ranked((r.candidate_ids[-1], *r.candidate_ids[:-1]), r.scores)
           for q, r in RUN.items()}                 # the last first: q1 at 2, q2 and q3 at 1
  for name, run in ((BM25, RUN), (ICT, other), (ICT_HN, RUN)):
    out = execute.cell_dir(work, the_plan[name])
    os.makedirs(out)
    run_file = os.path.join(out, "run.trec")
    runs.write_run(run_file, run)
    records[name] = {"run_file": run_file}
  # BM25 recorded its ranks as it ran (cells._bm25's tail).
  gold_ranks.record(records[BM25]["run_file"], reqa,
                    gold_ranks.scored_splits(the_plan[BM25].params.splits),
                    execute.cell_dir(work, the_plan[BM25]))
  for name in ("reqa/squad", BM25, ICT):
    cell = the_plan[name]
    with open(os.path.join(execute.cell_dir(work, cell), execute.DONE_FILE), "w") as f:
      json.dump({"cell": name, "kind": cell.kind, "key": cell.key, **records[name]}, f)
  return the_plan, work


def test_ranks_are_exported_beside_the_tables_and_read_back_by_cell_name(tiny, tmp_path):
  the_plan, work = tiny
  results = str(tmp_path / "results")
  assert ranks.export(the_plan, work, results) == 2
  folder = tmp_path / "results" / contracts.RANKS_DIR
  bm25_file = ranks.results_name(the_plan[BM25])
  assert bm25_file == the_plan[BM25].dirname.replace("/", "_") + ".ranks.gz"
  index = json.loads((folder / ranks.INDEX_FILE).read_text())
  assert index == {BM25: bm25_file, ICT: ranks.results_name(the_plan[ICT])}
  # BM25 scores every ratio in one run: its ranks hold every question it scores (zero-shot's
  # `all` included), validation sides aside; ICT's the test side of its ratio.
  every = {**EXPECTED, "q6": 1}
  assert gold_ranks.read(str(folder / bm25_file)) == every
  shifted = {"q1": 2, "q2": 1, "q3": 1, "q4": None, "q5": None}
  # The ICT cell finished before cells recorded ranks: recorded now, from its run file.
  assert os.path.exists(os.path.join(execute.cell_dir(work, the_plan[ICT]),
                                     contracts.RANKS_FILE))
  # The results folder shares one question-id file between cells scored on the same split.
  assert sorted(f for f in os.listdir(folder) if f.startswith("questions-")) == sorted(
      contracts.ranks_questions_file(gold_ranks.encode(r)[2]) for r in
      ({q: r or 0 for q, r in every.items()}, {q: r or 0 for q, r in shifted.items()}))
  for ranks_of in (ranks.reader(the_plan, work, results),
                   ranks.reader(the_plan, str(tmp_path / "no-work"), results),
                   ranks.results_reader(results)):
    assert ranks_of(BM25) == every and ranks_of(ICT) == shifted
    assert ranks_of(ICT_HN) is None                  # not finished: nothing recorded
    assert ranks_of(FUSE) is None
  assert ranks.reader(the_plan, work, results)("reqa/squad") is None   # not a result cell
  assert ranks.reader(the_plan, work, str(tmp_path / "none"))(BM25) == every  # work dir's
  assert ranks.results_reader(str(tmp_path / "none"))(BM25) is None     # an old grid's folder


def test_a_restored_cell_keeps_the_committed_ranks(tiny, tmp_path):
  the_plan, work = tiny
  results = str(tmp_path / "results")
  ranks.export(the_plan, work, results)
  folder = tmp_path / "results" / contracts.RANKS_DIR
  before = {f: (folder / f).read_bytes() for f in os.listdir(folder)}
  # A new work dir: every cell restored from cells.json, without outputs.
  fresh = str(tmp_path / "fresh")
  restored = execute.restore(the_plan, fresh, execute.export_records(the_plan, work))
  assert set(restored) == {"reqa/squad", BM25, ICT}
  assert ranks.export(the_plan, fresh, results) == 0
  assert {f: (folder / f).read_bytes() for f in os.listdir(folder)} == before
  assert ranks.reader(the_plan, fresh, results)(ICT) == {"q1": 2, "q2": 1, "q3": 1,
                                                          "q4": None, "q5": None}


def test_a_fuse_cell_records_the_ranks_of_its_fused_run(tiny):
  """The executors' tail: a fuse cell (BM25 with the ICT rows, tuned on validation-80) writes
  the ranks of the run it made on the test side."""
  the_plan, work = tiny
  dirs = {c.name: execute.cell_dir(work, c) for c in the_plan}
  done = {name: {"run_file": os.path.join(dirs[name], "run.trec")} for name in (BM25, ICT,
                                                                                ICT_HN)}
  ctx = cells.Context(work=work, dirs=dirs, done=done.__getitem__)
  fuse = the_plan[FUSE]
  os.makedirs(dirs[FUSE])
  result = cells.EXECUTORS["fuse"](fuse, ctx, dirs[FUSE])
  got = gold_ranks.read(os.path.join(dirs[FUSE], contracts.RANKS_FILE))
  reqa = dirs["reqa/squad"]
  assert got == {q: r or None for q, r in gold_ranks.of_run(result["run_file"], reqa,
                                                       ["test-80"]).items()}
  assert set(got) == set(SPLITS["test-80"]) and got["q5"] is None


def test_a_moved_work_dir_reads_its_own_run_files(tiny, tmp_path):
  """Done records name where a run file was written; a work dir moved (or copied to resume
  elsewhere) reads the file in the cell's directory it has now."""
  the_plan, work = tiny
  moved = str(tmp_path / "moved")
  shutil.move(work, moved)
  assert not os.path.exists(execute.read_done(execute.cell_dir(moved, the_plan[ICT]))["run_file"])
  assert ranks.export(the_plan, moved, str(tmp_path / "results")) == 2
  assert ranks.reader(the_plan, moved, str(tmp_path / "results"))(ICT) == {
      "q1": 2, "q2": 1, "q3": 1, "q4": None, "q5": None}
