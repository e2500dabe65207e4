"""The evaluation contract of ranked retrieval with graded judgments, as the field scores it.

    run   = {"q1": [("doc-7", 12.3), ("doc-2", 11.0), ...]}   # query id -> (doc id, score)
    qrels = {"q1": {"doc-2": 2, "doc-9": 0}}                  # query id -> {doc id: grade}
    result = ir_metrics.evaluate(qrels, run)                  # BEIR_METRICS by default
    result.means()                 # {"nDCG@10": 0.61, "R@100": ..., "MRR@10": ..., "MAP": ...}
    result.per_query("nDCG@10")    # {query id: value}, every judged query
    bootstrap.paired_values(a.bootstrap_values("nDCG@10"), b.bootstrap_values("nDCG@10"))

Ids are the dataset's own strings (eval.beir keeps them end to end).

The measures are trec_eval's, computed by pytrec_eval (the `pytrec-eval-terrier` wheel,
pinned): trec_eval's own C code behind a Python API, which is what BEIR's `EvaluateRetrieval`
calls, and what Pyserini's published BEIR figures (`pyserini/2cr/beir.yaml`, scored with the
trec_eval binary) are computed by. So a number here is comparable to both by construction,
not by re-implementation; ir-measures and ranx would add a layer (ir-measures itself calls
pytrec_eval for these) or a second implementation whose edge cases (ties, empty runs) are its
own. The names (METRICS):

    nDCG@k     trec_eval ndcg_cut.k: the grade is the gain (linear, as trec_eval and BEIR)
    R@k        trec_eval recall.k: the share of the relevant documents in the top k
    MRR@k      trec_eval recip_rank on the run cut to its top k (`cut`), which is what
               `trec_eval -M k -m recip_rank` computes and MS MARCO's MRR@10 is; trec_eval
               has no measure of that name. (BEIR's own `mrr` is a Python loop: the same
               value except where scores tie, which it orders as its dict happens to.)
    MRR        recip_rank over the whole run
    MAP        trec_eval map over the whole run (its depth: 1,000 hits on BEIR)
    Success@k  trec_eval success.k: 1 if a relevant document is in the top k. ReQA's
               Recall@k (twotower.core.metrics: a first-hit rank within k) is this measure, so
               ReQA's numbers are expressible here with `by_rank` runs
    P@k        trec_eval P.k
A document is relevant to the binary measures when its grade is >= 1 (trec_eval's default
relevance level); a grade of 0 is "judged not relevant".

Order. trec_eval, and so pytrec_eval, ignores a run's ranks: it sorts each query's documents
by score, descending, and breaks ties by doc id *descending* (strcmp on the ids;
`comp_sim_docno` in trec_eval's form_res_rels.c). That is the order every measure here sees,
`trec_order` spells it and `cut` cuts in it, so MRR@k keeps the k documents trec_eval's -M k
keeps. Where a list's own order must be the one scored (ReQA's first-hit ranks, a list with
ties in an order of its own), `by_rank` gives its documents strictly decreasing scores.
TREC run files are written (`write_trec`) in that order with scores to 6 decimals, as
Pyserini writes them; a stage scores `as_written(run)`, so that trec_eval on its run file
gives the numbers it reports (rounding can make ties of its own).

Averages. A mean is over every query of the qrels (trec_eval's `-c`, as Pyserini's BEIR
regressions run it): a judged query the run lacks, or whose list is empty, scores 0 on every
measure, and so does a judged query with no relevant document (trec_eval counts it too).
BEIR's `EvaluateRetrieval` instead averages over the judged queries with hits in the run; the
two agree whenever every judged query has some (BM25 finds none for a query of stopwords).

Per-query values are kept (`Evaluation.values`, one array per metric in `query_ids` order):
the paired bootstrap (twotower.experiment.bootstrap.paired_values) takes them in its unit,
percent (`bootstrap_values`), as it takes ReQA's first-hit ranks.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from twotower.core import files as tio
from twotower.eval import runs as runs_lib

#: A query's ranked list: (doc id, score), best first.
Hits = Sequence[tuple[str, float]]
#: query id -> its hits.
IrRun = Mapping[str, Hits]
#: query id -> {doc id: grade}.
Qrels = Mapping[str, Mapping[str, int]]

#: What BEIR papers report, and Pyserini's BEIR regressions (nDCG@10, R@100, R@1000).
BEIR_METRICS = ("nDCG@10", "R@100", "R@1000", "MRR@10", "MAP")
#: Decimals of a score in a TREC run file (Pyserini's TrecWriter).
SCORE_DECIMALS = 6

_PATTERNS = {
    "nDCG": "ndcg_cut", "R": "recall", "Success": "success", "P": "P", "MRR": "recip_rank",
}


@dataclasses.dataclass(frozen=True)
class Measure:
  """How one metric name is computed: trec_eval `measure` (with `param`, e.g. ndcg_cut.10)
  on the run cut to `depth` (None: the whole run)."""
  name: str
  measure: str
  param: Optional[int] = None
  depth: Optional[int] = None

  @property
  def key(self) -> str:
    """pytrec_eval's key of the value (ndcg_cut_10)."""
    return self.measure if self.param is None else f"{self.measure}_{self.param}"


def measure(name: str) -> Measure:
  """The Measure of a metric name (module docstring).

  Raises:
    ValueError: a name this contract does not define.
  """
  if name == "MAP":
    return Measure(name, "map")
  if name == "MRR":
    return Measure(name, "recip_rank")
  m = re.fullmatch(r"(nDCG|R|Success|P|MRR)@([1-9]\d*)", name)
  if not m:
    raise ValueError(f"unknown metric {name!r}; expected nDCG@k, R@k, MRR@k, MRR, MAP, "
                     "Success@k or P@k")
  base, k = m.group(1), int(m.group(2))
  if base == "MRR":
    return Measure(name, "recip_rank", depth=k)
  return Measure(name, _PATTERNS[base], param=k)


# ------------------------------------------------------------------------------------------
# Order.
# ------------------------------------------------------------------------------------------


def trec_order(hits: Hits) -> list[tuple[str, float]]:
  """`hits` as trec_eval ranks them: score descending, ties by doc id descending."""
  return sorted(hits, key=lambda h: (h[1], h[0]), reverse=True)


def cut(run: IrRun, depth: int) -> dict[str, list[tuple[str, float]]]:
  """Each query's top `depth` in trec_order (what `trec_eval -M depth` keeps)."""
  return {q: trec_order(hits)[:depth] for q, hits in run.items()}


def by_rank(doc_ids: Sequence[str]) -> list[tuple[str, float]]:
  """A ranked list whose own order is the one scored: scores n, n-1, ..., 1."""
  n = len(doc_ids)
  return [(d, float(n - i)) for i, d in enumerate(doc_ids)]


def as_written(run: IrRun) -> dict[str, list[tuple[str, float]]]:
  """The run as its TREC file holds it: scores rounded to SCORE_DECIMALS."""
  return {q: [(d, float(f"{s:.{SCORE_DECIMALS}f}")) for d, s in hits]
          for q, hits in run.items()}


# ------------------------------------------------------------------------------------------
# Evaluation.
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Evaluation:
  """Per-query values of a run: `values[metric][i]` is query `query_ids[i]`'s (every query
  of the qrels, sorted)."""
  metrics: tuple[str, ...]
  query_ids: tuple[str, ...]
  values: Mapping[str, np.ndarray]

  def means(self) -> dict[str, float]:
    """Each metric's mean over the judged queries (0.0 without any)."""
    return {m: float(self.values[m].mean()) if len(self.query_ids) else 0.0
            for m in self.metrics}

  def per_query(self, metric: str) -> dict[str, float]:
    return dict(zip(self.query_ids, map(float, self.values[metric])))

  def bootstrap_values(self, metric: str,
                       query_ids: Optional[Sequence[str]] = None) -> np.ndarray:
    """[queries] in percent (x 100), in the order of `query_ids` (default: this one's): what
    bootstrap.paired_values takes, two systems' arrays in one query order."""
    if query_ids is None:
      return 100.0 * self.values[metric]
    at = {q: i for i, q in enumerate(self.query_ids)}
    missing = [q for q in query_ids if q not in at]
    if missing:
      raise ValueError(f"query {missing[0]!r} is not among the {len(at)} evaluated ones")
    return 100.0 * self.values[metric][[at[q] for q in query_ids]]


def _pytrec_run(run: IrRun, queries: Iterable[str]) -> dict[str, dict[str, float]]:
  """pytrec_eval's {query: {doc: score}} of the judged queries with hits (a doc listed twice
  keeps its best score)."""
  wanted = set(queries)
  out: dict[str, dict[str, float]] = {}
  for q, hits in run.items():
    if q not in wanted or not hits:
      continue
    docs: dict[str, float] = {}
    for d, s in hits:
      docs[d] = max(float(s), docs.get(d, float("-inf")))
    out[q] = docs
  return out


def evaluate(qrels: Qrels, run: IrRun, metrics: Sequence[str] = BEIR_METRICS) -> Evaluation:
  """Per-query values of `run` on every query of `qrels` (module docstring: the measures,
  the order, the averages).

  Raises:
    ValueError: an unknown metric name.
  """
  import pytrec_eval  # pylint: disable=import-outside-toplevel
  wanted = [measure(m) for m in metrics]
  query_ids = tuple(sorted(qrels))
  judged = {q: {d: int(g) for d, g in qrels[q].items()} for q in query_ids}
  values = {m.name: np.zeros(len(query_ids), dtype=np.float64) for m in wanted}
  at = {q: i for i, q in enumerate(query_ids)}
  for depth in sorted({m.depth for m in wanted}, key=lambda d: (d is not None, d or 0)):
    group = [m for m in wanted if m.depth == depth]
    scored = _pytrec_run(run if depth is None else cut(run, depth), query_ids)
    if not scored:
      continue
    params: dict[str, set] = {}
    for m in group:
      params.setdefault(m.measure, set()).add(m.param)
    requested = {name if None in ps else f"{name}.{','.join(map(str, sorted(ps)))}"
                 for name, ps in params.items()}
    result = pytrec_eval.RelevanceEvaluator(judged, requested).evaluate(scored)
    for q, by_key in result.items():
      for m in group:
        values[m.name][at[q]] = by_key[m.key]
  return Evaluation(tuple(m.name for m in wanted), query_ids, values)


# ------------------------------------------------------------------------------------------
# TREC run files with the dataset's ids.
# ------------------------------------------------------------------------------------------


def trec_lines(run: IrRun, tag: str) -> Iterable[str]:
  """`qid Q0 docid rank score tag` lines, queries sorted, each list in trec_order."""
  for q in sorted(run):
    for rank, (d, s) in enumerate(trec_order(run[q]), start=1):
      yield f"{q} Q0 {d} {rank} {s:.{SCORE_DECIMALS}f} {tag}\n"


def write_trec(path: str, run: IrRun, tag: str) -> None:
  """A TREC run file (atomically) naming the run's own ids."""
  tio.write_text(path, "".join(trec_lines(run, tag)))


def read_trec(path: str) -> dict[str, list[tuple[str, float]]]:
  """A TREC run file as a run (ids as strings, each list in trec_order: its ranks are not
  what is scored).

  Raises:
    ValueError: a line that is not `qid Q0 docid rank score tag`, or a non-numeric rank or
      score (file and line named: eval.runs.trec_rows).
  """
  run: dict[str, list[tuple[str, float]]] = {}
  for q, d, _, score in runs_lib.trec_rows(path, int_ids=False):
    run.setdefault(q, []).append((d, score))
  return {q: trec_order(hits) for q, hits in run.items()}


def write_trec_qrels(path: str, qrels: Qrels) -> None:
  """Qrels as trec_eval reads them (`qid 0 docid grade`), for checking a run with it."""
  tio.write_text(path, "".join(f"{q} 0 {d} {g}\n" for q in sorted(qrels)
                               for d, g in sorted(qrels[q].items())))
