"""The budget check beside a reading's verdicts against the paper (issue 37): where one goes
against the paper (a reversal, or a gain short of the size the paper's word asks for), is it
the method or the pre-training budget? A grid's `budget:` names the table that holds its rows
pre-trained longer and the variant that is each variant's longer budget; every comparison
whose verdict is against the claim is judged again on those rows (seed 0), and reading.md
prints that second verdict beside the first, with the first's seed 0 where it is a mean over
seeds (readings.compare fills each such comparison's `longer`).

  budget:
    table: budget                        # the table holding the longer-budget rows
    label: "6,000 pre-training steps"    # how the reading names the longer budget
    longer: {base: steps6k, l4-d128: l4-d128-steps6k}

A row without pre-training (BM25, No-SSL, the untrained BoW-MLP) is the same row at any
budget; a pre-trained row (or a hybrid, or a row reusing another's pre-training) that the
budget table lacks, at the reversal's ratio, leaves its comparison without a second verdict,
and the reading says so beside it (`NO_ROW`; `OTHER_POOL` where the budget table ranks
another candidate pool than the reversal's table: an open-domain verdict is not rechecked on
closed-pool rows), as it says of a second verdict whose cells have
not run yet (`PENDING`) and of a reversal between two rows without pre-training
(`UNTRAINED`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional, Sequence

from twotower.experiment import grid_files, verdict_rule as rule

#: The verdicts that go against a claim: the ones a longer budget might move.
AGAINST = (rule.CONTRADICTED, rule.SEEDS_AGAINST, rule.SEEN_AGAINST, rule.SIZE_MISSED)
#: Why a reversal has no verdict at the longer budget (a Comparison's `recheck`).
PENDING = "its cells at the longer budget have not run yet"
NO_ROW = "the budget table has no row pre-trained longer for it at this ratio"
OTHER_POOL = ("the budget table ranks another candidate pool (closed or open-domain) than "
              "this comparison's rows")
UNTRAINED = "neither row is pre-trained, so no pre-training budget moves it"


@dataclasses.dataclass(frozen=True)
class BudgetCheck:
  """`budget:` of a grid file."""
  table: str
  longer: Mapping[str, str]     # variant -> the variant that pre-trains it longer
  label: str = "the longer budget"


def parse(raw: Optional[Mapping[str, Any]], where: str) -> Optional[BudgetCheck]:
  if raw is None:
    return None
  grid_files.known_fields(raw, BudgetCheck, f"{where}: budget")
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


def recheck(spec: Any, budget: BudgetCheck, comparison: Any, refs: Sequence[Any],
            judge_again: Callable[[list], Any]) -> Any:
  """A reversal (a readings.Comparison) with its verdict at the longer budget (`longer`,
  from `judge_again(the rows at the longer budget)`), or with why it has none (`recheck`:
  UNTRAINED, NO_ROW, OTHER_POOL, PENDING)."""
  longer = [longer_ref(spec, budget, ref) for ref in refs]
  if None not in longer and all(r.table != budget.table for r in longer):
    return dataclasses.replace(comparison, recheck=UNTRAINED)
  table = next((t for t in spec.tables if t.id == budget.table), None)
  held = {(row.system, row.variant) for row in table.rows} if table else set()
  if None in longer or comparison.ratio not in (table.ratios if table else ()) or any(
      r.table == budget.table and (r.system, r.variant) not in held for r in longer):
    return dataclasses.replace(comparison, recheck=NO_ROW)
  # Each row at the longer budget must rank the candidates its row ranked: the budget
  # table's closed-pool row says nothing of an open-domain table's verdict.
  tables = {t.id: t for t in spec.tables}
  home = next((c.table for c in spec.readings if c.id == comparison.claim), "")

  def open_domain(ref: Any) -> bool:
    t = tables.get(ref.table or home)
    return bool(t and t.open_domain)
  if any(open_domain(r) != open_domain(l) for r, l in zip(refs, longer)):
    return dataclasses.replace(comparison, recheck=OTHER_POOL)
  again = judge_again(longer)
  return dataclasses.replace(comparison, longer=again, recheck="" if again else PENDING)


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
  found = [c for c in comparisons if c.longer is not None or c.recheck]
  if not found:
    return []
  lines = [f"Verdicts against the claim (a reversal, or a gain short of its size) at "
           f"{budget.label} (the `{budget.table}` table, seed 0): whether more pre-training "
           "moved them. Beside a mean over seeds, its seed 0, the run the longer budget "
           "repeats.", ""]
  for c in found:
    gap = f"{c.a.mean - c.b.mean:+.2f}"
    seed0 = [_at_seed0(side) for side in (c.a, c.b)]
    if None not in seed0 and max(len(c.a.values), len(c.b.values)) > 1:
      gap += f"; seed 0: {seed0[0] - seed0[1]:+.2f}"
    first = (f"* {c.a.label} against {c.b.label}, {where(c)}, {c.metric}: "
             f"{c.verdict} ({gap}); at {budget.label}: ")
    longer = c.longer
    if longer is None:
      lines.append(f"{first}not checked: {c.recheck}.")
      continue
    moved = "still against the claim" if longer.verdict in AGAINST else "moved"
    bar = interval(longer)
    # One seed's verdict is its point estimate: say so where question sampling alone could
    # flip its sign, so "still against" a tie does not read like a measured reversal.
    tie = "; its interval crosses 0, so the sign is not resolved" if _crosses_zero(longer) else ""
    lines.append(f"{first}{longer.a.mean - longer.b.mean:+.2f}"
                 f"{'' if bar == '–' else f' {bar}'}, {longer.verdict}: **{moved}**{tie}.")
  return lines + [""]


def _crosses_zero(comparison: Any) -> bool:
  """Whether a comparison's per-question bootstrap interval holds 0 (False without ranks)."""
  boot = comparison.boot
  return boot is not None and boot.low <= 0 <= boot.high


def _at_seed0(side: Any) -> Optional[float]:
  """A readings Side's seed-0 value (None where it has none)."""
  if side.seedless:
    return side.values[0]
  seeds = side.seeds or tuple(range(len(side.values)))
  return side.values[seeds.index(0)] if 0 in seeds else None


def summary(comparisons: Sequence[Any], budget: BudgetCheck) -> str:
  """"of the verdicts against the claim: 2 of 3 rechecked at 6,000 steps still against it,
  4 not yet rechecked ..., 5 without a row pre-trained longer, ..." (or "")."""
  found = [c.longer for c in comparisons if c.longer is not None]
  pending = sum(1 for c in comparisons if c.recheck == PENDING)
  no_row = sum(1 for c in comparisons if c.recheck in (NO_ROW, OTHER_POOL))
  still = sum(1 for c in found if c.verdict in AGAINST)
  ties = sum(1 for c in found if _crosses_zero(c))
  tie_text = f" ({ties} of the {len(found)} with an interval across 0)" if ties else ""
  parts = [f"{still} of {len(found)} rechecked at {budget.label} still against it{tie_text}"] \
      if found else []
  parts += [f"{pending} not yet rechecked at {budget.label} (not run yet)"] if pending else []
  parts += [f"{no_row} without a row pre-trained longer"] if no_row else []
  untrained = sum(1 for c in comparisons if c.recheck == UNTRAINED)
  parts += [f"{untrained} between rows without pre-training"] if untrained else []
  return f"of the verdicts against the claim: {', '.join(parts)}" if parts else ""
