"""Grid rows of issue 37 (no TensorFlow): BM25 cut as the towers read (`truncate: tower`), a
variant's own pre-training steps, the confound and budget tables of cpu-small-links, and the
keys of the cells already run, which these must not move."""

from __future__ import annotations

import json
import pathlib

import pytest

from twotower.core import contracts
from twotower.experiment import grid, plan, row_configs
from twotower.experiment.params import key_params

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: The inputs of the committed cpu-small run, as its README's command gave them.
COMMITTED = plan.Inputs("../shared/data/wiki/enwiki-slice-pages-articles.xml.bz2",
                        squad="../shared/data/squad/train-subset-v1.1.json",
                        corpus="../shared/data/wiki/enwiki-2018-wikiextractor.txt.bz2")


@pytest.fixture(scope="module")
def links():
  """cpu-small-links on the committed run's inputs: (spec, plan, entries)."""
  spec = grid.load("cpu-small-links")
  return (spec, *plan.plan(spec, COMMITTED))


def test_the_committed_cpu_small_cells_keep_their_keys():
  """Every cell of docs/results/cpu-small/cells.json is planned under the key it ran with: a
  restored cell is reused, nothing of the committed grid runs again."""
  records = json.loads((ROOT / "docs/results/cpu-small/cells.json").read_text())
  the_plan, _ = plan.plan(grid.load("cpu-small"), COMMITTED)
  committed = {r["cell"]: r["key"] for r in records.values()}
  assert len(committed) == len(the_plan) == 397
  assert {name: the_plan[name].key for name in committed} == committed
  assert "doc_pieces" not in key_params(the_plan["bm25/squad"].params)


def test_the_links_reruns_cells_keep_the_keys_they_were_started_under():
  """cpu-small-links' pairs, vocabulary and first pre-training (the keys its re-run began
  with): the rows and variants added after it plan cells beside them, never instead."""
  inputs = plan.Inputs("/work/shared/data/wiki/enwiki-slice-pages-articles.xml.bz2",
                       squad="/work/shared/data/squad/train-subset-v1.1.json",
                       corpus="/work/shared/data/wiki/enwiki-2018-wikiextractor.txt.bz2")
  the_plan, _ = plan.plan(grid.load("cpu-small-links"), inputs)
  assert the_plan["pairs/wiki"].key.startswith("5552098f7e")
  assert the_plan["vocab/wiki"].key.startswith("8ce166a50d")
  assert the_plan["pretrain/ict+bfs+wlp-pooled/base/s0"].key.startswith("e42f98e963")


def test_cut_rows_are_bm25_cells_of_their_own_on_the_grids_vocabulary(links):
  _, the_plan, entries = links
  whole, cut, cut256 = (the_plan[n] for n in ("bm25/squad", "bm25/squad/bm25-cut",
                                              "bm25/squad/bm25-cut256"))
  assert whole.deps == {"reqa": "reqa/squad"}
  assert "doc_pieces" not in key_params(whole.params)
  # bm25-cut: the grid model's lengths (cpu-small: documents 128, queries 32 pieces).
  assert (cut.params.doc_pieces, cut.params.query_pieces) == (128, 32)
  assert (cut256.params.doc_pieces, cut256.params.query_pieces) == (256, 64)
  for c in (cut, cut256):
    assert c.deps == {"reqa": "reqa/squad", "vocab": "vocab/wiki"}
    assert c.params.splits == whole.params.splits
  assert cut.params.system == "bm25-cut" and cut.key != cut256.key != whole.key
  confound = [e for e in entries if e.table == "confound"]
  assert {(e.system, e.cell) for e in confound if e.system.startswith("bm25")} == {
      ("bm25", "bm25/squad"), ("bm25-cut", "bm25/squad/bm25-cut"),
      ("bm25-cut256", "bm25/squad/bm25-cut256")}
  assert sorted({e.ratio for e in confound}) == [0, 1, 5, 10, 80]
  # A hybrid's BM25 is still the whole-text run.
  assert the_plan["fuse/squad/hybrid/base/r5/s0"].deps["first"] == "bm25/squad"


def test_a_variant_sets_its_own_pretraining_steps(links):
  spec, the_plan, entries = links
  assert spec.pretrain_steps == 2000

  def steps(name: str) -> int:
    return the_plan[name].params.config["trainer"]["steps"]

  assert steps("pretrain/ict/base/s0") == 2000 and steps("pretrain/ict/steps6k/s0") == 6000
  deep = the_plan["pretrain/ict/l4-d128-steps6k/s0"].params.config
  assert deep["trainer"]["steps"] == 6000 and deep["model"]["num_layers"] == 4
  assert steps("pretrain/ict/l4-d128/s0") == 2000
  # Otherwise the same run: only the steps (and so the key) differ.
  base, longer = (dict(the_plan[f"pretrain/ict/{v}/s0"].params.config) for v in
                  ("base", "steps6k"))
  assert {**base, "trainer": {**base["trainer"], "steps": 6000}} == longer
  # Fine-tuning is the grid's for every variant: the budget is pre-training's.
  ft = {v: the_plan[f"finetune/squad/ict/{v}/r5/s0"] for v in ("base", "steps6k")}
  assert ft["base"].params.config == ft["steps6k"].params.config
  assert ft["steps6k"].deps["init"] == "pretrain/ict/steps6k/s0"
  # A larger batch sees as many examples as the variant's steps at the preset's batch.
  large = row_configs.pretrain_config(spec, spec.systems["ict+bfs+wlp-large"],
                               spec.variants["steps6k"], 0)
  assert (large.trainer.steps, large.data.batch_size) == (6000 * 64 // 1024, 1024)
  budget = [e for e in entries if e.table == "budget"]
  assert sorted({e.ratio for e in budget}) == [0, 5] and {e.seed for e in budget} == {0}
  rows = {(e.system, e.variant) for e in budget}
  assert rows == {(s, v) for s in ("ict", "bfs", "ict+bfs+wlp-pooled", "contriever",
                                   "cocondenser", "crop") for v in ("base", "steps6k")} | {
      ("ict", "l4-d128"), ("ict", "l4-d128-steps6k")}
  assert len(budget) == 2 * len(rows)
  # Zero-shot: the pre-trained towers themselves, on every question.
  zero = [e for e in budget if e.ratio == 0]
  assert zero and all(e.split == contracts.scored_split(0) and e.cell.startswith("eval/")
                      for e in zero)


@pytest.mark.parametrize("text, error", [
    ("variants: {long: {pretrain_steps: -5}}", "pretrain_steps -5"),
    ("variants: {long: {pretrain_steps: many}}", "pretrain_steps 'many'"),
    ("variants: {long: {steps: 6000}}", r"unknown field\(s\) \['steps'\]"),
    ("systems: {ict: {truncate: tower}}", "a BM25 row's"),
    ("systems: {cut: {kind: bm25, doc_pieces: 64}}", "say `truncate: tower`"),
    ("systems: {cut: {kind: bm25, truncate: half}}", "truncate 'half'"),
    ("systems: {ict: {seeds: [7]}}", r"system 'ict' seeds \[7\] are not among"),
    ("variants: {l4-d128: {seeds: [3]}}", r"variant 'l4-d128' seeds \[3\]"),
    ("systems: {ict+bfs+wlp-hn: {seeds: [0]}}", "its partner 'ict\\+bfs\\+wlp-hn' only at"),
])
def test_bad_budget_cut_and_seed_settings_are_named_errors(tmp_path, text, error):
  path = tmp_path / "bad.yaml"
  path.write_text(f"extends: cpu-small\n{text}\n")
  with pytest.raises(ValueError, match=error):
    grid.load(str(path))


def test_a_row_or_variant_narrows_the_grids_seeds(links):
  """cpu-small-links runs its costly rows beyond the paper and the doc256 variant at seed 0,
  every row the readings compare at three seeds, and the hybrid (which fuses the pooled row
  only) at three."""
  spec, the_plan, entries = links

  def seeds(system: str, variant: str = "base", ratio: int = 5) -> set[int]:
    return {e.seed for e in entries if (e.system, e.variant, e.ratio) == (system, variant,
                                                                           ratio)}

  for ratio in (0, 1, 5, 10, 80):
    assert seeds("ict+bfs+wlp-pooled", ratio=ratio) == {0, 1, 2}
    assert seeds("ict+bfs+wlp-pooled", "doc256", ratio) == {0}
    assert seeds("contriever", ratio=ratio) == {0}
  for row in ("no-ssl", "mlm", "ict", "bfs", "crop", "bow-mlp", "ict+bfs+wlp-pooled+squad",
              "hybrid"):
    assert seeds(row) == {0, 1, 2}, row
  for row in ("ict+bfs+wlp-large", "ict+bfs+wlp-hn", "cocondenser", "ict+bfs+wlp+crop"):
    assert seeds(row, ratio=80) == {0}, row
  assert "pretrain/ict+bfs+wlp-pooled/doc256/s1" not in the_plan
  assert "pretrain/contriever/base/s2" not in the_plan
  assert spec.row_seeds(80, "ict+bfs+wlp-pooled", "doc256") == (0,)
  fuse = the_plan["fuse/squad/hybrid/base/r80/s2"]
  assert {d for d in fuse.deps if d.startswith("partner:")} == {"partner:ict+bfs+wlp-pooled"}
