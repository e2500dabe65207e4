"""`twotower fuse`: interpolation and reciprocal-rank fusion on hand-made runs with a known
fused order, and a weight chosen on the validation split, never on the test split."""

from __future__ import annotations

import pytest

import fusion_fixtures
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
  fusion_fixtures.write_reqa(directory, range(1, 5), {
      "validation-5": [("v1", 4), ("v2", 4)], "test-5": [("t1", 1), ("t2", 1)]})


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


# ---------------------------------------------------------------------------------------------
# BM25 alone among the candidates, and the worst gain over it (issue 37).
# ---------------------------------------------------------------------------------------------


def test_weight_one_is_the_first_run_itself_its_ties_and_length_kept(tmp_path):
  """BM25 ranks 7 before 3 at a tied score and lists four candidates; the dense run adds 1
  and 2. The formula at weight 1 would re-sort the tie (3 before 7) and let 1 and 2 (0 from
  BM25) tie with BM25's last candidate (9, normalised 0) and pass it by id."""
  bm25 = {"q": Ranked((5, 7, 3, 9), (4.0, 2.0, 2.0, 1.0)), "only-bm25": Ranked((4,), (1.0,))}
  dense = {"q": Ranked((1, 2, 9), (0.9, 0.8, 0.1)), "only-dense": Ranked((8,), (1.0,))}
  fused = fusion.interpolate(bm25, dense, fusion.FIRST_ALONE)
  assert fused["q"] == Ranked((5, 7, 3, 9), (1.0, 1 / 3, 1 / 3, 0.0))
  assert fused["only-bm25"] == Ranked((4,), (1.0,))
  assert fused["only-dense"] == Ranked((), ())  # BM25 retrieved nothing for it
  assert fusion.interpolate(bm25, dense, 1.0, depth=2)["q"].candidate_ids == (5, 7)
  # Written and read back: the same order (a TREC file keeps ranks, not a re-sort by score).
  runs.write_run(str(tmp_path / "alone.trec"), fused)
  assert runs.read_run(str(tmp_path / "alone.trec"))["q"].candidate_ids == (5, 7, 3, 9)
  # Just below 1 the formula applies: the tie goes to the smaller id, 1 and 2 join.
  assert fusion.interpolate(bm25, dense, 0.95)["q"].candidate_ids == (5, 3, 7, 1, 2, 9)


def _trading_reqa(tmp_path):
  """validation-5: two questions BM25 gets first, one it misses; test-5 likewise."""
  top1, rescued = ["v1", "v2", "t1", "t2"], ["v3", "t3"]
  reqa = fusion_fixtures.write_reqa(tmp_path / "reqa", range(1, 12), {
      "validation-5": [("v1", 1), ("v2", 1), ("v3", 11)],
      "test-5": [("t1", 1), ("t2", 1), ("t3", 11)]})
  return reqa, fusion_fixtures.trading_runs(top1, rescued)


def test_when_every_dense_weight_loses_r1_the_worst_gain_chooses_bm25_alone(tmp_path):
  reqa, (bm25, dense) = _trading_reqa(tmp_path)
  (validation,) = evaluate.load_splits(reqa, ["validation-5"])
  # The mean of R@k buys R@5..100 with R@1: a weight below 1, a third of R@1 lost (two
  # top-1 questions lost, the rescued one won).
  mean = fusion.tune_weight(bm25, dense, validation)
  alone = fusion._split_metrics(fusion.interpolate(bm25, dense, 1.0), validation)
  at_mean = fusion._split_metrics(fusion.interpolate(bm25, dense, mean.weight), validation)
  assert mean.weight < 1.0 and at_mean["R@1"] == pytest.approx(alone["R@1"] - 1 / 3)
  assert at_mean["R@100"] == pytest.approx(alone["R@100"] + 1 / 3)
  # The worst gain cannot trade: every weight below 1 loses R@1, so BM25 alone.
  worst = fusion.tune_weight(bm25, dense, validation, metric=fusion.WORST_GAIN)
  assert (worst.weight, worst.metric, worst.questions) == (1.0, "worst_gain_over_first", 3)
  assert worst.score == (0.0, 0.0)
  assert worst.gains == {m: 0.0 for m in ("R@1", "R@5", "R@10", "R@50", "R@100", "MRR")}
  by_weight = dict(worst.by_weight)
  assert set(by_weight) == set(fusion.WEIGHT_GRID)
  assert all(by_weight[w] < 0 for w in fusion.WEIGHT_GRID if w < 1.0)
  # A weight list without 1 still has BM25 alone among its candidates.
  assert fusion.tune_weight(bm25, dense, validation, fusion.WORST_GAIN,
                            weights=(0.5, 0.9)).weight == 1.0


def test_the_fuse_run_chosen_by_worst_gain_is_bm25s_run_and_never_below_it(tmp_path):
  """Through `fusion.run` and files: the fused run is BM25's run list for list (its scores
  normalised), its records BM25's on both splits (never below on validation)."""
  reqa, (bm25, dense) = _trading_reqa(tmp_path)
  runs.write_run(str(tmp_path / "bm25.trec"), bm25)
  runs.write_run(str(tmp_path / "dense.parquet"), dense)
  out = str(tmp_path / "hybrid.trec")
  result = fusion.run(fusion.FuseConfig(
      runs=(str(tmp_path / "bm25.trec"), str(tmp_path / "dense.parquet")), out=out,
      reqa=reqa, tune_split="validation-5", tune_metric=fusion.WORST_GAIN,
      min_tune_questions=3, score_splits=("validation-5", "test-5"), golds=("pair",)))
  assert result.weight == 1.0 and result.tune_questions == 3
  assert {q: r.candidate_ids for q, r in runs.read_run(out).items()} == {
      q: r.candidate_ids for q, r in bm25.items()}
  splits = evaluate.load_splits(reqa, ["validation-5", "test-5"])
  reference = evaluate.evaluate_run_file(str(tmp_path / "bm25.trec"), "fused", splits,
                                         ("pair",))
  assert [r["metrics"] for r in result.records] == [r["metrics"] for r in reference]


def test_worst_gain_takes_a_weight_that_gains_everywhere_and_never_loses(tmp_path):
  """Every question is a rescue (and one both runs get first): below 0.5 the dense run's
  gold goes first, a gain at every metric; the largest worst gain wins, its ties going to
  the larger mean gain, then to the weight nearer BM25."""
  bm25, dense = fusion_fixtures.trading_runs([], ["v1", "v2"])
  bm25["v3"], dense["v3"] = Ranked((1, 2), (2.0, 1.0)), Ranked((1,), (0.5,))
  reqa = fusion_fixtures.write_reqa(tmp_path / "reqa", range(1, 12), {
      "validation-5": [("v1", 11), ("v2", 11), ("v3", 1)]})
  (validation,) = evaluate.load_splits(reqa, ["validation-5"])
  tuning = fusion.tune_weight(bm25, dense, validation, metric=fusion.WORST_GAIN)
  alone = fusion._split_metrics(fusion.interpolate(bm25, dense, 1.0), validation)
  chosen = fusion._split_metrics(fusion.interpolate(bm25, dense, tuning.weight), validation)
  assert tuning.weight == 0.45  # the weight below 0.5 nearest BM25
  assert chosen["R@1"] == pytest.approx(alone["R@1"] + 2 / 3)
  assert all(chosen[m] > alone[m] for m in alone)
  assert tuning.gains == pytest.approx({m: chosen[m] - alone[m] for m in alone})
  assert dict(tuning.by_weight)[0.45] == min(tuning.gains.values()) > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_on_random_runs_the_worst_gain_choice_is_never_below_bm25_on_validation(tmp_path,
                                                                                  seed):
  """The guarantee on runs nobody arranged: 40 questions, 30 candidates, noisy scores; the
  chosen fusion (weight and partner) scored from its file is at or above BM25 at every
  metric of the tuning split."""
  import random
  rng = random.Random(seed)
  questions = [(f"v{i}", rng.randint(1, 30)) for i in range(40)]

  def a_run(depth):
    return {q: Ranked(tuple(rng.sample(range(1, 31), depth)),
                      tuple(sorted((rng.random() for _ in range(depth)), reverse=True)))
            for q, _ in questions}

  reqa = fusion_fixtures.write_reqa(tmp_path / "reqa", range(1, 31),
                                    {"validation-10": questions})
  paths = []
  for name, depth in (("bm25.trec", 12), ("d1.parquet", 20), ("d2.parquet", 8)):
    runs.write_run(str(tmp_path / name), a_run(depth))
    paths.append(str(tmp_path / name))
  result = fusion.run(fusion.FuseConfig(
      runs=tuple(paths), out=str(tmp_path / "fused.trec"), reqa=reqa,
      tune_split="validation-10", tune_metric=fusion.WORST_GAIN, depth=10,
      score_splits=("validation-10",), golds=("pair",), min_tune_questions=40))
  (split,) = evaluate.load_splits(reqa, ["validation-10"])
  bm25_cut = {q: r.candidate_ids[:10] for q, r in runs.read_run(paths[0]).items()}
  (bm25_record,) = evaluate.evaluate(bm25_cut, "bm25", [split], ("pair",))
  fused, first = result.records[0]["metrics"], bm25_record["metrics"]
  assert all(fused[m] >= first[m] for m in first), (result.weight, fused, first)
  assert min(fused[m] - first[m] for m in first) == pytest.approx(result.tuning.score[0])
  # (BM25's 12 random candidates against the dense rows' 20: here a weight below 1 wins.)
  assert result.weight < 1.0 and result.tuning.score[0] >= 0.0


def test_partners_compare_by_worst_gain_and_tie_at_bm25_alone_to_the_first(tmp_path):
  reqa, (bm25, dense) = _trading_reqa(tmp_path)
  (validation,) = evaluate.load_splits(reqa, ["validation-5"])
  # Neither partner fuses without losing R@1: BM25 alone, with the first partner named.
  name, tuning = fusion.choose_partner(bm25, {"trader": dense, "same": dict(dense)},
                                       validation, metric=fusion.WORST_GAIN)
  assert (name, tuning.weight) == ("trader", 1.0)
  # A partner that agrees with BM25 on the top-1 questions and rescues the other one gains
  # without a loss: it is chosen over the trader, at a weight below 1.
  helper = {q: Ranked((1,), (0.7,)) if q in ("v1", "v2", "t1", "t2") else r
            for q, r in dense.items()}
  name, tuning = fusion.choose_partner(bm25, {"trader": dense, "helper": helper},
                                       validation, metric=fusion.WORST_GAIN)
  assert name == "helper" and tuning.weight < 1.0 and tuning.score[0] >= 0.0
  assert tuning.preference == (*tuning.score, -abs(tuning.weight - 1.0))


def test_an_untuned_weight_applies_to_the_named_partner(tmp_path):
  reqa, (bm25, dense) = _trading_reqa(tmp_path)
  other = {q: Ranked((3,), (1.0,)) for q in dense}
  for name, run_ in (("bm25.trec", bm25), ("dense.trec", dense), ("other.trec", other)):
    runs.write_run(str(tmp_path / name), run_)
  paths = tuple(str(tmp_path / n) for n in ("bm25.trec", "dense.trec", "other.trec"))
  base = dict(runs=paths, reqa=reqa, tune_split="validation-5", untuned_weight=0.3)
  result = fusion.run(fusion.FuseConfig(out=str(tmp_path / "f.trec"), untuned_partner=paths[2],
                                        **base))
  assert (result.weight, result.partner, result.tuning) == (0.3, paths[2], None)
  assert result.tune_questions == 3
  assert runs.read_run(str(tmp_path / "f.trec"))["v3"].candidate_ids[0] == 3  # other's first
  with pytest.raises(ValueError, match="untuned_partner 'x' is not one of the partner runs"):
    fusion.FuseConfig(out=str(tmp_path / "g.trec"), untuned_partner="x", **base)


def test_weight_sources_say_how_each_weight_was_come_by():
  tuned = fusion.weight_source(fusion.TUNED, questions=72)
  carried = fusion.weight_source(fusion.CARRIED, ratio=5, why="18 questions, fewer than 50")
  assert tuned == {"how": "tuned", "text": "tuned on 72 validation questions", "questions": 72}
  assert carried["text"] == "carried from the 5 % ratio's tuned weight"
  assert carried["why"] == "18 questions, fewer than 50"
  assert fusion.weight_source(fusion.FIRST_RUN_ALONE)["text"] == "BM25 alone"
  assert fusion.weight_source(fusion.NOT_TUNED, weight=0.5)["text"] == "weight 0.50, not tuned"
  with pytest.raises(ValueError, match="unknown weight source"):
    fusion.weight_source("guessed")
  note = fusion.weights_note([(5, 1, 0.9, tuned), (1, 0, 0.95, carried), (5, 0, 0.95, tuned),
                              (80, 0, 1.0, fusion.weight_source(fusion.FIRST_RUN_ALONE))])
  assert note == ("The hybrid's weight on BM25, by ratio: 1 %: 0.95 (carried from the 5 % "
                  "ratio's tuned weight); 5 %: 0.95, 0.90 (tuned on 72 validation questions); "
                  "80 %: 1.00 (BM25 alone).")


def test_fuse_command_takes_the_worst_gain_objective(tmp_path):
  config = fuse_cmd.parse(["--run", "a.trec", "b.trec", "--out", str(tmp_path / "f.trec"),
                           "--reqa", "r", "--tune_split", "validation-5",
                           "--tune_metric", "worst_gain_over_first"])
  assert config.tune_metric == fusion.WORST_GAIN
  with pytest.raises(SystemExit):
    fuse_cmd.parse(["--run", "a.trec", "b.trec", "--out", "f.trec", "--reqa", "r",
                    "--tune_split", "validation-5", "--tune_metric", "worst_gain"])
