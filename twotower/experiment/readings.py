"""The reading of a grid: each claim of the grid file (grid.Claim) checked against the results,
with the verdict computed by one rule (experiment.verdict_rule), so that no sentence about the grid is
typed by hand.

    twotower experiment ...              # writes <results_dir>/reading.md with the tables
    python -m twotower.experiment.rerender --grid cpu-small \\
        --results_dir docs/results/cpu-small   # re-renders it from results.json + cells.json

Each claim is compared per (pair, metric, ratio): the two rows' per-seed values from
results.json, and, where a `RanksOf` gives both rows' per-question gold ranks, the seed-aware
bootstrap interval of the difference (experiment.bootstrap: seeds, then questions). The rule
(rule.RULE) reads the interval, the paired seeds and the claim's qualifier threshold; without
ranks it falls back to the seed-SD interval and a sign-flip test over paired seeds. A claim's
`caveat` and its rows' are printed beside its verdicts.

A second section checks each pre-training run's held-out in-batch accuracy at its last step
against chance (1 / the documents a held-out query is ranked among: the batch, or the run's
held-out pairs where fewer; experiment.pretrain_check), so "does not generalise at this scale"
is computed too.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Callable, Iterable, Mapping, Optional, Sequence

from twotower.core import contracts
from twotower.core import files as tio
from twotower.experiment import bootstrap
from twotower.experiment import budget as budget_lib
from twotower.experiment import grid as grid_lib
from twotower.experiment import pretrain_check
from twotower.experiment.pretrain_check import PretrainCheck
from twotower.experiment.grid import Claim, GridSpec, RowRef
from twotower.experiment.verdict_rule import (  # noqa: F401  (the reading's words, re-exported)
    CONTRADICTED, EQUAL, HOLDS, NOT_RESOLVED, RULE, SEEDS_AGAINST, SEEDS_AS, SEEN_AGAINST,
    SEEN_AS, SIZE_MISSED, SIZE_OPEN, VERDICTS, Judgement, Side, Size, judge, mean_and_sd,
    paired_seeds, sign_flip_test)

logger = logging.getLogger(__name__)

READING_FILE = "reading.md"
# Rows whose result does not depend on the seed (their SD is 0 by construction).
SEEDLESS_KINDS = ("bm25",)
#: A result cell's name (str(CellId)) -> {question id: the gold's 1-based rank, None past the
#: run's top 100} over the questions its table entry is scored on; None: no ranks recorded.
RanksOf = Callable[[str], Optional[Mapping[str, Optional[int]]]]


def verdict(a: Side, b: Side, expect: str = "higher") -> str:
  """The rule without ranks or qualifier: is A above (`expect` "higher") or below B?"""
  return judge(a, b, expect).verdict


def size_of(claim: Claim) -> Size:
  return Size(claim.qualifier, claim.min_gain, claim.max_gain, claim.min_ratio)


@dataclasses.dataclass(frozen=True)
class Comparison:
  """One claim's pair of rows at one ratio on one metric, and its verdict."""
  claim: str
  dataset: str
  ratio: int
  metric: str
  a: Side
  b: Side
  judgement: Judgement
  boot: Optional[bootstrap.Interval] = None    # None: a row without recorded ranks
  pair: int = 0                                # the index of the claim's pair
  # A verdict against the claim judged again on the rows pre-trained longer (budget.py), or
  # why it is not (`recheck`: budget.PENDING, NO_ROW or UNTRAINED).
  longer: Optional["Comparison"] = None
  recheck: str = ""

  @property
  def verdict(self) -> str:
    return self.judgement.verdict


@dataclasses.dataclass(frozen=True)
class _Run:
  """One seed's table entry: its metrics, its result cell, its question count and split."""
  metrics: Mapping[str, float]
  cell: str
  questions: Optional[int]
  split: str = ""


def _per_seed(results: Mapping) -> dict[tuple, dict[int, _Run]]:
  """{(table, dataset, system, variant, ratio): {seed: run}} from results.json."""
  out: dict[tuple, dict[int, _Run]] = {}
  for e in results.get("per_seed", ()):
    if e.get("record"):
      key = (e["table"], e["dataset"], e["system"], e["variant"], e["ratio"])
      out.setdefault(key, {})[e["seed"]] = _Run(e["record"]["metrics"], e.get("cell", ""),
                                                e["record"].get("questions"),
                                                e.get("split") or e["record"].get("split", ""))
  return out


def _label(spec: GridSpec, ref: RowRef, claim_table: str) -> str:
  """The row as the tables name it ("Transformer, ICT (L4 / d128)"), plus the table and the
  seeds where the claim reads another table or some seeds only."""
  system = spec.systems.get(ref.system)
  label = ref.system if system is None else system.label
  if ref.variant != grid_lib.BASE_VARIANT:
    label += f" ({spec.variants[ref.variant].label})"
  if ref.table and ref.table != claim_table:
    label += f" [Table {ref.table}]"
  if ref.seeds:
    label += f" [seed {', '.join(map(str, ref.seeds))}]"
  return label


def caveats(spec: GridSpec, claim: Claim, comparisons: Sequence[Comparison]) -> list[str]:
  """The claim's caveat, then its rows' (each text once, after the rows that carry it), as
  printed beside its verdicts (`comparisons`, the claim's): only the rows of pairs that have
  a comparison, since a caveat about a row with no result yet explains no verdict."""
  out = [" ".join(claim.caveat.split())] if claim.caveat else []
  shown = [claim.pairs[i] for i in sorted({c.pair for c in comparisons})]
  rows: dict[str, list[str]] = {}      # caveat -> the rows that carry it
  for name in dict.fromkeys(r.system for pair in shown for r in pair):
    system = spec.systems.get(name)
    if system is not None and system.caveat:
      rows.setdefault(" ".join(system.caveat.split()), []).append(
          _label(spec, RowRef(name), claim.table))
  return out + [f"{'; '.join(labels)}: {text}" for text, labels in rows.items()]


def compare(spec: GridSpec, results: Mapping, ranks_of: Optional[RanksOf] = None,
            seed_aware: bool = True,
            resampler: Optional[bootstrap.Resampler] = None) -> list[Comparison]:
  """Every claim x pair x ratio x metric that the results hold both sides of; with
  `ranks_of`, each with its bootstrap interval where both rows recorded ranks: seed-aware,
  or (`seed_aware` False, the rule before issue 67) over the questions alone. `resampler`
  keeps the runs' resampled sums for another call over the same ranks."""
  values = _per_seed(results)
  boot = _Boot(resampler or bootstrap.Resampler(), seed_aware)
  tables = {t.id: t for t in spec.tables}
  datasets = sorted({key[1] for key in values})
  split_ids = _split_questions(values, ranks_of) if ranks_of else None
  out = []
  for claim in spec.readings:
    table = tables.get(claim.table)
    ratios = claim.ratios or (table.ratios if table else ())
    for dataset in datasets:
      for ratio in ratios:
        for metric in claim.metrics:
          for index, refs in enumerate(claim.pairs):
            c = _compare(spec, values, claim, dataset, ratio, metric, refs, index, ranks_of,
                         split_ids, boot)
            if c is None:
              continue
            if spec.budget is not None and c.verdict in budget_lib.AGAINST:
              c = budget_lib.recheck(spec, spec.budget, c, refs, lambda longer: _compare(
                  spec, values, claim, dataset, ratio, metric, longer, index, ranks_of,
                  split_ids, boot))
            out.append(c)
  return out


@dataclasses.dataclass(frozen=True)
class _Boot:
  """How a reading's intervals are drawn: its Resampler and whether the seeds are drawn."""
  resampler: bootstrap.Resampler
  seed_aware: bool = True


def _compare(spec: GridSpec, values, claim: Claim, dataset: str, ratio: int, metric: str,
             refs: Sequence[RowRef], index: int,
             ranks_of: Optional[RanksOf],
             split_ids: Optional[_SplitIds] = None,
             how: Optional[_Boot] = None) -> Optional[Comparison]:
  """One pair of rows judged at a ratio on a metric (None: the results lack a side)."""
  a, b = (_side(spec, values, claim.table, dataset, ratio, metric, ref) for ref in refs)
  if a is None or b is None:
    return None
  how = how or _Boot(bootstrap.Resampler())
  boot = _interval(a, b, metric, ranks_of, split_ids, how) if ranks_of else None
  return Comparison(claim.id, dataset, ratio, metric, a[0], b[0],
                    judge(a[0], b[0], claim.expect, size_of(claim), boot), boot, index)


def _side(spec: GridSpec, values, claim_table: str, dataset: str, ratio: int, metric: str,
          ref: RowRef) -> Optional[tuple[Side, list[_Run]]]:
  by_seed = values.get((ref.table or claim_table, dataset, ref.system, ref.variant, ratio), {})
  runs = [(seed, run) for seed, run in sorted(by_seed.items())
          if metric in run.metrics and (not ref.seeds or seed in ref.seeds)]
  if not runs:
    return None
  system = spec.systems.get(ref.system)
  side = Side(_label(spec, ref, claim_table), tuple(100 * r.metrics[metric] for _, r in runs),
              seedless=bool(system and system.kind in SEEDLESS_KINDS),
              seeds=tuple(seed for seed, _ in runs))
  return side, [r for _, r in runs]


def _interval(a: tuple[Side, list[_Run]], b: tuple[Side, list[_Run]], metric: str,
              ranks_of: RanksOf,
              split_ids: Optional[_SplitIds] = None,
              how: Optional[_Boot] = None) -> Optional[bootstrap.Interval]:
  """The bootstrap interval of A - B over the questions their table entries were scored on:
  those both rows' ranks hold, or, where both rows hold more (two BM25 cells: each ranks
  every split in one run), the entries' split's questions as the split's other cells
  recorded them (`split_ids`). None where a row has no ranks or neither gives the entries'
  questions."""
  how = how or _Boot(bootstrap.Resampler())
  sides = []
  for side, runs in (a, b):
    # A seedless row's seeds are one run: the same ranks on every seed.
    ranks = [ranks_of(run.cell) for run in (runs[:1] if side.seedless else runs)]
    if any(r is None for r in ranks):
      return None
    sides.append(bootstrap.Runs(tuple(ranks), () if side.seedless else side.seeds))

  def interval(questions: Optional[Sequence[str]] = None) -> Optional[bootstrap.Interval]:
    return how.resampler.interval(*sides, metric, questions, how.seed_aware)
  questions = bootstrap.common_questions(sides[0].runs, sides[1].runs)
  scored = {r.questions for r in a[1] + b[1] if r.questions is not None}
  if questions and scored and scored != {len(questions)}:
    splits = {r.split for r in a[1] + b[1]}
    ids = split_ids(*splits) if split_ids and len(splits) == 1 else None
    held = set(questions)
    if ids is not None and scored == {len(ids)} and ids <= held:
      return interval(sorted(ids))
  if not questions or (scored and scored != {len(questions)}):
    logger.warning("no interval for %s against %s (%s): %d question(s) in both rows' ranks, "
                   "entries scored on %s", a[0].label, b[0].label, metric, len(questions),
                   sorted(scored))
    return None
  return interval(questions)


#: A split's name ("test-5") -> the ids of its questions, None where no cell says.
_SplitIds = Callable[[str], Optional[frozenset]]


def split_questions(results: Mapping, ranks_of: RanksOf) -> _SplitIds:
  """The question ids of each split of `results` (results.json), from the cells scored on
  that split alone (`_split_questions`)."""
  return _split_questions(_per_seed(results), ranks_of)


def _split_questions(values, ranks_of: RanksOf) -> _SplitIds:
  """The question ids of each split, from the cells scored on that split alone (their ranks
  hold exactly the questions their entry was scored on: an eval cell's ratio's test side);
  None for a split no such cell holds, or whose cells disagree on its questions."""
  cells: dict[str, set[tuple[str, int]]] = {}      # split -> {(cell, questions scored)}
  for runs in values.values():
    for run in runs.values():
      if run.split and run.questions is not None:
        cells.setdefault(run.split, set()).add((run.cell, run.questions))
  cache: dict[str, Optional[frozenset]] = {}

  def ids(split: str) -> Optional[frozenset]:
    if split not in cache:
      found = set()
      for cell, count in sorted(cells.get(split, ())):
        ranks = ranks_of(cell)
        if ranks is not None and len(ranks) == count:
          found.add(frozenset(ranks))
      cache[split] = found.pop() if len(found) == 1 else None
    return cache[split]
  return ids


def pretrain_checks(spec: GridSpec, records: Iterable[Mapping]) -> list[PretrainCheck]:
  """experiment.pretrain_check's checks, each row named as the tables name it."""
  return pretrain_check.checks(spec, records, lambda ref: _label(spec, ref, ""))




# ---------------------------------------------------------------------------------------------
# Markdown.
# ---------------------------------------------------------------------------------------------


def _counts(comparisons: Sequence[Comparison]) -> dict[str, int]:
  return {v: sum(1 for c in comparisons if c.verdict == v) for v in VERDICTS}


def _unit(comparisons: Sequence[Comparison]) -> str:
  """What one count is: "(metric, ratio)" for a claim over several metrics and ratios."""
  varying = [name for name, key in (("pair", lambda c: c.pair), ("metric", lambda c: c.metric),
                                    ("ratio", lambda c: (c.ratio, c.dataset)))
             if len({key(c) for c in comparisons}) > 1]
  if not varying:
    return "comparison"
  return varying[0] + "s" if len(varying) == 1 else f"({', '.join(varying)})"


def counts_text(comparisons: Sequence[Comparison]) -> str:
  """"holds, resolved at 14 of 24 (metric, ratio); contradicted at 6; ..." (no verdict named
  that no comparison got)."""
  counts = [(v, n) for v, n in _counts(comparisons).items() if n]
  if not counts:
    return ""
  (first, n), rest = counts[0], counts[1:]
  return "; ".join([f"{first} at {n} of {len(comparisons)} {_unit(comparisons)}"]
                   + [f"{v} at {k}" for v, k in rest])


def _caveat_text(notes: Sequence[str]) -> str:
  return " ".join(f"⚠ {c}" for c in notes)


def summary_markdown(spec: GridSpec, comparisons: Sequence[Comparison], link: str = "") -> str:
  """One line per claim: how many of its comparisons got each verdict, counted per (pair,
  metric, ratio), and the caveats the verdicts rest on (no recall in it: the numbers are in
  reading.md, at `link`: "" within reading.md itself)."""
  # A grid with a budget check has a column beside the verdicts: whether those against the
  # claim were rechecked at the longer budget, and what it changed (budget.column).
  sizes = budget_lib.units(spec, spec.budget) if spec.budget else ""
  budget_header = f" {budget_lib.COLUMN} |" if spec.budget else ""
  lines = [f"| claim | source | verdicts |{budget_header} caveat |",
           "|---|---|---|" + ("---|" if spec.budget else "") + "---|"]
  for claim in spec.readings:
    these = [c for c in comparisons if c.claim == claim.id]
    text = counts_text(these)
    if text:
      longer = f" {budget_lib.column(these, sizes)} |" if spec.budget else ""
      lines.append(f"| [{claim.id}]({link}#{claim.id}): {claim.sentence} | {claim.source} | "
                   f"{text} |{longer} {_caveat_text(caveats(spec, claim, these)) or '–'} |")
  return "\n".join(lines) + "\n"


def where_text(c: Comparison, several_datasets: bool) -> str:
  return ("zero-shot" if c.ratio == contracts.ZERO_SHOT_RATIO else f"{c.ratio} %") + (
      f" ({c.dataset})" if several_datasets else "")


def interval_text(c: Comparison) -> str:
  """The bootstrap interval of A − B (the table's direction) over its questions (q) and,
  where it drew them, its seeds; or the seed-SD bar's."""
  if c.boot is not None:
    drawn = [k for k in (c.boot.seeds_a, c.boot.seeds_b) if k]
    seeds = ("" if not drawn else
             f" × {drawn[0]} seeds" if c.boot.paired_seeds or len(drawn) == 1 else
             f" × {c.boot.seeds_a} / {c.boot.seeds_b} seeds")
    return f"[{c.boot.low:+.2f}, {c.boot.high:+.2f}] ({c.boot.questions:,} q{seeds})"
  if c.a.measured and c.b.measured:
    return f"± {2 * max(c.a.sd, c.b.sd):.2f} (2 × max SD)"
  return "–"


def _seeds_text(c: Comparison) -> str:
  paired = c.judgement.paired
  text = f"{sum(1 for g in paired if g > 0)} of {len(paired)}" if paired else "–"
  if c.judgement.sign_p is not None:
    text += f" (p = {c.judgement.sign_p:.3g})"
  return text


def _pair_signs(comparisons: Sequence[Comparison]) -> list[str]:
  """Per (pair, metric): the paired seeds' gains above 0 over every ratio, and the test whose
  unit is the seed: a seed's ratios fine-tune one pre-training, so they are averaged into one
  gain per seed (over the ratios that seed was run at) before the exact sign-flip test."""
  lines = []
  for key in dict.fromkeys((c.pair, c.metric) for c in comparisons):
    these = [c for c in comparisons if (c.pair, c.metric) == key]
    gains = [g for c in these for g in c.judgement.paired]
    if len(these) > 1 and len(gains) >= 3:
      up, down = sum(1 for g in gains if g > 0), sum(1 for g in gains if g < 0)
      equal = len(gains) - up - down
      ties = f" ({equal} equal)" if equal else ""
      line = (f"* {these[0].a.label} against {these[0].b.label}, {key[1]}: the gain is above "
              f"0 in {up} of {len(gains)} paired runs{ties} over {len(these)} ratios")
      by_seed: dict[int, list[float]] = {}
      for c in these:
        for seed, gain in zip(paired_seeds(c.a, c.b), c.judgement.paired):
          by_seed.setdefault(seed, []).append(gain)
      if len(by_seed) >= 2:
        means = {seed: sum(g) / len(g) for seed, g in sorted(by_seed.items())}
        line += ("; per seed, the mean gain over its ratios: "
                 + ", ".join(f"{m:+.2f} (seed {seed})" for seed, m in means.items())
                 + f"; exact sign-flip test over the {len(means)} seeds: "
                   f"p = {sign_flip_test(list(means.values())):.3g}")
      lines.append(line + ".")
  if lines:
    lines = ["Paired runs over every ratio (seed i of A against seed i of B at each ratio). A "
             "seed's ratios share its pre-training, so the runs are not independent: the test "
             "counts seeds, not runs.", ""] + lines + [""]
  return lines


def _matrix(comparisons: Sequence[Comparison], several_datasets: bool) -> list[str]:
  """For a claim over several metrics: a verdict per (metric, ratio), one table per pair."""
  wheres = list(dict.fromkeys(where_text(c, several_datasets) for c in comparisons))
  lines = []
  for pair in dict.fromkeys(c.pair for c in comparisons):
    these = [c for c in comparisons if c.pair == pair]
    cell = {(c.metric, where_text(c, several_datasets)): c.verdict for c in these}
    lines += [f"{these[0].a.label} against {these[0].b.label}, per metric and ratio:", "",
              "| metric | " + " | ".join(wheres) + " |", "|---|" + "---|" * len(wheres)]
    for metric in dict.fromkeys(c.metric for c in these):
      lines.append(f"| {metric} | " + " | ".join(cell.get((metric, w), "–") for w in wheres)
                   + " |")
    lines.append("")
  return lines


def _claim_section(spec: GridSpec, claim: Claim, comparisons: Sequence[Comparison]
                   ) -> list[str]:
  relation = ">" if claim.expect == "higher" else "<"
  size = size_of(claim)
  # The heading is the claim's id, so "reading.md#<id>" links to it.
  lines = [f"### {claim.id}", "",
           f"> {claim.sentence}", "", f"Source: {claim.source}. Read from Table {claim.table}; "
           f"claimed: A {relation} B" + (f"; \"{size.word}\" tested as {size.text()}"
                                         if size.bounded else "") + ". Metrics in percent; "
           "the interval is the bootstrap's 95 % interval of A − B over the seeds and the "
           "questions (q; the seeds where it drew them), or ± 2 × max SD where the rows "
           "recorded no ranks; seeds: the paired seeds whose "
           "gain (A − B, or B − A for a claim that A is below) is above 0.", ""]
  notes = caveats(spec, claim, comparisons)
  lines += [f"**Caveat.** {c}" for c in notes] + ([""] if notes else [])
  lines += ["| A | B | ratio | metric | A | B | A − B | interval | A / B | seeds as claimed | "
            "verdict |", "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
  several_datasets = len({c.dataset for c in comparisons}) > 1
  for c in comparisons:
    share = f"{100 * c.a.mean / c.b.mean:.1f} %" if c.b.mean else "–"
    lines.append(f"| {c.a.label} | {c.b.label} | {where_text(c, several_datasets)} | "
                 f"{c.metric} | {c.a.text()} | {c.b.text()} | {c.a.mean - c.b.mean:+.2f} | "
                 f"{interval_text(c)} | {share} | {_seeds_text(c)} | **{c.verdict}** |")
  lines += [""]
  if len({c.metric for c in comparisons}) > 1:
    lines += _matrix(comparisons, several_datasets)
  lines += _pair_signs(comparisons)
  if spec.budget is not None:
    lines += budget_lib.markdown(spec.budget, comparisons,
                                 lambda c: where_text(c, several_datasets), interval_text)
  lines += [f"Verdicts: {counts_text(comparisons)}."
            + (f" {_caveat_text(notes)}" if notes else ""), ""]
  return lines


_pretrain_section = pretrain_check.markdown


def markdown(spec: GridSpec, results: Mapping, cell_records: Iterable[Mapping] = (),
             ranks_of: Optional[RanksOf] = None,
             comparisons: Optional[Sequence[Comparison]] = None, note: str = "") -> str:
  """reading.md: the rule, a summary line per claim, each claim's comparisons, and the
  pre-training check. Every number in it is computed from `results` (results.json), the
  per-question ranks `ranks_of` gives (None: no ranks anywhere) and the pre-training and pair
  records (cells.json); `comparisons`: `compare`'s, where the caller has them already.
  `note`: a paragraph under the heading (what questions a variant leaves out)."""
  if comparisons is None:
    comparisons = compare(spec, results, ranks_of)
  lines = [f"# Reading of the `{spec.name}` grid against its claims", "",
           "Generated by `twotower experiment` (`twotower/experiment/readings.py`) from "
           "`results.json`, the per-question ranks where the runs recorded them, and the "
           "pre-training records in `cells.json`; the claims are the "
           f"`readings:` of `twotower/experiment/grids/{spec.name}.yaml`. Do not edit by hand: "
           f"`python -m twotower.experiment.rerender --grid {spec.name} --results_dir "
           f"docs/results/{spec.name}` writes it again.", ""] + ([note, ""] if note else []) + [
           "## The rule", "", RULE, "",
           "## Summary", "", summary_markdown(spec, comparisons)]
  if spec.budget is not None:
    several_datasets = len({c.dataset for c in comparisons}) > 1
    lines += budget_lib.bound_markdown(spec.budget, spec.readings, comparisons,
                                       budget_lib.units(spec, spec.budget),
                                       lambda c: where_text(c, several_datasets), interval_text)
  lines += ["## Claims", ""]
  for claim in spec.readings:
    these = [c for c in comparisons if c.claim == claim.id]
    if these:
      lines += _claim_section(spec, claim, these)
  cell_records = list(cell_records)
  checks = pretrain_checks(spec, cell_records)
  if checks:
    without_history = sum(1 for r in cell_records
                          if r.get("kind") == "pretrain" and not r.get("history"))
    lines += _pretrain_section(checks, without_history)
  return "\n".join(lines).rstrip() + "\n"


def write(spec: GridSpec, results: Mapping, cell_records: Iterable[Mapping],
          results_dir: str, ranks_of: Optional[RanksOf] = None,
          comparisons: Optional[Sequence[Comparison]] = None, note: str = "") -> Optional[str]:
  """Writes `<results_dir>/reading.md` where the grid has readings; returns its text."""
  if not spec.readings:
    return None
  text = markdown(spec, results, cell_records, ranks_of, comparisons, note)
  tio.write_text(os.path.join(results_dir, READING_FILE), text)
  return text
