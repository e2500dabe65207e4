"""The MLM baseline's pre-training: BERT masked-LM on passages with one Transformer backbone.

Both towers later start from this backbone (`--init OUT` of `pretrain` or `finetune`
restores `model/backbone` into the query and document towers; their [CLS] projections start
random), which is the paper's MLM row.
"""

from __future__ import annotations

import argparse
import logging

import keras

from twotower.model import config as config_lib
from twotower.model import train

logger = logging.getLogger(__name__)


def pretrain_mlm(cfg: config_lib.PretrainConfig, args: argparse.Namespace) -> dict:
  from twotower.model import data
  from twotower.model.encoders import TransformerBackbone
  from twotower.model.tokenizer import Tokenizer
  from twotower.model.two_tower import MlmModel

  m, t = cfg.model, cfg.trainer
  if m.encoder != "transformer":
    raise ValueError(f"MLM pre-training needs model.encoder=transformer, not {m.encoder!r}")
  train.set_precision(t.mixed_precision)
  keras.utils.set_random_seed(t.seed)
  strategy = train.make_strategy(cfg.runtime)
  tokenizer = Tokenizer.from_file(args.vocab, m.query_len, m.doc_len)
  vocab_size = m.vocab_size or tokenizer.vocab_size
  train.write_config(args.out, cfg, {"vocab": args.vocab, "tasks": "mlm"})
  with strategy.scope():
    backbone = TransformerBackbone(vocab_size, max(m.query_len, m.doc_len), m.num_layers,
                                   m.hidden_dim, m.num_heads, m.intermediate_dim, m.dropout,
                                   name="backbone")
    model = MlmModel(backbone, name="mlm")
    model.build_from_lengths(m.doc_len, cfg.data.mlm_predictions(m.doc_len))
    model.compile(optimizer=train.make_optimizer(t.learning_rate, t.steps, t.warmup_fraction,
                                                 t.weight_decay), jit_compile=t.jit_compile)
  logger.info("MLM backbone L%d/H%d/A%d, %.2fM parameters", m.num_layers, m.hidden_dim,
              m.num_heads, model.count_params() / 1e6)
  pair_files = []
  if not args.passages:
    if not args.pairs:
      raise ValueError("MLM needs --passages DIR (or --pairs DIR to use pair documents)")
    pair_files = data.pair_files(args.pairs, "ict", "train")
  ds = data.mlm_dataset(tokenizer, cfg.data.batch_size, m.doc_len, cfg.data.mlm_rate,
                        cfg.data.mlm_predictions(m.doc_len), passages_dir=args.passages,
                        pair_files_=pair_files, seed=t.seed, shuffle_buffer=cfg.data.shuffle_buffer)
  verbose = args.verbose if args.verbose is not None else "auto"
  history = train.fit(model, ds, None, cfg, args.out, strategy, t.steps, (), verbose)
  logger.info("MLM backbone saved in %s/%s; start towers from it with --init %s", args.out,
              train.CHECKPOINT_DIR, args.out)
  return history
