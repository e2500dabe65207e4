"""README.md and docs/results.md say what the grids' results folders say (issue 67): their
rendered regions are what twotower.experiment.pages writes from results.json and cells.json,
the counts in them are checked against those files here, a planted wrong count is caught, and
no count of seeds, cells, pairs or verdicts, no decimal number of a grid and no uncited
comparison of rows stands outside a region."""

from __future__ import annotations

import collections
import json
import pathlib
import re
import shutil

import pytest

from twotower.experiment import grid, pages, plan

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
GRIDS = ("cpu-small", "cpu-small-links")
#: The inputs the committed grids ran on (their folders' README commands): the plans' sizes.
INPUTS = plan.Inputs("../shared/data/wiki/enwiki-slice-pages-articles.xml.bz2",
                     squad="../shared/data/squad/train-subset-v1.1.json",
                     corpus="../shared/data/wiki/enwiki-2018-wikiextractor.txt.bz2")


def _page(page: str) -> str:
  return (ROOT / page).read_text(encoding="utf-8")


def _region(page: str, name: str) -> str:
  found = [r.body for r in pages.regions(_page(page)) if r.name == name]
  assert found, f"{page} has no region {name}"
  return found[0]


def _json(grid_name: str, name: str):
  return json.loads((RESULTS / grid_name / name).read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------
# The committed pages.
# ---------------------------------------------------------------------------------------------


def test_the_committed_pages_are_what_their_folders_give():
  """Every region is what its grid's folder gives now, and no count, decimal or comparison
  of the grid stands outside one. After a re-render of a folder:
  python -m twotower.experiment.pages."""
  assert [str(f) for f in pages.check(str(ROOT))] == []


def test_the_readme_shows_the_current_grid():
  """The project README's tables are cpu-small-links' summary (issue 67: they were
  cpu-small's, with its 89 WLP pairs)."""
  names = {r.name for r in pages.regions(_page("README.md"))}
  assert "cpu-small-links/summary" in names
  assert not any(name.startswith("cpu-small/") for name in names)
  assert _region("README.md", "cpu-small-links/summary") == \
      (RESULTS / "cpu-small-links" / "summary.md").read_text(encoding="utf-8").strip()


@pytest.mark.parametrize("grid_name", GRIDS)
def test_the_seeds_region_is_results_json(grid_name):
  """Each table's line names every distinct seed set its rows have, from results.json; a
  table whose seeded rows all have one seed set says "every": Tables 5 and 6 are seed 0."""
  spec = grid.load(grid_name)
  body = _region("docs/results.md", f"{grid_name}/seeds")
  per_table = dict(re.findall(r"^\* (.+?) \(\d+ rows\):(.*?)(?=^\* |\Z)", body, re.S | re.M))
  seeds = collections.defaultdict(lambda: collections.defaultdict(set))
  for e in _json(grid_name, "results.json")["per_seed"]:
    if spec.systems[e["system"]].kind != "bm25":
      seeds[e["table"]][(e["system"], e["variant"])].add(tuple([e["ratio"], e["seed"]]))
  for table in spec.tables:
    if table.id not in seeds:
      continue
    text = per_table[table.title.split(":")[0]]
    for rows in seeds[table.id].values():
      for ratio, seed in rows:
        assert re.search(rf"\bseeds? [\d, ]*\b{seed}\b", text), (table.id, ratio, seed)
    sets = {frozenset(s for _, s in rows) for rows in seeds[table.id].values()}
    if len(sets) == 1 and len(next(iter(sets))) == 1:
      assert f"seed {min(next(iter(sets)))} at each of its ratios" in text
  if grid_name == "cpu-small-links":
    for table in ("Table 5", "Table 6"):
      assert "seed 0 at each of its ratios: every" in per_table[table]


@pytest.mark.parametrize("grid_name", GRIDS)
def test_the_cells_region_is_cells_json_and_the_plan(grid_name):
  """"N of M cells done": N the records cells.json holds, M the cells the grid plans on the
  inputs it ran on."""
  page = "README.md" if grid_name == "cpu-small-links" else "docs/results.md"
  done, planned = map(int, re.match(r"(\d+) of (\d+) cells done",
                                    _region(page, f"{grid_name}/cells")).groups())
  assert done == len(_json(grid_name, "cells.json"))
  assert planned == len(plan.plan(grid.load(grid_name), INPUTS)[0])


@pytest.mark.parametrize("grid_name", GRIDS)
def test_the_wlp_and_fine_tuning_regions_are_cells_json(grid_name):
  records = list(_json(grid_name, "cells.json").values())
  table1 = next(r for r in records if r["kind"] == "datastats")["table1"]
  wlp = next(row["pairs"] for row in table1 if row["task"] == "wlp")
  body = _region("docs/results.md", f"{grid_name}/wlp")
  assert body.startswith(f"WLP had {wlp:,} training pairs")
  finetune = [r for r in records if r["kind"] == "finetune"]
  chose = sum(1 for r in finetune if "rule" in (r.get("selection") or {}))
  carried = sum(1 for r in finetune if (r.get("selection") or {}).get("carried_from"))
  body = _region("docs/results.md", f"{grid_name}/finetune")
  assert f", {len(finetune)} fine-tuning runs)" in body
  numbers = [int(n) for n in re.findall(r"[:;] (\d+) ", body)]
  assert sum(numbers) == len(finetune)
  if chose:      # cpu-small-links: seed 0 chooses, 1 % and the other seeds carry
    assert f": {chose} chose their own" in body and chose + carried == len(finetune)
    assert "seeds 1, 2 at 5 %, 10 % and 80 %" in body and "(1 %, seeds 0, 1, 2)" in body
  else:          # cpu-small: the grid file's fixed steps
    assert f": {len(finetune)} trained the grid file's fixed steps" in body


def test_the_reading_regions_are_reading_md():
  """A reading region is reading.md's summary with its links made the page's; the counts the
  `against` line gives add up to the summary's."""
  for grid_name in GRIDS:
    reading = (RESULTS / grid_name / "reading.md").read_text(encoding="utf-8")
    body = _region("docs/results.md", f"{grid_name}/reading")
    assert body.replace(f"(results/{grid_name}/reading.md#", "(#") in reading
    folder = pages.Folder(grid.load(grid_name), str(RESULTS / grid_name), "x")
    counts = pages.verdict_counts(folder)
    assert set(counts) == {c.id for c in grid.load(grid_name).readings}
    for claim, by_verdict in counts.items():
      total = re.search(rf"\[{re.escape(claim)}\].*? at \d+ of (\d+) ", reading).group(1)
      assert sum(by_verdict.values()) == int(total), claim


def test_the_headline_region_is_headline_md_with_the_pages_links():
  """The README's headline (the pooled row against BM25, with and without the leaked
  article's questions) is headline.md less its title, its links into the folder made the
  README's; a link elsewhere or to an anchor is left as it is."""
  headline = (RESULTS / "cpu-small-links" / "headline.md").read_text(encoding="utf-8")
  body = _region("README.md", "cpu-small-links/headline")
  assert "](docs/results/cpu-small-links/reading.md#dense-over-bm25)" in body
  assert body.replace("](docs/results/cpu-small-links/", "](") in headline
  assert pages._rebased("[a](x.md#b) [c](#d) [e](https://f) [g](/h)", "L") == \
      "[a](L/x.md#b) [c](#d) [e](https://f) [g](/h)"


def test_every_row_trained_on_recovered_links_says_so():
  """cpu-small-links: a row whose pre-training reads WLP pairs (its own, or the row it reuses,
  or the dense row a hybrid fuses) says "title links" in its label, which every table,
  summary and reading prints."""
  spec = grid.load("cpu-small-links")

  def reads_wlp(name: str) -> bool:
    system = spec.systems[name]
    if system.kind == "hybrid":
      return any(reads_wlp(other) for other in system.fuse)
    return "wlp" in spec.pretraining_of(system).tasks

  trained = [name for name in spec.systems if reads_wlp(name)]
  assert {"ict+bfs+wlp-large", "ict+bfs+wlp-hn", "ict+bfs+wlp-large-hn",
          "ict+bfs+wlp-pooled+squad", "ict+bfs+wlp+contriever", "ict+bfs+wlp+crop",
          "hybrid"} <= set(trained)
  assert [n for n in trained if "title links" not in spec.systems[n].label] == []
  assert [n for n in spec.systems if n not in trained
          and "title links" in spec.systems[n].label] == []


# ---------------------------------------------------------------------------------------------
# The check catches what it is for.
# ---------------------------------------------------------------------------------------------


def _copy_pages(tmp_path) -> pathlib.Path:
  for page in pages.PAGES:
    (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / page, tmp_path / page)
  return tmp_path


@pytest.mark.parametrize("page, name", [
    ("README.md", "cpu-small-links/cells"), ("README.md", "cpu-small-links/wlp"),
    ("README.md", "cpu-small-links/seeds"), ("README.md", "cpu-small-links/finetune"),
    ("README.md", "cpu-small-links/summary"), ("README.md", "cpu-small-links/headline"),
    ("docs/results.md", "cpu-small-links/reading"),
    ("docs/results.md", "cpu-small/against"), ("docs/results.md", "cpu-small/tables1-2")])
def test_a_planted_wrong_count_is_caught(tmp_path, page, name):
  """One number of a region changed in a copy of the pages (the first count in it, plus
  one): the check names that region, and only it."""
  root = _copy_pages(tmp_path)
  text = (root / page).read_text(encoding="utf-8")
  region = next(r for r in pages.regions(text) if r.name == name)
  number = re.search(r"\d[\d,]*", region.body)
  wrong = f"{int(number.group().replace(',', '')) + 1:,}"
  planted = region.body[:number.start()] + wrong + region.body[number.end():]
  (root / page).write_text(text[:region.start] + text[region.start:region.end].replace(
      region.body, planted, 1) + text[region.end:], encoding="utf-8")
  found = pages.check(str(root), results_root=str(RESULTS))
  assert len(found) == 1 and found[0].page == page, [str(f) for f in found]
  assert f"region {name} is not what" in found[0].text


@pytest.mark.parametrize("sentence", [
    "Every row the readings compare has three seeds at every ratio.",
    "Tables 5 and 6 are seed 0 only.",
    "The README's tables still come from the grid with 89 WLP pairs.",
    "Every cell is done.",
    "Seeds 1 and 2 reuse seed 0's length.",
    "Several seeds agree here.",
], ids=["three-seeds", "seed-0", "wlp-pairs", "every-cell", "seeds-1-2", "several"])
def test_a_count_outside_a_region_is_caught(tmp_path, sentence):
  """The issue's sentences, planted in a grid section of docs/results.md outside any region."""
  root = _copy_pages(tmp_path)
  path = root / "docs" / "results.md"
  text = path.read_text(encoding="utf-8")
  at = text.index("## The re-run: `cpu-small-links`")
  path.write_text(text[:at] + sentence + "\n\n" + text[at:], encoding="utf-8")
  found = pages.check(str(root), results_root=str(RESULTS))
  assert len(found) == 1 and "a count outside a rendered region" in found[0].text
  assert found[0].line == text[:at].count("\n") + 1


def test_a_comparison_must_name_the_claim_that_tests_it(tmp_path):
  root = _copy_pages(tmp_path)
  path = root / "README.md"
  text = path.read_text(encoding="utf-8")
  at = text.index("Small-scale caveat:")
  uncited = "The dense rows lose far more of their recall in the open domain than BM25.\n\n"
  cited = "Shared towers lift the BoW-MLP (`shared-over-separate-bow-mlp`).\n\n"
  path.write_text(text[:at] + uncited + cited + text[at:], encoding="utf-8")
  found = pages.check(str(root), results_root=str(RESULTS))
  assert [f.line for f in found] == [text[:at].count("\n") + 1]
  assert "names no claim" in found[0].text


def test_what_counts_as_a_count():
  page = "\n".join([
      "## A grid",
      "Three seeds at 5 %.",                               # a count
      "The README gives every cell's time.",               # a possessive: not a count
      "Table 1 gives the pairs each input gave.",          # a table's number
      "Run `--seeds 0,1,2` to get more.",                  # inline code
      "```", "3 seeds", "```",                             # a code block
      "<!-- twotower:render g/seeds -->", "seeds 0, 1, 2", pages.END,
      "## The demo",
      "48 of 2,842 training pairs leaked.",                # not a grid's (docs/results.md)
  ])
  assert [f.line for f in pages.counted_sentences(page, "docs/results.md")] == [2]
  assert [f.line for f in pages.counted_sentences(page, "README.md")] == [2, 13]


def test_an_unclosed_region_is_refused():
  with pytest.raises(ValueError, match="line 2: a `<!-- twotower:render"):
    pages.regions("text\n<!-- twotower:render g/seeds -->\nseeds\n")


def test_the_command_fills_empty_regions_and_checks_them(tmp_path):
  """`python -m twotower.experiment.pages --root R` on pages whose regions are empty writes
  the committed regions; `--check` then passes, and fails on a planted count."""
  root = _copy_pages(tmp_path)
  (root / "docs" / "results").mkdir()
  for grid_name in GRIDS:
    (root / "docs" / "results" / grid_name).symlink_to(RESULTS / grid_name)
  for page in pages.PAGES:
    text = (root / page).read_text(encoding="utf-8")
    for region in reversed(pages.regions(text)):
      text = (text[:region.start] + f"<!-- twotower:render {region.name} -->\n{pages.END}"
              + text[region.end:])
    (root / page).write_text(text, encoding="utf-8")
  assert pages.main(["--root", str(root), "--check"]) == 1
  assert pages.main(["--root", str(root)]) == 0
  for page in pages.PAGES:
    assert (root / page).read_text(encoding="utf-8") == _page(page)
  assert pages.main(["--root", str(root), "--check"]) == 0
  readme = root / "README.md"
  readme.write_text(readme.read_text(encoding="utf-8").replace(
      "## Layout", "Tables 5 and 6 are seed 0 only.\n\n## Layout"), encoding="utf-8")
  assert pages.main(["--root", str(root), "--check"]) == 1


def test_grid_sections_type_no_decimal_number():
  """Outside the regions, code and inline code, the grids' sections quote no result."""
  for page, heading in (("README.md", "## The paper's grid at CPU scale"),
                        ("docs/results.md", "## The paper's grid at `cpu-small`"),
                        ("docs/results.md", "## The re-run: `cpu-small-links`")):
    text = _page(page)
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    prose = re.sub(r"<!-- twotower:render \S+ -->.*?" + re.escape(pages.END), "", section,
                   flags=re.S)
    prose = re.sub(r"```.*?```", "", prose, flags=re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    assert re.findall(r"\d+\.\d+", prose) == [], (page, heading)
