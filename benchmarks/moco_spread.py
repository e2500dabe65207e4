"""MoCo from random weights against in-batch negatives: how far apart the documents'
embeddings get, and the held-out in-batch accuracy (why the grid's contriever row starts slowly).

  .venv/bin/python -m benchmarks.moco_spread --pairs PAIRS_DIR --vocab VOCAB [--work DIR]
      [--steps 600] [--queues 0,256,4096] [--momentum 0.99] [--docs 1000]
      [--config cpu-small]

PAIRS_DIR holds crop pairs (`twotower pairs --crop_per_page N`; a grid's `pairs/wiki+crop-*`).
For each queue size (0: in-batch negatives only, the crop row) it pre-trains the preset's
towers (cpu-small), shared as MoCo needs, on the crop task, seed 0, with `twotower pretrain`
in a process of its own; a run directory that already holds its last step is reused. Then
it embeds the same held-out crop documents with each run's towers and with the towers at
initialisation, and prints, for each, the mean pairwise cosine of those embeddings (1: every
document in one direction) and the held-out in-batch accuracy at the last step, each as a
ratio to in-batch negatives'.

Under MoCo the documents get no gradient (the momentum tower embeds them), so only the
queries' side can spread them; a fresh tower puts every document in nearly one direction,
and a queue of such keys turns most of the loss into one push of every query away from it.

Figures (docs/guide/pretrain_finetune.md), the cpu-small grid's crop pairs, 600 steps, momentum
0.99, 1,000 documents, 2 cores with the grid training beside it: mean pairwise cosine 0.920 at
initialisation; 0.305 in-batch, 0.544 with a queue of 256, 0.873 with 4,096; held-out in-batch
accuracy 0.432, 0.324, 0.129.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

from twotower.core import contracts
from twotower.core.contracts import codecs
from twotower.model import config as config_lib
from twotower.model import curves
from twotower.model import train
from twotower.model.tokenizer import Tokenizer, read_vocab
from twotower.model.two_tower import build_two_tower

logger = logging.getLogger(__name__)

def run_name(queue: int, momentum: float) -> str:
  return "in-batch" if queue == 0 else f"moco-q{queue}-m{momentum:g}"


def last_step(run_dir: str) -> int:
  """The last step of a run's history.csv (0 if none)."""
  if not os.path.exists(contracts.history_path(run_dir)):
    return 0
  steps = curves.load(run_dir).history.get("step", [])
  return int(steps[-1]) if steps else 0


def held_out_accuracy(run_dir: str) -> float:
  return curves.load(run_dir).history["val_in_batch_accuracy"][-1]


def pretrain(preset: str, pairs: str, vocab: str, run_dir: str, steps: int, queue: int,
             momentum: float) -> None:
  """One crop pre-training in its own process (its Keras state and seeds are its own)."""
  cmd = [sys.executable, "-m", "twotower.cli", "pretrain", "--config", preset,
         "--pairs", pairs, "--vocab", vocab, "--out", run_dir, "--tasks", "crop",
         "--set", "model.shared_towers=true", "--set", f"trainer.steps={steps}",
         "--set", f"trainer.checkpoint_every={min(100, steps)}",
         "--progress", "none", "--no_export"]
  if queue:
    cmd += ["--set", f"objective.moco_queue={queue}",
            "--set", f"objective.moco_momentum={momentum}"]
  logger.info("pre-training %s (%d steps)", os.path.basename(run_dir), steps)
  subprocess.run(cmd, check=True)


def spread(model_config, vocab: str, docs: dict, checkpoint: str | None) -> float:
  """Mean pairwise cosine of the documents' embeddings by the towers of `checkpoint` (None:
  at initialisation, seed 0)."""
  tf.keras.utils.set_random_seed(0)
  model = build_two_tower(model_config, len(read_vocab(vocab)))
  model.build_from_lengths(model_config.query_len, model_config.doc_len)
  if checkpoint:
    train.init_towers(model, checkpoint)
  e = model.doc_tower(docs, training=False).numpy()
  u = e / np.linalg.norm(e, axis=1, keepdims=True)
  cos = u @ u.T
  return float(cos[~np.eye(len(u), dtype=bool)].mean())


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--pairs", required=True, help="a pair directory with crop pairs")
  p.add_argument("--vocab", required=True)
  p.add_argument("--work", default="runs/moco_spread", help="run directories (reused)")
  p.add_argument("--steps", type=int, default=600)
  p.add_argument("--queues", default="0,256,4096", help="queue sizes; 0 = in-batch only")
  p.add_argument("--momentum", type=float, default=0.99)
  p.add_argument("--docs", type=int, default=1000, help="held-out crop documents embedded")
  p.add_argument("--config", default="cpu-small", help="the towers' preset")
  args = p.parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(message)s")

  queues = [int(q) for q in args.queues.split(",")]
  if 0 not in queues:
    raise SystemExit("--queues must include 0 (in-batch negatives): the ratios are to it")
  pattern = contracts.pairs_pattern(args.pairs, "crop", "heldout")
  pairs = list(itertools.islice(codecs.read_pairs(pattern), args.docs))
  if not pairs:
    raise SystemExit(f"{pattern}: no held-out crop pairs (make them with "
                     "`twotower pairs --crop_per_page N`)")
  model_config = config_lib.load(args.config, ["model.shared_towers=true"]).model
  tokenizer = Tokenizer.from_file(args.vocab, model_config.query_len, model_config.doc_len)
  docs = tokenizer.docs(tf.constant([q.doc_title for q in pairs]),
                        tf.constant([q.doc_text for q in pairs]))

  rows = [("initialisation", spread(model_config, args.vocab, docs, None), float("nan"))]
  for queue in queues:
    run_dir = os.path.join(args.work, run_name(queue, args.momentum))
    if last_step(run_dir) < args.steps:
      pretrain(args.config, args.pairs, args.vocab, run_dir, args.steps, queue, args.momentum)
    rows.append((run_name(queue, args.momentum),
                 spread(model_config, args.vocab, docs, run_dir), held_out_accuracy(run_dir)))

  base_cos, base_acc = next((c, a) for name, c, a in rows if name == "in-batch")
  print(f"\nMoCo against in-batch negatives from random weights: {args.config}, crop, "
        f"{args.steps} steps, momentum {args.momentum:g}, {len(pairs)} held-out documents\n")
  print("| towers | mean pairwise cosine | vs in-batch | held-out in-batch accuracy "
        "| vs in-batch |")
  print("|---|---:|---:|---:|---:|")
  for name, cos, acc in rows:
    acc_cells = "– | –" if np.isnan(acc) else f"{acc:.3f} | {acc / base_acc:.2f}"
    print(f"| {name} | {cos:.3f} | {cos / base_cos:.2f} | {acc_cells} |")
  return 0


if __name__ == "__main__":
  sys.exit(main())
