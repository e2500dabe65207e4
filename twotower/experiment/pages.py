"""The project's pages (README.md, docs/results.md) written from the grids' results folders.

Every region of a page between

    <!-- twotower:render GRID/PIECE -->
    <!-- /twotower:render -->

is written from `docs/results/GRID/` (results.json, cells.json and the files the render wrote
there: summary.md, tables1-2.md, reading.md, README.md's cells line, ranks/index.json), never
typed. A sentence that states a count of seeds, cells, pairs or verdicts belongs inside such a
region, and one that ranks rows names the claim of the reading that tests it; `--check` names
each region whose text is not what its folder gives now, each count outside a region
(`counted_sentences`) and each comparison that names no claim (`uncited_comparisons`):

    python -m twotower.experiment.pages            # rewrites every region of both pages
    python -m twotower.experiment.pages --check    # exit 1, a line per finding

Run it after a grid's folder is written again (`twotower experiment`, or
`python -m twotower.experiment.rerender`), which does not touch these regions.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import logging
import os
import posixpath
import re
from typing import Callable, Mapping, Optional, Sequence

from twotower.core import contracts
from twotower.core import files as tio
from twotower.experiment import budget as budget_lib
from twotower.experiment import execute, grid, readings, verdict_rule
from twotower.experiment.cell_id import CellId

logger = logging.getLogger(__name__)

#: The pages the command fills, relative to the repository root.
PAGES = ("README.md", "docs/results.md")
#: Where the pages' grids keep their results folders, relative to the repository root.
RESULTS_ROOT = "docs/results"
END = "<!-- /twotower:render -->"
_REGION = re.compile(r"<!-- twotower:render (?P<grid>[\w.+-]+)/(?P<piece>[\w.+-]+) -->\n"
                     r"(?:(?P<body>(?:(?!<!-- /?twotower:render).)*?)\n)?" + re.escape(END),
                     re.S)
#: Sections of a page whose counts are not a grid's, so no results folder can vouch for them:
#: {page: {heading: why}}. A counted sentence there is not asked to sit in a region.
NOT_A_GRID = {
    "docs/results.md": {
        "## The demo": "one `make demo` run and its history, not a grid (docs/results/demo/)"},
}


@dataclasses.dataclass(frozen=True)
class Region:
  """One rendered region of a page: its grid and piece, its text, and where it stands."""
  grid: str
  piece: str
  body: str
  start: int        # offsets of the whole region (markers included) in the page
  end: int
  line: int         # 1-based line of its opening marker

  @property
  def name(self) -> str:
    return f"{self.grid}/{self.piece}"


def regions(text: str) -> list[Region]:
  """The rendered regions of a page, in order; ValueError for an opening marker without its
  end (the line named)."""
  found = [Region(m["grid"], m["piece"], m["body"] or "", m.start(), m.end(),
                  text.count("\n", 0, m.start()) + 1) for m in _REGION.finditer(text)]
  opened = [m.start() for m in re.finditer(r"<!-- twotower:render ", text)]
  if len(opened) != len(found):
    inside = {r.start for r in found}
    line = next(text.count("\n", 0, at) + 1 for at in opened if at not in inside)
    raise ValueError(f"line {line}: a `<!-- twotower:render GRID/PIECE -->` without its "
                     f"`{END}`")
  return found


# ---------------------------------------------------------------------------------------------
# A results folder, and the pieces written from it.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Folder:
  """A grid's results folder as a page sees it: `link` is the folder's path relative to the
  page (what the page's links into it start with)."""
  spec: grid.GridSpec
  path: str
  link: str

  def text(self, name: str) -> str:
    path = os.path.join(self.path, name)
    if not os.path.exists(path):
      raise ValueError(f"{path}: not in the results folder (render the grid first)")
    return tio.read_text(path)

  def json(self, name: str):
    return tio.read_json(os.path.join(self.path, name))


def _ratio(ratio: int) -> str:
  return "zero-shot" if ratio == contracts.ZERO_SHOT_RATIO else f"{ratio} %"


def _listed(items: Sequence[str]) -> str:
  items = list(items)
  return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _seeds(seeds: Sequence[int]) -> str:
  return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(map(str, seeds))}"


def _table_name(table: grid.Table) -> str:
  """"Table 3", "Beyond the paper": what a table's title calls it before its colon."""
  return table.title.split(":", 1)[0].strip()


def _row_label(spec: grid.GridSpec, system: str, variant: str) -> str:
  label = spec.systems[system].label
  return label if variant == grid.BASE_VARIANT else f"{label} ({spec.variants[variant].label})"


def _seeded(spec: grid.GridSpec, system: str) -> bool:
  return spec.systems[system].kind not in readings.SEEDLESS_KINDS


def _seed_runs(results: Mapping) -> dict[tuple, dict[int, tuple[int, ...]]]:
  """{(table, system, variant): {ratio: the seeds results.json holds}}."""
  runs: dict[tuple, dict[int, set]] = {}
  for e in results["per_seed"]:
    if e.get("record"):
      runs.setdefault((e["table"], e["system"], e["variant"]), {}).setdefault(
          e["ratio"], set()).add(e["seed"])
  return {key: {r: tuple(sorted(s)) for r, s in by.items()} for key, by in runs.items()}


def _pattern(by_ratio: Mapping[int, tuple[int, ...]]) -> str:
  """"seeds 0, 1, 2 at each of its ratios", or per ratio where they differ."""
  by_seeds: dict[tuple, list[int]] = {}
  for ratio in sorted(by_ratio):
    by_seeds.setdefault(by_ratio[ratio], []).append(ratio)
  if len(by_seeds) == 1:
    return f"{_seeds(next(iter(by_seeds)))} at each of its ratios"
  return "; ".join(f"{_seeds(s)} at {_listed([_ratio(r) for r in rs])}"
                   for s, rs in by_seeds.items())


def seeds_piece(folder: Folder) -> str:
  """Per table, the seeds each row has at each ratio (results.json), and the claims that
  compare a row at a single seed somewhere (their verdicts there are observations)."""
  spec, runs = folder.spec, _seed_runs(folder.json("results.json"))
  lines = ["Seeds per table (results.json; a seed is a whole training chain):", ""]
  for table in spec.tables:
    rows = [(s, v) for (t, s, v) in runs if t == table.id]
    if not rows:
      continue
    groups: dict[str, list[str]] = {}
    for system, variant in rows:
      if _seeded(spec, system):
        groups.setdefault(_pattern(runs[(table.id, system, variant)]), []).append(
            _row_label(spec, system, variant))
    seeded = sum(len(labels) for labels in groups.values())
    largest = max((len(x) for x in groups.values()), default=0)
    parts = []
    for pattern, labels in sorted(groups.items(), key=lambda pl: -len(pl[1])):
      if len(groups) == 1 and seeded > 1:
        who = "every row" if seeded == len(rows) else "every seeded row"
      elif len(labels) == largest and len(labels) > 3:
        who = f"{len(labels)} of its {seeded} seeded rows"
      else:
        who = "; ".join(labels)
      parts.append(f"{pattern}: {who}")
    seedless = [_row_label(spec, s, v) for s, v in rows if not _seeded(spec, s)]
    if seedless:
      parts.append(f"one run, no seed: {'; '.join(seedless)}")
    head = f"* {_table_name(table)} ({len(rows)} rows)"
    lines += ([f"{head}: {parts[0]}."] if len(parts) == 1 else
              [f"{head}:"] + [f"  * {part}" for part in parts])
  single = single_seed_claims(spec, runs)
  if single:
    lines += ["", "Claims that compare a row at a single seed at some ratio, where their "
              "verdicts are observations: " + ", ".join(f"`{c}`" for c in single) + "."]
  return "\n".join(lines)


def single_seed_claims(spec: grid.GridSpec, runs: Mapping[tuple, Mapping[int, tuple]]
                       ) -> list[str]:
  """The ids of the claims with a seeded side that results.json holds at one seed at one of
  the claim's ratios (the side's `seeds:` filter applied)."""
  tables = {t.id: t for t in spec.tables}
  out = []
  for claim in spec.readings:
    ratios = claim.ratios or tables[claim.table].ratios
    for ref in (ref for pair in claim.pairs for ref in pair):
      by_ratio = runs.get((ref.table or claim.table, ref.system, ref.variant), {})
      counts = [len([s for s in by_ratio[r] if not ref.seeds or s in ref.seeds])
                for r in ratios if r in by_ratio]
      if _seeded(spec, ref.system) and any(n == 1 for n in counts):
        out.append(claim.id)
        break
  return out


def finetune_piece(folder: Folder) -> str:
  """How each fine-tuning run got its length (cells.json's `selection`): chosen on its
  validation split, carried from another ratio, or another seed's; the grid's fixed steps
  where the records have no selection."""
  chose: dict[int, list[int]] = collections.defaultdict(list)        # seed -> ratios
  carried: dict[tuple, list[int]] = collections.defaultdict(list)    # (to, from) -> seeds
  shared: dict[int, list[tuple]] = collections.defaultdict(list)     # from seed -> runs
  fixed = 0
  records = [r for r in folder.json(execute.RECORDS_FILE).values()
             if r.get("kind") == "finetune"]
  for record in records:
    cell, selection = CellId.parse(record["cell"]), record.get("selection") or {}
    source = selection.get("carried_from")
    if not selection:
      fixed += 1
    elif source is None:
      chose[cell.seed].append(cell.ratio)
    elif source["ratio"] != cell.ratio:
      carried[(cell.ratio, source["ratio"])].append(cell.seed)
    else:
      shared[source["seed"]].append((cell.ratio, cell.seed))
  parts = [f"{len(ratios)} chose their own on their ratio's validation split (seed {seed} at "
           f"{_listed([_ratio(r) for r in sorted(set(ratios))])})"
           for seed, ratios in sorted(chose.items())]
  parts += [f"{len(seeds)} trained the length chosen at {_ratio(source)}, scaled by training "
            f"questions ({_ratio(to)}, {_seeds(sorted(set(seeds)))})"
            for (to, source), seeds in sorted(carried.items())]
  parts += [f"{len(runs)} trained seed {seed}'s length at their ratio "
            f"({_seeds(sorted({s for _, s in runs}))} at "
            f"{_listed([_ratio(r) for r in sorted({r for r, _ in runs})])})"
            for seed, runs in sorted(shared.items())]
  if fixed:
    parts.append(f"{fixed} trained the grid file's fixed steps for their ratio")
  return (f"Fine-tuning lengths ({execute.RECORDS_FILE}, {len(records)} fine-tuning runs): "
          + "; ".join(parts) + ".")


_CELLS = re.compile(r"(\d+) of (\d+) cells done, (\d+) failed, (\d+) blocked, (\d+) to do")
_RESTORED = re.compile(r"(\d+) of the finished cells were restored")


def cells_piece(folder: Folder) -> str:
  """The cells done against the cells planned (the folder README's cells line, which the
  run wrote from its plan), checked against cells.json's records."""
  readme = folder.text("README.md")
  found = _CELLS.search(readme)
  if not found:
    raise ValueError(f"{os.path.join(folder.path, 'README.md')}: no 'N of M cells done' line")
  done, planned, failed, blocked, todo = map(int, found.groups())
  records = len(folder.json(execute.RECORDS_FILE))
  if records != done:
    raise ValueError(f"{folder.path}: its README says {done} cells done, "
                     f"{execute.RECORDS_FILE} holds {records} records")
  restored = _RESTORED.search(readme)
  return (f"{done} of {planned} cells done ({failed} failed, {blocked} blocked, {todo} to do; "
          f"{execute.RECORDS_FILE} holds their {records} records, "
          f"{int(restored.group(1)) if restored else 0} of them restored from an earlier work "
          "directory's).")


def ranks_piece(folder: Folder) -> str:
  """How many result cells have their per-question ranks in the folder (ranks/index.json)."""
  cells = {e["cell"] for e in folder.json("results.json")["per_seed"] if e.get("record")}
  index_file = os.path.join(folder.path, "ranks", "index.json")
  index = tio.read_json(index_file) if os.path.exists(index_file) else {}
  return (f"{len(cells & set(index))} of the {len(cells)} result cells behind the tables have "
          "their per-question ranks in `ranks/`.")


def wlp_piece(folder: Folder) -> str:
  """WLP's training pairs (Table 1, the datastats record): how many, from which input, and
  their share of the pooled ICT, BFS and WLP pairs."""
  stats = [r for r in folder.json(execute.RECORDS_FILE).values() if r.get("kind") == "datastats"]
  if not stats:
    raise ValueError(f"{folder.path}: no datastats record in {execute.RECORDS_FILE}")
  tasks = {row["task"]: row for row in stats[0]["table1"]}
  wlp = tasks["wlp"]
  pooled = sum(tasks[t]["pairs"] for t in ("ict", "bfs", "wlp") if t in tasks)
  inputs = "; ".join(f"{n:,} from {name}" for name, n in wlp.get("by_input", {}).items())
  share = 100 * wlp["pairs"] / pooled
  return (f"WLP had {wlp['pairs']:,} training pairs ({inputs}), {share:.2g} % of the pooled "
          "ICT, BFS and WLP pairs (Table 1).")


def summary_piece(folder: Folder) -> str:
  return folder.text("summary.md").strip()


def tables1_2_piece(folder: Folder) -> str:
  return folder.text("tables1-2.md").strip()


def _rebased(text: str, link: str) -> str:
  """`text`'s relative Markdown links, written from within the folder, made the page's."""
  return re.sub(r"\]\((?![a-z]+:|/|#)([^)]+)\)", lambda m: f"]({link}/{m.group(1)})", text)


def headline_piece(folder: Folder) -> str:
  """headline.md (experiment.leak_free: the pooled row against BM25 at every ratio, with and
  without the questions of the article the pre-training read), its title left to the page."""
  text = folder.text("headline.md").strip()
  return _rebased(re.sub(r"\A# [^\n]*\n+", "", text), folder.link)


def reading_piece(folder: Folder) -> str:
  """reading.md's Summary table, its links pointing into reading.md from the page."""
  text = folder.text(readings.READING_FILE)
  section = re.search(r"\n## Summary\n\n(.*?)\n+## ", text, re.S)
  if not section:
    raise ValueError(f"{os.path.join(folder.path, readings.READING_FILE)}: no Summary section")
  link = f"{folder.link}/{readings.READING_FILE}"
  return re.sub(r"\]\(#", f"]({link}#", section.group(1).strip())


def verdict_counts(folder: Folder) -> dict[str, dict[str, int]]:
  """{claim id: {verdict: count}} as reading.md's summary lines state them."""
  words = sorted(verdict_rule.VERDICTS, key=len, reverse=True)
  out = {}
  for line in folder.text(readings.READING_FILE).split("\n## Summary\n", 1)[-1].split(
      "\n## ", 1)[0].splitlines():
    found = re.match(r"\| \[([\w.+-]+)\]\(#\1\): .*? \| .*? \| (.*?) \| .*\|$", line)
    if not found:
      continue
    counts: dict[str, int] = {}
    for part in found.group(2).split("; "):
      verdict = next((w for w in words if part.startswith(f"{w} at ")), None)
      if verdict:
        counts[verdict] = int(re.match(r"\d+", part[len(verdict) + 4:]).group())
    out[found.group(1)] = counts
  return out


def against_piece(folder: Folder) -> str:
  """The claims with at least one verdict against them (a reversal or a size missed), each
  with how many of its comparisons."""
  against = []
  for claim, counts in verdict_counts(folder).items():
    n = sum(k for v, k in counts.items() if v in budget_lib.AGAINST)
    if n:
      against.append(f"[`{claim}`]({folder.link}/{readings.READING_FILE}#{claim}) "
                     f"({n} of {sum(counts.values())})")
  return ("Claims with verdicts against them in this grid's reading (against / comparisons): "
          + (", ".join(against) if against else "none") + ".")


PIECES: dict[str, Callable[[Folder], str]] = {
    "summary": summary_piece, "tables1-2": tables1_2_piece, "reading": reading_piece,
    "against": against_piece, "seeds": seeds_piece, "finetune": finetune_piece,
    "cells": cells_piece, "ranks": ranks_piece, "wlp": wlp_piece, "headline": headline_piece,
}


# ---------------------------------------------------------------------------------------------
# Pages: rendering their regions, and what a check finds.
# ---------------------------------------------------------------------------------------------


def render_page(text: str, page: str, results_root: str) -> str:
  """`text` (the page `page`, its path from the repository root) with every region written
  again from `<results_root>/<grid>/`; its links into a folder are made as the repository lays
  them out (`docs/results/<grid>/` from the page), wherever the folders are read from."""
  folders: dict[str, Folder] = {}
  out, at = [], 0
  for region in regions(text):
    if region.piece not in PIECES:
      raise ValueError(f"{page}:{region.line}: no piece {region.piece!r} (one of "
                       f"{', '.join(PIECES)})")
    if region.grid not in folders:
      path = os.path.join(results_root, region.grid)
      link = posixpath.relpath(posixpath.join(RESULTS_ROOT, region.grid),
                               posixpath.dirname(page.replace(os.sep, "/")) or ".")
      folders[region.grid] = Folder(grid.load(region.grid), path, link)
    body = PIECES[region.piece](folders[region.grid])
    out += [text[at:region.start],
            f"<!-- twotower:render {region.name} -->\n{body}\n{END}"]
    at = region.end
  return "".join(out + [text[at:]])


_NUMBER = (r"\d[\d,]*|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
           r"every|all|both|no|single|several|many|few|fewer|more|most|dozens|hundreds|"
           r"thousands")
_NOUN = r"(?:seeds?|cells?|pairs?|verdicts?)"
#: A count of seeds, cells, pairs or verdicts, exact or not: "three seeds", "4,575 WLP training
#: pairs", "every cell done", "several seeds", "seed 0", "seeds 1 and 2" (a possessive, "every
#: cell's time", is not one).
_COUNT = re.compile(rf"\b(?:{_NUMBER})\b(?:\s+[\w()+%-]+){{0,3}}?\s+{_NOUN}\b(?!['’]s)"
                    rf"|\bseeds? \d", re.I)


@dataclasses.dataclass(frozen=True)
class Finding:
  """A line of a page that a check reports: where, and why."""
  page: str
  line: int
  text: str

  def __str__(self) -> str:
    return f"{self.page}:{self.line}: {self.text}"


def counted_sentences(text: str, page: str = "") -> list[Finding]:
  """Each line with a count of seeds, cells, pairs or verdicts outside a rendered region, a
  code block, inline code and the sections `NOT_A_GRID` names for `page` (its path from the
  repository root)."""
  found = []
  for number, line in _prose_lines(text, page):
    # "Table 1 gives the pairs", "Tables 5 and 6": a table's number is not a count.
    prose = re.sub(r"\bTables? \d+(?:(?:, | and )\d+)*", "Table", re.sub(r"`[^`\n]*`", "", line))
    match = _COUNT.search(prose)
    if match:
      found.append(Finding(page, number, f"a count outside a rendered region: "
                                         f"{match.group()!r} in {line.strip()[:100]!r}"))
  return found


#: A sentence that ranks one row against another ("outperforms", "lifts", "far more than").
_COMPARISON = re.compile(r"\b(?:outperform\w*|(?:better|worse|stronger|weaker) than|lifts?|"
                         r"beats?|ahead of|far (?:more|less)|(?:above|below|more than|less "
                         r"than|reach(?:es)?) BM25)\b", re.I)


def _prose_lines(text: str, page: str):
  """(line number, line without inline code) of the page's prose: outside rendered regions,
  code blocks and the sections `NOT_A_GRID` names for `page`."""
  spans = [(r.start, r.end) for r in regions(text)]
  spans += [(m.start(), m.end()) for m in re.finditer(r"```.*?```", text, re.S)]
  exempt = NOT_A_GRID.get(page, {})
  heading, offset = "", 0
  for number, line in enumerate(text.splitlines(keepends=True), start=1):
    if line.startswith("## "):
      heading = line.strip()
    start, offset = offset, offset + len(line)
    if heading not in exempt and not any(a <= start < b for a, b in spans):
      yield number, line


def uncited_comparisons(text: str, page: str = "") -> list[Finding]:
  """Each line of prose that ranks rows against each other without naming the claim that
  tests it (a claim id in backticks, or a link to it in a reading) of a grid the page
  renders."""
  claims = {c.id for name in {r.grid for r in regions(text)} for c in grid.load(name).readings}
  found = []
  for number, line in _prose_lines(text, page):
    match = _COMPARISON.search(line)
    if match and not any(f"`{c}`" in line or f"#{c})" in line for c in claims):
      found.append(Finding(page, number, f"a comparison that names no claim testing it: "
                                         f"{match.group()!r} in {line.strip()[:100]!r}"))
  return found


def check(root: str, pages: Sequence[str] = PAGES,
          results_root: Optional[str] = None) -> list[Finding]:
  """Every region of `pages` (paths from `root`) whose text is not what its folder gives
  now, and every count outside a region."""
  results_root = results_root or os.path.join(root, RESULTS_ROOT)
  found = []
  for page in pages:
    path = os.path.join(root, page)
    text = tio.read_text(path)
    for old, new in zip(regions(text), regions(render_page(text, page, results_root))):
      if old.body != new.body:
        first = next((i for i, (a, b) in enumerate(
            zip(old.body.splitlines() + [""], new.body.splitlines() + [""])) if a != b), 0)
        found.append(Finding(page, old.line + 1 + first,
                             f"region {old.name} is not what {old.grid}'s folder gives: "
                             f"{(new.body.splitlines() + [''])[first][:100]!r}"))
    found += counted_sentences(text, page) + uncited_comparisons(text, page)
  return found


def write(root: str, pages: Sequence[str] = PAGES, results_root: Optional[str] = None
          ) -> list[str]:
  """Writes every region of `pages` again; returns the pages that changed."""
  results_root = results_root or os.path.join(root, RESULTS_ROOT)
  changed = []
  for page in pages:
    path = os.path.join(root, page)
    text = tio.read_text(path)
    new = render_page(text, page, results_root)
    if new != text:
      tio.write_text(path, new)
      changed.append(page)
  return changed


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m twotower.experiment.pages",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--root", default=".",
                      help="the repository root: its README.md, docs/results.md and "
                           "docs/results/<grid>/ (default: the current folder)")
  parser.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 naming each stale region and each count "
                           "outside a region")
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(message)s")
  if args.check:
    found = check(args.root)
    for finding in found:
      logger.error("%s", finding)
    logger.info("%d finding(s) in %s", len(found), ", ".join(PAGES))
    return 1 if found else 0
  changed = write(args.root)
  logger.info("rewrote the regions of %s", ", ".join(changed) if changed else "no page "
              "(every region already current)")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
