"""The reading of a grid: claims parsed from the grid file, verdicts by the rule
(experiment.verdict_rule: seed-aware bootstrap intervals with paired seeds; the two-SD rule on
sample standard deviations and a sign-flip test where no ranks were recorded; qualifier
thresholds), the
bootstrap itself, counts per (pair, metric, ratio), caveats beside verdicts, and the committed
reading and docs/results.md true to the committed results."""

import copy
import json
import pathlib
import re
import math
import statistics

import pytest

from twotower.experiment import bootstrap, budget, grid, grid_files, readings, row_configs, verdict_rule as rule

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "cpu-small"


def side(*values, seedless=False):
  return readings.Side("row", tuple(values), seedless)


# ---------------------------------------------------------------------------------------------
# The rule.
# ---------------------------------------------------------------------------------------------


def test_sample_standard_deviation():
  # (1, 2, 3): squares about the mean 1 + 0 + 1 = 2, over n - 1 = 2 -> 1 (population: 0.816).
  assert readings.mean_and_sd([1.0, 2.0, 3.0]) == (2.0, 1.0)
  assert readings.mean_and_sd([5.0]) == (5.0, 0.0)


@pytest.mark.parametrize("a, b, expect, verdict", [
    # Means 10 and 4, SDs 1 and 1: gap 6 >= 2 x 1.
    (side(9, 10, 11), side(3, 4, 5), "higher", readings.HOLDS),
    # The same numbers against a claim that A is below B.
    (side(9, 10, 11), side(3, 4, 5), "lower", readings.CONTRADICTED),
    # Two seeds against three: A = (8, 12), mean 10, SD sqrt(8) = 2.83; gap 6 >= bar 5.66.
    (side(8, 12), side(3, 4, 5), "higher", readings.HOLDS),
    # A = (7, 13): SD sqrt(18) = 4.24, bar 8.49 > gap 6: not resolved.
    (side(7, 13), side(3, 4, 5), "higher", readings.NOT_RESOLVED),
    # One seed on a side: an observation, however large the gap.
    (side(50), side(3, 4, 5), "higher", readings.SEEN_AS),
    (side(50), side(3, 4, 5), "lower", readings.SEEN_AGAINST),
    (side(1), side(2), "higher", readings.SEEN_AGAINST),
    # BM25 has no seed: its one run is its whole spread (0), so the other side's SD decides.
    (side(95, seedless=True), side(40, 45, 50), "higher", readings.HOLDS),
    (side(95, seedless=True), side(40), "higher", readings.SEEN_AS),
    # Equal means are never resolved; equal at every paired seed is "equal".
    (side(3, 5), side(5, 3, 4), "higher", readings.NOT_RESOLVED),
    (side(4, 4), side(4, 4, 4), "higher", readings.EQUAL),
], ids=["resolved", "contradicted", "two-vs-three-resolved", "two-vs-three-not",
        "one-seed-as", "one-seed-against", "one-seed-each", "seedless-resolved",
        "seedless-vs-one-seed", "tie", "equal"])
def test_verdict(a, b, expect, verdict):
  assert readings.verdict(a, b, expect) == verdict


def test_the_rule_in_the_text_uses_the_rules_words():
  for verdict in (readings.HOLDS, readings.CONTRADICTED, readings.NOT_RESOLVED):
    assert f"**{verdict}**" in readings.RULE
  assert "2 × max(SD A, SD B)" in readings.RULE and "n − 1" in readings.RULE


# ---------------------------------------------------------------------------------------------
# Claims as data.
# ---------------------------------------------------------------------------------------------

GRID = {
    "model": "cpu-small", "ratios": [1, 5],
    "variants": {"l4": {"label": "L4", "set": ["model.num_layers=4"]}},
    "systems": {"bm25": {"kind": "bm25", "encoder": "BM25"},
                "ict": {"encoder": "Transformer", "pretraining": "ICT", "tasks": ["ict"]},
                "mlm": {"encoder": "Transformer", "pretraining": "MLM", "tasks": ["mlm"]}},
    "tables": [{"id": "3", "title": "t3", "ratios": [1, 5], "rows": ["bm25", "ict", "mlm"]},
               {"id": "5", "title": "t5", "layout": "r100", "ratios": [5],
                "rows": [{"system": "ict", "variant": "l4"}]}],
    "readings": [
        {"id": "ict-over-mlm", "sentence": "ICT is above MLM.", "source": "paper",
         "pairs": [["ict", "mlm"]]},
        {"id": "deeper", "sentence": "Deeper is better.", "source": "ours", "table": "5",
         "metrics": ["R@1", "R@100"],
         "pairs": [[{"system": "ict", "variant": "l4"},
                    {"system": "ict", "table": "3", "seeds": [0]}]]}]}


def _results(values):
  """results.json's per_seed list from {(table, system, variant, ratio): [R@100 per seed]}."""
  per_seed = []
  for (table, system, variant, ratio), xs in values.items():
    for seed, x in enumerate(xs):
      per_seed.append({"table": table, "dataset": "squad", "system": system,
                       "variant": variant, "ratio": ratio, "seed": seed,
                       "record": {"metrics": {"R@1": x / 2, "R@100": x}}})
  return {"per_seed": per_seed}


def test_claims_parse_into_typed_rows():
  spec = grid.parse("g", GRID)
  first, second = spec.readings
  assert first.pairs == ((grid.RowRef("ict"), grid.RowRef("mlm")),)
  assert first.table == "3" and first.metrics == ("R@100",) and first.expect == "higher"
  assert second.pairs[0][0] == grid.RowRef("ict", "l4")
  assert second.pairs[0][1] == grid.RowRef("ict", table="3", seeds=(0,))


def test_a_row_reads_as_one_phrase_where_tables_have_two_columns():
  """Summaries and readings name a row by encoder and pre-training; a pre-training of "-"
  (none) is left out, and "- (a note)" keeps the note without the dash."""
  systems = grid.load("cpu-small-links").systems
  assert systems["bm25"].label == "BM25"
  assert systems["bm25-cut"].label == "BM25 (the towers' 128 / 32 pieces)"
  assert systems["ict"].label == "Transformer, ICT"


@pytest.mark.parametrize("claim, message", [
    ({"pairs": [["ict", "bfs"]]}, "table 3 has no row 'bfs'"),
    ({"pairs": [["ict", "mlm"]], "table": "9"}, "reads table '9'"),
    ({"pairs": [["ict", "mlm"]], "expect": "above"}, "expect 'above'"),
    ({"pairs": [["ict"]]}, "each of `pairs` is [A, B]"),
    ({"pairs": []}, "no `pairs`"),
    ({"pairs": [["ict", "mlm"]], "verdict": "holds"}, "unknown field(s) ['verdict']"),
], ids=["unknown-row", "unknown-table", "bad-direction", "half-pair", "no-pairs",
        "typed-verdict"])
def test_bad_claims_are_named_errors(claim, message):
  raw = dict(GRID, readings=[{"id": "bad", "sentence": "s", "source": "ours", **claim}])
  with pytest.raises(ValueError, match=re.escape(message)):
    grid.parse("g", raw)


def test_comparisons_are_computed_from_the_results():
  spec = grid.parse("g", GRID)
  results = _results({("3", "ict", "base", 1): [0.30], ("3", "mlm", "base", 1): [0.20],
                      ("3", "ict", "base", 5): [0.40, 0.42, 0.44],
                      ("3", "mlm", "base", 5): [0.10, 0.30, 0.20],
                      ("5", "ict", "l4", 5): [0.35]})
  got = {(c.claim, c.ratio, c.metric): c for c in readings.compare(spec, results)}
  assert got[("ict-over-mlm", 1, "R@100")].verdict == readings.SEEN_AS
  # 5 %: ICT 42 ± 2, MLM 20 ± 10: the gap 22 is over 2 x 10.
  five = got[("ict-over-mlm", 5, "R@100")]
  assert (five.a.mean, five.a.sd) == (pytest.approx(42), pytest.approx(2))
  assert five.b.sd == pytest.approx(10) and five.verdict == readings.HOLDS
  # Table 5's row against Table 3's seed 0 only, on both metrics; 1 % is not a Table 5 ratio.
  deeper = got[("deeper", 5, "R@1")]
  assert deeper.b.values == (pytest.approx(20),) and deeper.verdict == readings.SEEN_AGAINST
  assert ("deeper", 1, "R@100") not in got
  text = readings.markdown(spec, results)
  # Without ranks the interval is the seed-SD bar; the seeds: 30, 12, 24 all above 0.
  assert "| Transformer, ICT | Transformer, MLM | 5 % | R@100 | 42.00 ± 2.00 (3 seeds) | " \
         "20.00 ± 10.00 (3 seeds) | +22.00 | ± 20.00 (2 × max SD) | 210.0 % | 3 of 3 | " \
         "**holds, resolved** |" in text


def test_pretraining_runs_are_checked_against_chance():
  spec = grid.load("cpu-small")
  cfg = row_configs.pretrain_config(spec, spec.systems["bfs"], spec.variants["base"], 0)
  batch, examples = cfg.data.batch_size, cfg.trainer.eval_steps * cfg.data.batch_size
  records = [{"cell": f"pretrain/{name}/base/s0", "kind": "pretrain",
              "history": {"step": [640], "in_batch_accuracy": [0.98],
                          "val_in_batch_accuracy": [accuracy]}}
             for name, accuracy in (("ict", 0.5), ("bfs", 1 / batch), ("wlp", 0.18))]
  records.append({"cell": "pretrain/mlm/base/s0", "kind": "pretrain",
                  "history": {"step": [640], "mlm_accuracy": [0.07]}})
  records.append({"cell": "pretrain/ict/base/s1", "kind": "pretrain"})  # restored, no history
  checks = {c.cell: c for c in readings.pretrain_checks(spec, records)}
  assert set(checks) == {"pretrain/ict/base/s0", "pretrain/bfs/base/s0", "pretrain/wlp/base/s0"}
  bfs = checks["pretrain/bfs/base/s0"]
  # Without the pair cell's record: chance 1 / batch; the margin is two binomial standard
  # errors at chance over the held-out examples of a point (eval steps x batch).
  assert bfs.batch == batch and bfs.eval_examples == examples and bfs.heldout_pairs is None
  p = 1 / batch
  assert bfs.margin == pytest.approx(2 * (p * (1 - p) / examples) ** 0.5)
  # 0.18 over 64 documents is far above chance...
  assert [checks[f"pretrain/{n}/base/s0"].above_chance for n in ("ict", "bfs", "wlp")] == \
      [True, False, True]

  # ...but WLP with 11 held-out pairs ranks each query among 11 documents (a cycled held-out
  # set's repeats are masked as accidental hits), over 11 distinct examples.
  pairs = {"cell": "pairs/wiki", "kind": "pairs",
           "stats": {"pairs_ict_heldout": 5730, "pairs_bfs_heldout": 4395,
                     "pairs_wlp_heldout": 11}}
  checks = {c.cell: c for c in readings.pretrain_checks(spec, records + [pairs])}
  wlp, ict = checks["pretrain/wlp/base/s0"], checks["pretrain/ict/base/s0"]
  assert wlp.heldout_pairs == 11 and wlp.chance == pytest.approx(1 / 11)
  assert wlp.margin == pytest.approx(2 * ((1 / 11) * (10 / 11) / 11) ** 0.5)
  assert not wlp.above_chance
  assert ict.heldout_pairs == 5730 and ict.chance == 1 / batch and ict.above_chance
  assert ict.margin == pytest.approx(2 * (p * (1 - p) / examples) ** 0.5)
  # The control row read the other pair set (the QA file's articles in): its counts.
  control = {"cell": "pretrain/ict+bfs+wlp-pooled+squad/base/s0", "kind": "pretrain",
             "history": {"step": [640], "in_batch_accuracy": [0.5],
                         "val_in_batch_accuracy": [0.5]}}
  squad_pairs = {"cell": "pairs/wiki+squad", "kind": "pairs",
                 "stats": {"pairs_ict_heldout": 6000, "pairs_bfs_heldout": 4400,
                           "pairs_wlp_heldout": 15}}
  checks = {c.cell: c for c in readings.pretrain_checks(
      spec, records + [pairs, control, squad_pairs])}
  assert checks[control["cell"]].heldout_pairs == 6000 + 4400 + 15
  assert checks["pretrain/wlp/base/s0"].heldout_pairs == 11
  text = "\n".join(readings._pretrain_section(list(checks.values()), 0))
  assert "| `pretrain/wlp/base/s0` | Transformer, WLP | 640 | 64 | 11 | 0.0909 |" in text


# ---------------------------------------------------------------------------------------------
# The committed reading and docs/results.md say what the committed results say.
# ---------------------------------------------------------------------------------------------


def test_committed_reading_is_the_one_the_results_give():
  """Fails when reading.md was edited by hand, or the results or claims changed without
  re-rendering (python -m twotower.experiment.rerender --grid cpu-small ...)."""
  results = json.loads((RESULTS / "results.json").read_text(encoding="utf-8"))
  cells = json.loads((RESULTS / "cells.json").read_text(encoding="utf-8"))
  expected = readings.markdown(grid.load("cpu-small"), results, cells.values())
  assert (RESULTS / readings.READING_FILE).read_text(encoding="utf-8") == expected


def _blocks(text: str) -> dict[str, str]:
  return dict(re.findall(r"<!-- results:([\w.-]+) -->\n(.*?)\n<!-- /results:\1 -->", text,
                         flags=re.S))


# docs/results.md's and the README's grid sections (their regions written from the results
# folders, no count or decimal number outside them): tests/test_pages.py.


def test_rerender_writes_a_results_folder_from_its_own_files(tmp_path):
  """No work directory: results.json and cells.json give the tables, summary and reading."""
  for name in ("results.json", "cells.json", "README.md"):
    (tmp_path / name).write_bytes((RESULTS / name).read_bytes())
  page = tmp_path / "page.md"
  page.write_text("<!-- results:cpu-small -->\n<!-- /results:cpu-small -->\n"
                  "<!-- results:cpu-small-reading -->\n<!-- /results:cpu-small-reading -->\n",
                  encoding="utf-8")
  from twotower.experiment import render, rerender
  assert rerender.main(["--grid", "cpu-small", "--results_dir", str(tmp_path),
                        "--readme", str(page)]) == 0
  assert (tmp_path / readings.READING_FILE).read_text(encoding="utf-8") == \
      (RESULTS / readings.READING_FILE).read_text(encoding="utf-8")
  # Table 3's ICT row at the ratio with several seeds: mean ± the sample SD (statistics.stdev,
  # n - 1), whatever the committed numbers are.
  results = json.loads((RESULTS / "results.json").read_text(encoding="utf-8"))
  by_ratio = {}
  for e in results["per_seed"]:
    if (e["table"], e["system"], e["variant"]) == ("3", "ict", "base"):
      by_ratio.setdefault(e["ratio"], []).append(100 * e["record"]["metrics"]["R@100"])
  xs = max(by_ratio.values(), key=len)
  assert len(xs) > 1
  cell = f"| {statistics.mean(xs):.2f} ± {statistics.stdev(xs):.2f} |"
  table3 = (tmp_path / "table3-squad.md").read_text(encoding="utf-8")
  assert cell in table3 and render.SD_NOTE in table3
  assert cell in (tmp_path / "README.md").read_text(encoding="utf-8")
  blocks = _blocks(page.read_text(encoding="utf-8"))
  assert "[mlm-over-no-ssl](reading.md#mlm-over-no-ssl)" in blocks["cpu-small-reading"]
  # The beyond table says the weight on BM25 each hybrid cell used, from cells.json.
  fused = {r["cell"]: r["weight"] for r in json.loads((RESULTS / "cells.json").read_text(
      encoding="utf-8")).values() if r["cell"].startswith("fuse/squad/hybrid/base/")}
  beyond = (tmp_path / "tablebeyond-squad.md").read_text(encoding="utf-8")
  sentence = next(line for line in beyond.splitlines()
                  if line.startswith("The hybrid's weight on BM25, by ratio: "))
  assert f"80 %: {fused['fuse/squad/hybrid/base/r80/s0']:.2f}" in sentence
  assert f"1 %: {fused['fuse/squad/hybrid/base/r1/s0']:.2f}" in sentence
  assert sentence in (tmp_path / "README.md").read_text(encoding="utf-8")


def test_rerender_of_a_partial_grid_says_how_many_seeds_a_mean_has(tmp_path):
  """A results folder holds only finished entries; the grid says how many seeds each row is
  due, so a mean of fewer still reads "(2 of 3 seeds)" (it read as a whole mean before)."""
  results = json.loads((RESULTS / "results.json").read_text(encoding="utf-8"))
  ict = lambda e: (e["table"], e["system"], e["variant"]) == ("3", "ict", "base")  # noqa: E731
  by_ratio = {}
  for e in results["per_seed"]:
    if ict(e):
      by_ratio.setdefault(e["ratio"], []).append(e)
  ratio, runs = max(by_ratio.items(), key=lambda item: len(item[1]))
  dropped = max(e["seed"] for e in runs)
  results["per_seed"] = [e for e in results["per_seed"]
                         if not (ict(e) and e["ratio"] == ratio and e["seed"] == dropped)]
  (tmp_path / "results.json").write_text(json.dumps(results), encoding="utf-8")
  (tmp_path / "cells.json").write_bytes((RESULTS / "cells.json").read_bytes())
  from twotower.experiment import rerender
  assert rerender.main(["--grid", "cpu-small", "--results_dir", str(tmp_path)]) == 0
  xs = [100 * e["record"]["metrics"]["R@100"] for e in runs if e["seed"] != dropped]
  due = len(runs)
  cell = (f"| {statistics.mean(xs):.2f} ± {statistics.stdev(xs):.2f} "
          f"({due - 1} of {due} seeds) |")
  assert cell in (tmp_path / "table3-squad.md").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# The per-question paired bootstrap (experiment.bootstrap).
# ---------------------------------------------------------------------------------------------


def _runs(n, hit):
  """One run of n questions: rank 1 where hit(i), else a miss (None)."""
  return {f"q{i}": 1 if hit(i) else None for i in range(n)}


def test_bootstrap_interval_sits_around_a_known_difference():
  # A finds the gold at rank 1 on 3 questions in 4, B on 2 in 4: R@1 75 against 50, a
  # difference of exactly 25 points; per question the difference is 100 on a quarter of the
  # questions, so its standard error is 100 x sqrt(0.25 x 0.75 / 400) = 2.165 points.
  a = [_runs(400, lambda i: i % 4 != 3)]
  b = [_runs(400, lambda i: i % 2 == 0)]
  got = bootstrap.paired(a, b, "R@1")
  assert (got.questions, got.mean_a, got.mean_b, got.difference) == (400, 75.0, 50.0, 25.0)
  assert got.low < 25 < got.high
  assert (got.high - got.low) / 2 == pytest.approx(1.96 * 2.165, abs=0.6)
  assert got.ratio_low < 1.5 < got.ratio_high
  # The same ranks give the same interval (a fixed generator seed); another seed another.
  assert bootstrap.paired(a, b, "R@1") == got
  assert bootstrap.paired(a, b, "R@1", seed=1) != got


def test_bootstrap_of_identical_sides_contains_zero():
  a = [_runs(300, lambda i: i % 3 == 0)]
  same = bootstrap.paired(a, a, "R@1")
  assert (same.low, same.high, same.difference) == (0.0, 0.0, 0.0)
  # The same hit rate on other questions: no paired difference in the mean, 0 inside.
  shifted = [_runs(300, lambda i: i % 3 == 1)]
  other = bootstrap.paired(a, shifted, "R@1")
  assert other.difference == 0.0 and other.low < 0 < other.high


def test_bootstrap_averages_seeds_per_question_and_pairs_by_common_questions():
  # A's two seeds: rank 1 and rank 4 on q0 -> R@1 50, R@5 100, MRR (100 + 25) / 2 = 62.5.
  a = [{"q0": 1, "q1": None, "q2": 2}, {"q0": 4, "q1": 10, "q2": 2}]
  # B (a BM25 run) holds every split's questions; only q0..q2 are A's split.
  b = [{"q0": 2, "q1": 1, "q2": None, "q3": 1, "q4": 1}]
  assert bootstrap.common_questions(a, b) == ["q0", "q1", "q2"]
  questions = bootstrap.common_questions(a, b)
  assert list(bootstrap.side_values(a, questions, "R@1")) == [50.0, 0.0, 0.0]
  assert list(bootstrap.side_values(a, questions, "R@5")) == [100.0, 0.0, 100.0]
  assert list(bootstrap.side_values(a, questions, "MRR")) == [62.5, 5.0, 50.0]
  got = bootstrap.paired(a, b, "MRR")
  assert got.questions == 3 and got.mean_b == pytest.approx(50.0)
  with pytest.raises(ValueError, match="metric 'P@1'"):
    bootstrap.paired(a, b, "P@1")
  assert bootstrap.paired(a, [{"x": 1}], "R@1") is None


# ---------------------------------------------------------------------------------------------
# The rule with intervals, paired seeds and qualifiers (experiment.verdict_rule).
# ---------------------------------------------------------------------------------------------


def boot(low, high, ratio_low=math.nan, ratio_high=math.nan):
  return bootstrap.Interval(1000, 0.0, 0.0, low, high, ratio_low, ratio_high, 2000)


@pytest.mark.parametrize("a, b, expect, size, interval, verdict", [
    # The interval above 0, every paired seed above 0.
    (side(12, 13, 14), side(10, 10, 11), "higher", rule.Size(), boot(0.5, 4.0), rule.HOLDS),
    # The same interval, one paired seed below 0: the seeds say the sign is not settled.
    (side(12, 9, 14), side(10, 10, 11), "higher", rule.Size(), boot(0.5, 4.0),
     rule.NOT_RESOLVED),
    # Below 0 with every seed below: contradicted (here: claimed higher).
    (side(8, 9, 7), side(10, 10, 11), "higher", rule.Size(), boot(-4.0, -0.5),
     rule.CONTRADICTED),
    # An interval across 0 is not resolved, whatever the seeds (3 of 3 agree here).
    (side(12, 13, 14), side(10, 10, 11), "higher", rule.Size(), boot(-0.5, 4.0),
     rule.NOT_RESOLVED),
    # "A below B": the frame turns round; A − B in [-4, -0.5] holds a claim that A is lower.
    (side(8, 9, 7), side(10, 10, 11), "lower", rule.Size(), boot(-4.0, -0.5), rule.HOLDS),
    # Qualifier "at least 5 points": met by [6, 8]; missed by [1, 3]; [4, 6] crosses it.
    (side(17, 18, 17), side(10, 11, 10), "higher", rule.Size("notably", min_gain=5),
     boot(6, 8), rule.HOLDS),
    (side(12, 13, 12), side(10, 11, 10), "higher", rule.Size("notably", min_gain=5),
     boot(1, 3), rule.SIZE_MISSED),
    (side(15, 16, 15), side(10, 11, 10), "higher", rule.Size("notably", min_gain=5),
     boot(4, 6), rule.SIZE_OPEN),
    # "only marginally" (at most 2 points): a gain of [3, 5] is too large for the qualifier.
    (side(14, 15, 14), side(10, 11, 10), "higher", rule.Size("only marginally", max_gain=2),
     boot(3, 5), rule.SIZE_MISSED),
    (side(11, 11, 11), side(10, 10, 10), "higher", rule.Size("only marginally", max_gain=2),
     boot(0.2, 1.5), rule.HOLDS),
    # A ratio threshold reads the ratio's interval.
    (side(30, 31, 30), side(10, 11, 10), "higher", rule.Size("much more", min_ratio=2),
     boot(18, 22, 2.5, 3.2), rule.HOLDS),
    (side(13, 14, 13), side(10, 11, 10), "higher", rule.Size("much more", min_ratio=2),
     boot(2, 4, 1.2, 1.4), rule.SIZE_MISSED),
    # One seed on a side that has seeds: an observation, even with a tight interval.
    (side(50), side(3, 4, 5), "higher", rule.Size(), boot(40, 50), rule.SEEN_AS),
    # BM25 (no seed) against three seeds: each seed is paired with BM25's one run.
    (side(95, seedless=True), side(40, 45, 50), "higher", rule.Size(), boot(44, 56),
     rule.HOLDS),
], ids=["holds", "a-seed-disagrees", "contradicted", "interval-across-0", "lower-holds",
        "min-gain-met", "min-gain-missed", "min-gain-open", "marginal-too-large",
        "marginal-met", "ratio-met", "ratio-missed", "one-seed", "seedless"])
def test_rule_with_intervals(a, b, expect, size, interval, verdict):
  assert rule.judge(a, b, expect, size, interval).verdict == verdict


def test_without_ranks_three_agreeing_seeds_are_not_noise():
  # The committed grid's ICT − BFS at zero-shot (R@100): -5.16 under a bar of 5.84, yet every
  # paired seed is negative (29.32 - 38.82, 31.67 - 34.50, 35.13 - 38.29).
  ict, bfs = side(29.32, 31.67, 35.13), side(38.82, 34.50, 38.29)
  got = rule.judge(ict, bfs, "higher")
  assert got.verdict == rule.SEEDS_AGAINST and got.sign_p == 0.25
  assert got.paired == pytest.approx((-9.50, -2.83, -3.16))
  assert rule.judge(bfs, ict, "higher").verdict == rule.SEEDS_AS
  # Two paired seeds are too few for the sign test; mixed signs are noise.
  assert rule.judge(side(29, 35), side(38, 36), "higher").verdict == rule.NOT_RESOLVED
  assert rule.judge(side(29, 36, 35), side(38, 34, 38), "higher").verdict == \
      rule.NOT_RESOLVED
  # With a qualifier, agreeing seeds are "as claimed" only where the mean gain meets it.
  # (BFS − ICT: a mean gain of 5.16.)
  assert rule.judge(bfs, ict, "higher", rule.Size("notably", min_gain=5)).verdict == \
      rule.SEEDS_AS
  assert rule.judge(bfs, ict, "higher", rule.Size("notably", min_gain=6)).verdict == \
      rule.NOT_RESOLVED
  # Seeds are paired by seed number, not by position (a row read on seed 2 only).
  a = rule.Side("a", (10.0, 11.0, 12.0), seeds=(0, 1, 2))
  b = rule.Side("b", (9.0,), seeds=(2,))
  assert rule.paired_gains(a, b, 1) == (3.0,)
  # MLM +7.27 over No-SSL (5 %, bar 4.39) no longer holds "only marginally" (<= 2 points).
  mlm, no_ssl = side(22.5, 18.2, 20.68), side(15.3, 11.2, 13.1)
  assert rule.judge(mlm, no_ssl, "higher").verdict == rule.HOLDS
  assert rule.judge(mlm, no_ssl, "higher", rule.Size("only marginally", max_gain=2)
                    ).verdict == rule.SIZE_MISSED


def test_a_row_that_is_the_other_row_is_equal_not_a_reversal():
  # A hybrid whose tuning kept BM25 alone scores what BM25 does, question by question.
  bm25, hybrid = side(59.11, seedless=True), side(59.11)
  got = rule.judge(hybrid, bm25, "higher", boot=boot(0.0, 0.0))
  assert (got.verdict, got.interval, got.paired) == (rule.EQUAL, (0.0, 0.0), (0.0,))
  assert rule.EQUAL not in budget.AGAINST  # nothing to check with longer pre-training
  assert rule.judge(side(59.11, 59.11, 59.11), bm25, "higher").verdict == rule.EQUAL
  # Equal on average is not equal: the questions (or the seeds) differ.
  assert rule.judge(hybrid, bm25, "higher", boot=boot(-0.2, 0.2)).verdict == rule.SEEN_AGAINST
  assert rule.judge(side(58, 60), side(60, 58), "higher").verdict == rule.NOT_RESOLVED


def test_paired_runs_over_ratios_count_equal_runs_apart_from_a_sign():
  bm25 = side(59.11, seedless=True)

  def compare(ratio, hybrid):
    a = side(hybrid)
    return readings.Comparison("hybrid-over-bm25", "squad", ratio, "R@1", a, bm25,
                               rule.judge(a, bm25, "higher"))

  equal = [compare(r, 59.11) for r in (1, 5, 10, 80)]
  assert readings._pair_signs(equal)[2] == (
      "* row against row, R@1: the gain is above 0 in 0 of 4 paired "
      "runs (4 equal) over 4 ratios.")               # no sign, so no sign test
  # Four ratios of one seed are one pre-training: no test (the rule before issue 67 counted
  # them as four runs, p = 0.125).
  lower = [compare(r, 58.0) for r in (1, 5, 10, 80)]
  assert readings._pair_signs(lower)[2] == (
      "* row against row, R@1: the gain is above 0 in 0 of 4 paired runs over 4 ratios.")


def test_paired_runs_over_ratios_are_tested_per_pre_training():
  """15 paired runs (3 seeds x 5 ratios) all above 0 are 3 pre-trainings: p = 2 / 2^3, not
  2 / 2^15; seeds whose mean gains disagree give the sign-flip test's p by hand."""
  def compare(ratio, a, b):
    a, b = rule.Side("A", a, seeds=(0, 1, 2)), rule.Side("B", b, seeds=(0, 1, 2))
    return readings.Comparison("c", "squad", ratio, "R@100", a, b, rule.judge(a, b))

  agree = [compare(r, (12.0, 13.0, 14.0), (10.0, 10.0, 10.0)) for r in (0, 1, 5, 10, 80)]
  assert readings._pair_signs(agree)[2] == (
      "* A against B, R@100: the gain is above 0 in 15 of 15 paired runs over 5 ratios; per "
      "seed, the mean gain over its ratios: +2.00 (seed 0), +3.00 (seed 1), +4.00 (seed 2); "
      "exact sign-flip test over the 3 seeds: p = 0.25.")
  # Seed gains +3, +1, -0.5 at both ratios: |sum| 3.5; of the 8 sign flips, |+-3 +-1 +-0.5|
  # is 4.5, 3.5, 2.5, 1.5 and their mirrors: 4 of 8 reach 3.5, p = 0.5.
  mixed = [compare(r, (13.0, 11.0, 9.5), (10.0, 10.0, 10.0)) for r in (5, 10)]
  assert readings._pair_signs(mixed)[2].endswith(
      "+3.00 (seed 0), +1.00 (seed 1), -0.50 (seed 2); exact sign-flip test over the 3 "
      "seeds: p = 0.5.")


def test_the_rule_text_names_every_verdict():
  for verdict in rule.VERDICTS:
    assert f"**{verdict}**" in rule.RULE
  assert "2 / 2^n" in rule.RULE and "bootstrap" in rule.RULE


# ---------------------------------------------------------------------------------------------
# Qualifiers, ranks, counts per (metric, ratio) and caveats, through the grid file.
# ---------------------------------------------------------------------------------------------

RANKED_GRID = {
    "model": "cpu-small", "ratios": [1, 5],
    "systems": {"bm25": {"kind": "bm25", "encoder": "BM25"},
                "ict": {"encoder": "Transformer", "pretraining": "ICT", "tasks": ["ict"],
                        "caveat": "ICT's caveat."},
                "mlm": {"encoder": "Transformer", "pretraining": "MLM", "tasks": ["mlm"]}},
    "tables": [{"id": "3", "title": "t3", "ratios": [1, 5], "rows": ["bm25", "ict", "mlm"]}],
    "readings": [
        {"id": "ict-over-bm25", "sentence": "ICT notably beats BM25.", "source": "ours",
         "metrics": ["R@1", "MRR"], "pairs": [["ict", "bm25"]], "qualifier": "notably",
         "min_gain": 5, "caveat": "BM25 reads whole documents."},
        {"id": "ict-over-mlm", "sentence": "ICT is above MLM.", "source": "ours",
         "pairs": [["ict", "mlm"]]}]}
N = 200


def _ranked(hits):
  """(results.json, ranks by cell) from {(system, ratio): [R@1 hit rate per seed]}: a run
  finds the gold at rank 1 on its first hit-rate x N questions, at rank 50 on the others."""
  per_seed, ranks = [], {}
  for (system, ratio), rates in hits.items():
    for seed, rate in enumerate(rates):
      cell = "bm25/squad" if system == "bm25" else f"eval/squad/{system}/base/r{ratio}/s{seed}"
      run = {f"q{i}": 1 if i < rate * N else 50 for i in range(N)}
      if system == "bm25":    # BM25 ranks every split's questions in one run
        run.update({f"other{i}": 1 for i in range(50)})
        ranks[cell] = {**ranks.get(cell, {}), **run}
      else:
        ranks[cell] = run
      values = [1.0 if r == 1 else 0.0 for q, r in run.items() if q.startswith("q")]
      per_seed.append({"table": "3", "dataset": "squad", "system": system, "variant": "base",
                       "ratio": ratio, "seed": seed, "cell": cell, "split": f"test-{ratio}",
                       "record": {"questions": N, "metrics": {
                           "R@1": sum(values) / N, "R@100": sum(values) / N,
                           "MRR": sum(1.0 if r == 1 else 0.02 for q, r in run.items()
                                      if q.startswith("q")) / N}}})
  return {"per_seed": per_seed}, ranks


def test_claims_over_several_metrics_are_counted_per_metric_and_ratio():
  spec = grid.parse("g", RANKED_GRID)
  claim = spec.readings[0]
  assert (claim.qualifier, claim.min_gain, claim.caveat) == ("notably", 5.0,
                                                           "BM25 reads whole documents.")
  # 1 %: ICT 65 % against BM25 50 % (+15 points, every seed); 5 %: ICT 45 % against 50 %.
  results, ranks = _ranked({("bm25", 1): [0.5], ("bm25", 5): [0.5],
                            ("ict", 1): [0.65, 0.65, 0.65], ("ict", 5): [0.45, 0.45, 0.45],
                            ("mlm", 1): [0.3, 0.3, 0.3], ("mlm", 5): [0.3, 0.3, 0.3]})
  got = {(c.claim, c.ratio, c.metric): c
         for c in readings.compare(spec, results, ranks.get)}
  one = got[("ict-over-bm25", 1, "R@1")]
  # 30 questions of 200 differ by 100: SE 2.5 points, the interval about [10, 20], above 5.
  assert one.boot.questions == N and one.boot.difference == pytest.approx(15.0)
  assert one.boot.low > 5 and one.verdict == rule.HOLDS
  assert got[("ict-over-bm25", 5, "R@1")].verdict == rule.CONTRADICTED
  assert got[("ict-over-bm25", 5, "MRR")].verdict == rule.CONTRADICTED
  text = readings.markdown(spec, results, (), ranks.get)
  summary = next(line for line in text.splitlines() if line.startswith("| [ict-over-bm25]"))
  counts = readings.counts_text([c for c in got.values() if c.claim == "ict-over-bm25"])
  assert "contradicted at 2" in counts and " of 4 (metric, ratio)" in counts
  assert f"| {counts} |" in summary
  # The per-metric verdicts, one row per metric, one column per ratio.
  assert "| metric | 1 % | 5 % |" in text
  assert "| MRR | " in text and "| R@1 | " in text


def test_a_caveat_is_printed_beside_its_verdicts(tmp_path):
  spec = grid.parse("g", RANKED_GRID)
  results, ranks = _ranked({("bm25", 1): [0.5], ("ict", 1): [0.7, 0.7], ("mlm", 1): [0.3]})
  text = readings.write(spec, results, (), str(tmp_path), ranks.get)
  assert (tmp_path / readings.READING_FILE).read_text(encoding="utf-8") == text
  # In the summary line (the block docs/results.md shows), right after the counts...
  summary = next(line for line in text.splitlines() if line.startswith("| [ict-over-bm25]"))
  assert summary.endswith("| ⚠ BM25 reads whole documents. ⚠ Transformer, ICT: ICT's "
                          "caveat. |")
  # ...above the claim's table and after its verdicts.
  section = text.split("### ict-over-bm25", 1)[1].split("### ", 1)[0]
  assert "**Caveat.** BM25 reads whole documents.\n**Caveat.** Transformer, ICT: ICT's " \
         "caveat.\n" in section
  assert re.search(r"\nVerdicts: [^\n]+ ⚠ BM25 reads whole documents\. ⚠ Transformer, ICT",
                   section)
  # A row's caveat follows it into every claim that reads it.
  other = next(line for line in text.splitlines() if line.startswith("| [ict-over-mlm]"))
  assert other.endswith("| ⚠ Transformer, ICT: ICT's caveat. |")


def test_a_row_without_a_result_lends_no_caveat_to_the_verdicts():
  """A claim over two pairs where only the uncaveated pair has results: its verdicts carry the
  claim's own caveat, not the caveat of a row that none of them compares."""
  raw = copy.deepcopy(RANKED_GRID)
  raw["readings"][1]["pairs"] = [["ict", "mlm"], ["mlm", "bm25"]]
  spec = grid.parse("g", raw)
  results, ranks = _ranked({("bm25", 1): [0.5], ("mlm", 1): [0.6]})
  text = readings.markdown(spec, results, (), ranks.get)
  summary = next(line for line in text.splitlines() if line.startswith("| [ict-over-mlm]"))
  assert summary.endswith("| – |") and "ICT's caveat" not in text


def test_ranks_are_used_only_where_both_rows_have_them():
  spec = grid.parse("g", RANKED_GRID)
  results, ranks = _ranked({("bm25", 1): [0.5], ("ict", 1): [0.7, 0.7], ("mlm", 1): [0.3]})
  # MLM's runs recorded no ranks: the seed rule (one MLM seed: an observation).
  no_mlm = {k: v for k, v in ranks.items() if "/mlm/" not in k}
  got = {(c.claim, c.metric): c for c in readings.compare(spec, results, no_mlm.get)}
  assert got[("ict-over-mlm", "R@100")].boot is None
  assert got[("ict-over-mlm", "R@100")].verdict == rule.SEEN_AS
  # BM25's run holds other splits' questions too: the pair is the ICT run's 200 questions.
  assert got[("ict-over-bm25", "R@1")].boot.questions == N
  # No RanksOf at all (the committed grid): no interval anywhere.
  assert all(c.boot is None for c in readings.compare(spec, results))
  # Entries scored on other questions than the ranks hold: no interval, not a wrong one.
  for e in results["per_seed"]:
    e["record"]["questions"] = N + 1
  assert all(c.boot is None for c in readings.compare(spec, results, ranks.get))


def test_two_bm25_rows_pair_on_their_splits_questions():
  """Two BM25 cells each rank every split's questions in one run: their pair at a ratio is
  that ratio's test questions, as the ratio's eval cells recorded them -- an interval, not
  the seedless ± 0 of no ranks -- and no interval where no cell says which questions."""
  raw = copy.deepcopy(RANKED_GRID)
  raw["systems"]["bm25-open"] = {"kind": "bm25", "encoder": "BM25 (open)"}
  raw["tables"][0]["rows"].append("bm25-open")
  raw["readings"] = [{"id": "closed-over-open", "sentence": "s", "source": "ours",
                      "metrics": ["R@1"], "pairs": [["bm25", "bm25-open"]]}]
  spec = grid.parse("g", raw)
  results, ranks = _ranked({("bm25", 1): [0.5], ("ict", 1): [0.7]})
  open_ranks = {q: 1 if q.startswith("q") and int(q[1:]) < 0.3 * N else 50
                for q in ranks["bm25/squad"]}
  ranks["bm25/squad-open"] = open_ranks
  bm25 = next(e for e in results["per_seed"] if e["system"] == "bm25")
  results["per_seed"].append(dict(copy.deepcopy(bm25), system="bm25-open",
                                  cell="bm25/squad-open"))
  results["per_seed"][-1]["record"]["metrics"] = {"R@1": 0.3}
  (c,) = readings.compare(spec, results, ranks.get)
  # 200 test questions, not the 250 both BM25 runs hold: 50 - 30 = +20 points.
  assert c.boot is not None and c.boot.questions == N
  assert c.boot.difference == pytest.approx(20.0) and c.boot.low > 0
  # Without the ICT cell nothing says which 200 questions test-1 holds: no interval.
  no_ict = {k: v for k, v in ranks.items() if "/ict/" not in k}
  (c,) = readings.compare(spec, results, no_ict.get)
  assert c.boot is None


@pytest.mark.parametrize("claim, message", [
    ({"qualifier": "notably"}, "a `qualifier` and its threshold"),
    ({"min_gain": 5}, "a `qualifier` and its threshold"),
    ({"qualifier": "x", "min_gain": 5, "max_gain": 2}, "min_gain <= max_gain"),
    ({"qualifier": "x", "min_ratio": 0}, "min_ratio > 0"),
    ({"qualifier": "x", "min_gain": "five"}, "numbers"),
], ids=["word-without-threshold", "threshold-without-word", "empty-range", "zero-ratio",
        "not-a-number"])
def test_bad_qualifiers_are_named_errors(claim, message):
  raw = dict(GRID, readings=[{"id": "bad", "sentence": "s", "source": "ours",
                              "pairs": [["ict", "mlm"]], **claim}])
  with pytest.raises(ValueError, match=re.escape(message)):
    grid.parse("g", raw)


def test_readings_and_caveats_are_not_cell_parameters():
  """The shipped grids' qualifiers and caveats change no cell key: the grid planned without
  any reading or caveat has the same cells."""
  from twotower.experiment import plan
  inputs = plan.Inputs("d.xml.bz2", squad="s.json", corpus="c.txt.bz2")
  for name in ("cpu-small", "cpu-small-links"):
    name_, raw = grid_files.read(name)
    bare = dict(raw, readings=[], systems={
        n: {k: v for k, v in (s or {}).items() if k != "caveat"}
        for n, s in raw["systems"].items()})
    assert any("caveat" in (s or {}) for s in raw["systems"].values())
    keys = [{c.name: c.key for c in plan.plan(g, inputs)[0]}
            for g in (grid.parse(name_, raw), grid.parse(name_, bare))]
    assert keys[0] == keys[1]


# ---------------------------------------------------------------------------------------------
# The budget check beside the reversals (experiment.budget).
# ---------------------------------------------------------------------------------------------

BUDGET_GRID = {
    "model": "cpu-small", "ratios": [1, 5],
    "variants": {"long": {"label": "long", "pretrain_steps": 6000}},
    "systems": {"bm25": {"kind": "bm25", "encoder": "BM25"},
                "no-ssl": {"encoder": "Transformer", "pretraining": "none"},
                "ict": {"encoder": "Transformer", "pretraining": "ICT", "tasks": ["ict"]},
                "bfs": {"encoder": "Transformer", "pretraining": "BFS", "tasks": ["bfs"]},
                "mlm": {"encoder": "Transformer", "pretraining": "MLM", "tasks": ["mlm"]}},
    "tables": [{"id": "3", "title": "t3", "ratios": [1, 5],
                "rows": ["bm25", "no-ssl", "ict", "bfs", "mlm"]},
               {"id": "budget", "title": "b", "all_seeds": False, "ratios": [5],
                "rows": ["ict", {"system": "ict", "variant": "long"}, "bfs",
                         {"system": "bfs", "variant": "long"}]}],
    "budget": {"table": "budget", "label": "6,000 steps", "longer": {"base": "long"}},
    "readings": [
        {"id": "ict-over-bfs", "sentence": "ICT is above BFS.", "source": "paper",
         "pairs": [["ict", "bfs"], ["ict", "no-ssl"], ["mlm", "no-ssl"], ["no-ssl", "bm25"]]}]}


def test_a_reversal_is_judged_again_at_the_longer_budget():
  """ICT below BFS at 5 % (three seeds) is judged again on the budget table's 6,000-step
  rows; ICT against No-SSL (no pre-training: the same row at any budget) too; MLM has no
  longer row, and 1 % is not in the budget table: no second verdict there, and the reading
  says why beside each reversal, as it does where the longer cells have not run."""
  spec = grid.parse("g", BUDGET_GRID)
  results = _results({("3", "ict", "base", 5): [0.30, 0.31, 0.32],
                      ("3", "bfs", "base", 5): [0.40, 0.43, 0.43],
                      ("3", "no-ssl", "base", 5): [0.35, 0.35, 0.36],
                      ("3", "mlm", "base", 5): [0.20, 0.21, 0.22],
                      ("3", "ict", "base", 1): [0.10], ("3", "bfs", "base", 1): [0.20],
                      ("3", "no-ssl", "base", 1): [0.30], ("3", "bm25", "base", 1): [0.60],
                      ("budget", "ict", "long", 5): [0.50], ("budget", "bfs", "long", 5): [0.45]})
  got = {(c.ratio, c.b.label, c.a.label): c for c in readings.compare(spec, results)}
  bfs = got[(5, "Transformer, BFS", "Transformer, ICT")]
  assert bfs.verdict == readings.CONTRADICTED
  assert bfs.longer.a.values == (pytest.approx(50),) and bfs.longer.b.values == (45,)
  assert bfs.longer.verdict == readings.SEEN_AS
  # No-SSL is the same row at any budget: seed 0 of it against the longer ICT.
  no_ssl = got[(5, "Transformer, none", "Transformer, ICT")]
  assert no_ssl.longer.b.values == (35,) and no_ssl.longer.verdict == readings.SEEN_AS
  assert bfs.recheck == no_ssl.recheck == ""
  for key, why in (((5, "Transformer, none", "Transformer, MLM"), budget.NO_ROW),
                   ((1, "Transformer, BFS", "Transformer, ICT"), budget.NO_ROW),
                   ((1, "BM25", "Transformer, none"), budget.UNTRAINED)):
    assert (got[key].verdict in budget.AGAINST, got[key].longer, got[key].recheck) == (
        True, None, why)
  text = readings.markdown(spec, results)
  assert ("Verdicts against the claim (a reversal, or a gain short of its size) at 6,000 steps "
          "(the `budget` table, seed 0)") in text
  # A mean over three seeds is shown with its seed 0, the run the longer budget repeats.
  assert ("* Transformer, ICT against Transformer, BFS, 5 %, R@100: contradicted (-11.00; seed "
          "0: -10.00); at 6,000 steps: +5.00, observation, as claimed: **moved**.") in text
  assert ("* Transformer, ICT against Transformer, BFS, 1 %, R@100: observation, against the "
          f"claim (-10.00); at 6,000 steps: not checked: {budget.NO_ROW}.") in text
  # The summary's budget column, beside the verdicts (and not in their cell), in pre-training
  # steps × batch: the preset's 2,000 steps of batch 64, and the long variant's 6,000.
  assert f"| claim | source | verdicts | {budget.COLUMN} | caveat |" in text
  summary = next(line for line in text.splitlines() if line.startswith("| [ict-over-bfs]"))
  cells = [cell.strip() for cell in summary.split(" | ")]
  assert "rechecked" not in cells[2]
  assert cells[3] == (
      "**budget-bound** at 2,000 × 64 → 6,000 × 64: 2 of 2 rechecked moved (contradicted → "
      "observation, as claimed ×2); not rechecked: 3 without a row pre-trained longer; 1 "
      "between rows without pre-training (no pre-training budget moves them)")
  # The section of budget-bound verdicts: each that moved, before → after, and the counts.
  section = text.split("## Budget-bound verdicts\n", 1)[1].split("\n## ", 1)[0]
  assert ("* [ict-over-bfs](#ict-over-bfs): Transformer, ICT against Transformer, BFS, 5 %, "
          "R@100: contradicted (-11.00; seed 0: -10.00) → **observation, as claimed** "
          "(+5.00).") in section
  assert ("2 of the 2 verdicts rechecked at 6,000 steps moved (2 against the paper's claims); "
          "of the 6 verdicts against a claim (6 against the paper's claims), 3 were never "
          "rechecked (3 against the paper's claims; 3 without a row pre-trained longer), and 1 "
          "lies between rows without pre-training, which no pre-training budget moves."
          ) in section
  # The longer cells not run yet: said beside the reversal, and counted.
  del results["per_seed"][-1]
  pending = {(c.ratio, c.b.label): c for c in readings.compare(spec, results)}
  assert pending[(5, "Transformer, BFS")].recheck == budget.PENDING
  assert pending[(5, "Transformer, BFS")].longer is None
  text = readings.markdown(spec, results)
  assert f"at 6,000 steps: not checked: {budget.PENDING}." in text
  assert "not rechecked: 3 without a row pre-trained longer, 1 not run yet at the longer budget" \
      in text


def test_the_reading_says_in_one_sentence_that_no_verdict_moved():
  """Where every rechecked verdict is still against its claim, the budget-bound section is
  one sentence with the counts, and the column says the recheck left them unchanged."""
  spec = grid.parse("g", BUDGET_GRID)
  results = _results({("3", "ict", "base", 5): [0.30, 0.31, 0.32],
                      ("3", "bfs", "base", 5): [0.40, 0.43, 0.43],
                      ("budget", "ict", "long", 5): [0.40], ("budget", "bfs", "long", 5): [0.45]})
  text = readings.markdown(spec, results)
  section = text.split("## Budget-bound verdicts\n\n", 1)[1].split("\n## ", 1)[0]
  assert section.strip() == (
      "No verdict against a claim changes at 6,000 steps (2,000 × 64 → 6,000 × 64, "
      "pre-training steps × batch; the `budget` table, seed 0): the one rechecked there is "
      "still against the claim; of the 1 verdict against a claim (1 against the paper's "
      "claims), 0 were never rechecked.")
  summary = next(line for line in text.splitlines() if line.startswith("| [ict-over-bfs]"))
  assert (" | rechecked at 2,000 × 64 → 6,000 × 64, still against the claim (1 of 1) | "
          in summary)


def test_a_claim_without_a_verdict_against_it_reads_not_applicable():
  spec = grid.parse("g", BUDGET_GRID)
  results = _results({("3", "ict", "base", 5): [0.50, 0.51, 0.52],
                      ("3", "bfs", "base", 5): [0.40, 0.43, 0.43]})
  text = readings.markdown(spec, results)
  summary = next(line for line in text.splitlines() if line.startswith("| [ict-over-bfs]"))
  assert f" | {budget.NOT_APPLICABLE} | " in summary
  assert ("No verdict against a claim changes at 6,000 steps (2,000 × 64 → 6,000 × 64, "
          "pre-training steps × batch; the `budget` table, seed 0): none was rechecked there; "
          "of the 0 verdicts against a claim (0 against the paper's claims), 0 were never "
          "rechecked.") in text


def test_a_grid_without_a_budget_check_has_no_budget_column_or_section():
  raw = {k: v for k, v in BUDGET_GRID.items() if k != "budget"}
  spec = grid.parse("g", raw)
  text = readings.markdown(spec, _results({("3", "ict", "base", 5): [0.30, 0.31, 0.32],
                                           ("3", "bfs", "base", 5): [0.40, 0.43, 0.43]}))
  assert "| claim | source | verdicts | caveat |" in text
  assert "Budget-bound" not in text


def test_the_budget_is_said_in_steps_times_batch_of_each_variant():
  """A longer variant that also changes the batch reads in the same units: steps × batch."""
  raw = copy.deepcopy(BUDGET_GRID)
  raw["training"] = {"pretrain_steps": 1000}
  raw["variants"]["wide"] = {"label": "wide", "set": ["data.batch_size=128"]}
  raw["variants"]["wide-long"] = {"label": "wide, longer", "pretrain_steps": 3000,
                                  "set": ["data.batch_size=128"]}
  raw["budget"]["longer"] = {"base": "long", "wide": "wide-long"}
  spec = grid.parse("g", raw)
  assert budget.size(spec, "base") == (1000, 64)
  assert budget.size(spec, "wide") == (1000, 128)
  assert budget.units(spec, spec.budget) == (
      "1,000 × 64 → 6,000 × 64; 1,000 × 128 → 3,000 × 128")


def test_a_recheck_whose_interval_holds_zero_says_its_sign_is_not_resolved():
  """One seed's verdict at the longer budget is its point estimate: where the per-question
  interval holds 0 (a tie under question sampling), the line and the summary say so."""
  check = budget.BudgetCheck(table="budget", longer={"base": "long"}, label="6,000 steps")

  def comparison(gain, low, high, longer=None):
    a, b = rule.Side("A", (40.0 + gain,)), rule.Side("B", (40.0,))
    boot = bootstrap.Interval(questions=100, mean_a=40.0 + gain, mean_b=40.0, low=low,
                              high=high, ratio_low=1.0, ratio_high=1.0, resamples=2000)
    judgement = rule.Judgement(readings.SEEN_AS if gain > 0 else readings.SEEN_AGAINST,
                               gain, None, (gain,))
    return readings.Comparison("c", "squad", 5, "R@100", a, b, judgement, boot,
                               longer=longer)

  tie = comparison(-8.0, -9.0, -7.0, longer=comparison(-0.4, -1.2, +0.5))
  moved = comparison(-6.0, -7.0, -5.0, longer=comparison(+3.1, +2.2, +4.1))
  text = "\n".join(budget.markdown(check, [tie, moved], lambda c: "5 %",
                                   lambda c: f"[{c.boot.low:+.2f}, {c.boot.high:+.2f}]"))
  assert ("at 6,000 steps: -0.40 [-1.20, +0.50], observation, against the claim: **still "
          "against the claim**; its interval crosses 0, so the sign is not resolved.") in text
  assert ("at 6,000 steps: +3.10 [+2.20, +4.10], observation, as claimed: **moved**.") in text
  assert budget.column([tie, moved], "2,000 × 64 → 6,000 × 64") == (
      "**budget-bound** at 2,000 × 64 → 6,000 × 64: 1 of 2 rechecked moved (observation, "
      "against the claim → observation, as claimed); 1 still against the claim (1 of them "
      "with an interval across 0)")


def test_an_open_domain_reversal_is_not_rechecked_on_the_closed_budget_rows():
  """The budget table ranks the closed candidates: its longer ICT says nothing of ICT below
  BM25 over the open-domain pool, so the reversal has no second verdict and says why."""
  raw = copy.deepcopy(BUDGET_GRID)
  raw["tables"].append({"id": "6", "title": "t6", "ratios": [5], "open_domain": True,
                        "rows": ["bm25", "ict"]})
  raw["readings"] = [{"id": "open-over-bm25", "sentence": "ICT is above BM25.",
                      "source": "paper", "table": "6", "pairs": [["ict", "bm25"]]}]
  spec = grid.parse("g", raw)
  results = _results({("6", "ict", "base", 5): [0.30], ("6", "bm25", "base", 5): [0.90],
                      ("budget", "ict", "long", 5): [0.95]})
  (c,) = readings.compare(spec, results)
  assert c.verdict in budget.AGAINST
  assert (c.longer, c.recheck) == (None, budget.OTHER_POOL)
  text = readings.markdown(spec, results)
  assert f"at 6,000 steps: not checked: {budget.OTHER_POOL}." in text
  assert "not rechecked: 1 without a row pre-trained longer" in text


@pytest.mark.parametrize("budget, message", [
    ({"table": "9", "longer": {"base": "long"}}, "budget table '9' is not a table"),
    ({"table": "budget", "longer": {"base": "longer"}}, "variant(s) ['longer'] are not"),
    ({"table": "budget"}, "budget needs `table` and `longer"),
    ({"table": "budget", "longer": {"base": "long"}, "steps": 6}, "unknown field(s) ['steps']"),
])
def test_bad_budget_checks_are_named_errors(budget, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    grid.parse("g", dict(BUDGET_GRID, budget=budget))
