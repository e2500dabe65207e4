"""`twotower beir`: every system on a BEIR dataset -> a metrics table, per-query values and
TREC runs naming the dataset's own ids.

    twotower beir --data beir/scifact --split test --out beir/scifact-bm25
    twotower beir --data beir/scifact --split test --model runs/ict \
        --systems bm25-flat,bm25-multifield,dense,hybrid --out beir/scifact-ict

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
    `dev`, else `train`, never the scored one) over eval.fusion.WEIGHT_GRID, whose weight 1
    is BM25 alone: the tuned hybrid is never below BM25 on the tuning split's `tune_metric`
    (nDCG@10; ties go to the weight nearer BM25 alone). A dataset without such a split (or
    with fewer than `min_tune_queries` judged queries on it) gets UNTUNED_WEIGHT, 0.5: the
    two normalised scores weighed equally, said so in `hybrid.json` and the log.

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
    hybrid.json                       the hybrid's weight, how it was come by, the tuning
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
from typing import Mapping, Optional

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from twotower.core import config_checks as checks
from twotower.core import contracts
from twotower.core import files as tio
from twotower.core import logs
from twotower.core import lucene
from twotower.core import outputs
from twotower.core.contracts import Ranked, Run
from twotower.eval import beir
from twotower.eval import beir_bm25
from twotower.eval import beir_dense
from twotower.eval import fusion
from twotower.eval import ir_metrics
from twotower.eval import report

logger = logging.getLogger(__name__)

DENSE, HYBRID = "dense", "hybrid"
SYSTEMS = (*beir_bm25.SYSTEMS, DENSE, HYBRID)
#: The BM25 run the hybrid fuses with the dense one (Pyserini's headline BM25 on BEIR).
HYBRID_FIRST = beir_bm25.FLAT.name
#: The hybrid's weight on BM25 where none is tuned (module docstring).
UNTUNED_WEIGHT = 0.5
#: Splits a hybrid's weight is tuned on, the first the dataset has that is not scored.
TUNE_SPLITS = ("dev", "train")
#: `tune_split` value that never tunes.
NO_TUNING = "none"
DATA_FILE, HYBRID_FILE, PER_QUERY_FILE, RUNS_DIR = ("data.json", "hybrid.json",
                                                    "per_query.parquet", "runs")


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
  overwrite: bool = False
  beam_args: tuple[str, ...] = ()

  def __post_init__(self):
    checks.positive(self, "hits", "threads", "batch_size", "embed_batch_size",
                    "min_tune_queries")
    unknown = [s for s in self.systems if s not in SYSTEMS]
    if unknown or not self.systems:
      raise ValueError(f"--systems {','.join(self.systems)}: expected some of "
                       f"{', '.join(SYSTEMS)}")
    for name in self.metrics:
      ir_metrics.measure(name)
    if (DENSE in self.systems or HYBRID in self.systems) and not self.model:
      raise ValueError("dense and hybrid need --model (a training run or a SavedModel)")
    if HYBRID in self.systems and not {HYBRID_FIRST, DENSE} <= set(self.systems):
      raise ValueError(f"hybrid fuses {HYBRID_FIRST} with {DENSE}: list both in --systems")
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
  hybrid: Optional[Mapping]                        # hybrid.json (with a hybrid)
  files: tuple[str, ...]


def tune_split_of(config: BeirConfig, available: list[str]) -> str:
  """The split the hybrid's weight is tuned on, "" for none (module docstring)."""
  if config.hybrid_weight is not None or HYBRID not in config.systems:
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
    why = (f"the folder has no split to tune on ({' or '.join(TUNE_SPLITS)}, other than "
           f"{config.split})") if config.tune_split != NO_TUNING else "--tune_split none"
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


def run(config: BeirConfig) -> BeirResult:
  """Reads the folder, runs every system, scores them; writes OUT (module docstring)."""
  out = config.out.rstrip("/")
  tio.log_settings("beir", {k: v for k, v in dataclasses.asdict(config).items()
                            if k != "beam_args"})
  settings = outputs.settings_of(config, skip=("threads", "batch_size", "embed_batch_size",
                                               "keep_index", "keep_embeddings"))
  inputs = [config.data] + ([config.model] if config.model else [])
  hybrid: Optional[dict] = None
  # Written beside OUT and moved into place at the end: refused input (eval.beir) or a failed
  # system leaves OUT as it was.
  with outputs.staged(out, "beir", settings, inputs=inputs,
                      overwrite=config.overwrite) as work:
    started = time.perf_counter()
    data = beir.read(config.data)
    scored = data.split(config.split)
    tune_name = tune_split_of(config, beir.splits(config.data))
    tune = data.split(tune_name) if tune_name else None
    for problems in (data.problems, scored.problems, *([tune.problems] if tune else [])):
      problems.log()
    searched = {**scored.queries, **(tune.queries if tune else {})}
    record = dict(beir.summary(data, scored))
    if tune is not None:
      record["tune_split"] = {"split": tune.name, "queries": len(tune.queries),
                              "problems": tune.problems.as_dict()}
    logs.progress("beir: %s %s: %d documents, %d judged queries, %d judged pairs (read in "
                  "%.0f s)", data.name, scored.name, len(data.corpus), len(scored.qrels),
                  scored.pairs, time.perf_counter() - started)
    beir.write_doc_ids(data.corpus, f"{work}/{beir.DOC_IDS_FILE}")
    tio.write_json(f"{work}/{DATA_FILE}", record)
    runs: dict[str, Run] = {}
    for name in (s for s in SYSTEMS if s in config.systems):  # the hybrid after its two
      step = time.perf_counter()
      if name in beir_bm25.SYSTEMS:
        found = beir_bm25.run_system(data.corpus, searched, beir_bm25.SYSTEMS[name],
                                     f"{work}/{name}/index", k1=config.k1, b=config.b,
                                     hits=config.hits, threads=config.threads,
                                     batch_size=config.batch_size).run
        if not config.keep_index:
          outputs.discard(f"{work}/{name}")  # rebuildable; as large as the corpus
      elif name == DENSE:
        found = beir_dense.run_dense(data.corpus, searched, config.model, f"{work}/{DENSE}",
                                     hits=config.hits, batch_size=config.embed_batch_size,
                                     beam_args=config.beam_args,
                                     keep=config.keep_embeddings).run
        if not config.keep_embeddings:
          outputs.discard(f"{work}/{DENSE}")
      else:
        hybrid = choose_weight(runs[HYBRID_FIRST], runs[DENSE], tune, data.corpus, config)
        found = fusion.interpolate(runs[HYBRID_FIRST], runs[DENSE], hybrid["weight"],
                                   config.hits)
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
    if hybrid is not None:
      tio.write_json(f"{work}/{HYBRID_FILE}", hybrid)
    report.write_report(records, work, stem="metrics",
                        title=f"BEIR {data.name} ({scored.name})")
  return BeirResult(out, records, evaluations, record, hybrid, outputs.files_of(out))


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("beir"))
