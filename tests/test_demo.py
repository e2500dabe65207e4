"""`twotower demo --squad`: every stage on a small dump and a small SQuAD file, end to end.

The dump has 26 linked town articles in plain English (4 of them held out at the demo's 20 %);
the SQuAD file three articles whose questions reuse the words of their answer sentence. The
demo runs the `tiny` preset for a few steps: the test checks the report's shape and counts, not
the towers' quality; only BM25 is held to a score.
"""

from __future__ import annotations

import json
import pathlib
import random

import pyarrow.parquet as pq
import pytest

from twotower.core import contracts
from twotower.commands import demo as demo_cmd
from twotower.experiment import demo

from reqa_fixtures import squad_file
from wikidump_fixtures import DumpPage, write_dump

SYSTEMS = ("bm25", "ict+bfs+wlp", "no-ssl")
HELDOUT_PERCENT = 20.0  # the demo's default
N_PAGES = 26

TOWNS = ["Aldermoor", "Brackenford", "Cinderholt", "Dunmere", "Eastwick", "Fallowby",
         "Glenrush", "Harrowgate", "Ivybridge", "Juniper Falls", "Kestrel Bay", "Larkspur",
         "Millbrook", "Northwold", "Oakhaven", "Pennyrise", "Quarrytown", "Ravensholm",
         "Saltmarsh", "Thornbury", "Upton Vale", "Westerly", "Yarrowdale", "Zephyr Point",
         "Amberley", "Brightwater"]
RIVERS = ["Wend", "Calder", "Teme", "Lune", "Avon", "Ouse", "Nidd", "Wye"]
TRADES = ["wool", "salt", "timber", "copper", "barley", "lace", "glass", "cider", "tin"]
FOUNDERS = ["Norse settlers", "Cistercian monks", "a Roman garrison", "Flemish weavers",
            "fishermen from the coast", "a Saxon chieftain"]
SIGHTS = ["a ruined castle", "a stone bridge of nine arches", "a clock tower", "a covered market",
          "an old lighthouse", "a botanical garden", "a medieval tithe barn"]
PAPERS = ["the Gazette", "the Courier", "the Herald", "the Chronicle"]


def town_page(i: int, rng: random.Random) -> DumpPage:
  """One article: a lead, History, Geography and Economy, with links to three other towns."""
  name = TOWNS[i]
  river, trade, founder = rng.choice(RIVERS), rng.choice(TRADES), rng.choice(FOUNDERS)
  sight, paper = rng.choice(SIGHTS), rng.choice(PAPERS)
  year, people = rng.randrange(900, 1700), rng.randrange(2, 90) * 1000
  links = [TOWNS[(i + k) % N_PAGES] for k in (1, 2, 5)]
  text = (
      f"'''{name}''' is a market town on the river {river}, about {rng.randrange(5, 60)} miles "
      f"from [[{links[0]}]]. Around {people:,} people lived there at the last census. "
      f"The town is best known for {sight} and for its {trade} fairs.\n\n"
      f"Visitors often arrive by rail from [[{links[1]}]], where the branch line ends. "
      f"Local news is printed weekly in {paper}, which was first published in "
      f"{year + rng.randrange(150, 300)}.\n\n"
      f"== History ==\n{name} was founded by {founder} in {year}. "
      f"Its charter was granted by the king after the {trade} trade made the town rich. "
      f"A great fire destroyed most of the wooden houses in {year + rng.randrange(50, 200)}. "
      f"The houses were rebuilt in brick, and many of them still stand today.\n\n"
      f"During the industrial age {name} competed with [[{links[2]}]] for the {trade} market. "
      f"Mills along the {river} employed hundreds of workers. "
      f"The last mill closed in {rng.randrange(1950, 1990)} and became a museum.\n\n"
      f"== Geography ==\nThe town lies in a shallow valley where the {river} bends to the "
      f"{rng.choice(['north', 'south', 'east', 'west'])}. "
      f"Winters are mild and summers are often wet. "
      f"Meadows along the river flood nearly every spring.\n\n"
      f"== Economy ==\nToday most people in {name} work in tourism, schools and small workshops. "
      f"A weekly market sells {trade} goods, cheese and bread. "
      f"The council hopes that a new road will bring more visitors.\n"
      "[[Category:Towns]]")
  return DumpPage(i + 1, name, text)


def _qa(qid: str, question: str, context: str, answer: str) -> dict:
  return {"id": qid, "question": question,
          "answers": [{"text": answer, "answer_start": context.index(answer)}]}


def squad_articles() -> list[dict]:
  """Three articles, five paragraphs, twelve questions; each answer_start is its text's offset."""
  paragraphs = [
      ("Lighthouses", "The Bell Rock lighthouse stands on a reef in the North Sea. It was "
       "built by Robert Stevenson between 1807 and 1810. Its light can be seen from thirty-five "
       "miles away.", [
           ("Who built the Bell Rock lighthouse?", "Robert Stevenson"),
           ("Where does the Bell Rock lighthouse stand?", "on a reef in the North Sea"),
           ("From how far away can its light be seen?", "thirty-five miles")]),
      ("Lighthouses", "Early lighthouses burned wood or coal in open fires. Oil lamps with "
       "mirrors replaced the fires in the eighteenth century. Electric lamps arrived much "
       "later.", [
           ("What did early lighthouses burn in open fires?", "wood or coal"),
           ("What replaced the fires in the eighteenth century?", "Oil lamps with mirrors")]),
      ("Honey bee", "A honey bee colony has one queen and thousands of workers. The workers "
       "collect nectar from flowers and turn it into honey. Drones are male bees that do not "
       "sting.", [
           ("How many queens does a honey bee colony have?", "one queen"),
           ("What do the workers collect from flowers?", "nectar"),
           ("Which bees are male and do not sting?", "Drones")]),
      ("Honey bee", "Beekeepers have kept bees in hives for thousands of years. Ancient "
       "Egyptians carried hives on boats along the Nile.", [
           ("Who carried hives on boats along the Nile?", "Ancient Egyptians")]),
      ("Glacier", "A glacier is a slow river of ice that moves under its own weight. Glaciers "
       "carve deep valleys with steep sides. Melting glaciers raise the level of the "
       "sea.", [
           ("What kind of valleys do glaciers carve?", "deep valleys with steep sides"),
           ("What is a slow river of ice called?", "glacier"),
           ("What raises the level of the sea?", "Melting glaciers")]),
  ]
  articles: dict[str, list[dict]] = {}
  for n, (title, context, qas) in enumerate(paragraphs):
    articles.setdefault(title, []).append(
        {"context": context,
         "qas": [_qa(f"q{n}-{j}", q, context, a) for j, (q, a) in enumerate(qas)]})
  return [{"title": t, "paragraphs": ps} for t, ps in articles.items()]


def _rows(path) -> int:
  return pq.read_metadata(path).num_rows


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("demo")
  rng = random.Random(5)
  assert len([i for i in range(1, N_PAGES + 1)
              if contracts.is_heldout(i, HELDOUT_PERCENT)]) >= 3  # the fixture's premise
  dump = write_dump(tmp / "towns-pages-articles.xml.bz2",
                    [town_page(i, rng) for i in range(N_PAGES)])
  squad = squad_file(tmp, squad_articles())
  out = tmp / "demo"
  argv = ["--dump", str(dump), "--out", str(out), "--squad", squad,
          "--preset", "tiny", "--pretrain_steps", "4", "--vocab_size", "600"]
  result = demo.run(demo_cmd.parse(argv))
  return out, result, json.loads((out / "report" / "demo.json").read_text()), argv


@pytest.mark.slow  # every stage: 10 Beam jobs (8 of them embed), Lucene twice, 2 pre-trainings
def test_demo_with_squad_end_to_end(demo_run):
  out, result, records, _ = demo_run
  assert records == result.records
  report = out / "report"
  for name in ("demo.md", "demo.csv", "demo.json"):
    assert (report / name).stat().st_size > 0
  assert (report / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

  benchmarks = {name: pathlib.Path(d) for name, d in result.benchmarks.items()}
  assert sorted(benchmarks) == ["heldout", "reqa"]
  assert sorted((r["split"], r["system"]) for r in records) == sorted(
      (b, s) for b in benchmarks for s in SYSTEMS)
  for r in records:
    bench = benchmarks[r["split"]]
    assert r["questions"] == _rows(bench / contracts.questions_file("all")) > 0
    assert r["candidates"] == _rows(bench / contracts.CANDIDATES_FILE) > 0
    recalls = [r["metrics"][f"R@{k}"] for k in contracts.DEFAULT_KS]
    assert all(0.0 <= x <= 1.0 for x in recalls), r
    assert recalls == sorted(recalls), r
    assert 0.0 <= r["metrics"]["MRR"] <= 1.0

  reqa_rows = [r for r in records if r["split"] == "reqa"]
  assert reqa_rows[0]["questions"] == 12 and reqa_rows[0]["candidates"] == 14
  (bm25,) = [r for r in reqa_rows if r["system"] == "bm25"]
  # Each question repeats words of its answer sentence: BM25 finds nearly all at once.
  assert bm25["metrics"]["R@1"] >= 0.6
  assert bm25["metrics"]["R@10"] == bm25["metrics"]["R@100"] == 1.0
  table = (report / "demo.md").read_text()
  assert all(s in table for s in SYSTEMS) and "heldout" in table and "reqa" in table


@pytest.mark.slow  # a second demo: the report and the bundle again, every cell skipped
def test_demo_run_again_resumes_its_cells(demo_run):
  """Run again with the same settings, the demo re-uses every finished cell (the experiment's
  machinery: `done.json`) and gives the same records; only the report and the bundle are
  rebuilt from them."""
  out, first, _, argv = demo_run
  again = demo.run(demo_cmd.parse(argv))
  assert [name for name, _ in again.stage_seconds] == ["report",
                                                       "retriever bundle (all passages)"]
  assert again.records == first.records
  assert (pathlib.Path(again.bundle) / "manifest.json").exists()


def test_demo_plans_its_cells_on_the_experiments_machinery():
  """The demo is a plan: one pairs set, vocabulary and pre-training pair for both benchmarks,
  and per benchmark a BM25 cell and an eval cell per model, scoring every question with the
  passage as gold; the same settings give the same cells (and so resume)."""
  config = demo.DemoConfig(dump="d.xml.bz2", squad="s.json", preset="tiny")
  plan = demo.plan(config)
  assert [c.name for c in plan] == [
      "pairs/demo", "vocab/demo", "heldout/demo", "reqa/squad", "pretrain/ict+bfs+wlp",
      "pretrain/no-ssl", "bm25/heldout", "eval/heldout/ict+bfs+wlp", "eval/heldout/no-ssl",
      "bm25/reqa", "eval/reqa/ict+bfs+wlp", "eval/reqa/no-ssl"]
  for cell in plan.of_kind("bm25") + plan.of_kind("eval"):
    assert cell.params.splits == (contracts.ALL_QUESTIONS,) and cell.params.golds == ("pair",)
  steps = {c.name: c.params.config["trainer"]["steps"] for c in plan.of_kind("pretrain")}
  assert steps == {"pretrain/ict+bfs+wlp": config.pretrain_steps, "pretrain/no-ssl": 0}
  assert [c.key for c in demo.plan(config)] == [c.key for c in plan]
  other = demo.plan(demo.DemoConfig(dump="d.xml.bz2", preset="tiny", vocab_size=900))
  assert other["pairs/demo"].key == plan["pairs/demo"].key
  assert other["vocab/demo"].key != plan["vocab/demo"].key  # and everything downstream


def test_a_failed_cell_fails_the_demo_with_its_error(tmp_path):
  """A dump that gives no article: the pairs cell fails, and with it the demo, with the
  stage's own error (one line at the command line), recorded in the cell's failed.json."""
  dump = write_dump(tmp_path / "redirects-pages-articles.xml.bz2",
                    [DumpPage(1, "Old name", "#REDIRECT [[New name]]", redirect="New name")])
  with pytest.raises(ValueError, match="no article kept"):
    demo.run(demo.DemoConfig(dump=dump, out=str(tmp_path / "demo"), preset="tiny"))
  (failed,) = (tmp_path / "demo" / "pairs").glob("demo-*/failed.json")
  assert "no article kept" in json.loads(failed.read_text())["error"]
  assert not list((tmp_path / "demo").glob("vocab/*"))  # nothing after it ran
