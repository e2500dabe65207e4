"""The reading of a grid: claims parsed from the grid file, verdicts by the two-SD rule on
sample standard deviations, and the committed reading and docs/results.md true to the
committed results."""

import json
import pathlib
import re
import statistics

import pytest

from twotower.experiment import grid, readings

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
    # Equal means are never resolved.
    (side(4, 4), side(4, 4, 4), "higher", readings.NOT_RESOLVED),
], ids=["resolved", "contradicted", "two-vs-three-resolved", "two-vs-three-not",
        "one-seed-as", "one-seed-against", "one-seed-each", "seedless-resolved",
        "seedless-vs-one-seed", "tie"])
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
  assert "| Transformer, ICT | Transformer, MLM | 5 % | R@100 | 42.00 ± 2.00 (3 seeds) | " \
         "20.00 ± 10.00 (3 seeds) | +22.00 | 210.0 % | 20.00 | **holds, resolved** |" in text


def test_pretraining_runs_are_checked_against_chance():
  spec = grid.load("cpu-small")
  cfg = grid.pretrain_config(spec, spec.systems["bfs"], spec.variants["base"], 0)
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


def _grid_section() -> str:
  text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
  return text.split("## The paper's grid at `cpu-small`", 1)[1].split("\n## ", 1)[0]


def _blocks(text: str) -> dict[str, str]:
  return dict(re.findall(r"<!-- results:([\w.-]+) -->\n(.*?)\n<!-- /results:\1 -->", text,
                         flags=re.S))


def test_results_page_types_no_number_of_the_grid():
  """docs/results.md's grid section: every decimal number sits in a generated block, and
  each block (and the project README's summary) holds what the renderer wrote."""
  section = _grid_section()
  blocks = _blocks(section)
  assert set(blocks) == {"cpu-small", "cpu-small-tables1-2", "cpu-small-reading"}
  prose = re.sub(r"<!-- results:([\w.-]+) -->.*?<!-- /results:\1 -->", "", section,
                 flags=re.S)
  prose = re.sub(r"```.*?```", "", prose, flags=re.S)   # commands, not readings
  prose = re.sub(r"`[^`\n]*`", "", prose)               # file names and flags
  assert re.findall(r"\d+\.\d+", prose) == []
  assert blocks["cpu-small"] == (RESULTS / "summary.md").read_text(encoding="utf-8").strip()
  assert blocks["cpu-small-tables1-2"] == \
      (RESULTS / "tables1-2.md").read_text(encoding="utf-8").strip()
  readme = _blocks((ROOT / "README.md").read_text(encoding="utf-8"))
  assert readme["cpu-small"] == blocks["cpu-small"]
  results = json.loads((RESULTS / "results.json").read_text(encoding="utf-8"))
  spec = grid.load("cpu-small")
  assert blocks["cpu-small-reading"] == \
      readings.summary_markdown(spec, readings.compare(spec, results),
                                "results/cpu-small/reading.md").strip()


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
