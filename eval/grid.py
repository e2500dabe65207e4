"""The experiment grid as data: systems, cells, their dependencies, the run-time estimate and
the paper-layout tables. Pure planning, no TensorFlow or Beam: `twotower experiment --dry_run`
and most tests use only this module; eval.experiment executes the cells.

A *cell* is one unit of work with a done-marker: the pair pipeline, the vocabulary, a ReQA
directory, a pre-training run (once per system and model variant, reused by every ratio and
seed), a fine-tuning run (system x variant x ratio x seed), an evaluation (embed + FAISS flat
search + Recall@k of one fine-tuned model on one ReQA split) and BM25 (one per ReQA
directory, all splits at once). A cell's directory name ends with a hash of its parameters
and of its dependencies' hashes, so changing a flag (steps, preset, data) plans new cells
next to the finished ones instead of silently reusing stale results.

Tables (paper layout; rows = systems, columns = train/test ratio x R@1/5/10/50/100):
  3: ReQA SQuAD, every system at every ratio (test-r split);  4: the same on NQ;
  5: ablation of layers x embedding dimension (one system, the ablation ratio);
  6: open domain: the ReQA candidates plus N Wikipedia (sentence, passage) candidates.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any, Mapping, Optional, Sequence

from twotower import contracts

# ---------------------------------------------------------------------------------------------
# Systems (paper Table 3 rows, in the paper's order).
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class System:
  """One row of Table 3.

  Attributes:
    name: flag value (`--systems`), e.g. "ict+bfs+wlp".
    encoder: the table's "Encoder" column.
    pretraining: the table's "Pre-training" column.
    tasks: `twotower pretrain --tasks` value; "" = no pre-training (No-SSL); None = not a
      trained model (BM25).
    config: the model preset to use instead of the grid's (BoW-MLP), adapted to the grid
      preset's lengths, embedding dimension and batch.
  """
  name: str
  encoder: str
  pretraining: str
  tasks: Optional[str]
  config: Optional[str] = None

  @property
  def dense(self) -> bool:
    return self.tasks is not None

  @property
  def pretrained(self) -> bool:
    return bool(self.tasks)


SYSTEMS: tuple[System, ...] = (
    System("bm25", "BM25", "-", None),
    # The paper's MLP row: BoW-MLP towers with no pre-training, fine-tuned only.
    System("bow-mlp", "BoW-MLP", "No pre-training", "", config="bow-mlp"),
    # Not in the paper: the same towers pre-trained on ICT+BFS+WLP first.
    System("bow-mlp-ict+bfs+wlp", "BoW-MLP", "ICT+BFS+WLP", "ict,bfs,wlp", config="bow-mlp"),
    System("no-ssl", "Transformer", "No pre-training", ""),
    System("mlm", "Transformer", "MLM", "mlm"),
    System("ict", "Transformer", "ICT", "ict"),
    System("bfs", "Transformer", "BFS", "bfs"),
    System("wlp", "Transformer", "WLP", "wlp"),
    System("ict+bfs+wlp", "Transformer", "ICT+BFS+WLP", "ict,bfs,wlp"),
)
SYSTEMS_BY_NAME = {s.name: s for s in SYSTEMS}

#: Table 5 variants per grid preset: (label, preset). The paper's are L4/d128, L4/d512,
#: L12/d512; the CPU analogue scales layers down (cpu-small itself is L2/d128).
ABLATIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "cpu-small": (("L2 / d128", "cpu-small"), ("L4 / d128", "cpu-small-l4-d128"),
                  ("L4 / d512", "cpu-small-l4-d512")),
    "paper": (("L4 / d128", "paper-l4-d128"), ("L4 / d256", "paper-l4-d256"),
              ("L4 / d512", "paper-l4-d512"), ("L12 / d512", "paper")),
}

#: Model overrides (`--set`) that make a tiny ablation for the tests' `tiny` preset.
TINY_ABLATIONS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("L1 / d16", "tiny", ()), ("L2 / d16", "tiny", ("model.num_layers=2",)))

TABLES = (3, 4, 5, 6)


@dataclasses.dataclass(frozen=True)
class Variant:
  """A model size: a preset plus `--set` overrides (Table 5 rows; the grid preset is one)."""
  label: str
  preset: str
  sets: tuple[str, ...] = ()

  @property
  def slug(self) -> str:
    return _slug(self.preset + "".join("-" + s for s in self.sets))


def ablation_variants(preset: str) -> tuple[Variant, ...]:
  if preset == "tiny":
    return tuple(Variant(label, p, sets) for label, p, sets in TINY_ABLATIONS)
  rows = ABLATIONS.get(preset)
  if rows is None:
    return (Variant(preset, preset),)
  return tuple(Variant(label, p) for label, p in rows)


# ---------------------------------------------------------------------------------------------
# Cells.
# ---------------------------------------------------------------------------------------------

KINDS = ("pairs", "vocab", "reqa", "bm25", "pretrain", "finetune", "eval")


def _slug(text: str) -> str:
  return "".join(c if c.isalnum() or c in "-_." else "-" for c in text).strip("-")


@dataclasses.dataclass(frozen=True)
class Cell:
  """One resumable unit of work.

  Attributes:
    kind: one of KINDS.
    name: readable unique name, e.g. "finetune/ict/cpu-small/r5/s0".
    params: JSON-able parameters (what the executor needs, besides dependencies' dirs).
    deps: names of the cells whose outputs this one reads.
    key: hash of params and of the dependencies' keys (set by `Plan.add`).
  """
  kind: str
  name: str
  params: Mapping[str, Any]
  deps: tuple[str, ...] = ()
  key: str = ""

  @property
  def dirname(self) -> str:
    """Directory under the work dir: `<kind>/<slug of the name>-<key[:10]>`."""
    rest = self.name.split("/", 1)[1] if "/" in self.name else self.name
    return f"{self.kind}/{_slug(rest.replace('/', '_'))}-{self.key[:10]}"


class Plan:
  """Cells in dependency order, de-duplicated by name (the same pre-training feeds Table 3
  and Table 5; the same BM25 run feeds every ratio)."""

  def __init__(self):
    self.cells: dict[str, Cell] = {}

  def add(self, kind: str, name: str, params: Mapping[str, Any],
          deps: Sequence[str] = ()) -> str:
    for d in deps:
      if d not in self.cells:
        raise ValueError(f"cell {name!r} depends on unknown cell {d!r}")
    payload = json.dumps({"kind": kind, "params": params,
                          "deps": [self.cells[d].key for d in deps]}, sort_keys=True)
    key = hashlib.sha256(payload.encode("utf-8")).hexdigest()
    cell = Cell(kind, name, dict(params), tuple(deps), key)
    previous = self.cells.get(name)
    if previous is not None and previous.key != key:
      raise ValueError(f"cell {name!r} planned twice with different parameters")
    self.cells.setdefault(name, cell)
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
class GridConfig:
  """What `twotower experiment` runs (its flags, resolved)."""
  preset: str
  dump: str
  squad: str = ""
  nq: str = ""
  systems: tuple[str, ...] = tuple(s.name for s in SYSTEMS)
  ratios: tuple[int, ...] = contracts.REQA_RATIOS
  seeds: tuple[int, ...] = (0,)
  ratio_seeds: tuple[tuple[int, tuple[int, ...]], ...] = ()  # e.g. ((5, (0, 1, 2)),)
  tables: tuple[int, ...] = (3, 4, 5, 6)
  pretrain_steps: int = 0          # 0: the preset's trainer.steps
  finetune_steps: int = 0          # 0: the preset's trainer.finetune_steps
  ablation_system: str = "ict+bfs+wlp"
  ablation_ratios: tuple[int, ...] = ()   # (): the smallest of `ratios`
  open_systems: tuple[str, ...] = ("bm25", "ict+bfs+wlp")
  open_ratios: tuple[int, ...] = ()       # (): the smallest of `ratios`
  open_candidates: int = 10_000
  heldout_percent: float = 5.0
  pairs_flags: tuple[str, ...] = ()       # extra `twotower pairs` flags
  pretrain_text_from_squad: bool = False  # add the SQuAD articles' paragraphs to the dump
  vocab_size: int = 8000
  doc_text: str = "sentence+passage"

  def seeds_for(self, ratio: int) -> tuple[int, ...]:
    return dict(self.ratio_seeds).get(ratio, self.seeds)

  def smallest_ratio(self) -> tuple[int, ...]:
    return (min(self.ratios),)


def datasets(cfg: GridConfig) -> list[tuple[str, str, str, int]]:
  """(dataset, reqa flag, path, main table) for each QA dataset given."""
  out = []
  if cfg.squad:
    out.append(("squad", "--squad", cfg.squad, 3))
  if cfg.nq:
    out.append(("nq", "--nq", cfg.nq, 4))
  return out


def _check(cfg: GridConfig) -> None:
  unknown = [s for s in cfg.systems + cfg.open_systems + (cfg.ablation_system,)
             if s not in SYSTEMS_BY_NAME]
  if unknown:
    raise ValueError(f"unknown system(s) {unknown}; known: {', '.join(SYSTEMS_BY_NAME)}")
  bad = [r for r in cfg.ratios if r not in contracts.REQA_RATIOS]
  if bad:
    raise ValueError(f"--ratios {bad}: ReQA splits exist for {contracts.REQA_RATIOS} only")
  if not datasets(cfg):
    raise ValueError("no QA data: give --squad FILE (and/or --nq FILE)")
  if any(t not in TABLES for t in cfg.tables):
    raise ValueError(f"--tables {cfg.tables}: expected a subset of {TABLES}")


@dataclasses.dataclass(frozen=True)
class Entry:
  """Where one table cell's numbers come from: an eval or bm25 cell and a split."""
  table: int
  dataset: str
  row: str            # system name (Tables 3, 4, 6) or variant label (Table 5)
  ratio: int
  seed: int
  cell: str           # eval or bm25 cell name
  split: str          # "test-<ratio>"


def plan(cfg: GridConfig) -> tuple[Plan, list[Entry]]:
  """Every cell the grid needs, in order, and the table entries that read their results."""
  _check(cfg)
  p = Plan()
  entries: list[Entry] = []
  pairs = p.add("pairs", "pairs/wiki",
                {"dump": cfg.dump, "heldout_percent": cfg.heldout_percent,
                 "flags": list(cfg.pairs_flags),
                 "squad_text": cfg.squad if cfg.pretrain_text_from_squad else ""})
  vocab = p.add("vocab", "vocab/wiki", {"vocab_size": cfg.vocab_size}, [pairs])
  main = Variant(cfg.preset, cfg.preset)

  def pretrain(system: System, variant: Variant) -> Optional[str]:
    if not system.pretrained:
      return None
    return p.add("pretrain", f"pretrain/{system.name}/{variant.slug}",
                 {"system": system.name, "tasks": system.tasks, "config": system.config,
                  "preset": variant.preset, "sets": list(variant.sets),
                  "steps": cfg.pretrain_steps}, [pairs, vocab])

  def finetune(system: System, variant: Variant, reqa: str, dataset: str, ratio: int,
               seed: int) -> str:
    init = pretrain(system, variant)
    return p.add("finetune", f"finetune/{dataset}/{system.name}/{variant.slug}/r{ratio}/s{seed}",
                 {"system": system.name, "config": system.config, "preset": variant.preset,
                  "sets": list(variant.sets), "ratio": ratio, "seed": seed,
                  "steps": cfg.finetune_steps, "doc_text": cfg.doc_text},
                 [vocab, reqa] + ([init] if init else []))

  def evaluate(model: str, reqa: str, ratio: int) -> str:
    return p.add("eval", f"eval/{p[reqa].name.split('/', 1)[1]}/"
                 f"{p[model].name.split('/', 2)[2]}",
                 {"split": f"test-{ratio}", "doc_text": cfg.doc_text}, [model, reqa])

  def bm25(reqa: str, ratios: Sequence[int]) -> str:
    return p.add("bm25", f"bm25/{p[reqa].name.split('/', 1)[1]}",
                 {"splits": [f"test-{r}" for r in sorted(set(ratios))],
                  "doc_text": cfg.doc_text}, [reqa])

  def table_rows(table: int, dataset: str, reqa: str, train_reqa: str,
                 systems: Sequence[str], variants: Sequence[Variant], ratios: Sequence[int],
                 bm25_ratios: Sequence[int]) -> None:
    for ratio in ratios:
      for name in systems:
        system = SYSTEMS_BY_NAME[name]
        if not system.dense:
          cell = bm25(reqa, bm25_ratios)
          entries.append(Entry(table, dataset, name, ratio, 0, cell, f"test-{ratio}"))
          continue
        for variant in variants:
          row = variant.label if table == 5 else name
          for seed in (cfg.seeds_for(ratio) if table != 5 else cfg.seeds):
            model = finetune(system, variant, train_reqa, dataset, ratio, seed)
            entries.append(Entry(table, dataset, row, ratio, seed,
                                 evaluate(model, reqa, ratio), f"test-{ratio}"))

  for dataset, flag, path, main_table in datasets(cfg):
    reqa = p.add("reqa", f"reqa/{dataset}", {"flag": flag, "path": path,
                                             "doc_text": cfg.doc_text})
    if main_table in cfg.tables:
      table_rows(main_table, dataset, reqa, reqa, cfg.systems, [main], cfg.ratios, cfg.ratios)
    if 5 in cfg.tables:
      table_rows(5, dataset, reqa, reqa, [cfg.ablation_system], ablation_variants(cfg.preset),
                 cfg.ablation_ratios or cfg.smallest_ratio(), cfg.ratios)
    if 6 in cfg.tables:
      open_reqa = p.add("reqa", f"reqa/{dataset}-open{cfg.open_candidates}",
                        {"flag": flag, "path": path, "doc_text": cfg.doc_text,
                         "extra_candidates": cfg.open_candidates}, [pairs])
      ratios = cfg.open_ratios or cfg.smallest_ratio()
      table_rows(6, dataset, open_reqa, reqa, cfg.open_systems, [main], ratios, ratios)
  return p, entries


# ---------------------------------------------------------------------------------------------
# Run-time estimate (rough, for --dry_run).
# ---------------------------------------------------------------------------------------------

#: Seconds per optimizer step on 2 cores per unit of batch x (q+d) x L x H^2 (calibrated on
#: cpu-small: about 0.6 s a step, DESIGN's "L2/H128 46 ex/s at q64/d288"), plus a floor.
_STEP_COST = 1.8e-9
_STEP_FLOOR = 0.01
_BOW_STEP = 0.15
#: Fixed costs: TensorFlow start, model build and SavedModel export per training cell; Beam
#: start and model loading per embedding job.
_TRAIN_OVERHEAD, _EVAL_OVERHEAD = 45.0, 40.0


def step_seconds(model: Mapping[str, Any], batch: int) -> float:
  if model.get("encoder") == "bow_mlp":
    return _BOW_STEP
  work = batch * (model["query_len"] + model["doc_len"]) * max(model["num_layers"], 1) \
      * model["hidden_dim"] ** 2
  return _STEP_FLOOR + _STEP_COST * work


def estimate_seconds(cell: Cell, model_cfg: Optional[Mapping[str, Any]] = None,
                     candidates: int = 11_000) -> float:
  """A rough wall-time of one cell on 2 cores. `model_cfg` is the resolved model config of a
  pretrain / finetune / eval cell (sections {"model", "data", "trainer"} as dicts)."""
  if cell.kind == "pairs":
    return 60.0
  if cell.kind == "vocab":
    return 20.0
  if cell.kind == "reqa":
    return 60.0 + cell.params.get("extra_candidates", 0) / 500.0
  if cell.kind == "bm25":
    return 40.0
  cfg = model_cfg
  m, t = cfg["model"], cfg["trainer"]
  if cell.kind == "pretrain":
    steps = cell.params["steps"] or t["steps"]
    return _TRAIN_OVERHEAD + steps * step_seconds(m, cfg["data"]["batch_size"])
  if cell.kind == "finetune":
    steps = cell.params["steps"] or t["finetune_steps"]
    return _TRAIN_OVERHEAD + steps * step_seconds(m, t["finetune_batch_size"])
  # eval: one forward pass over every candidate (about a third of a training example's cost).
  per_example = step_seconds(m, cfg["data"]["batch_size"]) / cfg["data"]["batch_size"] / 3
  return _EVAL_OVERHEAD + candidates * per_example


def format_seconds(seconds: float) -> str:
  if seconds < 90:
    return f"{seconds:.0f} s"
  if seconds < 5400:
    return f"{seconds / 60:.0f} min"
  return f"{seconds / 3600:.1f} h"


# ---------------------------------------------------------------------------------------------
# Tables in the paper's layout.
# ---------------------------------------------------------------------------------------------

RECALLS = tuple(f"R@{k}" for k in contracts.DEFAULT_KS)
TABLE_TITLES = {3: "Table 3: ReQA SQuAD, Recall@k (%) on the test side of each train/test "
                   "split",
                4: "Table 4: ReQA Natural Questions, Recall@k (%) on the test side of each "
                   "train/test split",
                5: "Table 5: ablation of layers and embedding dimension",
                6: "Table 6: open-domain retrieval (ReQA candidates + Wikipedia passages)"}


@dataclasses.dataclass(frozen=True)
class Aggregate:
  """Mean and (population) standard deviation over seeds of one row x ratio."""
  table: int
  dataset: str
  row: str
  ratio: int
  seeds: tuple[int, ...]
  mean: Mapping[str, float]
  std: Mapping[str, float]
  questions: int
  candidates: int


def aggregate(entries: Sequence[Entry], value_of: Mapping[tuple[str, str], dict],
              gold: str = "pair") -> list[Aggregate]:
  """Groups entries by (table, dataset, row, ratio) and averages their metrics over seeds.

  `value_of[(cell, split)]` is a metrics record (contracts.metrics_record + `gold`) of the
  `gold` convention; entries whose cell has no result yet are left out.
  """
  groups: dict[tuple, list[tuple[int, dict]]] = {}
  for e in entries:
    record = value_of.get((e.cell, e.split))
    if record is None:
      continue
    group = groups.setdefault((e.table, e.dataset, e.row, e.ratio), [])
    if all(seed != e.seed for seed, _ in group):
      group.append((e.seed, record))
  out = []
  for (table, dataset, row, ratio), items in groups.items():
    names = list(items[0][1]["metrics"])
    mean, std = {}, {}
    for n in names:
      values = [r["metrics"][n] for _, r in items if n in r["metrics"]]
      mu = sum(values) / len(values)
      mean[n] = mu
      std[n] = math.sqrt(sum((v - mu) ** 2 for v in values) / len(values))
    out.append(Aggregate(table, dataset, row, ratio, tuple(s for s, _ in items), mean, std,
                         items[0][1]["questions"], items[0][1]["candidates"]))
  return out


def _cell_text(agg: Optional[Aggregate], metric: str) -> str:
  if agg is None or metric not in agg.mean:
    return ""
  text = f"{100 * agg.mean[metric]:.2f}"
  if len(agg.seeds) > 1:
    text += f" ± {100 * agg.std[metric]:.2f}"
  return text


def ratio_label(ratio: int) -> str:
  return f"{ratio}%/{100 - ratio}%"


def markdown_table(aggs: Sequence[Aggregate], rows: Sequence[str], ratios: Sequence[int],
                   row_header: Sequence[str], row_cells: Mapping[str, Sequence[str]]) -> str:
  """Rows x (ratio x R@1..R@100), recalls in percent, `mean ± std` over seeds when > 1.

  `row_header` names the leading columns ("Encoder", "Pre-training"); `row_cells[row]` fills
  them.
  """
  by = {(a.row, a.ratio): a for a in aggs}
  head = list(row_header)
  for ratio in ratios:
    head += [f"{ratio_label(ratio)} {RECALLS[0]}"] + list(RECALLS[1:])
  lines = ["| " + " | ".join(head) + " |",
           "|" + "|".join(["---"] * len(row_header) + ["---:"] * (len(head) - len(row_header)))
           + "|"]
  for row in rows:
    if not any((row, r) in by for r in ratios):
      continue
    cells = list(row_cells[row])
    for ratio in ratios:
      cells += [_cell_text(by.get((row, ratio)), m) for m in RECALLS]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def table_rows_and_headers(table: int, cfg: GridConfig) -> tuple[list[str], list[str],
                                                                  dict[str, list[str]]]:
  """(row keys in order, leading column names, leading cells per row) of a table."""
  if table == 5:
    variants = ablation_variants(cfg.preset)
    layers = {v.label: v.label.split(" / ") for v in variants}
    return ([v.label for v in variants], ["Layers", "Embedding dim"],
            {k: [v[0], v[1] if len(v) > 1 else ""] for k, v in layers.items()})
  names = cfg.open_systems if table == 6 else cfg.systems
  order = [s.name for s in SYSTEMS if s.name in names]
  return (order, ["Encoder", "Pre-training"],
          {n: [SYSTEMS_BY_NAME[n].encoder, SYSTEMS_BY_NAME[n].pretraining] for n in order})
