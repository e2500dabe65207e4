"""A grid that names a BEIR folder (`beir:` in the grid file, experiment.beir_cells): BM25 flat
once per folder and every pre-trained row zero-shot as ordinary cells; a grid without the key
plans what it did. End to end on a tiny grid and a BEIR folder the test writes: the rendered
table's numbers are those of `twotower beir` on the same model and folder, the column
re-renders from the results folder alone, and a second run runs nothing."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil

import pytest

from beir_fixtures import write_beir
from test_experiment import tiny_dump, tiny_squad
from twotower import cli
from twotower import experiment
from twotower.commands import experiment as experiment_cmd
from twotower.eval import beir_eval
from twotower.experiment import beir_cells, execute, grid, plan, render

INPUTS = plan.Inputs("d.xml.bz2", squad="s.json")

# The tiny grid cut to what a BEIR column needs: one pre-trained row, zero-shot only.
GRID = """
model: tiny
data:
  pairs: {ict_per_page: 16, min_query_words: 3}
  heldout_percent: 0
  vocab_size: 400
  pretrain_text_from_squad: true
training: {pretrain_steps: 10}
ratios: [0]
seeds: {default: [0]}
systems:
  bm25: {kind: bm25, encoder: BM25, pretraining: "-"}
  ict: {encoder: Transformer, pretraining: ICT, tasks: [ict]}
tables:
  - {id: "3", title: "Table 3: ReQA SQuAD, Recall@k (%)", ratios: [0], rows: [bm25, ict]}
"""


def _grid_file(folder: pathlib.Path, text: str) -> str:
  path = folder / "beir-grid.yaml"
  path.write_text(text, encoding="utf-8")
  return str(path)


# ---------------------------------------------------------------------------------------------
# The plan (no TensorFlow).
# ---------------------------------------------------------------------------------------------


def test_a_grid_without_the_key_plans_what_it_did_and_with_it_adds_beir_cells_only():
  without, _ = plan.plan(grid.load("tiny"), INPUTS)
  spec = grid.load("tiny-scifact")
  assert spec.beir == (grid.BeirDataset("scifact", "../shared/data/beir/scifact-train",
                                        "train"),)
  with_beir, _ = plan.plan(spec, INPUTS)
  assert not without.of_kind("beir")
  # Every cell of the grid without the key, with the same directory and key.
  assert {c.dirname: c.key for c in without} == {c.dirname: c.key for c in with_beir
                                                  if c.kind != "beir"}
  # BM25 flat once; the one pre-training whose row has a zero-shot entry (ict-hn reuses it).
  beir = with_beir.of_kind("beir")
  assert [c.name for c in beir] == ["beir/scifact/bm25-flat", "beir/scifact/ict/base/s0"]
  assert beir[0].deps == {} and beir[1].deps == {"model": "pretrain/ict/base/s0"}
  assert (beir[1].params.path, beir[1].params.split) == ("../shared/data/beir/scifact-train",
                                                         "train")


def test_a_grid_without_zero_shot_ratios_exports_its_pretrainings_for_the_beir_column(tmp_path):
  text = GRID.replace("ratios: [0]", "ratios: [80]").replace(
      "{pretrain_steps: 10}", "{pretrain_steps: 10, finetune_steps: {80: 5}}")
  plain, _ = plan.plan(grid.load(_grid_file(tmp_path, text)), INPUTS)
  assert plain["pretrain/ict/base/s0"].params.export is False
  with_beir, _ = plan.plan(grid.load(_grid_file(tmp_path, text + "beir: {b: /data/b}\n")),
                           INPUTS)
  assert with_beir["pretrain/ict/base/s0"].params.export is True
  assert with_beir["beir/b/ict/base/s0"].params.split == "test"  # the default split


@pytest.mark.parametrize("key, message", [
    ("beir: [/data/b]", "beir is {name: path}"),
    ("beir: {b: {split: test}}", "a name without '/' and a `path`"),
    ("beir: {b: {path: /data/b, spilt: test}}", "unknown field"),
])
def test_a_bad_beir_key_is_a_named_error(tmp_path, key, message):
  with pytest.raises(ValueError, match=message):
    grid.load(_grid_file(tmp_path, GRID + key + "\n"))


# ---------------------------------------------------------------------------------------------
# End to end: the grid's cells against `twotower beir` itself.
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
  """The tiny BEIR grid run once, and `twotower beir` of bm25-flat and dense on the same
  folder with the grid's pre-trained towers."""
  root = tmp_path_factory.mktemp("grid-beir")
  data = write_beir(root / "tinybeir")
  grid_file = _grid_file(root, GRID + f"beir:\n  tinybeir: {{path: {data}, split: test}}\n")
  config = experiment_cmd.parse([
      "--grid", grid_file, "--out", str(root / "work"), "--results_dir", str(root / "results"),
      "--dump", tiny_dump(root / "tiny-pages-articles.xml.bz2"),
      "--squad", tiny_squad(root / "squad.json"), "--progress", "none"])
  first = experiment.run(config)
  the_plan = plan.plan(experiment.load_spec(config), plan.Inputs(config.dump, config.squad))[0]
  pretrain = execute.cell_dir(config.out, the_plan["pretrain/ict/base/s0"])
  assert cli.main(["beir", "--data", str(data), "--split", "test", "--systems",
                   "bm25-flat,dense", "--model", pretrain, "--out", str(root / "beir")]) == 0
  return config, first, the_plan, root


def _beir_out(root: pathlib.Path) -> tuple[dict, dict]:
  """`twotower beir`'s metrics by system, and its dense-vs-bm25-flat intervals by metric."""
  records = json.loads((root / "beir" / "metrics.json").read_text())
  intervals = json.loads((root / "beir" / "intervals.json").read_text())
  return ({r["system"]: r for r in records},
          {r["metric"]: r for r in intervals if r["system"] == "dense"})


def _table_rows(md: str) -> dict[str, list[str]]:
  rows = {}
  for line in md.splitlines():
    if line.startswith("| ") and not line.startswith("| Row"):
      cells = [c.strip() for c in line.strip("|").split("|")]
      rows[cells[0]] = cells[1:]
  return rows


@pytest.mark.slow
def test_the_beir_column_is_twotower_beirs_numbers(ran):
  config, first, the_plan, root = ran
  results = pathlib.Path(config.results_dir)
  assert {"beir/tinybeir/bm25-flat", "beir/tinybeir/ict/base/s0"} <= set(first.ran)
  assert set(first.states.values()) == {"done"}
  metrics, intervals = _beir_out(root)
  # results.json keeps each cell's record: the same floats as `twotower beir`'s metrics.json.
  kept = {e["cell"]: e for e in json.loads((results / "results.json").read_text())["beir"]}
  assert kept["beir/tinybeir/bm25-flat"]["record"] == metrics["bm25-flat"]
  assert kept["beir/tinybeir/ict/base/s0"]["record"] == metrics["dense"]
  assert (kept["beir/tinybeir/ict/base/s0"]["system"], kept["beir/tinybeir/ict/base/s0"]["seed"]
          ) == ("ict", 0)
  # The table: each number as `twotower beir` gives it, and the interval it prints.
  md = (results / "beir-tinybeir.md").read_text()
  judged, documents = metrics["bm25-flat"]["questions"], metrics["bm25-flat"]["candidates"]
  assert (judged, documents) == (7, 12)  # q7, q9, q10 are judged on dev only
  assert md.startswith(f"### {beir_cells.TITLE}: tinybeir (test, {judged} judged queries, "
                       f"{documents} documents)")
  rows = _table_rows(md)
  bm25, ict = rows["BM25 flat (Pyserini's BEIR regression)"], rows["Transformer, ICT"]
  assert bm25[1:3] == [f"{100 * metrics['bm25-flat']['metrics'][m]:.2f}"
                       for m in ("nDCG@10", "R@100")]
  assert ict[0] == "0"  # the seed
  assert ict[1:3] == [f"{100 * metrics['dense']['metrics'][m]:.2f}" for m in ("nDCG@10", "R@100")]
  assert ict[3:5] == [beir_cells.interval_text(intervals[m]) for m in ("nDCG@10", "R@100")]
  assert float(bm25[1]) > float(ict[1])  # 10 steps of ICT are no match for BM25 here
  # Beside ReQA's tables in the README.
  readme = (results / "README.md").read_text()
  assert readme.index("### Table 3") < readme.index(f"### {beir_cells.TITLE}")
  # The per-query values kept are `twotower beir`'s.
  ours = beir_cells.per_query_reader(str(results))("beir/tinybeir/ict/base/s0")
  theirs = beir_eval.read_per_query(str(root / "beir" / beir_eval.PER_QUERY_FILE))["dense"]
  assert ours.query_ids == theirs.query_ids
  for m in theirs.metrics:
    assert ours.values[m].tolist() == theirs.values[m].tolist()


@pytest.mark.slow
def test_the_beir_column_rerenders_from_the_results_folder_and_a_rerun_runs_nothing(ran, tmp_path):
  config, _, _, _ = ran
  results = tmp_path / "results"
  shutil.copytree(config.results_dir, results)
  before = (results / "beir-tinybeir.md").read_bytes()
  (results / "beir-tinybeir.md").unlink()
  render.rerender(experiment.load_spec(config), str(results))
  assert (results / "beir-tinybeir.md").read_bytes() == before
  second = experiment.run(config)
  assert second.ran == ()
  assert (pathlib.Path(config.results_dir) / "beir-tinybeir.md").read_bytes() == before
  # A lost work directory: the beir cells come back from cells.json, the table from the
  # per-query values kept, nothing runs for it.
  lost = dataclasses.replace(config, out=str(tmp_path / "new-work"), results_dir=str(results),
                             render_only=True)
  experiment.run(lost)
  assert (results / "beir-tinybeir.md").read_bytes() == before


def test_a_row_of_several_seeds_shows_its_mean_and_sd_and_the_interval_of_its_query_means(
    tmp_path):
  """Rendered from hand-made records and per-query values: two seeds of `ict` on three
  queries against BM25 flat."""
  import numpy as np
  from twotower.core import paired_bootstrap
  from twotower.eval.ir_metrics import Evaluation
  spec = grid.load(_grid_file(tmp_path, GRID.replace("[0]}", "[0, 1]}") + "beir: {b: /b}\n"))
  queries = ("q1", "q2", "q3")
  values = {"beir/b/bm25-flat": [1.0, 0.5, 0.0], "beir/b/ict/base/s0": [0.5, 0.5, 0.0],
            "beir/b/ict/base/s1": [1.0, 0.0, 0.5]}
  per_query = {name: Evaluation(beir_cells.METRICS, queries,
                                {m: np.array(v) for m in beir_cells.METRICS})
               for name, v in values.items()}

  def entry(name, system, variant, seed):
    mean = float(np.mean(values[name]))
    return {"cell": name, "dataset": "b", "system": system, "variant": variant, "seed": seed,
            "record": {"system": "dense", "split": "test", "questions": 3, "candidates": 9,
                       "metrics": {m: mean for m in beir_cells.METRICS}}}

  entries = [entry("beir/b/bm25-flat", "bm25-flat", None, None),
             entry("beir/b/ict/base/s1", "ict", "base", 1),
             entry("beir/b/ict/base/s0", "ict", "base", 0)]
  ((dataset, md),) = beir_cells.tables(spec, entries, per_query.get)
  assert dataset == "b"
  ict = _table_rows(md)["Transformer, ICT"]
  # Seed means 1/3 and 1/2: mean 41.67, sample SD 11.79 (points).
  assert ict[:3] == ["0, 1", "41.67 ± 11.79", "41.67 ± 11.79"]
  expected = paired_bootstrap.paired_values(100 * np.array([0.75, 0.25, 0.25]),
                                            100 * np.array(values["beir/b/bm25-flat"]))
  assert ict[3] == (f"{expected.difference:+.2f} [{expected.low:+.2f}, "
                    f"{expected.high:+.2f}]") == ict[4]
  # Without BM25 flat's per-query values, no interval (the numbers stay).
  ((_, md),) = beir_cells.tables(spec, entries, lambda n: None if "bm25" in n else per_query[n])
  assert _table_rows(md)["Transformer, ICT"][3:] == ["", ""]
