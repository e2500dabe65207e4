"""A grid definition, as data: `twotower/experiment/grids/<name>.yaml` -> `GridSpec`.

A grid names its systems (rows), model sizes (variants), tables (which rows at which ratios),
seeds, step counts and data settings. `twotower experiment --grid cpu-small` reads
`grids/cpu-small.yaml`; a path to a YAML file works too. Adding a row or a table is an edit
of the YAML, not of Python. Planning (experiment.plan) turns a GridSpec into cells.

    systems:                       # rows; each has a table label (encoder, pre-training)
      ict:  {encoder: Transformer, pretraining: ICT, tasks: [ict]}
      hybrid: {kind: hybrid, encoder: Hybrid, pretraining: ..., fuse: [bm25, ict]}
      bm25-cut: {kind: bm25, encoder: BM25, truncate: tower}  # over what the towers read
    variants:                      # model sizes: the grid's preset plus `--set` overrides
      l4-d256: {label: L4 / d256, set: [model.num_layers=4, model.embedding_dim=256]}
      steps6k: {label: 6,000 steps, pretrain_steps: 6000}   # the grid's preset, pre-trained longer
    tables:
      - {id: "3", title: ..., rows: [bm25, ict], ratios: [1, 5, 10, 80]}
      - {id: "5", layout: r100, rows: [{system: ict, variant: l4-d256}], ratios: [1, 5]}
    readings:                      # the paper's sentences, checked against the results
      - {id: mlm-over-no-ssl, sentence: "MLM only marginally improves over No-SSL",
         source: "paper, 4.2", table: "3", pairs: [[mlm, no-ssl]]}
    beir:                          # BEIR folders every pre-trained row is scored on zero-shot
      scifact: {path: ../shared/data/beir/scifact-train, split: train}   # or `name: PATH`

A reading's verdicts are computed by experiment.readings, never typed.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional


from twotower.core import contracts
from twotower.experiment import budget as budget_lib
from twotower.experiment import grid_files
from twotower.experiment.grid_files import as_tuple, known_fields
from twotower.experiment.grid_files import grid_names  # noqa: F401  (the shipped grids)
from twotower.experiment.finetune_length import FinetuneSelect, parse_select

SYSTEM_KINDS = ("dense", "bm25", "hybrid")
#: A hybrid's weight where its validation split is too small to tune (`System.untuned`).
UNTUNED = UNTUNED_WEIGHT, UNTUNED_CARRY, UNTUNED_BM25 = ("weight", "carry", "bm25")
#: A BM25 row's text: whole ("") or what the towers keep of it ("tower").
TRUNCATIONS = ("", "tower")
TABLE_LAYOUTS = ("recall", "r100")
CLAIM_DIRECTIONS = ("higher", "lower")
#: The key of `seeds` for every ratio the grid names no seeds for (YAML: `default`).
DEFAULT_SEEDS = -1
BASE_VARIANT = "base"


@dataclasses.dataclass(frozen=True)
class Variant:
  """A model size: the grid's preset plus `section.field=value` overrides; `pretrain_steps`
  (> 0) pre-trains this variant's rows for that many steps instead of the grid's
  `training.pretrain_steps` (the budget table: the same rows at a longer budget); `seeds`
  narrows the grid's seeds for this variant's rows (() = the grid's)."""
  name: str
  label: str
  overrides: tuple[str, ...] = ()
  pretrain_steps: int = 0
  seeds: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class System:
  """A row: how its model is pre-trained and fine-tuned (or BM25, or a hybrid of two rows).

  Attributes:
    name: the row's key, e.g. "ict+bfs+wlp".
    encoder, pretraining: the table's leading columns.
    kind: "dense" (two towers), "bm25", or "hybrid" (fusion of two rows' runs).
    tasks: pre-training tasks ("ict", "bfs", "wlp"; or "mlm"); () = no pre-training.
    model: a model preset used instead of the grid's (BoW-MLP), sized like the variant.
    pretrain_overrides / finetune_overrides: config overrides of each phase.
    pretrain_batch: a pre-training batch other than the preset's; the steps shrink so that
      as many examples are seen (the large-batch row).
    pretrained_as: reuse another row's pre-training (rows that differ in fine-tuning only).
    hard_negatives: BM25 hard negatives per fine-tuning question.
    pretrain_text_from_squad: pre-train with (True) or without (False) the QA file's
      articles in the pre-training text, against the grid's `data` default (None): the
      control row that shows what the test articles' text is worth.
    pairs: pair pipeline settings over the grid's `data.pairs`, for a row pre-trained on a
      task the grid's own pair set does not make (Contriever's crop: `crop_per_page`); the
      row gets a second pair set of the same text, and the grid's vocabulary.
    fuse: rows of a hybrid: the first (BM25), then its partner, or several candidate
      partners of which the validation split chooses one; fusion: its method.
    tune_metric, min_tune_questions, untuned, untuned_weight: a hybrid's weight maximises
      `tune_metric` on the validation split (eval.fusion; `worst_gain_over_first` cannot
      fall below BM25 there); a split with fewer questions than `min_tune_questions` tunes
      nothing, and `untuned` says what it gets: "weight" (`untuned_weight` and the first
      partner), "carry" (the nearest larger ratio's tuned weight and partner, same seed;
      BM25 alone where none was tuned) or "bm25" (BM25 alone).
    truncate: a BM25 row's text: "" (whole candidates and questions) or "tower": what the
      grid's towers keep of them (eval.bm25_cut: `[CLS] title [SEP] text [SEP]` cut to
      `doc_pieces` word pieces, questions to `query_pieces`; 0 = the grid model's doc_len /
      query_len), so that BM25 and the towers are compared on the same words.
    seeds: the seeds this row runs at, of the grid's (() = all of them): a costly row the
      readings need once, beside rows they compare over three seeds.
    note: a line for the README (what the row is, where it departs from the paper).
    backend: the Keras backend its towers train on ("tensorflow" or "jax"; "" = the
      config's, TensorFlow by default): `runtime.backend` of both phases, so its cells'
      keys name it and its training runs in a JAX process (model/jax_launch.py).
  """
  name: str
  encoder: str
  pretraining: str
  kind: str = "dense"
  tasks: tuple[str, ...] = ()
  model: str = ""
  pretrain_overrides: tuple[str, ...] = ()
  finetune_overrides: tuple[str, ...] = ()
  pretrain_batch: int = 0
  pretrained_as: str = ""
  hard_negatives: int = 0
  pretrain_text_from_squad: Optional[bool] = None
  pairs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  fuse: tuple[str, ...] = ()
  fusion: str = "interpolate"
  tune_metric: str = contracts.MEAN_RECALL
  min_tune_questions: int = 50
  untuned_weight: float = 0.5
  untuned: str = UNTUNED_WEIGHT
  truncate: str = ""
  doc_pieces: int = 0
  query_pieces: int = 0
  seeds: tuple[int, ...] = ()
  note: str = ""
  caveat: str = ""   # printed beside every verdict of a reading that reads the row
  backend: str = ""

  @property
  def pretrained(self) -> bool:
    return bool(self.tasks)

  @property
  def label(self) -> str:
    """The row in one phrase, where a table has its two leading columns: "Transformer, ICT";
    "BM25" for a pre-training of "-" (none), "BM25 (the towers' 128 / 32 pieces)" for one of
    "- (...)" (none, and a note)."""
    if self.pretraining in ("", "-"):
      return self.encoder
    if self.pretraining.startswith("- "):
      return f"{self.encoder} {self.pretraining[2:].strip()}"
    return f"{self.encoder}, {self.pretraining}"


@dataclasses.dataclass(frozen=True)
class Row:
  system: str
  variant: str = BASE_VARIANT


@dataclasses.dataclass(frozen=True)
class Table:
  """Rows x ratios. `layout` "recall": R@1..R@100 per ratio (Tables 3, 4, 6); "r100": one
  R@100 column per ratio (Table 5). `open_domain`: candidates + the open-domain pool."""
  id: str
  title: str
  rows: tuple[Row, ...]
  ratios: tuple[int, ...]
  layout: str = "recall"
  open_domain: bool = False
  all_seeds: bool = True   # False: seed 0 only (ablations)
  note: str = ""


@dataclasses.dataclass(frozen=True)
class RowRef:
  """One side of a comparison: a table's row, optionally on some of its seeds only."""
  system: str
  variant: str = BASE_VARIANT
  table: str = ""                # "" = the claim's table
  seeds: tuple[int, ...] = ()    # () = every seed the results hold


@dataclasses.dataclass(frozen=True)
class Claim:
  """A sentence (the paper's, or one of ours) that the results can confirm or contradict:
  each pair's first row is expected above (`expect: higher`) or below (`lower`) its second,
  at each ratio, on each metric. The verdicts come from experiment.readings.

  Attributes:
    id: a short key, e.g. "mlm-over-no-ssl".
    sentence: the sentence, quoted (the paper's words where `source` is the paper).
    source: where it comes from, e.g. "paper, section 4.2" or "ours, issue 12".
    pairs: (A, B) rows compared.
    table: the table the rows are read from (a RowRef may name another).
    ratios: () = every ratio of the table.
    metrics: recalls or MRR, as the result records name them ("R@100").
    expect: "higher" (A above B) or "lower".
    qualifier, min_gain, max_gain, min_ratio: the sentence's word of size ("only
      marginally") and its threshold, tested (experiment.verdict_rule.Size): the gain (A - B; B - A
      for "lower") in points at least / at most, the ratio (A / B; B / A) at least.
    caveat: what the verdicts rest on that the numbers do not show (a confound), printed
      beside them.
  """
  id: str
  sentence: str
  source: str
  pairs: tuple[tuple[RowRef, RowRef], ...]
  table: str = "3"
  ratios: tuple[int, ...] = ()
  metrics: tuple[str, ...] = ("R@100",)
  expect: str = "higher"
  qualifier: str = ""
  min_gain: Optional[float] = None
  max_gain: Optional[float] = None
  min_ratio: Optional[float] = None
  caveat: str = ""


@dataclasses.dataclass(frozen=True)
class DataSpec:
  """The data every cell shares."""
  pairs: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # PairConfig fields
  passages: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # PassageConfig
  heldout_percent: float = 5.0
  vocab_size: int = 8000
  pretrain_text_from_squad: bool = False
  doc_text: str = "sentence+passage"
  open_candidates: int = -1   # -1: every (sentence, passage) of the pre-training dumps
  # The pair pipeline's passage cleanup (rendered templates; reference sections, stubs and
  # disambiguation pages left out: `twotower pairs --text_cleanup`). Off unless the grid file
  # turns it on: the committed grids were run before it, and a cell re-made from them must
  # give the same floats; turning it on changes the pairs cells' keys, so nothing is reused.
  text_cleanup: bool = False
  # Links found as other pages' titles in text without links (`twotower pairs
  # --recover_links`): WLP pairs from the extracted-text corpus. Off unless the grid file turns
  # it on, for the same reason as `text_cleanup`.
  recover_links: bool = False
  # The QA files' articles left out of the pre-training text, whichever input holds them
  # (`twotower pairs --exclude_qa`: by title, redirect and paragraph). Off unless the grid
  # file turns it on, for the same reason as `text_cleanup`; never for the text a row adds
  # them to on purpose (`pretrain_text_from_squad`: the control row).
  exclude_qa_articles: bool = False


@dataclasses.dataclass(frozen=True)
class BeirDataset:
  """A BEIR folder (`twotower beir --data`) on which every pre-trained row is scored zero-shot,
  beside BM25 flat (experiment.beir_cells). `name` names its cells ("beir/<name>/..."), its
  table and its files; `path` is read as the command line's paths are (from the working
  directory); `split` is the qrels split scored."""
  name: str
  path: str
  split: str = "test"


@dataclasses.dataclass(frozen=True)
class GridSpec:
  name: str
  description: str
  model: str                                   # the grid's model preset
  data: DataSpec
  pretrain_steps: int                          # 0: the preset's trainer.steps
  finetune_steps: Mapping[int, int]            # per ratio; a missing ratio: the preset's
  ratios: tuple[int, ...]
  seeds: Mapping[int, tuple[int, ...]]         # per ratio; key DEFAULT_SEEDS = the others
  variants: Mapping[str, Variant]
  systems: Mapping[str, System]
  tables: tuple[Table, ...]
  readings: tuple[Claim, ...] = ()
  # None: every row fine-tunes `finetune_steps` (the committed grids).
  finetune_select: Optional[FinetuneSelect] = None
  # The rows pre-trained longer that a reading's reversals are judged again on (None: none).
  budget: Optional[budget_lib.BudgetCheck] = None
  # The grid whose reading this one's is compared with (reading_changes.py; its results
  # folder beside this grid's), "" for none.
  reading_baseline: str = ""
  # BEIR folders every pre-trained row is scored on zero-shot (() = none: the grid's cells and
  # files are those of a grid without the key).
  beir: tuple[BeirDataset, ...] = ()

  def seeds_for(self, ratio: int) -> tuple[int, ...]:
    return tuple(self.seeds.get(ratio, self.seeds.get(DEFAULT_SEEDS, (0,))))

  def row_seeds(self, ratio: int, system: str, variant: str = BASE_VARIANT) -> tuple[int, ...]:
    """The seeds a row runs at a ratio: the grid's, narrowed by the system's and the
    variant's own `seeds` where they set them."""
    narrow = [s for s in (self.systems[system].seeds, self.variants[variant].seeds) if s]
    return tuple(s for s in self.seeds_for(ratio) if all(s in n for n in narrow))

  def finetune_steps_for(self, ratio: int) -> int:
    return int(self.finetune_steps.get(ratio, 0))

  def finetune_length_text(self, ratio: int) -> str:
    """A ratio's fine-tuning length as the README states it."""
    chosen = self.finetune_select.describe(ratio) if self.finetune_select else None
    return chosen or str(self.finetune_steps_for(ratio) or "preset")

  def pretraining_of(self, system: System) -> System:
    """The row whose pre-training `system` reuses (itself unless `pretrained_as`)."""
    return self.systems[system.pretrained_as] if system.pretrained_as else system

  def pairs_of(self, system: System) -> dict:
    """The pair settings `system`'s pre-training reads beyond the grid's (empty: the grid's
    own pair set)."""
    return dict(self.pretraining_of(system).pairs)

  def squad_text_in_pretraining(self, system: System) -> bool:
    """Whether `system`'s pre-training text holds the QA file's articles."""
    own = self.pretraining_of(system).pretrain_text_from_squad
    return self.data.pretrain_text_from_squad if own is None else own


# ---------------------------------------------------------------------------------------------
# Loading.
# ---------------------------------------------------------------------------------------------


def _system(name: str, raw: Mapping[str, Any], where: str) -> System:
  raw = dict(raw or {})
  raw.setdefault("encoder", name)
  raw.setdefault("pretraining", "-")
  for key in ("tasks", "pretrain_overrides", "finetune_overrides", "fuse"):
    raw[key] = as_tuple(raw.get(key))
  raw["seeds"] = tuple(int(s) for s in as_tuple(raw.get("seeds")))
  system = System(name=name, **known_fields(raw, System, f"{where}: system {name!r}"))
  if system.kind not in SYSTEM_KINDS:
    raise ValueError(f"{where}: system {name!r} kind {system.kind!r}; expected one of "
                     f"{SYSTEM_KINDS}")
  if system.truncate not in TRUNCATIONS:
    raise ValueError(f"{where}: system {name!r} truncate {system.truncate!r}; expected "
                     f"`tower` (what the towers read) or nothing (whole texts)")
  if (system.truncate or system.doc_pieces or system.query_pieces) and system.kind != "bm25":
    raise ValueError(f"{where}: system {name!r}: truncate / doc_pieces / query_pieces are a "
                     "BM25 row's (a tower's lengths are its model's doc_len / query_len)")
  if (system.doc_pieces or system.query_pieces) and system.truncate != "tower":
    raise ValueError(f"{where}: system {name!r}: doc_pieces / query_pieces cut the text as "
                     "the towers do; say `truncate: tower` with them")
  if system.doc_pieces < 0 or system.query_pieces < 0:
    raise ValueError(f"{where}: system {name!r}: doc_pieces / query_pieces below 0")
  from twotower.model.config import BACKENDS  # pylint: disable=import-outside-toplevel
  if system.backend and (system.kind != "dense" or system.backend not in BACKENDS):
    raise ValueError(f"{where}: system {name!r} backend {system.backend!r}: a dense row "
                     f"trains on one of {BACKENDS}")
  return system


def _table(raw: Mapping[str, Any], where: str) -> Table:
  raw = dict(raw)
  rows = []
  for item in raw.pop("rows", ()):
    rows.append(Row(item) if isinstance(item, str) else Row(**item))
  raw["ratios"] = tuple(int(r) for r in as_tuple(raw.get("ratios")))
  raw["id"] = str(raw.get("id", ""))
  table = Table(rows=tuple(rows), **known_fields(raw, Table, f"{where}: table"))
  if table.layout not in TABLE_LAYOUTS:
    raise ValueError(f"{where}: table {table.id} layout {table.layout!r}; expected one of "
                     f"{TABLE_LAYOUTS}")
  return table


def _row_ref(raw: Any, where: str) -> RowRef:
  """`ict` (the base variant) or `{system: ict, variant: l4-d128, table: "5", seeds: [0]}`."""
  if isinstance(raw, str):
    return RowRef(raw)
  raw = known_fields(raw or {}, RowRef, where)
  raw["table"] = str(raw.get("table", ""))
  raw["seeds"] = tuple(int(s) for s in as_tuple(raw.get("seeds")))
  return RowRef(**raw)


def _claim(raw: Mapping[str, Any], where: str) -> Claim:
  raw = dict(raw)
  where = f"{where}: reading {raw.get('id', '?')!r}"
  pairs = []
  for pair in raw.pop("pairs", ()) or ():
    if not isinstance(pair, (list, tuple)) or len(pair) != 2:
      raise ValueError(f"{where}: each of `pairs` is [A, B]; got {pair!r}")
    pairs.append((_row_ref(pair[0], where), _row_ref(pair[1], where)))
  raw["table"] = str(raw.get("table", "3"))
  raw["ratios"] = tuple(int(r) for r in as_tuple(raw.get("ratios")))
  raw["metrics"] = tuple(str(m) for m in as_tuple(raw.get("metrics", "R@100")))
  claim = Claim(pairs=tuple(pairs), **known_fields(raw, Claim, where))
  if not claim.pairs:
    raise ValueError(f"{where}: no `pairs` to compare")
  if claim.expect not in CLAIM_DIRECTIONS:
    raise ValueError(f"{where}: expect {claim.expect!r}; expected one of {CLAIM_DIRECTIONS}")
  bounds = (claim.min_gain, claim.max_gain, claim.min_ratio)
  if any(x is not None and not isinstance(x, (int, float)) for x in bounds) or (
      claim.min_gain is not None and claim.max_gain is not None and
      claim.min_gain > claim.max_gain) or (claim.min_ratio is not None and
                                           claim.min_ratio <= 0):
    raise ValueError(f"{where}: min_gain / max_gain / min_ratio {bounds}: numbers, "
                     "min_gain <= max_gain, min_ratio > 0")
  if bool(claim.qualifier) != any(x is not None for x in bounds):
    raise ValueError(f"{where}: a `qualifier` and its threshold (min_gain, max_gain or "
                     "min_ratio) come together")
  return claim


def _beir(raw: Any, where: str) -> tuple[BeirDataset, ...]:
  """`beir: {name: PATH}` or `beir: {name: {path: PATH, split: SPLIT}}` (split: test)."""
  if raw is None:
    return ()
  if not isinstance(raw, Mapping):
    raise ValueError(f"{where}: beir is {{name: path}} or {{name: {{path, split}}}}; got "
                     f"{raw!r}")
  out = []
  for name, value in raw.items():
    fields = {"path": value} if isinstance(value, str) else dict(value or {})
    fields = known_fields(fields, ("path", "split"), f"{where}: beir {name!r}")
    name = str(name)
    if not name or "/" in name or not fields.get("path"):
      raise ValueError(f"{where}: beir {name!r}: a name without '/' and a `path` (a BEIR "
                       "folder)")
    out.append(BeirDataset(name, str(fields["path"]), str(fields.get("split", "test"))))
  return tuple(out)


def parse(name: str, raw: Mapping[str, Any]) -> GridSpec:
  """A GridSpec from the YAML's mapping; every reference is checked."""
  where = f"grid {name}"
  variants = {BASE_VARIANT: Variant(BASE_VARIANT, raw.get("model", ""))}
  for vname, v in (raw.get("variants") or {}).items():
    v = dict(v or {})
    if vname == BASE_VARIANT and v.get("set"):
      raise ValueError(f"{where}: variant {BASE_VARIANT!r} is the preset itself; it takes a "
                       f"label only (no 'set')")
    known_fields(v, ("label", "set", "pretrain_steps", "seeds"), f"{where}: variant {vname!r}")
    steps = v.get("pretrain_steps", 0)
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
      raise ValueError(f"{where}: variant {vname!r}: pretrain_steps {steps!r}; expected a "
                       "whole number of steps (0: the grid's)")
    variants[vname] = Variant(vname, str(v.get("label", vname)), as_tuple(v.get("set")), steps,
                              tuple(int(s) for s in as_tuple(v.get("seeds"))))
  systems = {n: _system(n, s, where) for n, s in (raw.get("systems") or {}).items()}
  tables = tuple(_table(t, where) for t in raw.get("tables") or ())
  seeds_raw = raw.get("seeds") or {"default": [0]}
  seeds = {(DEFAULT_SEEDS if k == "default" else int(k)): tuple(int(s) for s in as_tuple(v))
           for k, v in seeds_raw.items()}
  training = known_fields(raw.get("training") or {}, (
      "pretrain_steps", "finetune_steps", "finetune_select"), f"{where}: training")
  spec = GridSpec(
      name=name, description=str(raw.get("description", "")).strip(),
      model=str(raw.get("model", "")),
      data=DataSpec(**known_fields(raw.get("data") or {}, DataSpec, f"{where}: data")),
      pretrain_steps=int(training.get("pretrain_steps", 0)),
      finetune_steps={int(k): int(v) for k, v in (training.get("finetune_steps") or {}).items()},
      ratios=tuple(int(r) for r in as_tuple(raw.get("ratios")) or contracts.REQA_RATIOS),
      seeds=seeds, variants=variants, systems=systems, tables=tables,
      readings=tuple(_claim(c, where) for c in raw.get("readings") or ()),
      finetune_select=parse_select(training.get("finetune_select"), where),
      budget=budget_lib.parse(raw.get("budget"), where),
      reading_baseline=str(raw.get("reading_baseline", "")),
      beir=_beir(raw.get("beir"), where))
  check(spec)
  return spec


def load(name_or_path: str) -> GridSpec:
  """The GridSpec of a grid name (grids/<name>.yaml) or a YAML file. A grid that says
  `extends: <grid>` is that grid with its own keys laid over it (mappings such as `data`,
  `systems` and `variants` merged key by key, lists such as `tables` and `readings`
  replaced, or appended to with `tables+:`)."""
  return parse(*grid_files.read(name_or_path))


def check(spec: GridSpec) -> None:
  """Every row, variant, reused pre-training and fused row exists; ratios are ReQA's (or
  0, zero-shot)."""
  where = f"grid {spec.name}"
  if not spec.model:
    raise ValueError(f"{where}: no `model` preset")
  bad = [r for r in spec.ratios
         if r not in contracts.REQA_RATIOS and r != contracts.ZERO_SHOT_RATIO]
  if bad:
    raise ValueError(f"{where}: ratios {bad}; ReQA splits exist for {contracts.REQA_RATIOS} "
                     f"(and {contracts.ZERO_SHOT_RATIO}: zero-shot, every question)")
  for s in spec.systems.values():
    refs = list(s.fuse) + ([s.pretrained_as] if s.pretrained_as else [])
    missing = [r for r in refs if r not in spec.systems]
    if missing:
      raise ValueError(f"{where}: system {s.name!r} refers to unknown system(s) {missing}")
    if s.kind == "hybrid" and len(s.fuse) < 2:
      raise ValueError(f"{where}: hybrid {s.name!r} needs `fuse: [first, second, ...]`")
    if s.untuned not in UNTUNED:
      raise ValueError(f"{where}: system {s.name!r} untuned {s.untuned!r}; expected {UNTUNED}")
    if s.kind == "hybrid" and len(s.fuse) > 2 and s.fusion != "interpolate":
      raise ValueError(f"{where}: hybrid {s.name!r} chooses among {len(s.fuse) - 1} partner "
                       "rows by tuning an interpolation; `fusion: rrf` takes one partner")
  every_seed = {seed for seeds in spec.seeds.values() for seed in seeds}
  for kind, name, seeds in ([("system", s.name, s.seeds) for s in spec.systems.values()] +
                            [("variant", v.name, v.seeds) for v in spec.variants.values()]):
    if set(seeds) - every_seed:
      raise ValueError(f"{where}: {kind} {name!r} seeds {sorted(set(seeds) - every_seed)} are "
                       f"not among the grid's seeds {sorted(every_seed)}")
  for s in spec.systems.values():
    # A hybrid fuses its partners' runs of its own seed: each partner must run at them.
    for partner in s.fuse:
      narrow = spec.systems[partner].seeds
      if narrow and (not s.seeds or set(s.seeds) - set(narrow)):
        raise ValueError(f"{where}: hybrid {s.name!r} runs at seeds "
                         f"{list(s.seeds) or sorted(every_seed)}, its partner {partner!r} "
                         f"only at {list(narrow)}; narrow the hybrid's `seeds` or its `fuse`")
  for t in spec.tables:
    for row in t.rows:
      if row.system not in spec.systems:
        raise ValueError(f"{where}: table {t.id} row {row.system!r} is not a system")
      if row.variant not in spec.variants:
        raise ValueError(f"{where}: table {t.id} variant {row.variant!r} is not a variant")
    extra = [r for r in t.ratios if r not in spec.ratios]
    if extra:
      raise ValueError(f"{where}: table {t.id} ratios {extra} are not in the grid's ratios")
  if spec.budget is not None:
    budget_lib.check(spec.budget, [t.id for t in spec.tables], list(spec.variants), where)
  if spec.finetune_select is not None:
    spec.finetune_select.check(
        [r for r in spec.ratios if r != contracts.ZERO_SHOT_RATIO], where)
  tables = {t.id: t for t in spec.tables}
  for claim in spec.readings:
    for ref in (r for pair in claim.pairs for r in pair):
      table = tables.get(ref.table or claim.table)
      if table is None:
        raise ValueError(f"{where}: reading {claim.id!r} reads table "
                         f"{ref.table or claim.table!r}, which the grid does not have")
      if (ref.system, ref.variant) not in {(r.system, r.variant) for r in table.rows}:
        raise ValueError(f"{where}: reading {claim.id!r}: table {table.id} has no row "
                         f"{ref.system!r} ({ref.variant})")


def restrict(spec: GridSpec, *, ratios: Optional[tuple[int, ...]] = None,
             tables: Optional[tuple[str, ...]] = None,
             systems: Optional[tuple[str, ...]] = None) -> GridSpec:
  """The same grid on fewer ratios, tables or rows (command-line narrowing)."""
  # The grid's own ratios stay: the cells that serve every ratio at once (BM25 over every
  # split, hard negatives) must be the whole grid's, so that a narrowed run's results count
  # when the whole grid is run or rendered later.
  keep_ratios = tuple(r for r in spec.ratios if ratios is None or r in ratios)
  out = []
  for t in spec.tables:
    if tables is not None and t.id not in tables:
      continue
    rows = tuple(r for r in t.rows if systems is None or r.system in systems)
    t_ratios = tuple(r for r in t.ratios if r in keep_ratios)
    if rows and t_ratios:
      out.append(dataclasses.replace(t, rows=rows, ratios=t_ratios))
  return dataclasses.replace(spec, tables=tuple(out))
