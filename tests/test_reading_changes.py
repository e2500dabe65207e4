"""A grid's reading against an earlier grid's (experiment.reading_changes): comparisons
matched by claim and row ids, counts per claim from the reading's own counter, what moved
under each changed verdict, and the file the render writes beside reading.md."""

import json

import yaml

from twotower.experiment import grid, reading_changes, readings
from twotower.experiment import rerender as rerender_lib

GRID = {
    "model": "cpu-small", "ratios": [1, 5],
    "systems": {"ict": {"encoder": "Transformer", "pretraining": "ICT", "tasks": ["ict"]},
                "mlm": {"encoder": "Transformer", "pretraining": "MLM", "tasks": ["mlm"]}},
    "tables": [{"id": "3", "title": "t3", "ratios": [1, 5], "rows": ["ict", "mlm"]}],
    "readings": [{"id": "ict-over-mlm", "sentence": "ICT is above MLM.", "source": "paper",
                  "pairs": [["ict", "mlm"]]}]}


def _results(values):
  """results.json from {(system, ratio): [R@100 per seed]} (the other recalls and MRR as
  fractions of it)."""
  return {"per_seed": [
      {"table": "3", "dataset": "squad", "system": system, "variant": "base", "ratio": ratio,
       "seed": seed, "cell": f"eval/squad/{system}/base/r{ratio}/s{seed}",
       "split": f"test-{ratio}",
       "record": {"questions": 100, "candidates": 300, "metrics": {
           **{f"R@{k}": x * k / 100 for k in (1, 5, 10, 50)}, "R@100": x, "MRR": x / 4}}}
      for (system, ratio), xs in values.items() for seed, x in enumerate(xs)]}


# One seed each, ICT above MLM at both ratios (observations as claimed); after: three seeds
# at 5 % with ICT clearly under MLM, and 1 % not run yet.
BEFORE = _results({("ict", 1): [0.30], ("mlm", 1): [0.20], ("ict", 5): [0.40],
                   ("mlm", 5): [0.30]})
AFTER = _results({("ict", 5): [0.20, 0.21, 0.22], ("mlm", 5): [0.40, 0.41, 0.42]})


def _reading(name, raw, results):
  spec = grid.parse(name, raw)
  return reading_changes.Reading(spec, tuple(readings.compare(spec, results)))


def test_a_verdict_that_changed_says_what_moved_under_it():
  before = _reading("old", GRID, BEFORE)
  after_raw = dict(GRID, systems=dict(GRID["systems"], ict={
      **GRID["systems"]["ict"], "pretraining": "ICT (readable text)"}))
  after = _reading("new", after_raw, AFTER)
  found = reading_changes.changes(before, after)
  assert [(c.before.ratio if c.before else None, c.after.ratio if c.after else None)
          for c in found] == [(5, 5), (1, None)]
  five, one = found
  assert five.changed and not one.matched and not one.changed
  assert five.before.verdict == readings.SEEN_AS
  assert five.after.verdict == readings.CONTRADICTED
  moved = five.moved(before.spec, after.spec)
  # The gain +10 became -20, a single observation became a seed-SD interval over 3 seeds,
  # and the ICT row's label is the renamed one (matched by its id all the same).
  assert moved[0] == (reading_changes.REVERSED, "gain +10.00 -> -20.00")
  assert moved[1] == (reading_changes.INTERVAL, "observation -> seed SDs")
  assert moved[2] == (reading_changes.SEEDS, "seeds 1/1 -> 3/3")
  assert moved[3] == ("", "rows were Transformer, ICT against Transformer, MLM")
  text = reading_changes.markdown(before, after, "../old")
  # Per claim: each side's counts as reading.md words them; 1 matched, 1 changed (reversed),
  # 1 comparison only before.
  line = next(x for x in text.splitlines() if x.startswith("| ict-over-mlm |"))
  assert line == (f"| ict-over-mlm | {readings.counts_text(before.comparisons)} | "
                  f"{readings.counts_text(after.comparisons)} | 1 | 1 | "
                  f"{reading_changes.REVERSED}: 1 | 1 | 0 |")
  assert "observation, as claimed at 2 of 2 ratios" in line
  # The transition counts: one observation became contradicted, one has no after.
  rows = {x.split(" | ")[0]: x for x in text.splitlines() if x.startswith("| observation")}
  assert rows["| observation, as claimed"] == "| observation, as claimed | 1 | 1 | 2 |"
  # The changed verdict with its paired seeds' gains (one seed before, three after) and
  # its interval before and after (none for an observation; the seed-SD bar of 2 x SD 1).
  assert ("| Transformer, ICT (readable text) | Transformer, MLM | 5 % | R@100 | "
          "observation, as claimed (+10.00, observation, seeds 1/1) | contradicted (-20.00, "
          "seed SDs, seeds 3/3) | +10.00 → -20.00 / -20.00 / -20.00 | – → [-22.00, -18.00] | "
          "the rows swapped places: gain +10.00 -> -20.00;") in text


def test_an_unchanged_reading_lists_no_change():
  before, after = _reading("old", GRID, BEFORE), _reading("new", GRID, BEFORE)
  found = reading_changes.changes(before, after)
  assert len(found) == 2 and all(c.matched and not c.changed for c in found)
  text = reading_changes.markdown(before, after, "../old")
  assert "| ict-over-mlm |" in text and "### ict-over-mlm" not in text


def test_the_render_writes_the_changes_beside_the_reading(tmp_path):
  """A grid that names `reading_baseline` gets reading-changes.md from a re-render where the
  baseline's results folder sits beside its own; without that folder, none."""
  (tmp_path / "old.yaml").write_text(yaml.safe_dump(GRID), encoding="utf-8")
  (tmp_path / "new.yaml").write_text(yaml.safe_dump(
      {**GRID, "reading_baseline": str(tmp_path / "old.yaml")}), encoding="utf-8")
  assert grid.load(str(tmp_path / "new.yaml")).reading_baseline
  assert not grid.load(str(tmp_path / "old.yaml")).reading_baseline
  results = tmp_path / "results"
  for name, values in (("new", AFTER), ("old", BEFORE)):
    (results / name).mkdir(parents=True)
    (results / name / "results.json").write_text(json.dumps(values), encoding="utf-8")
  changes = results / "new" / reading_changes.CHANGES_FILE
  rerender = ["--grid", str(tmp_path / "new.yaml"), "--results_dir", str(results / "new")]
  (results / "old" / "results.json").rename(tmp_path / "away.json")
  assert rerender_lib.main(rerender) == 0
  assert (results / "new" / readings.READING_FILE).exists() and not changes.exists()
  (tmp_path / "away.json").rename(results / "old" / "results.json")
  assert rerender_lib.main(rerender) == 0
  text = changes.read_text(encoding="utf-8")
  assert text.startswith("# The reading of `new` against that of `old`")
  assert "results and those of `../old`" in text
  assert "| contradicted (-20.00, seed SDs, seeds 3/3) |" in text
