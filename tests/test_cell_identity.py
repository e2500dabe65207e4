"""Cells are typed: a CellId whose str() is the cell's name and whose parse() reads it back,
typed parameters per kind whose serialization is the key's, and the committed grid's cell
keys unchanged by either (no TensorFlow, no Beam)."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest

from twotower.experiment import demo, grid, params, plan
from twotower.experiment.cell_id import CellId

ROOT = pathlib.Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "docs" / "results" / "cpu-small"
# Both QA sets: every kind of cell the grids make (open-domain directories, NQ's own cells).
BOTH = plan.Inputs("d.xml.bz2", squad="s.json", nq="nq.jsonl", corpus="c.txt.bz2")


@pytest.fixture(scope="module")
def every_plan():
  """(where, plan) of every shipped grid and of the demo (with and without SQuAD)."""
  plans = [(name, plan.plan(grid.load(name), BOTH)[0]) for name in grid.grid_names()]
  return plans + [("demo", demo.plan(demo.DemoConfig(dump="d.xml.bz2", squad=squad,
                                                     preset="tiny")))
                  for squad in ("", "s.json")]


def test_every_cell_name_of_every_grid_and_the_demo_parses_back_to_its_id(every_plan):
  kinds = set()
  for where, the_plan in every_plan:
    for cell in the_plan:
      assert str(cell.id) == cell.name, where
      assert CellId.parse(cell.name) == cell.id, (where, cell.name)
      kinds.add(cell.kind)
  assert kinds == set(plan.KINDS) == set(params.BY_KIND)  # every kind was read back


def test_a_cell_id_holds_what_its_name_says():
  cell = CellId.parse("finetune/squad/ict+bfs+wlp-hn/l4-d128/r80/s2")
  assert cell == CellId("finetune", "squad", "ict+bfs+wlp-hn", "l4-d128", 80, 2)
  assert CellId.parse("hardneg/squad-open/k1") == CellId("hardneg", "squad-open", k=1)
  assert CellId.parse("reqa/squad-open").is_open and not CellId.parse("reqa/squad").is_open
  assert CellId.parse("pretrain/ict/base/s0") == CellId("pretrain", system="ict",
                                                          variant="base", seed=0)
  assert CellId.parse("eval/heldout/no-ssl") == CellId("eval", "heldout", "no-ssl")  # demo's
  assert CellId.parse("eval/squad/ict/base/r0/s0").ratio == 0


@pytest.mark.parametrize("name, message", [
    ("table/squad", "is not a cell name"),
    ("pretrain/ict/base/s0/r1", "names at most 3 fields"),
    ("finetune/squad/ict/base/5/s0", "ratio is r<number>, got '5'"),
    ("hardneg/squad/kone", "k is k<number>"),
    ("eval/squad/ict/base/r05/s0", "reads back as 'eval/squad/ict/base/r5/s0'"),
    ("bm25/", "empty or holds '/'"),
], ids=["kind", "too-many", "ratio", "k", "not-canonical", "empty"])
def test_a_string_that_is_no_cell_name_is_a_named_error(name, message):
  with pytest.raises(ValueError, match=message) as error:
    CellId.parse(name)
  assert repr(name) in str(error.value) or name.endswith("/")


def test_a_cell_id_refuses_what_its_name_could_not_say():
  with pytest.raises(ValueError, match="only after the ones before it"):
    CellId("finetune", "squad", "ict", ratio=5)  # no variant, then a ratio
  with pytest.raises(ValueError, match="has no k in its name"):
    CellId("bm25", "squad", k=3)
  with pytest.raises(ValueError, match="holds '/'"):
    CellId("pretrain", system="a/b")


def test_typed_parameters_serialize_to_the_keys_dict_and_back(every_plan):
  """`key_params` is what the key hashes and done.json keeps; `from_key_params` reads it back (the
  datastats cell reads a pairs cell's parameters from its done.json)."""
  for where, the_plan in every_plan:
    for cell in the_plan:
      saved = json.loads(json.dumps(params.key_params(cell.params)))
      assert params.from_key_params(cell.kind, saved) == cell.params, (where, cell.name)


def test_fields_added_later_are_left_out_of_the_key_at_the_value_earlier_runs_had():
  base = params.PairsParams(dump="d", squad_text="", pairs={}, passages={}, heldout_percent=1)
  assert params.key_params(base) == {"dump": "d", "squad_text": "", "pairs": {},
                                     "passages": {}, "heldout_percent": 1}
  # The demo writes corpus "" (it always had it); a grid without a corpus writes nothing.
  assert params.key_params(dataclasses.replace(base, corpus="", text_cleanup=True)) == {
      **params.key_params(base), "corpus": "", "text_cleanup": True}
  evaluated = params.EvalParams(system="ict", splits=("all",), doc_text="passage")
  assert params.key_params(evaluated) == {"system": "ict", "splits": ["all"],
                                          "doc_text": "passage"}
  assert params.key_params(dataclasses.replace(evaluated, golds=("pair",)))["golds"] == ["pair"]


def test_a_cell_is_planned_with_its_own_kinds_parameters():
  with pytest.raises(ValueError, match="VocabParams is a vocab cell's"):
    plan.Plan().add(CellId("pairs", "wiki"), params.VocabParams(vocab_size=10))


def test_the_committed_grids_cell_keys_are_the_ones_its_records_hold():
  """docs/results/cpu-small/cells.json keeps every finished cell's key: planned again with
  the command its README gives, the grid gives each of them the same directory and key, so
  restoring those records reuses every one."""
  records = json.loads((COMMITTED / "cells.json").read_text())
  inputs = plan.Inputs("../shared/data/wiki/enwiki-slice-pages-articles.xml.bz2",
                       squad="../shared/data/squad/train-subset-v1.1.json",
                       corpus="../shared/data/wiki/enwiki-2018-wikiextractor.txt.bz2")
  assert f"--dump {inputs.dump} --corpus {inputs.corpus} --squad {inputs.squad}" in (
      COMMITTED / "README.md").read_text()
  the_plan, entries = plan.plan(grid.load("cpu-small"), inputs)
  planned = {c.dirname: c for c in the_plan}
  assert len(records) == len(the_plan) == 397
  for dirname, record in records.items():
    assert planned[dirname].key == record["key"], dirname
    assert planned[dirname].name == record["cell"]
    assert {r: d for r, d in planned[dirname].deps.items()} == record["deps"], dirname
  results = json.loads((COMMITTED / "results.json").read_text())
  assert {e["cell"] for e in results["per_seed"]} <= {e.cell for e in entries}
