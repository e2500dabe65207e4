"""Each cell kind's parameters, typed: what its executor (experiment.cells) needs besides its
dependencies' directories, and what its key hashes (experiment.plan.Plan.add).

`key_params(params)` is the one serialization: the dict the key hashes and `done.json`
records. It is every field, except the fields that are left out when they hold a given value,
each marked where it is declared:

* `added_later(value)`: a field added after the committed grids ran (docs/results/), left
  out while it holds the value those runs had, so their cells keep their keys (a key that
  moved would make every restored cell, and all it feeds, run again). These are the hash-key
  branches of earlier code, in one place: `PairsParams.corpus`, `.text_cleanup`,
  `.recover_links` and `.exclude_qa`, `PretrainParams.export`, `Bm25Params.golds`,
  `.doc_pieces` and `.query_pieces`, `EvalParams.golds`, `FuseParams.untuned`, and
  `FinetuneParams.select` and `.carried_from`.
* `not_in_demo()`: a grid row's field the demo's cells have none of (None, left out).

A mapping field (`pairs`, `passages`, `config`) is the stage's settings as they are hashed
(the grid's partial pair settings, a model config's `to_dict()`), not re-typed here: a typed
copy would hash its defaults too and move every key.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Optional, Union

#: The gold conventions a result cell scores unless its parameters name others (the demo's
#: held-out benchmark has answer passages only).
GOLDS = ("pair", "sentence")

_LEFT_OUT_WHEN = "left_out_when"


def added_later(value: Any) -> Any:
  """A field added after the committed grids ran: left out of the key while it is `value`."""
  return dataclasses.field(default=value, metadata={_LEFT_OUT_WHEN: value})


def not_in_demo() -> Any:
  """A grid row's field (row, size, ratio, seed) that a demo cell has none of."""
  return dataclasses.field(default=None, metadata={_LEFT_OUT_WHEN: None})


def _plain(value: Any) -> Any:
  """JSON's shape of a field: tuples as lists, mappings as dicts."""
  if isinstance(value, tuple):
    return list(value)
  if isinstance(value, Mapping):
    return dict(value)
  return value


def key_params(params: "CellParams") -> dict:
  """The parameters as the cell's key hashes them and `done.json` keeps them."""
  out = {}
  for field in dataclasses.fields(params):
    value = getattr(params, field.name)
    if _LEFT_OUT_WHEN in field.metadata and value == field.metadata[_LEFT_OUT_WHEN]:
      continue
    out[field.name] = _plain(value)
  return out


@dataclasses.dataclass(frozen=True)
class PairsParams:
  """The pair pipeline (pipelines.wiki.pairs) on the dump (+ a corpus, + the QA file's articles)."""
  KIND: ClassVar[str] = "pairs"
  dump: str                       # the dump glob(s), comma separated
  squad_text: str                 # the SQuAD file whose articles join the text ("": none)
  pairs: Mapping[str, Any]        # PairConfig overrides (the grid's, + a row's own tasks)
  passages: Mapping[str, Any]     # PassageConfig overrides
  heldout_percent: float
  corpus: Optional[str] = added_later(None)   # extracted text beside the dump (None: none)
  text_cleanup: bool = added_later(False)     # the passage cleanup of issue 36
  recover_links: bool = added_later(False)    # links found as titles in text without links
  exclude_qa: str = added_later("")           # QA files whose articles are left out ("": none)

  def inputs(self) -> list[str]:
    """The inputs in the order the cell runs them: the dump, then the corpus (its page ids
    move into a range of their own by this position: pipelines.wiki.textdocs); the SQuAD articles
    (a dump: ids kept) come last, added by the executor."""
    return self.dump.split(",") + (self.corpus.split(",") if self.corpus else [])


@dataclasses.dataclass(frozen=True)
class VocabParams:
  KIND: ClassVar[str] = "vocab"
  vocab_size: int


@dataclasses.dataclass(frozen=True)
class ReqaParams:
  """A ReQA directory; open domain when `open_candidates` adds pre-training passages."""
  KIND: ClassVar[str] = "reqa"
  source: str                     # "squad" or "nq" (a ReqaConfig field)
  path: str
  doc_text: str
  open_candidates: int


@dataclasses.dataclass(frozen=True)
class HeldoutParams:
  """The demo's held-out benchmark: everything comes from its pairs dependency."""
  KIND: ClassVar[str] = "heldout"


@dataclasses.dataclass(frozen=True)
class DatastatsParams:
  KIND: ClassVar[str] = "datastats"
  dataset: str
  doc_text: str


@dataclasses.dataclass(frozen=True)
class HardnegParams:
  KIND: ClassVar[str] = "hardneg"
  k: int
  ratios: tuple[int, ...]         # every trained ratio of the whole grid
  doc_text: str


@dataclasses.dataclass(frozen=True)
class Bm25Params:
  """BM25 over a ReQA directory; with `doc_pieces` / `query_pieces`, over what the towers keep
  of each candidate and question (eval.bm25_cut; the cell then depends on the vocabulary)."""
  KIND: ClassVar[str] = "bm25"
  system: str
  splits: tuple[str, ...]
  doc_text: str
  golds: tuple[str, ...] = added_later(GOLDS)
  doc_pieces: int = added_later(0)      # 0: whole candidates (the committed grids' BM25)
  query_pieces: int = added_later(0)    # 0: whole questions


@dataclasses.dataclass(frozen=True)
class PretrainParams:
  KIND: ClassVar[str] = "pretrain"
  config: Mapping[str, Any]       # TrainingConfig.to_dict()
  system: Optional[str] = not_in_demo()
  variant: Optional[str] = not_in_demo()
  seed: Optional[int] = not_in_demo()
  export: bool = added_later(False)  # the towers exported (a zero-shot entry reads them)


@dataclasses.dataclass(frozen=True)
class FinetuneParams:
  KIND: ClassVar[str] = "finetune"
  system: str
  variant: str
  ratio: int
  seed: int
  config: Mapping[str, Any]       # TrainingConfig.to_dict()
  hard_negatives: int
  doc_text: str
  # The length chosen on the ratio's validation curve (FinetuneSelect.selection(): metric,
  # window, checkpoints, patience, min_questions); config's finetune_steps is then the cap.
  select: Optional[Mapping[str, Any]] = added_later(None)
  # {"ratio", "seed"} of the cell whose chosen length this one carries (its `length`
  # dependency), scaled by training questions; config's finetune_steps is then
  # row_configs.CARRIED_STEPS.
  carried_from: Optional[Mapping[str, int]] = added_later(None)


@dataclasses.dataclass(frozen=True)
class EvalParams:
  KIND: ClassVar[str] = "eval"
  system: str
  splits: tuple[str, ...]
  doc_text: str
  variant: Optional[str] = not_in_demo()
  ratio: Optional[int] = not_in_demo()
  seed: Optional[int] = not_in_demo()
  golds: tuple[str, ...] = added_later(GOLDS)


@dataclasses.dataclass(frozen=True)
class FuseParams:
  KIND: ClassVar[str] = "fuse"
  system: str
  method: str
  ratio: int
  seed: int
  splits: tuple[str, ...]
  tune_split: str
  tune_metric: str
  min_tune_questions: int
  untuned_weight: Optional[float]
  # Under `min_tune_questions`: "weight" (`untuned_weight`, the committed grids'), "carry" (a
  # larger ratio's tuned weight: the cell's `carry` dependency), "bm25" (the first row alone).
  untuned: str = added_later("weight")


@dataclasses.dataclass(frozen=True)
class BundleParams:
  KIND: ClassVar[str] = "bundle"
  doc_text: str


@dataclasses.dataclass(frozen=True)
class BeirParams:
  """A system of `twotower beir` on a grid's BEIR folder (experiment.beir_cells): BM25 flat
  (`system` "bm25-flat", no row), or a pre-trained row's towers zero-shot (its `model`
  dependency; `system` the row)."""
  KIND: ClassVar[str] = "beir"
  system: str
  path: str
  split: str
  metrics: tuple[str, ...]
  variant: Optional[str] = None
  seed: Optional[int] = None


CellParams = Union[PairsParams, VocabParams, ReqaParams, HeldoutParams, DatastatsParams,
                   HardnegParams, Bm25Params, PretrainParams, FinetuneParams, EvalParams,
                   FuseParams, BundleParams, BeirParams]
#: The parameters' class of each kind.
BY_KIND: dict[str, type] = {cls.KIND: cls for cls in CellParams.__args__}


def from_key_params(kind: str, values: Mapping[str, Any]) -> CellParams:
  """A kind's parameters from `key_params`' dict (a `done.json`'s "params")."""
  cls = BY_KIND[kind]
  return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})
