"""`twotower fuse`: interpolation and reciprocal-rank fusion on hand-made runs with a known
fused order, and a weight chosen on the validation split, never on the test split."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twotower import contracts
from twotower.commands import fuse as fuse_cmd
from twotower.eval import evaluate, fusion, runs
from twotower.eval.runs import Ranked

# One query. Min-max normalised: A gives 1 -> 1.0, 2 -> 0.5, 3 -> 0.0; B gives 3 -> 1.0,
# 4 -> 0.5, 1 -> 0.0 (a candidate a run did not retrieve gets 0 from it).
A = {"q": Ranked((1, 2, 3), (10.0, 8.0, 6.0))}
B = {"q": Ranked((3, 4, 1), (0.9, 0.5, 0.1))}


@pytest.mark.parametrize("weight, order", [
    (0.7, (1, 2, 3, 4)),   # 1: .7   2: .35  3: .3   4: .15
    (0.2, (3, 4, 1, 2)),   # 1: .2   2: .1   3: .8   4: .4
    (0.5, (1, 3, 2, 4)),   # 1 = 3 = .5, 2 = 4 = .25: ties go to the smaller id
])
def test_interpolation_gives_the_hand_computed_order(weight, order):
  fused = fusion.interpolate(A, B, weight)
  assert fused["q"].candidate_ids == order
  assert list(fused["q"].scores) == sorted(fused["q"].scores, reverse=True)


def test_rrf_gives_the_hand_computed_order():
  a = {"q": Ranked((1, 2, 3), (3.0, 2.0, 1.0))}
  b = {"q": Ranked((2, 4), (5.0, 1.0))}
  # 1: 1/61 = .01639   2: 1/62 + 1/61 = .03252   3: 1/63 = .01587   4: 1/62 = .01613
  fused = fusion.rrf([a, b])
  assert fused["q"].candidate_ids == (2, 1, 4, 3)
  assert fused["q"].scores[0] == pytest.approx(1 / 62 + 1 / 61)


def test_a_query_missing_from_one_run_keeps_the_other_runs_order():
  fused = fusion.interpolate(A, {}, 0.5)
  assert fused["q"].candidate_ids == (1, 2, 3)
  assert fusion.rrf([A, {}])["q"].candidate_ids == (1, 2, 3)


def write_reqa(directory):
  """Candidates 1..4; validation questions whose gold (4) run A ranks first, test questions
  whose gold (1) run B ranks first: validation prefers weight 1 (all A), test would prefer
  0."""
  directory.mkdir()
  cands = [{"candidate_id": i, "sentence": f"s{i}", "passage": f"p{i}", "title": "t",
            "source": "squad"} for i in range(1, 5)]
  pq.write_table(pa.Table.from_pylist(cands, schema=contracts.CANDIDATE_SCHEMA),
                 directory / contracts.CANDIDATES_FILE)
  splits = {"validation-5": [("v1", 4), ("v2", 4)], "test-5": [("t1", 1), ("t2", 1)]}
  for split, rows in splits.items():
    pq.write_table(pa.Table.from_pylist(
        [{"question_id": q, "question": q, "gold_candidate_ids": [g]} for q, g in rows],
        schema=contracts.QUESTION_SCHEMA), directory / contracts.questions_file(split))


def runs_for_tuning():
  # At weight 0.5 candidates 4 (A's first) and 1 (B's first) tie and 1 wins the tie: only
  # a weight above 0.5 puts the validation gold, 4, first.
  a = {q: Ranked((4, 2, 3), (3.0, 2.0, 1.0)) for q in ("v1", "v2", "t1", "t2")}
  b = {q: Ranked((1, 3, 2), (3.0, 2.0, 1.0)) for q in ("v1", "v2", "t1", "t2")}
  return a, b


def test_weight_is_tuned_on_validation_and_a_test_split_is_refused(tmp_path):
  write_reqa(tmp_path / "reqa")
  a, b = runs_for_tuning()
  validation, test = evaluate.load_splits(str(tmp_path / "reqa"), ["validation-5", "test-5"])
  tuning = fusion.tune_weight(a, b, validation, metric="R@1")
  assert tuning.split == "validation-5"
  # R@1 on validation is 1 exactly when A's first candidate wins: weight > 0.5.
  assert tuning.weight > 0.5
  assert dict(tuning.by_weight)[1.0] == 1.0 and dict(tuning.by_weight)[0.0] == 0.0
  with pytest.raises(ValueError, match="only a validation split"):
    fusion.tune_weight(a, b, test, metric="R@1")


def test_a_tie_of_the_tuning_metric_goes_to_the_higher_mrr(tmp_path):
  """Every weight finds the validation gold in the top 3 (R@100 ties, as on a small
  validation split); MRR still prefers the weights that put it first."""
  write_reqa(tmp_path / "reqa")
  a, b = runs_for_tuning()
  (validation,) = evaluate.load_splits(str(tmp_path / "reqa"), ["validation-5"])
  tuning = fusion.tune_weight(a, b, validation, metric="R@100")
  assert set(dict(tuning.by_weight).values()) == {1.0}
  assert tuning.weight > 0.5  # not 0.5, where the gold is second
  assert dict(tuning.tiebreak_by_weight)[tuning.weight] == 1.0
  assert tuning.score == (1.0, 1.0)


def test_the_partner_is_the_run_that_fuses_best_on_validation(tmp_path):
  """Of two dense runs, the one whose fusion puts the validation gold first is chosen,
  though the other one is the better run on the test questions."""
  write_reqa(tmp_path / "reqa")
  a, b = runs_for_tuning()
  (validation,) = evaluate.load_splits(str(tmp_path / "reqa"), ["validation-5"])
  first = b  # ranks the test gold (1) first, the validation gold (4) nowhere
  name, tuning = fusion.choose_partner(first, {"test-lover": b, "validation-lover": a},
                                       validation, metric="R@1")
  assert name == "validation-lover" and tuning.score[0] == 1.0
  with pytest.raises(ValueError, match="at least one"):
    fusion.choose_partner(first, {}, validation)


def test_fuse_command_tunes_then_writes_a_run(tmp_path):
  write_reqa(tmp_path / "reqa")
  a, b = runs_for_tuning()
  runs.write_run(str(tmp_path / "a.trec"), a)
  runs.write_run(str(tmp_path / "b.parquet"), b)
  out = str(tmp_path / "hybrid" / "run.trec")
  config = fuse_cmd.parse(["--run", str(tmp_path / "a.trec"), str(tmp_path / "b.parquet"),
                           "--out", out, "--reqa", str(tmp_path / "reqa"),
                           "--tune_split", "validation-5", "--tune_metric", "R@1",
                           "--min_tune_questions", "2"])
  result = fusion.run(config)
  assert result.weight == result.tuning.weight > 0.5
  fused = runs.read_run(out)
  assert set(fused) == {"v1", "v2", "t1", "t2"}
  assert fused["t1"].candidate_ids[0] == 4  # the validation-chosen weight, applied to test
  with pytest.raises(SystemExit):  # auto without a validation split is a usage error
    fuse_cmd.parse(["--run", "x", "y", "--out", out])


def test_the_fused_run_is_scored_as_written(tmp_path):
  """With score_splits the result carries the fused run's records: those of the file it
  wrote, scored once (the grid's fuse cells keep them; nothing re-reads the run)."""
  write_reqa(tmp_path / "reqa")
  a, b = runs_for_tuning()
  runs.write_run(str(tmp_path / "a.trec"), a)
  runs.write_run(str(tmp_path / "b.trec"), b)
  out = str(tmp_path / "fused.trec")
  result = fusion.run(fusion.FuseConfig(
      runs=(str(tmp_path / "a.trec"), str(tmp_path / "b.trec")), out=out, weight=0.7,
      reqa=str(tmp_path / "reqa"), score_splits=("validation-5", "test-5"),
      golds=("pair",), tag="hybrid"))
  splits = evaluate.load_splits(str(tmp_path / "reqa"), ["validation-5", "test-5"])
  assert result.records == evaluate.evaluate_run_file(out, "hybrid", splits, ("pair",))
  # weight 0.7 puts A's first candidate (4) first: the validation gold, not the test one.
  by_split = {r["split"]: r for r in result.records}
  assert by_split["validation-5"]["metrics"]["R@1"] == 1.0
  assert by_split["test-5"]["metrics"]["R@1"] == 0.0
  assert fusion.run(fusion.FuseConfig(runs=(str(tmp_path / "a.trec"), str(tmp_path / "b.trec")),
                                      out=out, weight=0.7, tag="hybrid")).records == []


def test_the_default_objective_is_the_mean_recall_so_early_precision_counts(tmp_path):
  """Every weight ties at R@100 here; the mean of R@1..100 (the default) still rewards the
  weights that put the validation gold first, where R@100 alone cannot see a difference."""
  write_reqa(tmp_path / "reqa")
  a, b = runs_for_tuning()
  (validation,) = evaluate.load_splits(str(tmp_path / "reqa"), ["validation-5"])
  tuning = fusion.tune_weight(a, b, validation)
  assert tuning.metric == fusion.MEAN_RECALL == "mean_R@k"
  by_weight = dict(tuning.by_weight)
  assert by_weight[1.0] == 1.0 and by_weight[0.0] < 1.0  # gold 3rd at weight 0: R@1 = 0
  assert tuning.weight > 0.5
  assert fusion.objective({"R@1": 0.0, "R@5": 1.0, "R@100": 1.0, "MRR": 0.3},
                          fusion.MEAN_RECALL) == pytest.approx(2 / 3)
  with pytest.raises(ValueError, match="unknown tuning metric"):
    fusion.objective({"R@1": 1.0}, "R@7")


def test_a_validation_split_under_the_floor_is_refused_or_given_the_untuned_weight(tmp_path):
  write_reqa(tmp_path / "reqa")  # 2 validation questions
  a, b = runs_for_tuning()
  runs.write_run(str(tmp_path / "a.trec"), a)
  runs.write_run(str(tmp_path / "b.trec"), b)
  base = dict(runs=(str(tmp_path / "a.trec"), str(tmp_path / "b.trec")),
              reqa=str(tmp_path / "reqa"), tune_split="validation-5")
  with pytest.raises(ValueError, match="has 2 questions, fewer than --min_tune_questions 50"):
    fusion.run(fusion.FuseConfig(out=str(tmp_path / "refused.trec"), **base))
  assert not (tmp_path / "refused.trec").exists()
  result = fusion.run(fusion.FuseConfig(out=str(tmp_path / "even.trec"), untuned_weight=0.5,
                                        **base))
  assert result.weight == 0.5 and result.tuning is None
  # At 0.5 the tie between 4 (A's first) and 1 (B's first) goes to 1: the untuned weight,
  # not the one validation would choose (> 0.5, which puts 4 first).
  assert runs.read_run(str(tmp_path / "even.trec"))["v1"].candidate_ids[0] == 1
