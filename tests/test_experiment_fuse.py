"""The grid's hybrid (issue 37): tuned for its worst per-metric gain over BM25, and where a
ratio's validation split is too small to tune, a weight carried from the nearest larger tuned
ratio (its fuse cell a dependency) or BM25 alone, stated in the cell's record; the committed
grid's fuse cells keep their keys."""

from __future__ import annotations

import dataclasses

import pytest

import fusion_fixtures
from twotower.eval import evaluate, fusion, runs
from twotower.experiment import cells, grid, plan
from twotower.experiment.cell_id import CellId
from twotower.experiment.params import FuseParams, key_params

INPUTS = plan.Inputs("../shared/data/wiki/enwiki-slice-pages-articles.xml.bz2",
                     squad="squad.json")

#: cpu-small's fuse cells' keys before the worst-gain objective and `untuned` were added: the
#: committed results (docs/results/cpu-small) are restored by these keys.
CPU_SMALL_FUSE_KEYS = {
    "fuse/squad/hybrid/base/r1/s0":
        "9544ff41fe8c29e0a7bf5db9c244ad144aee795648636233c36469c55b254650",
    "fuse/squad/hybrid/base/r5/s0":
        "8a015031b59e17ca9d7d1eb8b336abb0e4b96b8ee9634ed9ab53d40f0139f798",
    "fuse/squad/hybrid/base/r5/s1":
        "b42892202b574d3ae52f9dcc1e84773871a0b351ef910ab0ccff3e5d4ea26d03",
    "fuse/squad/hybrid/base/r5/s2":
        "4bb2cee61f033fc8a5fd5a202766459ffd9049df052f034e7a4084aebcd6b19c",
    "fuse/squad/hybrid/base/r10/s0":
        "618dca5d49d6eedc2e72241905c09c913b83ea9dfefdc5b91f2a5c684da0dcb9",
    "fuse/squad/hybrid/base/r80/s0":
        "d224c97a51ce36bc6a3669703bf3eaa60ae68488b391986279ca3fd06f11d45d",
}


def test_cpu_small_fuse_cells_keep_their_keys_and_tune_as_they_did():
  the_plan, _ = plan.plan(grid.load("cpu-small"), INPUTS)
  fuse = {c.name: c for c in the_plan.of_kind("fuse")}
  assert {name: c.key for name, c in fuse.items()} == CPU_SMALL_FUSE_KEYS
  for c in fuse.values():
    assert "untuned" not in key_params(c.params) and plan.FUSE_CARRY not in c.deps
    assert (c.params.tune_metric, c.params.untuned, c.params.untuned_weight) == (
        "mean_R@k", "weight", 0.5)


def test_cpu_small_links_tunes_by_worst_gain_and_carries_from_the_next_ratio_same_seed():
  spec = grid.load("cpu-small-links")
  hybrid = spec.systems["hybrid"]
  assert (hybrid.tune_metric, hybrid.untuned) == (fusion.WORST_GAIN, "carry")
  # The pooled row only: the grid's other candidate rows run at seed 0, the hybrid at three.
  assert hybrid.fuse == ("bm25", "ict+bfs+wlp-pooled")
  assert hybrid.encoder == grid.load("cpu-small").systems["hybrid"].encoder  # the rest merged
  assert "worst gain over BM25" in hybrid.note and "carried" in hybrid.note
  the_plan, _ = plan.plan(spec, INPUTS)
  for seed in (0, 1, 2):
    chain = {r: the_plan[f"fuse/squad/hybrid/base/r{r}/s{seed}"] for r in (1, 5, 10, 80)}
    assert {r: c.deps.get(plan.FUSE_CARRY) for r, c in chain.items()} == {
        1: f"fuse/squad/hybrid/base/r5/s{seed}", 5: f"fuse/squad/hybrid/base/r10/s{seed}",
        10: f"fuse/squad/hybrid/base/r80/s{seed}", 80: None}
    assert key_params(chain[1].params)["untuned"] == "carry"
  # Carrying reads fuse cells the tables plan anyway: nothing more is trained or scored.
  spec_bm25 = grid.load("cpu-small-links")
  spec_bm25.systems["hybrid"] = dataclasses.replace(hybrid, untuned="bm25")
  without, _ = plan.plan(spec_bm25, INPUTS)
  assert {c.name for c in the_plan} == {c.name for c in without}


def test_a_grid_names_what_an_untuned_split_gets_or_is_refused(tmp_path):
  path = tmp_path / "g.yaml"
  path.write_text("extends: cpu-small\nsystems: {hybrid: {untuned: guess}}\n")
  with pytest.raises(ValueError, match="untuned 'guess'; expected"):
    grid.load(str(path))
  # Where no larger ratio has the seed, nothing is carried from (BM25 alone at run time).
  path.write_text("extends: cpu-small\nsystems: {hybrid: {untuned: carry}}\n")
  the_plan, _ = plan.plan(grid.load(str(path)), INPUTS)
  assert the_plan["fuse/squad/hybrid/base/r1/s0"].deps[plan.FUSE_CARRY] == (
      "fuse/squad/hybrid/base/r5/s0")
  assert plan.FUSE_CARRY not in the_plan["fuse/squad/hybrid/base/r5/s1"].deps  # r10: seed 0


# ---------------------------------------------------------------------------------------------
# The fuse executor on a ReQA directory and runs the test writes.
# ---------------------------------------------------------------------------------------------


class _Cells:
  """Fuse cells by hand, with the done records and directories of what they read."""

  def __init__(self, tmp_path, min_tune_questions: int):
    top1 = [f"{side}{i}" for side in ("a", "b") for i in range(3)]
    rescued = ["a3", "b3"]
    # validation-5 has 4 questions (tunes at a floor of 4), validation-1 two (does not).
    self.reqa = fusion_fixtures.write_reqa(tmp_path / "reqa", range(1, 12), {
        "validation-5": [("a0", 1), ("a1", 1), ("a2", 1), ("a3", 11)],
        "validation-1": [("b0", 1), ("b3", 11)], "test-5": [("b1", 1), ("b2", 1)],
        "test-1": [("a1", 1)]})
    bm25, dense = fusion_fixtures.trading_runs(top1, rescued)
    # A second dense row that rescues without trading: the worst gain prefers it.
    helper = {q: fusion_fixtures.Ranked((1,), (0.7,)) if q in top1 else r
              for q, r in dense.items()}
    self.done: dict[str, dict] = {}
    self.dirs = {"reqa/squad": self.reqa}
    for name, run_ in (("bm25/squad", bm25), ("eval/squad/trader/base/r5/s0", dense),
                       ("eval/squad/helper/base/r5/s0", helper)):
      # Each run at the top of its cell's directory, and a record that names where it was
      # written before the work dir was moved here: the fuse reads the directory it has now.
      cell_dir = tmp_path / name.replace("/", "_")
      cell_dir.mkdir()
      runs.write_run(str(cell_dir / "run.trec"), run_)
      self.dirs[name] = str(cell_dir)
      self.done[name] = {"run_file": f"/moved/away/{cell_dir.name}/run.trec"}
    self.tmp_path, self.min_tune_questions, self.runs = tmp_path, min_tune_questions, 0

  def run(self, ratio: int, untuned: str, carry: str = "") -> dict:
    cell_id = CellId("fuse", "squad", "hybrid", "base", ratio, 0)
    deps = {plan.FUSE_FIRST: "bm25/squad",
            plan.FUSE_PARTNER + "trader": "eval/squad/trader/base/r5/s0",
            plan.FUSE_PARTNER + "helper": "eval/squad/helper/base/r5/s0", "reqa": "reqa/squad"}
    if carry:
      deps[plan.FUSE_CARRY] = carry
    params = FuseParams(system="hybrid", method="interpolate", ratio=ratio, seed=0,
                        splits=(f"validation-{ratio}", f"test-{ratio}"),
                        tune_split=f"validation-{ratio}", tune_metric=fusion.WORST_GAIN,
                        min_tune_questions=self.min_tune_questions, untuned_weight=0.5,
                        untuned=untuned)
    cell = plan.Cell(cell_id, params, deps, key="k")
    ctx = cells.Context(work=str(self.tmp_path), dirs=self.dirs, done=self.done.__getitem__)
    self.runs += 1
    out = self.tmp_path / f"fuse-{self.runs}"  # a directory per run
    out.mkdir()
    record = cells.EXECUTORS["fuse"](cell, ctx, str(out))
    self.done[cell.name], self.dirs[cell.name] = record, str(out)
    return record

  def run_file(self, name: str) -> str:
    return str(self.tmp_path / name.replace("/", "_") / "run.trec")


def test_a_small_split_carries_the_nearest_tuned_ratios_weight_and_says_so(tmp_path):
  grid_cells = _Cells(tmp_path, min_tune_questions=4)
  tuned = grid_cells.run(5, "carry")
  assert tuned["weight_source"] == {"how": "tuned", "questions": 4,
                                    "text": "tuned on 4 validation questions"}
  assert tuned["partner"] == "helper" and tuned["weight"] < 1.0
  assert tuned["tuning"]["metric"] == fusion.WORST_GAIN and tuned["tuning"]["questions"] == 4
  carried = grid_cells.run(1, "carry", carry="fuse/squad/hybrid/base/r5/s0")
  assert (carried["weight"], carried["partner"]) == (tuned["weight"], tuned["partner"])
  assert carried["tuning"] is None
  assert carried["weight_source"] == {
      "how": "carried", "ratio": 5, "text": "carried from the 5 % ratio's tuned weight",
      "why": "2 validation-1 questions, fewer than 4"}
  # The fused run is the carried weight applied to the carried partner.
  fused = runs.read_run(carried["run_file"])
  helper = runs.read_run(grid_cells.run_file("eval/squad/helper/base/r5/s0"))
  bm25 = runs.read_run(grid_cells.run_file("bm25/squad"))
  expected = fusion.interpolate(bm25, helper, tuned["weight"])
  assert {q: r.candidate_ids for q, r in fused.items()} == {
      q: r.candidate_ids for q, r in expected.items()}
  # A cell that carries from a carried one names the ratio that was tuned.
  grid_cells.done["fuse/squad/hybrid/base/r1/s0-carried"] = carried
  again = grid_cells.run(1, "carry", carry="fuse/squad/hybrid/base/r1/s0-carried")
  assert again["weight_source"]["text"] == "carried from the 5 % ratio's tuned weight"
  assert again["weight"] == tuned["weight"]


def test_with_nothing_tuned_to_carry_or_untuned_bm25_the_hybrid_is_bm25_alone(tmp_path):
  grid_cells = _Cells(tmp_path, min_tune_questions=50)  # no split tunes
  bm25_ids = {q: r.candidate_ids
              for q, r in runs.read_run(grid_cells.run_file("bm25/squad")).items()}
  untuned_5 = grid_cells.run(5, "carry")  # nothing larger: BM25 alone
  assert untuned_5["weight_source"] == {"how": "first alone", "text": "BM25 alone",
                                        "why": "4 validation-5 questions, fewer than 50"}
  # ... and what carries from it is BM25 alone too, not "carried".
  from_it = grid_cells.run(1, "carry", carry="fuse/squad/hybrid/base/r5/s0")
  assert from_it["weight_source"]["text"] == "BM25 alone" and from_it["weight"] == 1.0
  for ratio, record in ((5, untuned_5), (1, from_it), (1, grid_cells.run(1, "bm25"))):
    assert record["weight"] == 1.0 and record["tuning"] is None
    assert {q: r.candidate_ids for q, r in runs.read_run(record["run_file"]).items()} == bm25_ids
    splits = evaluate.load_splits(grid_cells.reqa, [f"validation-{ratio}", f"test-{ratio}"])
    bm25_records = evaluate.evaluate_run_file(grid_cells.run_file("bm25/squad"),
                                              "hybrid", splits, ("pair",))
    assert [r["metrics"] for r in record["records"] if r["gold"] == "pair"] == [
        r["metrics"] for r in bm25_records]
  # The committed grids' rule: the untuned weight, stated as such.
  old = grid_cells.run(1, "weight")
  assert old["weight"] == 0.5 and old["weight_source"]["text"] == "weight 0.50, not tuned"
