"""`twotower pretrain`: pre-train the two towers on ICT / BFS / WLP pairs (mixed uniformly),
or a Transformer encoder with masked-LM (`--tasks mlm`).

  twotower pretrain --config cpu-small --pairs DIR --vocab vocab.txt --out runs/ict \
      --tasks ict
  twotower pretrain --config cpu-small --pairs DIR --vocab vocab.txt --out runs/all \
      --tasks ict,bfs,wlp
  twotower pretrain --config cpu-small --passages DIR/passages --vocab vocab.txt \
      --out runs/mlm --tasks mlm

Writes `OUT/config.yaml`, `OUT/checkpoints/`, `OUT/logs/` (TensorBoard), `OUT/history.csv`
(train and held-out loss / in-batch accuracy per checkpoint) and `OUT/export/` (SavedModel
with string signatures + .keras). Re-running the same command after a kill resumes.
"""

from __future__ import annotations

import argparse
import logging
import os

from twotower import contracts
from twotower.model import train

logger = logging.getLogger(__name__)


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="twotower pretrain", description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  train.add_common_flags(p)
  p.add_argument("--pairs", default=None, help="pair pipeline output dir (holds pairs/<task>/)")
  p.add_argument("--passages", default=None, help="passages/ dir (MLM text)")
  p.add_argument("--tasks", default=None,
                 help=f"comma list of {','.join(contracts.PRETRAIN_TASKS)}, or mlm "
                      "(default: data.tasks of the config)")
  p.add_argument("--eval_split", "--eval-split", default="heldout", help="pair split for held-out metrics")
  return p


def run(argv: list[str] | None = None) -> None:
  args = _parser().parse_args(argv)
  data_over = {}
  if args.tasks:
    data_over["tasks"] = args.tasks
  if args.batch_size:
    data_over["batch_size"] = args.batch_size
  cfg = train.load_config(args, data=data_over,
                          trainer={"steps": args.steps} if args.steps is not None else {})
  tasks = cfg.data.tasks
  if tasks == ("mlm",):
    from twotower.model import mlm
    history = mlm.pretrain_mlm(cfg, args)
  else:
    unknown = set(tasks) - set(contracts.PRETRAIN_TASKS)
    if unknown:
      raise ValueError(f"--tasks: unknown {sorted(unknown)}; use {contracts.PRETRAIN_TASKS} or mlm")
    if not args.pairs:
      raise ValueError("--pairs DIR is required for ICT/BFS/WLP pre-training")
    _, history = train.train_two_tower(cfg, args, _datasets(cfg, args),
                                       cfg.trainer.learning_rate, cfg.trainer.steps)
  print(train.summary_table(history))


def _datasets(cfg, args):
  from twotower.model import data

  def make(tokenizer):
    b, t = cfg.data.batch_size, cfg.trainer
    train_ds = data.pretrain_dataset(args.pairs, cfg.data.tasks, "train", tokenizer, b,
                                     seed=t.seed, shuffle_buffer=cfg.data.shuffle_buffer)
    eval_ds = None
    if t.eval_steps > 0:
      try:
        # A fixed sample of held-out batches, shuffled once: in file order a batch would hold
        # passages of one or two pages only (much harder negatives than training sees).
        eval_ds = data.cached_batches(
            data.pretrain_dataset(args.pairs, cfg.data.tasks, args.eval_split, tokenizer, b,
                                  shuffle=True, seed=t.seed + 1), t.eval_steps)
      except FileNotFoundError as e:
        logger.warning("no held-out evaluation: %s", e)
    return train_ds, eval_ds
  return make


if __name__ == "__main__":
  from twotower.cli import setup_logging
  setup_logging()
  run()
