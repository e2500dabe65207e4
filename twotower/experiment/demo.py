"""`twotower demo`: the whole toolkit, end to end, on one Wikipedia dump, in about 10 minutes.

    twotower demo --dump data/enwiki-slice-pages-articles.xml.bz2 --out runs/demo

The demo is a small plan run by the experiment's machinery (experiment.plan / execute /
cells, the code that runs the paper's grid): each cell calls the real stage through its typed
`run(config)`, keeps what the stage returned in `<cell>/done.json`, and is skipped when the
demo is run again with the same settings (an interrupted demo resumes; other settings plan
new cells beside the old ones, never mixed with them). Cells:

  pairs      dump -> ICT/BFS/WLP pairs, passages; a share of pages held out
  vocab      WordPiece vocabulary from the training passages (held-out pages excluded)
  heldout    held-out pages -> questions (the sentences ICT removed) and candidates (their
             passages), in the ReQA layout
  bm25       Pyserini BM25 over the held-out candidates
  pretrain   towers pre-trained on ICT+BFS+WLP (cpu-small, short); No-SSL = the same towers,
             0 steps (random initialisation)
  eval       per model: Beam RunInference embedding, FAISS flat search, Recall@k (eval.dense)

then, from the cells' records:

  report     Recall@k / MRR table (Markdown, CSV, JSON) and a recall@k PNG (`OUT/report`)
  bundle     a retriever bundle over every passage of the dump with the pre-trained towers
             (`twotower query OUT/bundle "..."`, `twotower serve OUT/bundle`); the hybrid's
             weight is 0.5, untuned (the held-out benchmark has no validation split)

With `--squad FILE` it also builds ReQA from SQuAD and evaluates the same systems on it
(zero-shot towers; fine-tuning is `twotower finetune` / `twotower experiment`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time

from twotower.core import contracts
from twotower.core import files as tio
from twotower.core import logs
from twotower.core import tower_text as texts
from twotower.experiment import execute
from twotower.experiment.cell_id import CellId
from twotower.experiment.params import (Bm25Params, EvalParams, HeldoutParams, PairsParams,
                                        PretrainParams, ReqaParams, VocabParams)
from twotower.experiment.plan import Plan

logger = logging.getLogger(__name__)

DEFAULT_DUMP = "data/enwiki-slice-pages-articles.xml.bz2"
#: The dense rows: towers pre-trained on the three tasks, and the same towers untrained.
PRETRAINED, UNTRAINED = "ict+bfs+wlp", "no-ssl"
SYSTEMS = (PRETRAINED, UNTRAINED)
BM25 = "bm25"


@dataclasses.dataclass(frozen=True)
class DemoConfig:
  dump: str = DEFAULT_DUMP
  out: str = "runs/demo"
  squad: str = ""                 # optional SQuAD v1.1/v2.0 JSON: also evaluate on ReQA
  preset: str = "cpu-small"       # model preset (model/presets/<name>.yaml)
  pretrain_steps: int = 600       # ~5 minutes of cpu-small on 2 cores
  heldout_percent: float = 20.0   # pages held out as the benchmark
  vocab_size: int = 8000          # a small vocabulary: the slice has ~100 articles


@dataclasses.dataclass(frozen=True)
class DemoResult:
  records: list[dict]             # BM25 and each dense row on each benchmark's questions
  report_dir: str
  stage_seconds: tuple[tuple[str, float], ...]  # each cell that ran now, the report, bundle
  bundle: str = ""                # the retriever bundle to query
  benchmarks: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> ReQA dir


def benchmarks(config: DemoConfig) -> tuple[str, ...]:
  """The benchmarks the demo scores: the held-out pages, and ReQA with `--squad`."""
  return ("heldout", "reqa") if config.squad else ("heldout",)


def plan(config: DemoConfig) -> Plan:
  """The demo's cells, in dependency order."""
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  from twotower.pipelines.wiki.pairs import PairConfig  # pylint: disable=import-outside-toplevel
  from twotower.pipelines.wiki.passages import PassageConfig  # pylint: disable=import-outside-toplevel

  p = Plan()
  # Dense sampling: a slice of ~100 articles gives only a few hundred pairs at the
  # full-Wikipedia defaults; documents cut to what cpu-small's towers read (128 pieces).
  # (corpus "": no corpus, written into the key, as the demo's cells always had it.)
  pairs = p.add(CellId("pairs", "demo"), PairsParams(
      dump=config.dump, corpus="", squad_text="", heldout_percent=config.heldout_percent,
      pairs=PairConfig(ict_per_page=100, bfs_per_page=40, wlp_per_page=20).settings(),
      passages=dataclasses.asdict(PassageConfig(max_doc_tokens=128)),
      text_cleanup=True))  # rendered templates, no reference sections (pairs guide)
  vocab = p.add(CellId("vocab", "demo"), VocabParams(vocab_size=config.vocab_size),
                {"pairs": pairs})
  reqa_of = {"heldout": p.add(CellId("heldout", "demo"), HeldoutParams(), {"pairs": pairs})}
  if config.squad:
    reqa_of["reqa"] = p.add(CellId("reqa", "squad"), ReqaParams(
        source="squad", path=config.squad, doc_text=texts.DEFAULT_DOC_TEXT,
        open_candidates=0))
  models = {}
  for name in SYSTEMS:
    steps = config.pretrain_steps if name == PRETRAINED else 0
    cfg = config_lib.replace(config_lib.load(config.preset),
                             data={"tasks": contracts.PRETRAIN_TASKS}, trainer={"steps": steps})
    models[name] = p.add(CellId("pretrain", system=name),
                         PretrainParams(config=cfg.to_dict(), export=True),
                         {"pairs": pairs, "vocab": vocab})
  # Each benchmark's every question (its `all` split); the held-out benchmark's gold is the
  # passage (ReQA's `pair` convention, the report's).
  scored = {"splits": (contracts.ALL_QUESTIONS,), "golds": ("pair",),
            "doc_text": texts.DEFAULT_DOC_TEXT}
  for bench in benchmarks(config):
    reqa = reqa_of[bench]
    p.add(CellId("bm25", bench), Bm25Params(**scored, system=BM25), {"reqa": reqa})
    for name, model in models.items():
      p.add(CellId("eval", bench, name), EvalParams(**scored, system=name),
            {"model": model, "reqa": reqa})
  return p


def run(config: DemoConfig) -> DemoResult:
  from twotower.deploy.bundling import bundle  # pylint: disable=import-outside-toplevel
  from twotower.eval import report  # pylint: disable=import-outside-toplevel

  tio.log_settings("demo", dataclasses.asdict(config))
  tio.match_files(config.dump)  # a clear error before anything runs
  work = config.out
  the_plan = plan(config)
  tio.makedirs(work)
  # A failed cell ends the demo with the stage's own error (a grid would go on).
  ran = execute.run_cells(the_plan, work, progress="epoch", stop_on_failure=True)

  def done(name: "CellId | str") -> dict:
    return execute.read_done(execute.cell_dir(work, the_plan[name]))

  # Both benchmarks score their `all` split: each record is labelled with its benchmark, so
  # that one table tells the rows apart.
  records = [{**r, "split": bench}
             for bench in benchmarks(config)
             for name in [CellId("bm25", bench)] + [CellId("eval", bench, m) for m in SYSTEMS]
             for r in done(name)["records"]]
  seconds = [(name, done(name)["seconds"]) for name in ran]

  def timed(name: str, fn):
    started = time.perf_counter()
    result = fn()
    seconds.append((name, time.perf_counter() - started))
    logs.progress("%-40s done in %4.0f s", name, seconds[-1][1])
    return result

  report_dir = os.path.join(work, "report")
  timed("report", lambda: report.write_report(records, report_dir, "demo"))
  bundle_dir = os.path.join(work, "bundle")
  timed("retriever bundle (all passages)", lambda: bundle.run(bundle.BundleConfig(
      model=execute.cell_dir(work, the_plan[CellId("pretrain", system=PRETRAINED)]),
      passages=execute.cell_dir(work, the_plan[CellId("pairs", "demo")]), out=bundle_dir,
      overwrite=True, weight=bundle.DEFAULT_WEIGHT)))
  dirs = {bench: execute.cell_dir(work, the_plan[the_plan[CellId("bm25", bench)].deps["reqa"]])
          for bench in benchmarks(config)}
  return DemoResult(records, report_dir, tuple(seconds), bundle_dir, dirs)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("demo"))
