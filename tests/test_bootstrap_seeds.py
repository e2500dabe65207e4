"""The seed-aware bootstrap (experiment.bootstrap: seeds, then questions), the sign-flip test
whose unit is a pre-training (experiment.verdict_rule), and the variant without the test
questions whose article the pre-training read (experiment.leak_free), through a re-render of
a results folder built here and of the committed cpu-small-links folder."""

import json
import pathlib
import shutil

import numpy as np
import pytest
import yaml

from twotower.eval import gold_ranks
from twotower.experiment import (bootstrap, grid, leak_free, reading_changes, readings,
                                 rerender, verdict_rule as rule)

ROOT = pathlib.Path(__file__).resolve().parents[1]
LINKS = ROOT / "docs" / "results" / "cpu-small-links"


def _run(n, hit):
  """One run of n questions: the gold at rank 1 where hit(i), else a miss."""
  return {f"q{i:03d}": 1 if hit(i) else None for i in range(n)}


# ---------------------------------------------------------------------------------------------
# The two-stage bootstrap on hand-made ranks.
# ---------------------------------------------------------------------------------------------


def test_seeds_that_disagree_in_sign_leave_the_interval_across_zero():
  """B finds 50 % of 400 questions; A's seeds find 70 %, 30 % and 70 %: paired seed gains
  +20, -20, +20. Averaged over the seeds first (the rule before issue 67), A's questions sit
  at +6.7 points and the question-only interval lies above 0; drawing the seeds, one draw in
  27 is seed 1 three times (3.7 % > 2.5 %), so the interval reaches down to about -20."""
  n = 400
  b = bootstrap.Runs((_run(n, lambda i: i % 2 == 0),))
  a = bootstrap.Runs((_run(n, lambda i: i % 10 < 7), _run(n, lambda i: i % 10 < 3),
                      _run(n, lambda i: i % 10 < 7)), (0, 1, 2))
  resampler = bootstrap.Resampler()
  only_questions = resampler.interval(a, b, "R@1", seed_aware=False)
  seeds = resampler.interval(a, b, "R@1")
  assert only_questions.difference == pytest.approx(20 / 3)
  assert only_questions.low > 0 and not only_questions.seed_aware
  assert seeds.low < -15 < 0 < seeds.high and (seeds.seeds_a, seeds.seeds_b) == (3, 0)
  # The verdict the reading gives each: resolved on the questions alone, not on the seeds.
  side_a = rule.Side("a", (70.0, 30.0, 70.0), seeds=(0, 1, 2))
  side_b = rule.Side("b", (50.0,), seedless=True)
  assert rule.judge(side_a, side_b, boot=only_questions).verdict == rule.NOT_RESOLVED  # seeds
  side_a = rule.Side("a", (70.0, 60.0, 70.0), seeds=(0, 1, 2))     # every seed above B
  assert rule.judge(side_a, side_b, boot=seeds).verdict == rule.NOT_RESOLVED


def test_identical_seeds_reduce_to_the_question_bootstrap():
  """Three identical runs draw the same question sums whatever seeds are drawn: the interval
  is the question bootstrap's (the same generator stream), to the last digit."""
  n = 300
  run = _run(n, lambda i: i % 3 != 0)
  other = _run(n, lambda i: i % 2 == 0)
  seeds = bootstrap.hierarchical(bootstrap.Runs((run, run, run), (0, 1, 2)),
                                 bootstrap.Runs((other,)), "R@1")
  questions = bootstrap.paired([run], [other], "R@1")
  assert (seeds.low, seeds.high, seeds.ratio_low, seeds.ratio_high) == \
      (questions.low, questions.high, questions.ratio_low, questions.ratio_high)
  assert (seeds.mean_a, seeds.mean_b) == pytest.approx((200 / 3, 50.0))
  assert seeds.seeds_a == 3 and questions.seeds_a == 0


def test_paired_seeds_keep_what_two_rows_share():
  """Two rows whose seeds differ a lot but share each seed's pre-training (a row and its
  hybrid): A's seed i finds what B's seed i finds plus 10 % of the questions. Drawn together,
  seed i of A stays with seed i of B and the gain is +10 within question noise; drawn apart
  (seeds that do not match), the seeds' spread of 60 points swamps it."""
  n = 400
  rates = (0.2, 0.5, 0.8)
  b_runs = tuple(_run(n, lambda i, r=r: i % 100 < 100 * r) for r in rates)
  a_runs = tuple(_run(n, lambda i, r=r: i % 100 < 100 * r + 10) for r in rates)
  resampler = bootstrap.Resampler()
  together = resampler.interval(bootstrap.Runs(a_runs, (0, 1, 2)),
                                bootstrap.Runs(b_runs, (0, 1, 2)), "R@1")
  apart = resampler.interval(bootstrap.Runs(a_runs, (0, 1, 2)),
                             bootstrap.Runs(b_runs, (3, 4, 5)), "R@1")
  assert together.paired_seeds and together.difference == pytest.approx(10.0)
  assert 5 < together.low < 10 < together.high < 15
  assert not apart.paired_seeds and apart.low < 0 < apart.high


def test_the_interval_is_the_same_in_any_order_and_from_any_resampler():
  n = 250
  a = bootstrap.Runs((_run(n, lambda i: i % 4 != 0), _run(n, lambda i: i % 5 != 0)), (0, 1))
  b = bootstrap.Runs((_run(n, lambda i: i % 2 == 0),))
  fresh = bootstrap.hierarchical(a, b, "MRR")
  busy = bootstrap.Resampler()
  busy.interval(b, a, "R@5")                                   # other sums cached first
  busy.interval(a, b, "R@1", questions=[f"q{i:03d}" for i in range(100)])
  assert busy.interval(a, b, "MRR") == fresh == bootstrap.hierarchical(a, b, "MRR")
  assert bootstrap.hierarchical(a, b, "MRR", seed=bootstrap.SEED + 1) != fresh
  with pytest.raises(ValueError, match="metric 'P@1'"):
    busy.interval(a, b, "P@1")


def test_question_counts_are_the_question_bootstraps_draws():
  """The counts a Resampler multiplies by are the indices paired_values draws, counted."""
  counts = bootstrap.question_counts(50, resamples=300)
  rng = np.random.default_rng(bootstrap.SEED)
  idx = rng.integers(0, 50, size=(250, 50), dtype=np.int32)
  assert counts.shape == (300, 50) and (counts.sum(axis=1) == 50).all()
  assert (counts[7] == np.bincount(idx[7], minlength=50)).all()


# ---------------------------------------------------------------------------------------------
# The sign-flip test: its unit is the seed.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gains, p", [
    ((1.0, 2.0, 3.0), 0.25),         # all of one sign: 2 / 2^3, the sign test's p
    ((2.0, 2.0, 2.0, 2.0), 0.125),   # 2 / 2^4
    ((3.0, 1.0, -0.5), 0.5),         # |+-3 +-1 +-0.5| >= 3.5 at 4.5, 3.5 and their mirrors
    ((5.0, -1.0), 1.0),              # |+-5 +-1| is 6 or 4, never below the observed 4
    ((1.0, -1.0), 1.0),              # a sum of 0: every assignment reaches it
    ((), 1.0),
])
def test_sign_flip_p_values_by_hand(gains, p):
  assert rule.sign_flip_test(gains) == p


def test_paired_seeds_name_each_gain():
  a = rule.Side("a", (10.0, 11.0, 12.0), seeds=(0, 1, 2))
  assert rule.paired_seeds(a, rule.Side("b", (9.0,), seeds=(2,))) == (2,)
  assert rule.paired_seeds(a, rule.Side("bm25", (5.0,), seedless=True)) == (0, 1, 2)
  bm25 = rule.Side("bm25", (5.0,), seedless=True)
  assert rule.paired_seeds(bm25, bm25) == ()


# ---------------------------------------------------------------------------------------------
# A results folder with ranks and excluded questions, re-rendered.
# ---------------------------------------------------------------------------------------------

N = 200
GRID = {
    "model": "cpu-small", "ratios": [5],
    "systems": {"bm25": {"kind": "bm25", "encoder": "BM25"},
                "ict": {"encoder": "Transformer", "pretraining": "ICT", "tasks": ["ict"]}},
    "tables": [{"id": "3", "title": "t3", "ratios": [5], "rows": ["bm25", "ict"]}],
    "readings": [{"id": leak_free.HEADLINE_CLAIM, "sentence": "ICT reaches BM25.",
                  "source": "ours", "metrics": ["R@1"], "pairs": [["ict", "bm25"]]}]}
# q000-q039 are the leaked article's: every row finds them; of the 160 others BM25 finds one
# in two (80), ICT's seeds the first 64, 72 and 80 (40 %, 45 %, 50 %).
LEAKED = [f"q{i:03d}" for i in range(40)]


def _folder(tmp_path):
  """(grid file, results folder) of a grid at one ratio: BM25 (one run over every split) and
  ICT at three seeds, with their ranks, the index and the excluded questions."""
  hits = {"bm25/squad": lambda i: i < 40 or i % 2 == 0}
  for seed, found in enumerate((64, 72, 80)):
    hits[f"eval/squad/ict/base/r5/s{seed}"] = lambda i, found=found: i < 40 + found
  results = tmp_path / "results" / "g"
  (results / "ranks").mkdir(parents=True)
  index, per_seed = {}, []
  for cell, hit in hits.items():
    ranks = {f"q{i:03d}": 1 if hit(i) else 0 for i in range(N)}
    if cell.startswith("bm25"):
      ranks.update({f"x{i}": 1 for i in range(30)})     # other splits' questions
    name = cell.replace("/", "_") + "-0.ranks.gz"
    gold_ranks.write(ranks, str(results / "ranks"), name)
    index[cell] = name
    r1 = sum(1 for i in range(N) if hit(i)) / N
    for seed in ((0,) if cell.startswith("bm25") else (int(cell[-1]),)):
      per_seed.append({"table": "3", "dataset": "squad", "ratio": 5, "seed": seed,
                       "system": cell.split("/")[0 if cell.startswith("bm25") else 2],
                       "variant": "base", "cell": cell, "split": "test-5", "record": {
                           "questions": N, "candidates": 500, "gold": "pair",
                           "split": "test-5", "metrics": {"R@1": r1, "MRR": r1}}})
  (results / "ranks" / "index.json").write_text(json.dumps(index), encoding="utf-8")
  (results / "results.json").write_text(json.dumps({"per_seed": per_seed}), encoding="utf-8")
  (results / leak_free.EXCLUDED_FILE).write_text(json.dumps({"articles": [
      {"title": "Leaked", "found_in": "dump.xml", "question_ids": LEAKED}]}),
      encoding="utf-8")
  spec_file = tmp_path / "g.yaml"
  spec_file.write_text(yaml.safe_dump(GRID), encoding="utf-8")
  return spec_file, results


def test_the_variant_without_the_leaked_questions_is_computed_from_the_ranks(tmp_path):
  spec_file, results = _folder(tmp_path)
  assert rerender.main(["--grid", str(spec_file), "--results_dir", str(results)]) == 0
  variant = results / leak_free.FOLDER
  data = json.loads((variant / "results.json").read_text(encoding="utf-8"))
  by_cell = {e["cell"]: e["record"] for e in data["per_seed"]}
  # 160 questions left; BM25 finds 80 of them (50 %), ICT seed 1 45 % of them: 72.
  assert by_cell["bm25/squad"]["questions"] == 160
  assert by_cell["bm25/squad"]["excluded_questions"] == 40
  assert by_cell["bm25/squad"]["metrics"]["R@1"] == pytest.approx(0.5)
  assert by_cell["eval/squad/ict/base/r5/s1"]["metrics"]["R@1"] == pytest.approx(0.45)
  # On every question: BM25 (40 + 80) / 200 = 60 %; ICT's seeds 52, 56, 60 %: 56 ± 4.
  table = (results / "table3-squad.md").read_text(encoding="utf-8")
  assert "| BM25 | - | 60.00 |" in table and "| 56.00 ± 4.00 |" in table
  without = (variant / "table3-squad.md").read_text(encoding="utf-8")
  assert "| BM25 | - | 50.00 |" in without and "| 45.00 ± 5.00 |" in without
  reading = (variant / readings.READING_FILE).read_text(encoding="utf-8")
  assert "\"Leaked\" (40 questions, a page of `dump.xml`)" in reading
  assert "(160 q × 3 seeds)" in reading
  headline = (results / leak_free.HEADLINE_FILE).read_text(encoding="utf-8")
  # A − B: -4.00 on every question, -5.00 without: Δ -1.00.
  assert "| 5 % | R@1 | 56.00 ± 4.00 (3 seeds) | 45.00 ± 5.00 (3 seeds) | 60.00 (no seed) | " \
      "50.00 (no seed) | -4.00 [" in headline
  assert "| -5.00 [" in headline and "(160 q × 3 seeds) | -1.00 |" in headline
  changes = (variant / reading_changes.CHANGES_FILE).read_text(encoding="utf-8")
  assert "| every question | without Leaked |" in changes
  assert (results / reading_changes.SEED_AWARE_FILE).exists()


def test_an_entry_whose_ranks_do_not_give_its_metrics_is_left_out(tmp_path):
  spec_file, results = _folder(tmp_path)
  data = json.loads((results / "results.json").read_text(encoding="utf-8"))
  data["per_seed"][1]["record"]["metrics"]["R@1"] += 0.01      # ICT seed 0, edited
  values, left_out = leak_free.values(data, _reader(results),
                                      leak_free.read(str(results)))
  assert left_out == ["eval/squad/ict/base/r5/s0"]
  assert ("eval/squad/ict/base/r5/s1", "test-5") in values and len(values) == 3


def _reader(results):
  from twotower.experiment import ranks
  return ranks.results_reader(str(results))


def test_a_rerender_of_the_same_ranks_writes_the_same_bytes(tmp_path):
  spec_file, results = _folder(tmp_path)
  argv = ["--grid", str(spec_file), "--results_dir", str(results)]
  assert rerender.main(argv) == 0
  first = {p.relative_to(results): p.read_bytes() for p in results.rglob("*") if p.is_file()}
  assert rerender.main(argv) == 0
  again = {p.relative_to(results): p.read_bytes() for p in results.rglob("*") if p.is_file()}
  assert first == again and pathlib.Path("leak-free/reading.md") in first


def test_a_bad_excluded_questions_file_is_named(tmp_path):
  (tmp_path / leak_free.EXCLUDED_FILE).write_text('{"articles": [{"title": "x"}]}',
                                                 encoding="utf-8")
  with pytest.raises(ValueError, match="excluded-questions.json: not an excluded-questions"):
    leak_free.read(str(tmp_path))
  assert leak_free.read(str(tmp_path / "none")) is None


# ---------------------------------------------------------------------------------------------
# The committed cpu-small-links folder.
# ---------------------------------------------------------------------------------------------


def test_the_committed_leaked_questions_are_one_article_of_the_test_set():
  excluded = leak_free.read(str(LINKS))
  assert [(a.title, a.found_in, len(a.questions)) for a in excluded.articles] == [
      ("Anthropology", "enwiki-slice-pages-articles.xml.bz2", 222)]
  assert "python -m twotower.experiment.leaked_questions" in json.loads(
      (LINKS / leak_free.EXCLUDED_FILE).read_text(encoding="utf-8"))["command"]


@pytest.mark.shared_data
def test_the_leaked_questions_command_finds_anthropology_in_the_slice(tmp_path, squad_subset,
                                                                       enwiki_slice):
  """The command that wrote the committed file, on the slice alone (the WikiExtractor text
  holds no page of a SQuAD article's title): the same article, page and question ids."""
  from twotower.experiment import leaked_questions
  out = tmp_path / "excluded.json"
  assert leaked_questions.main(["--qa", str(squad_subset), "--inputs", str(enwiki_slice),
                                "--out", str(out)]) == 0
  written = json.loads(out.read_text(encoding="utf-8"))
  committed = json.loads((LINKS / leak_free.EXCLUDED_FILE).read_text(encoding="utf-8"))
  assert written["articles"] == committed["articles"]
  assert written["qa_file"] == committed["qa_file"]
  data = json.loads(squad_subset.read_text(encoding="utf-8"))
  ids = sorted(q["id"] for a in data["data"] if a["title"] == "Anthropology"
               for p in a["paragraphs"] for q in p["qas"])
  assert written["articles"][0]["question_ids"] == ids and len(ids) == 222


@pytest.mark.slow
def test_the_committed_links_folder_is_what_a_rerender_writes(tmp_path):
  """Every file of docs/results/cpu-small-links (and the cpu-small folder its changes read)
  re-rendered from its own results, cells and ranks: byte for byte the committed ones. Fails
  when a file was edited by hand or the rendering changed without a re-render."""
  work = tmp_path / "results"
  for name in ("cpu-small-links", "cpu-small"):
    shutil.copytree(ROOT / "docs" / "results" / name, work / name)
  assert rerender.main(["--grid", "cpu-small-links", "--results_dir",
                        str(work / "cpu-small-links")]) == 0
  committed = {p.relative_to(LINKS): p.read_bytes() for p in LINKS.rglob("*") if p.is_file()}
  rendered = {p.relative_to(work / "cpu-small-links"): p.read_bytes()
              for p in (work / "cpu-small-links").rglob("*") if p.is_file()}
  assert sorted(rendered) == sorted(committed)
  assert [p for p in committed if committed[p] != rendered[p]] == []
  spec = grid.load("cpu-small-links")
  assert spec.reading_baseline == "cpu-small"
