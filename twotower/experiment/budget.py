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

The reading names each budget in pre-training steps × batch (`size`: the examples a row's
pre-training sees are their product), so a budget table at another batch, or at the steps a
faster backend trains in the same time, reads in the same units. Its summary carries a column
per claim (`column`: whether its verdicts against it were rechecked at the longer budget and
what that changed) and a section listing the budget-bound verdicts (`bound_markdown`: those
against the claim at the grid's budget and no longer against it at the longer one).
"""

from __future__ import annotations

import collections
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
#: The summary's budget column: a claim without a verdict against it, and the words for a
#: rechecked verdict that the longer budget moved out of the verdicts against the claim (a
#: budget-bound one) or left among them.
NOT_APPLICABLE = "n/a: no verdict against the claim"
BUDGET_BOUND = "budget-bound"
MOVED = "moved"
STILL = "still against the claim"
NOT_RECHECKED = "not rechecked"
#: The budget column's header: what its sizes count.
COLUMN = "budget (pre-training steps × batch)"


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
    first = (f"* {c.a.label} against {c.b.label}, {where(c)}, {c.metric}: "
             f"{c.verdict} ({_gap(c)}); at {budget.label}: ")
    longer = c.longer
    if longer is None:
      lines.append(f"{first}not checked: {c.recheck}.")
      continue
    moved = STILL if longer.verdict in AGAINST else MOVED
    bar = interval(longer)
    # One seed's verdict is its point estimate: say so where question sampling alone could
    # flip its sign, so "still against" a tie does not read like a measured reversal.
    tie = "; its interval crosses 0, so the sign is not resolved" if _crosses_zero(longer) else ""
    lines.append(f"{first}{longer.a.mean - longer.b.mean:+.2f}"
                 f"{'' if bar == '–' else f' {bar}'}, {longer.verdict}: **{moved}**{tie}.")
  return lines + [""]


def _gap(c: Any) -> str:
  """A − B of a comparison, with its seed 0's beside a mean over seeds (the run the longer
  budget repeats)."""
  gap = f"{c.a.mean - c.b.mean:+.2f}"
  seed0 = [_at_seed0(side) for side in (c.a, c.b)]
  if None not in seed0 and max(len(c.a.values), len(c.b.values)) > 1:
    gap += f"; seed 0: {seed0[0] - seed0[1]:+.2f}"
  return gap


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


def size(spec: Any, variant: str) -> tuple[int, int]:
  """(pre-training steps, batch) of a variant's rows: the variant's steps, else the grid's,
  else the preset's; the batch of the grid's preset under the variant's overrides."""
  # model.config needs no TensorFlow, but the grid files load without it (as row_configs).
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  v = spec.variants[variant]
  cfg = config_lib.load(spec.model, v.overrides)
  return v.pretrain_steps or spec.pretrain_steps or cfg.trainer.steps, cfg.data.batch_size


def units(spec: Any, budget: BudgetCheck) -> str:
  """"2,000 × 64 → 6,000 × 64": each variant's budget and its longer variant's, in
  pre-training steps × batch (each distinct pair once, in the order of `longer`)."""
  def text(variant: str) -> str:
    steps, batch = size(spec, variant)
    return f"{steps:,} × {batch:,}"
  pairs = dict.fromkeys(f"{text(v)} → {text(longer)}" for v, longer in budget.longer.items())
  return "; ".join(pairs)


def _against(comparisons: Sequence[Any]) -> list[Any]:
  """The comparisons whose verdict is against the claim (each has a second verdict or why it
  has none)."""
  return [c for c in comparisons if c.longer is not None or c.recheck]


def _moved(c: Any) -> bool:
  return c.longer is not None and c.longer.verdict not in AGAINST


def _not_rechecked(comparisons: Sequence[Any]) -> list[str]:
  """"3 without a row pre-trained longer", "1 not run yet at the longer budget": the verdicts
  against the claim that a longer budget could move but no row at it judged."""
  no_row = sum(1 for c in comparisons if c.recheck in (NO_ROW, OTHER_POOL))
  pending = sum(1 for c in comparisons if c.recheck == PENDING)
  return ([f"{no_row} without a row pre-trained longer"] if no_row else []) + (
      [f"{pending} not run yet at the longer budget"] if pending else [])


def column(comparisons: Sequence[Any], sizes: str) -> str:
  """A claim's cell in the summary's budget column (`comparisons`: the claim's; `sizes`:
  `units`): NOT_APPLICABLE; or how many of its verdicts against it were rechecked at the
  longer budget and what it changed ("**budget-bound** at 2,000 × 64 → 6,000 × 64: 1 of 2
  rechecked moved (contradicted → observation, as claimed); 1 still against the claim"),
  how many were not, and why."""
  against = _against(comparisons)
  if not against:
    return NOT_APPLICABLE
  rechecked = [c for c in against if c.longer is not None]
  moved = [c for c in rechecked if _moved(c)]
  still = [c for c in rechecked if not _moved(c)]
  ties = sum(1 for c in still if _crosses_zero(c.longer))
  tie_text = f" ({ties} of them with an interval across 0)" if ties else ""
  parts = []
  if moved:
    changes = collections.Counter(f"{c.verdict} → {c.longer.verdict}" for c in moved)
    counted = [f"{change} ×{n}" if n > 1 else change for change, n in changes.items()]
    parts.append(f"**{BUDGET_BOUND}** at {sizes}: {len(moved)} of {len(rechecked)} rechecked "
                 f"{MOVED} ({', '.join(counted)})")
    parts += [f"{len(still)} {STILL}{tie_text}"] if still else []
  elif rechecked:
    parts.append(f"rechecked at {sizes}, {STILL} ({len(still)} of {len(rechecked)}){tie_text}")
  missing = _not_rechecked(against)
  parts += [f"{NOT_RECHECKED}: {', '.join(missing)}"] if missing else []
  untrained = sum(1 for c in against if c.recheck == UNTRAINED)
  parts += [f"{untrained} between rows without pre-training (no pre-training budget moves "
            "them)"] if untrained else []
  return "; ".join(parts)


def bound_markdown(budget: BudgetCheck, claims: Sequence[Any], comparisons: Sequence[Any],
                   sizes: str, where: Callable[[Any], str],
                   interval: Callable[[Any], str]) -> list[str]:
  """reading.md's "Budget-bound verdicts" section: each comparison whose verdict is against
  its claim at the grid's budget and not at the longer one (before → after, with A − B), and
  the counts of the verdicts against a claim rechecked, moved and never rechecked (those of
  the paper's claims, `source` "paper...", beside them); one sentence where none moved."""
  paper = {c.id for c in claims if c.source.startswith("paper")}
  order = {c.id: i for i, c in enumerate(claims)}
  against = sorted(_against(comparisons), key=lambda c: order.get(c.claim, len(order)))
  rechecked = [c for c in against if c.longer is not None]
  moved = [c for c in rechecked if _moved(c)]
  never = [c for c in against if c.recheck in (NO_ROW, OTHER_POOL, PENDING)]
  untrained = sum(1 for c in against if c.recheck == UNTRAINED)

  def of_paper(found: Sequence[Any]) -> int:
    return sum(1 for c in found if c.claim in paper)
  verdicts = "verdict" if len(against) == 1 else "verdicts"
  rest = (f"of the {len(against)} {verdicts} against a claim ({of_paper(against)} against the "
          f"paper's claims), {len(never)} were never rechecked"
          + (f" ({of_paper(never)} against the paper's claims; "
             f"{', '.join(_not_rechecked(never))})" if never else "")
          + (f", and {untrained} {'lies' if untrained == 1 else 'lie'} between rows without "
             "pre-training, which no pre-training budget moves" if untrained else ""))
  lines = ["## Budget-bound verdicts", ""]
  at = (f"{budget.label} ({sizes}, pre-training steps × batch; the `{budget.table}` table, "
        "seed 0)")
  if not moved:
    still = ("none was rechecked there" if not rechecked else
             f"the one rechecked there is {STILL}" if len(rechecked) == 1 else
             f"all {len(rechecked)} rechecked there are {STILL}")
    return lines + [f"No verdict against a claim changes at {at}: {still}; {rest}.", ""]
  lines += [f"The verdicts against a claim at the grid's budget that are no longer against it "
            f"at {at}: before → after, with A − B (before: the mean over seeds and its seed "
            "0, the run the longer budget repeats; after: seed 0 and its interval). One seed's "
            "verdict is an observation, so a reversal that stays one at a single seed "
            "(contradicted → observation, against the claim) is not listed.", ""]
  for c in moved:
    bar = interval(c.longer)
    lines.append(f"* [{c.claim}](#{c.claim}): {c.a.label} against {c.b.label}, {where(c)}, "
                 f"{c.metric}: {c.verdict} ({_gap(c)}) → **{c.longer.verdict}** "
                 f"({c.longer.a.mean - c.longer.b.mean:+.2f}"
                 f"{'' if bar == '–' else f' {bar}'}).")
  return lines + ["", f"{len(moved)} of the {len(rechecked)} verdicts rechecked at "
                  f"{budget.label} moved ({of_paper(moved)} against the paper's claims); "
                  f"{rest}.", ""]
