"""`twotower beir`: every system on a BEIR dataset -> a metrics table, per-query values and
TREC runs naming the dataset's own ids.

    twotower beir --data beir/scifact --split test --out beir/scifact-bm25
    twotower beir --data beir/scifact --split test --model runs/ict \
        --systems bm25-flat,bm25-multifield,dense,hybrid --out beir/scifact-ict
    twotower beir --data beir/scifact-train --split train --heldout ft/scifact \
        --model runs/ict --finetuned_model runs/ict-scifact \
        --systems bm25-flat,dense,hybrid,dense-finetuned,hybrid-finetuned --out o/

`run(BeirConfig)` is the typed entry point (twotower.commands.beir parses the flags).

Steps: the folder is read (eval.beir: string ids kept, internal ids assigned in one place,
bad input counted or refused before anything is written); the split's judged queries are
searched by each system:

  * ``bm25-flat``, ``bm25-multifield``: Pyserini BM25 as its BEIR regressions define it
    (eval.beir_bm25; k1 0.9, b 0.4, 1,000 hits);
  * ``dense``: a twotower SavedModel zero-shot (eval.beir_dense: the embedding job, a flat
    FAISS index, exact inner-product search);
  * ``hybrid``: eval.fusion's interpolation of bm25-flat with dense (min-max normalised
    scores, `weight * bm25 + (1 - weight) * dense`). The weight is `--hybrid_weight` when
    given; otherwise it is tuned on another split of the dataset (`--tune_split`; by default
    `dev`, else `train`, never the scored one; with `--heldout`, the conversion's validation
    part) over eval.fusion.WEIGHT_GRID, whose weight 1 is BM25 alone: the tuned hybrid is
    never below BM25 on the tuning split's `tune_metric` (nDCG@10; ties go to the weight
    nearer BM25 alone). A dataset without such a split (or with fewer than
    `min_tune_queries` judged queries on it) gets UNTUNED_WEIGHT, 0.5: the two normalised
    scores weighed equally, said so in `hybrid.json` and the log.
  * ``dense-finetuned``, ``hybrid-finetuned``: the same with `--finetuned_model`, a
    `twotower finetune` run on a `twotower beir-to-reqa` conversion of this dataset
    (eval.beir_finetune), beside the zero-shot `--model`.

Fine-tuned models are never scored on what they learnt from: a model whose run was
fine-tuned on a conversion of this corpus (`--model` or `--finetuned_model`) is refused
when a scored query is in that conversion's train or validation part. A dataset with no
judged split but the one fine-tuned on is scored on the part of it the conversion held out
(`--heldout FT`: `beir-to-reqa --scored_percent`), split `<split>-heldout`.

With `remove_query` (on, as Pyserini's BEIR runs), a hit whose doc id is the query's own id
is dropped from every system's list (ArguAna and Quora hold their queries as documents).
Each run is scored as its TREC file holds it (eval.ir_metrics: trec_eval's measures through
pytrec_eval, its order, means over every judged query).

OUT holds (a staged output, twotower.core.outputs: written beside OUT and moved into place, so a
failed run leaves OUT as it was):

    metrics.json (+ .md, .csv, .png)  one record per system (contracts.metrics_record, with
                                      `dataset`; `questions` is the judged queries,
                                      `candidates` the documents): BEIR_METRICS as fractions
    per_query.parquet                 system, query_id, one column per metric
    runs/<system>.trec                the top `hits` of each judged query of the split, with
                                      the dataset's ids (rank = trec_eval's order)
    doc_ids.parquet                   internal id -> the dataset's doc id (eval.beir)
    data.json                         what was read: counts, and every problem found with
                                      its first lines named file:line
    hybrid.json                       {hybrid system: its weight, how it was come by, the
                                      tuning}
    intervals.json (+ .md)            each system against the reference (bm25-flat when
                                      scored, else the first system) on each of
                                      `interval_metrics`: the mean difference in points and
                                      its paired bootstrap 95 % interval over the scored
                                      queries (twotower.core.paired_bootstrap)
    <system>/index/, dense/           the Lucene indexes (--keep_index), the embeddings and
                                      FAISS index (--keep_embeddings); dropped by default

`R@k` here is trec_eval's recall (the share of the relevant documents in the top k, as
Pyserini's and BEIR's tables use it), not ReQA's first-hit Recall@k (`Success@k` in
eval.ir_metrics, which is what `twotower evaluate` calls R@k).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from typing import Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from twotower.core import config_checks as checks
from twotower.core import contracts
from twotower.core import files as tio
from twotower.core import logs
from twotower.core import lucene
from twotower.core import outputs
from twotower.core import paired_bootstrap
from twotower.core import pyserini_env
from twotower.core.contracts import Ranked, Run
from twotower.eval import beir
from twotower.eval import beir_bm25
from twotower.eval import beir_dense
from twotower.eval import beir_finetune
from twotower.eval import fusion
from twotower.eval import ir_metrics
from twotower.eval import report

logger = logging.getLogger(__name__)

DENSE, HYBRID = "dense", "hybrid"
DENSE_FINETUNED, HYBRID_FINETUNED = "dense-finetuned", "hybrid-finetuned"
SYSTEMS = (*beir_bm25.SYSTEMS, DENSE, HYBRID, DENSE_FINETUNED, HYBRID_FINETUNED)
#: Each hybrid and the dense system it fuses.
HYBRIDS = {HYBRID: DENSE, HYBRID_FINETUNED: DENSE_FINETUNED}
#: The BM25 run the hybrids fuse with a dense one (Pyserini's headline BM25 on BEIR).
HYBRID_FIRST = beir_bm25.FLAT.name
#: What the intervals compare every system with, when it is scored (else the first system).
REFERENCE = beir_bm25.FLAT.name
#: Metrics the intervals are of by default (BEIR's headline pair).
INTERVAL_METRICS = ("nDCG@10", "R@100")
#: The scored split's name with --heldout: `<split>` + this.
HELDOUT_SUFFIX = "-heldout"
#: The hybrid's weight on BM25 where none is tuned (module docstring).
UNTUNED_WEIGHT = 0.5
#: Splits a hybrid's weight is tuned on, the first the dataset has that is not scored.
TUNE_SPLITS = ("dev", "train")
#: `tune_split` value that never tunes.
NO_TUNING = "none"
DATA_FILE, HYBRID_FILE, PER_QUERY_FILE, RUNS_DIR = ("data.json", "hybrid.json",
                                                    "per_query.parquet", "runs")
INTERVALS_STEM = "intervals"


@dataclasses.dataclass(frozen=True)
class BeirConfig:
  """Flags of `twotower beir`."""
  data: str = dataclasses.field(metadata={"help": "a BEIR folder (corpus.jsonl, "
                                                  "queries.jsonl, qrels/<split>.tsv)"})
  out: str = dataclasses.field(metadata={"help": "output folder (metrics.*, per_query.parquet, "
                                                 "runs/, doc_ids.parquet, data.json)"})
  split: str = dataclasses.field(default="test", metadata={
      "help": "the qrels split scored (qrels/<split>.tsv)"})
  systems: tuple[str, ...] = dataclasses.field(default=tuple(beir_bm25.SYSTEMS), metadata={
      "help": f"comma list of {', '.join(SYSTEMS)}"})
  model: str = dataclasses.field(default="", metadata={
      "help": "a training run directory (its export/saved_model) or a SavedModel: for dense "
              "and hybrid"})
  finetuned_model: str = dataclasses.field(default="", metadata={
      "help": "a `twotower finetune` run on a `twotower beir-to-reqa` conversion of --data: "
              "for dense-finetuned and hybrid-finetuned"})
  heldout: str = dataclasses.field(default="", metadata={
      "help": "a `twotower beir-to-reqa` output of --data's --split: score only the queries "
              "it held out of fine-tuning (and tune the hybrids on its validation part)"})
  metrics: tuple[str, ...] = dataclasses.field(default=ir_metrics.BEIR_METRICS, metadata={
      "help": "comma list of metrics (eval.ir_metrics: nDCG@k, R@k, MRR@k, MRR, MAP, "
              "Success@k, P@k)"})
  hits: int = dataclasses.field(default=beir_bm25.BEIR_HITS, metadata={
      "help": "documents retrieved per query (Pyserini's BEIR runs: 1000)"})
  k1: float = dataclasses.field(default=lucene.DEFAULT_K1, metadata={"help": "BM25 k1"})
  b: float = dataclasses.field(default=lucene.DEFAULT_B, metadata={"help": "BM25 b"})
  remove_query: bool = dataclasses.field(default=True, metadata={
      "help": "drop a hit whose doc id is the query's id (Pyserini's --remove-query)"})
  hybrid_weight: Optional[float] = dataclasses.field(default=None, metadata={
      "help": "the hybrid's weight on BM25 in [0, 1]; unset: tuned on --tune_split, else "
              f"{UNTUNED_WEIGHT}"})
  tune_split: str = dataclasses.field(default="", metadata={
      "help": f"split the hybrid's weight is tuned on; unset: the first of "
              f"{', '.join(TUNE_SPLITS)} the folder has that is not --split; "
              f"{NO_TUNING}: never"})
  tune_metric: str = dataclasses.field(default="nDCG@10", metadata={
      "help": "what the tuning maximises (one of --metrics)"})
  interval_metrics: tuple[str, ...] = dataclasses.field(default=INTERVAL_METRICS, metadata={
      "help": "comma list of --metrics the paired bootstrap intervals are of"})
  min_tune_queries: int = dataclasses.field(default=fusion.MIN_TUNE_QUESTIONS, metadata={
      "help": "fewest judged queries a weight is tuned on"})
  threads: int = dataclasses.field(default=max(1, os.cpu_count() or 1), metadata={
      "help": "Lucene indexing and search threads"})
  batch_size: int = dataclasses.field(default=1000, metadata={
      "help": "queries per Lucene batch_search call"})
  embed_batch_size: int = dataclasses.field(default=256, metadata={
      "help": "texts per SavedModel call in the embedding job"})
  keep_index: bool = dataclasses.field(default=False, metadata={
      "help": "keep the Lucene indexes in OUT/<system>/index"})
  keep_embeddings: bool = dataclasses.field(default=False, metadata={
      "help": "keep the embeddings and the FAISS index in OUT/dense"})
  jvm_heap: str = dataclasses.field(default="", metadata={
      "help": "the most heap Pyserini's JVM may take (-Xmx: 512m, 2g); unset: "
              f"${pyserini_env.JVM_HEAP_ENV} if set, else Java's default (a quarter of the "
              "machine's memory)"})
  overwrite: bool = False
  beam_args: tuple[str, ...] = ()

  def __post_init__(self):
    checks.positive(self, "hits", "threads", "batch_size", "embed_batch_size",
                    "min_tune_queries")
    if self.jvm_heap:
      pyserini_env.check_heap_size(self.jvm_heap)
    unknown = [s for s in self.systems if s not in SYSTEMS]
    if unknown or not self.systems:
      raise ValueError(f"--systems {','.join(self.systems)}: expected some of "
                       f"{', '.join(SYSTEMS)}")
    for name in self.metrics:
      ir_metrics.measure(name)
    if (DENSE in self.systems or HYBRID in self.systems) and not self.model:
      raise ValueError("dense and hybrid need --model (a training run or a SavedModel)")
    if {DENSE_FINETUNED, HYBRID_FINETUNED} & set(self.systems) and not self.finetuned_model:
      raise ValueError(f"{DENSE_FINETUNED} and {HYBRID_FINETUNED} need --finetuned_model (a "
                       "`twotower finetune` run on a `twotower beir-to-reqa` output)")
    for hybrid, dense in HYBRIDS.items():
      if hybrid in self.systems and not {HYBRID_FIRST, dense} <= set(self.systems):
        raise ValueError(f"{hybrid} fuses {HYBRID_FIRST} with {dense}: list both in "
                         "--systems")
    unknown = [m for m in self.interval_metrics if m not in self.metrics]
    if unknown:
      raise ValueError(f"--interval_metrics {','.join(unknown)}: not among --metrics")
    if self.hybrid_weight is not None and not 0.0 <= self.hybrid_weight <= 1.0:
      raise ValueError(f"--hybrid_weight {self.hybrid_weight} is not in [0, 1]")
    if self.tune_metric not in self.metrics:
      raise ValueError(f"--tune_metric {self.tune_metric} is not one of --metrics")
    if self.tune_split and self.tune_split == self.split:
      raise ValueError(f"--tune_split {self.tune_split} is the scored split: a weight chosen "
                       "on the queries it is scored on makes the hybrid look better than it is")


@dataclasses.dataclass(frozen=True)
class BeirResult:
  out: str
  records: list[dict]                              # metrics records, one per system
  evaluations: Mapping[str, ir_metrics.Evaluation]  # per-query values, per system
  data: Mapping                                    # data.json
  hybrid: Mapping[str, Mapping]                   # hybrid.json: {hybrid system: weight ...}
  intervals: list[dict]                            # intervals.json
  files: tuple[str, ...]


def tune_split_of(config: BeirConfig, available: list[str]) -> str:
  """The split the hybrids' weights are tuned on, "" for none (module docstring); with
  --heldout and no --tune_split, "" too: the conversion's validation part is (`run`)."""
  if config.hybrid_weight is not None or not set(HYBRIDS) & set(config.systems):
    return ""
  if config.heldout and not config.tune_split:
    return ""
  if config.tune_split:
    return "" if config.tune_split == NO_TUNING else config.tune_split
  return next((s for s in TUNE_SPLITS if s in available and s != config.split), "")


def without_query(run: Run, corpus: beir.Corpus) -> Run:
  """Each query's list without the document whose dataset id is the query's own id."""
  own = dict(zip(run, corpus.internal_ids(list(run)))) if run else {}
  kept: Run = {}
  for q, ranked in run.items():
    pairs = [(c, s) for c, s in zip(ranked.candidate_ids, ranked.scores) if c != own[q]]
    kept[q] = Ranked(tuple(c for c, _ in pairs), tuple(s for _, s in pairs))
  return kept


def _only(run: Run, queries: Mapping[str, object]) -> Run:
  return {q: r for q, r in run.items() if q in queries}


def choose_weight(bm25: Run, dense: Run, tune: Optional[beir.Split], corpus: beir.Corpus,
                  config: BeirConfig) -> dict:
  """The hybrid's weight and how it was come by (hybrid.json)."""
  if config.hybrid_weight is not None:
    return {"weight": config.hybrid_weight, "how": fusion.NOT_TUNED,
            "text": "given (--hybrid_weight)"}
  why = ""
  if tune is None:
    if config.tune_split == NO_TUNING:
      why = "--tune_split none"
    elif config.heldout:
      why = f"--heldout {config.heldout} has no validation part"
    else:
      why = (f"the folder has no split to tune on ({' or '.join(TUNE_SPLITS)}, other than "
             f"{config.split})")
  elif len(tune.qrels) < config.min_tune_queries:
    why = (f"{tune.name} has {len(tune.qrels)} judged queries, fewer than "
           f"--min_tune_queries {config.min_tune_queries}")
  if why:
    logger.warning("hybrid: weight %.2f on BM25, not tuned: %s", UNTUNED_WEIGHT, why)
    return {"weight": UNTUNED_WEIGHT, "how": fusion.NOT_TUNED, "why": why,
            "text": f"not tuned: {why}"}
  assert tune is not None
  a, b = _only(bm25, tune.qrels), _only(dense, tune.qrels)
  table = []
  for w in tqdm(fusion.WEIGHT_GRID, desc="hybrid weight", unit="weight", disable=None):
    fused = corpus.named(fusion.interpolate(a, b, w, config.hits))
    value = ir_metrics.evaluate(tune.qrels, ir_metrics.as_written(fused),
                                (config.tune_metric,)).means()[config.tune_metric]
    table.append((float(w), value))
  # The largest value; of equals, the weight nearer BM25 alone (weight 1).
  weight, value = max(table, key=lambda t: (t[1], -abs(t[0] - fusion.FIRST_ALONE)))
  logger.info("hybrid: weight %.2f on BM25 chosen on %s (%d queries): %s %.4f", weight,
              tune.name, len(tune.qrels), config.tune_metric, value)
  return {"weight": weight, "how": fusion.TUNED, "split": tune.name,
          "queries": len(tune.qrels), "metric": config.tune_metric,
          "text": f"tuned on {len(tune.qrels)} {tune.name} queries by {config.tune_metric}",
          "by_weight": [[w, v] for w, v in table]}


def _per_query_table(evaluations: Mapping[str, ir_metrics.Evaluation],
                     metrics: tuple[str, ...]) -> pa.Table:
  columns: dict[str, list] = {"system": [], "query_id": [], **{m: [] for m in metrics}}
  for system, ev in evaluations.items():
    columns["system"] += [system] * len(ev.query_ids)
    columns["query_id"] += list(ev.query_ids)
    for m in metrics:
      columns[m] += ev.values[m].tolist()
  schema = pa.schema([("system", pa.string()), ("query_id", pa.string()),
                      *((m, pa.float64()) for m in metrics)])
  return pa.Table.from_pydict(columns, schema=schema)


def read_per_query(path: str) -> dict[str, ir_metrics.Evaluation]:
  """per_query.parquet back as {system: Evaluation} (for the bootstrap, a later table)."""
  table = tio.open_parquet(path).read()
  metrics = tuple(c for c in table.column_names if c not in ("system", "query_id"))
  rows: dict[str, list[int]] = {}
  for i, system in enumerate(table.column("system").to_pylist()):
    rows.setdefault(system, []).append(i)
  query_ids = table.column("query_id").to_pylist()
  values = {m: table.column(m).to_numpy() for m in metrics}
  return {system: ir_metrics.Evaluation(metrics, tuple(query_ids[i] for i in at),
                                        {m: np.asarray(values[m][at]) for m in metrics})
          for system, at in rows.items()}


def scored_and_tune(config: BeirConfig, data: beir.BeirData
                    ) -> tuple[beir.Split, Optional[beir.Split]]:
  """The queries scored (the split, or with --heldout the part its conversion held out) and
  those the hybrids are tuned on (None: no tuning).

  Raises:
    ValueError: a --heldout folder that is not a conversion of this corpus and split, or
      that holds out nothing.
  """
  split = data.split(config.split)
  if not config.heldout:
    tune_name = tune_split_of(config, beir.splits(config.data))
    return split, (data.split(tune_name) if tune_name else None)
  parts = beir_finetune.read_parts(config.heldout, data.corpus)
  if parts.split != config.split:
    raise ValueError(f"--heldout {config.heldout} holds out queries of split {parts.split!r}, "
                     f"not of --split {config.split}")
  if not parts.test:
    raise ValueError(f"--heldout {config.heldout} holds out no query (it was made with "
                     "--scored_percent 0)")
  scored = split.only(parts.test, f"{config.split}{HELDOUT_SUFFIX}")
  tune = None
  if config.tune_split and config.tune_split != NO_TUNING:
    tune = data.split(config.tune_split)
  elif (not config.tune_split and config.hybrid_weight is None
        and set(HYBRIDS) & set(config.systems) and parts.validation):
    tune = split.only(parts.validation, f"{config.split}-{beir_finetune.VALIDATION}")
  return scored, tune


def check_models(config: BeirConfig, corpus: beir.Corpus, scored: beir.Split) -> None:
  """Refuses a model fine-tuned on a scored query (eval.beir_finetune), and a
  --finetuned_model that is not fine-tuned on a conversion of this corpus."""
  if config.model and {DENSE, HYBRID} & set(config.systems):
    beir_finetune.check_not_trained_on(config.model, corpus, list(scored.qrels), "--model")
  if config.finetuned_model and {DENSE_FINETUNED, HYBRID_FINETUNED} & set(config.systems):
    parts = beir_finetune.check_not_trained_on(config.finetuned_model, corpus,
                                               list(scored.qrels), "--finetuned_model")
    if parts is None:
      raise ValueError(
          f"--finetuned_model {config.finetuned_model}: not a `twotower finetune` run on a "
          f"`twotower beir-to-reqa` conversion of {config.data} (its config.yaml names none): "
          "score a model fine-tuned elsewhere as dense, with --model")


def paired_intervals(evaluations: Mapping[str, ir_metrics.Evaluation],
                     metrics: Sequence[str]) -> list[dict]:
  """Each system against the reference (REFERENCE when scored, else the first), per metric:
  the paired bootstrap of the mean difference over the scored queries, in points."""
  if len(evaluations) < 2:
    return []
  reference = REFERENCE if REFERENCE in evaluations else next(iter(evaluations))
  base = evaluations[reference]
  rows = []
  for name, ev in evaluations.items():
    if name == reference:
      continue
    for metric in metrics:
      interval = paired_bootstrap.paired_values(ev.bootstrap_values(metric, base.query_ids),
                                                base.bootstrap_values(metric))
      rows.append({"system": name, "against": reference, "metric": metric,
                   "queries": interval.questions, "mean": interval.mean_a,
                   "mean_against": interval.mean_b, "difference": interval.difference,
                   "low": interval.low, "high": interval.high,
                   "resamples": interval.resamples, "seed": paired_bootstrap.SEED,
                   "level": paired_bootstrap.LEVEL})
  return rows


def intervals_markdown(rows: Sequence[Mapping]) -> str:
  """The intervals as a Markdown table (points: metric x 100)."""
  if not rows:
    return ""
  lines = ["| system | vs | metric | mean | vs mean | difference | 95 % interval |",
           "|---|---|---|---:|---:|---:|---:|"]
  for r in rows:
    lines.append(f"| {r['system']} | {r['against']} | {r['metric']} | {r['mean']:.2f} | "
                 f"{r['mean_against']:.2f} | {r['difference']:+.2f} | "
                 f"[{r['low']:+.2f}, {r['high']:+.2f}] |")
  return "\n".join(lines) + "\n"


def _heap_hint(error: Exception, name: str, config: BeirConfig) -> Exception:
  """Anserini's batch search says only that tasks went missing when its threads ran out of
  heap (measured: 47 of 1,000 queries lost at -Xmx256m on 1M documents); under a heap cap
  that is said, with what to change. Other errors as they are."""
  heap = os.environ.get(pyserini_env.JVM_HEAP_ENV, "")
  if not heap or "completedTaskCount" not in str(error):
    return error
  first = str(error).strip().splitlines()[0]
  return RuntimeError(f"{name}: Lucene's batch search lost queries ({first}), most likely "
                      f"to the JVM heap cap {heap}: raise --jvm_heap (or "
                      f"${pyserini_env.JVM_HEAP_ENV}), or lower --batch_size ({config.batch_size}"
                      f" queries x {config.hits} hits at once)")


def _search(name: str, config: BeirConfig, data: beir.BeirData, searched: Mapping[str, str],
            runs: Mapping[str, Run], tune: Optional[beir.Split], work: str,
            hybrids: dict) -> Run:
  """One system's run over `searched` (its hybrid's weight into `hybrids`)."""
  if name in beir_bm25.SYSTEMS:
    try:
      found = beir_bm25.run_system(data.corpus, searched, beir_bm25.SYSTEMS[name],
                                   f"{work}/{name}/index", k1=config.k1, b=config.b,
                                   hits=config.hits, threads=config.threads,
                                   batch_size=config.batch_size).run
    except Exception as e:  # pylint: disable=broad-except
      raise _heap_hint(e, name, config) from e
    if not config.keep_index:
      outputs.discard(f"{work}/{name}")  # rebuildable; as large as the corpus
    return found
  if name in HYBRIDS:
    dense = HYBRIDS[name]
    hybrids[name] = choose_weight(runs[HYBRID_FIRST], runs[dense], tune, data.corpus, config)
    return fusion.interpolate(runs[HYBRID_FIRST], runs[dense], hybrids[name]["weight"],
                              config.hits)
  model = config.model if name == DENSE else config.finetuned_model
  found = beir_dense.run_dense(data.corpus, searched, model, f"{work}/{name}",
                               hits=config.hits, batch_size=config.embed_batch_size,
                               beam_args=config.beam_args, keep=config.keep_embeddings).run
  if not config.keep_embeddings:
    outputs.discard(f"{work}/{name}")
  return found


def run(config: BeirConfig) -> BeirResult:
  """Reads the folder, runs every system, scores them; writes OUT (module docstring)."""
  out = config.out.rstrip("/")
  tio.log_settings("beir", {k: v for k, v in dataclasses.asdict(config).items()
                            if k != "beam_args"})
  settings = outputs.settings_of(config, skip=("threads", "batch_size", "embed_batch_size",
                                               "keep_index", "keep_embeddings", "jvm_heap"))
  pyserini_env.set_max_heap(config.jvm_heap)  # before the JVM starts (bm25 systems)
  inputs = [config.data] + [p for p in (config.model, config.finetuned_model, config.heldout)
                            if p]
  hybrids: dict[str, dict] = {}
  # Written beside OUT and moved into place at the end: refused input (eval.beir, a model
  # trained on a scored query) or a failed system leaves OUT as it was.
  with outputs.staged(out, "beir", settings, inputs=inputs,
                      overwrite=config.overwrite) as work:
    started = time.perf_counter()
    data = beir.read(config.data)
    scored, tune = scored_and_tune(config, data)
    check_models(config, data.corpus, scored)
    for problems in (data.problems, scored.problems, *([tune.problems] if tune else [])):
      problems.log()
    searched = {**scored.queries, **(tune.queries if tune else {})}
    record = dict(beir.summary(data, scored))
    if config.heldout:
      record["heldout"] = {"folder": config.heldout, "split": config.split}
    if tune is not None:
      record["tune_split"] = {"split": tune.name, "queries": len(tune.queries),
                              "problems": tune.problems.as_dict()}
    logs.progress("beir: %s %s: %d documents, %d judged queries, %d judged pairs (read in "
                  "%.0f s)", data.name, scored.name, len(data.corpus), len(scored.qrels),
                  scored.pairs, time.perf_counter() - started)
    beir.write_doc_ids(data.corpus, f"{work}/{beir.DOC_IDS_FILE}")
    tio.write_json(f"{work}/{DATA_FILE}", record)
    runs: dict[str, Run] = {}
    for name in (s for s in SYSTEMS if s in config.systems):  # each hybrid after its two
      step = time.perf_counter()
      found = _search(name, config, data, searched, runs, tune, work, hybrids)
      runs[name] = without_query(found, data.corpus) if config.remove_query else found
      logs.progress("beir: %s: %d queries in %.0f s", name, len(found),
                    time.perf_counter() - step)
    evaluations: dict[str, ir_metrics.Evaluation] = {}
    records = []
    tio.makedirs(f"{work}/{RUNS_DIR}")
    for name in config.systems:
      named = ir_metrics.as_written(data.corpus.named(_only(runs[name], scored.qrels)))
      ir_metrics.write_trec(f"{work}/{RUNS_DIR}/{name}.trec", named, tag=name)
      evaluations[name] = ir_metrics.evaluate(scored.qrels, named, config.metrics)
      records.append({**contracts.metrics_record(name, scored.name, len(scored.qrels),
                                                 len(data.corpus), evaluations[name].means()),
                      "dataset": data.name})
    tio.write_parquet(f"{work}/{PER_QUERY_FILE}",
                      _per_query_table(evaluations, config.metrics))
    if hybrids:
      tio.write_json(f"{work}/{HYBRID_FILE}", hybrids)
    intervals = paired_intervals(evaluations, config.interval_metrics)
    if intervals:
      tio.write_json(f"{work}/{INTERVALS_STEM}.json", intervals)
      tio.write_text(f"{work}/{INTERVALS_STEM}.md", intervals_markdown(intervals))
    report.write_report(records, work, stem="metrics",
                        title=f"BEIR {data.name} ({scored.name})")
  return BeirResult(out, records, evaluations, record, hybrids, intervals,
                    outputs.files_of(out))


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("beir"))
