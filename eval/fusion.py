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

The interpolation weight is a hyper-parameter: `--weight auto` picks it on a validation split
(`validation-<ratio>`, the 10 % of the train side the paper holds out "for hyper-parameter
tuning"), from a grid of weights; a test split is refused for tuning. The objective is the mean
of Recall@1..100 (`mean_R@k`): Recall@100 alone chose weights that bought R@100 with R@1 (a
hybrid below BM25 at R@1); the mean weighs early precision as the tables report it. Ties go
to the higher MRR, then to the weight nearest 0.5. A split with fewer than
`min_tune_questions` questions (50; the 1 % ratio has 18) chooses nothing reliably: `fuse`
refuses it, or, given `untuned_weight`, uses that weight and says so. The fused list keeps the
top `depth` candidates.

`choose_partner` does the same for the dense run itself: given several candidate runs, it
keeps the one whose tuned fusion scores best on the validation split (the grid's hybrid row
fuses BM25 with "the best dense row", chosen there and never on the test side).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from typing import Mapping, Optional, Sequence

from twotower import checks
from twotower import contracts
from twotower import io as tio
from twotower import outputs
from twotower.eval import evaluate as evaluate_lib
from twotower.eval import runs as runs_lib
from twotower.eval.runs import Ranked, Run

logger = logging.getLogger(__name__)

METHODS = ("interpolate", "rrf")
RRF_K = 60
#: Weights tried by `--weight auto` (weight of the first run).
WEIGHT_GRID = tuple(round(0.05 * i, 2) for i in range(21))


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


def interpolate(a: Run, b: Run, weight: float, depth: int = 100) -> Run:
  """`weight * norm(a) + (1 - weight) * norm(b)` per query, over the union of candidates."""
  if not 0.0 <= weight <= 1.0:
    raise ValueError(f"interpolation weight {weight} is not in [0, 1]")
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
#: Fewest validation questions a tuned weight is chosen on.
MIN_TUNE_QUESTIONS = 50


def objective(metrics: Mapping[str, float], metric: str) -> float:
  """`metric` of a metrics record; `mean_R@k` is the mean of its R@k values."""
  if metric == MEAN_RECALL:
    recalls = [v for k, v in metrics.items() if k.startswith("R@")]
    return sum(recalls) / len(recalls)
  if metric not in metrics:
    raise ValueError(f"unknown tuning metric {metric!r}; expected {MEAN_RECALL} or one of "
                     f"{sorted(metrics)}")
  return metrics[metric]


@dataclasses.dataclass(frozen=True)
class Tuning:
  """The weight chosen on a validation split, and the metrics at every weight tried."""
  split: str
  metric: str
  weight: float
  by_weight: tuple[tuple[float, float], ...]  # (weight, metric)
  tiebreak_by_weight: tuple[tuple[float, float], ...] = ()  # (weight, MRR)

  @property
  def score(self) -> tuple[float, float]:
    """(metric, MRR) at the chosen weight: how two tunings compare."""
    return (dict(self.by_weight)[self.weight],
            dict(self.tiebreak_by_weight).get(self.weight, 0.0))


def tune_weight(a: Run, b: Run, split: evaluate_lib.ReqaSplit, metric: str = MEAN_RECALL,
                weights: Sequence[float] = WEIGHT_GRID, depth: int = 100) -> Tuning:
  """The interpolation weight that maximises `metric` on `split` (a validation split; ties
  go to the higher MRR, then to the weight nearest 0.5, then the smaller). Test splits are
  refused: a weight chosen on the test side would make the hybrid's test numbers
  optimistic."""
  if contracts.split_side(split.split) != contracts.VALIDATION_SIDE:
    raise ValueError(f"tuning the fusion weight on {split.split!r}: only a validation split "
                     "may choose hyper-parameters")
  # Only the split's questions are fused: the runs hold every split's (11,877 on the SQuAD
  # subset, against 18-997 validation questions), and the grid tunes at 21 weights.
  wanted = {q.question_id for q in split.questions}
  a, b = ({q: r for q, r in run_.items() if q in wanted} for run_ in (a, b))
  table = []
  for w in weights:
    (record,) = evaluate_lib.evaluate(runs_lib.ids_only(interpolate(a, b, w, depth)), "tune",
                                      [split], ("pair",))
    m = record["metrics"]
    table.append((float(w), objective(m, metric), m[TIEBREAK_METRIC]))
  best = max(table, key=lambda t: (t[1], t[2], -abs(t[0] - 0.5), -t[0]))
  return Tuning(split.split, metric, best[0], tuple((w, m) for w, m, _ in table),
                tuple((w, t) for w, _, t in table))


def choose_partner(first: Run, candidates: Mapping[str, Run], split: evaluate_lib.ReqaSplit,
                   metric: str = MEAN_RECALL, depth: int = 100) -> tuple[str, Tuning]:
  """The candidate run whose fusion with `first`, at its own tuned weight, scores best on
  `split` (by `metric`, then MRR; equal scores keep the earlier candidate)."""
  if not candidates:
    raise ValueError("choose_partner needs at least one candidate run")
  tuned = {name: tune_weight(first, run_, split, metric, depth=depth)
           for name, run_ in candidates.items()}
  for name, t in tuned.items():
    logger.info("fusion partner %s: %s %.4f, MRR %.4f at weight %.2f on %s", name, metric,
                *t.score, t.weight, split.split)
  best = max(tuned, key=lambda name: tuned[name].score)  # max keeps the first of equals
  return best, tuned[best]


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
  # questions; None: such a split is refused.
  untuned_weight: Optional[float] = None
  depth: int = 100
  rrf_k: int = RRF_K
  tag: str = "fused"
  # Splits of `reqa` the fused run is scored on (FuseResult.records); none: not scored.
  score_splits: tuple[str, ...] = ()
  golds: tuple[str, ...] = ("pair",)
  overwrite: bool = False            # replace an --out of other settings (outputs.owned_files)

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


@dataclasses.dataclass(frozen=True)
class FuseResult:
  run_file: str
  method: str
  weight: Optional[float]
  tuning: Optional[Tuning]
  partner: str  # the run file fused with the first one
  records: list[dict] = dataclasses.field(default_factory=list)  # on config.score_splits


def run(config: FuseConfig) -> FuseResult:
  """Reads the runs, fuses the first with its partner (tuning the weight, and choosing the
  partner among several, first when asked), writes the run."""
  tio.log_settings("fuse", dataclasses.asdict(config))
  # --out is this stage's file (outputs.owned_files), never one of the runs it reads; judged
  # before any work by what decides the fused run (not the splits it is scored on, nor the
  # tuning fields where the weight is given).
  tune_fields = ("reqa", "tune_split", "tune_metric", "min_tune_questions", "untuned_weight")
  unused = tune_fields if config.weight is not None else ()
  settings = outputs.settings_of(config, skip=("score_splits", "golds", *unused))
  inputs = [*config.runs, *([config.reqa] if config.reqa else [])]
  outputs.check_file(config.out, "fuse", settings, overwrite=config.overwrite, inputs=inputs)
  first_file, *partner_files = config.runs
  first = runs_lib.read_run(first_file)
  partners = {path: runs_lib.read_run(path) for path in partner_files}
  partner, tuning, weight = partner_files[0], None, config.weight
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
      if len(split.questions) >= config.min_tune_questions:
        partner, tuning = choose_partner(first, partners, split, config.tune_metric,
                                         config.depth)
        weight = tuning.weight
        logger.info("fusion weight %.2f chosen on %s (%d questions) by %s", weight,
                    tuning.split, len(split.questions), tuning.metric)
      elif config.untuned_weight is not None:
        weight = config.untuned_weight
        logger.warning("%s has %d questions (< %d): weight %.2f untuned, partner %s (the "
                       "first given)", config.tune_split, len(split.questions),
                       config.min_tune_questions, weight, partner)
      else:
        raise ValueError(f"{config.reqa}: {config.tune_split} has {len(split.questions)} "
                         f"questions, fewer than --min_tune_questions {config.min_tune_questions}"
                         ": a weight chosen on so few means little; give --weight, or tune on a "
                         "larger validation split")
    fused = interpolate(first, partners[partner], weight, config.depth)
  with outputs.owned_files(config.out, "fuse", settings, overwrite=config.overwrite,
                           inputs=inputs) as written:
    runs_lib.write_run(config.out, fused, tag=config.tag)
    written.append(config.out)
  records = []
  if config.score_splits:
    records = evaluate_lib.evaluate_checked(
        runs_lib.ids_only(fused), config.tag,
        evaluate_lib.load_splits(config.reqa, config.score_splits), config.golds,
        where=config.out)
  return FuseResult(config.out, config.method, weight, tuning, partner, records)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("fuse"))
