"""Dense retrieval end to end, the one path the demo, the experiment and any user script share:

    SavedModel + ReQA dir
      --pipelines.embed (Beam RunInference)-->  candidate embeddings, question embeddings
      --eval.index (FAISS flat inner product: exact)-->  index
      --eval.search-->  run file (every question of `questions`, top k)
      --eval.evaluate-->  Recall@k / MRR records, one per split and gold convention

    result = dense.run(dense.DenseConfig(model=contracts.saved_model_path("runs/ict"),
                                         reqa="reqa/squad", work="runs/ict/eval",
                                         splits=("validation-5", "test-5")))

All questions of one ReQA file (`questions`, default `all`) are embedded and searched once;
each split is then scored on its own questions, so a validation split (for tuning a fusion
weight) and a test split come from the same run file.
"""

from __future__ import annotations

import dataclasses
import logging

from twotower.core import contracts
from twotower.core import outputs
from twotower.core import tower_text as texts
from twotower.eval import evaluate as evaluate_lib
from twotower.eval import index as index_stage
from twotower.eval import search as search_stage

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DenseConfig:
  """What to embed with which model, and what to score."""
  model: str                                # SavedModel with the string signatures
  reqa: str                                 # ReQA-layout dir (candidates + questions)
  work: str                                 # embeddings, index and the run file go here
  splits: tuple[str, ...] = (contracts.ALL_QUESTIONS,)  # splits scored
  questions: str = contracts.ALL_QUESTIONS  # the questions file that is embedded and searched
  system: str = "dense"                     # name in the metrics records
  golds: tuple[str, ...] = ("pair",)
  doc_text: str = texts.DEFAULT_DOC_TEXT    # candidate layout: as fine-tuning and BM25
  k: int = 100
  keep_embeddings: bool = False             # False: drop candidate embeddings and the index
  beam_args: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class DenseResult:
  run_file: str
  records: list[dict]


def run(config: DenseConfig) -> DenseResult:
  from twotower.pipelines import embed  # pylint: disable=import-outside-toplevel
  work = config.work
  candidates = contracts.dense_candidates_dir(work)
  questions = contracts.dense_questions_dir(work, config.questions)
  embed.run(embed.EmbedConfig(model=config.model, out=candidates, kind="candidates",
                              path=contracts.candidates_path(config.reqa),
                              doc_text=config.doc_text, beam_args=config.beam_args))
  embed.run(embed.EmbedConfig(model=config.model, out=questions, kind="questions",
                              path=contracts.questions_path(config.reqa, config.questions),
                              beam_args=config.beam_args))
  index_path = contracts.dense_index_path(work)
  index_stage.run(index_stage.IndexConfig(embeddings=candidates, out=index_path))
  run_file = contracts.dense_run_path(work)
  search_stage.run(search_stage.SearchConfig(index=index_path, queries=questions, out=run_file,
                                          k=config.k))
  splits = evaluate_lib.load_splits(config.reqa, config.splits)
  records = evaluate_lib.evaluate_run_file(run_file, config.system, splits, config.golds)
  if not config.keep_embeddings:
    outputs.remove(index_path)  # the files their manifests list: nothing else in `work`
    outputs.remove(candidates)
  return DenseResult(run_file, records)

