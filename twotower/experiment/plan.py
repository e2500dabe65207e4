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
    bm25      BM25 over one ReQA directory: one run, every split scored
    pretrain  one row's pre-training for one model size and seed (shared by every ratio, and
              by rows that differ in fine-tuning only)
    finetune  one row x size x ratio x seed
    eval      embed + flat search + Recall@k of one fine-tuned model on one ReQA directory
    fuse      a hybrid of two rows' runs, its weight (and, given several dense rows, which one)
              tuned on the ratio's validation split
    bundle    a retriever bundle of the hybrid at the grid's largest ratio (seed 0): the dense
              row its fuse cell chose, BM25, the tuned weight (`twotower query` / `serve` it)

Each cell's parameters hold everything it depends on: a training cell holds its resolved
model config (`TrainingConfig.to_dict()`), so changing a preset, a step count or a seed plans
new cells. A cell's directory ends with a hash of its parameters and its dependencies'
hashes: a finished cell is reused only when nothing it depends on changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Mapping, Optional, Sequence

from twotower import contracts
from twotower.experiment import grid as grid_lib
from twotower.experiment.grid import GridSpec, System, Variant
from twotower.pipelines.pair_tasks import PairConfig

KINDS = ("pairs", "vocab", "reqa", "heldout", "datastats", "hardneg", "bm25", "pretrain", "finetune",
         "eval", "fuse", "bundle")
#: Cells whose results are table entries.
RESULT_KINDS = ("bm25", "eval", "fuse")
#: Dependency roles of a fuse cell: the first run (BM25), and each candidate partner run.
FUSE_FIRST, FUSE_PARTNER = "first", "partner:"
#: Dependency roles of a bundle cell: its fuse cell, and each partner row's trained model.
BUNDLE_FUSE, BUNDLE_MODEL = "fuse", "model:"


def _slug(text: str) -> str:
  return "".join(c if c.isalnum() or c in "-_.+" else "-" for c in text).strip("-")


@dataclasses.dataclass(frozen=True)
class Cell:
  """One resumable unit of work.

  Attributes:
    kind: one of KINDS.
    name: readable unique name, e.g. "finetune/squad/ict/base/r5/s0".
    params: JSON-able parameters: what the cell's executor needs besides its dependencies'
      directories.
    deps: the cells whose outputs this one reads, by role ({"reqa": "reqa/squad", ...}).
    key: hash of params and of the dependencies' keys.
  """
  kind: str
  name: str
  params: Mapping[str, Any]
  deps: Mapping[str, str]
  key: str

  @property
  def dirname(self) -> str:
    """Directory under the work dir: `<kind>/<slug of the rest of the name>-<key[:10]>`."""
    rest = self.name.split("/", 1)[1] if "/" in self.name else self.name
    return f"{self.kind}/{_slug(rest.replace('/', '_'))}-{self.key[:10]}"


class Plan:
  """Cells in dependency order, de-duplicated by name (one pre-training feeds several rows
  and tables; one BM25 run feeds every ratio)."""

  def __init__(self):
    self.cells: dict[str, Cell] = {}

  def add(self, kind: str, name: str, params: Mapping[str, Any],
          deps: Optional[Mapping[str, str]] = None) -> str:
    deps = dict(deps or {})
    for d in deps.values():
      if d not in self.cells:
        raise ValueError(f"cell {name!r} depends on unknown cell {d!r}")
    payload = json.dumps({"kind": kind, "params": params,
                          "deps": {role: self.cells[d].key for role, d in deps.items()}},
                         sort_keys=True)
    key = hashlib.sha256(payload.encode("utf-8")).hexdigest()
    previous = self.cells.get(name)
    if previous is not None and previous.key != key:
      raise ValueError(f"cell {name!r} planned twice with different parameters")
    self.cells.setdefault(name, Cell(kind, name, dict(params), deps, key))
    return name

  def __iter__(self):
    return iter(self.cells.values())

  def __len__(self):
    return len(self.cells)

  def __getitem__(self, name: str) -> Cell:
    return self.cells[name]

  def of_kind(self, kind: str) -> list[Cell]:
    return [c for c in self.cells.values() if c.kind == kind]


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
  corpus: str = ""   # extracted text pre-trained on beside the dump (pipelines.textdocs)

  def datasets(self) -> list[tuple[str, str]]:
    """(dataset name, path) of each QA dataset given."""
    return [(name, path) for name, path in (("squad", self.squad), ("nq", self.nq)) if path]


def eval_splits(ratio: int) -> list[str]:
  """The splits an evaluation scores: validation (tuning) and test (tables); zero-shot, every
  question (nothing was trained on, nothing is tuned)."""
  if ratio == contracts.ZERO_SHOT_RATIO:
    return [contracts.ALL_QUESTIONS]
  return [contracts.validation_split(ratio), contracts.scored_split(ratio)]


def pairs_name(spec: GridSpec, squad_text: bool, have_squad: bool,
               extra: Optional[Mapping[str, Any]] = None) -> str:
  """The name of the pair cell whose text holds the QA file's articles or not (`squad_text`,
  where a SQuAD file is given: `have_squad`) and whose pair settings add `extra` to the
  grid's."""
  # The grid's own pre-training text is `pairs/wiki`; the control row's other text (with or
  # without the QA file's articles) is a second pair set beside it.
  squad_text = squad_text and have_squad  # (NQ's articles are not text here)
  other = squad_text != (spec.data.pretrain_text_from_squad and have_squad)
  # A row's own pair settings (a task the grid's set lacks): named by the tasks they add.
  added = [t for t in PairConfig(**{**spec.data.pairs, **(extra or {})}).tasks
           if t not in PairConfig(**spec.data.pairs).tasks]
  return ("pairs/wiki" + ("+squad" if squad_text else "-squad") * other
          + "".join(f"+{t}" for t in added))


def has_zero_shot(system: System) -> bool:
  """Whether a dense row has a zero-shot entry: towers of its own, pre-trained on a pair
  task. Not a row without pre-training, MLM (its pre-training trains no query or document
  embedding), a hybrid, or a row that reuses another row's pre-training (that row's entry is
  its)."""
  return (system.kind == "dense" and system.pretrained and not system.pretrained_as
          and system.tasks != ("mlm",))


def plan(spec: GridSpec, inputs: Inputs) -> tuple[Plan, list[Entry]]:
  """Every cell the grid's tables need, in order, and the entries that read their results."""
  if not inputs.datasets():
    raise ValueError("no QA data: give --squad FILE (and/or --nq FILE)")
  p = Plan()
  entries: list[Entry] = []
  data = spec.data

  def pairs_cell(squad_text: bool, extra: Optional[Mapping[str, Any]] = None) -> str:
    squad_text = squad_text and bool(inputs.squad)  # (NQ's articles are not text here)
    params = {"dump": inputs.dump, "squad_text": inputs.squad if squad_text else "",
              "pairs": {**data.pairs, **(extra or {})}, "passages": dict(data.passages),
              "heldout_percent": data.heldout_percent}
    if inputs.corpus:  # (absent without a corpus: the cells of earlier runs keep their keys)
      params["corpus"] = inputs.corpus
    if data.text_cleanup:  # (absent when off: the cells of earlier runs keep their keys)
      params["text_cleanup"] = True
    return p.add("pairs", pairs_name(spec, squad_text, bool(inputs.squad), extra), params)

  pairs = pairs_cell(data.pretrain_text_from_squad)
  # One vocabulary for every row, the control row's included: rows differ in pre-training
  # pairs only.
  vocab = p.add("vocab", "vocab/wiki", {"vocab_size": data.vocab_size}, {"pairs": pairs})
  # The whole grid's, also when narrowed (grid.restrict); zero-shot trains on no split.
  all_ratios = sorted(spec.ratios)
  trained_ratios = [r for r in all_ratios if r != contracts.ZERO_SHOT_RATIO]
  # Zero-shot entries evaluate the pre-trained towers themselves: pre-training exports them.
  export_pretrained = contracts.ZERO_SHOT_RATIO in all_ratios

  def pretrain(system: System, variant: Variant, seed: int) -> Optional[str]:
    source = spec.pretraining_of(system)
    if not source.pretrained:
      return None
    cfg = grid_lib.pretrain_config(spec, source, variant, seed)
    params = {"system": source.name, "variant": variant.name, "seed": seed,
              "config": cfg.to_dict()}
    if export_pretrained and source.tasks != ("mlm",):  # (absent: earlier keys stay)
      params["export"] = True
    return p.add("pretrain", f"pretrain/{source.name}/{variant.name}/s{seed}", params,
                 {"pairs": pairs_cell(spec.squad_text_in_pretraining(source),
                                      spec.pairs_of(source)),
                  "vocab": vocab})

  def hardneg(reqa: str, k: int) -> str:
    return p.add("hardneg", f"hardneg/{p[reqa].name.split('/', 1)[1]}/k{k}",
                 {"k": k, "ratios": trained_ratios, "doc_text": data.doc_text},
                 {"reqa": reqa})

  def finetune(system: System, variant: Variant, reqa: str, dataset: str, ratio: int,
               seed: int) -> str:
    deps = {"vocab": vocab, "reqa": reqa}
    init = pretrain(system, variant, seed)
    if init:
      deps["init"] = init
    if system.hard_negatives:
      deps["hardneg"] = hardneg(reqa, system.hard_negatives)
    cfg = grid_lib.finetune_config(spec, system, variant, ratio, seed)
    return p.add("finetune",
                 f"finetune/{dataset}/{system.name}/{variant.name}/r{ratio}/s{seed}",
                 {"system": system.name, "variant": variant.name, "ratio": ratio, "seed": seed,
                  "config": cfg.to_dict(), "hard_negatives": system.hard_negatives,
                  "doc_text": data.doc_text}, deps)

  def bm25(reqa: str) -> str:
    splits = [s for r in all_ratios for s in eval_splits(r)]
    return p.add("bm25", f"bm25/{p[reqa].name.split('/', 1)[1]}",
                 {"system": "bm25", "splits": splits, "doc_text": data.doc_text},
                 {"reqa": reqa})

  def zero_shot(system: System, variant: Variant, reqa: str, seed: int) -> Optional[str]:
    """The eval cell of `system`'s pre-trained towers, not fine-tuned; None where
    `has_zero_shot` says the row has none."""
    if not has_zero_shot(system):
      return None
    model = pretrain(system, variant, seed)
    ratio = contracts.ZERO_SHOT_RATIO
    tag = f"{p[reqa].name.split('/', 1)[1]}/{system.name}/{variant.name}/r{ratio}/s{seed}"
    return p.add("eval", f"eval/{tag}",
                 {"system": system.name, "variant": variant.name, "ratio": ratio,
                  "seed": seed, "splits": eval_splits(ratio), "doc_text": data.doc_text},
                 {"model": model, "reqa": reqa})

  def result(system: System, variant: Variant, reqa: str, train_reqa: str, dataset: str,
             ratio: int, seed: int) -> Optional[str]:
    """The cell whose run scores `system` on `reqa` at `ratio` / `seed` (None: the row has
    no zero-shot entry)."""
    if system.kind == "bm25":
      return bm25(reqa)
    if ratio == contracts.ZERO_SHOT_RATIO:
      return zero_shot(system, variant, reqa, seed)
    tag = f"{p[reqa].name.split('/', 1)[1]}/{system.name}/{variant.name}/r{ratio}/s{seed}"
    if system.kind == "hybrid":
      first, *partners = system.fuse
      deps = {FUSE_FIRST: result(spec.systems[first], variant, reqa, train_reqa, dataset,
                                 ratio, seed)}
      for name in partners:  # several: the best one is chosen on the validation split
        deps[FUSE_PARTNER + name] = result(spec.systems[name], variant, reqa, train_reqa,
                                           dataset, ratio, seed)
      return p.add("fuse", f"fuse/{tag}",
                   {"system": system.name, "method": system.fusion, "ratio": ratio,
                    "seed": seed, "splits": eval_splits(ratio),
                    "tune_split": contracts.validation_split(ratio),
                    "tune_metric": system.tune_metric,
                    "min_tune_questions": system.min_tune_questions,
                    "untuned_weight": system.untuned_weight},
                   {**deps, "reqa": reqa})
    model = finetune(system, variant, train_reqa, dataset, ratio, seed)
    return p.add("eval", f"eval/{tag}",
                 {"system": system.name, "variant": variant.name, "ratio": ratio, "seed": seed,
                  "splits": eval_splits(ratio), "doc_text": data.doc_text},
                 {"model": model, "reqa": reqa})

  # The control row's pair set (the QA articles' text in, or out), planned here so that Table 1
  # gives its composition beside the grid's.
  texts_used = {spec.squad_text_in_pretraining(spec.systems[row.system])
                for table in spec.tables for row in table.rows
                if spec.pretraining_of(spec.systems[row.system]).pretrained}
  stats_deps = {"pairs": pairs, "vocab": vocab}
  if inputs.squad and (not data.pretrain_text_from_squad) in texts_used:
    stats_deps["control_pairs"] = pairs_cell(not data.pretrain_text_from_squad)
  for dataset, path in inputs.datasets():
    reqa = p.add("reqa", f"reqa/{dataset}", {"source": dataset, "path": path,
                                             "doc_text": data.doc_text,
                                             "open_candidates": 0})
    p.add("datastats", f"datastats/{dataset}", {"dataset": dataset, "doc_text": data.doc_text},
          {**stats_deps, "reqa": reqa})
    open_reqa = None
    for table in spec.tables:
      target = reqa
      if table.open_domain:
        if open_reqa is None:
          open_reqa = p.add("reqa", f"reqa/{dataset}-open",
                            {"source": dataset, "path": path, "doc_text": data.doc_text,
                             "open_candidates": data.open_candidates}, {"pairs": pairs})
        target = open_reqa
      for ratio in table.ratios:
        for row in table.rows:
          system, variant = spec.systems[row.system], spec.variants[row.variant]
          seeds = spec.seeds_for(ratio) if table.all_seeds else (0,)
          if system.kind == "bm25":
            seeds = (0,)  # deterministic: one run serves every seed
          for seed in seeds:
            cell = result(system, variant, target, reqa, dataset, ratio, seed)
            if cell is not None:
              entries.append(Entry(table.id, dataset, system.name, variant.name, ratio, seed,
                                   cell, contracts.scored_split(ratio)))
  _bundles(p, max(all_ratios))
  return p, entries


def _bundles(p: Plan, ratio: int) -> None:
  """A bundle cell for each hybrid at `ratio`, seed 0, over the closed ReQA set: the grid ends
  with a retriever one can query (its dense side is the row the fuse cell chose)."""
  for fuse in p.of_kind("fuse"):
    reqa = fuse.deps["reqa"]
    if fuse.params["ratio"] != ratio or fuse.params["seed"] != 0 or \
        p[reqa].params["open_candidates"]:
      continue
    models = {BUNDLE_MODEL + role[len(FUSE_PARTNER):]: p[dep].deps["model"]
              for role, dep in fuse.deps.items()
              if role.startswith(FUSE_PARTNER) and p[dep].kind == "eval"}
    if models:
      p.add("bundle", "bundle/" + fuse.name.split("/", 1)[1],
            {"doc_text": p[reqa].params["doc_text"]},
            {BUNDLE_FUSE: fuse.name, "reqa": reqa, **models})


# ---------------------------------------------------------------------------------------------
# Run-time estimate (for --dry_run): rough, calibrated on this 2-core machine.
# ---------------------------------------------------------------------------------------------

#: Seconds per training example per unit of (q+d) x L x H^2, and fixed costs per cell. Measured
#: idle: 100 cpu-small steps at batch 64 (q 32 + d 128, L2, H128) in 40 s.
_EXAMPLE_COST = 1.2e-9
_BOW_EXAMPLE = 1.5e-3
_TRAIN_OVERHEAD, _EVAL_OVERHEAD = 30.0, 45.0
#: Documents embedded per second per unit of d x L x H^2 (forward only, about a third of a
#: training example's cost, one tower).
_CANDIDATES = 11_000


def example_seconds(model: Mapping[str, Any]) -> float:
  if model.get("encoder") == "bow_mlp":
    return _BOW_EXAMPLE
  return _EXAMPLE_COST * (model["query_len"] + model["doc_len"]) * max(model["num_layers"], 1) \
      * model["hidden_dim"] ** 2


def estimate_seconds(cell: Cell, plan_: Plan) -> float:
  """A rough wall time of one cell on 2 cores."""
  fixed = {"pairs": 60.0, "vocab": 30.0, "reqa": 60.0, "datastats": 20.0, "hardneg": 60.0,
           "bm25": 40.0, "fuse": 10.0, "bundle": 90.0}
  if cell.kind in fixed:
    return fixed[cell.kind]
  if cell.kind == "eval":
    cfg = plan_[cell.deps["model"]].params["config"]
    return _EVAL_OVERHEAD + _CANDIDATES * example_seconds(cfg["model"]) / 3
  cfg = cell.params["config"]
  if cell.kind == "pretrain":
    examples = cfg["trainer"]["steps"] * cfg["data"]["batch_size"]
  else:
    examples = cfg["trainer"]["finetune_steps"] * cfg["trainer"]["finetune_batch_size"]
  return _TRAIN_OVERHEAD + examples * example_seconds(cfg["model"])


def format_seconds(seconds: float) -> str:
  if seconds < 90:
    return f"{seconds:.0f} s"
  if seconds < 5400:
    return f"{seconds / 60:.0f} min"
  return f"{seconds / 3600:.1f} h"


#: Finished cells of a kind needed before their measured times scale that kind's estimates.
_CALIBRATION_MIN_CELLS = 3


def calibration(plan_: Plan, measured: Mapping[str, float]) -> dict[str, float]:
  """{kind: measured / estimated wall seconds} over the finished cells this run timed, for
  each kind with enough of them, and under "*" over all of them: the formula above was fit on
  one machine under no load, and a work dir's own cells say what this machine does."""
  actual: dict[str, float] = {}
  guessed: dict[str, float] = {}
  count: dict[str, int] = {}
  for name, seconds in measured.items():
    cell = plan_[name]
    for key in (cell.kind, "*"):
      actual[key] = actual.get(key, 0.0) + seconds
      guessed[key] = guessed.get(key, 0.0) + estimate_seconds(cell, plan_)
      count[key] = count.get(key, 0) + 1
  return {k: actual[k] / guessed[k] for k in actual
          if count[k] >= _CALIBRATION_MIN_CELLS and guessed[k] > 0}


def describe(plan_: Plan, done: Sequence[str] = (),
             measured: Optional[Mapping[str, float]] = None) -> tuple[str, float]:
  """One line per cell with its state and time, a header line; the seconds left.
  `measured`: {finished cell: its wall seconds} of cells run in this work dir: shown for
  those cells, and they scale the estimates of the others (`calibration`)."""
  done, measured = set(done), dict(measured or {})
  scale = calibration(plan_, measured)
  lines, remaining = [], 0.0
  for cell in plan_:
    if cell.name in measured:
      shown = format_seconds(measured[cell.name])
    else:
      seconds = estimate_seconds(cell, plan_) * scale.get(cell.kind, scale.get("*", 1.0))
      shown = "~" + format_seconds(seconds)
      if cell.name not in done:
        remaining += seconds
    lines.append(f"  {'done' if cell.name in done else 'todo'}  {cell.kind:<8} "
                 f"{cell.name:<58} {shown}")
  counts = {k: len(plan_.of_kind(k)) for k in KINDS if plan_.of_kind(k)}
  basis = (f"scaled by the {len(measured)} cells timed in this work dir"
           if scale else "on 2 cores")
  head = (f"{len(plan_)} cells ({', '.join(f'{v} {k}' for k, v in counts.items())}); rough "
          f"estimate of what is left ({basis}): {format_seconds(remaining)}")
  return "\n".join([head] + lines), remaining
