"""`twotower evaluate`: Recall@k / MRR of run files on a ReQA split -> json, md, csv, png.

    twotower evaluate --reqa reqa/squad --run bm25/run.trec dense/run.parquet \
        --names bm25 ict --split test-5 --out results/

Several runs (and splits, and gold conventions) go into one table and one plot. Every record
says which gold convention it used (`gold`: `pair` is the paper's, `sentence` is ReQA's; see
twotower.core.metrics). `evaluate_run_file` is what every other stage (bm25, the dense path, fusion,
the experiment) calls to score a run: one Recall@k for the whole project.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from typing import Mapping, Sequence

from twotower.core import config_checks as checks
from twotower.core import contracts
from twotower.core import metrics as metrics_lib
from twotower.core import outputs
from twotower.core.contracts import codecs
from twotower.eval import report
from twotower.eval import runs as runs_lib

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ReqaSplit:
  """What evaluation needs of a ReQA directory for one split."""
  split: str
  questions: tuple[contracts.Question, ...]
  sentence_of: Mapping[int, str]  # candidate id -> sentence (the `sentence` convention)
  candidates: int


def load_splits(reqa_dir: str, splits: Sequence[str]) -> list[ReqaSplit]:
  rows = codecs.read_candidates(reqa_dir, columns=["candidate_id", "sentence"])
  sentence_of = {r["candidate_id"]: r["sentence"] for r in rows}
  return [ReqaSplit(s, codecs.read_questions(reqa_dir, s), sentence_of, len(sentence_of))
          for s in splits]


def evaluate(run: Mapping[str, Sequence[int]], system: str, splits: Sequence[ReqaSplit],
             golds: Sequence[str] = ("pair",),
             ks: Sequence[int] = contracts.DEFAULT_KS) -> list[dict]:
  """Metrics records (contracts.metrics_record + `gold`) of one run, per split and gold."""
  records = []
  for split in splits:
    for gold in golds:
      values, n = metrics_lib.evaluate_run(run, split.questions, gold, split.sentence_of, ks)
      records.append(report.with_gold(
          contracts.metrics_record(system, split.split, n, split.candidates, values), gold))
  return records


def check_run(run: Mapping[str, Sequence[int]], split: ReqaSplit, path: str) -> None:
  """A ValueError unless `run` belongs to the split's ReQA set: every candidate id it ranks
  is in the candidate pool, and it ranks some of the split's questions. Either mistake (a run
  over another pool, or of other questions) would otherwise score a table of near-zeros."""
  foreign = [cid for ranked in run.values() for cid in ranked if cid not in split.sentence_of]
  if foreign:
    total = sum(len(ranked) for ranked in run.values())
    raise ValueError(f"{path}: {len(foreign)} of {total} ranked candidate ids (e.g. "
                     f"{foreign[0]}) are not in the {split.candidates} candidates of this "
                     "ReQA set: the run was made over another candidate pool")
  if split.questions and not any(q.question_id in run for q in split.questions):
    raise ValueError(f"{path}: ranks none of the {len(split.questions)} {split.split} "
                     f"questions, only {len(run)} others: a run of another question set")


def evaluate_run_file(path: str, system: str, splits: Sequence[ReqaSplit],
                      golds: Sequence[str] = ("pair",),
                      ks: Sequence[int] = contracts.DEFAULT_KS) -> list[dict]:
  """`evaluate` of a run file (TREC or Parquet, eval.runs), after `check_run` on each
  split."""
  return evaluate_checked(runs_lib.ids_only(runs_lib.read_run(path)), system, splits, golds,
                          ks, where=path)


def evaluate_checked(run: Mapping[str, Sequence[int]], system: str,
                     splits: Sequence[ReqaSplit], golds: Sequence[str] = ("pair",),
                     ks: Sequence[int] = contracts.DEFAULT_KS, where: str = "run") -> list[dict]:
  """`evaluate` of a run in memory, after `check_run` on each split (`where` names the run
  in its errors)."""
  for split in splits:
    check_run(run, split, where)
  return evaluate(run, system, splits, golds, ks)


@dataclasses.dataclass(frozen=True)
class EvaluateConfig:
  """Flags of `twotower evaluate`."""
  reqa: str
  runs: tuple[str, ...]
  out: str
  names: tuple[str, ...] = ()          # one per run; default: the run files' names
  splits: tuple[str, ...] = (contracts.ALL_QUESTIONS,)
  golds: tuple[str, ...] = ("pair",)   # twotower.core.metrics.GOLD_CONVENTIONS
  ks: tuple[int, ...] = contracts.DEFAULT_KS
  stem: str = "metrics"
  overwrite: bool = False              # replace an --out that holds another run

  def __post_init__(self):
    checks.positive(self, "ks")
    if self.names and len(self.names) != len(self.runs):
      raise ValueError(f"{len(self.names)} names for {len(self.runs)} runs")
    bad = [g for g in self.golds if g not in metrics_lib.GOLD_CONVENTIONS]
    if bad:
      raise ValueError(f"unknown gold convention {bad}; choose from "
                       f"{metrics_lib.GOLD_CONVENTIONS}")


def system_name(path: str) -> str:
  """A run file's system name: its stem, or its directory's name for `run.*`."""
  stem = os.path.splitext(os.path.basename(path))[0]
  parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
  return parent if stem == "run" and parent else stem


@dataclasses.dataclass(frozen=True)
class EvaluateResult:
  records: list[dict]
  paths: dict[str, str]   # suffix -> written file


def run(config: EvaluateConfig) -> EvaluateResult:
  """Scores every run on every split and gold convention; writes `<stem>.json/.md/.csv/.png`
  under `out`."""
  names = config.names or tuple(system_name(r) for r in config.runs)
  splits = load_splits(config.reqa, config.splits)
  records: list[dict] = []
  for name, path in zip(names, config.runs):
    logger.info("evaluating %s (%s)", name, path)
    records += evaluate_run_file(path, name, splits, config.golds, config.ks)
  # The report replaces --out whole (outputs.staged): never the tables of two evaluations.
  with outputs.staged(config.out, "evaluate", outputs.settings_of(config),
                      inputs=[config.reqa, *config.runs], overwrite=config.overwrite) as out:
    written = report.write_report(records, out, config.stem)
  final = config.out.rstrip("/")
  return EvaluateResult(records, {k: f"{final}/{os.path.basename(v)}"
                                  for k, v in written.items()})


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("evaluate"))
