"""A cell's identity: which kind of work, on which data, for which row, ratio and seed.

`str(CellId)` is the cell's name, the one the work directory, `done.json`, `cells.json`,
`results.json` and the README show ("finetune/squad/ict/base/r5/s0"); `CellId.parse` is its
inverse. Code reads a cell's dataset, row or seed from its CellId, never by splitting the name.

Each kind names the fields it has, in this order, in `LAYOUTS`:

    pairs/wiki+squad              dataset (the pre-training text, with what it adds)
    vocab/wiki, reqa/squad-open, heldout/demo, datastats/squad, bm25/squad
                                  dataset (a ReQA directory: "<qa set>" or "<qa set>-open")
    hardneg/squad/k1              dataset, k (hard negatives per pair)
    bm25/squad/bm25-cut           dataset, system (a BM25 row over what the towers read;
                                  whole-text BM25 is "bm25/squad", one cell for every row)
    pretrain/ict/base/s0          system, variant, seed
    finetune/squad/ict/base/r5/s0 dataset, system, variant, ratio, seed
    eval/ fuse/ bundle/...        the same as finetune
    beir/scifact/ict/base/s0      dataset (a grid's BEIR folder), system, variant, seed: a
                                  pre-trained row zero-shot on it; its BM25 flat reference
                                  is "beir/scifact/bm25-flat"

A name may stop before the end of its kind's layout: the demo's cells have no grid row
("pretrain/no-ssl", "eval/heldout/no-ssl").
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

_ROW = ("system", "variant")
#: The fields of each kind's name, in the name's order (the kinds in plan order: plan.KINDS).
LAYOUTS: dict[str, tuple[str, ...]] = {
    "pairs": ("dataset",), "vocab": ("dataset",), "reqa": ("dataset",),
    "heldout": ("dataset",), "datastats": ("dataset",),
    "hardneg": ("dataset", "k"),
    "bm25": ("dataset", "system"),  # system: a row cut as the towers read ("bm25-cut")
    "pretrain": (*_ROW, "seed"),
    **{kind: ("dataset", *_ROW, "ratio", "seed") for kind in ("finetune", "eval", "fuse",
                                                              "bundle")},
    "beir": ("dataset", *_ROW, "seed"),
}
#: The letter before a number field in the name ("r5", "s0", "k1").
_PREFIX = {"ratio": "r", "seed": "s", "k": "k"}
#: ReQA's open-domain directory of a QA set: its candidates plus the pre-training passages.
OPEN_SUFFIX = "-open"


@dataclasses.dataclass(frozen=True)
class CellId:
  """Which cell: its kind and, as `LAYOUTS[kind]` says, the fields its name holds (None: not
  part of this cell's name).

  Attributes:
    kind: one of LAYOUTS (plan.KINDS).
    dataset: the data the cell reads: a ReQA directory ("squad", "squad-open", the demo's
      "heldout") or a pre-training text ("wiki", "wiki+squad", "wiki+crop").
    system: the grid's row (the demo's model).
    variant: the model size (grid.Variant's name).
    ratio: the fine-tuning ratio in percent (0: zero-shot).
    seed: the seed of the whole training chain.
    k: hard negatives per fine-tuning pair.
  """
  kind: str
  dataset: Optional[str] = None
  system: Optional[str] = None
  variant: Optional[str] = None
  ratio: Optional[int] = None
  seed: Optional[int] = None
  k: Optional[int] = None

  def __post_init__(self):
    layout = LAYOUTS.get(self.kind)
    if layout is None:
      raise ValueError(f"cell kind {self.kind!r} is not one of {', '.join(LAYOUTS)}")
    given = [f for f in layout if getattr(self, f) is not None]
    if tuple(given) != layout[:len(given)]:
      raise ValueError(f"a {self.kind} cell names {', '.join(layout)} in this order, each "
                       f"only after the ones before it; got {', '.join(given) or 'none'}")
    stray = [f.name for f in dataclasses.fields(self)
             if f.name != "kind" and f.name not in layout and getattr(self, f.name) is not None]
    if stray:
      raise ValueError(f"a {self.kind} cell has no {', '.join(stray)} in its name")
    for f in ("dataset", "system", "variant"):
      value = getattr(self, f)
      if value is not None and (not value or "/" in value):
        raise ValueError(f"cell {f} {value!r}: empty or holds '/' (names are split on it)")

  @property
  def parts(self) -> tuple[str, ...]:
    """The name's parts after the kind ("squad", "ict", "base", "r5", "s0")."""
    return tuple(f"{_PREFIX.get(f, '')}{getattr(self, f)}" for f in LAYOUTS[self.kind]
                 if getattr(self, f) is not None)

  def __str__(self) -> str:
    return "/".join((self.kind, *self.parts))

  @property
  def is_open(self) -> bool:
    """Whether the dataset is an open-domain ReQA directory."""
    return bool(self.dataset) and self.dataset.endswith(OPEN_SUFFIX)

  @classmethod
  def parse(cls, name: str) -> "CellId":
    """The CellId whose str() is `name`; ValueError naming it when it is not a cell name."""
    kind, *parts = str(name).split("/")
    layout = LAYOUTS.get(kind)
    if layout is None or len(parts) > len(layout):
      raise ValueError(f"{name!r} is not a cell name (<kind>/<fields>, kind one of "
                       f"{', '.join(LAYOUTS)}; {kind!r} names at most "
                       f"{len(layout or ())} fields)")
    values = {}
    for field, part in zip(layout, parts):
      prefix = _PREFIX.get(field)
      if prefix is None:
        values[field] = part
      elif re.fullmatch(rf"{prefix}\d+", part):
        values[field] = int(part[len(prefix):])
      else:
        raise ValueError(f"{name!r} is not a cell name: {field} is {prefix}<number>, got "
                         f"{part!r}")
    parsed = cls(kind, **values)
    if str(parsed) != name:  # e.g. "r05": the name is not the canonical one
      raise ValueError(f"{name!r} is not a cell name (it reads back as {str(parsed)!r})")
    return parsed
