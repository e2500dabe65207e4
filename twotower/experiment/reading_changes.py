"""How one grid's reading differs from another's: each claim's verdict counts in both, and
every comparison whose verdict changed with what moved under it. Both readings are computed
here, by the current rule, from each results folder's own results.json and per-question
ranks (as reading.md is), so a change is the data's, not the rule's. The render writes it,
`reading-changes.md` beside reading.md, for a grid that names `reading_baseline:` (as
grids/cpu-small-links.yaml names cpu-small); `python -m twotower.experiment.rerender` writes
it again from the two folders alone.

A comparison is matched across the grids by its claim, its pair of rows (system and variant
ids, not labels: a row that trains on other pairs keeps its id), dataset, ratio and metric.
What moved under a changed verdict, in the order it is named: the gain's sign (the rows
swapped places), the kind of interval (one seed on a side: an observation; seed SDs; the
per-question bootstrap), the rows' seed counts, the claim's size threshold, the rows' labels
(a row renamed for what it now trains on).

The same listing serves two more pairs of readings of one grid (`markdown`'s `intro` and the
readings' `label`s say which): the reading by the rule before issue 67 (question-only
intervals) against the seed-aware one (`SEED_AWARE_FILE`, `write_seed_aware`), and the
reading on every question against the one without the questions whose article the
pre-training read (experiment.leak_free). Each changed verdict is listed with its paired
seeds' gains, the numbers a reader needs to judge it.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
from typing import Mapping, Optional, Sequence

from twotower.core import files as tio
from twotower.experiment import grid as grid_lib
from twotower.experiment import bootstrap, ranks, readings
from twotower.experiment.grid import GridSpec
from twotower.experiment.readings import Comparison

logger = logging.getLogger(__name__)

CHANGES_FILE = "reading-changes.md"
#: Beside reading.md: this grid's reading by the rule before issue 67 against this one.
SEED_AWARE_FILE = "seed-aware-changes.md"
# What moved under a changed verdict (`Change.moved`), in the order a change is named by.
REVERSED = "the rows swapped places"
INTERVAL = "another kind of interval"
SEEDS = "other seed counts"
THRESHOLD = "another threshold"
SAME_KIND = "the interval moved"
REASONS = (REVERSED, INTERVAL, SEEDS, THRESHOLD, SAME_KIND)
ABSENT = "(none)"


@dataclasses.dataclass(frozen=True)
class Reading:
  """A grid's claims and every comparison its results hold; `label` names the reading in
  the changes file (default: the grid's name)."""
  spec: GridSpec
  comparisons: tuple[Comparison, ...]
  label: str = ""

  @property
  def name(self) -> str:
    return self.label or self.spec.name


def load(spec: GridSpec, results_dir: str) -> Reading:
  """The reading of the results folder `results_dir` by the claims of `spec`."""
  results = tio.read_json(os.path.join(results_dir, "results.json"))
  return Reading(spec, tuple(readings.compare(spec, results, ranks.results_reader(results_dir))))


def _key(spec: GridSpec, c: Comparison) -> tuple:
  claim = next(x for x in spec.readings if x.id == c.claim)
  rows = tuple((r.system, r.variant, r.table or claim.table, tuple(r.seeds))
               for r in claim.pairs[c.pair])
  return (c.claim, rows, c.dataset, c.ratio, c.metric)


def interval_kind(c: Comparison) -> str:
  if c.boot is not None:
    return "seed-aware bootstrap" if c.boot.seed_aware else "bootstrap"
  if c.a.measured and c.b.measured:
    return "seed SDs"
  return "observation"


def _seeds(c: Comparison) -> str:
  return "/".join("–" if s.seedless else str(len(s.values)) for s in (c.a, c.b))


@dataclasses.dataclass(frozen=True)
class Change:
  """One comparison in the grid before and after (None: the grid has no such comparison)."""
  claim: str
  before: Optional[Comparison]
  after: Optional[Comparison]

  @property
  def matched(self) -> bool:
    return self.before is not None and self.after is not None

  @property
  def changed(self) -> bool:
    return self.matched and self.before.verdict != self.after.verdict

  def moved(self, before: GridSpec, after: GridSpec) -> list[tuple[str, str]]:
    """What differs under the two verdicts, each as (a REASONS entry, or "" for the rows'
    new labels; its detail), first the one the change is counted by."""
    b, a = self.before, self.after
    out = []
    if b.judgement.gain * a.judgement.gain < 0:
      out.append((REVERSED, f"gain {b.judgement.gain:+.2f} -> {a.judgement.gain:+.2f}"))
    if interval_kind(b) != interval_kind(a):
      out.append((INTERVAL, f"{interval_kind(b)} -> {interval_kind(a)}"))
    if _seeds(b) != _seeds(a):
      out.append((SEEDS, f"seeds {_seeds(b)} -> {_seeds(a)}"))
    sizes = [readings.size_of(next(x for x in s.readings if x.id == self.claim))
             for s in (before, after)]
    if sizes[0] != sizes[1]:
      out.append((THRESHOLD, " -> ".join(s.text() or "above 0" for s in sizes)))
    if not out:
      out.append((SAME_KIND, f"gain {b.judgement.gain:+.2f} -> {a.judgement.gain:+.2f}"))
    if (b.a.label, b.b.label) != (a.a.label, a.b.label):
      out.append(("", f"rows were {b.a.label} against {b.b.label}"))
    return out


def changes(before: Reading, after: Reading) -> list[Change]:
  """Every comparison of either reading, matched by `_key`, in the after grid's claim
  order (then the claims only the before grid has)."""
  old = {_key(before.spec, c): c for c in before.comparisons}
  new = {_key(after.spec, c): c for c in after.comparisons}
  claims = [c.id for c in after.spec.readings] + [
      c.id for c in before.spec.readings if c.id not in {x.id for x in after.spec.readings}]
  keys = list(dict.fromkeys(list(new) + list(old)))
  return [Change(key[0], old.get(key), new.get(key))
          for claim in claims for key in keys if key[0] == claim]


def _sentence(reading: Reading, claim: str) -> str:
  found = [c for c in reading.spec.readings if c.id == claim]
  return found[0].sentence if found else ""


def _side_text(c: Optional[Comparison]) -> str:
  if c is None:
    return ABSENT
  return f"{c.verdict} ({c.judgement.gain:+.2f}, {interval_kind(c)}, seeds {_seeds(c)})"


def gains_text(c: Comparison) -> str:
  """The paired seeds' gains in the claim's frame, "+0.36 / +5.95 / +1.24" ("–": none)."""
  return " / ".join(f"{g:+.2f}" for g in c.judgement.paired) or "–"


def _interval_of(c: Comparison) -> str:
  return "–" if c.judgement.interval is None else \
      "[{:+.2f}, {:+.2f}]".format(*c.judgement.interval)


def markdown(before: Reading, after: Reading, before_dir: str = "",
             intro: str = "") -> str:
  """The changes file: per claim, counts before and after and how many verdicts changed and
  why; the before -> after verdict counts; each changed comparison with its paired seeds'
  gains. `intro` (a title line and a paragraph) replaces the heading that names two grids
  (`before_dir`: where the before grid's results are)."""
  found = changes(before, after)
  b_name, a_name = before.name, after.name
  counted = (f"A comparison is one claim's pair of rows at one ratio on one metric, matched "
             f"by the rows' ids. Verdicts are counted as reading.md counts them; a changed "
             f"verdict is counted by the first of: {', '.join(REASONS)}. The seed gains are "
             f"the paired seeds' (the claim's frame: A − B, or B − A for a claim that A is "
             f"below), the interval the gain's (same frame).")
  head = [intro.rstrip(), "", counted, ""] if intro else [
      f"# The reading of `{a_name}` against that of `{b_name}`", "",
      f"Generated by `twotower/experiment/reading_changes.py` from this folder's "
      f"results and those of `{before_dir}`, both read by the current rule "
      f"(reading.md's); do not edit by hand. {counted}", "",
      f"`{a_name}`: {after.spec.description}", ""]
  lines = head + ["## Per claim", "",
           f"| claim | {b_name} | {a_name} | matched | verdict changed | by | "
           f"only in {b_name} | only in {a_name} |",
           "|---|---|---|---:|---:|---|---:|---:|"]
  for claim in dict.fromkeys(ch.claim for ch in found):
    these = [ch for ch in found if ch.claim == claim]
    changed = [ch for ch in these if ch.changed]
    by = collections.Counter(ch.moved(before.spec, after.spec)[0][0] for ch in changed)
    counts = [readings.counts_text([getattr(ch, side) for ch in these
                                    if getattr(ch, side) is not None]) or "–"
              for side in ("before", "after")]
    lines.append(
        f"| {claim} | {counts[0]} | {counts[1]} | {sum(ch.matched for ch in these)} | "
        f"{len(changed)} | {'; '.join(f'{r}: {n}' for r, n in by.items()) or '–'} | "
        f"{sum(ch.after is None for ch in these)} | {sum(ch.before is None for ch in these)} |")
  lines += ["", *_transitions(found), "## Changed verdicts", ""]
  several_datasets = len({c.dataset for ch in found for c in (ch.before, ch.after) if c}) > 1
  for claim in dict.fromkeys(ch.claim for ch in found if ch.changed):
    lines += [f"### {claim}", "", f"> {_sentence(after, claim) or _sentence(before, claim)}", "",
              f"| A | B | ratio | metric | {b_name} | {a_name} | seed gains | interval "
              f"({b_name} → {a_name}) | what moved |",
              "|---|---|---:|---|---|---|---|---|---|"]
    for ch in found:
      if ch.claim == claim and ch.changed:
        moved = "; ".join(detail if not reason else f"{reason}: {detail}"
                          for reason, detail in ch.moved(before.spec, after.spec))
        gains = [gains_text(c) for c in (ch.before, ch.after)]
        lines.append(f"| {ch.after.a.label} | {ch.after.b.label} | "
                     f"{readings.where_text(ch.after, several_datasets)} | {ch.after.metric} | "
                     f"{_side_text(ch.before)} | {_side_text(ch.after)} | "
                     f"{gains[1] if gains[0] == gains[1] else ' → '.join(gains)} | "
                     f"{_interval_of(ch.before)} → {_interval_of(ch.after)} | {moved} |")
    lines.append("")
  return "\n".join(lines).rstrip() + "\n"


def _transitions(found: Sequence[Change]) -> list[str]:
  """The count of comparisons per (verdict before, verdict after), ABSENT for a comparison
  one grid lacks."""
  def verdict(c: Optional[Comparison]) -> str:
    return ABSENT if c is None else c.verdict
  order = [v for v in readings.VERDICTS + (ABSENT,)
           if any(verdict(ch.before) == v or verdict(ch.after) == v for ch in found)]
  count = collections.Counter((verdict(ch.before), verdict(ch.after)) for ch in found)
  after_order = [v for v in order if any(verdict(ch.after) == v for ch in found)]
  lines = ["## Verdicts before (rows) and after (columns)", "",
           "| before \\ after | " + " | ".join(after_order) + " | total |",
           "|---|" + "---:|" * (len(after_order) + 1)]
  for b in order:
    row = [count.get((b, a), 0) for a in after_order]
    if sum(row):
      lines.append(f"| {b} | " + " | ".join(str(n) if n else "·" for n in row)
                   + f" | {sum(row)} |")
  return lines + [""]


def write(spec: GridSpec, comparisons: Sequence[Comparison], results_dir: str
          ) -> Optional[str]:
  """Writes `<results_dir>/reading-changes.md` for a grid with a `reading_baseline` (a grid
  name or file) whose results folder, named as that grid, sits beside `results_dir`; returns
  its path (None: nothing to compare)."""
  if not spec.reading_baseline:
    return None
  before_spec = grid_lib.load(spec.reading_baseline)
  before_dir = os.path.join(os.path.dirname(os.path.abspath(results_dir)), before_spec.name)
  if not os.path.exists(os.path.join(before_dir, "results.json")):
    logger.info("%s: no results of grid %s beside it; %s not written", results_dir,
                before_spec.name, CHANGES_FILE)
    return None
  before = load(before_spec, before_dir)
  path = os.path.join(results_dir, CHANGES_FILE)
  tio.write_text(path, markdown(before, Reading(spec, tuple(comparisons)),
                                os.path.relpath(before_dir, os.path.abspath(results_dir))))
  return path


def seed_aware_markdown(spec: GridSpec, results: Mapping, ranks_of: readings.RanksOf,
                        comparisons: Sequence[Comparison],
                        resampler: Optional[bootstrap.Resampler] = None) -> str:
  """This grid's reading by the rule before issue 67 (each question's value averaged over
  the seeds, then the questions resampled) against `comparisons` (the seed-aware reading of
  the same results and ranks)."""
  before = Reading(spec, tuple(readings.compare(spec, results, ranks_of, seed_aware=False,
                                                resampler=resampler)), "questions only")
  after = Reading(spec, tuple(comparisons), "seeds and questions")
  intro = (f"# The reading of `{spec.name}`: question-only intervals against seed-aware "
           "ones\n\n"
           "Generated by `twotower/experiment/reading_changes.py` from this folder's results "
           "and per-question ranks, read twice by reading.md's rule; do not edit by hand. "
           "**questions only**: the interval before issue 67, each question's value averaged "
           "over the seeds before the questions were resampled, so it measured which "
           "questions were drawn, not whether another pre-training would agree. **seeds and "
           "questions**: the interval reading.md now uses, a two-stage bootstrap that draws "
           "the seeds (pre-trainings), then the questions (experiment/bootstrap.py). "
           "Comparisons without ranks (seed SDs) or with one seed on a side (observations) "
           "read the same both ways.")
  return markdown(before, after, intro=intro)


def write_seed_aware(spec: GridSpec, results: Mapping, ranks_of: readings.RanksOf,
                     comparisons: Sequence[Comparison], results_dir: str,
                     resampler: Optional[bootstrap.Resampler] = None) -> Optional[str]:
  """Writes `<results_dir>/seed-aware-changes.md` where some comparison has a seed-aware
  interval; returns its path (None: nothing drew seeds)."""
  if not any(c.boot is not None and c.boot.seed_aware for c in comparisons):
    return None
  path = os.path.join(results_dir, SEED_AWARE_FILE)
  tio.write_text(path, seed_aware_markdown(spec, results, ranks_of, comparisons, resampler))
  return path
