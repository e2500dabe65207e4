"""`twotower finetune`: fine-tune the towers on ReQA pairs, from a pre-training checkpoint
(`init=RUN_DIR`, towers restored by name, or an MLM backbone) or from random weights
(`init="none"`: the No-SSL baseline), through the one trainer (`train.train`).

  twotower finetune --config cpu-small --init runs/all --reqa reqa/squad --split 5 \
      --vocab vocab.txt --out runs/ft-all-5

Reads `REQA/finetune/train-<ratio>-*.tfrecord` (pair schema, task "reqa") and, for the
validation Recall@k, `REQA/candidates.parquet` and `REQA/questions-validation-<ratio>.parquet`.
Uses trainer.finetune_learning_rate / finetune_batch_size / finetune_steps.

How long to fine-tune is chosen on validation, never on test (issue 11). The paper holds out
"10% of training set ... as the validation set for hyper-parameter tuning" (sec. 4.1): at
every checkpoint `RecallAtK` computes validation Recall@k and MRR over all candidates (the
paper's gold rule, with twotower.core.metrics, the code `twotower evaluate` runs), the best
checkpoint by `FinetuneConfig.select` (default R@100; "" = the last) is kept under
checkpoints/best/, and that model is exported. The result says which step won
(`selected_step`) and carries the validation curve (`result.curve("val_R@100")`, also in
history.csv). The `test-<ratio>` questions are never read here.

Length by validation (the grid's `training.finetune_select`): `select_window` judges each
checkpoint by the trailing moving average of the metric over that many checkpoints, from the
first checkpoint whose window is full (the earliest best wins: selection.best_index),
`patience` stops the run once that many checkpoints passed without a new best, so
`finetune_steps` is a cap, and `min_validation_questions` refuses a validation split too
small to choose on (one question of 18 moves R@100 by 5.6 points).

`run(FinetuneConfig) -> train.TrainResult` is the typed entry point; `twotower finetune`
(twotower.commands.finetune) is its flag parser. With `runtime.backend: jax` the same run
trains on JAX (jax_train.py; jax_launch.py starts its process), its validation embedded by
jax_train.JaxEncoders, and `--init` takes a JAX run's checkpoints or a `.keras` file.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from typing import ClassVar, Sequence

import numpy as np

from twotower.core import contracts
from twotower.core import metrics as metrics_lib
from twotower.core import tower_text as texts
from twotower.core.contracts import manifests
from twotower.model import config as config_lib
from twotower.model import jobs

logger = logging.getLogger(__name__)

#: The validation metric that picks the exported checkpoint by default.
DEFAULT_SELECT = "R@100"


@dataclasses.dataclass(frozen=True, kw_only=True)
class FinetuneConfig(jobs.TrainRunConfig):
  """A fine-tuning run on one ReQA train ratio.

  Attributes:
    reqa: the ReQA dir (`twotower reqa --out`).
    split: the train ratio: reads finetune/train-<split>-* and questions-validation-<split>.
    doc_text: candidate text layout (texts.DOC_TEXT_MODES); must match `twotower reqa`'s.
    validation_recall: compute validation Recall@k at every checkpoint.
    select: the validation metric ("R@k" or "MRR") whose best checkpoint is exported; ""
      exports the last one (so does a run without validation).
    hard_negatives: k BM25 hard negatives per question in the softmax (reads the pairs
      `twotower hardneg --k k` wrote next to the plain ones); 0: in-batch negatives only.
    select_window: judge each checkpoint by the trailing moving average of `select` over
      this many checkpoints, from the first whose window is full (1: the checkpoint's own
      value).
    patience: stop after this many checkpoints without a new best (0: train every step).
    min_validation_questions: with `select`, fail when the validation split has fewer
      questions (0: any).
    stop_at: stop at this step of the finetune_steps schedule (0: its end): a length chosen
      by another run on the same schedule.
  """
  reqa: str
  split: str = "5"
  doc_text: str = texts.DEFAULT_DOC_TEXT
  validation_recall: bool = True
  select: str = DEFAULT_SELECT
  hard_negatives: int = 0
  select_window: int = 1
  patience: int = 0
  min_validation_questions: int = 0
  stop_at: int = 0

  STAGE: ClassVar[str] = "finetune"


def candidate_fields(candidates: Sequence[dict], doc_text: str = texts.DEFAULT_DOC_TEXT,
                     ) -> tuple[list[str], list[str]]:
  """(title, text) of each candidate row as the document tower sees it: the candidate's
  title, and `twotower.core.tower_text.candidate_doc_text(sentence, passage)`, the same layout the
  fine-tuning pairs (pipelines.reqa.builder) and `twotower embed` use."""
  titles = [c["title"] or "" for c in candidates]
  bodies = [texts.candidate_doc_text(c["sentence"], c["passage"], doc_text) for c in candidates]
  return titles, bodies


def logged_metrics(num_candidates: int, ks: Sequence[int] = contracts.DEFAULT_KS) -> list[str]:
  """The metrics RecallAtK logs (without the `val_` prefix): R@k for k up to the number of
  candidates (a larger k is trivially 1), and MRR."""
  return [f"R@{k}" for k in ks if k <= num_candidates] + ["MRR"]


class TfEncoders:
  """Raw strings -> embeddings with the in-graph tokenizer and a tf.function per tower
  (TensorFlow; jax_train.JaxEncoders is JAX's)."""

  def __init__(self, tokenizer, model):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    @tf.function
    def q_fn(q):
      return model.query_tower(tokenizer.queries(q), training=False)

    @tf.function
    def d_fn(title, text):
      return model.doc_tower(tokenizer.docs(title, text), training=False)
    self._tf, self._q, self._d = tf, q_fn, d_fn

  def queries(self, texts_) -> np.ndarray:
    return self._q(self._tf.constant(list(texts_))).numpy()

  def docs(self, titles, texts_) -> np.ndarray:
    return self._d(self._tf.constant(list(titles)), self._tf.constant(list(texts_))).numpy()


def encoders(tokenizer, model):
  """The validation embedders of the Keras backend this process runs."""
  import keras  # pylint: disable=import-outside-toplevel
  if keras.backend.backend() == "jax":
    from twotower.model import jax_train  # pylint: disable=import-outside-toplevel
    return jax_train.JaxEncoders(tokenizer, model)
  return TfEncoders(tokenizer, model)


def _callback_base():
  import keras  # pylint: disable=import-outside-toplevel
  return keras.callbacks.Callback


class RecallAtK(_callback_base()):
  """At each checkpoint: embeds the validation questions and every candidate, ranks the
  candidates by inner product and logs `val_R@k` and `val_MRR` (twotower.core.metrics:
  first-hit ranks under the paper's `pair` gold rule, then `summarize`; MRR over the top
  max(ks)). On either backend (`encoders`)."""

  def __init__(self, tokenizer, questions: Sequence[contracts.Question],
               candidates: Sequence[dict], ks: Sequence[int] = contracts.DEFAULT_KS,
               batch_size: int = 256, doc_text: str = texts.DEFAULT_DOC_TEXT):
    super().__init__()
    self.tokenizer, self.batch_size = tokenizer, batch_size
    self.ks = tuple(k for k in ks if k <= len(candidates))
    self.questions = list(questions)
    self.candidate_ids = np.asarray([c["candidate_id"] for c in candidates], dtype=np.int64)
    self.titles, self.bodies = candidate_fields(candidates, doc_text)

  def _embed(self, fn, *columns) -> np.ndarray:
    out = [fn(*[c[i:i + self.batch_size] for c in columns])
           for i in range(0, len(columns[0]), self.batch_size)]
    return np.concatenate(out).astype(np.float32)

  def ranked(self) -> dict[str, list[int]]:
    """question id -> the top max(ks) candidate ids, best first."""
    embed = encoders(self.tokenizer, self.model)
    q = self._embed(embed.queries, [x.question for x in self.questions])
    d = self._embed(embed.docs, self.titles, self.bodies)
    depth = min(max(self.ks), d.shape[0])
    run = {}
    for start in range(0, len(q), 1024):  # bounded memory: 1024 x candidates scores at once
      scores = q[start:start + 1024] @ d.T
      top = np.argpartition(-scores, depth - 1, axis=1)[:, :depth]
      order = np.take_along_axis(scores, top, axis=1).argsort(axis=1, kind="stable")[:, ::-1]
      top = np.take_along_axis(top, order, axis=1)
      for question, row in zip(self.questions[start:start + 1024], top):
        run[question.question_id] = self.candidate_ids[row].tolist()
    return run

  def recall(self) -> dict[str, float]:
    ranks = metrics_lib.question_ranks(self.ranked(), self.questions, "pair")
    return {f"val_{k}": v for k, v in metrics_lib.summarize(ranks, self.ks).items()}

  def on_epoch_end(self, epoch, logs=None):
    result = self.recall()
    logger.info("validation (%d questions, %d candidates): %s", len(self.questions),
                len(self.candidate_ids), ", ".join(f"{k}={v:.4f}" for k, v in result.items()))
    if logs is not None:
      logs.update(result)


def _validation(job: FinetuneConfig) -> tuple[tuple[contracts.Question, ...], list[dict]] | None:
  """(questions, candidate rows) of the validation side of the split, None if absent."""
  split = contracts.validation_split(job.split)
  try:
    questions = contracts.codecs.read_questions(job.reqa, split)
    candidates = contracts.codecs.read_candidates(job.reqa)
  except FileNotFoundError as e:
    logger.warning("no validation Recall@k: %s", e)
    return None
  if not questions or not candidates:
    logger.warning("no validation Recall@k: %d %s questions, %d candidates in %s",
                   len(questions), split, len(candidates), job.reqa)
    return None
  return questions, candidates


def run(job: FinetuneConfig) -> jobs.TrainResult:
  """Fine-tunes (or resumes) `job`; exports the checkpoint `job.select` chose."""
  if not isinstance(job, FinetuneConfig):
    raise TypeError(f"finetune.run takes a FinetuneConfig, not {type(job).__name__}; flags are "
                    "parsed by twotower.commands.finetune.parse(argv)")
  if job.doc_text not in texts.DOC_TEXT_MODES:
    raise ValueError(f"doc_text={job.doc_text!r}: expected one of {texts.DOC_TEXT_MODES}")
  t = job.training.trainer
  cfg = config_lib.replace(job.training, data={"tasks": (contracts.REQA_TASK,),
                                             "batch_size": t.finetune_batch_size})
  job = dataclasses.replace(job, training=cfg)
  train_split = contracts.train_split(job.split)
  k = job.hard_negatives
  # Only the shards a manifest lists: `twotower reqa`'s for the plain pairs, `twotower
  # hardneg`'s (beside hn<k>-stats.json) for those with negatives.
  if k:
    pattern = contracts.hard_negatives_pattern(job.reqa, train_split, k)
    files = manifests.listed_files(
        job.reqa, pattern, main=contracts.hard_negatives_stats_path(job.reqa, k))
  else:
    pattern = contracts.finetune_pattern(job.reqa, train_split)
    files = manifests.listed_files(job.reqa, pattern)
  if not files:
    hint = (f" (run `twotower hardneg --reqa {job.reqa} --ratios {job.split} --k {k}` first)"
            if k else "")
    raise FileNotFoundError(f"no ReQA fine-tuning shards match {pattern}{hint}")
  from twotower.model import pair_files  # pylint: disable=import-outside-toplevel
  pair_files.require_records(files, f"{train_split} fine-tuning pairs")
  validation = _validation(job) if job.validation_recall else None
  select = ""
  if job.select and validation:
    available = logged_metrics(len(validation[1]))
    if job.select not in available:
      raise ValueError(f"select={job.select!r}: validation logs {', '.join(available)} "
                       f"({len(validation[1])} candidates in {job.reqa}); choose one, or '' "
                       "for the last checkpoint")
    select = f"val_{job.select}"
    if len(validation[0]) < job.min_validation_questions:
      raise ValueError(
          f"{job.reqa}: {contracts.validation_split(job.split)} has {len(validation[0])} "
          f"questions, fewer than the {job.min_validation_questions} a length is chosen on; "
          "take the length from another ratio (the grid's training.finetune_select.carry)")
  elif job.select:
    logger.warning("no validation to select on: exporting the last checkpoint")

  if cfg.runtime.backend == "jax":
    from twotower.model import jax_launch  # pylint: disable=import-outside-toplevel
    if not jax_launch.on_jax():
      return jax_launch.run("finetune", job)

  def callbacks(model, tokenizer):
    if not validation:
      return []
    return [RecallAtK(tokenizer, *validation, doc_text=job.doc_text)]

  run_info = {"reqa": job.reqa, "split": job.split, "doc_text": job.doc_text,
              "hard_negatives": k}
  if select and (job.select_window > 1 or job.patience):  # (else: the settings runs had)
    run_info.update(select_window=job.select_window, patience=job.patience)
  if job.stop_at:
    run_info["stop_at"] = job.stop_at
  schedule = {"learning_rate": t.finetune_learning_rate, "steps": t.finetune_steps,
              "callbacks": callbacks, "select": select, "select_window": job.select_window,
              "patience": job.patience if select else 0, "stop_at": job.stop_at,
              "run_info": run_info}
  if cfg.runtime.backend == "jax":
    from twotower.model import jax_train, np_input  # pylint: disable=import-outside-toplevel

    def make_batches(tokenizer, skip):
      return np_input.pair_batches({contracts.REQA_TASK: files}, tokenizer,
                                   t.finetune_batch_size, seed=t.seed,
                                   shuffle_buffer=cfg.data.shuffle_buffer, hard_negatives=k,
                                   skip=skip), None
    return jax_train.train(job, jax_train.two_tower_builder(cfg, job.init), make_batches,
                           **schedule)

  from twotower.model import train  # pylint: disable=import-outside-toplevel

  def make_datasets(tokenizer):
    from twotower.model import data  # pylint: disable=import-outside-toplevel
    return data.pair_dataset({contracts.REQA_TASK: files}, tokenizer, t.finetune_batch_size,
                             seed=t.seed, shuffle_buffer=cfg.data.shuffle_buffer,
                             deterministic=t.deterministic, hard_negatives=k), None
  return train.train(job, train.two_tower_builder(cfg, job.init), make_datasets, **schedule)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("finetune"))
