"""`twotower experiment`: the paper's grid of systems x train/test ratios (Tables 3-6), from one
command, resumable cell by cell.

    twotower experiment --preset cpu-small --out runs/grid \
        --dump ../shared/data/wiki/enwiki-slice-pages-articles.xml.bz2 \
        --squad ../shared/data/squad/train-subset-v1.1.json \
        --seeds 0 --ratio_seeds 5=0,1,2 --dry_run          # print the plan and an estimate

Cells (eval.grid plans them; each is the real stage, called through its `run(argv)`):

  pairs     `twotower pairs`  dump (+ optionally the SQuAD articles' paragraphs) -> pairs
  vocab     `twotower vocab`  WordPiece vocabulary from the passages
  reqa      `twotower reqa`   ReQA candidates / questions / fine-tuning pairs (+ open domain)
  bm25      `twotower bm25`   Pyserini BM25, every test split of one ReQA directory
  pretrain  `twotower pretrain` once per system and model size (ICT, BFS, WLP, ICT+BFS+WLP,
            MLM, BoW-MLP), reused by every ratio and seed
  finetune  `twotower finetune` per system x ratio x seed (No-SSL: `--init none`)
  eval      `twotower embed` (candidates, questions) -> `twotower index` (flat inner product)
            -> `twotower search` -> Recall@k (eval.evaluate) on the test side of the split

Each finished cell writes `<out>/<kind>/<name>-<hash>/done.json` atomically (its wall time and
results); a re-run skips it, and `<out>/cells.jsonl` logs what ran and what was skipped. A
killed training cell resumes from its checkpoints. Tables (Markdown in the paper's layout,
CSV, JSON, recall@k PNGs) and a README with the command, machine, package versions, seeds
and wall time per cell go to `--results_dir` (default `docs/results/<preset>`), rewritten after
every evaluation so a long grid shows partial tables as it goes.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import logging
import os
import platform
import shlex
import shutil
import sys
import time
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence
from xml.sax.saxutils import escape

from twotower import contracts
from twotower import io as tio
from twotower.eval import grid

logger = logging.getLogger(__name__)

DONE_FILE = "done.json"
CELL_LOG = "cells.jsonl"
#: Page ids of the SQuAD articles written as an extra dump (above any real enwiki page id).
SQUAD_PAGE_ID_BASE = 1_000_000_000
#: Pair-pipeline flags per preset: the shared slice has ~100 articles, so the grid samples
#: more pairs per page than the pipeline's defaults (tuned for a full dump).
PAIRS_FLAGS = {"cpu-small": ("--ict_per_page", "64", "--bfs_per_page", "16",
                             "--wlp_per_page", "8")}
#: Beam flags of the Beam stages (pairs, reqa, embed): Beam 2.77's DirectRunner first tries
#: the Prism runner, which downloads a binary at run time; FnApiRunner is the in-process
#: runner it falls back to (twotower.io.make_pipeline does the same).
DEFAULT_BEAM_FLAGS = ("--runner", "FnApiRunner")
PACKAGES = ("tensorflow", "keras", "tensorflow-text", "apache-beam", "faiss-cpu", "pyserini",
            "spacy", "numpy", "pyarrow")


# ---------------------------------------------------------------------------------------------
# Model configs (for BoW-MLP's adaptation and the estimate).
# ---------------------------------------------------------------------------------------------


def bow_sets(preset: str, sets: Sequence[str] = ()) -> list[str]:
  """`--set` overrides that size the BoW-MLP preset like the grid preset: same query/document
  lengths, embedding dimension, batches and steps (the paper's BoW-MLP has the Transformer's
  d=512)."""
  from twotower.model import config as config_lib
  c = config_lib.load(preset, sets)
  return [f"model.query_len={c.model.query_len}", f"model.doc_len={c.model.doc_len}",
          f"model.embedding_dim={c.model.embedding_dim}",
          f"data.batch_size={c.data.batch_size}", f"trainer.steps={c.trainer.steps}",
          f"trainer.checkpoint_every={c.trainer.checkpoint_every}",
          f"trainer.eval_steps={c.trainer.eval_steps}",
          f"trainer.finetune_batch_size={c.trainer.finetune_batch_size}",
          f"trainer.finetune_steps={c.trainer.finetune_steps}"]


def model_config_args(params: Mapping[str, Any]) -> list[str]:
  """`--config ... --set ...` of a pretrain / finetune cell."""
  sets = list(params.get("sets", ()))
  if params.get("config"):
    sets = bow_sets(params["preset"], sets) if params["config"] == "bow-mlp" else sets
    args = ["--config", params["config"]]
  else:
    args = ["--config", params["preset"]]
  for s in sets:
    args += ["--set", s]
  return args


def resolved_config(params: Mapping[str, Any]) -> dict:
  from twotower.model import config as config_lib
  args = model_config_args(params)
  sets = [args[i + 1] for i in range(2, len(args), 2)]
  return config_lib.load(args[1], sets).to_dict()


# ---------------------------------------------------------------------------------------------
# The SQuAD articles as a dump (optional extra pre-training text).
# ---------------------------------------------------------------------------------------------


def squad_articles_dump(squad_path: str, out_path: str) -> str:
  """Writes the SQuAD file's articles as a MediaWiki export (one page per article, its
  paragraphs as wikitext paragraphs) so that `twotower pairs` reads them like any dump.
  No questions or answers are written: only the unlabelled text, which Wikipedia (the paper's
  pre-training corpus) contains anyway."""
  data = json.loads(tio.read_text(squad_path))
  pages = []
  for i, article in enumerate(data.get("data", [])):
    title = str(article.get("title", f"SQuAD article {i}")).replace("_", " ")
    paragraphs = [p.get("context", "").strip() for p in article.get("paragraphs", [])]
    text = "\n\n".join(p for p in paragraphs if p)
    if not text:
      continue
    pages.append(
        f"  <page>\n    <title>{escape(title)}</title>\n    <ns>0</ns>\n"
        f"    <id>{SQUAD_PAGE_ID_BASE + i}</id>\n    <revision>\n      <id>1</id>\n"
        f"      <model>wikitext</model>\n      <format>text/x-wiki</format>\n"
        f"      <text xml:space=\"preserve\">{escape(text)}</text>\n    </revision>\n"
        f"  </page>\n")
  xml = ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" '
         'xml:lang="en">\n  <siteinfo>\n    <sitename>SQuAD articles</sitename>\n'
         '    <dbname>squadwiki</dbname>\n    <case>first-letter</case>\n    <namespaces>\n'
         '      <namespace key="0" case="first-letter" />\n    </namespaces>\n  </siteinfo>\n'
         + "".join(pages) + "</mediawiki>\n")
  tio.write_text(out_path, xml)
  logger.info("wrote %d SQuAD articles as a dump: %s", len(pages), out_path)
  return out_path


# ---------------------------------------------------------------------------------------------
# Cell executors: each calls the real stages and returns what done.json keeps.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Context:
  work: str
  plan: grid.Plan
  verbose: int = 2
  keep_embeddings: bool = False
  beam_flags: tuple[str, ...] = DEFAULT_BEAM_FLAGS

  def dir(self, name: str) -> str:
    return os.path.join(self.work, self.plan[name].dirname)

  def dep(self, cell: grid.Cell, kind: str) -> Optional[str]:
    found = [d for d in cell.deps if self.plan[d].kind == kind]
    return self.dir(found[0]) if found else None


def _pairs(cell: grid.Cell, ctx: Context, out: str) -> dict:
  from twotower.commands import pairs as pairs_cmd
  p = cell.params
  dump = p["dump"]
  if p.get("squad_text"):
    dump += "," + squad_articles_dump(p["squad_text"], os.path.join(out, "squad-articles.xml"))
  pairs_cmd.main(["--dump", dump, "--out", out, "--heldout_percent", str(p["heldout_percent"])]
            + list(p["flags"]) + list(ctx.beam_flags))
  return {"stats": tio.read_json(os.path.join(out, contracts.STATS_FILE))}


def _vocab(cell: grid.Cell, ctx: Context, out: str) -> dict:
  from twotower.pipelines import vocab
  vocab.run(vocab.VocabConfig(passages=ctx.dep(cell, "pairs"),
                              out=os.path.join(out, "vocab.txt"),
                              vocab_size=cell.params["vocab_size"]))
  return {}


def _reqa(cell: grid.Cell, ctx: Context, out: str) -> dict:
  from twotower.commands import reqa as reqa_cmd
  from twotower.pipelines import reqa
  p = cell.params
  argv = [p["flag"], p["path"], "--out", out, "--doc_text", p["doc_text"]]
  if p.get("extra_candidates"):
    argv += ["--extra_passages", ctx.dep(cell, "pairs"),
             "--extra_candidates", str(p["extra_candidates"])]
  reqa.run(reqa_cmd.parse(argv + list(ctx.beam_flags)))
  return {"stats": tio.read_json(os.path.join(out, contracts.STATS_FILE))}


def _bm25(cell: grid.Cell, ctx: Context, out: str) -> dict:
  from twotower.eval import bm25
  config = bm25.Bm25Config(reqa=ctx.dep(cell, "reqa"), out=out, doc_text=cell.params["doc_text"],
                           splits=tuple(cell.params["splits"]), golds=("pair", "sentence"),
                           threads=max(1, os.cpu_count() or 1), system="bm25")
  records = bm25.run_bm25(config)
  shutil.rmtree(os.path.join(out, "index"), ignore_errors=True)  # Lucene index: rebuildable
  return {"records": records}


def _vocab_file(cell: grid.Cell, ctx: Context) -> str:
  return os.path.join(ctx.dep(cell, "vocab"), "vocab.txt")


def _clear_keras() -> None:
  import keras
  keras.backend.clear_session()


def _pretrain(cell: grid.Cell, ctx: Context, out: str) -> dict:
  from twotower.model import pretrain
  p = cell.params
  pairs_dir = ctx.dep(cell, "pairs")
  argv = model_config_args(p) + ["--out", out, "--vocab", _vocab_file(cell, ctx),
                                 "--tasks", p["tasks"], "--verbose", str(ctx.verbose),
                                 "--no_export"]  # fine-tuning starts from the checkpoints
  argv += (["--passages", os.path.join(pairs_dir, "passages")] if p["tasks"] == "mlm"
           else ["--pairs", pairs_dir])
  if p["steps"]:
    argv += ["--steps", str(p["steps"])]
  _clear_keras()
  pretrain.run(argv)
  return {}


def _finetune(cell: grid.Cell, ctx: Context, out: str) -> dict:
  from twotower.model import finetune
  p = cell.params
  # `twotower finetune --init` reads a pre-training run's own checkpoint (object graph).
  init = ctx.dep(cell, "pretrain") or "none"
  argv = model_config_args(p) + [
      "--set", f"trainer.seed={p['seed']}", "--out", out, "--vocab", _vocab_file(cell, ctx),
      "--init", init, "--reqa", ctx.dep(cell, "reqa"), "--split", str(p["ratio"]),
      "--doc_text", p["doc_text"], "--no_recall", "--verbose", str(ctx.verbose)]
  if p["steps"]:
    argv += ["--steps", str(p["steps"])]
  _clear_keras()
  finetune.run(argv)
  return {}


def _eval(cell: grid.Cell, ctx: Context, out: str) -> dict:
  """Embeds the candidates and the split's questions with the fine-tuned export, searches a
  flat inner-product index (exact), evaluates the run under both gold conventions."""
  from twotower.eval import evaluate as evaluate_lib
  from twotower.eval import index as index_stage
  from twotower.eval import runs as runs_lib
  from twotower.eval import search as search_stage
  from twotower.commands import embed as embed_cmd
  from twotower.pipelines import embed as embed_stage
  p = cell.params
  model = os.path.join(ctx.dep(cell, "finetune"), "export", "saved_model")
  reqa_dir = ctx.dep(cell, "reqa")
  cands, quests = os.path.join(out, "candidates"), os.path.join(out, "questions")
  embed_stage.run(embed_cmd.parse(
      ["--model", model, "--out", cands, "--doc_text", p["doc_text"],
       "--candidates", os.path.join(reqa_dir, contracts.CANDIDATES_FILE)]
      + list(ctx.beam_flags)))
  embed_stage.run(embed_cmd.parse(
      ["--model", model, "--out", quests,
       "--questions", os.path.join(reqa_dir, contracts.questions_file(p["split"]))]
      + list(ctx.beam_flags)))
  index_path = os.path.join(out, "flat.faiss")
  index_stage.run(["--embeddings", cands, "--out", index_path, "--type", "flat"])
  run_path = os.path.join(out, "run.parquet")
  search_stage.run(["--index", index_path, "--queries", quests, "--out", run_path,
                    "--k", "100"])
  splits = evaluate_lib.load_splits(reqa_dir, [p["split"]])
  system = cell.name.split("/", 2)[2]
  records = evaluate_lib.evaluate(runs_lib.ids_only(runs_lib.read_run(run_path)), system, splits,
                                  ("pair", "sentence"))
  if not ctx.keep_embeddings:
    os.remove(index_path)
    shutil.rmtree(cands, ignore_errors=True)
  return {"records": records}


EXECUTORS: dict[str, Callable[[grid.Cell, Context, str], dict]] = {
    "pairs": _pairs, "vocab": _vocab, "reqa": _reqa, "bm25": _bm25, "pretrain": _pretrain,
    "finetune": _finetune, "eval": _eval}
#: Cells that resume by themselves (training checkpoints); the others restart from scratch.
RESUMABLE = ("pretrain", "finetune")


# ---------------------------------------------------------------------------------------------
# Running the plan.
# ---------------------------------------------------------------------------------------------


def read_done(path: str) -> Optional[dict]:
  done = os.path.join(path, DONE_FILE)
  return tio.read_json(done) if os.path.exists(done) else None


def _now() -> str:
  return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def _log_cell(work: str, entry: dict) -> None:
  with open(os.path.join(work, CELL_LOG), "a", encoding="utf-8") as f:
    f.write(json.dumps(entry, sort_keys=True) + "\n")


def run_cells(ctx: Context, on_result: Callable[[], None] = lambda: None) -> dict[str, str]:
  """Runs every cell not done yet, in plan order; returns {cell name: status}, status one of
  "done" (before this run), "ran", "failed", "blocked" (a dependency failed). A failed cell
  is logged and the grid carries on with the cells that do not need it."""
  status: dict[str, str] = {}
  cells = list(ctx.plan)
  for i, cell in enumerate(cells, start=1):
    out = ctx.dir(cell.name)
    if read_done(out) is not None:
      status[cell.name] = "done"
      _log_cell(ctx.work, {"time": _now(), "cell": cell.name, "dir": cell.dirname,
                           "status": "skipped"})
      logger.info("[%d/%d] %s: done before, skipped", i, len(cells), cell.name)
      continue
    blocked = [d for d in cell.deps if status.get(d) in ("failed", "blocked")]
    if blocked:
      status[cell.name] = "blocked"
      logger.warning("[%d/%d] %s: blocked by %s", i, len(cells), cell.name, ", ".join(blocked))
      continue
    if cell.kind not in RESUMABLE and os.path.exists(out):
      shutil.rmtree(out)  # a partial output of a killed run: start clean
    tio.makedirs(out)
    logger.info("[%d/%d] %s -> %s", i, len(cells), cell.name, out)
    started, t0 = _now(), time.perf_counter()
    try:
      result = EXECUTORS[cell.kind](cell, ctx, out)
    except Exception as e:  # pylint: disable=broad-except  (one cell must not end the grid)
      seconds = time.perf_counter() - t0
      status[cell.name] = "failed"
      logger.exception("[%d/%d] %s FAILED after %.0f s: %s", i, len(cells), cell.name,
                       seconds, e)
      _log_cell(ctx.work, {"time": _now(), "cell": cell.name, "dir": cell.dirname,
                           "status": "failed", "seconds": round(seconds, 1), "error": str(e)})
      continue
    seconds = time.perf_counter() - t0
    tio.write_json(os.path.join(out, DONE_FILE),
                   {"cell": cell.name, "kind": cell.kind, "key": cell.key,
                    "params": dict(cell.params), "deps": list(cell.deps), "started": started,
                    "finished": _now(), "seconds": round(seconds, 1), **result})
    status[cell.name] = "ran"
    _log_cell(ctx.work, {"time": _now(), "cell": cell.name, "dir": cell.dirname,
                         "status": "ran", "seconds": round(seconds, 1)})
    logger.info("[%d/%d] %s finished in %s", i, len(cells), cell.name,
                grid.format_seconds(seconds))
    if cell.kind in ("eval", "bm25"):
      on_result()
  return status


# ---------------------------------------------------------------------------------------------
# Results: tables, CSV / JSON, plots, README.
# ---------------------------------------------------------------------------------------------


def collect(ctx: Context, gold: str = "pair") -> dict[tuple[str, str], dict]:
  """{(cell, split): metrics record of `gold`} of every finished eval / bm25 cell."""
  values = {}
  for cell in ctx.plan:
    if cell.kind not in ("eval", "bm25"):
      continue
    done = read_done(ctx.dir(cell.name))
    for record in (done or {}).get("records", []):
      if record.get("gold", "pair") == gold:
        values[(cell.name, record["split"])] = record
  return values


def _table_ratios(table: int, aggs: Sequence[grid.Aggregate]) -> list[int]:
  return sorted({a.ratio for a in aggs if a.table == table})


def write_tables(cfg: grid.GridConfig, ctx: Context, entries: Sequence[grid.Entry],
                 results_dir: str) -> list[str]:
  """Markdown (paper layout), CSV, JSON and recall@k PNGs of every table with results;
  returns the Markdown sections (for the README)."""
  from twotower.eval import report
  values = collect(ctx)
  aggs = grid.aggregate(entries, values)
  sections, csv_rows, written = [], [], []
  for table in cfg.tables:
    for dataset, _, _, main_table in grid.datasets(cfg):
      if table in (3, 4) and table != main_table:
        continue
      these = [a for a in aggs if a.table == table and a.dataset == dataset]
      if not these:
        continue
      rows, header, row_cells = grid.table_rows_and_headers(table, cfg)
      ratios = _table_ratios(table, these)
      md = grid.markdown_table(these, rows, ratios, header, row_cells)
      title = f"{grid.TABLE_TITLES[table]} ({dataset}, {these[0].candidates} candidates)"
      stem = f"table{table}-{dataset}"
      tio.write_text(os.path.join(results_dir, f"{stem}.md"), f"### {title}\n\n{md}")
      sections.append(f"### {title}\n\n{md}")
      written.append(f"{stem}.md")
      for ratio in ratios:
        records = [{"system": a.row, "split": f"test-{ratio}", "metrics": dict(a.mean)}
                   for row in rows for a in these if a.row == row and a.ratio == ratio]
        png = f"{stem}-r{ratio}.png"
        report.plot_recall(records, os.path.join(results_dir, png),
                           f"Table {table} ({dataset}), {grid.ratio_label(ratio)}: Recall@k")
        written.append(png)
      for a in these:
        csv_rows.append(a)
  header = (["table", "dataset", "row", "ratio", "seeds", "questions", "candidates"]
            + [f"{m}_{s}" for m in grid.RECALLS + ("MRR",) for s in ("mean", "std")])
  lines = [",".join(header)]
  for a in csv_rows:
    lines.append(",".join([str(a.table), a.dataset, a.row, str(a.ratio),
                           " ".join(map(str, a.seeds)), str(a.questions), str(a.candidates)]
                          + [f"{d.get(m, float('nan')):.4f}" for m in grid.RECALLS + ("MRR",)
                             for d in (a.mean, a.std)]))
  tio.write_text(os.path.join(results_dir, "results.csv"), "\n".join(lines) + "\n")
  raw = [{"table": e.table, "dataset": e.dataset, "row": e.row, "ratio": e.ratio,
          "seed": e.seed, "cell": e.cell, "record": values.get((e.cell, e.split))}
         for e in entries if (e.cell, e.split) in values]
  tio.write_json(os.path.join(results_dir, "results.json"),
                 {"gold": "pair", "aggregates": [dataclasses.asdict(a) for a in csv_rows],
                  "per_seed": raw})
  return sections


def machine() -> dict[str, str]:
  """CPU model, cores and RAM (from /proc), OS and Python."""
  info = {"cores": str(os.cpu_count()), "python": platform.python_version(),
          "os": platform.platform()}
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      models = [l.split(":", 1)[1].strip() for l in f if l.startswith("model name")]
    info["cpu"] = models[0] if models else platform.processor()
    with open("/proc/meminfo", encoding="utf-8") as f:
      kib = next(int(l.split()[1]) for l in f if l.startswith("MemTotal"))
    info["ram"] = f"{kib / 2**20:.1f} GiB"
  except (OSError, StopIteration, ValueError):
    info.setdefault("cpu", platform.processor())
  return info


def package_versions(names: Iterable[str] = PACKAGES) -> dict[str, str]:
  versions = {}
  for name in names:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      versions[name] = "not installed"
  return versions


def write_readme(cfg: grid.GridConfig, ctx: Context, argv: Sequence[str], results_dir: str,
                 sections: Sequence[str], status: Mapping[str, str], wall: float) -> str:
  cells = []
  for cell in ctx.plan:
    done = read_done(ctx.dir(cell.name))
    cells.append((cell, done))
  seeds = ", ".join(f"{r}%: {list(cfg.seeds_for(r))}" for r in cfg.ratios)
  lines = [f"# Experiment grid: preset `{cfg.preset}`", "",
           "Written by `twotower experiment` (eval/experiment.py). Recalls are in percent on "
           "the test side of each train/test split, gold convention `pair` (the paper's: the "
           "exact (sentence, passage) candidate); `mean ± std` over fine-tuning seeds where "
           "there are several (population std). `results.json` also holds each seed's record; "
           "the cells' `done.json` hold the `sentence` convention (ReQA's) too.", "",
           "## Command", "", "```", "twotower experiment " + shlex.join(list(argv)), "```", "",
           f"Work directory: `{ctx.work}`. Seeds: {seeds}. Pre-training uses seed 0, once per "
           "system and model size; every ratio and seed fine-tunes from that checkpoint.", ""]
  lines += ["## Results", ""] + (list(sections) or ["(no finished evaluations yet)", ""])
  m = machine()
  lines += ["## Machine and packages", "",
            f"{m.get('cpu', '?')}, {m['cores']} cores, {m.get('ram', '?')} RAM; {m['os']}; "
            f"Python {m['python']}.", "",
            "| package | version |", "|---|---|"]
  lines += [f"| {k} | {v} |" for k, v in package_versions().items()]
  total = sum((d or {}).get("seconds", 0.0) for _, d in cells)
  lines += ["", "## Cells", "",
            f"{sum(1 for _, d in cells if d)} of {len(cells)} cells finished; their wall time "
            f"adds up to {grid.format_seconds(total)} (this invocation: "
            f"{grid.format_seconds(wall)}).", "",
            "| cell | status | wall time | finished |", "|---|---|---:|---|"]
  for cell, done in cells:
    state = "done" if done else status.get(cell.name, "todo")
    lines.append(f"| `{cell.name}` | {state} | "
                 f"{grid.format_seconds(done['seconds']) if done else ''} | "
                 f"{done['finished'] if done else ''} |")
  text = "\n".join(lines) + "\n"
  tio.write_text(os.path.join(results_dir, "README.md"), text)
  return text


# ---------------------------------------------------------------------------------------------
# Command line.
# ---------------------------------------------------------------------------------------------


def _ints(value: str) -> tuple[int, ...]:
  return tuple(int(v) for v in value.split(",") if v.strip())


def _names(value: str) -> tuple[str, ...]:
  return tuple(v.strip().lower() for v in value.split(",") if v.strip())


def _ratio_seeds(values: Sequence[str]) -> tuple[tuple[int, tuple[int, ...]], ...]:
  out = []
  for item in values:
    for part in item.split(";"):
      if not part.strip():
        continue
      ratio, sep, seeds = part.partition("=")
      if not sep:
        raise ValueError(f"--ratio_seeds {part!r}: expected RATIO=SEED,SEED e.g. 5=0,1,2")
      out.append((int(ratio), _ints(seeds)))
  return tuple(out)


def _parser() -> argparse.ArgumentParser:
  d = grid.GridConfig(preset="cpu-small", dump="")
  p = argparse.ArgumentParser(prog="twotower experiment", description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument("--preset", required=True,
                 help="model preset of the grid (cpu-small, tiny, paper, or a YAML file)")
  p.add_argument("--out", required=True, help="work dir: data, checkpoints, embeddings, runs")
  p.add_argument("--dump", required=True, help="Wikipedia pages-articles dump glob (pre-training)")
  p.add_argument("--squad", default="", help="SQuAD v1.1/v2.0 JSON: ReQA SQuAD (Table 3)")
  p.add_argument("--nq", default="", help="Natural Questions simplified jsonl[.gz] (Table 4)")
  p.add_argument("--results_dir", default=None, help="tables and README (default "
                 "docs/results/<preset>)")
  p.add_argument("--systems", default=",".join(d.systems),
                 help=f"comma list of {', '.join(grid.SYSTEMS_BY_NAME)}")
  p.add_argument("--ratios", default=",".join(map(str, d.ratios)), help="train ratios (%%)")
  p.add_argument("--seeds", default="0", help="fine-tuning seeds, every ratio")
  p.add_argument("--ratio_seeds", action="append", default=[],
                 help="seeds for one ratio, e.g. 5=0,1,2 (repeatable; overrides --seeds there)")
  p.add_argument("--tables", default="3,4,5,6", help="tables to make (3/4 need --squad/--nq)")
  p.add_argument("--pretrain_steps", type=int, default=0, help="0: the preset's trainer.steps")
  p.add_argument("--finetune_steps", type=int, default=0,
                 help="0: the preset's trainer.finetune_steps")
  p.add_argument("--ablation_system", default=d.ablation_system, help="Table 5's system")
  p.add_argument("--ablation_ratios", default="", help="Table 5's ratios (default: smallest)")
  p.add_argument("--open_systems", default=",".join(d.open_systems), help="Table 6's systems")
  p.add_argument("--open_ratios", default="", help="Table 6's ratios (default: smallest)")
  p.add_argument("--open_candidates", type=int, default=d.open_candidates,
                 help="Wikipedia (sentence, passage) candidates added for Table 6")
  p.add_argument("--heldout_percent", type=float, default=d.heldout_percent,
                 help="pages the pair pipeline holds out")
  p.add_argument("--pairs_flags", default=None,
                 help="extra `twotower pairs` flags, one string (default per preset: "
                      f"{ {k: ' '.join(v) for k, v in PAIRS_FLAGS.items()} })")
  p.add_argument("--pretrain_text_from_squad", action="store_true",
                 help="also pre-train on the paragraphs of the --squad file's articles "
                      "(written as an extra dump; no questions)")
  p.add_argument("--vocab_size", type=int, default=d.vocab_size, help="WordPiece vocabulary")
  p.add_argument("--beam_flags", default=" ".join(DEFAULT_BEAM_FLAGS),
                 help="Beam pipeline flags of the pairs / reqa / embed stages, one string")
  p.add_argument("--keep_embeddings", action="store_true",
                 help="keep candidate embeddings and FAISS indexes of eval cells")
  p.add_argument("--dry_run", action="store_true",
                 help="print the cell plan with a rough time estimate; run nothing")
  p.add_argument("--verbose", type=int, default=2, help="Keras fit verbosity of training cells")
  return p


def parse_args(argv: Sequence[str]) -> tuple[grid.GridConfig, argparse.Namespace]:
  args = _parser().parse_args(list(argv))
  flags = (tuple(shlex.split(args.pairs_flags)) if args.pairs_flags is not None
           else PAIRS_FLAGS.get(args.preset, ()))
  cfg = grid.GridConfig(
      preset=args.preset, dump=args.dump, squad=args.squad, nq=args.nq,
      systems=_names(args.systems), ratios=_ints(args.ratios), seeds=_ints(args.seeds),
      ratio_seeds=_ratio_seeds(args.ratio_seeds), tables=_ints(args.tables),
      pretrain_steps=args.pretrain_steps, finetune_steps=args.finetune_steps,
      ablation_system=args.ablation_system.lower(), ablation_ratios=_ints(args.ablation_ratios),
      open_systems=_names(args.open_systems), open_ratios=_ints(args.open_ratios),
      open_candidates=args.open_candidates, heldout_percent=args.heldout_percent,
      pairs_flags=flags, pretrain_text_from_squad=args.pretrain_text_from_squad,
      vocab_size=args.vocab_size)
  if not cfg.squad and not cfg.nq:
    raise ValueError("give --squad FILE and/or --nq FILE (the ReQA data)")
  return cfg, args


def plan_text(ctx: Context) -> tuple[str, float]:
  """The plan, one line per cell with its state and estimate; and the estimated remaining
  seconds."""
  configs: dict[str, dict] = {}
  lines, remaining = [], 0.0
  for cell in ctx.plan:
    if cell.kind in ("pretrain", "finetune", "eval"):
      source = cell if cell.kind != "eval" else ctx.plan[next(
          d for d in cell.deps if ctx.plan[d].kind == "finetune")]
      key = json.dumps([source.params.get("config"), source.params["preset"],
                        source.params.get("sets", [])])
      configs.setdefault(key, resolved_config(source.params))
      seconds = grid.estimate_seconds(cell, configs[key])
    else:
      seconds = grid.estimate_seconds(cell)
    done = read_done(ctx.dir(cell.name)) is not None
    if not done:
      remaining += seconds
    lines.append(f"  {'done' if done else 'todo'}  {cell.kind:<8} {cell.name:<52} "
                 f"~{grid.format_seconds(seconds)}")
  counts = {k: len(ctx.plan.of_kind(k)) for k in grid.KINDS if ctx.plan.of_kind(k)}
  head = (f"{len(ctx.plan)} cells ({', '.join(f'{v} {k}' for k, v in counts.items())}); "
          f"rough estimate of what is left on 2 cores: {grid.format_seconds(remaining)}")
  return "\n".join([head] + lines), remaining


def run(argv: list[str] | None = None) -> None:
  argv = list(sys.argv[1:] if argv is None else argv)
  cfg, args = parse_args(argv)
  the_plan, entries = grid.plan(cfg)
  work = os.path.abspath(args.out)
  ctx = Context(work, the_plan, verbose=args.verbose, keep_embeddings=args.keep_embeddings,
                beam_flags=tuple(shlex.split(args.beam_flags)))
  text, _ = plan_text(ctx)
  if args.dry_run:
    print(text)
    return
  results_dir = args.results_dir or os.path.join("docs", "results", cfg.preset)
  tio.makedirs(work)
  tio.log_settings("experiment", {"preset": cfg.preset, "systems": ",".join(cfg.systems),
                                  "ratios": ",".join(map(str, cfg.ratios)),
                                  "tables": ",".join(map(str, cfg.tables)), "out": work,
                                  "results": results_dir})
  logger.info("plan: %s", text)
  t0 = time.perf_counter()
  status: dict[str, str] = {}

  def refresh() -> None:
    sections = write_tables(cfg, ctx, entries, results_dir)
    write_readme(cfg, ctx, argv, results_dir, sections, status,
                 time.perf_counter() - t0)

  status.update(run_cells(ctx, on_result=refresh))
  refresh()
  ran = sum(1 for s in status.values() if s == "ran")
  bad = sorted(n for n, s in status.items() if s in ("failed", "blocked"))
  print(f"experiment: {ran} cells ran, {len(status) - ran - len(bad)} were done before, "
        f"{len(bad)} failed or blocked; results in {results_dir}/README.md")
  if bad:
    raise RuntimeError(f"{len(bad)} cells failed or were blocked: {', '.join(bad[:5])}"
                       f"{' ...' if len(bad) > 5 else ''} (see {work}/{CELL_LOG})")


if __name__ == "__main__":
  run()
