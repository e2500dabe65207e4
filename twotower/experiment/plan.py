"""A GridSpec -> the cells that compute it, in dependency order, and the table entries that
read their results. Pure planning: no TensorFlow, no Beam.

A *cell* is one resumable unit of work with a done-marker:

    pairs     the pair pipeline on the dump (+ a text corpus, + the SQuAD articles' text,
              optionally)
    vocab     the WordPiece vocabulary of the training passages
    reqa      a ReQA directory (closed, or open domain: + the pre-training passages)
    heldout   a benchmark of held-out pages in the ReQA layout (the demo's)
    datastats the paper's Tables 1 and 2 for the pairs and a ReQA directory (word pieces)
    hardneg   BM25 hard negatives of a ReQA directory's fine-tuning pairs (every ratio)
    bm25      BM25 over one ReQA directory: one run, every split scored (whole texts, or
              what the towers read of them: a `truncate: tower` row)
    pretrain  one row's pre-training for one model size and seed (shared by every ratio, and
              by rows that differ in fine-tuning only)
    finetune  one row x size x ratio x seed
    eval      embed + flat search + Recall@k of one fine-tuned model on one ReQA directory
    fuse      a hybrid of two rows' runs, its weight (and, given several dense rows, which one)
              tuned on the ratio's validation split (too small a split: `untuned`, e.g. carried
              from the next larger ratio's fuse cell)
    bundle    a retriever bundle of the hybrid at the grid's largest ratio (seed 0): the dense
              row its fuse cell chose, BM25, the tuned weight (`twotower query` / `serve` it)
    beir      `twotower beir` on a BEIR folder the grid names (`beir:`): BM25 flat once per
              folder, and each pre-training's towers zero-shot (experiment.beir_cells)

A cell is named by its CellId (experiment.cell_id) and holds its kind's typed parameters
(experiment.params): everything it depends on; a training cell holds its resolved model
config (`TrainingConfig.to_dict()`), so changing a preset, a step count or a seed plans new
cells. A cell's directory ends with a hash of its parameters and its dependencies' hashes: a
finished cell is reused only when nothing it depends on changed.

`plan()` reads top to bottom: the grid's text (`_pairs`) and vocabulary, then per QA set its
ReQA directories and data statistics (`_plan_dataset`), per table row the cell whose run is
its entry (`_result`: BM25, a zero-shot or fine-tuned evaluation, or a fusion), each planning
what it needs (`_pretrain`, `_finetune`, `_hardneg`), and last the bundles (`_bundles`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Iterable, Mapping, Optional, Union

from twotower.core import contracts
from twotower.experiment import grid as grid_lib
from twotower.experiment import row_configs
from twotower.experiment.grid import GridSpec, System, Table, Variant
from twotower.experiment.cell_id import LAYOUTS, OPEN_SUFFIX, CellId
from twotower.experiment.params import (BeirParams, Bm25Params, BundleParams, CellParams,
                                        DatastatsParams, EvalParams, FinetuneParams, FuseParams,
                                        HardnegParams, PairsParams, PretrainParams, ReqaParams,
                                        VocabParams, key_params)
from twotower.pipelines.wiki.pair_tasks import PairConfig

#: The cell kinds (each named as identity.LAYOUTS says, with params.BY_KIND's parameters).
KINDS = tuple(LAYOUTS)
#: Cells whose results are table entries.
RESULT_KINDS = ("bm25", "eval", "fuse")
#: Dependency roles of a fuse cell: the first run (BM25), and each candidate partner run;
#: under `untuned: carry`, the next larger ratio's fuse cell (same seed), whose weight it
#: carries where its own validation split is too small to tune.
FUSE_FIRST, FUSE_PARTNER, FUSE_CARRY = "first", "partner:", "carry"
#: Dependency roles of a bundle cell: its fuse cell, and each partner row's trained model.
BUNDLE_FUSE, BUNDLE_MODEL = "fuse", "model:"
#: Dependency role of a fine-tuning cell whose length is carried: the cell that chose it.
FINETUNE_LENGTH = "length"
#: Roles whose cell reads only the dependency's done record (a length, a weight), never its
#: files: a record restored without its outputs serves them as it is.
RECORD_ROLES = (FINETUNE_LENGTH, FUSE_CARRY, BUNDLE_FUSE)
#: The grid's pre-training text (a pairs cell and the vocabulary's dataset).
WIKI = "wiki"


def _slug(text: str) -> str:
  return "".join(c if c.isalnum() or c in "-_.+" else "-" for c in text).strip("-")


@dataclasses.dataclass(frozen=True)
class Cell:
  """One resumable unit of work.

  Attributes:
    id: which cell; `name` is its str(), e.g. "finetune/squad/ict/base/r5/s0".
    params: the kind's typed parameters: what the cell's executor needs besides its
      dependencies' directories.
    deps: the cells whose outputs this one reads: {role: cell name} ({"reqa": "reqa/squad"}).
    key: hash of the parameters (params.key_params) and of the dependencies' keys.
  """
  id: CellId
  params: CellParams
  deps: Mapping[str, str]
  key: str
  name: str = dataclasses.field(init=False)

  def __post_init__(self):
    object.__setattr__(self, "name", str(self.id))

  @property
  def kind(self) -> str:
    return self.id.kind

  @property
  def dirname(self) -> str:
    """Directory under the work dir: `<kind>/<slug of the rest of the name>-<key[:10]>`."""
    rest = "_".join(self.id.parts) or self.kind
    return f"{self.kind}/{_slug(rest)}-{self.key[:10]}"


CellRef = Union[CellId, str]


class Plan:
  """Cells in dependency order, de-duplicated by name (one pre-training feeds several rows
  and tables; one BM25 run feeds every ratio)."""

  def __init__(self):
    self.cells: dict[str, Cell] = {}

  def add(self, cell_id: CellId, params: CellParams,
          deps: Optional[Mapping[str, CellRef]] = None) -> CellId:
    """Plans the cell (once: the same id again must bring the same key); returns its id."""
    name = str(cell_id)
    if params.KIND != cell_id.kind:
      raise ValueError(f"cell {name!r}: {type(params).__name__} is a {params.KIND} cell's")
    deps = {role: str(d) for role, d in (deps or {}).items()}
    for d in deps.values():
      if d not in self.cells:
        raise ValueError(f"cell {name!r} depends on unknown cell {d!r}")
    payload = json.dumps({"kind": cell_id.kind, "params": key_params(params),
                          "deps": {role: self.cells[d].key for role, d in deps.items()}},
                         sort_keys=True)
    key = hashlib.sha256(payload.encode("utf-8")).hexdigest()
    previous = self.cells.get(name)
    if previous is not None and previous.key != key:
      raise ValueError(f"cell {name!r} planned twice with different parameters")
    self.cells.setdefault(name, Cell(cell_id, params, deps, key))
    return cell_id

  def __iter__(self):
    return iter(self.cells.values())

  def __len__(self):
    return len(self.cells)

  def __getitem__(self, name: CellRef) -> Cell:
    return self.cells[str(name)]

  def of_kind(self, kind: str) -> list[Cell]:
    return [c for c in self.cells.values() if c.kind == kind]

  def of_seeds(self, seeds: Iterable[int]) -> "Plan":
    """The cells of these seeds, the seedless ones (data, vocabulary, BM25: they serve every
    seed) and every cell those read, in plan order: what a run narrowed to some seeds
    executes. Cells keep their keys, so what it finishes counts for the whole grid."""
    seeds = set(seeds)
    keep = {c.name for c in self if c.id.seed is None or c.id.seed in seeds}
    for cell in reversed(list(self)):  # plan order is dependency order
      if cell.name in keep:
        keep.update(cell.deps.values())
    out = Plan()
    out.cells = {name: c for name, c in self.cells.items() if name in keep}
    return out


@dataclasses.dataclass(frozen=True)
class Entry:
  """Where one table cell's numbers come from: a result cell and a split."""
  table: str
  dataset: str
  system: str
  variant: str
  ratio: int
  seed: int
  cell: str
  split: str

  @property
  def row(self) -> tuple[str, str]:
    return (self.system, self.variant)


@dataclasses.dataclass(frozen=True)
class Inputs:
  """The data a grid runs on (command-line paths)."""
  dump: str
  squad: str = ""
  nq: str = ""
  corpus: str = ""   # extracted text pre-trained on beside the dump (pipelines.wiki.textdocs)

  def datasets(self) -> list[tuple[str, str]]:
    """(dataset name, path) of each QA dataset given."""
    return [(name, path) for name, path in (("squad", self.squad), ("nq", self.nq)) if path]


def eval_splits(ratio: int) -> list[str]:
  """The splits an evaluation scores: validation (tuning) and test (tables); zero-shot, every
  question (nothing was trained on, nothing is tuned)."""
  if ratio == contracts.ZERO_SHOT_RATIO:
    return [contracts.ALL_QUESTIONS]
  return [contracts.validation_split(ratio), contracts.scored_split(ratio)]


def pairs_id(spec: GridSpec, squad_text: bool, have_squad: bool,
             extra: Optional[Mapping[str, Any]] = None) -> CellId:
  """The pair cell whose text holds the QA file's articles or not (`squad_text`, where a
  SQuAD file is given: `have_squad`) and whose pair settings add `extra` to the grid's."""
  # The grid's own pre-training text is `pairs/wiki`; the control row's other text (with or
  # without the QA file's articles) is a second pair set beside it.
  squad_text = squad_text and have_squad  # (NQ's articles are not text here)
  other = squad_text != (spec.data.pretrain_text_from_squad and have_squad)
  # A row's own pair settings (a task the grid's set lacks): named by the tasks they add.
  added = [t for t in PairConfig(**{**spec.data.pairs, **(extra or {})}).tasks
           if t not in PairConfig(**spec.data.pairs).tasks]
  return CellId("pairs", WIKI + ("+squad" if squad_text else "-squad") * other
                + "".join(f"+{t}" for t in added))


def has_zero_shot(system: System) -> bool:
  """Whether a dense row has a zero-shot entry: towers of its own, pre-trained on a pair
  task. Not a row without pre-training, MLM (its pre-training trains no query or document
  embedding), a hybrid, or a row that reuses another row's pre-training (that row's entry is
  its)."""
  return (system.kind == "dense" and system.pretrained and not system.pretrained_as
          and system.tasks != ("mlm",))


# ---------------------------------------------------------------------------------------------
# Planning: one function per cell kind, each planning what it needs first.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Grid:
  """What every planning step reads: the grid, its inputs, the plan being filled, and the
  grid's own pair set and vocabulary."""
  spec: GridSpec
  inputs: Inputs
  plan: Plan
  pairs: CellId
  vocab: CellId

  @property
  def doc_text(self) -> str:
    return self.spec.data.doc_text

  @property
  def all_ratios(self) -> list[int]:
    """The whole grid's, also when narrowed (grid.restrict)."""
    return sorted(self.spec.ratios)

  @property
  def trained_ratios(self) -> list[int]:
    """The ratios that fine-tune (zero-shot trains on no split)."""
    return [r for r in self.all_ratios if r != contracts.ZERO_SHOT_RATIO]


def _pairs(spec: GridSpec, inputs: Inputs, p: Plan, squad_text: bool,
           extra: Optional[Mapping[str, Any]] = None) -> CellId:
  """A pair set: the dump (+ the corpus), + the QA file's articles when `squad_text`, with the
  grid's pair settings + `extra`."""
  data = spec.data
  squad_text = squad_text and bool(inputs.squad)  # (NQ's articles are not text here)
  # The QA files whose articles stay out of this text: all of them, but the one whose
  # articles it adds on purpose.
  exclude = [path for name, path in inputs.datasets() if not (name == "squad" and squad_text)]
  # No corpus is None and the cleanup off is False: both left out of the key (added_later).
  return p.add(pairs_id(spec, squad_text, bool(inputs.squad), extra), PairsParams(
      dump=inputs.dump, squad_text=inputs.squad if squad_text else "",
      pairs={**data.pairs, **(extra or {})}, passages=dict(data.passages),
      heldout_percent=data.heldout_percent, corpus=inputs.corpus or None,
      text_cleanup=bool(data.text_cleanup), recover_links=bool(data.recover_links),
      exclude_qa=",".join(exclude) if data.exclude_qa_articles else ""))


def _pretrain(g: _Grid, system: System, variant: Variant, seed: int) -> Optional[CellId]:
  """The pre-training `system`'s towers start from (its own, or the row it reuses); None for
  a row without pre-training."""
  spec = g.spec
  source = spec.pretraining_of(system)
  if not source.pretrained:
    return None
  cfg = row_configs.pretrain_config(spec, source, variant, seed)
  pairs = _pairs(spec, g.inputs, g.plan, spec.squad_text_in_pretraining(source),
                 spec.pairs_of(source))
  # Zero-shot entries (ReQA's, a BEIR folder's) evaluate the pre-trained towers themselves:
  # pre-training exports them.
  export = ((contracts.ZERO_SHOT_RATIO in g.all_ratios or bool(spec.beir))
            and source.tasks != ("mlm",))
  return g.plan.add(CellId("pretrain", system=source.name, variant=variant.name, seed=seed),
                    PretrainParams(config=cfg.to_dict(), system=source.name,
                                     variant=variant.name, seed=seed, export=export),
                    {"pairs": pairs, "vocab": g.vocab})


def _hardneg(g: _Grid, reqa: CellId, k: int) -> CellId:
  """BM25 hard negatives of `reqa`'s fine-tuning pairs, every trained ratio at once."""
  return g.plan.add(CellId("hardneg", reqa.dataset, k=k),
                    HardnegParams(k=k, ratios=tuple(g.trained_ratios), doc_text=g.doc_text),
                    {"reqa": reqa})


def _finetune(g: _Grid, system: System, variant: Variant, reqa: CellId, ratio: int,
              seed: int) -> CellId:
  """`system` fine-tuned on `reqa`'s `ratio` split, from its pre-training if it has one."""
  deps: dict[str, CellId] = {"vocab": g.vocab, "reqa": reqa}
  init = _pretrain(g, system, variant, seed)
  if init:
    deps["init"] = init
  if system.hard_negatives:
    deps["hardneg"] = _hardneg(g, reqa, system.hard_negatives)
  cfg = row_configs.finetune_config(g.spec, system, variant, ratio, seed)
  # Under `finetune_select` the length is chosen on the ratio's validation curve, or carried
  # from the cell (same row and size) that chose it: another ratio's, or another seed's.
  sel, select, carried_from = g.spec.finetune_select, None, None
  source = sel.source(ratio, seed) if sel is not None else None
  if source is not None:
    carried_from = {"ratio": source[0], "seed": source[1]}
    deps[FINETUNE_LENGTH] = _finetune(g, system, variant, reqa, *source)
  elif sel is not None:
    select = sel.selection()
  return g.plan.add(
      CellId("finetune", reqa.dataset, system.name, variant.name, ratio, seed),
      FinetuneParams(system=system.name, variant=variant.name, ratio=ratio, seed=seed,
                       config=cfg.to_dict(), hard_negatives=system.hard_negatives,
                       doc_text=g.doc_text, select=select, carried_from=carried_from), deps)


def _bm25(g: _Grid, system: System, reqa: CellId) -> CellId:
  """BM25 over `reqa`: one run scores every split of every ratio (and serves every seed).
  Whole texts: one cell, "bm25/<dataset>", whatever the row's name. A row cut as the towers
  read (`truncate: tower`) is a cell of its own, named by the row, reading the grid's
  vocabulary (its words are the towers' word pieces)."""
  splits = tuple(s for r in g.all_ratios for s in eval_splits(r))
  doc_pieces, query_pieces = row_configs.bm25_cut(g.spec, system)
  if not (doc_pieces or query_pieces):
    return g.plan.add(CellId("bm25", reqa.dataset),
                      Bm25Params(system="bm25", splits=splits, doc_text=g.doc_text),
                      {"reqa": reqa})
  return g.plan.add(CellId("bm25", reqa.dataset, system=system.name),
                    Bm25Params(system=system.name, splits=splits, doc_text=g.doc_text,
                               doc_pieces=doc_pieces, query_pieces=query_pieces),
                    {"reqa": reqa, "vocab": g.vocab})


def _eval(g: _Grid, system: System, variant: Variant, reqa: CellId, ratio: int, seed: int,
          model: CellId) -> CellId:
  """`model`'s towers (fine-tuned, or pre-trained at zero-shot) scored on `reqa`."""
  return g.plan.add(CellId("eval", reqa.dataset, system.name, variant.name, ratio, seed),
                    EvalParams(system=system.name, variant=variant.name, ratio=ratio,
                                 seed=seed, splits=tuple(eval_splits(ratio)),
                                 doc_text=g.doc_text),
                    {"model": model, "reqa": reqa})


def _fuse(g: _Grid, system: System, variant: Variant, reqa: CellId, train_reqa: CellId,
          ratio: int, seed: int) -> CellId:
  """The hybrid `system`: its first row's run fused with each partner row's; given several
  partners, the validation split chooses one."""
  first, *partners = system.fuse
  deps = {FUSE_FIRST: _result(g, g.spec.systems[first], variant, reqa, train_reqa, ratio,
                              seed)}
  for name in partners:
    deps[FUSE_PARTNER + name] = _result(g, g.spec.systems[name], variant, reqa, train_reqa,
                                        ratio, seed)
  # The plan cannot know which validation splits are too small (the ReQA cell counts them),
  # so every ratio may carry from the next larger one, which may carry in turn; a cell whose
  # own split tunes reads nothing from it. The same seed: its dense rows are this seed's.
  larger = [r for r in g.trained_ratios
            if r > ratio and seed in g.spec.row_seeds(r, system.name, variant.name)]
  if system.untuned == grid_lib.UNTUNED_CARRY and larger:
    deps[FUSE_CARRY] = _fuse(g, system, variant, reqa, train_reqa, min(larger), seed)
  return g.plan.add(
      CellId("fuse", reqa.dataset, system.name, variant.name, ratio, seed),
      FuseParams(system=system.name, method=system.fusion, ratio=ratio, seed=seed,
                   splits=tuple(eval_splits(ratio)),
                   tune_split=contracts.validation_split(ratio),
                   tune_metric=system.tune_metric,
                   min_tune_questions=system.min_tune_questions,
                   untuned_weight=system.untuned_weight, untuned=system.untuned),
      {**deps, "reqa": reqa})


def _result(g: _Grid, system: System, variant: Variant, reqa: CellId, train_reqa: CellId,
            ratio: int, seed: int) -> Optional[CellId]:
  """The cell whose run scores `system` on `reqa` at `ratio` / `seed`, fine-tuned on
  `train_reqa` (the closed directory of the same QA set); None where the row has no zero-shot
  entry (`has_zero_shot`)."""
  if system.kind == "bm25":
    return _bm25(g, system, reqa)
  if ratio == contracts.ZERO_SHOT_RATIO:  # (a hybrid has none: has_zero_shot)
    if not has_zero_shot(system):
      return None
    return _eval(g, system, variant, reqa, ratio, seed, _pretrain(g, system, variant, seed))
  if system.kind == "hybrid":
    return _fuse(g, system, variant, reqa, train_reqa, ratio, seed)
  model = _finetune(g, system, variant, train_reqa, ratio, seed)
  return _eval(g, system, variant, reqa, ratio, seed, model)


def _stats_deps(g: _Grid) -> dict[str, CellId]:
  """A datastats cell's pair sets: the grid's, and the control row's other text (the QA
  articles' text in, or out) where a row pre-trains on it, so that Table 1 gives its
  composition beside the grid's."""
  spec = g.spec
  texts_used = {spec.squad_text_in_pretraining(spec.systems[row.system])
                for table in spec.tables for row in table.rows
                if spec.pretraining_of(spec.systems[row.system]).pretrained}
  deps = {"pairs": g.pairs, "vocab": g.vocab}
  other = not spec.data.pretrain_text_from_squad
  if g.inputs.squad and other in texts_used:
    deps["control_pairs"] = _pairs(spec, g.inputs, g.plan, other)
  return deps


def table_seeds(spec: GridSpec, table: Table, ratio: int, system: str, variant: str
                ) -> tuple[int, ...]:
  """The seeds a table's row is run and averaged at: the row's (`GridSpec.row_seeds`) in a
  table of all seeds, seed 0 in the others; BM25 is deterministic: one run serves every seed."""
  if spec.systems[system].kind == "bm25" or not table.all_seeds:
    return (0,)
  return spec.row_seeds(ratio, system, variant)


def _table_entries(g: _Grid, table: Table, dataset: str, target: CellId,
                   reqa: CellId) -> list[Entry]:
  """Plans `table`'s cells on `target` (its ReQA directory; models fine-tune on `reqa`);
  returns an entry per row x ratio x seed that has one."""
  entries = []
  for ratio in table.ratios:
    for row in table.rows:
      system, variant = g.spec.systems[row.system], g.spec.variants[row.variant]
      for seed in table_seeds(g.spec, table, ratio, row.system, row.variant):
        cell = _result(g, system, variant, target, reqa, ratio, seed)
        if cell is not None:
          entries.append(Entry(table.id, dataset, system.name, variant.name, ratio, seed,
                               str(cell), contracts.scored_split(ratio)))
  return entries


def _plan_dataset(g: _Grid, dataset: str, path: str,
                  stats_deps: Mapping[str, CellId]) -> list[Entry]:
  """A QA set's ReQA directory (and its open-domain one, where a table asks), its data
  statistics, and every table's cells on it."""
  p, data = g.plan, g.spec.data
  reqa = p.add(CellId("reqa", dataset), ReqaParams(source=dataset, path=path,
                                                     doc_text=data.doc_text,
                                                     open_candidates=0))
  p.add(CellId("datastats", dataset), DatastatsParams(dataset=dataset, doc_text=data.doc_text),
        {**stats_deps, "reqa": reqa})
  entries, open_reqa = [], None
  for table in g.spec.tables:
    target = reqa
    if table.open_domain:
      if open_reqa is None:
        open_reqa = p.add(CellId("reqa", dataset + OPEN_SUFFIX),
                          ReqaParams(source=dataset, path=path, doc_text=data.doc_text,
                                       open_candidates=data.open_candidates),
                          {"pairs": g.pairs})
      target = open_reqa
    entries += _table_entries(g, table, dataset, target, reqa)
  return entries


def plan(spec: GridSpec, inputs: Inputs) -> tuple[Plan, list[Entry]]:
  """Every cell the grid's tables need, in order, and the entries that read their results."""
  if not inputs.datasets():
    raise ValueError("no QA data: give --squad FILE (and/or --nq FILE)")
  p = Plan()
  pairs = _pairs(spec, inputs, p, spec.data.pretrain_text_from_squad)
  # One vocabulary for every row, the control row's included: rows differ in pre-training
  # pairs only.
  vocab = p.add(CellId("vocab", WIKI), VocabParams(vocab_size=spec.data.vocab_size),
                {"pairs": pairs})
  g = _Grid(spec, inputs, p, pairs, vocab)
  stats_deps = _stats_deps(g)
  entries = []
  for dataset, path in inputs.datasets():
    entries += _plan_dataset(g, dataset, path, stats_deps)
  _bundles(p, max(g.all_ratios))
  _beir(g)
  return p, entries


#: The system a BEIR folder's zero-shot rows are compared with (`twotower beir`'s reference).
BEIR_REFERENCE = "bm25-flat"


def _beir(g: _Grid) -> None:
  """Per BEIR folder of the grid: BM25 flat once, and each pre-training the plan holds (row,
  size, seed) whose row has a zero-shot entry (`has_zero_shot`) scored zero-shot by its
  exported towers. Rendered by experiment.beir_cells; nothing reads them."""
  from twotower.eval import ir_metrics  # pylint: disable=import-outside-toplevel
  pretrainings = [c for c in g.plan.of_kind("pretrain")
                  if has_zero_shot(g.spec.systems[c.id.system])]
  for data in g.spec.beir:
    common = dict(path=data.path, split=data.split, metrics=ir_metrics.BEIR_METRICS)
    g.plan.add(CellId("beir", data.name, BEIR_REFERENCE),
               BeirParams(system=BEIR_REFERENCE, **common))
    for pre in pretrainings:
      g.plan.add(CellId("beir", data.name, pre.id.system, pre.id.variant, seed=pre.id.seed),
                 BeirParams(system=pre.id.system, variant=pre.id.variant, seed=pre.id.seed,
                            **common), {"model": pre.id})


def _bundles(p: Plan, ratio: int) -> None:
  """A bundle cell for each hybrid at `ratio`, seed 0, over the closed ReQA set: the grid ends
  with a retriever one can query (its dense side is the row the fuse cell chose)."""
  for fuse in p.of_kind("fuse"):
    reqa = p[fuse.deps["reqa"]]
    if fuse.id.ratio != ratio or fuse.id.seed != 0 or reqa.params.open_candidates:
      continue
    models = {BUNDLE_MODEL + role[len(FUSE_PARTNER):]: p[dep].deps["model"]
              for role, dep in fuse.deps.items()
              if role.startswith(FUSE_PARTNER) and p[dep].kind == "eval"}
    if models:
      p.add(dataclasses.replace(fuse.id, kind="bundle"),
            BundleParams(doc_text=reqa.params.doc_text),
            {BUNDLE_FUSE: fuse.id, "reqa": reqa.id, **models})
