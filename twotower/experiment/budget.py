"""The budget check beside a reading's reversals (issue 37): where a verdict goes against the
paper, is it the method or the pre-training budget? A grid's `budget:` names the table that
holds its rows pre-trained longer and the variant that is each variant's longer budget; every
comparison whose verdict is against the claim is judged again on those rows (seed 0), and
reading.md prints that second verdict beside the first (readings.compare fills each
reversal's `longer`).

  budget:
    table: budget                        # the table holding the longer-budget rows
    label: "6,000 pre-training steps"    # how the reading names the longer budget
    longer: {base: steps6k, l4-d128: l4-d128-steps6k}

A row without pre-training (BM25, No-SSL, the untrained BoW-MLP) is the same row at any
budget; a pre-trained row (or a hybrid, or a row reusing another's pre-training) that the
budget table lacks leaves its comparison without a second verdict.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional, Sequence

from twotower.experiment import rule

#: The verdicts that go against a claim: the ones a longer budget might move.
AGAINST = (rule.CONTRADICTED, rule.SEEDS_AGAINST, rule.SEEN_AGAINST, rule.SIZE_MISSED)


@dataclasses.dataclass(frozen=True)
class BudgetCheck:
  """`budget:` of a grid file."""
  table: str
  longer: Mapping[str, str]     # variant -> the variant that pre-trains it longer
  label: str = "the longer budget"


def parse(raw: Optional[Mapping[str, Any]], where: str) -> Optional[BudgetCheck]:
  if raw is None:
    return None
  unknown = sorted(set(raw) - {f.name for f in dataclasses.fields(BudgetCheck)})
  if unknown:
    raise ValueError(f"{where}: budget: unknown field(s) {unknown}; known: "
                     "['label', 'longer', 'table']")
  longer = raw.get("longer") or {}
  if not raw.get("table") or not isinstance(longer, Mapping) or not longer:
    raise ValueError(f"{where}: budget needs `table` and `longer: {{variant: longer variant}}`")
  return BudgetCheck(str(raw["table"]), {str(k): str(v) for k, v in longer.items()},
                     str(raw.get("label") or BudgetCheck.label))


def check(budget: BudgetCheck, tables: Sequence[str], variants: Sequence[str],
          where: str) -> None:
  if budget.table not in tables:
    raise ValueError(f"{where}: budget table {budget.table!r} is not a table")
  bad = sorted({v for pair in budget.longer.items() for v in pair} - set(variants))
  if bad:
    raise ValueError(f"{where}: budget: variant(s) {bad} are not variants")


def longer_refs(spec: Any, budget: BudgetCheck, refs: Sequence[Any]) -> Optional[list]:
  """A comparison's rows at the longer budget; None where a row has none, or where neither
  row is the budget table's (the same comparison again, on seed 0 alone)."""
  longer = [longer_ref(spec, budget, ref) for ref in refs]
  if None in longer or all(r.table != budget.table for r in longer):
    return None
  return longer


def longer_ref(spec: Any, budget: BudgetCheck, ref: Any) -> Optional[Any]:
  """The row at the longer budget: the same row where it has no pre-training of its own, the
  budget table's longer variant (seed 0) where it has one; None where it has none."""
  system = spec.systems[ref.system]
  if system.kind == "bm25" or (system.kind == "dense" and not system.pretrained and
                               not system.pretrained_as):
    return dataclasses.replace(ref, seeds=(0,))
  variant = budget.longer.get(ref.variant)
  if variant is None:
    return None
  return dataclasses.replace(ref, variant=variant, table=budget.table, seeds=(0,))


def markdown(budget: BudgetCheck, comparisons: Sequence[Any], where: Callable[[Any], str],
             interval: Callable[[Any], str]) -> list[str]:
  """A claim's section's lines: each reversal (a readings.Comparison against its claim) and
  its verdict at the longer budget (its `longer`)."""
  found = [c for c in comparisons if c.longer is not None]
  if not found:
    return []
  lines = [f"Reversals at {budget.label} (the `{budget.table}` table, seed 0): whether more "
           "pre-training moved them.", ""]
  for c in found:
    longer = c.longer
    moved = "still against the claim" if longer.verdict in AGAINST else "moved"
    bar = interval(longer)
    lines.append(f"* {c.a.label} against {c.b.label}, {where(c)}, {c.metric}: "
                 f"{c.verdict} ({c.a.mean - c.b.mean:+.2f}); at {budget.label}: "
                 f"{longer.a.mean - longer.b.mean:+.2f}{'' if bar == '–' else f' {bar}'}, "
                 f"{longer.verdict}: **{moved}**.")
  return lines + [""]


def summary(comparisons: Sequence[Any], budget: BudgetCheck) -> str:
  """"2 of 3 reversal(s) rechecked at 6,000 steps still against the claim" (or "")."""
  found = [c.longer for c in comparisons if c.longer is not None]
  if not found:
    return ""
  still = sum(1 for c in found if c.verdict in AGAINST)
  return (f"{still} of {len(found)} reversal(s) rechecked at {budget.label} still against "
          "the claim")
