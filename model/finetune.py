"""`twotower finetune`: fine-tune the towers on ReQA pairs, from a pre-training checkpoint
(`--init RUN_DIR`, towers restored by name, or an MLM backbone) or from random weights
(`--init none`: the No-SSL baseline), reporting validation Recall@k while it trains.

  twotower finetune --config cpu-small --init runs/all --reqa reqa/squad --split 5 \
      --vocab vocab.txt --out runs/ft-all-5

Reads `REQA/finetune/train-<ratio>-*.tfrecord` (pair schema, task "reqa") and, for the
validation Recall@k, `REQA/candidates.parquet` and `REQA/questions-validation-<ratio>.parquet`.
Uses trainer.finetune_learning_rate / finetune_batch_size / finetune_steps.
"""

from __future__ import annotations

import argparse
import logging
import os

import keras
import numpy as np
import tensorflow as tf

from twotower import contracts
from twotower import texts
from twotower.model import train

logger = logging.getLogger(__name__)


def candidate_fields(candidates, doc_text: str = texts.DEFAULT_DOC_TEXT,
                     ) -> tuple[list[str], list[str]]:
  """(title, text) of each candidate as the document tower sees it: the candidate's title,
  and `twotower.texts.candidate_doc_text(sentence, passage)`, the same layout the fine-tuning
  pairs (pipelines.reqa) and `twotower embed` use."""
  titles = [t or "" for t in candidates["title"]]
  bodies = [texts.candidate_doc_text(s, p, doc_text)
            for s, p in zip(candidates["sentence"], candidates["passage"])]
  return titles, bodies


class RecallAtK(keras.callbacks.Callback):
  """At each epoch end: embeds validation questions and all candidates, logs `val_R@k`.

  A hit needs one of the question's gold candidate ids in the top k (the paper's rule).
  """

  def __init__(self, tokenizer, questions, candidates, ks=contracts.DEFAULT_KS,
               batch_size: int = 256, doc_text: str = texts.DEFAULT_DOC_TEXT):
    super().__init__()
    self.tokenizer, self.ks, self.batch_size = tokenizer, ks, batch_size
    self.questions = list(questions["question"])
    self.gold = [set(g) for g in questions["gold_candidate_ids"]]
    self.candidate_ids = np.asarray(candidates["candidate_id"], dtype=np.int64)
    self.titles, self.bodies = candidate_fields(candidates, doc_text)

  def _embed(self, fn, *columns):
    out = []
    for i in range(0, len(columns[0]), self.batch_size):
      out.append(fn(*[tf.constant(c[i:i + self.batch_size]) for c in columns]).numpy())
    return np.concatenate(out) if out else np.zeros((0, 1), np.float32)

  def recall(self) -> dict[str, float]:
    tok, model = self.tokenizer, self.model

    @tf.function
    def q_fn(q):
      return model.query_tower(tok.queries(q), training=False)

    @tf.function
    def d_fn(title, text):
      return model.doc_tower(tok.docs(title, text), training=False)
    q = self._embed(q_fn, self.questions)
    d = self._embed(d_fn, self.titles, self.bodies)
    scores = q @ d.T
    kmax = min(max(self.ks), d.shape[0])
    top = np.argsort(-scores, axis=1)[:, :kmax]
    result = {}
    for k in self.ks:
      if k > d.shape[0]:
        continue
      hits = [bool(self.gold[i] & set(self.candidate_ids[top[i, :k]].tolist()))
              for i in range(len(self.questions))]
      result[f"val_R@{k}"] = float(np.mean(hits)) if hits else 0.0
    return result

  def on_epoch_end(self, epoch, logs=None):
    result = self.recall()
    logger.info("validation (%d questions, %d candidates): %s", len(self.questions),
                len(self.candidate_ids), ", ".join(f"{k}={v:.4f}" for k, v in result.items()))
    if logs is not None:
      logs.update(result)


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="twotower finetune", description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  train.add_common_flags(p)
  p.add_argument("--reqa", required=True, help="ReQA dir (twotower reqa --out)")
  p.add_argument("--split", default="5", help="train ratio: reads finetune/train-<ratio>-*")
  p.add_argument("--no_recall", "--no-recall", action="store_true", help="skip validation Recall@k")
  p.add_argument("--doc_text", choices=texts.DOC_TEXT_MODES, default=texts.DEFAULT_DOC_TEXT,
                 help="candidate text layout; must match the one `twotower reqa` used")
  return p


def run(argv: list[str] | None = None) -> None:
  args = _parser().parse_args(argv)
  if args.init is None:
    raise ValueError("--init is required: a pre-training run/checkpoint, or 'none' (No-SSL)")
  cfg = train.load_config(args)
  t = cfg.trainer
  steps = args.steps if args.steps is not None else t.finetune_steps
  batch = args.batch_size or t.finetune_batch_size
  cfg = train.config_lib.replace(cfg, data={"tasks": (contracts.REQA_TASK,), "batch_size": batch})
  from twotower.model import data
  # contracts' pattern, not `train-<r>-*`, which also matches `twotower hardneg`'s
  # `train-<r>-hn<k>-*` shards next to the plain ones.
  files = sorted(tf.io.gfile.glob(contracts.finetune_pattern(args.reqa, f"train-{args.split}")))
  if not files:
    raise FileNotFoundError(f"no ReQA fine-tuning shards {args.reqa}/finetune/train-{args.split}-*")

  def make(tokenizer):
    return data.pair_dataset({contracts.REQA_TASK: files}, tokenizer, batch, seed=t.seed,
                             shuffle_buffer=cfg.data.shuffle_buffer), None

  def callbacks(model, tokenizer):
    if args.no_recall:
      return []
    import pandas as pd
    qpath = os.path.join(args.reqa, contracts.questions_file(f"validation-{args.split}"))
    cpath = os.path.join(args.reqa, contracts.CANDIDATES_FILE)
    if not (tf.io.gfile.exists(qpath) and tf.io.gfile.exists(cpath)):
      logger.warning("no validation Recall@k: %s or %s is missing", qpath, cpath)
      return []
    return [RecallAtK(tokenizer, pd.read_parquet(qpath), pd.read_parquet(cpath),
                      doc_text=args.doc_text)]

  _, history = train.train_two_tower(cfg, args, make, t.finetune_learning_rate, steps, callbacks)
  print(train.summary_table(history))


if __name__ == "__main__":
  from twotower.cli import setup_logging
  setup_logging()
  run()
