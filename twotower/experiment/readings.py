"""The reading of a grid: each claim of the grid file (grid.Claim) checked against the results,
with the verdict computed by one rule, so that no sentence about the grid is typed by hand.

    twotower experiment ...              # writes <results_dir>/reading.md with the tables
    python -m twotower.experiment.rerender --grid cpu-small \\
        --results_dir docs/results/cpu-small   # re-renders it from results.json + cells.json

The rule (`verdict`), on recalls in percent, mean and sample standard deviation (n - 1) over
the seeds of each row:

  * A difference is **resolved** when |mean A - mean B| >= 2 x max(SD A, SD B) and each side
    has at least two seeds. A BM25 row has no seed (the same numbers on every run): its SD is
    0 by construction and one run is enough on its side.
  * Resolved in the claim's direction: **holds, resolved**; against it: **contradicted**.
  * Both sides measured often enough but the gap under the bar: **not resolved**.
  * One seed on a side that has a seed: an **observation** (as or against the claim): the
    difference has no spread to be measured against, whatever its size.

A second section checks each pre-training run's held-out in-batch accuracy at its last step
against chance (1 / the documents a held-out query is ranked among: the batch, or the run's
held-out pairs where fewer), so "does not generalise at this scale" is computed too.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Iterable, Mapping, Optional, Sequence

from twotower import contracts
from twotower import io as tio
from twotower.experiment import grid as grid_lib
from twotower.experiment import plan as plan_lib
from twotower.experiment.grid import Claim, GridSpec, RowRef
from twotower.experiment.identity import CellId

READING_FILE = "reading.md"
HOLDS = "holds, resolved"
CONTRADICTED = "contradicted"
NOT_RESOLVED = "not resolved"
SEEN_AS = "observation, as claimed"
SEEN_AGAINST = "observation, against the claim"
VERDICTS = (HOLDS, CONTRADICTED, NOT_RESOLVED, SEEN_AS, SEEN_AGAINST)
# Rows whose result does not depend on the seed (their SD is 0 by construction).
SEEDLESS_KINDS = ("bm25",)
RULE = ("A difference is **resolved** when |mean A − mean B| ≥ 2 × max(SD A, SD B), the SDs "
        "being sample standard deviations (n − 1) over seeds, with at least two seeds on each "
        "side; a BM25 row has no seed (SD 0 by construction), so one run serves its side. "
        "Resolved in the claim's direction: **holds, resolved**; against it: "
        "**contradicted**; under the bar: **not resolved**. With one seed on a side that has "
        "seeds, the difference is an **observation** only (as or against the claim), whatever "
        "its size.")


def mean_and_sd(values: Sequence[float]) -> tuple[float, float]:
  """Mean and sample standard deviation (n - 1; 0.0 for a single value)."""
  mean = sum(values) / len(values)
  if len(values) < 2:
    return mean, 0.0
  return mean, math.sqrt(sum((x - mean) ** 2 for x in values) / (len(values) - 1))


@dataclasses.dataclass(frozen=True)
class Side:
  """One row's values (percent) on one metric at one ratio, one per seed."""
  label: str
  values: tuple[float, ...]
  seedless: bool = False      # BM25: the same value on every seed

  @property
  def mean(self) -> float:
    return mean_and_sd(self.values)[0]

  @property
  def sd(self) -> float:
    return mean_and_sd(self.values)[1]

  @property
  def measured(self) -> bool:
    """Whether the side's spread is known: two seeds or more, or no seed to vary."""
    return self.seedless or len(self.values) >= 2

  def text(self) -> str:
    if len(self.values) < 2:
      return f"{self.mean:.2f}" + (" (no seed)" if self.seedless else " (1 seed)")
    return f"{self.mean:.2f} ± {self.sd:.2f} ({len(self.values)} seeds)"


def verdict(a: Side, b: Side, expect: str = "higher") -> str:
  """The rule of the module docstring: is A above (`expect` "higher") or below B?"""
  diff = a.mean - b.mean
  as_claimed = diff > 0 if expect == "higher" else diff < 0
  if not (a.measured and b.measured):
    return SEEN_AS if as_claimed else SEEN_AGAINST
  bar = 2 * max(a.sd, b.sd)
  if diff != 0 and abs(diff) >= bar:
    return HOLDS if as_claimed else CONTRADICTED
  return NOT_RESOLVED


@dataclasses.dataclass(frozen=True)
class Comparison:
  """One claim's pair of rows at one ratio on one metric, and its verdict."""
  claim: str
  dataset: str
  ratio: int
  metric: str
  a: Side
  b: Side
  verdict: str


def _per_seed(results: Mapping) -> dict[tuple, dict[int, Mapping[str, float]]]:
  """{(table, dataset, system, variant, ratio): {seed: metrics}} from results.json."""
  out: dict[tuple, dict[int, Mapping[str, float]]] = {}
  for e in results.get("per_seed", ()):
    if e.get("record"):
      key = (e["table"], e["dataset"], e["system"], e["variant"], e["ratio"])
      out.setdefault(key, {})[e["seed"]] = e["record"]["metrics"]
  return out


def _label(spec: GridSpec, ref: RowRef, claim_table: str) -> str:
  """The row as the tables name it ("Transformer, ICT (L4 / d128)"), plus the table and the
  seeds where the claim reads another table or some seeds only."""
  system = spec.systems.get(ref.system)
  if system is None:
    label = ref.system
  elif system.pretraining in ("", "-"):
    label = system.encoder
  else:
    label = f"{system.encoder}, {system.pretraining}"
  if ref.variant != grid_lib.BASE_VARIANT:
    label += f" ({spec.variants[ref.variant].label})"
  if ref.table and ref.table != claim_table:
    label += f" [Table {ref.table}]"
  if ref.seeds:
    label += f" [seed {', '.join(map(str, ref.seeds))}]"
  return label


def compare(spec: GridSpec, results: Mapping) -> list[Comparison]:
  """Every claim x pair x ratio x metric that the results hold both sides of."""
  values = _per_seed(results)
  tables = {t.id: t for t in spec.tables}
  datasets = sorted({key[1] for key in values})
  out = []
  for claim in spec.readings:
    table = tables.get(claim.table)
    ratios = claim.ratios or (table.ratios if table else ())
    for dataset in datasets:
      for ratio in ratios:
        for metric in claim.metrics:
          for ref_a, ref_b in claim.pairs:
            a, b = (_side(spec, values, claim.table, dataset, ratio, metric, ref)
                    for ref in (ref_a, ref_b))
            if a is None or b is None:
              continue
            out.append(Comparison(claim.id, dataset, ratio, metric, a, b,
                                  verdict(a, b, claim.expect)))
  return out


def _side(spec: GridSpec, values, claim_table: str, dataset: str, ratio: int, metric: str,
          ref: RowRef) -> Optional[Side]:
  by_seed = values.get((ref.table or claim_table, dataset, ref.system, ref.variant, ratio), {})
  xs = tuple(100 * m[metric] for seed, m in sorted(by_seed.items())
             if metric in m and (not ref.seeds or seed in ref.seeds))
  if not xs:
    return None
  system = spec.systems.get(ref.system)
  return Side(_label(spec, ref, claim_table), xs,
              seedless=bool(system and system.kind in SEEDLESS_KINDS))


# ---------------------------------------------------------------------------------------------
# Pre-training: held-out in-batch accuracy against chance.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PretrainCheck:
  """One pre-training run's last held-out in-batch accuracy against chance."""
  cell: str
  label: str
  steps: int
  batch: int
  eval_examples: int          # eval_steps x batch: the examples each held-out point averages
  heldout_accuracy: float
  train_accuracy: float
  heldout_pairs: Optional[int] = None  # the run's tasks' held-out pairs (None: not recorded)

  @property
  def distinct(self) -> int:
    """The distinct held-out pairs a held-out point can hold: a held-out set smaller than
    the batch or than the point is cycled, and a document repeated in a batch is masked as an
    accidental hit, not counted as a negative."""
    return self.batch if self.heldout_pairs is None else max(1, min(self.batch,
                                                                    self.heldout_pairs))

  @property
  def chance(self) -> float:
    """1 / the documents each query is ranked among: the batch, or fewer held-out pairs."""
    return 1.0 / self.distinct

  @property
  def margin(self) -> float:
    """Two binomial standard errors of an accuracy at chance over the distinct held-out
    examples of one point (its examples, or the held-out pairs where fewer)."""
    n = min(self.eval_examples, self.heldout_pairs or self.eval_examples)
    return 2 * math.sqrt(self.chance * (1 - self.chance) / max(1, n))

  @property
  def above_chance(self) -> bool:
    return self.heldout_accuracy >= self.chance + self.margin


def pretrain_checks(spec: GridSpec, records: Iterable[Mapping]) -> list[PretrainCheck]:
  """A check per pre-training record (cells.json values) whose history logs the held-out
  in-batch accuracy (MLM logs none; a record restored from an older file may hold no
  history); rows the grid no longer has are left out. The held-out pair counts come from
  the record of the pair cell the run read (its `stats`), where cells.json holds it."""
  records = list(records)
  pair_stats = {r.get("cell"): r.get("stats") or {} for r in records if r.get("kind") == "pairs"}
  # Whether the grid ran with a SQuAD file (the names of the control row's pair cells say
  # so; without a control row, every row's is pairs/wiki either way).
  have_squad = any("squad" in CellId.parse(cell).dataset for cell in pair_stats)
  out = []
  for record in records:
    history = record.get("history") or {}
    if record.get("kind") != "pretrain" or not history.get("val_in_batch_accuracy"):
      continue
    cell = CellId.parse(record["cell"])
    system, variant = spec.systems.get(cell.system), spec.variants.get(cell.variant)
    if system is None or variant is None or cell.seed is None:
      continue
    cfg = grid_lib.pretrain_config(spec, system, variant, cell.seed)
    stats = pair_stats.get(str(plan_lib.pairs_id(
        spec, spec.squad_text_in_pretraining(system), have_squad, spec.pairs_of(system))), {})
    counts = [stats.get(f"pairs_{task}_heldout") for task in cfg.data.tasks]
    out.append(PretrainCheck(
        record["cell"], _label(spec, RowRef(system.name, variant.name), ""),
        int(history["step"][-1]), cfg.data.batch_size, cfg.trainer.eval_steps *
        cfg.data.batch_size, float(history["val_in_batch_accuracy"][-1]),
        float(history["in_batch_accuracy"][-1]),
        sum(int(n or 0) for n in counts) if stats else None))
  return sorted(out, key=lambda c: c.cell)


# ---------------------------------------------------------------------------------------------
# Markdown.
# ---------------------------------------------------------------------------------------------


def _counts(comparisons: Sequence[Comparison]) -> dict[str, int]:
  return {v: sum(1 for c in comparisons if c.verdict == v) for v in VERDICTS}


def summary_markdown(spec: GridSpec, comparisons: Sequence[Comparison], link: str = "") -> str:
  """One line per claim: how many of its comparisons got each verdict (no recall in it: the
  numbers are in reading.md, at `link`: "" within reading.md itself)."""
  lines = ["| claim | source | " + " | ".join(VERDICTS) + " |",
           "|---|---|" + "---:|" * len(VERDICTS)]
  for claim in spec.readings:
    counts = _counts([c for c in comparisons if c.claim == claim.id])
    if any(counts.values()):
      lines.append(f"| [{claim.id}]({link}#{claim.id}): "
                   f"{claim.sentence} | {claim.source} | "
                   + " | ".join(str(counts[v]) for v in VERDICTS) + " |")
  return "\n".join(lines) + "\n"


def _claim_section(claim: Claim, comparisons: Sequence[Comparison]) -> list[str]:
  relation = ">" if claim.expect == "higher" else "<"
  # The heading is the claim's id, so "reading.md#<id>" links to it.
  lines = [f"### {claim.id}", "",
           f"> {claim.sentence}", "", f"Source: {claim.source}. Read from Table {claim.table}; "
           f"claimed: A {relation} B. Metrics in percent.", "",
           "| A | B | ratio | metric | A | B | A − B | A / B | 2 × max SD | verdict |",
           "|---|---|---:|---|---:|---:|---:|---:|---:|---|"]
  several_datasets = len({c.dataset for c in comparisons}) > 1
  for c in comparisons:
    where = ("zero-shot" if c.ratio == contracts.ZERO_SHOT_RATIO else f"{c.ratio} %") + (
        f" ({c.dataset})" if several_datasets else "")
    bar = f"{2 * max(c.a.sd, c.b.sd):.2f}" if c.a.measured and c.b.measured else "–"
    share = f"{100 * c.a.mean / c.b.mean:.1f} %" if c.b.mean else "–"
    lines.append(f"| {c.a.label} | {c.b.label} | {where} | {c.metric} | {c.a.text()} | "
                 f"{c.b.text()} | {c.a.mean - c.b.mean:+.2f} | {share} | {bar} | "
                 f"**{c.verdict}** |")
  counts = _counts(comparisons)
  lines += ["", "Verdicts: " + "; ".join(f"{v} {n}" for v, n in counts.items() if n) + ".", ""]
  return lines


def _pretrain_section(checks: Sequence[PretrainCheck], without_history: int) -> list[str]:
  lines = ["## Pre-training: does each task generalise?", "",
           "Held-out in-batch accuracy at the last logged step of each pre-training run, "
           "against chance: 1 / the documents each held-out query is ranked among, the batch, "
           "or the run's held-out pairs where there are fewer (a smaller held-out set is "
           "cycled, and a document repeated in a batch is masked as an accidental hit, not "
           "counted as a negative). A run is **above chance** when its accuracy is at least "
           "chance + 2 binomial standard errors of an accuracy at chance over the distinct "
           "held-out examples of that point (eval steps × batch, or the held-out pairs where "
           "fewer). Otherwise the task **does not generalise at this scale**: the towers "
           "learn the training pairs (training accuracy beside it) without learning what "
           "they share with held-out ones. A mixture's held-out pairs are its tasks' "
           "together; MLM logs no in-batch accuracy and is not listed."
           + (f" {without_history} pre-training record(s) hold no history (restored from "
              "an earlier records file) and are not listed." if without_history else ""), "",
           "| run | row | steps | batch | held-out pairs | chance | margin | "
           "held-out accuracy | training accuracy | verdict |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
  for c in checks:
    pairs = "–" if c.heldout_pairs is None else f"{c.heldout_pairs:,}"
    lines.append(f"| `{c.cell}` | {c.label} | {c.steps} | {c.batch} | {pairs} | "
                 f"{c.chance:.4f} | {c.margin:.4f} | {c.heldout_accuracy:.4f} | "
                 f"{c.train_accuracy:.4f} | "
                 f"**{'above chance' if c.above_chance else 'does not generalise at this scale'}"
                 f"** |")
  return lines + [""]


def markdown(spec: GridSpec, results: Mapping, cell_records: Iterable[Mapping] = ()
             ) -> str:
  """reading.md: the rule, a summary line per claim, each claim's comparisons, and the
  pre-training check. Every number in it is computed from `results` (results.json) and the
  pre-training and pair records (cells.json)."""
  comparisons = compare(spec, results)
  lines = [f"# Reading of the `{spec.name}` grid against its claims", "",
           "Generated by `twotower experiment` (`twotower/experiment/readings.py`) from "
           "`results.json` and the pre-training records in `cells.json`; the claims are the "
           f"`readings:` of `twotower/experiment/grids/{spec.name}.yaml`. Do not edit by hand: "
           f"`python -m twotower.experiment.rerender --grid {spec.name} --results_dir "
           f"docs/results/{spec.name}` writes it again.", "", "## The rule", "", RULE, "",
           "## Summary", "", summary_markdown(spec, comparisons), "## Claims", ""]
  for claim in spec.readings:
    these = [c for c in comparisons if c.claim == claim.id]
    if these:
      lines += _claim_section(claim, these)
  cell_records = list(cell_records)
  checks = pretrain_checks(spec, cell_records)
  if checks:
    without_history = sum(1 for r in cell_records
                          if r.get("kind") == "pretrain" and not r.get("history"))
    lines += _pretrain_section(checks, without_history)
  return "\n".join(lines).rstrip() + "\n"


def write(spec: GridSpec, results: Mapping, cell_records: Iterable[Mapping],
          results_dir: str) -> Optional[str]:
  """Writes `<results_dir>/reading.md` where the grid has readings; returns its text."""
  if not spec.readings:
    return None
  text = markdown(spec, results, cell_records)
  tio.write_text(os.path.join(results_dir, READING_FILE), text)
  return text
