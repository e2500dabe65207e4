"""`twotower demo`: the whole toolkit, end to end, on one Wikipedia dump, in about 10 minutes.

    twotower demo --dump data/enwiki-slice-pages-articles.xml.bz2 --out runs/demo

Stages (each the real stage, called through its typed `run(config)`):

  1. pairs      dump -> ICT/BFS/WLP pairs, passages; a share of pages held out
  2. vocab      WordPiece vocabulary from the training passages (held-out pages excluded)
  3. benchmark  held-out pages -> questions (the sentences ICT removed) and candidates
                (their passages), in the ReQA layout
  4. bm25       Pyserini BM25 over the held-out candidates
  5. pretrain   towers pre-trained on ICT+BFS+WLP (cpu-small, short); No-SSL = the same
                towers, 0 steps (random initialisation)
  6. dense      per model: Beam RunInference embedding, FAISS flat search, Recall@k
                (eval.dense, the path the experiment uses too)
  7. report     Recall@k / MRR table (Markdown, CSV, JSON) and a recall@k PNG
  8. bundle     a retriever bundle over every passage of the dump with the pre-trained towers
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
from typing import Callable, TypeVar

from twotower import contracts
from twotower import io as tio
from twotower import logs

logger = logging.getLogger(__name__)

DEFAULT_DUMP = "data/enwiki-slice-pages-articles.xml.bz2"
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class DemoConfig:
  dump: str = DEFAULT_DUMP
  out: str = "runs/demo"
  squad: str = ""                 # optional SQuAD v1.1/v2.0 JSON: also evaluate on ReQA
  preset: str = "cpu-small"       # model preset (model/presets/<name>.yaml)
  pretrain_steps: int = 600       # ~5 minutes of cpu-small on 2 cores
  heldout_percent: float = 20.0   # pages held out as the benchmark
  vocab_size: int = 8000          # a small vocabulary: the slice has ~100 articles


class Progress:
  """One line per stage (`[i/n] name done in s`) and the stage times at the end."""

  def __init__(self, total: int):
    self.total, self.done, self.start = total, 0, time.perf_counter()
    self.times: list[tuple[str, float]] = []

  def stage(self, name: str, fn: Callable[[], T]) -> T:
    self.done += 1
    logger.info("[%d/%d] %s ...", self.done, self.total, name)
    t0 = time.perf_counter()
    result = fn()
    self.times.append((name, time.perf_counter() - t0))
    logs.progress("[%d/%d] %-34s done in %4.0f s", self.done, self.total, name,
                  self.times[-1][1])
    return result



@dataclasses.dataclass(frozen=True)
class DemoResult:
  records: list[dict]
  report_dir: str
  stage_seconds: tuple[tuple[str, float], ...]
  bundle: str = ""                # the retriever bundle to query


def _benchmark_records(reqa_dir: str, benchmark: str, runs: list[tuple[str, str]]
                       ) -> list[dict]:
  """Records of each (system, run file) on a benchmark's `all` split, labelled with the
  benchmark's name: both benchmarks score `all`, and one table must tell their rows apart."""
  from twotower.eval import evaluate
  (split,) = evaluate.load_splits(reqa_dir, ["all"])
  return [{**r, "split": benchmark}
          for name, path in runs for r in evaluate.evaluate_run_file(path, name, [split])]


def run(config: DemoConfig) -> DemoResult:
  from twotower.eval import bm25, dense, report
  from twotower.model import config as config_lib
  from twotower.model import pretrain
  from twotower.pipelines import heldout, pairs, vocab

  tio.log_settings("demo", dataclasses.asdict(config))
  tio.match_files(config.dump)  # a clear error before anything runs
  out = config.out
  pairs_dir, vocab_path = os.path.join(out, "pairs"), os.path.join(out, contracts.VOCAB_FILE)
  bench, report_dir = os.path.join(out, "heldout"), os.path.join(out, "report")
  models = {"ict+bfs+wlp": os.path.join(out, "model-ict-bfs-wlp"),
            "no-ssl": os.path.join(out, "model-no-ssl")}
  progress = Progress(total=9 + (3 if config.squad else 0))

  # Dense sampling: a slice of ~100 articles gives only a few hundred pairs at the
  # full-Wikipedia defaults; documents cut to what cpu-small's towers read (128 pieces).
  progress.stage("pairs (Beam)", lambda: pairs.run(pairs.PairsConfig(
      dump=config.dump, out=pairs_dir, heldout_percent=config.heldout_percent,
      passages=pairs.PassageConfig(max_doc_tokens=128),
      pairs=pairs.PairConfig(ict_per_page=100, bfs_per_page=40, wlp_per_page=20))))
  progress.stage("vocab", lambda: vocab.run(vocab.VocabConfig(
      passages=pairs_dir, out=vocab_path, vocab_size=config.vocab_size)))
  progress.stage("held-out benchmark", lambda: heldout.run(heldout.HeldoutConfig(
      pairs=pairs_dir, out=bench)))
  progress.stage("bm25 (Pyserini)", lambda: bm25.run(bm25.Bm25Config(
      reqa=bench, out=os.path.join(out, "bm25"), splits=("all",), golds=("pair",),
      system="bm25")))

  def pretrain_job(name: str, steps: int):
    cfg = config_lib.replace(config_lib.load(config.preset),
                             data={"tasks": ("ict", "bfs", "wlp")}, trainer={"steps": steps})
    return pretrain.run(pretrain.PretrainJob(config=cfg, out=models[name], vocab=vocab_path,
                                             pairs=pairs_dir))

  progress.stage(f"pretrain ict+bfs+wlp ({config.pretrain_steps} steps)",
                 lambda: pretrain_job("ict+bfs+wlp", config.pretrain_steps))
  progress.stage("no-ssl (random towers, exported)", lambda: pretrain_job("no-ssl", 0))

  def dense_runs(reqa_dir: str, tag: str) -> list[tuple[str, str]]:
    return [(name, dense.run(dense.DenseConfig(
        model=contracts.saved_model_path(path), reqa=reqa_dir,
        work=os.path.join(out, f"dense-{tag}", name), system=name)).run_file)
            for name, path in models.items()]

  held_runs = progress.stage("embed + FAISS search (held-out)",
                             lambda: dense_runs(bench, "heldout"))
  bm25_run = os.path.join(out, "bm25", contracts.BM25_RUN_FILE)
  records = _benchmark_records(bench, "heldout", [("bm25", bm25_run)] + held_runs)

  if config.squad:
    from twotower.pipelines import reqa
    reqa_dir = os.path.join(out, "reqa")
    progress.stage("reqa (Beam)", lambda: reqa.run(reqa.ReqaConfig(out=reqa_dir,
                                                                    squad=config.squad)))
    progress.stage("bm25 on ReQA", lambda: bm25.run(bm25.Bm25Config(
        reqa=reqa_dir, out=os.path.join(out, "bm25-reqa"), splits=("all",),
        golds=("pair",), system="bm25")))
    reqa_runs = progress.stage("embed + FAISS search (ReQA)",
                               lambda: dense_runs(reqa_dir, "reqa"))
    records += _benchmark_records(
        reqa_dir, "reqa",
        [("bm25", os.path.join(out, "bm25-reqa", contracts.BM25_RUN_FILE))] + reqa_runs)

  progress.stage("report", lambda: report.write_report(records, report_dir, "demo"))
  from twotower.deploy.serving import bundle
  bundle_dir = os.path.join(out, "bundle")
  progress.stage("retriever bundle (all passages)", lambda: bundle.run(bundle.BundleConfig(
      model=models["ict+bfs+wlp"], passages=pairs_dir, out=bundle_dir, overwrite=True,
      weight=bundle.DEFAULT_WEIGHT)))
  return DemoResult(records, report_dir, tuple(progress.times), bundle_dir)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("demo"))
