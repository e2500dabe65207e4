"""A grid's BEIR column: every pre-trained row zero-shot on each BEIR folder the grid names
(`beir:` in the grid file), beside BM25 flat, from the grid's beir cells (planned by
experiment.plan, each one `twotower beir`'s own run: experiment.cells).

What the results folder keeps, so that the column re-renders without a work directory (as
the ranks do for ReQA's tables, experiment.ranks):

    <results>/results.json "beir"                         each finished beir cell's record
    <results>/beir/<kind>_<rest>-<key>.per_query.json.gz   each beir cell's per-query values
    <results>/beir/index.json                              {cell name: its file}
    <results>/beir-<dataset>.md                            the table (experiment.render)

The table: nDCG@10 and R@100 (mean ± SD over the row's seeds) and the paired bootstrap of
each row's difference from BM25 flat over the judged queries (eval.beir_eval's
`paired_intervals`, the intervals `twotower beir` prints); for a row of several seeds, of its
per-query values averaged over them.
"""

from __future__ import annotations

import gzip
import json
import os
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from twotower.core import files as tio
from twotower.eval.ir_metrics import Evaluation
from twotower.experiment import cells, execute, ranks, verdict_rule
from twotower.experiment.grid import BASE_VARIANT, GridSpec
from twotower.experiment.plan import BEIR_REFERENCE, Cell, Plan

#: In the results directory: the per-query values and their index.
FOLDER = "beir"
SUFFIX = ".per_query.json.gz"
#: The key of results.json that holds the beir cells' records.
RESULTS_KEY = "beir"
#: The table's metrics, and those of its intervals (BEIR's headline pair; eval.beir_eval's
#: INTERVAL_METRICS, not imported here: it would import FAISS into every render).
METRICS = ("nDCG@10", "R@100")
TITLE = "BEIR zero-shot (nDCG@10, R@100)"

#: Cell name -> its per-query values (None: none kept).
PerQueryOf = Callable[[str], Optional[Evaluation]]


def results_name(cell: Cell) -> str:
  """`beir/scifact_ict_base_s0-0123456789` -> `beir_scifact_ict_base_s0-0123456789` + SUFFIX."""
  return cell.dirname.replace("/", "_", 1) + SUFFIX


def write_per_query(evaluation: Evaluation, path: str) -> None:
  value = {"metrics": list(evaluation.metrics), "query_ids": list(evaluation.query_ids),
           "values": {m: evaluation.values[m].tolist() for m in evaluation.metrics}}
  tio.write_bytes(path, tio.gzip_bytes(json.dumps(value, sort_keys=True).encode("utf-8")))


def read_per_query(path: str) -> Evaluation:
  with gzip.open(path, "rt", encoding="utf-8") as f:
    raw = json.load(f)
  return Evaluation(tuple(raw["metrics"]), tuple(raw["query_ids"]),
                    {m: np.asarray(v, dtype=np.float64) for m, v in raw["values"].items()})


def _cell_per_query(work: str, cell: Cell) -> Optional[Evaluation]:
  """The one system's per-query values `twotower beir` wrote in the cell's folder (None:
  none there, e.g. a cell restored without its outputs)."""
  from twotower.eval import beir_eval  # pylint: disable=import-outside-toplevel
  path = os.path.join(execute.cell_dir(work, cell), cells.BEIR_OUT, beir_eval.PER_QUERY_FILE)
  if not os.path.exists(path):
    return None
  (evaluation,) = beir_eval.read_per_query(path).values()
  return evaluation


def export(plan: Plan, work: str, results_dir: str) -> int:
  """Copies each finished beir cell's per-query values into `<results_dir>/beir/` and
  rewrites its index of the plan's beir cells (a cell restored without outputs keeps the
  file the folder has). Writes nothing for a plan without beir cells. Returns the count
  copied."""
  folder = os.path.join(results_dir, FOLDER)
  index, copied = {}, 0
  for cell in plan.of_kind("beir"):
    name = results_name(cell)
    evaluation = _cell_per_query(work, cell) if execute.state_of(work, cell) == "done" else None
    if evaluation is not None:
      write_per_query(evaluation, os.path.join(folder, name))
      copied += 1
    if os.path.exists(os.path.join(folder, name)):
      index[cell.name] = name
  ranks.write_index(folder, index)
  return copied


def entries(plan: Plan, work: str) -> list[dict]:
  """Each finished beir cell, in plan order: its cell, dataset, row (system, variant, seed;
  None for BM25 flat) and metrics record (what results.json keeps under RESULTS_KEY)."""
  out = []
  for cell in plan.of_kind("beir"):
    record = execute.read_done(execute.cell_dir(work, cell))
    if record and record.get("records"):
      out.append({"cell": cell.name, "dataset": cell.id.dataset, "system": cell.id.system,
                  "variant": cell.id.variant, "seed": cell.id.seed,
                  "record": record["records"][0]})
  return out


def from_results(results_dir: str) -> list[dict]:
  """The beir entries a results folder's results.json keeps ([] for none)."""
  path = os.path.join(results_dir, "results.json")
  return list(tio.read_json(path).get(RESULTS_KEY, [])) if os.path.exists(path) else []


def per_query_reader(results_dir: str) -> PerQueryOf:
  """The per-query values the results folder keeps, by cell name, through its index."""
  folder = os.path.join(results_dir, FOLDER)
  index = ranks.read_index(folder)
  cache: dict[str, Optional[Evaluation]] = {}

  def per_query_of(name: str) -> Optional[Evaluation]:
    if name not in cache:
      cache[name] = read_per_query(os.path.join(folder, index[name])) if name in index else None
    return cache[name]
  return per_query_of


def _seed_mean(evaluations: Sequence[Evaluation]) -> Evaluation:
  """Per-query values averaged over seeds (one query order: the qrels', sorted)."""
  first = evaluations[0]
  for other in evaluations[1:]:
    if other.query_ids != first.query_ids:
      raise ValueError("the seeds of a row were scored on different queries")
  return Evaluation(first.metrics, first.query_ids,
                    {m: np.mean([e.values[m] for e in evaluations], axis=0)
                     for m in first.metrics})


def _label(spec: GridSpec, system: str, variant: str) -> str:
  row = spec.systems[system].label if system in spec.systems else system
  if variant != BASE_VARIANT and variant in spec.variants:
    row += f" ({spec.variants[variant].label})"
  return row


def _value(values: Sequence[float]) -> str:
  mean, sd = verdict_rule.mean_and_sd(list(values))
  return f"{100 * mean:.2f}" + (f" ± {100 * sd:.2f}" if len(values) > 1 else "")


def interval_text(row: Mapping) -> str:
  """A paired interval as the table prints it: "-62.60 [-68.09, -57.44]" (points)."""
  return f"{row['difference']:+.2f} [{row['low']:+.2f}, {row['high']:+.2f}]"


def tables(spec: GridSpec, beir_entries: Sequence[Mapping],
           per_query_of: PerQueryOf) -> list[tuple[str, str]]:
  """(dataset, Markdown) of each BEIR folder with a finished cell: BM25 flat, then each row
  in plan order. An interval is left blank where BM25 flat's or the row's per-query values
  are not kept."""
  from twotower.eval import beir_eval  # pylint: disable=import-outside-toplevel
  out = []
  for data in spec.beir:
    these = [e for e in beir_entries if e["dataset"] == data.name]
    if not these:
      continue
    reference = next((e for e in these if e["system"] == BEIR_REFERENCE and
                      e["variant"] is None), None)
    rows: dict[tuple[str, str], list[Mapping]] = {}
    for e in these:
      if e is not reference:
        rows.setdefault((e["system"], e["variant"]), []).append(e)
    record = these[0]["record"]
    lines = [f"### {TITLE}: {data.name} ({record['split']}, {record['questions']:,} judged "
             f"queries, {record['candidates']:,} documents)", "",
             "| Row | seeds | " + " | ".join(METRICS) + " | "
             + " | ".join(f"{m} vs BM25 flat [95 %]" for m in METRICS) + " |",
             "|---|---:|" + "---:|" * (2 * len(METRICS))]
    base = per_query_of(reference["cell"]) if reference else None
    if reference:
      lines.append("| BM25 flat (Pyserini's BEIR regression) | – | " + " | ".join(
          _value([reference["record"]["metrics"][m]]) for m in METRICS) + " |"
          + " |" * len(METRICS))
    for (system, variant), group in rows.items():
      group = sorted(group, key=lambda e: e["seed"])
      cells_text = [_value([e["record"]["metrics"][m] for e in group]) for m in METRICS]
      evaluations = [per_query_of(e["cell"]) for e in group]
      intervals = {}
      if base is not None and all(ev is not None for ev in evaluations):
        for r in beir_eval.paired_intervals(
            {BEIR_REFERENCE: base, system: _seed_mean(evaluations)}, METRICS):
          intervals[r["metric"]] = interval_text(r)
      seeds = ", ".join(str(e["seed"]) for e in group)
      lines.append(f"| {_label(spec, system, variant)} | {seeds} | " + " | ".join(cells_text)
                   + " | " + " | ".join(intervals.get(m, "") for m in METRICS) + " |")
    lines += ["", f"`{data.path}`, qrels `{data.split}`. Each row's pre-trained towers, not "
              "fine-tuned, scored by `twotower beir`'s dense system; BM25 flat as Pyserini's "
              "BEIR regressions run it. Percent; `mean ± SD` over the row's seeds. The "
              "interval: the paired bootstrap of the difference from BM25 flat over the "
              "judged queries, in points (over several seeds, of the per-query means).", ""]
    out.append((data.name, "\n".join(lines)))
  return out
