"""Results of a grid: tables in the paper's layout (Markdown), CSV, JSON, recall@k plots (PNG)
and a README with the command, the machine, package versions, seeds, steps and time.

Everything is derived from the cells' `done.json` records and states (experiment.execute)
each time it is written, so the files are the same whether written mid-run or after.
Recalls are in percent; `mean ± SD` over seeds where a row has several, the SD a sample
standard deviation (n - 1), the one the reading's two-SD rule uses (experiment.readings).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import shlex
from typing import Iterable, Mapping, Optional, Sequence

from twotower.core import contracts
from twotower.core import files as tio
from twotower.eval import report
from twotower.experiment import (beir_cells, bootstrap, execute, finetune_length, leak_free,
                                 ranks, reading_changes, readings)
from twotower.experiment.grid import BASE_VARIANT, DEFAULT_SEEDS, GridSpec, Table
from twotower.experiment.estimate import format_seconds
from twotower.experiment.cell_id import CellId
from twotower.experiment.plan import RESULT_KINDS, Entry, Plan, has_zero_shot, table_seeds

RECALLS = tuple(f"R@{k}" for k in contracts.DEFAULT_KS)
PACKAGES = ("tensorflow", "keras", "tensorflow-text", "apache-beam", "faiss-cpu", "pyserini",
            "spacy", "numpy", "pyarrow")


@dataclasses.dataclass(frozen=True)
class Aggregate:
  """Mean and sample standard deviation (n - 1) over seeds of one row x ratio of a table."""
  table: str
  dataset: str
  system: str
  variant: str
  ratio: int
  seeds: tuple[int, ...]
  mean: Mapping[str, float]
  std: Mapping[str, float]
  questions: int
  candidates: int
  planned_seeds: int = 0    # seeds the grid asks for (0: as many as `seeds`)


def collect(plan: Plan, work: str, gold: str = "pair") -> dict[tuple[str, str], dict]:
  """{(result cell, split): metrics record under `gold`} of every finished result cell."""
  values = {}
  for cell in plan:
    if cell.kind not in RESULT_KINDS:
      continue
    for record in (execute.read_done(execute.cell_dir(work, cell)) or {}).get("records", []):
      if record.get("gold", "pair") == gold:
        values[(cell.name, record["split"])] = record
  return values


def aggregate(spec: GridSpec, entries: Sequence[Entry],
              values: Mapping[tuple[str, str], dict]) -> list[Aggregate]:
  """Entries grouped by (table, dataset, row, ratio), metrics averaged over their seeds;
  entries without a result yet are left out. Each says how many seeds the grid plans for it
  (`plan.table_seeds`), so that a partial mean says so, from a work directory or from a
  results folder that holds only the finished entries (`rerender`)."""
  tables = {t.id: t for t in spec.tables}
  groups: dict[tuple, dict[int, dict]] = {}
  for e in entries:
    key = (e.table, e.dataset, e.system, e.variant, e.ratio)
    record = values.get((e.cell, e.split))
    if record is not None:
      groups.setdefault(key, {})[e.seed] = record
  out = []
  for (table, dataset, system, variant, ratio), by_seed in groups.items():
    records = [by_seed[s] for s in sorted(by_seed)]
    mean, std = {}, {}
    for name in records[0]["metrics"]:
      xs = [r["metrics"][name] for r in records if name in r["metrics"]]
      mean[name], std[name] = readings.mean_and_sd(xs)
    out.append(Aggregate(table, dataset, system, variant, ratio, tuple(sorted(by_seed)), mean,
                         std, records[0]["questions"], records[0]["candidates"],
                         len(table_seeds(spec, tables[table], ratio, system, variant))))
  return out


def ratio_label(ratio: int) -> str:
  if ratio == contracts.ZERO_SHOT_RATIO:
    return "zero-shot"
  return f"{ratio}%/{100 - ratio}%"


def cell_text(agg: Optional[Aggregate], metric: str) -> str:
  if agg is None or metric not in agg.mean:
    return ""
  text = f"{100 * agg.mean[metric]:.2f}"
  if len(agg.seeds) > 1:
    text += f" ± {100 * agg.std[metric]:.2f}"
  if len(agg.seeds) < agg.planned_seeds:  # a mean of fewer seeds than the grid asks for
    text += f" ({len(agg.seeds)} of {agg.planned_seeds} seeds)"
  return text


def markdown_table(spec: GridSpec, table: Table, aggs: Sequence[Aggregate]) -> str:
  """The table in the paper's layout: leading columns naming the row, then per ratio
  R@1..R@100 ("recall") or R@100 alone ("r100"). Rows without any result are left out."""
  by = {(a.system, a.variant, a.ratio): a for a in aggs}
  metrics = RECALLS if table.layout == "recall" else ("R@100",)
  lead = ["Encoder", "Pre-training"] if table.layout == "recall" else \
      ["#", "Model", "Pre-training"]
  head = list(lead)
  for ratio in table.ratios:
    if table.layout == "recall":
      head += [f"{ratio_label(ratio)} {metrics[0]}"] + list(metrics[1:])
    else:
      head.append("R@100 zero-shot" if ratio == contracts.ZERO_SHOT_RATIO else f"R@100 {ratio}%")
  lines = ["| " + " | ".join(head) + " |",
           "|" + "|".join(["---"] * len(lead) + ["---:"] * (len(head) - len(lead))) + "|"]
  for index, row in enumerate(table.rows, start=1):
    if not any((row.system, row.variant, r) in by for r in table.ratios):
      continue
    system = spec.systems[row.system]
    cells = ([system.encoder + _variant_suffix(spec, row), system.pretraining]
             if table.layout == "recall" else
             [str(index), spec.variants[row.variant].label, system.pretraining])
    for ratio in table.ratios:
      cells += [cell_text(by.get((row.system, row.variant, ratio)), m) for m in metrics]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def _variant_suffix(spec: GridSpec, row) -> str:
  """" (L2 / d128, documents 256 / ...)" for a row of another variant than the preset's, in a
  layout that has no model column (two rows of one system would read alike)."""
  return "" if row.variant == BASE_VARIANT else f" ({spec.variants[row.variant].label})"


def summary_markdown(spec: GridSpec, aggs: Sequence[Aggregate]) -> str:
  """R@10 / R@100 of every row of the recall tables (3, beyond) per ratio: the short table a
  project README quotes. Cells not run yet read "todo"; a zero-shot cell a row cannot have
  (has_zero_shot), "–"."""
  lines = []
  for table in spec.tables:
    if table.layout != "recall":
      continue
    for dataset in sorted({a.dataset for a in aggs if a.table == table.id}):
      by = {(a.system, a.variant, a.ratio): a for a in aggs
            if a.table == table.id and a.dataset == dataset}
      lines += [f"{table.title} ({dataset}), R@10 / R@100 (%):", "",
                "| system | " + " | ".join(ratio_label(r) for r in table.ratios) + " |",
                "|---|" + "---:|" * len(table.ratios)]
      for row in table.rows:
        system = spec.systems[row.system]
        cells = []
        for ratio in table.ratios:
          agg = by.get((row.system, row.variant, ratio))
          if agg:
            cells.append(f"{cell_text(agg, 'R@10')} / {cell_text(agg, 'R@100')}")
          elif (ratio == contracts.ZERO_SHOT_RATIO and system.kind != "bm25"
                and not has_zero_shot(system)):
            cells.append("–")
          else:
            cells.append("todo")
        lines.append(f"| {system.label}{_variant_suffix(spec, row)} | " + " | ".join(cells) + " |")
      lines.append("")
  return "\n".join(lines)


def _markers(name: str) -> tuple[str, str]:
  return f"<!-- results:{name} -->", f"<!-- /results:{name} -->"


def has_block(path: str, name: str) -> bool:
  """Whether the file `path` has a `<!-- results:NAME -->` ... `<!-- /results:NAME -->` block."""
  content = tio.read_text(path)
  return all(marker in content for marker in _markers(name))


def update_block(path: str, name: str, text: str) -> bool:
  """Replaces what stands between `<!-- results:NAME -->` and `<!-- /results:NAME -->` in the
  file `path` with `text`; False (file untouched) where the markers are absent."""
  begin, end = _markers(name)
  content = tio.read_text(path)
  if begin not in content or end not in content:
    return False
  head, rest = content.split(begin, 1)
  tail = rest.split(end, 1)[1]
  tio.write_text(path, f"{head}{begin}\n{text.strip()}\n{end}{tail}")
  return True


SD_NOTE = "± is the sample standard deviation (n − 1) over the seeds."


@dataclasses.dataclass(frozen=True)
class Written:
  """What `write_tables` wrote: the README's sections, the summary (summary.md) and the
  reading's summary (reading.md's claim lines; "" for a grid without readings)."""
  sections: list[str]
  summary: str
  tables1_2: str = ""           # tables1-2.md ("" without a datastats cell)
  readings: tuple = ()          # the reading's comparisons (readings.Comparison)


def write_tables(spec: GridSpec, plan: Plan, entries: Sequence[Entry], work: str,
                 results_dir: str) -> Written:
  """`table<id>-<dataset>.md` (+ a PNG per ratio of recall tables), results.csv and
  results.json, summary.md, reading.md, and the result cells' per-question ranks (ranks/);
  returns the README's sections and the summaries."""
  ranks.export(plan, work, results_dir)
  stats = [(c.params.dataset, execute.read_done(execute.cell_dir(work, c)))
           for c in plan.of_kind("datastats")]
  # The reading's pre-training check reads the pre-training records and their pair cells';
  # a table with a hybrid row, its fuse cells' weights.
  records = [execute.read_done(execute.cell_dir(work, c))
             for c in plan.of_kind("pretrain") + plan.of_kind("pairs") + plan.of_kind("fuse")]
  beir_cells.export(plan, work, results_dir)
  return write_results(spec, entries, collect(plan, work), [(n, d) for n, d in stats if d],
                       [d for d in records if d], results_dir,
                       beir=beir_cells.entries(plan, work))


def write_results(spec: GridSpec, entries: Sequence[Entry],
                  values: Mapping[tuple[str, str], dict], stats: Sequence[tuple[str, dict]],
                  cell_records: Sequence[Mapping], results_dir: str,
                  ranks_of: Optional[readings.RanksOf] = None, variant: str = "",
                  resampler: Optional[bootstrap.Resampler] = None,
                  beir: Sequence[Mapping] = ()) -> Written:
  """What `write_tables` writes, from the result records (`collect`), the datastats records
  [(dataset, record)] and the pre-training, pair and fuse records; the per-question ranks
  from `ranks_of` (default: the results folder's). Where the folder holds the questions its
  pre-training read (experiment.leak_free), everything again without them, in a subfolder.

  `variant` (that subfolder's note): the tables, summary, results.json and reading of a
  variant, without plots or the files that compare readings. `beir`: the beir cells' entries
  (experiment.beir_cells; a grid without BEIR folders has none, and no key or file of them)."""
  aggs = aggregate(spec, entries, values)
  sections, kept, tables1_2 = [], [], ""
  if stats:
    from twotower.eval import data_stats  # pylint: disable=import-outside-toplevel
    text = data_stats.markdown(stats[0][1]["table1"], [(n, d["table2"]) for n, d in stats],
                               control=stats[0][1].get("table1_control"))
    tio.write_text(os.path.join(results_dir, "tables1-2.md"), text)
    sections.append(text)
    tables1_2 = text
  for table in spec.tables:
    for dataset in sorted({e.dataset for e in entries if e.table == table.id}):
      these = [a for a in aggs if a.table == table.id and a.dataset == dataset]
      if not these:
        continue
      title = (f"{table.title} ({dataset}, {max(a.candidates for a in these):,} "
               f"candidates)")
      text = f"### {title}\n\n{markdown_table(spec, table, these)}"
      if table.note:
        text += f"\n{table.note.strip()}\n"
      weights = hybrid_weights(spec, table, dataset, cell_records)
      if weights:
        text += f"\n{weights}\n"
      if any(len(a.seeds) > 1 for a in these):
        text += f"\n{SD_NOTE}\n"
      stem = f"table{table.id}-{dataset}"
      tio.write_text(os.path.join(results_dir, f"{stem}.md"), text)
      sections.append(text)
      kept += these
      if table.layout == "recall" and not variant:
        for ratio in table.ratios:
          records = [{"system": a.system if a.variant == "base" else f"{a.system} ({a.variant})",
                      "split": contracts.scored_split(ratio), "metrics": dict(a.mean)}
                     for a in these if a.ratio == ratio]
          if records:
            report.plot_recall(records, os.path.join(results_dir, f"{stem}-r{ratio}.png"),
                               f"{title}, {ratio_label(ratio)}: Recall@k")
  if beir and not variant:
    sections += write_beir(spec, beir, results_dir)
  summary = summary_markdown(spec, kept)
  tio.write_text(os.path.join(results_dir, "summary.md"), summary)
  _write_csv(kept, os.path.join(results_dir, "results.csv"))
  results = {"gold": "pair", "aggregates": [dataclasses.asdict(a) for a in kept],
             "per_seed": [{**dataclasses.asdict(e), "record": values.get((e.cell, e.split))}
                          for e in entries if (e.cell, e.split) in values]}
  if beir and not variant:
    results[beir_cells.RESULTS_KEY] = list(beir)
  tio.write_json(os.path.join(results_dir, "results.json"), results)
  # The ranks the tables' cells recorded (ranks.export ran first): paired intervals where both
  # rows of a comparison have them; the committed grids before them read by seeds alone.
  ranks_of = ranks_of or ranks.results_reader(results_dir)
  resampler = resampler or bootstrap.Resampler()
  comparisons = tuple(readings.compare(spec, results, ranks_of, resampler=resampler))
  readings.write(spec, results, cell_records, results_dir, ranks_of, comparisons, variant)
  if not variant:
    reading_changes.write(spec, comparisons, results_dir)
    reading_changes.write_seed_aware(spec, results, ranks_of, comparisons, results_dir,
                                     resampler)
    headline = _write_leak_free(spec, entries, results, cell_records, results_dir, ranks_of,
                                comparisons, resampler)
    if headline:
      # The headline beside the tables: the README's Results section ends with it.
      sections.append("##" + headline)      # "# The headline ..." as "### ..."
  return Written(sections, summary, tables1_2, comparisons)


def write_beir(spec: GridSpec, beir: Sequence[Mapping], results_dir: str) -> list[str]:
  """The BEIR zero-shot tables, `beir-<dataset>.md` (experiment.beir_cells: every pre-trained
  row beside BM25 flat, with its paired interval), from the beir cells' records and the
  per-query values the results folder keeps; returns them as README sections."""
  sections = []
  for dataset, text in beir_cells.tables(spec, beir, beir_cells.per_query_reader(results_dir)):
    tio.write_text(os.path.join(results_dir, f"beir-{dataset}.md"), text)
    sections.append(text)
  return sections


def _write_leak_free(spec: GridSpec, entries: Sequence[Entry], results: Mapping,
                     cell_records: Sequence[Mapping], results_dir: str,
                     ranks_of: readings.RanksOf, comparisons: Sequence[readings.Comparison],
                     resampler: bootstrap.Resampler) -> str:
  """experiment.leak_free's files where the results folder names excluded questions:
  `leak-free/` (its README holding its tables), its reading-changes.md, and headline.md.
  Returns the headline's text ("" where nothing was written)."""
  excluded = leak_free.read(results_dir)
  if excluded is None:
    return ""
  folder = os.path.join(results_dir, leak_free.FOLDER)
  values, left_out = leak_free.values(results, ranks_of, excluded)
  note = leak_free.note(excluded, left_out)
  kept = [e for e in entries if (e.cell, e.split) in values]
  written = write_results(spec, kept, values, [], cell_records, folder,
                          leak_free.filtered(ranks_of, excluded), note, resampler)
  titles = ", ".join(a.title for a in excluded.articles)
  tio.write_text(os.path.join(folder, "README.md"),
                 f"# `{spec.name}` without the questions of {titles}\n\n{note}\n\n"
                 "The reading: `reading.md`; what it changes: `reading-changes.md`; the "
                 f"headline both ways: `../{leak_free.HEADLINE_FILE}`.\n\n"
                 + "\n".join(written.sections))
  every = reading_changes.Reading(spec, tuple(comparisons), "every question")
  without = reading_changes.Reading(spec, written.readings, f"without {titles}")
  intro = (f"# The reading of `{spec.name}` on every question against the one without "
           f"{titles}\n\nGenerated by `twotower/experiment/render.py` "
           "(`reading_changes.markdown`) from the results folder's per-question ranks, read "
           "twice by reading.md's rule; do not edit by hand. " + note)
  tio.write_text(os.path.join(folder, reading_changes.CHANGES_FILE),
                 reading_changes.markdown(every, without, intro=intro))
  return leak_free.write_headline(spec, comparisons, written.readings, excluded,
                                  results_dir) or ""


def from_results_dir(results_dir: str) -> tuple[list[Entry], dict, list, list]:
  """(entries, result records, datastats records, pre-training, pair and fuse records) as a
  results folder keeps them (results.json, cells.json): what `write_results` needs, without
  the work directory. Only the cells that have a result are entries."""
  results = tio.read_json(os.path.join(results_dir, "results.json"))
  records_file = os.path.join(results_dir, execute.RECORDS_FILE)
  records = list(tio.read_json(records_file).values()) if os.path.exists(records_file) else []
  fields = [f.name for f in dataclasses.fields(Entry)]
  entries = [Entry(**{k: e[k] for k in fields}) for e in results["per_seed"]]
  values = {(e["cell"], e["split"]): e["record"] for e in results["per_seed"]}
  stats = [(CellId.parse(r["cell"]).dataset, r) for r in records if r.get("kind") == "datastats"]
  return entries, values, stats, [r for r in records
                                  if r.get("kind") in ("pretrain", "pairs", "fuse")]


def hybrid_weights(spec: GridSpec, table: Table, dataset: str,
                   cell_records: Iterable[Mapping]) -> str:
  """The sentence under a table with a hybrid row: the weight on BM25 its fuse cells used at
  each ratio and seed, how each was come by (tuned on N validation questions, carried, BM25
  alone), and the dense row where the validation split chose among several."""
  from twotower.eval import fusion  # pylint: disable=import-outside-toplevel
  hybrids = {(r.system, r.variant) for r in table.rows if spec.systems[r.system].kind == "hybrid"}
  rows, partners = [], set()
  for record in cell_records:
    if record.get("kind") != "fuse":
      continue
    cell = CellId.parse(record["cell"])
    if (cell.system, cell.variant) in hybrids and cell.dataset == dataset and \
        cell.ratio in table.ratios:
      rows.append((cell.ratio, cell.seed, record.get("weight"), record.get("weight_source")))
      partners.add(record.get("partner"))
  if not rows:
    return ""
  text = fusion.weights_note(rows)
  if len(partners) > 1:
    text += " The dense row each chose on validation is in cells.json (`partner`)."
  return text


def rerender(spec: GridSpec, results_dir: str, readme: str = "") -> Written:
  """Writes a results folder's tables, summary and reading again from its own results.json
  and cells.json (no work directory, no cell run); refreshes the README's Results section
  and, in `readme`, the results:<grid> and results:<grid>-reading blocks."""
  entries, values, stats, pretrain = from_results_dir(results_dir)
  written = write_results(spec, entries, values, stats, pretrain, results_dir,
                          beir=beir_cells.from_results(results_dir))
  replace_readme_results(os.path.join(results_dir, "README.md"), written.sections)
  if readme:
    update_blocks(readme, spec, written, results_dir)
  return written


def update_blocks(path: str, spec: GridSpec, written: Written, results_dir: str) -> None:
  """Refreshes, in the file `path`, the blocks a grid's results fill: `results:<grid>` (the
  summary), and where the file has them `results:<grid>-reading` (the reading's claim lines,
  linked to reading.md) and `results:<grid>-tables1-2`."""
  update_block(path, spec.name, written.summary)
  link = os.path.relpath(os.path.join(results_dir, readings.READING_FILE),
                         os.path.dirname(os.path.abspath(path)))
  reading = readings.summary_markdown(spec, written.readings, link) if spec.readings else ""
  for suffix, text in (("reading", reading), ("tables1-2", written.tables1_2)):
    if text:
      update_block(path, f"{spec.name}-{suffix}", text)


def machines_text(done: Mapping[str, Optional[dict]]) -> str:
  """The README's sentence on the machines the finished cells ran on (each record's
  `execute.MACHINE`): a cell made again on another CPU can differ in its last digits."""
  counts = collections.Counter((d or {}).get(execute.MACHINE, "") for d in done.values() if d)
  if not counts:
    return ""
  named = [f"{name} ({n})" for name, n in counts.most_common() if name]
  unnamed = counts.get("", 0)
  return (" The finished cells ran on: " + "; ".join(named or ["–"])
          + (f"; {unnamed} ran before records named their machine" if unnamed else "") + ".")


def remade_text(remade: Sequence[Mapping]) -> str:
  """The Cells section's sentence on restored cells that ran again for their outputs (their
  records' `execute.REMADE` notes); "" for none."""
  if not remade:
    return ""
  differ = [r for r in remade if r["differs"]]
  largest = [r["max_abs_diff"] for r in differ if r["max_abs_diff"] is not None]
  text = (f" {len(remade)} restored {'cell' if len(remade) == 1 else 'cells'} ran again "
          "because a cell still to do read their outputs: "
          f"{len(remade) - len(differ)} gave the numbers recorded before")
  if differ:
    text += f", {len(differ)} {'differs' if len(differ) == 1 else 'differ'} from them"
    text += f" (by up to {max(largest):.3g})" if largest else ""
    text += ("; the cells that read the first run keep its numbers, and the table below names "
             "each")
  return text + "."


def replace_readme_results(path: str, sections: Sequence[str]) -> bool:
  """Replaces the `## Results` section of a README that `write_readme` wrote; False (file
  untouched) where there is none."""
  if not os.path.exists(path):
    return False
  content = tio.read_text(path)
  begin, end = "\n## Results\n", "\n## Machine and packages\n"
  if begin not in content or end not in content:
    return False
  head, rest = content.split(begin, 1)
  tail = rest.split(end, 1)[1]
  tio.write_text(path, f"{head}{begin}\n" + "\n".join(sections) + f"{end}{tail}")
  return True


def _write_csv(aggs: Iterable[Aggregate], path: str) -> None:
  metrics = RECALLS + ("MRR",)
  head = (["table", "dataset", "system", "variant", "ratio", "seeds", "questions",
           "candidates"] + [f"{m}_{s}" for m in metrics for s in ("mean", "std")])
  lines = [",".join(head)]
  for a in aggs:
    lines.append(",".join([a.table, a.dataset, a.system, a.variant, str(a.ratio),
                           " ".join(map(str, a.seeds)), str(a.questions), str(a.candidates)]
                          + [f"{d.get(m, float('nan')):.4f}" for m in metrics
                             for d in (a.mean, a.std)]))
  tio.write_text(path, "\n".join(lines) + "\n")


def pretraining_costs(plan: Plan, done: Mapping[str, Optional[dict]]) -> list[str]:
  """README lines: each pre-trained row's steps and CPU time per seed, from the finished
  pre-training cells' records (what a user pays to add the row)."""
  rows: dict[tuple[str, str], list[dict]] = {}
  steps: dict[tuple[str, str], int] = {}
  for cell in plan:
    if cell.kind != "pretrain":
      continue
    key = (cell.params.system, cell.params.variant)
    steps[key] = cell.params.config["trainer"]["steps"]
    rows.setdefault(key, [])
    if done.get(cell.name):
      rows[key].append(done[cell.name])
  if not rows:
    return []
  lines = ["", "## Pre-training cost per row", "",
           "CPU time of one pre-training run (one seed) on the machine below, the mean over "
           "the finished seeds; under load from whatever else ran on the machine then.", "",
           "| row | variant | steps | seeds done | CPU per seed | wall per seed |",
           "|---|---|---:|---:|---:|---:|"]
  for (system, variant), records in rows.items():
    n = len(records)
    cpu = sum(r.get("cpu_seconds", 0.0) for r in records) / n if n else 0.0
    wall = sum(r.get("seconds", 0.0) for r in records) / n if n else 0.0
    lines.append(f"| {system} | {variant} | {steps[(system, variant)]} | {n} | "
                 f"{format_seconds(cpu) if n else ''} | {format_seconds(wall) if n else ''} |")
  return lines


def write_readme(spec: GridSpec, plan: Plan, work: str, command: Sequence[str],
                 results_dir: str, sections: Sequence[str]) -> str:
  """README.md: command, what the grid is, results, machine, packages, cells and time."""
  state = execute.states(work, plan)
  done = {c.name: execute.read_done(execute.cell_dir(work, c)) for c in plan}
  seeds = "; ".join(f"{'other ratios' if r == DEFAULT_SEEDS else ratio_label(r)}: {list(s)}"
                    for r, s in sorted(spec.seeds.items(),
                                       key=lambda rs: 1000 if rs[0] == DEFAULT_SEEDS else rs[0]))
  steps = ", ".join("zero-shot: none" if r == contracts.ZERO_SHOT_RATIO else
                    f"{r} %: {spec.finetune_length_text(r)}" for r in spec.ratios)
  lines = [f"# Experiment grid `{spec.name}`", "",
           "Written by `twotower experiment` (twotower/experiment/). Recalls in percent on the test "
           "side of each train/test split; gold convention `pair` (the paper's: the exact "
           "(sentence, passage) candidate); `mean ± SD` over seeds (sample SD, n − 1) "
           "where there are several. `results.json` holds every seed's record; the cells' "
           "`done.json` also hold ReQA's `sentence` convention.", "",
           spec.description, "", "## Command", "", "```",
           "twotower experiment " + shlex.join(list(command)), "```", "",
           f"Work directory: `{work}`. Model preset: `{spec.model}`. Pre-training steps: "
           f"{spec.pretrain_steps or 'preset'}; fine-tuning steps per ratio: {steps}. Seeds "
           f"(a seed is the whole training chain: pre-training and fine-tuning): {seeds}.", ""]
  notes = [f"* `{s.name}`: {s.note.strip()}" for s in spec.systems.values() if s.note]
  if notes:
    lines += ["Rows:", ""] + notes + [""]
  lines += ["## Results", ""] + (list(sections) or ["(no finished evaluations yet)", ""])
  m = tio.machine()
  lines += ["## Machine and packages", "",
            f"Rendered on {execute.machine_name()}, {m['cores']} cores, {m.get('ram', '?')} "
            f"RAM; {m['os']}; Python {m['python']}."
            + machines_text(done), "", "| package | version |", "|---|---|"]
  lines += [f"| {k} | {v} |" for k, v in tio.package_versions(PACKAGES).items()]
  lines += pretraining_costs(plan, done)
  lines += finetune_length.lengths_markdown([d for d in done.values() if d])
  wall = sum((d or {}).get("seconds", 0.0) for d in done.values())
  cpu = sum((d or {}).get("cpu_seconds", 0.0) for d in done.values())
  counts = {s: sum(1 for v in state.values() if v == s) for s in execute.STATES}
  restored = sum(1 for d in done.values() if d and d.get(execute.RESTORED))
  resumed = [d[execute.EARLIER] for d in done.values() if d and d.get(execute.EARLIER)]
  remade = [d[execute.REMADE] for d in done.values() if d and d.get(execute.REMADE)]
  lines += ["", "## Cells", "",
            (f"{restored} of the finished cells were restored from `{execute.RECORDS_FILE}` "
             "(run in an earlier work directory; their times are the ones recorded then). "
             if restored else "") +
            f"{counts['done']} of {len(plan)} cells done, {counts['failed']} failed, "
            f"{counts['blocked']} blocked, {counts['todo']} to do. Finished cells took "
            f"{format_seconds(wall)} wall and {format_seconds(cpu)} CPU time." +
            (f" {len(resumed)} {'cell was' if len(resumed) == 1 else 'cells were'} "
             "interrupted and resumed: their times are their last "
             f"attempt's; the earlier attempts spent at least {format_seconds(sum(resumed))} "
             "more wall time (from their files' last write; their CPU time is not measured)."
             if resumed else "") + remade_text(remade), "",
            "| cell | state | wall | CPU | finished |", "|---|---|---:|---:|---|"]
  for cell in plan:
    d = done[cell.name] or {}
    note = f" (resumed; + {format_seconds(d[execute.EARLIER])} before)" \
        if d.get(execute.EARLIER) else ""
    if d.get(execute.REMADE):
      differs = d[execute.REMADE]["max_abs_diff"]
      note += (" (re-made: as recorded)" if not d[execute.REMADE]["differs"] else
               f" (re-made: differs by up to {differs:.3g})" if differs is not None
               else " (re-made: differs)")
    lines.append(f"| `{cell.name}`{note} | {state[cell.name]} | "
                 f"{format_seconds(d['seconds']) if d else ''} | "
                 f"{format_seconds(d.get('cpu_seconds', 0)) if d else ''} | "
                 f"{d.get('finished', '')} |")
  text = "\n".join(lines) + "\n"
  tio.write_text(os.path.join(results_dir, "README.md"), text)
  return text
