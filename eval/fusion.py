"""`twotower fuse`: one ranking from two runs (a sparse and a dense one), as Pyserini's hybrid
runs do.

    twotower fuse --reqa reqa/squad --run bm25/run.trec dense/run.parquet \
        --method interpolate --weight auto --tune_split validation-5 --out hybrid/run.trec

Methods:
  * ``interpolate``: per query, each run's scores are min-max normalised to [0, 1] (BM25
    scores and inner products live on different scales), then
    ``score = weight * a + (1 - weight) * b``. A candidate that one run did not retrieve gets
    0 from that run (the bottom of its list), as Pyserini's hybrid gives it the run's minimum.
  * ``rrf``: reciprocal-rank fusion (Cormack et al. 2009), ``score = sum 1 / (k + rank)``
    with k = 60; no weight, no tuning.

At weight 1 the fused run is the first run itself (BM25 alone, a candidate of the tuning): its
own order, ties and length kept. The formula would not give it: ties re-sort by candidate id,
and the other run's candidates (0 from the first run) tie with its last one, normalised to 0,
and fill lists shorter than `depth` (on the demo's BM25 and ICT+BFS+WLP runs, 1,124 of 1,149
lists changed at weight 1, and R@100 rose by 0.09 point).

The interpolation weight is a hyper-parameter: `--weight auto` picks it on a validation split
(`validation-<ratio>`, the 10 % of the train side the paper holds out "for hyper-parameter
tuning"), from a grid of weights; a test split is refused for tuning. Objectives
(`tune_metric`):

  * ``worst_gain_over_first``: for each weight, the worst over R@1..100 and MRR of the fused
    run's gain over the first run alone (BM25) on the split; the largest worst gain wins, ties
    to the larger mean gain, then to the weight nearer the first run alone. Weight 1 (the first
    run alone, a gain of 0 everywhere) is always a candidate, so on the split the chosen fusion
    is never below the first run on any metric: it cannot trade one k for another.
  * ``mean_R@k`` (the default, the committed grids'): the mean of Recall@1..100. Recall@100
    alone chose weights that bought R@100 with R@1; the mean still trades (cpu-small's hybrid
    at 80 %, weight 0.65 chosen on validation-80, is 2.3 points of R@1 below BM25 on test-80).
    Ties go to the higher MRR, then to the weight nearest 0.5.
  * one metric (``R@100``, ``MRR``, ...), with the mean's ties.

A split with fewer than `min_tune_questions` questions (50; the 1 % ratio has 18) chooses
nothing reliably: `fuse` refuses it, or, given `untuned_weight` (and `untuned_partner`), uses
that weight and says so: the grid gives there a weight carried from a larger ratio's tuned one,
or 1 (the first run alone; experiment.cells). The fused list keeps the top `depth` candidates.

`choose_partner` does the same for the dense run itself: given several candidate runs, it
keeps the one whose tuned fusion scores best on the validation split (the grid's hybrid row
fuses BM25 with "the best dense row", chosen there and never on the test side).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from typing import Iterable, Mapping, Optional, Sequence

from twotower.core import config_checks as checks
from twotower.core import contracts
from twotower.core import file_outputs
from twotower.core import files as tio
from twotower.core import outputs
from twotower.eval import evaluate as evaluate_lib
from twotower.eval import runs as runs_lib
from twotower.eval.runs import Ranked, Run

logger = logging.getLogger(__name__)

METHODS = ("interpolate", "rrf")
RRF_K = 60
#: Weights tried by `--weight auto` (weight of the first run).
WEIGHT_GRID = tuple(round(0.05 * i, 2) for i in range(21))
#: The weight at which the fused run is the first run alone (BM25 alone in a hybrid).
FIRST_ALONE = 1.0


def _normalised(ranked: Ranked) -> dict[int, float]:
  """Candidate -> min-max normalised score of one query's list (all 1.0 when flat)."""
  if not ranked.candidate_ids:
    return {}
  lo, hi = min(ranked.scores), max(ranked.scores)
  span = hi - lo
  return {c: (s - lo) / span if span > 0 else 1.0
          for c, s in zip(ranked.candidate_ids, ranked.scores)}


def _top(scores: Mapping[int, float], depth: int) -> Ranked:
  """Best first; ties broken by candidate id so that the order is deterministic."""
  order = sorted(scores.items(), key=lambda cs: (-cs[1], cs[0]))[:depth]
  return Ranked(tuple(c for c, _ in order), tuple(s for _, s in order))


def _alone(ranked: Ranked, depth: int) -> Ranked:
  """One run's list as it stands (order, ties and length), cut to `depth`, its scores
  normalised as `interpolate`'s."""
  normalised = _normalised(ranked)
  ids = ranked.candidate_ids[:depth]
  return Ranked(ids, tuple(normalised[c] for c in ids))


def interpolate(a: Run, b: Run, weight: float, depth: int = 100) -> Run:
  """`weight * norm(a) + (1 - weight) * norm(b)` per query, over the union of candidates; at
  weight 1 the run `a` itself, as it ranks."""
  if not 0.0 <= weight <= 1.0:
    raise ValueError(f"interpolation weight {weight} is not in [0, 1]")
  if weight == FIRST_ALONE:
    # Not the formula: it would re-sort the run's ties by candidate id and let the other run's
    # candidates tie with its last one, so "BM25 alone" would not be BM25's ranking.
    return {qid: _alone(a.get(qid, Ranked((), ())), depth) for qid in sorted(set(a) | set(b))}
  fused: Run = {}
  for qid in sorted(set(a) | set(b)):
    na = _normalised(a.get(qid, Ranked((), ())))
    nb = _normalised(b.get(qid, Ranked((), ())))
    fused[qid] = _top({c: weight * na.get(c, 0.0) + (1 - weight) * nb.get(c, 0.0)
                       for c in set(na) | set(nb)}, depth)
  return fused


def rrf(runs: Sequence[Run], k: int = RRF_K, depth: int = 100) -> Run:
  """Reciprocal-rank fusion: `sum over runs of 1 / (k + rank)` (rank from 1)."""
  fused: Run = {}
  for qid in sorted(set().union(*runs)):
    scores: dict[int, float] = {}
    for run_ in runs:
      for rank, c in enumerate(run_.get(qid, Ranked((), ())).candidate_ids, start=1):
        scores[c] = scores.get(c, 0.0) + 1.0 / (k + rank)
    fused[qid] = _top(scores, depth)
  return fused


#: Breaks ties of the tuning metric (see the module docstring).
TIEBREAK_METRIC = "MRR"
#: The default tuning objective: the mean of the reported Recall@k.
MEAN_RECALL = contracts.MEAN_RECALL
#: The objective that cannot trade one metric for another: the worst gain over the first run.
WORST_GAIN = contracts.WORST_GAIN
#: Fewest validation questions a tuned weight is chosen on.
MIN_TUNE_QUESTIONS = 50


def objective(metrics: Mapping[str, float], metric: str) -> float:
  """`metric` of a metrics record; `mean_R@k` is the mean of its R@k values. (The worst gain
  compares two records: `gains`.)"""
  if metric == MEAN_RECALL:
    recalls = [v for k, v in metrics.items() if k.startswith("R@")]
    return sum(recalls) / len(recalls)
  if metric not in metrics:
    raise ValueError(f"unknown tuning metric {metric!r}; expected {MEAN_RECALL}, {WORST_GAIN} "
                     f"or one of {sorted(metrics)}")
  return metrics[metric]


def gains(fused: Mapping[str, float], first: Mapping[str, float]) -> dict[str, float]:
  """Each reported metric's (every R@k, and MRR) gain of the `fused` metrics over `first`'s."""
  return {m: fused[m] - first[m] for m in first
          if m.startswith("R@") or m == TIEBREAK_METRIC}


@dataclasses.dataclass(frozen=True)
class Tuning:
  """The weight chosen on a validation split, and the objective at every weight tried.

  Under `worst_gain_over_first`, `by_weight` holds each weight's worst gain, `tiebreak_by_weight`
  its mean gain, and `gains` each metric's gain at the chosen weight; otherwise they hold the
  metric, MRR, and nothing."""
  split: str
  metric: str
  weight: float
  by_weight: tuple[tuple[float, float], ...]  # (weight, objective)
  tiebreak_by_weight: tuple[tuple[float, float], ...] = ()  # (weight, MRR or mean gain)
  questions: int = 0  # of the split
  gains: Mapping[str, float] = dataclasses.field(default_factory=dict)

  @property
  def score(self) -> tuple[float, float]:
    """(objective, tie-break) at the chosen weight."""
    return (dict(self.by_weight)[self.weight],
            dict(self.tiebreak_by_weight).get(self.weight, 0.0))

  @property
  def preference(self) -> tuple[float, ...]:
    """How two tunings (of two partner runs) compare: the score; under the worst gain, then
    the weight nearer the first run alone."""
    if self.metric == WORST_GAIN:
      return (*self.score, -abs(self.weight - FIRST_ALONE))
    return self.score


def _split_metrics(fused: Run, split: evaluate_lib.ReqaSplit) -> dict[str, float]:
  (record,) = evaluate_lib.evaluate(runs_lib.ids_only(fused), "tune", [split], ("pair",))
  return record["metrics"]


def tune_weight(a: Run, b: Run, split: evaluate_lib.ReqaSplit, metric: str = MEAN_RECALL,
                weights: Sequence[float] = WEIGHT_GRID, depth: int = 100) -> Tuning:
  """The interpolation weight that maximises `metric` on `split` (a validation split; the
  worst gain: see the module docstring; otherwise ties go to the higher MRR, then to the
  weight nearest 0.5, then the smaller). Test splits are refused: a weight chosen on the test
  side would make the hybrid's test numbers optimistic."""
  if contracts.split_side(split.split) != contracts.VALIDATION_SIDE:
    raise ValueError(f"tuning the fusion weight on {split.split!r}: only a validation split "
                     "may choose hyper-parameters")
  # Only the split's questions are fused: the runs hold every split's (11,877 on the SQuAD
  # subset, against 18-997 validation questions), and the grid tunes at 21 weights.
  wanted = {q.question_id for q in split.questions}
  a, b = ({q: r for q, r in run_.items() if q in wanted} for run_ in (a, b))
  if metric == WORST_GAIN:
    return _tune_worst_gain(a, b, split, weights, depth)
  table = []
  for w in weights:
    m = _split_metrics(interpolate(a, b, w, depth), split)
    table.append((float(w), objective(m, metric), m[TIEBREAK_METRIC]))
  best = max(table, key=lambda t: (t[1], t[2], -abs(t[0] - 0.5), -t[0]))
  return Tuning(split.split, metric, best[0], tuple((w, m) for w, m, _ in table),
                tuple((w, t) for w, _, t in table), len(split.questions))


def _tune_worst_gain(a: Run, b: Run, split: evaluate_lib.ReqaSplit, weights: Sequence[float],
                     depth: int) -> Tuning:
  """`tune_weight` by the worst gain over the first run alone, which is always among the
  candidates (its gains are 0): the chosen weight's fusion is never below it on the split."""
  metrics = {w: _split_metrics(interpolate(a, b, w, depth), split)
             for w in sorted({float(w) for w in weights} | {FIRST_ALONE})}
  table = []
  for w, m in metrics.items():
    g = gains(m, metrics[FIRST_ALONE])
    table.append((w, min(g.values()), sum(g.values()) / len(g), g))
  best = max(table, key=lambda t: (t[1], t[2], -abs(t[0] - FIRST_ALONE)))
  return Tuning(split.split, WORST_GAIN, best[0], tuple((w, worst) for w, worst, _, _ in table),
                tuple((w, mean) for w, _, mean, _ in table), len(split.questions), best[3])


def choose_partner(first: Run, candidates: Mapping[str, Run], split: evaluate_lib.ReqaSplit,
                   metric: str = MEAN_RECALL, depth: int = 100) -> tuple[str, Tuning]:
  """The candidate run whose fusion with `first`, at its own tuned weight, scores best on
  `split` (`Tuning.preference`: by `metric`, then its tie-break; equal ones keep the earlier
  candidate, as every candidate does at the first run alone)."""
  if not candidates:
    raise ValueError("choose_partner needs at least one candidate run")
  tuned = {name: tune_weight(first, run_, split, metric, depth=depth)
           for name, run_ in candidates.items()}
  for name, t in tuned.items():
    logger.info("fusion partner %s: %s %.4f, MRR %.4f at weight %.2f on %s", name, metric,
                *t.score, t.weight, split.split)
  best = max(tuned, key=lambda name: tuned[name].preference)  # max keeps the first of equals
  return best, tuned[best]


# How a fused run's weight was come by: the `how` of `weight_source`, which a grid's fuse cell
# records and its table's note states (experiment.cells).
TUNED, CARRIED, FIRST_RUN_ALONE, NOT_TUNED = "tuned", "carried", "first alone", "not tuned"


def weight_source(how: str, *, questions: Optional[int] = None, ratio: Optional[int] = None,
                  weight: Optional[float] = None, first: str = "BM25", why: str = "") -> dict:
  """The record of how a weight was come by, with its sentence (`text`): "tuned on 72
  validation questions", "carried from the 5 % ratio's tuned weight", "BM25 alone", "weight
  0.50, not tuned"; `why` says why a weight was not tuned here."""
  texts = {TUNED: f"tuned on {questions} validation questions",
           CARRIED: f"carried from the {ratio} % ratio's tuned weight",
           FIRST_RUN_ALONE: f"{first} alone",
           NOT_TUNED: f"weight {weight if weight is None else f'{weight:.2f}'}, not tuned"}
  if how not in texts:
    raise ValueError(f"unknown weight source {how!r}; expected one of {sorted(texts)}")
  source = {"how": how, "text": texts[how]}
  source.update({k: v for k, v in (("questions", questions), ("ratio", ratio), ("why", why))
                 if v not in (None, "")})
  return source


def weights_note(rows: Iterable[tuple[int, int, Optional[float], Optional[Mapping]]],
                 first: str = "BM25") -> str:
  """A table note's sentence from (ratio, seed, weight, weight_source) of a hybrid's fuse
  cells: each ratio's weights (seeds in order) and how they were come by."""
  by_ratio: dict[int, list[tuple[Optional[float], str]]] = {}
  for ratio, _, weight, source in sorted(rows, key=lambda r: (r[0], r[1])):
    by_ratio.setdefault(ratio, []).append((weight, (source or {}).get("text", "")))
  parts = []
  for ratio, items in by_ratio.items():
    weights = ", ".join("no weight" if w is None else f"{w:.2f}" for w, _ in items)
    texts = list(dict.fromkeys(t for _, t in items if t))  # each once, in seed order
    parts.append(f"{ratio} %: {weights}" + (f" ({'; '.join(texts)})" if texts else ""))
  return f"The hybrid's weight on {first}, by ratio: " + "; ".join(parts) + "."


@dataclasses.dataclass(frozen=True)
class FuseConfig:
  """Flags of `twotower fuse`."""
  # The run files: the first (e.g. BM25), then its partner (e.g. dense), or several candidate
  # partners of which the tuning split keeps one (`choose_partner`).
  runs: tuple[str, ...]
  out: str                           # fused run file (TREC or .parquet)
  method: str = "interpolate"        # METHODS
  weight: Optional[float] = None     # weight of the first run; None: tune on `tune_split`
  reqa: str = ""                     # ReQA dir, needed to tune
  tune_split: str = ""               # e.g. validation-5
  tune_metric: str = MEAN_RECALL
  min_tune_questions: int = MIN_TUNE_QUESTIONS
  # Used instead of a tuned weight when `tune_split` has fewer than `min_tune_questions`
  # questions; None: such a split is refused. With its partner (one of `runs[1:]`; "": the
  # first): the grid carries both from a larger ratio's tuning (experiment.cells).
  untuned_weight: Optional[float] = None
  untuned_partner: str = ""
  depth: int = 100
  rrf_k: int = RRF_K
  tag: str = "fused"
  # Splits of `reqa` the fused run is scored on (FuseResult.records); none: not scored.
  score_splits: tuple[str, ...] = ()
  golds: tuple[str, ...] = ("pair",)
  overwrite: bool = False            # replace an --out of other settings (file_outputs.owned_files)

  def __post_init__(self):
    checks.positive(self, "depth", "rrf_k")
    if self.method not in METHODS:
      raise ValueError(f"unknown fusion method {self.method!r}; expected one of {METHODS}")
    if len(self.runs) < 2:
      raise ValueError(f"fusion takes two runs, got {len(self.runs)}")
    if len(self.runs) > 2 and (self.method != "interpolate" or self.weight is not None):
      raise ValueError(f"{len(self.runs) - 1} candidate partners: choosing one needs "
                       "`interpolate` with its weight tuned (weight auto)")
    if self.method == "interpolate" and self.weight is None and not (self.reqa and
                                                                      self.tune_split):
      raise ValueError("--weight auto needs --reqa and --tune_split (a validation split)")
    if self.untuned_partner and self.untuned_partner not in self.runs[1:]:
      raise ValueError(f"untuned_partner {self.untuned_partner!r} is not one of the partner "
                       f"runs {list(self.runs[1:])}")


@dataclasses.dataclass(frozen=True)
class FuseResult:
  run_file: str
  method: str
  weight: Optional[float]
  tuning: Optional[Tuning]
  partner: str  # the run file fused with the first one
  records: list[dict] = dataclasses.field(default_factory=list)  # on config.score_splits
  tune_questions: Optional[int] = None  # of config.tune_split, where it was read


def run(config: FuseConfig) -> FuseResult:
  """Reads the runs, fuses the first with its partner (tuning the weight, and choosing the
  partner among several, first when asked), writes the run."""
  tio.log_settings("fuse", dataclasses.asdict(config))
  # --out is this stage's file (file_outputs.owned_files), never one of the runs it reads; judged
  # before any work by what decides the fused run (not the splits it is scored on, nor the
  # tuning fields where the weight is given).
  tune_fields = ("reqa", "tune_split", "tune_metric", "min_tune_questions", "untuned_weight",
                 "untuned_partner")
  unused = tune_fields if config.weight is not None else ()
  settings = outputs.settings_of(config, skip=("score_splits", "golds", *unused))
  inputs = [*config.runs, *([config.reqa] if config.reqa else [])]
  file_outputs.check_file(config.out, "fuse", settings, overwrite=config.overwrite, inputs=inputs)
  first_file, *partner_files = config.runs
  first = runs_lib.read_run(first_file)
  partners = {path: runs_lib.read_run(path) for path in partner_files}
  partner, tuning, weight, tune_questions = partner_files[0], None, config.weight, None
  if config.method == "rrf":
    fused = rrf([first, partners[partner]], config.rrf_k, config.depth)
  else:
    if weight is None:
      (split,) = evaluate_lib.load_splits(config.reqa, [config.tune_split])
      if not split.questions:  # every weight would tie at 0: the "tuned" weight means nothing
        raise ValueError(f"{config.reqa}: {config.tune_split} has no questions to tune the "
                         "weight on; choose another split or give --weight")
      for path, run_ in ((first_file, first), *partners.items()):
        evaluate_lib.check_run(runs_lib.ids_only(run_), split, path)
      tune_questions = len(split.questions)
      if len(split.questions) >= config.min_tune_questions:
        partner, tuning = choose_partner(first, partners, split, config.tune_metric,
                                         config.depth)
        weight = tuning.weight
        logger.info("fusion weight %.2f chosen on %s (%d questions) by %s", weight,
                    tuning.split, len(split.questions), tuning.metric)
      elif config.untuned_weight is not None:
        weight, partner = config.untuned_weight, config.untuned_partner or partner
        logger.warning("%s has %d questions (< %d): weight %.2f, not tuned, partner %s",
                       config.tune_split, len(split.questions), config.min_tune_questions,
                       weight, partner)
      else:
        raise ValueError(f"{config.reqa}: {config.tune_split} has {len(split.questions)} "
                         f"questions, fewer than --min_tune_questions {config.min_tune_questions}"
                         ": a weight chosen on so few means little; give --weight, or tune on a "
                         "larger validation split")
    fused = interpolate(first, partners[partner], weight, config.depth)
  with file_outputs.owned_files(config.out, "fuse", settings, overwrite=config.overwrite,
                           inputs=inputs) as written:
    runs_lib.write_run(config.out, fused, tag=config.tag)
    written.append(config.out)
  records = []
  if config.score_splits:
    records = evaluate_lib.evaluate_checked(
        runs_lib.ids_only(fused), config.tag,
        evaluate_lib.load_splits(config.reqa, config.score_splits), config.golds,
        where=config.out)
  return FuseResult(config.out, config.method, weight, tuning, partner, records,
                    tune_questions)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("fuse"))
