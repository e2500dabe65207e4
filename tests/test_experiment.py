"""`twotower experiment`: the plan (pure, eval.grid), the tables, and the real grid end to end
on a tiny dump + tiny SQuAD file (BM25 + ICT, one ratio, tiny preset), run twice: the second
run trains nothing."""

from __future__ import annotations

import json
import os

import pytest

from twotower.eval import experiment
from twotower.eval import grid
from wikidump_fixtures import DumpPage, write_dump

SLICE = "../shared/data/wiki/enwiki-slice-pages-articles.xml.bz2"

# ---------------------------------------------------------------------------------------------
# Planning (no TensorFlow).
# ---------------------------------------------------------------------------------------------


def full_config(**kw) -> grid.GridConfig:
  base = dict(preset="cpu-small", dump=SLICE, squad="squad.json",
              ratio_seeds=((5, (0, 1, 2)),))
  base.update(kw)
  return grid.GridConfig(**base)


def test_full_grid_pretrains_each_system_once_and_fine_tunes_every_ratio_and_seed():
  plan, entries = grid.plan(full_config())
  kinds = {k: len(plan.of_kind(k)) for k in grid.KINDS}
  # 6 pre-trained systems (BoW-MLP+ICT+BFS+WLP, MLM, ICT, BFS, WLP, ICT+BFS+WLP) + 2
  # Table 5 sizes.
  assert kinds["pretrain"] == 8
  # 8 dense systems x (4 ratios + 2 more seeds at 5 %) + 2 Table 5 sizes at 1 %.
  assert kinds["finetune"] == 8 * 6 + 2
  # ... each evaluated once, plus ICT+BFS+WLP at 1 % on the open-domain candidates.
  assert kinds["eval"] == 8 * 6 + 2 + 1
  assert kinds["bm25"] == 2 and kinds["reqa"] == 2 and kinds["pairs"] == 1
  ict = [c for c in plan.of_kind("finetune") if c.params["system"] == "ict"]
  assert {c.deps[-1] for c in ict} == {"pretrain/ict/cpu-small"}  # one checkpoint, reused
  nossl = [c for c in plan.of_kind("finetune") if c.params["system"] == "no-ssl"]
  assert all(plan[d].kind != "pretrain" for c in nossl for d in c.deps)
  seeds = sorted(e.seed for e in entries if e.table == 3 and e.row == "ict" and e.ratio == 5)
  assert seeds == [0, 1, 2]
  assert {e.split for e in entries if e.table == 3 and e.ratio == 80} == {"test-80"}
  # Table 5 rows are the ablation sizes; Table 6 reads the open-domain ReQA directory.
  assert {e.row for e in entries if e.table == 5} == {"L2 / d128", "L4 / d128", "L4 / d512"}
  open_cells = {plan[e.cell].deps[-1] for e in entries if e.table == 6 and e.row != "bm25"}
  assert open_cells == {"reqa/squad-open10000"}
  # Plan order respects dependencies.
  seen = set()
  for cell in plan:
    assert set(cell.deps) <= seen, cell.name
    seen.add(cell.name)


def test_bow_mlp_is_the_papers_untrained_baseline_beside_the_pretrained_one():
  """The paper's MLP row has no pre-training (issue 11); the pre-trained BoW-MLP is another
  system under its own name."""
  plan, _ = grid.plan(full_config(systems=("bow-mlp", "bow-mlp-ict+bfs+wlp")))
  untrained = [c for c in plan.of_kind("finetune") if c.params["system"] == "bow-mlp"]
  assert untrained and all(plan[d].kind != "pretrain" for c in untrained for d in c.deps)
  assert all(c.params["config"] == "bow-mlp" for c in untrained)
  pretrained = [c for c in plan.of_kind("pretrain")
                if c.params["system"] == "bow-mlp-ict+bfs+wlp"]
  assert [c.params["tasks"] for c in pretrained] == ["ict,bfs,wlp"]
  assert grid.SYSTEMS_BY_NAME["bow-mlp"].pretraining == "No pre-training"


def test_cell_keys_are_stable_and_follow_parameter_changes_downstream():
  a, _ = grid.plan(full_config())
  b, _ = grid.plan(full_config())
  c, _ = grid.plan(full_config(pretrain_steps=100))
  name = "finetune/squad/ict/cpu-small/r5/s0"
  assert a[name].key == b[name].key
  assert a["pretrain/ict/cpu-small"].key != c["pretrain/ict/cpu-small"].key
  assert a[name].key != c[name].key            # a new checkpoint means a new fine-tuning
  assert a["finetune/squad/no-ssl/cpu-small/r5/s0"].key == \
      c["finetune/squad/no-ssl/cpu-small/r5/s0"].key  # No-SSL does not pre-train
  assert a[name].dirname.startswith("finetune/squad_ict_cpu-small_r5_s0-")


def test_plan_rejects_unknown_systems_ratios_and_missing_qa_data():
  with pytest.raises(ValueError, match="unknown system"):
    grid.plan(full_config(systems=("bm25", "dpr")))
  with pytest.raises(ValueError, match="ReQA splits"):
    grid.plan(full_config(ratios=(2,)))
  with pytest.raises(ValueError, match="no QA data"):
    grid.plan(full_config(squad=""))


def _record(split, r1, r100):
  return {"system": "x", "split": split, "questions": 10, "candidates": 50, "gold": "pair",
          "metrics": {"R@1": r1, "R@5": r1, "R@10": r1, "R@50": r100, "R@100": r100,
                      "MRR": r1}}


def test_aggregate_gives_mean_and_std_over_seeds_in_the_paper_layout():
  entries = [grid.Entry(3, "squad", "ict", 5, s, f"eval/{s}", "test-5") for s in (0, 1, 2)]
  entries.append(grid.Entry(3, "squad", "bm25", 5, 0, "bm25/squad", "test-5"))
  values = {("eval/0", "test-5"): _record("test-5", 0.1, 0.5),
            ("eval/1", "test-5"): _record("test-5", 0.2, 0.6),
            ("eval/2", "test-5"): _record("test-5", 0.3, 0.7),
            ("bm25/squad", "test-5"): _record("test-5", 0.4, 0.8)}
  aggs = {a.row: a for a in grid.aggregate(entries, values)}
  assert aggs["ict"].seeds == (0, 1, 2)
  assert aggs["ict"].mean["R@1"] == pytest.approx(0.2)
  assert aggs["ict"].std["R@1"] == pytest.approx((2 / 300) ** 0.5)   # population std
  cfg = full_config(systems=("bm25", "ict"))
  rows, header, cells = grid.table_rows_and_headers(3, cfg)
  md = grid.markdown_table(list(aggs.values()), rows, [5], header, cells)
  lines = md.splitlines()
  assert lines[0] == ("| Encoder | Pre-training | 5%/95% R@1 | R@5 | R@10 | R@50 | R@100 |")
  assert lines[2] == "| BM25 | - | 40.00 | 40.00 | 40.00 | 80.00 | 80.00 |"
  assert lines[3].startswith("| Transformer | ICT | 20.00 ± 8.16 | ")


def test_dry_run_prints_the_plan_and_an_estimate(tmp_path, capsys):
  experiment.run(["--preset", "cpu-small", "--out", str(tmp_path / "w"), "--dump", SLICE,
                  "--squad", "squad.json", "--ratio_seeds", "5=0,1,2", "--dry_run"])
  out = capsys.readouterr().out
  assert out.startswith("115 cells (1 pairs, 1 vocab, 2 reqa, 2 bm25, 8 pretrain, 50 finetune, "
                        "51 eval); rough estimate of what is left on 2 cores: ")
  assert "todo  pretrain pretrain/ict+bfs+wlp/cpu-small-l4-d512" in out
  assert not (tmp_path / "w").exists()  # a dry run writes nothing


def test_bow_mlp_is_sized_like_the_grid_preset():
  args = experiment.model_config_args({"config": "bow-mlp", "preset": "cpu-small", "sets": []})
  cfg = experiment.resolved_config({"config": "bow-mlp", "preset": "cpu-small", "sets": []})
  assert args[:2] == ["--config", "bow-mlp"]
  assert cfg["model"]["encoder"] == "bow_mlp"
  assert (cfg["model"]["query_len"], cfg["model"]["doc_len"], cfg["model"]["embedding_dim"],
          cfg["data"]["batch_size"]) == (32, 128, 128, 64)


# ---------------------------------------------------------------------------------------------
# The real grid, tiny.
# ---------------------------------------------------------------------------------------------

TOPICS = {
    "River Alpha": ["The River Alpha flows north through the green valley of Brenn.",
                    "Fishermen on the River Alpha catch silver trout every spring.",
                    "A stone bridge built in 1820 crosses the River Alpha near Brenn."],
    "Mount Beta": ["Mount Beta is the highest peak of the Kestrel range at 3100 metres.",
                   "Climbers first reached the summit of Mount Beta in the year 1902.",
                   "Snow covers the northern face of Mount Beta for most of the year."],
    "Gamma Library": ["The Gamma Library holds more than two million printed books today.",
                      "Its reading room was designed by the architect Ilse Varna.",
                      "The Gamma Library opened to the public on a rainy day in 1911."],
    "Delta Festival": ["The Delta Festival celebrates the autumn harvest with music.",
                       "Bakers at the Delta Festival sell bread shaped like wheat sheaves.",
                       "The first Delta Festival took place in the town square in 1875."],
}


def tiny_dump(path) -> str:
  pages = []
  names = list(TOPICS)
  for i, (title, sentences) in enumerate(TOPICS.items()):
    other = names[(i + 1) % len(names)]
    paragraphs = [" ".join(sentences), f"Visitors often compare it with [[{other}]] nearby. "
                  + " ".join(reversed(sentences)),
                  "== History ==", " ".join(sentences[1:] + sentences[:1])]
    pages.append(DumpPage(10 + i, title, f"'''{title}''' is a place. " + "\n\n".join(paragraphs)))
  return write_dump(path, pages)


def tiny_squad(path) -> str:
  """SQuAD v1.1 JSON: every sentence of every topic asked about, twice."""
  articles = []
  n = 0
  for title, sentences in TOPICS.items():
    paragraphs = []
    for shift in range(3):
      context = " ".join(sentences[shift:] + sentences[:shift])
      qas = []
      for s in sentences:
        answer = s.split()[-2]
        start = context.index(s) + s.rindex(answer)
        for form in ("What about {}?", "Tell me of {} please?"):
          n += 1
          qas.append({"id": f"q{n}", "question": form.format(" ".join(s.split()[:6])),
                      "answers": [{"text": answer, "answer_start": start}]})
      paragraphs.append({"context": context, "qas": qas})
    # Titles unlike the dump's: the pair pipeline keeps one page per title.
    articles.append({"title": f"{title}_(questions)", "paragraphs": paragraphs})
  path.write_text(json.dumps({"version": "1.1", "data": articles}), encoding="utf-8")
  return str(path)


def _cell_log(work) -> list[dict]:
  with open(os.path.join(work, experiment.CELL_LOG), encoding="utf-8") as f:
    return [json.loads(line) for line in f]


@pytest.mark.slow
def test_tiny_grid_end_to_end_then_a_rerun_trains_nothing(tmp_path):
  work, results = tmp_path / "work", tmp_path / "results"
  argv = ["--preset", "tiny", "--out", str(work), "--results_dir", str(results),
          "--dump", tiny_dump(tmp_path / "tiny-pages-articles.xml.bz2"),
          "--squad", tiny_squad(tmp_path / "squad.json"), "--systems", "bm25,ict",
          "--ratios", "80", "--tables", "3", "--pretrain_steps", "10", "--finetune_steps", "10",
          "--pretrain_text_from_squad", "--pairs_flags", "--ict_per_page 16 --min_query_words 3",
          "--vocab_size", "400"]
  experiment.run(argv)
  first = _cell_log(work)
  ran = {e["cell"] for e in first if e["status"] == "ran"}
  assert ran == {"pairs/wiki", "vocab/wiki", "reqa/squad", "bm25/squad", "pretrain/ict/tiny",
                 "finetune/squad/ict/tiny/r80/s0", "eval/squad/ict/tiny/r80/s0"}

  md = (results / "table3-squad.md").read_text()
  assert "| BM25 | - |" in md and "| Transformer | ICT |" in md
  assert "80%/20% R@1" in md
  for png in ("table3-squad-r80.png",):
    assert (results / png).read_bytes()[:4] == b"\x89PNG"
  data = json.loads((results / "results.json").read_text())
  assert {a["row"] for a in data["aggregates"]} == {"bm25", "ict"}
  for a in data["aggregates"]:
    values = list(a["mean"].values())
    assert all(0.0 <= v <= 1.0 for v in values)
    assert a["mean"]["R@1"] <= a["mean"]["R@10"] <= a["mean"]["R@100"]
    assert a["questions"] > 0 and a["candidates"] > 0
  bm25 = next(a for a in data["aggregates"] if a["row"] == "bm25")
  assert bm25["mean"]["R@100"] > 0.5        # BM25 finds these lexical questions
  csv = (results / "results.csv").read_text().splitlines()
  assert csv[0].startswith("table,dataset,row,ratio,seeds") and len(csv) == 3
  readme = (results / "README.md").read_text()
  assert "twotower experiment --preset tiny" in readme
  for word in ("tensorflow", "apache-beam", "faiss-cpu", "pyserini", "spacy", "cores", "RAM"):
    assert word in readme
  assert "`pretrain/ict/tiny` | done |" in readme
  # The pair pipeline read the SQuAD articles too (page ids above the dump's).
  stats = json.loads(next((work / "pairs").iterdir()).joinpath("done.json").read_text())["stats"]
  assert stats["dump_files_read"] == 2

  done_before = {e["cell"]: os.path.getmtime(work / e["dir"] / experiment.DONE_FILE)
                 for e in first if e["status"] == "ran"}
  experiment.run(argv)
  second = _cell_log(work)[len(first):]
  assert {e["status"] for e in second} == {"skipped"}
  assert {e["cell"] for e in second} == ran
  for e in second:   # nothing rewrote a finished cell
    assert os.path.getmtime(work / e["dir"] / experiment.DONE_FILE) == done_before[e["cell"]]
