"""`twotower demo`: the whole toolkit, end to end, on one Wikipedia dump, in about 15 minutes.

    twotower demo --dump data/enwiki-slice-pages-articles.xml.bz2 --out runs/demo

Stages (each is the real stage, called through its command-line contract):

  1. pairs      dump -> ICT/BFS/WLP pairs, passages; a share of pages held out
  2. vocab      WordPiece vocabulary from the training passages
  3. benchmark  held-out pages -> questions (sentences ICT removed) and candidates (passages)
  4. bm25       Pyserini BM25 over the held-out candidates
  5. pretrain   towers pre-trained on ICT+BFS+WLP (cpu-small, short); No-SSL = same towers,
                0 steps (random initialisation)
  6. embed      Beam RunInference: candidates and questions -> embeddings, per model
  7. search     FAISS flat inner product -> run files
  8. evaluate   Recall@k / MRR table (Markdown, CSV, JSON) and a recall@k PNG

With `--squad FILE` it also builds ReQA from SQuAD and evaluates the same systems on it
(zero-shot towers; fine-tuning is `twotower finetune` / `twotower experiment`).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import time
from typing import Callable, Iterable, Sequence

from twotower import contracts
from twotower import io as tio

logger = logging.getLogger(__name__)

DEFAULT_DUMP = "data/enwiki-slice-pages-articles.xml.bz2"


@dataclasses.dataclass(frozen=True)
class DemoConfig:
  dump: str
  out: str
  squad: str = ""                 # optional SQuAD v1.1/v2.0 JSON: also evaluate on ReQA
  preset: str = "cpu-small"       # model preset (model/presets/<name>.yaml)
  pretrain_steps: int = 600       # ~5 minutes of cpu-small on 2 cores
  heldout_percent: float = 20.0   # pages held out as the benchmark
  vocab_size: int = 8000          # a small vocabulary: the slice has ~100 articles


class _Progress:
  """Logs `[i/n] stage` with elapsed time; the stages themselves show their own progress."""

  def __init__(self, total: int):
    self.total, self.done, self.start = total, 0, time.perf_counter()
    self.times: list[tuple[str, float]] = []

  def stage(self, name: str, fn: Callable[[], object]):
    self.done += 1
    logger.info("[%d/%d] %s ...", self.done, self.total, name)
    t0 = time.perf_counter()
    result = fn()
    self.times.append((name, time.perf_counter() - t0))
    logger.info("[%d/%d] %s done in %.0f s", self.done, self.total, name, self.times[-1][1])
    return result

  def summary(self) -> str:
    rows = [f"  {name:<34} {seconds:7.0f} s" for name, seconds in self.times]
    total = time.perf_counter() - self.start
    return "\n".join(["stage times:"] + rows + [f"  {'total':<34} {total:7.0f} s"])


def _dense_run(model_dir: str, reqa_dir: str, split: str, work: str) -> str:
  """embed candidates + questions with an exported model, flat IP search -> run file."""
  from twotower.eval import index as index_stage
  from twotower.eval import search as search_stage
  from twotower.pipelines import embed as embed_stage
  cands, quests = os.path.join(work, "candidates"), os.path.join(work, f"questions-{split}")
  embed_stage.run(embed_stage.EmbedConfig(model=model_dir, out=cands, kind="candidates",
                                           path=contracts.candidates_path(reqa_dir)))
  embed_stage.run(embed_stage.EmbedConfig(model=model_dir, out=quests, kind="questions",
                                           path=contracts.questions_path(reqa_dir, split)))
  index_path = os.path.join(work, "flat.faiss")
  index_stage.run(["--embeddings", cands, "--out", index_path, "--type", "flat"])
  run_path = os.path.join(work, f"run-{split}.parquet")
  search_stage.run(["--index", index_path, "--queries", quests, "--out", run_path, "--k", "100"])
  return run_path


def _evaluate(reqa_dir: str, split: str, runs: Sequence[tuple[str, str]], out: str,
              benchmark: str) -> list[dict]:
  """Records of each (system, run file) on one benchmark; `<benchmark>.md/.csv/.json/.png`.

  The records' `split` is the benchmark's name ("heldout", "reqa"): both benchmarks evaluate
  their split "all", and the demo's one table must tell their rows apart.
  """
  from twotower.eval import evaluate as evaluate_stage
  from twotower.eval import report
  from twotower.eval import runs as runs_lib
  (loaded,) = evaluate_stage.load_splits(reqa_dir, [split])
  records = []
  for name, path in runs:
    records += [{**r, "split": benchmark} for r in evaluate_stage.evaluate(
        runs_lib.ids_only(runs_lib.read_run(path)), name, [loaded], ("pair",))]
  report.write_report(records, out, benchmark)
  return records


def run_demo(config: DemoConfig) -> list[dict]:
  from twotower.eval import bm25 as bm25_stage
  from twotower.pipelines import heldout
  from twotower.model import pretrain as pretrain_stage
  from twotower.commands import pairs as pairs_stage
  from twotower.pipelines import vocab as vocab_stage

  out = config.out
  pairs_dir, vocab = os.path.join(out, "pairs"), os.path.join(out, "vocab.txt")
  bench = os.path.join(out, "heldout")
  models = {"ict+bfs+wlp": os.path.join(out, "model-ict-bfs-wlp"),
            "no-ssl": os.path.join(out, "model-no-ssl")}
  progress = _Progress(total=8 + (3 if config.squad else 0))

  # Dense sampling: a slice of ~100 articles gives only a few hundred pairs at the
  # full-Wikipedia defaults; documents cut to what cpu-small's towers read (128 pieces).
  progress.stage("pairs (Beam)", lambda: pairs_stage.main(
      ["--dump", config.dump, "--out", pairs_dir, "--heldout_percent",
       str(config.heldout_percent), "--max_doc_tokens", "128", "--ict_per_page", "100",
       "--bfs_per_page", "40", "--wlp_per_page", "20"]))
  progress.stage("vocab", lambda: vocab_stage.run(vocab_stage.VocabConfig(
      passages=pairs_dir, out=vocab, vocab_size=config.vocab_size)))
  progress.stage("held-out benchmark", lambda: heldout.run(heldout.HeldoutConfig(
      pairs=pairs_dir, out=bench, heldout_percent=config.heldout_percent)))
  progress.stage("bm25 (Pyserini)", lambda: bm25_stage.run(
      ["--reqa", bench, "--out", os.path.join(out, "bm25"), "--split", "all",
       "--gold", "pair"]))

  def pretrain(name: str, steps: int, tasks: str) -> None:
    pretrain_stage.run(["--config", config.preset, "--out", models[name], "--pairs", pairs_dir,
                        "--vocab", vocab, "--tasks", tasks, "--steps", str(steps)])

  progress.stage(f"pretrain ict+bfs+wlp ({config.pretrain_steps} steps)",
                 lambda: pretrain("ict+bfs+wlp", config.pretrain_steps, "ict,bfs,wlp"))
  progress.stage("no-ssl (random towers, exported)", lambda: pretrain("no-ssl", 0, "ict"))

  def dense_runs(reqa_dir: str, split: str, tag: str) -> list[tuple[str, str]]:
    return [(name, _dense_run(os.path.join(path, "export", "saved_model"), reqa_dir, split,
                              os.path.join(out, f"dense-{tag}", name)))
            for name, path in models.items()]

  held_runs = progress.stage("embed + FAISS search (held-out)",
                             lambda: dense_runs(bench, "all", "heldout"))
  bm25_run = os.path.join(out, "bm25", bm25_stage.RUN_FILE)
  report_dir = os.path.join(out, "report")
  records = progress.stage("evaluate (held-out)", lambda: _evaluate(
      bench, "all", [("bm25", bm25_run)] + held_runs, report_dir, "heldout"))

  if config.squad:
    from twotower.pipelines import reqa as reqa_stage
    reqa_dir = os.path.join(out, "reqa")
    progress.stage("reqa (Beam)", lambda: reqa_stage.run(reqa_stage.ReqaConfig(
        out=reqa_dir, squad=config.squad)))
    progress.stage("bm25 on ReQA", lambda: bm25_stage.run(
        ["--reqa", reqa_dir, "--out", os.path.join(out, "bm25-reqa"), "--split", "all",
         "--gold", "pair"]))
    reqa_runs = progress.stage("embed + search + evaluate (ReQA)",
                               lambda: dense_runs(reqa_dir, "all", "reqa"))
    records += _evaluate(reqa_dir, "all",
                         [("bm25", os.path.join(out, "bm25-reqa", bm25_stage.RUN_FILE))] + reqa_runs,
                         report_dir, "reqa")

  from twotower.eval import report
  report.write_report(records, report_dir, "demo")
  print(report.markdown_table(records))
  print(progress.summary())
  print(f"report: {report_dir}/demo.md, {report_dir}/demo.png")
  return records


def parse_args(argv: Iterable[str] | None) -> DemoConfig:
  d = DemoConfig(dump=DEFAULT_DUMP, out="runs/demo")
  p = argparse.ArgumentParser(prog="twotower demo", description=__doc__.split("\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument("--dump", default=d.dump,
                 help="Wikipedia pages-articles dump (glob); `make data` fetches the default")
  p.add_argument("--out", default=d.out, help="work and report directory")
  p.add_argument("--squad", default="", help="SQuAD JSON: also evaluate on ReQA")
  p.add_argument("--preset", default=d.preset, help="model preset for the towers")
  p.add_argument("--pretrain_steps", type=int, default=d.pretrain_steps,
                 help="pre-training steps (cpu-small: ~2 steps/s on 2 cores)")
  p.add_argument("--heldout_percent", type=float, default=d.heldout_percent,
                 help="share of pages held out as the benchmark")
  p.add_argument("--vocab_size", type=int, default=d.vocab_size, help="WordPiece vocabulary size")
  args = p.parse_args(None if argv is None else list(argv))
  try:
    tio.match_files(args.dump)
  except FileNotFoundError as e:
    raise FileNotFoundError(f"{e} (`make data` fetches the default slice)") from None
  return DemoConfig(**vars(args))


def run(argv: list[str] | None = None) -> None:
  config = parse_args(argv)
  tio.log_settings("demo", dataclasses.asdict(config))
  run_demo(config)


if __name__ == "__main__":
  run()
