"""`twotower experiment`: grids as data, the plan (pure), the tables, one state per cell, and
the real grid end to end on a tiny dump + tiny SQuAD file, run twice: the second run trains
nothing."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import shutil

import pytest

from twotower.commands import experiment as experiment_cmd
from twotower.core import contracts
from twotower.core.contracts import codecs
from twotower import experiment
from twotower.core import metrics
from twotower.experiment import (cells, estimate, execute, grid, plan, ranks, recheck, render,
                                  row_configs)
from twotower.experiment.params import key_params
from wikidump_fixtures import DumpPage, write_dump

INPUTS = plan.Inputs("../shared/data/wiki/enwiki-slice-pages-articles.xml.bz2",
                     squad="squad.json")

# ---------------------------------------------------------------------------------------------
# Grids and plans (no TensorFlow).
# ---------------------------------------------------------------------------------------------


def test_every_shipped_grid_loads_and_plans_in_dependency_order():
  for name in grid.grid_names():
    spec = grid.load(name)
    the_plan, entries = plan.plan(spec, INPUTS)
    seen = set()
    for cell in the_plan:
      assert set(cell.deps.values()) <= seen, cell.name
      seen.add(cell.name)
    assert entries and all(e.cell in seen for e in entries)


def test_a_grid_that_extends_another_merges_mappings_and_replaces_or_appends_lists(tmp_path):
  """`extends`: the parent's rows and data stay unless the child sets them; `tables+` adds a
  table after the parent's; a circle is refused by name."""
  child = tmp_path / "child.yaml"
  child.write_text("extends: cpu-small\n"
                   "data: {recover_links: true}\n"
                   "systems: {wlp: {pretraining: WLP (title links)}}\n"
                   "tables+:\n  - {id: extra, title: Extra, ratios: [5], rows: [bm25, ict]}\n")
  parent, spec = grid.load("cpu-small"), grid.load(str(child))
  assert spec.name == "child" and spec.data.recover_links and not parent.data.recover_links
  assert spec.data.pairs == parent.data.pairs and spec.data.vocab_size == parent.data.vocab_size
  assert spec.systems["wlp"].pretraining == "WLP (title links)"
  assert spec.systems["wlp"].tasks == ("wlp",)  # the rest of the row is the parent's
  assert [t.id for t in spec.tables] == [t.id for t in parent.tables] + ["extra"]
  assert spec.readings == parent.readings
  a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
  a.write_text(f"extends: {b}\n")
  b.write_text(f"extends: {a}\n")
  with pytest.raises(ValueError, match="circle"):
    grid.load(str(a))


def test_a_named_caveat_is_restated_once_by_a_grid_that_extends(tmp_path):
  """A reading's `caveat: <name>` is the text of `caveats: {<name>: ...}`; a child grid
  restates it once and every reading that names it prints the new text, the parent's
  readings list untouched. A name that is not a caveat is an error."""
  parent = grid.load("cpu-small")
  named = {c.id for c in parent.readings if c.caveat.startswith("BM25 indexes each")}
  assert {"dense-over-bm25", "open-domain-over-bm25"} <= named
  child = tmp_path / "child.yaml"
  child.write_text("extends: cpu-small\ncaveats: {bm25-cut: The confound table measures it.}\n")
  spec = grid.load(str(child))
  assert {c.id for c in spec.readings if c.caveat == "The confound table measures it."} == named
  assert [c.id for c in spec.readings] == [c.id for c in parent.readings]
  links = grid.load("cpu-small-links")
  assert all("confound table" in c.caveat for c in links.readings if c.id in named)
  child.write_text("extends: cpu-small\nsystems: {ict: {caveat: no-such-caveat}}\n")
  with pytest.raises(ValueError, match="system 'ict' caveat 'no-such-caveat' names no caveat"):
    grid.load(str(child))


def test_recovered_links_are_in_the_pairs_key_only_when_on():
  """The committed grids' pairs cells keep their keys; turning link recovery on plans new
  pairs cells, and so new pre-training."""
  links = grid.load("cpu-small-links")
  plans = {name: plan.plan(spec, INPUTS)[0]
           for name, spec in (("off", grid.load("cpu-small")), ("on", links))}
  off, on = (plans[k]["pairs/wiki"] for k in ("off", "on"))
  assert "recover_links" not in key_params(off.params)
  assert key_params(on.params)["recover_links"] is True
  assert on.key != off.key
  assert plans["on"]["pretrain/ict/base/s0"].key != plans["off"]["pretrain/ict/base/s0"].key


def test_cpu_small_table5_is_the_papers_design():
  """Rows 1-3 single tasks on the small towers, rows 4-9 on the deep ones (No-SSL, MLM, ICT,
  ICT+BFS+WLP at d 128, then ICT+BFS+WLP at d 256 and 512), at all four ratios."""
  spec = grid.load("cpu-small")
  (t5,) = [t for t in spec.tables if t.id == "5"]
  assert t5.ratios == (1, 5, 10, 80) and t5.layout == "r100"
  assert [(r.system, r.variant) for r in t5.rows] == [
      ("ict", "base"), ("bfs", "base"), ("wlp", "base"), ("no-ssl", "l4-d128"),
      ("mlm", "l4-d128"), ("ict", "l4-d128"), ("ict+bfs+wlp", "l4-d128"),
      ("ict+bfs+wlp", "l4-d256"), ("ict+bfs+wlp", "l4-d512")]
  cfgs = {v: row_configs.pretrain_config(spec, spec.systems["ict+bfs+wlp"], spec.variants[v], 0)
          for v in ("base", "l4-d128", "l4-d256", "l4-d512")}
  assert [(c.model.num_layers, c.model.embedding_dim) for c in cfgs.values()] == [
      (2, 128), (4, 128), (4, 256), (4, 512)]


def test_cpu_small_plan_shares_pretraining_and_seeds_whole_chains():
  spec = grid.load("cpu-small")
  the_plan, entries = plan.plan(spec, INPUTS)
  pretrains = {c.name for c in the_plan.of_kind("pretrain")}
  # A seed is the whole chain: three pre-trainings of ICT at 5 %, one elsewhere.
  assert {"pretrain/ict/base/s0", "pretrain/ict/base/s1", "pretrain/ict/base/s2"} <= pretrains
  # Rows that differ in fine-tuning only reuse a pre-training.
  hn = the_plan["finetune/squad/ict+bfs+wlp-hn/base/r5/s1"]
  assert hn.deps["init"] == "pretrain/ict+bfs+wlp-pooled/base/s1"
  assert hn.deps["hardneg"] == "hardneg/squad/k1" and hn.params.hard_negatives == 1
  # No pre-training for the untrained baselines; BoW-MLP sized like the grid's towers.
  for name in ("no-ssl", "bow-mlp"):
    cell = the_plan[f"finetune/squad/{name}/base/r80/s0"]
    assert "init" not in cell.deps
  bow = the_plan["finetune/squad/bow-mlp/base/r80/s0"].params.config["model"]
  assert (bow["encoder"], bow["query_len"], bow["doc_len"], bow["embedding_dim"]) == (
      "bow_mlp", 32, 128, 128)
  # The large-batch row sees as many examples as the batch-64 row.
  small = the_plan["pretrain/ict+bfs+wlp-pooled/base/s0"].params.config
  large = the_plan["pretrain/ict+bfs+wlp-large/base/s0"].params.config
  assert large["data"]["batch_size"] == 1024 and large["trainer"]["grad_cache_chunk"] == 64
  assert (large["trainer"]["steps"] * 1024 == small["trainer"]["steps"] * 64)
  # Its checkpoints divide its steps: the trainer would otherwise round them up.
  assert large["trainer"]["steps"] % large["trainer"]["checkpoint_every"] == 0
  assert large["data"]["mixture"] == small["data"]["mixture"] == "pooled"
  # Adam's square-root rule: 16x the batch, 4x the learning rate.
  assert large["trainer"]["learning_rate"] == pytest.approx(4 * small["trainer"]["learning_rate"])
  # The hybrid fuses BM25 with the dense row that the ratio's validation split chooses.
  fuse = the_plan["fuse/squad/hybrid/base/r10/s0"]
  assert fuse.deps[plan.FUSE_FIRST] == "bm25/squad"
  partners = {d for role, d in fuse.deps.items() if role.startswith(plan.FUSE_PARTNER)}
  assert partners == {f"eval/squad/{s}/base/r10/s0" for s in (
      "ict+bfs+wlp-pooled", "ict+bfs+wlp-hn", "ict+bfs+wlp-large", "ict+bfs+wlp-large-hn")}
  assert fuse.params.tune_split == "validation-10"
  # The beyond rows build on the pooled row: hard negatives reuse its pre-training.
  assert the_plan["finetune/squad/ict+bfs+wlp-hn/base/r5/s0"].deps["init"] == (
      "pretrain/ict+bfs+wlp-pooled/base/s0")
  # Table 6 reads the open-domain ReQA directory, fine-tuned models of the closed one.
  open_eval = the_plan["eval/squad-open/ict/base/r1/s0"]
  assert open_eval.deps["reqa"] == "reqa/squad-open"
  assert open_eval.deps["model"] == "finetune/squad/ict/base/r1/s0"
  seeds = sorted(e.seed for e in entries if e.table == "3" and e.system == "mlm"
                 and e.ratio == 5)
  assert seeds == [0, 1, 2]


def test_bow_mlp_is_the_papers_untrained_baseline_beside_the_pretrained_one():
  """Issue 11: the paper's MLP row has no pre-training; the pre-trained BoW-MLP is a row of
  its own, under its own name, in the same table."""
  spec = grid.load("cpu-small")
  the_plan, _ = plan.plan(spec, INPUTS)
  table3 = next(t for t in spec.tables if t.id == "3")
  assert {"bow-mlp", "bow-mlp-ict+bfs+wlp"} <= {r.system for r in table3.rows}
  assert spec.systems["bow-mlp"].pretraining == "No pre-training"
  untrained = the_plan["finetune/squad/bow-mlp/base/r5/s0"]
  pretrained = the_plan["finetune/squad/bow-mlp-ict+bfs+wlp/base/r5/s0"]
  assert "init" not in untrained.deps
  assert pretrained.deps["init"] == "pretrain/bow-mlp-ict+bfs+wlp/base/s0"
  assert untrained.params.config["model"]["encoder"] == "bow_mlp"


def test_zero_shot_entries_score_the_pretrained_towers_on_every_question():
  """Issue 22: the 0 % column evaluates each pre-trained row's exported towers, never
  fine-tuned, on `all`; rows with no towers before fine-tuning have no zero-shot entry."""
  spec = grid.load("cpu-small")
  the_plan, entries = plan.plan(spec, INPUTS)
  zero = [e for e in entries if e.table == "3" and e.ratio == 0]
  assert {e.split for e in zero} == {"all"}
  assert {e.system for e in zero} == {"bm25", "ict", "bfs", "wlp", "ict+bfs+wlp",
                                      "ict+bfs+wlp-pooled", "bow-mlp-ict+bfs+wlp"}
  assert sorted(e.seed for e in zero if e.system == "ict") == [0, 1, 2]
  cell = the_plan["eval/squad/ict/base/r0/s0"]
  assert cell.deps["model"] == "pretrain/ict/base/s0" and cell.params.splits == ("all",)
  assert the_plan["pretrain/ict/base/s0"].params.export is True
  assert "export" not in key_params(the_plan["pretrain/mlm/base/s0"].params)  # MLM: no towers
  # Rows that differ in fine-tuning only have no zero-shot entry: their pre-training's row
  # has it (the same towers).
  assert not [e for e in entries if e.system == "ict+bfs+wlp-hn" and e.ratio == 0]
  assert [e for e in entries if e.system == "ict+bfs+wlp-large" and e.ratio == 0]
  assert "all" in the_plan["bm25/squad"].params.splits
  # Zero-shot trains on nothing: no hard negatives of a ratio 0, no fine-tuning cell.
  assert 0 not in the_plan["hardneg/squad/k1"].params.ratios
  assert not [c for c in the_plan.of_kind("finetune") if c.params.ratio == 0]
  # The README's summary: a zero-shot cell a row cannot have reads "–", never "todo" (which
  # would never become a number); one not run yet reads "todo".
  values = {(e.cell, e.split): {"metrics": {"R@10": 0.8, "R@100": 0.9}, "questions": 1,
                                "candidates": 1} for e in entries if e.system == "bm25"}
  summary = render.summary_markdown(spec, render.aggregate(spec, entries, values))
  row = lambda label: next(line for line in summary.splitlines()
                           if line.startswith(f"| {label} |")).split(" | ")[1]
  assert row("Transformer, No pre-training") == row("Transformer, MLM") == "–"
  assert row("Transformer, ICT") == "todo" and row("BM25") == "80.00 / 90.00"
  assert not {e.system for e in zero} & {
      name for name, s in spec.systems.items() if s.kind != "bm25" and not plan.has_zero_shot(s)}


def test_the_control_row_pretrains_on_the_squad_articles_with_the_grids_vocabulary():
  spec = grid.load("cpu-small")
  assert spec.data.pretrain_text_from_squad is False
  the_plan, _ = plan.plan(spec, INPUTS)
  control = the_plan["pretrain/ict+bfs+wlp-pooled+squad/base/s0"]
  assert control.deps["pairs"] == "pairs/wiki+squad"
  assert the_plan["pairs/wiki+squad"].params.squad_text == INPUTS.squad
  assert the_plan["pairs/wiki"].params.squad_text == ""
  assert control.deps["vocab"] == "vocab/wiki" and the_plan["vocab/wiki"].deps == {
      "pairs": "pairs/wiki"}
  base = the_plan["pretrain/ict+bfs+wlp-pooled/base/s0"]
  assert base.deps["pairs"] == "pairs/wiki"
  assert control.params.config == base.params.config  # only the text differs
  # Table 1 gives both texts' composition.
  assert the_plan["datastats/squad"].deps["control_pairs"] == "pairs/wiki+squad"


def test_the_crop_row_pretrains_on_a_second_pair_set_with_the_grids_vocabulary():
  """A row whose `pairs` settings add a task (Contriever's crop) gets a pair set of its own,
  named by the task, of the same text; the vocabulary and every other row stay the grid's."""
  the_plan, entries = plan.plan(grid.load("cpu-small"), INPUTS)
  crop = the_plan["pretrain/crop/base/s0"]
  assert crop.deps == {"pairs": "pairs/wiki+crop", "vocab": "vocab/wiki"}
  own, grids = (key_params(the_plan[n].params) for n in ("pairs/wiki+crop", "pairs/wiki"))
  assert own["pairs"] == {**grids["pairs"], "crop_per_page": 64}
  assert {k: v for k, v in own.items() if k != "pairs"} == {
      k: v for k, v in grids.items() if k != "pairs"}
  assert crop.params.config["data"]["tasks"] == ["crop"]
  assert the_plan["pretrain/ict/base/s0"].deps["pairs"] == "pairs/wiki"
  assert {e.ratio for e in entries if e.system == "crop" and e.table == "successors"} == {
      0, 1, 5, 10, 80}


def test_table1_counts_the_qa_articles_pairs_apart_with_their_share():
  from twotower.eval import data_stats
  from twotower.pipelines.wiki import inputs
  from twotower.pipelines.reqa import squad_dump
  assert data_stats.source_of(12) == "mediawiki"
  assert data_stats.source_of(squad_dump.SQUAD_PAGE_ID_BASE + 3) == data_stats.QA_ARTICLES
  assert data_stats.source_of(2 * inputs.TEXT_ID_STRIDE + 5) == "input1"
  assert data_stats.source_of(2 * inputs.TEXT_ID_STRIDE + 5,
                              ["d.xml.bz2", "/data/enwiki-extracted.txt.bz2"]) == \
      "enwiki-extracted.txt.bz2"
  row = {"task": "ict", "pairs": 8, "tokens": 80, "query_length": 3.0, "doc_length": 7.0,
         "by_input": {"mediawiki": 2, "input1": 4, data_stats.QA_ARTICLES: 2}}
  text = data_stats.markdown([dict(row, by_input={"mediawiki": 2, "input1": 6})], [],
                             control=[row])
  assert "| ICT | 6 (75.0 %) | 2 (25.0 %) |" in text  # the grid's text: no QA articles
  assert "| ICT | 4 (50.0 %) | 2 (25.0 %) | 2 (25.0 %) |" in text  # the control row's


def test_bow_mlp_rows_share_towers_like_the_transformer_rows_unless_labelled():
  spec = grid.load("cpu-small")
  the_plan, _ = plan.plan(spec, INPUTS)
  model = lambda name: the_plan[name].params.config["model"]  # noqa: E731
  assert model("finetune/squad/ict/base/r5/s0")["shared_towers"] is True
  assert model("finetune/squad/bow-mlp/base/r5/s0")["shared_towers"] is True
  assert model("pretrain/bow-mlp-ict+bfs+wlp/base/s0")["shared_towers"] is True
  assert model("finetune/squad/bow-mlp-separate/base/r5/s0")["shared_towers"] is False
  assert "separate" in spec.systems["bow-mlp-separate"].encoder
  # The layer norm on the pooled average too, but on the row labelled as without it.
  for name in ("finetune/squad/bow-mlp/base/r5/s0", "pretrain/bow-mlp-ict+bfs+wlp/base/s0",
               "finetune/squad/bow-mlp-separate/base/r5/s0"):
    assert model(name)["bow_layer_norm"] is True, name
  assert "bow_layer_norm" not in model("finetune/squad/bow-mlp-raw/base/r5/s0")
  assert "no layer norm" in spec.systems["bow-mlp-raw"].encoder


def test_a_narrowed_run_makes_the_whole_grids_cells():
  """--ratios / --tables pick cells of the whole grid: BM25 and hard negatives serve every
  ratio, so narrowing must not give them new keys (their results would not count later)."""
  spec = grid.load("cpu-small")
  whole, _ = plan.plan(spec, INPUTS)
  narrow, _ = plan.plan(grid.restrict(spec, ratios=(1, 10), tables=("3", "beyond")), INPUTS)
  for name in ("bm25/squad", "hardneg/squad/k1", "finetune/squad/ict/base/r10/s0",
               "fuse/squad/hybrid/base/r1/s0"):
    assert narrow[name].key == whole[name].key, name
  assert len(narrow) < len(whole)
  assert grid.load("cpu-small").variants["base"].label == "L2 / d128"


def test_cell_keys_follow_every_setting_downstream(tmp_path):
  spec = grid.load("tiny")
  a, _ = plan.plan(spec, INPUTS)
  b, _ = plan.plan(grid.load("tiny"), INPUTS)
  longer = grid.GridSpec(**{**spec.__dict__, "pretrain_steps": 11})
  c, _ = plan.plan(longer, INPUTS)
  name = "finetune/squad/ict/base/r80/s0"
  assert a[name].key == b[name].key
  assert a["pretrain/ict/base/s0"].key != c["pretrain/ict/base/s0"].key
  assert a[name].key != c[name].key         # a new checkpoint means a new fine-tuning
  assert a["bm25/squad"].key == c["bm25/squad"].key
  assert a[name].dirname.startswith("finetune/squad_ict_base_r80_s0-")


def test_bad_grids_are_named_errors(tmp_path):
  bad = tmp_path / "bad.yaml"
  bad.write_text("model: tiny\nsystems: {ict: {tasks: [ict]}}\n"
                 "tables: [{id: '3', title: t, ratios: [80], rows: [dpr]}]\n")
  with pytest.raises(ValueError, match="row 'dpr' is not a system"):
    grid.load(str(bad))
  bad.write_text("model: tiny\nsystems: {ict: {tasks: [ict], colour: red}}\n")
  with pytest.raises(ValueError, match="unknown field"):
    grid.load(str(bad))
  with pytest.raises(ValueError, match="neither a file nor a grid"):
    grid.load("no-such-grid")


def _record(split, r1, r100):
  return {"system": "x", "split": split, "questions": 10, "candidates": 99, "gold": "pair",
          "metrics": {"R@1": r1, "R@5": r1, "R@10": r1, "R@50": r100, "R@100": r100}}


def test_aggregate_and_tables_in_the_papers_layouts():
  spec = grid.load("cpu-small")
  e = lambda table, system, variant, seed, cell: plan.Entry(  # noqa: E731
      table, "squad", system, variant, 5, seed, cell, "test-5")
  entries = [e("3", "ict", "base", s, f"eval/{s}") for s in (0, 1, 2)]
  entries += [e("3", "bm25", "base", 0, "bm25"), e("5", "ict", "l4-d128", 0, "eval/l4")]
  values = {("eval/0", "test-5"): _record("test-5", 0.1, 0.5),
            ("eval/1", "test-5"): _record("test-5", 0.2, 0.6),
            ("eval/2", "test-5"): _record("test-5", 0.3, 0.7),
            ("bm25", "test-5"): _record("test-5", 0.4, 0.8),
            ("eval/l4", "test-5"): _record("test-5", 0.2, 0.9)}
  aggs = render.aggregate(spec, entries, values)
  ict = next(a for a in aggs if a.system == "ict" and a.table == "3")
  assert ict.seeds == (0, 1, 2) and ict.mean["R@1"] == pytest.approx(0.2)
  # The sample standard deviation (n - 1): sqrt((0.01 + 0 + 0.01) / 2).
  assert ict.std["R@1"] == pytest.approx(0.1)
  t3 = next(t for t in spec.tables if t.id == "3")
  lines = render.markdown_table(spec, grid.Table("3", "t", t3.rows, (5,)),
                                [a for a in aggs if a.table == "3"]).splitlines()
  assert lines[0] == "| Encoder | Pre-training | 5%/95% R@1 | R@5 | R@10 | R@50 | R@100 |"
  assert lines[2] == "| BM25 | - | 40.00 | 40.00 | 40.00 | 80.00 | 80.00 |"
  assert lines[3].startswith("| Transformer | ICT | 20.00 ± 10.00 | ")
  t5 = next(t for t in spec.tables if t.id == "5")
  lines = render.markdown_table(spec, grid.Table("5", "t", t5.rows, (5,), layout="r100"),
                                [a for a in aggs if a.table == "5"]).splitlines()
  assert lines[0] == "| # | Model | Pre-training | R@100 5% |"
  assert lines[2] == "| 6 | L4 / d128 | ICT | 90.00 |"
  header = render.markdown_table(spec, grid.Table("b", "t", t5.rows, (0, 5), layout="r100"),
                                 []).splitlines()[0]   # the budget table's zero-shot column
  assert header == "| # | Model | Pre-training | R@100 zero-shot | R@100 5% |"
  # A recall table with a row of another variant (the confound table's doc256) names it.
  mixed = grid.Table("c", "t", (grid.Row("ict"), grid.Row("ict", "l4-d128")), (5,))
  lines = render.markdown_table(spec, mixed, [dataclasses.replace(a, table="c") for a in aggs
                                              if a.system == "ict"]).splitlines()
  assert lines[2].startswith("| Transformer | ICT | 20.00 ± 10.00")
  assert lines[3].startswith("| Transformer (L4 / d128) | ICT | 20.00 | ")
  # A row with fewer seeds done than planned says so instead of passing for the mean.
  partial = render.aggregate(spec, entries, {k: v for k, v in values.items() if k[0] != "eval/2"})
  ict = next(a for a in partial if a.system == "ict" and a.table == "3")
  assert render.cell_text(ict, "R@100").endswith("(2 of 3 seeds)")


def test_states_are_read_from_the_cells_files(tmp_path):
  """One state per cell, on disk: a failed cell and the cells that need it read the same in
  every README, whenever it is written."""
  the_plan, _ = plan.plan(grid.load("tiny"), INPUTS)
  work = str(tmp_path)
  pairs = the_plan["pairs/wiki"]
  os.makedirs(execute.cell_dir(work, pairs))
  with open(os.path.join(execute.cell_dir(work, pairs), execute.FAILED_FILE), "w") as f:
    f.write("{}")
  states = execute.states(work, the_plan)
  assert states["pairs/wiki"] == "failed"
  assert states["vocab/wiki"] == states["pretrain/ict/base/s0"] == "blocked"
  assert states["reqa/squad"] == "todo"   # needs no pair pipeline output


def test_a_resumed_cell_records_the_time_its_killed_attempt_spent(tmp_path, monkeypatch):
  """A pre-training killed after writing checkpoints, then run again: its done record keeps
  the killed attempt's wall time (start to its last file), and the README's totals say so."""
  the_plan, _ = plan.plan(grid.load("cpu-small"), INPUTS)
  cell = the_plan["pretrain/ict/base/s0"]
  sub = plan.Plan()
  sub.cells[cell.name] = dataclasses.replace(cell, deps={})
  work = str(tmp_path)
  out = execute.cell_dir(work, cell)
  os.makedirs(out)
  now = __import__("time").time()
  # The killed attempt: started 100 s ago, its last checkpoint written 40 s ago.
  with open(out + execute.ATTEMPT_SUFFIX, "w", encoding="utf-8") as f:
    json.dump({"started_epoch": now - 100}, f)
  checkpoint = os.path.join(out, "ckpt-1.index")
  pathlib.Path(checkpoint).write_text("x")
  os.utime(checkpoint, (now - 40, now - 40))
  monkeypatch.setitem(cells.EXECUTORS, "pretrain", lambda c, ctx, o: {"steps": 1})
  assert execute.run_cells(sub, work) == [cell.name]
  record = execute.read_done(out)
  assert record[execute.EARLIER] == pytest.approx(60, abs=2)
  assert not os.path.exists(out + execute.ATTEMPT_SUFFIX)   # finished: no attempt pending
  readme = render.write_readme(grid.load("cpu-small"), sub, work, (), str(tmp_path / "r"), [])
  assert "1 cell was interrupted and resumed" in readme and "(resumed; + 60 s before)" in readme


@pytest.mark.parametrize("new_loss, note", [
    (2.5, "(re-made: as recorded)"),
    (2.5000002, "(re-made: differs by up to 2e-07)")], ids=["same", "differs"])
def test_a_restored_cell_run_again_says_where_it_differs_from_its_record(
    tmp_path, monkeypatch, new_loss, note):
  """A restored pre-training that runs again for its checkpoint (a cell still to do reads
  it) keeps, in its new record, what it differs in from the record it replaces: the cells
  that read the first run keep that run's numbers. The README says so, per cell."""
  the_plan, _ = plan.plan(grid.load("cpu-small"), INPUTS)
  cell = the_plan["pretrain/ict/base/s0"]
  finetune = the_plan["finetune/squad/ict/base/r80/s0"]
  sub = plan.Plan()
  sub.cells[cell.name] = dataclasses.replace(cell, deps={})
  sub.cells[finetune.name] = dataclasses.replace(finetune, deps={"init": cell.name})
  work = str(tmp_path)
  first = {"cell": cell.name, "kind": cell.kind, "key": cell.key, "seconds": 60.0,
           "finished": "2026-11-28T01:53:46+00:00", "seconds_training": 50.0,
           "history": {"step": [100, 200], "loss": [3.0, 2.5]}}
  assert execute.restore(sub, work, {cell.dirname: first}) == [cell.name]
  monkeypatch.setitem(cells.EXECUTORS, "pretrain", lambda c, ctx, o: {
      "seconds_training": 40.0, "history": {"step": [100, 200], "loss": [3.0, new_loss]}})
  monkeypatch.setitem(cells.EXECUTORS, "finetune", lambda c, ctx, o: {"steps": 1})
  assert execute.run_cells(sub, work) == [cell.name, finetune.name]
  out = execute.cell_dir(work, cell)
  record = execute.read_done(out)
  remade = record[execute.REMADE]
  assert remade["first"] == "2026-11-28T01:53:46+00:00" and remade["first_machine"] == ""
  # Each record names the machine it ran on (CPU and float extensions), the restored one
  # did not: the README counts both.
  assert record[execute.MACHINE] == execute.machine_name() and "(" in record[execute.MACHINE]
  if new_loss == 2.5:
    assert remade["differs"] == [] and remade["max_abs_diff"] is None
  else:   # the time taken differs too, and is not a difference of the result
    assert remade["differs"] == ["history.loss[1]"] and remade["differing_values"] == 1
    assert remade["max_abs_diff"] == pytest.approx(2e-7)
  readme = render.write_readme(grid.load("cpu-small"), sub, work, (), str(tmp_path / "r"), [])
  assert f"`{cell.name}` {note}" in readme
  assert f" The finished cells ran on: {execute.machine_name()} (2)." in readme
  assert "1 restored cell ran again because a cell still to do read their outputs: " + (
      "1 gave the numbers recorded before." if new_loss == 2.5 else
      "0 gave the numbers recorded before, 1 differs from them (by up to 2e-07)") in readme


def test_the_readme_counts_the_machines_the_cells_ran_on():
  done = {"a": {execute.MACHINE: "AMD EPYC (AVX2)"}, "b": {execute.MACHINE: "Xeon (AVX2, AMX)"},
          "c": {execute.MACHINE: "Xeon (AVX2, AMX)"}, "d": {"seconds": 1.0}, "e": None}
  assert render.machines_text(done) == (" The finished cells ran on: Xeon (AVX2, AMX) (2); "
                                        "AMD EPYC (AVX2) (1); 1 ran before records named "
                                        "their machine.")
  assert render.machines_text({"e": None}) == ""


def test_restored_cells_rerun_only_when_a_missing_cell_needs_their_outputs(tmp_path):
  """A new work directory from the results directory's records: every recorded cell comes back
  done (restored, no outputs); a cell whose record is missing runs, with the restored cells it
  reads from; a record whose key changed is not restored."""
  the_plan, _ = plan.plan(grid.load("tiny"), INPUTS)
  records = {c.dirname: {"cell": c.name, "kind": c.kind, "key": c.key, "seconds": 1.0}
             for c in the_plan}
  missing = "eval/squad/ict/base/r80/s0"
  del records[the_plan[missing].dirname]
  records[the_plan["bm25/squad"].dirname]["key"] = "an older key"
  work = str(tmp_path)
  restored = execute.restore(the_plan, work, records)
  assert missing not in restored and "bm25/squad" not in restored
  assert len(restored) == len(the_plan) - 2
  assert execute.read_done(execute.cell_dir(work, the_plan["pairs/wiki"]))[execute.RESTORED]
  assert execute.needed(the_plan, work) == {
      missing, "finetune/squad/ict/base/r80/s0", "pretrain/ict/base/s0", "pairs/wiki",
      "vocab/wiki", "reqa/squad", "bm25/squad"}
  # Restoring again changes nothing: a cell with a done.json is never overwritten.
  assert execute.restore(the_plan, work, records) == []
  # Exported again (the render after a restore), the records are the ones restored.
  exported = execute.export_records(the_plan, work)
  assert exported[the_plan["pairs/wiki"].dirname] == records[the_plan["pairs/wiki"].dirname]
  assert not any(execute.RESTORED in r for r in exported.values())


def test_a_restored_cell_that_another_job_is_making_again_is_waited_for(tmp_path):
  """`--jobs 2` on a restored work dir: job 1 re-makes pairs/wiki for its outputs (its stage
  discards the restored record first) just after job 2 read its state as done. Job 2 must
  count it needed (and so wait for its lock), not run the vocabulary on a half-made pair
  set (it did: "no passages Parquet", the tiny two-jobs test under load)."""
  the_plan, _ = plan.plan(grid.load("tiny"), INPUTS)
  records = {c.dirname: {"cell": c.name, "kind": c.kind, "key": c.key, "seconds": 1.0}
             for c in the_plan if c.name != "eval/squad/ict/base/r80/s0"}
  work = str(tmp_path)
  execute.restore(the_plan, work, records)
  current = execute.states(work, the_plan)
  assert current["pairs/wiki"] == "done"
  os.remove(os.path.join(execute.cell_dir(work, the_plan["pairs/wiki"]), execute.DONE_FILE))
  need = execute.needed(the_plan, work, current)
  assert {"pairs/wiki", "vocab/wiki"} <= need
  # A dry run's cells to restore have no record yet, and are not counted as vanished.
  shutil.rmtree(work)
  unwritten = execute.restorable(the_plan, work, records)
  assert "pairs/wiki" in unwritten
  dry = execute.needed(the_plan, work, {**execute.states(work, the_plan),
                                        **{n: "done" for n in unwritten}}, unwritten)
  assert "bm25/squad" not in dry and "pairs/wiki" in dry   # read for its outputs


def test_two_jobs_restoring_at_once_restore_every_record_between_them(tmp_path):
  """`--jobs 2` on a new work dir: both jobs restore the records at start. One restores while
  the other waits for it, so that a cell lock held for a moment by the other job's restore is
  not read as that cell running (job 1 then read it not done and ran it, and what it reads,
  again: the tiny two-jobs test under load ran hardneg, the hard-negative fine-tuning and the
  bundle twice over)."""
  import fcntl
  import threading
  the_plan, _ = plan.plan(grid.load("tiny"), INPUTS)
  records = {c.dirname: {"cell": c.name, "kind": c.kind, "key": c.key, "seconds": 1.0}
             for c in the_plan}
  work = str(tmp_path)
  restored: list[str] = []
  fd = os.open(os.path.join(work, execute.RESTORE_LOCK + execute.LOCK_SUFFIX),
               os.O_CREAT | os.O_RDWR)
  fcntl.flock(fd, fcntl.LOCK_EX)  # the other job, restoring
  job = threading.Thread(target=lambda: restored.extend(execute.restore(the_plan, work, records)))
  job.start()
  job.join(timeout=1)
  assert job.is_alive() and not restored  # waits, writes nothing meanwhile
  assert execute.states(work, the_plan) == {c.name: "todo" for c in the_plan}
  os.close(fd)  # the other job's restore ends (having restored nothing, here)
  job.join()
  assert sorted(restored) == sorted(c.name for c in the_plan)
  assert execute.needed(the_plan, work) == set()


def _restore_all_but(the_plan, work, missing):
  records = {c.dirname: {"cell": c.name, "kind": c.kind, "key": c.key, "seconds": 1.0}
             for c in the_plan if c.name not in missing}
  execute.restore(the_plan, work, records)
  return execute.needed(the_plan, work)


def test_a_length_or_weight_is_read_from_a_restored_record_without_rerunning_its_cell(tmp_path):
  """Another seed's fine-tuning reads the length seed 0 chose, and the bundle reads the fuse
  cell's weight, from their done records: a restored record serves, its cell does not rerun."""
  links, _ = plan.plan(grid.load("cpu-small-links"), INPUTS)
  seed1 = "finetune/squad/no-ssl/base/r10/s1"
  assert links[seed1].deps[plan.FINETUNE_LENGTH] == "finetune/squad/no-ssl/base/r10/s0"
  need = _restore_all_but(links, str(tmp_path / "links"), {seed1, "eval/squad/no-ssl/base/r10/s1"})
  assert need == {seed1, "eval/squad/no-ssl/base/r10/s1", "vocab/wiki", "pairs/wiki",
                  "reqa/squad"}
  tiny, _ = plan.plan(grid.load("tiny"), INPUTS)
  bundle = "bundle/squad/hybrid/base/r80/s0"
  need = _restore_all_but(tiny, str(tmp_path / "tiny"), {bundle})
  assert "fuse/squad/hybrid/base/r80/s0" not in need
  assert {bundle, "finetune/squad/ict/base/r80/s0", "pretrain/ict/base/s0"} <= need


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, capsys):
  experiment_cmd.main(["--grid", "tiny", "--out", str(tmp_path / "w"), "--dump",
                       INPUTS.dump, "--squad", "squad.json", "--dry_run"])
  out = capsys.readouterr().out
  # The tiny grid's zero-shot column (ratio 0) adds one eval cell of the pre-trained towers.
  assert out.startswith("14 cells (1 pairs, 1 vocab, 1 reqa, 1 datastats, 1 hardneg, 1 bm25, "
                        "1 pretrain, 2 finetune, 3 eval, 1 fuse, 1 bundle); rough estimate")
  assert "todo  bundle   bundle/squad/hybrid/base/r80/s0" in out
  assert "todo  fuse     fuse/squad/hybrid/base/r80/s0" in out
  assert not (tmp_path / "w").exists()


def test_a_dry_run_on_a_new_work_dir_counts_the_records_it_would_restore(tmp_path, capsys):
  """A lost work directory, the results folder's records kept: the dry run writes nothing,
  shows the recorded cells done, the one without a record todo, and the restored cells whose
  files it reads "redo" (they run again), not the whole grid."""
  the_plan, _ = plan.plan(grid.load("tiny"), INPUTS)
  missing = "eval/squad/ict/base/r80/s0"
  results = tmp_path / "results"
  results.mkdir()
  (results / execute.RECORDS_FILE).write_text(json.dumps(
      {c.dirname: {"cell": c.name, "kind": c.kind, "key": c.key, "seconds": 1.0}
       for c in the_plan if c.name != missing}))
  experiment_cmd.main(["--grid", "tiny", "--out", str(tmp_path / "w"), "--dump", INPUTS.dump,
                       "--squad", INPUTS.squad, "--results_dir", str(results), "--dry_run"])
  states = {line.split()[2]: line.split()[0] for line in capsys.readouterr().out.splitlines()
            if line.startswith("  ")}
  assert not (tmp_path / "w").exists()
  assert states[missing] == "todo"
  assert {n for n, s in states.items() if s == "redo"} == {
      "finetune/squad/ict/base/r80/s0", "pretrain/ict/base/s0", "pairs/wiki", "vocab/wiki",
      "reqa/squad"}
  assert states["bm25/squad"] == states["bundle/squad/hybrid/base/r80/s0"] == "done"


def test_a_run_narrowed_to_seeds_runs_them_and_what_they_read(tmp_path, capsys):
  the_plan, _ = plan.plan(grid.load("cpu-small"), INPUTS)   # seeds 0-2 at zero-shot and 5 %
  seed_1 = the_plan.of_seeds([1])
  names = [c.name for c in seed_1]
  assert names == [c.name for c in the_plan if c.name in set(names)]   # plan order
  assert all(seed_1[n].key == the_plan[n].key for n in names)         # the same cells
  assert {c.id.seed for c in seed_1} == {1, None}   # nothing of seed 0 or 2 is read
  assert "eval/squad/ict/base/r5/s1" in names and "bm25/squad" in names
  assert "pairs/wiki" in names and "pretrain/ict/base/s1" in names
  assert not any(c.id.seed in (0, 2) for c in seed_1)
  # Every cell of the whole plan is in exactly the narrowed plans that need it.
  assert {c.name for c in the_plan} == {c.name for s in (0, 1, 2) for c in the_plan.of_seeds([s])}
  # The dry run estimates the narrowed plan; the README's command line leaves --seeds out.
  argv = ["--grid", "cpu-small", "--out", str(tmp_path / "w"), "--dump", INPUTS.dump,
          "--squad", "squad.json", "--seeds", "1", "--dry_run"]
  experiment_cmd.main(argv)
  out = capsys.readouterr().out
  assert out.startswith(f"{len(seed_1)} cells (") and "eval/squad/ict/base/r5/s1" in out
  assert "/s0 " not in out and "/s2 " not in out
  assert experiment_cmd.parse(argv).command == tuple(
      a for a in argv if a not in ("--seeds", "1"))
  with pytest.raises(ValueError, match="--seeds 7: the grid 'cpu-small' has no cell of those "
                                       "seeds \\(its seeds: 0, 1, 2\\)"):
    experiment_cmd.main(argv[:-3] + ["--seeds", "7", "--dry_run"])
  assert not (tmp_path / "w").exists()


def test_dry_run_estimate_is_scaled_by_the_cells_this_work_dir_timed():
  """Finished cells show their measured time; the cells left are estimated at the measured /
  estimated ratio of their kind (of all timed cells while a kind has under three)."""
  the_plan, _ = plan.plan(grid.load("cpu-small"), INPUTS)
  evals, pretrains = list(the_plan.of_kind("eval")), list(the_plan.of_kind("pretrain"))
  guess = {c.name: estimate.estimate_seconds(c, the_plan) for c in evals + pretrains}
  # Three evals ran in half their estimate, one pre-training at its estimate.
  measured = {c.name: guess[c.name] / 2 for c in evals[:3]}
  measured[pretrains[0].name] = guess[pretrains[0].name]
  scale = estimate.calibration(the_plan, measured)
  assert scale["eval"] == pytest.approx(0.5) and "pretrain" not in scale
  total = sum(measured.values()) / sum(guess[n] for n in measured)
  assert scale["*"] == pytest.approx(total)
  text, left = estimate.describe(the_plan, list(measured), measured)
  lines = {m[1]: m[2] for m in re.finditer(r"^  (?:todo|done)  \S+ +(\S+) +(.+)$", text, re.M)}
  assert lines[evals[0].name] == estimate.format_seconds(guess[evals[0].name] / 2)  # measured
  assert lines[evals[3].name] == "~" + estimate.format_seconds(guess[evals[3].name] * 0.5)
  assert lines[pretrains[1].name] == "~" + estimate.format_seconds(guess[pretrains[1].name] * total)
  assert "scaled by the 4 cells timed in this work dir" in text.splitlines()[0]
  unscaled = sum(estimate.estimate_seconds(c, the_plan) for c in the_plan
                 if c.name not in measured)
  assert 0 < left < unscaled


def test_estimate_counts_validation_scoring_and_carried_lengths():
  """Under `finetune_select` a choosing cell also scores validation at each checkpoint, and a
  carrying cell trains up to its source's cap (same ratio: as many steps; 1 % from 5 %: a
  fifth), not the 0 steps its config holds until it runs."""
  the_plan, _ = plan.plan(grid.load("cpu-small-links"), INPUTS)
  chooser = the_plan["finetune/squad/ict/base/r5/s0"]
  seed1, one = the_plan["finetune/squad/ict/base/r5/s1"], the_plan["finetune/squad/ict/base/r1/s0"]
  assert seed1.deps[plan.FINETUNE_LENGTH] == one.deps[plan.FINETUNE_LENGTH] == chooser.name
  cfg = chooser.params.config
  training = (estimate.estimate_seconds(chooser, the_plan) -
              chooser.params.select["checkpoints"] * estimate._CANDIDATES *
              estimate.example_seconds(cfg["model"]) / 3)
  assert estimate.estimate_seconds(seed1, the_plan) == pytest.approx(training)
  overhead = estimate._TRAIN_OVERHEAD
  assert estimate.estimate_seconds(one, the_plan) - overhead == pytest.approx(
      (training - overhead) / 5)
# ---------------------------------------------------------------------------------------------
# The real grid, tiny.
# ---------------------------------------------------------------------------------------------

TOPICS = {
    "River Alpha": ["The River Alpha flows north through the green valley of Brenn.",
                    "Fishermen on the River Alpha catch silver trout every spring.",
                    "A stone bridge built in 1820 crosses the River Alpha near Brenn."],
    "Mount Beta": ["Mount Beta is the highest peak of the Kestrel range at 3100 metres.",
                   "Climbers first reached the summit of Mount Beta in the year 1902.",
                   "Snow covers the northern face of Mount Beta for most of the year."],
    "Gamma Library": ["The Gamma Library holds more than two million printed books today.",
                      "Its reading room was designed by the architect Ilse Varna.",
                      "The Gamma Library opened to the public on a rainy day in 1911."],
    "Delta Festival": ["The Delta Festival celebrates the autumn harvest with music.",
                       "Bakers at the Delta Festival sell bread shaped like wheat sheaves.",
                       "The first Delta Festival took place in the town square in 1875."],
}


def tiny_dump(path) -> str:
  pages = []
  names = list(TOPICS)
  for i, (title, sentences) in enumerate(TOPICS.items()):
    other = names[(i + 1) % len(names)]
    paragraphs = [" ".join(sentences), f"Visitors often compare it with [[{other}]] nearby. "
                  + " ".join(reversed(sentences)),
                  "== History ==", " ".join(sentences[1:] + sentences[:1])]
    pages.append(DumpPage(10 + i, title, f"'''{title}''' is a place. " + "\n\n".join(paragraphs)))
  return write_dump(path, pages)


def tiny_squad(path) -> str:
  """SQuAD v1.1 JSON: every sentence of every topic asked about, twice."""
  articles = []
  n = 0
  for title, sentences in TOPICS.items():
    paragraphs = []
    for shift in range(3):
      context = " ".join(sentences[shift:] + sentences[:shift])
      qas = []
      for s in sentences:
        answer = s.split()[-2]
        start = context.index(s) + s.rindex(answer)
        for form in ("What about {}?", "Tell me of {} please?"):
          n += 1
          qas.append({"id": f"q{n}", "question": form.format(" ".join(s.split()[:6])),
                      "answers": [{"text": answer, "answer_start": start}]})
      paragraphs.append({"context": context, "qas": qas})
    # Titles unlike the dump's: the pair pipeline keeps one page per title.
    articles.append({"title": f"{title}_(questions)", "paragraphs": paragraphs})
  path.write_text(json.dumps({"version": "1.1", "data": articles}), encoding="utf-8")
  return str(path)


def _cell_log(work) -> list[dict]:
  with open(os.path.join(work, execute.CELL_LOG), encoding="utf-8") as f:
    return [json.loads(line) for line in f]


TINY_CELLS = 14


@pytest.fixture(scope="module")
def tiny_grid(tmp_path_factory):
  """The tiny grid run once, end to end: (config, its result, the plan, tmp dir). Tests that
  change the work or results directory work on copies of them."""
  root = tmp_path_factory.mktemp("tiny-grid")
  config = experiment_cmd.parse([
      "--grid", "tiny", "--out", str(root / "work"), "--results_dir", str(root / "results"),
      "--dump", tiny_dump(root / "tiny-pages-articles.xml.bz2"),
      "--squad", tiny_squad(root / "squad.json"), "--progress", "none"])
  first = experiment.run(config)
  the_plan = plan.plan(experiment.load_spec(config), plan.Inputs(config.dump, config.squad))[0]
  return config, first, the_plan, root


def _aggregates(results) -> list[dict]:
  return json.loads((pathlib.Path(results) / "results.json").read_text())["aggregates"]


def _bm25_r80(results) -> dict:
  return next(a for a in _aggregates(results) if a["system"] == "bm25" and a["ratio"] == 80)


@pytest.mark.slow
def test_tiny_grid_end_to_end_writes_every_table_the_fusion_and_a_bundle(tiny_grid):
  config, first, the_plan, _ = tiny_grid
  work, results = config.out, pathlib.Path(config.results_dir)
  assert set(first.ran) == {"pairs/wiki", "vocab/wiki", "reqa/squad", "datastats/squad",
                            "bm25/squad",
                            "pretrain/ict/base/s0", "finetune/squad/ict/base/r80/s0",
                            "eval/squad/ict/base/r80/s0", "fuse/squad/hybrid/base/r80/s0",
                            "hardneg/squad/k1", "finetune/squad/ict-hn/base/r80/s0",
                            "eval/squad/ict-hn/base/r80/s0", "bundle/squad/hybrid/base/r80/s0",
                            "eval/squad/ict/base/r0/s0"}
  assert len(first.ran) == TINY_CELLS
  assert set(first.states.values()) == {"done"}

  md = (results / "table3-squad.md").read_text()
  assert "| BM25 | - |" in md and "| Transformer | ICT |" in md and "| BM25 + Transformer |" in md
  assert "80%/20% R@1" in md and "zero-shot R@1" in md
  assert (results / "table3-squad-r80.png").read_bytes()[:4] == b"\x89PNG"
  aggregates = _aggregates(results)
  assert {a["system"] for a in aggregates} == {"bm25", "ict", "ict-hn", "hybrid"}
  for a in aggregates:
    assert all(0.0 <= v <= 1.0 for v in a["mean"].values())
    assert a["mean"]["R@1"] <= a["mean"]["R@10"] <= a["mean"]["R@100"]
    assert a["questions"] > 0 and a["candidates"] > 0
  bm25 = _bm25_r80(results)
  assert bm25["mean"]["R@100"] > 0.5        # BM25 finds these lexical questions
  # Zero-shot: the pre-trained towers themselves, exported by pre-training, on every question;
  # the row that only fine-tunes differently has no entry of its own there.
  zero = {a["system"]: a for a in aggregates if a["ratio"] == 0}
  assert set(zero) == {"bm25", "ict"}
  assert zero["ict"]["questions"] == zero["bm25"]["questions"] > bm25["questions"]
  fuse = execute.read_done(execute.cell_dir(work, the_plan["fuse/squad/hybrid/base/r80/s0"]))
  assert fuse["tuning"]["split"] == "validation-80" and 0.0 <= fuse["weight"] <= 1.0
  # The partner is one of the two dense rows, the one whose tuned fusion scored best on
  # validation: its (R@100, MRR) is the one recorded.
  assert fuse["partner"] in ("ict", "ict-hn")
  tuning = fuse["tuning"]
  assert dict(map(tuple, tuning["by_weight"]))[fuse["weight"]] == max(
      m for _, m in tuning["by_weight"])
  # The grid ends with a retriever bundle of its hybrid: the chosen dense row, the tuned
  # weight; its hybrid answers the test questions as the fuse cell's run file does.
  made = execute.read_done(execute.cell_dir(work, the_plan["bundle/squad/hybrid/base/r80/s0"]))
  assert (made["partner"], made["weight"]) == (fuse["partner"], fuse["weight"])
  from twotower.deploy.serving import Retriever
  from twotower.eval import runs as runs_lib
  fused = runs_lib.read_run(fuse["run_file"])
  retriever = Retriever.load(made["bundle"])
  try:
    assert retriever.manifest.hybrid.tuned_on == "validation-80"
    reqa_dir = execute.cell_dir(work, the_plan["reqa/squad"])
    questions = [(q.question_id, q.question)
                 for q in codecs.read_questions(reqa_dir, "test-80")][:5]
    for (qid, question), hits in zip(questions, retriever.search(
        [q for _, q in questions], k=100, mode="hybrid")):
      assert [h.id for h in hits] == list(fused[qid].candidate_ids)
  finally:
    retriever.close()
  readme = (results / "README.md").read_text()
  assert "twotower experiment --grid tiny" in readme
  # Zero-shot fine-tunes nothing; the 80 % ratio the grid's steps.
  assert re.search(r"fine-tuning steps per ratio: zero-shot: none, 80 %: \d+\.", readme)
  assert f"{TINY_CELLS} of {TINY_CELLS} cells done, 0 failed, 0 blocked, 0 to do" in readme
  # What a row costs to pre-train, from its cell's record: ICT's one seed, its steps.
  cost = readme.split("## Pre-training cost per row")[1].split("\n## ")[0]
  ict_steps = the_plan["pretrain/ict/base/s0"].params.config["trainer"]["steps"]
  assert re.search(rf"\| ict \| base \| {ict_steps} \| 1 \| \d", cost), cost
  assert "| ICT |" in (results / "tables1-2.md").read_text()
  # The grid's claim is read from the results: one seed, so an observation either way.
  reading = (results / "reading.md").read_text()
  assert "### hybrid-over-bm25" in reading and "**holds, resolved**" not in reading.split(
      "## Claims")[1] and "**observation, " in reading
  for word in ("tensorflow", "apache-beam", "faiss-cpu", "pyserini", "spacy", "cores", "RAM"):
    assert word in readme
  _assert_ranks_give_the_tables(the_plan, work, results)


def _assert_ranks_give_the_tables(the_plan, work, results) -> None:
  """Every table entry's numbers come back from its cell's committed per-question ranks,
  restricted to the entry's split (BM25's cell holds every question it scores)."""
  ranks_of = ranks.results_reader(str(results))
  reqa_dir = execute.cell_dir(work, the_plan["reqa/squad"])
  per_seed = json.loads((pathlib.Path(results) / "results.json").read_text())["per_seed"]
  assert {e["cell"] for e in per_seed} == {c.name for c in the_plan
                                           if c.kind in plan.RESULT_KINDS}
  for entry in per_seed:
    split = [q.question_id for q in codecs.read_questions(reqa_dir, entry["split"])]
    of_cell = ranks_of(entry["cell"])
    assert set(split) <= set(of_cell), entry["cell"]
    got = metrics.summarize([of_cell[q] or 0 for q in split])
    assert got == pytest.approx(entry["record"]["metrics"], abs=1e-12), entry["cell"]


@pytest.mark.slow
def test_tiny_grid_rerun_trains_nothing(tiny_grid):
  config, _, _, _ = tiny_grid
  before = _aggregates(config.results_dir)
  second = experiment.run(config)
  assert second.ran == ()
  assert set(second.states.values()) == {"done"}
  assert {e["status"] for e in _cell_log(config.out)[-TINY_CELLS:]} == {"skipped"}
  assert _aggregates(config.results_dir) == before


@pytest.mark.slow
def test_tiny_grid_render_only_rewrites_the_tables_and_a_project_readme_block(tiny_grid,
                                                                               tmp_path):
  """Rendering alone, after the results dir's README was lost: the same tables, nothing run;
  the summary lands in a project README's block."""
  config, _, _, _ = tiny_grid
  results = tmp_path / "results"
  shutil.copytree(config.results_dir, results)
  (results / "README.md").unlink()
  project_readme = tmp_path / "PROJECT.md"
  project_readme.write_text("# p\n<!-- results:tiny -->\nold\n<!-- /results:tiny -->\nend\n"
                            "<!-- results:tiny-reading -->\n<!-- /results:tiny-reading -->\n")
  rendered = experiment.run(dataclasses.replace(config, results_dir=str(results),
                                                render_only=True, readme=str(project_readme)))
  assert rendered.ran == () and set(rendered.states.values()) == {"done"}
  assert f"{TINY_CELLS} of {TINY_CELLS} cells done" in (results / "README.md").read_text()
  assert _aggregates(results) == _aggregates(config.results_dir)
  block = project_readme.read_text()
  assert "\nold\n" not in block and "<!-- /results:tiny -->\nend\n" in block
  # The reading's claim lines link to reading.md from where the README is.
  assert "| [hybrid-over-bm25](results/reading.md#hybrid-over-bm25): " in block
  bm25_line = next(l for l in block.splitlines() if l.startswith("| BM25"))
  assert f"{100 * _bm25_r80(results)['mean']['R@100']:.2f} |" in bm25_line


@pytest.mark.slow
def test_tiny_grid_lost_work_dir_restores_cells_and_reruns_only_a_missing_result(tiny_grid,
                                                                                  tmp_path):
  """The work directory lost, the results directory kept: the finished cells come back from
  its cells.json; a missing result runs again with what it needs, and (training being
  deterministic for a seed) gives the same numbers."""
  config, first, the_plan, _ = tiny_grid
  results = tmp_path / "results"
  shutil.copytree(config.results_dir, results)
  records = json.loads((results / execute.RECORDS_FILE).read_text())
  assert {r["cell"] for r in records.values()} == set(first.states)
  del records[the_plan["eval/squad/ict/base/r80/s0"].dirname]
  (results / execute.RECORDS_FILE).write_text(json.dumps(records))
  again = experiment.run(dataclasses.replace(config, out=str(tmp_path / "new-work"),
                                             results_dir=str(results)))
  assert set(again.ran) == {"pairs/wiki", "vocab/wiki", "reqa/squad", "pretrain/ict/base/s0",
                            "finetune/squad/ict/base/r80/s0", "eval/squad/ict/base/r80/s0"}
  assert set(again.states.values()) == {"done"}
  assert _aggregates(results) == _aggregates(config.results_dir)
  # The restored cells' ranks are the committed ones, kept; the one that ran wrote its own.
  assert (results / contracts.RANKS_DIR).exists()
  _assert_ranks_give_the_tables(the_plan, str(tmp_path / "new-work"), results)


def test_render_only_refuses_records_of_other_inputs_and_keeps_the_tables(tmp_path):
  """The same grid over inputs named differently (another path to the same file gives other
  cell keys): none of the results dir's records is a cell of the plan, and rendering would
  replace its tables with empty ones. It is refused, naming the records file; nothing is
  written."""
  results = tmp_path / "results"
  results.mkdir()
  records = {"pairs/wiki-0123456789": {"cell": "pairs/wiki", "state": "done"}}
  (results / execute.RECORDS_FILE).write_text(json.dumps(records))
  (results / "README.md").write_text("the committed tables\n")
  config = experiment_cmd.parse([
      "--grid", "tiny", "--out", str(tmp_path / "work"), "--results_dir", str(results),
      "--dump", tiny_dump(tmp_path / "tiny-pages-articles.xml.bz2"),
      "--squad", tiny_squad(tmp_path / "squad.json"), "--progress", "none", "--render_only"])
  with pytest.raises(ValueError, match=r"cells\.json: none of its 1 records is a cell of this"):
    experiment.run(config)
  assert (results / "README.md").read_text() == "the committed tables\n"
  assert json.loads((results / execute.RECORDS_FILE).read_text()) == records
  assert sorted(p.name for p in results.iterdir()) == ["README.md", execute.RECORDS_FILE]


@pytest.mark.slow
def test_tiny_grid_in_two_jobs_gives_the_same_numbers(tiny_grid, tmp_path, capsys):
  """`--jobs 2`: two processes with one TensorFlow thread each share the work dir; each cell
  runs once, and every number is the one-process run's. The results dir is the tiny grid's
  less both evaluations of the ICT row, so the jobs make those, and the chain they read, in a
  new work dir (every cell again would cost as much as the tiny grid and test nothing more)."""
  config, first, the_plan, root = tiny_grid
  work, results = tmp_path / "work", tmp_path / "results"
  shutil.copytree(config.results_dir, results)
  records = json.loads((results / execute.RECORDS_FILE).read_text())
  missing = ("eval/squad/ict/base/r0/s0", "eval/squad/ict/base/r80/s0")
  for name in missing:
    del records[the_plan[name].dirname]
  (results / execute.RECORDS_FILE).write_text(json.dumps(records))
  experiment_cmd.main([
      "--grid", "tiny", "--out", str(work), "--results_dir", str(results),
      "--dump", str(root / "tiny-pages-articles.xml.bz2"), "--squad", str(root / "squad.json"),
      "--progress", "none", "--jobs", "2"])
  ran = [e["cell"] for e in _cell_log(str(work)) if e["status"] == "ran"]
  # Each cell once, across both jobs: the two evaluations and what they read.
  assert sorted(ran) == sorted({*missing, "pairs/wiki", "vocab/wiki", "reqa/squad",
                                "pretrain/ict/base/s0", "finetune/squad/ict/base/r80/s0"})
  assert (f"experiment: {len(ran)} cells ran now, {TINY_CELLS} of {TINY_CELLS} done, 0 failed"
          in capsys.readouterr().out)
  assert (work / "job-1.log").exists() and (work / "job-2.log").exists()
  assert _aggregates(results) == _aggregates(config.results_dir)
  # The README's command line is the grid's: --jobs changes no cell.
  assert "--jobs" not in (results / "README.md").read_text()


def test_a_corpus_joins_the_dump_in_the_pairs_cell_and_only_then_changes_its_key(tmp_path):
  """`--corpus` (extracted text, issue 21) is pre-trained on beside the dump: the pairs cell
  reads both (the dump first, so the corpus's page ids are those of input 1); without it the
  cell's parameters, and so every cell's key, are what they were."""
  from textdocs_fixtures import jsonl_record, linked_docs, write_jsonl
  from twotower.experiment import cells
  from twotower.pipelines.wiki import inputs as inputs_lib
  spec = grid.load("tiny")
  plain = plan.plan(spec, INPUTS)[0]["pairs/wiki"]
  assert "corpus" not in key_params(plain.params)
  corpus = write_jsonl(tmp_path / "docs.jsonl", [jsonl_record(d) for d in linked_docs(6)])
  dump = tiny_dump(tmp_path / "tiny-pages-articles.xml.bz2")
  inputs = plan.Inputs(dump, squad=tiny_squad(tmp_path / "squad.json"), corpus=corpus)
  cell = plan.plan(spec, inputs)[0]["pairs/wiki"]
  assert cell.params.corpus == corpus and cell.key != plain.key
  out = tmp_path / "pairs"
  done = cells._pairs(cell, cells.Context(work=str(tmp_path), dirs={}, done=dict), str(out))
  stats = done["stats"]
  assert stats["input1_pages_kept"] == 6 and stats["input1_pairs_ict"] > 0
  assert stats["mediawiki_pages_kept"] == len(TOPICS) * 2  # the dump and the SQuAD articles
  assert inputs_lib.input_of(inputs_lib.TEXT_ID_STRIDE * 2 + 1) == 1


def test_the_passage_cleanup_joins_a_grid_only_when_its_file_turns_it_on(tmp_path):
  """The committed grids were run on the text before the passage cleanup (issue 36): left
  unset, a pairs cell keeps its key and runs with the cleanup off, so a re-made cell gives
  the committed floats; `data.text_cleanup: true` gives new keys and the cleaned text."""
  from twotower.experiment import cells
  spec = grid.load("tiny")
  plain = plan.plan(spec, INPUTS)[0]["pairs/wiki"]
  assert "text_cleanup" not in key_params(plain.params)
  cleaned_spec = dataclasses.replace(spec, data=dataclasses.replace(spec.data,
                                                                    text_cleanup=True))
  cleaned = plan.plan(cleaned_spec, INPUTS)[0]["pairs/wiki"]
  assert cleaned.params.text_cleanup is True and cleaned.key != plain.key
  dump = tiny_dump(tmp_path / "tiny-pages-articles.xml.bz2")
  inputs = plan.Inputs(dump, squad=tiny_squad(tmp_path / "squad.json"))
  for name, s in (("off", spec), ("on", cleaned_spec)):
    cell = plan.plan(s, inputs)[0]["pairs/wiki"]
    out = tmp_path / name
    cells._pairs(cell, cells.Context(work=str(tmp_path), dirs={}, done=dict), str(out))
    manifest = json.loads((out / contracts.MANIFEST_FILE).read_text())
    assert manifest["settings"]["text_cleanup"] is (name == "on")


@pytest.mark.slow
def test_recheck_remakes_a_sample_of_cells_and_finds_the_same_floats(tiny_grid, tmp_path):
  """`--recheck 2`: one zero-shot evaluation (re-embedded) and one fine-tuned one (trained
  again from the same pre-trained towers) by the ratio round-robin; the records compared are
  the re-made cells' own, and the work directory is left as it was."""
  config, _, the_plan, _ = tiny_grid
  results = tmp_path / "results"
  before = {c.name: execute.read_done(execute.cell_dir(config.out, c)) for c in the_plan}
  result = experiment.run(dataclasses.replace(config, results_dir=str(results), recheck=2,
                                              recheck_dir=str(tmp_path / "scratch")))
  assert len(result.ran) == 2
  assert {the_plan[name].params.ratio for name in result.ran} == {0, 80}
  text = (results / "recheck.md").read_text()
  assert "2 of 2 gave every metric of every split as the same float" in text
  # Each row shows the split its table scores: every question zero-shot, test-80 at 80 %.
  assert "| all | 1 cell(s) |" in text and "| test-80 | 2 cell(s) |" in text
  for name in result.ran:
    cell = the_plan[name]
    chain = recheck.remade_cells(the_plan, cell)
    scratch = tmp_path / "scratch" / cell.dirname.replace("/", "_")
    for remade in chain:  # made again there, not linked
      made = pathlib.Path(execute.cell_dir(str(scratch), remade))
      assert not made.is_symlink() and (made / execute.DONE_FILE).exists()
    record = execute.read_done(execute.cell_dir(str(scratch), cell))
    assert record["records"] == before[name]["records"]
    assert record["run_file"].startswith(str(scratch))
  # (A fine-tuned cell's trainer was re-made too: two cells for r80, one for zero-shot.)
  assert {c.name: execute.read_done(execute.cell_dir(config.out, c)) for c in the_plan} == before
