"""The MLM baseline's pre-training: BERT masked-LM on passages with one Transformer backbone,
through the same trainer as the towers (`train.train` with the factories below).

  build_model(cfg, init)          -> build_model(vocab_size): MlmModel(TransformerBackbone)
  datasets(cfg, passages, pairs)  -> make_datasets(tokenizer): masked passages, no held-out set
  run(PretrainConfig)                -> train.TrainResult (nothing exported: no towers yet)

Both towers later start from this backbone (`--init OUT` of `pretrain` or `finetune`
restores `model/backbone` into the query and document towers; their [CLS] projections start
random), which is the paper's MLM row.

Passages of held-out pages never feed MLM, as they never feed the pair tasks: the held-out
share is read from the pair pipeline's config.json (`contracts.codecs.read_heldout_percent`)
next to passages/, and `contracts.is_heldout(page_id, percent)` skips them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from twotower.core import contracts
from twotower.model import config as config_lib
from twotower.model import train

if TYPE_CHECKING:
  from twotower.model.pretrain import PretrainConfig

logger = logging.getLogger(__name__)


def build_model(cfg: config_lib.TrainingConfig, init: str | None) -> train.BuildModel:
  """build_model for `train`: one backbone of `cfg.model` with a tied masked-LM head."""
  m = cfg.model
  if m.encoder != "transformer":
    raise ValueError(f"MLM pre-training needs model.encoder=transformer, not {m.encoder!r}")
  if init and init.lower() != "none":
    raise ValueError(f"--init {init}: MLM pre-training starts from random weights; --init "
                     "starts two-tower runs")

  def build(vocab_size: int):
    from twotower.model.encoders import TransformerBackbone  # pylint: disable=import-outside-toplevel
    from twotower.model.two_tower import MlmModel  # pylint: disable=import-outside-toplevel
    backbone = TransformerBackbone(vocab_size, max(m.query_len, m.doc_len), m.num_layers,
                                   m.hidden_dim, m.num_heads, m.intermediate_dim, m.dropout,
                                   name="backbone")
    model = MlmModel(backbone, name="mlm")
    model.build_from_lengths(m.doc_len, cfg.data.mlm_predictions(m.doc_len))
    return model
  return build


def heldout_percent(passages: str, pairs: str | None = None) -> float:
  """The held-out share the passages were written with: the config.json of the pair
  pipeline output that holds them (`passages` as `twotower vocab` takes it: that dir, its
  passages/ dir, a shard or a glob; else of `pairs`); 0, with a warning, when unknown."""
  sources = [contracts.pairs_out_dir(passages)] + ([pairs] if pairs else [])
  for source in sources:
    percent = contracts.codecs.read_heldout_percent(source)
    if percent:
      return percent
  logger.warning("MLM: no %s with a held-out share in %s: every passage feeds MLM",
                 contracts.PAIRS_CONFIG_FILE, " or ".join(sources))
  return 0.0


def datasets(cfg: config_lib.TrainingConfig, passages: str | None,
             pairs: str | None) -> train.MakeDatasets:
  """make_datasets for `train`: masked passages (held-out pages skipped), or the documents
  of the ICT train pairs when there is no passages/ dir."""
  from twotower.model import data  # pylint: disable=import-outside-toplevel
  m, d, t = cfg.model, cfg.data, cfg.trainer
  if not passages and not pairs:
    raise ValueError("MLM needs --passages DIR (or --pairs DIR to use pair documents)")
  percent = heldout_percent(passages, pairs) if passages else 0.0
  pair_files = [] if passages else data.pair_files(pairs, "ict", contracts.TRAIN)

  def make(tokenizer):
    return data.mlm_dataset(tokenizer, d.batch_size, m.doc_len, d.mlm_rate,
                            d.mlm_predictions(m.doc_len), passages_dir=passages,
                            heldout_percent=percent, pair_files_=pair_files, seed=t.seed,
                            shuffle_buffer=d.shuffle_buffer,
                            deterministic=t.deterministic), None
  return make


def run(job: "PretrainConfig") -> train.TrainResult:
  cfg = job.training
  result = train.train(job, build_model(cfg, job.init), datasets(cfg, job.passages, job.pairs),
                       learning_rate=cfg.trainer.learning_rate, steps=cfg.trainer.steps,
                       exportable=False,
                       run_info={"tasks": ["mlm"], "passages": job.passages, "pairs": job.pairs})
  logger.info("MLM backbone saved in %s; start towers from it with --init %s",
              contracts.checkpoint_dir(job.out), job.out)
  return result
