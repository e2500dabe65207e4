"""Fine-tuning length chosen per row on validation (issue 37): the rule on curves the test
knows, the grid setting that turns it on, the plan it makes (a choosing cell per row, size
and ratio; carried lengths for the other seeds and for a ratio with too small a validation
split), and the committed grid's fine-tuning cells untouched. No TensorFlow here: the runs
are in tests/test_model_train.py."""

from __future__ import annotations

import pytest

from twotower.experiment import finetune_length, grid, plan, row_configs
from twotower.experiment.params import key_params
from twotower.model.selection import best_index, first_judged, smoothed, smoothed_name

INPUTS = plan.Inputs("../shared/data/wiki/enwiki-slice-pages-articles.xml.bz2",
                     squad="squad.json")


def test_the_rule_is_the_earliest_best_of_the_trailing_moving_average():
  # A spike at the second checkpoint wins alone; averaged over 3 it is noise, and the
  # plateau's end of its first full best window wins.
  curve = [0.1, 0.5, 0.2, 0.4, 0.4, 0.4, 0.3]
  assert smoothed(curve, 3) == pytest.approx([0.1, 0.3, 0.8 / 3, 1.1 / 3, 1.0 / 3, 0.4,
                                              1.1 / 3])
  assert best_index(curve, 1) == 1
  assert best_index(curve, 3) == 5
  # Ties keep the earlier checkpoint; a loss is best when lowest.
  assert best_index([0.2, 0.3, 0.3, 0.3], 1) == 1
  assert best_index([3.0, 2.0, 1.0, 1.5], 1, higher=False) == 2
  assert best_index([], 3) is None
  assert smoothed_name("val_R@100", 3) == "val_R@100_avg3" and smoothed_name("x", 1) == "x"


def test_only_checkpoints_with_a_full_window_are_judged():
  # cpu-small-links, ICT at 5 % (72 validation questions, R@100 at 150, 300, 450): the first
  # checkpoint alone (56.94, training in-batch accuracy 0.57) beat the next averages by a
  # question or two and stopped the run at 450; judged from the third, it trains on.
  curve = [56.94, 54.17, 55.56]
  assert best_index(curve, 1) == 0 and best_index(curve, 3) == 2
  assert [first_judged(n, 3) for n in (0, 1, 2, 3, 8)] == [0, 0, 1, 2, 2]
  assert best_index([0.5, 0.2], 3) == 1          # shorter than the window: its last point
  assert best_index([0.9, 0.1, 0.2, 0.3], 2) == 1 and best_index([0.9, 0.1, 0.2, 0.3], 1) == 0


def test_the_rule_on_the_committed_5_percent_curve():
  """docs/results/cpu-small/curves.md's validation R@100 of the pooled row at 5 %, every 30
  steps: the centred average chose 150 there; the trailing one, which a run can apply as it
  trains, chooses the next checkpoint, 180."""
  steps = list(range(30, 361, 30))
  values = [33.3, 34.7, 36.1, 40.3, 43.1, 43.1, 37.5, 40.3, 36.1, 37.5, 40.3, 38.9]
  assert steps[best_index(values, 3)] == 180


def test_a_carried_length_scales_the_schedule_and_the_stop_by_training_questions():
  source = {"cap": 1200, "chosen_step": 360}
  assert finetune_length.carried(source, 105, 563) == (224, 67)   # 1 % from 5 %
  assert finetune_length.carried(source, 563, 563) == (1200, 360)  # another seed
  assert finetune_length.carried({"cap": 10, "chosen_step": 1}, 1, 100) == (1, 1)
  with pytest.raises(ValueError, match="no training questions"):
    finetune_length.carried(source, 105, 0)


def test_the_record_holds_the_curve_and_refuses_a_step_the_rule_did_not_choose():
  history = {"step": [10.0, 20.0, 30.0, 40.0], "val_R@100": [0.2, 0.6, 0.3, 0.2],
             "loss": [3.0, 2.0, 1.5, 1.2]}
  rule = {"metric": "R@100", "window": 3, "checkpoints": 4, "patience": 1, "min_questions": 5}
  record = finetune_length.record(history, rule, 30, cap=100, validation_questions=18)
  # Step 20's average (0.4) is over two points: not judged.
  assert record["steps"] == [10, 20, 30, 40] and record["chosen_step"] == 30
  assert record["smoothed"] == pytest.approx([0.2, 0.4, 1.1 / 3, 1.1 / 3])
  assert (record["steps_trained"], record["cap"], record["validation_questions"]) == (40, 100, 18)
  with pytest.raises(ValueError, match="exported step 20, the rule chooses 30"):
    finetune_length.record(history, rule, 20, cap=100, validation_questions=18)


def _grid(tmp_path, select: str) -> str:
  path = tmp_path / "g.yaml"
  path.write_text("extends: tiny\nratios: [0, 1, 80]\nseeds: {default: [0, 1]}\n"
                  f"training: {{finetune_select: {select}}}\n"
                  "tables: [{id: '3', title: t, ratios: [0, 1, 80], rows: [bm25, ict]}]\n"
                  "readings: []\n")
  return str(path)


def test_a_grid_chooses_per_row_and_carries_where_validation_is_small(tmp_path):
  spec = grid.load(_grid(tmp_path, "{max_steps: {80: 40}, carry: {1: 80}, checkpoints: 4, "
                                   "share_seed: 0}"))
  the_plan, _ = plan.plan(spec, INPUTS)
  chooser = the_plan["finetune/squad/ict/base/r80/s0"]
  assert chooser.params.select == {"metric": "R@100", "window": 3, "checkpoints": 4,
                                   "patience": 2, "min_questions": 50}
  assert chooser.params.carried_from is None and plan.FINETUNE_LENGTH not in chooser.deps
  trainer = chooser.params.config["trainer"]
  assert (trainer["finetune_steps"], trainer["checkpoint_every"]) == (40, 10)
  # Seed 1 at 80 % and both seeds at 1 % train the length seed 0 chose at 80 %.
  for name in ("finetune/squad/ict/base/r80/s1", "finetune/squad/ict/base/r1/s0",
               "finetune/squad/ict/base/r1/s1"):
    cell = the_plan[name]
    assert cell.deps[plan.FINETUNE_LENGTH] == chooser.name, name
    assert cell.params.carried_from == {"ratio": 80, "seed": 0} and cell.params.select is None
    assert cell.params.config["trainer"]["finetune_steps"] == row_configs.CARRIED_STEPS
  assert "chosen on validation R@100 (seed 0's), up to 40" == spec.finetune_length_text(80)
  # Without share_seed every seed chooses at its own ratio and carries its own seed's length.
  spec = grid.load(_grid(tmp_path, "{max_steps: {80: 40}, carry: {1: 80}}"))
  the_plan, _ = plan.plan(spec, INPUTS)
  assert the_plan["finetune/squad/ict/base/r80/s1"].params.select is not None
  assert the_plan["finetune/squad/ict/base/r1/s1"].deps[plan.FINETUNE_LENGTH] == (
      "finetune/squad/ict/base/r80/s1")


@pytest.mark.parametrize("select, message", [
    ("{max_steps: {80: 40}}", r"no max_steps or carry for ratio\(s\) \[1\]"),
    ("{max_steps: {80: 40}, carry: {1: 5}}", "carry 1: 5, but ratio 5 has no max_steps"),
    ("{max_steps: {80: 40}, carry: {1: 80}, colour: red}", r"unknown field\(s\) \['colour'\]"),
    ("{max_steps: {80: 4}, carry: {1: 80}}", r"ratio\(s\) \[80\] not a multiple of 8"),
    ("{max_steps: {80: 36}, carry: {1: 80}}", r"ratio\(s\) \[80\] not a multiple of 8"),
])
def test_bad_selection_settings_are_named_errors(tmp_path, select, message):
  with pytest.raises(ValueError, match=message):
    grid.load(_grid(tmp_path, select))


def test_the_committed_grids_finetune_cells_keep_their_fixed_steps_and_keys():
  """cpu-small sets no finetune_select: its cells' parameters have neither new field, so
  their keys are the committed ones (tests/test_cell_identity.py checks every key); the
  links grid chooses at 5, 10 and 80 % on seed 0 and carries the rest."""
  cells = plan.plan(grid.load("cpu-small"), INPUTS)[0].of_kind("finetune")
  assert cells and all({"select", "carried_from"}.isdisjoint(key_params(c.params))
                       for c in cells)
  steps = {c.params.ratio: c.params.config["trainer"]["finetune_steps"] for c in cells
           if c.params.system == "ict" and c.params.variant == "base"}
  assert steps == {1: 90, 5: 150, 10: 300, 80: 1500}
  links = plan.plan(grid.load("cpu-small-links"), INPUTS)[0].of_kind("finetune")
  choosers = {(c.params.ratio, c.params.seed) for c in links if c.params.select}
  assert choosers == {(5, 0), (10, 0), (80, 0)}
  assert all(c.params.carried_from for c in links if not c.params.select)


def test_the_readme_lists_each_length_its_training_accuracy_and_a_choice_at_the_cap():
  """finetune_length.lengths_markdown: one line per choosing or carrying cell, from its done
  record; a best average at the last checkpoint of the cap is marked."""
  history = {"step": [150.0, 300.0, 450.0], "in_batch_accuracy": [0.5, 0.9, 0.95]}
  values = [0.40, 0.50, 0.60]
  chose = {"kind": "finetune", "cell": "finetune/squad/ict/base/r5/s0", "history": history,
           "selection": finetune_length.record(
               {**history, "val_R@100": values}, {"metric": "R@100", "window": 3}, 450, 450,
               72)}
  carried = {"kind": "finetune", "cell": "finetune/squad/ict/base/r1/s0",
             "history": {"step": [40.0, 80.0], "in_batch_accuracy": [0.7, 0.99]},
             "selection": {"carried_from": {"ratio": 5, "seed": 0}, "source_step": 450,
                           "source_cap": 450, "cap": 84, "chosen_step": 80}}
  fixed = {"kind": "finetune", "cell": "finetune/squad/ict/base/r5/s1"}   # no selection
  lines = finetune_length.lengths_markdown([fixed, carried, chose])
  assert lines[1] == "## Fine-tuning lengths"
  rows = [line for line in lines if line.startswith("| `")]
  assert rows == [
      "| `finetune/squad/ict/base/r1/s0` | carried from 5 %, seed 0 (step 450) | 80 | 80 | 84 "
      "| – | 0.99 |",
      "| `finetune/squad/ict/base/r5/s0` | chosen on 72 validation questions, at the cap | 450 "
      "| 450 | 450 | 50.00 | 0.95 |"]
  assert finetune_length.lengths_markdown([fixed]) == []
