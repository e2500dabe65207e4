"""`twotower evaluate`: Recall@k / MRR of run files on a ReQA split -> json, md, csv, png.

    twotower evaluate --reqa reqa/squad --run bm25/run.trec dense/run.parquet \
        --names bm25 ict --split test-5 --out results/

Several runs (and splits, and gold conventions) go into one table and one plot. Every record
says which gold convention it used (`gold`: `pair` is the paper's, `sentence` is ReQA's; see
eval.metrics).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from typing import Iterable, Sequence

import pyarrow.parquet as pq

from twotower import contracts
from twotower.eval import metrics as metrics_lib
from twotower.eval import report
from twotower.eval import runs as runs_lib

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ReqaSplit:
  """What evaluation needs of a ReQA directory for one split."""
  split: str
  questions: tuple[metrics_lib.GoldQuestion, ...]
  sentence_of: dict[int, str]  # candidate id -> sentence (the `sentence` convention)
  candidates: int


def read_candidate_sentences(reqa_dir: str) -> dict[int, str]:
  path = f"{reqa_dir.rstrip('/')}/{contracts.CANDIDATES_FILE}"
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path}: no candidates (is {reqa_dir} a `twotower reqa` output?)")
  table = pq.read_table(path, columns=["candidate_id", "sentence"])
  return dict(zip(table.column("candidate_id").to_pylist(), table.column("sentence").to_pylist()))


def read_questions(reqa_dir: str, split: str) -> tuple[metrics_lib.GoldQuestion, ...]:
  path = f"{reqa_dir.rstrip('/')}/{contracts.questions_file(split)}"
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path}: no such split {split!r}")
  rows = pq.read_table(path).to_pylist()
  return tuple(metrics_lib.GoldQuestion(r["question_id"], r["question"],
                                        tuple(r["gold_candidate_ids"])) for r in rows)


def load_splits(reqa_dir: str, splits: Sequence[str]) -> list[ReqaSplit]:
  sentence_of = read_candidate_sentences(reqa_dir)
  return [ReqaSplit(s, read_questions(reqa_dir, s), sentence_of, len(sentence_of))
          for s in splits]


def evaluate(run: dict[str, Sequence[int]], system: str, splits: Sequence[ReqaSplit],
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


def _csv(value: str) -> list[str]:
  return [v.strip() for v in value.split(",") if v.strip()]


def parse_args(argv: Iterable[str] | None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="twotower evaluate", description=__doc__.split("\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument("--reqa", required=True, help="a `twotower reqa` output directory")
  p.add_argument("--run", required=True, nargs="+", help="run files (TREC or .parquet)")
  p.add_argument("--out", required=True, help="output directory")
  p.add_argument("--names", nargs="+", help="system names, one per run (default: file names)")
  p.add_argument("--split", default="all", help="split(s), comma-separated, e.g. all,test-5")
  p.add_argument("--gold", default="pair", help="gold convention(s), comma-separated: "
                 "pair (the paper's (sentence, passage)), sentence (ReQA's sentence text)")
  p.add_argument("--ks", default=",".join(map(str, contracts.DEFAULT_KS)),
                 help="recall cut-offs, comma-separated")
  p.add_argument("--stem", default="metrics", help="output file stem")
  args = p.parse_args(None if argv is None else list(argv))
  if args.names and len(args.names) != len(args.run):
    p.error(f"--names has {len(args.names)} names for {len(args.run)} runs")
  bad = [g for g in _csv(args.gold) if g not in metrics_lib.GOLD_CONVENTIONS]
  if bad:
    p.error(f"unknown --gold {bad}; choose from {metrics_lib.GOLD_CONVENTIONS}")
  return args


def system_name(path: str) -> str:
  stem = os.path.splitext(os.path.basename(path))[0]
  parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
  return parent if stem == "run" and parent else stem


def run(argv: list[str] | None = None) -> None:
  args = parse_args(argv)
  names = args.names or [system_name(r) for r in args.run]
  splits = load_splits(args.reqa, _csv(args.split))
  ks = [int(k) for k in _csv(args.ks)]
  records: list[dict] = []
  for name, path in zip(names, args.run):
    logger.info("evaluating %s (%s)", name, path)
    records += evaluate(runs_lib.ids_only(runs_lib.read_run(path)), name, splits,
                        _csv(args.gold), ks)
  paths = report.write_report(records, args.out, args.stem)
  print(report.markdown_table(records) + "\nwritten: " + ", ".join(paths.values()))


if __name__ == "__main__":
  run()
