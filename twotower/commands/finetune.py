"""`twotower finetune --config PRESET_OR_FILE --init RUN_OR_none --reqa DIR --out DIR --vocab
FILE`: the flags of model.finetune parsed into a `FinetuneConfig` (training flags shared with
`twotower pretrain`)."""

from __future__ import annotations

import argparse
import functools
from typing import Iterable

from twotower.core import tower_text as texts
from twotower.commands import dataclass_flags, flags
from twotower.commands import pretrain as pretrain_cmd
from twotower.model import finetune, jobs

_STEPS, _BATCH = "trainer.finetune_steps", "trainer.finetune_batch_size"

#: Each flag's help beyond the training flags; name, type and default come from
#: FinetuneConfig (commands.dataclass_flags).
HELP = {
    "init": "checkpoint (prefix or run dir) of a pre-training or MLM run; 'none' for random "
            "initialisation (the No-SSL baseline)",
    "reqa": "ReQA dir (twotower reqa --out)",
    "split": "train ratio: reads finetune/train-<ratio>-* and questions-validation-<ratio>",
    "validation_recall": "skip validation Recall@k (and so export the last checkpoint)",
    "select": "validation metric (R@k or MRR) whose best checkpoint is exported; '' for the "
              "last checkpoint",
    "select_window": "judge each checkpoint by the trailing average of --select over N "
                     "checkpoints, from the first with N behind it (the earliest best wins)",
    "patience": "stop after N checkpoints without a new best (0: train every step)",
    "stop_at": "stop at this step of the --steps schedule (a length chosen by another run on "
               "the same schedule)",
    "hard_negatives": "K BM25 hard negatives per question in the softmax (the pairs "
                      "`twotower hardneg --k K` wrote); 0: in-batch negatives only",
    "doc_text": "candidate text layout; must match the one `twotower reqa` used",
}


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("finetune", finetune.__doc__)
  pretrain_cmd.add_training_flags(p, steps=_STEPS, batch=_BATCH)
  add = functools.partial(dataclass_flags.add_fields, config_class=finetune.FinetuneConfig,
                          help=HELP)
  # Required here: fine-tuning from random weights is asked for by name ('none').
  add(p, names=("init",), kwargs={"init": {"required": True}})
  g = p.add_argument_group("data")
  add(g, names=("reqa", "split", "validation_recall", "select", "select_window", "patience",
                "stop_at", "hard_negatives", "doc_text"),
      flag_names={"validation_recall": ("--no_recall", "--no-recall")},
      kwargs={"validation_recall": dataclass_flags.SWITCH_OFF,
              "select_window": {"metavar": "N"}, "patience": {"metavar": "N"},
              "stop_at": {"metavar": "STEP"}, "hard_negatives": {"metavar": "K"},
              "doc_text": {"choices": texts.DOC_TEXT_MODES}})
  return p


def parse(argv: Iterable[str] | None) -> finetune.FinetuneConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  cfg = pretrain_cmd.training_config(p, args, steps=_STEPS, batch=_BATCH)
  return dataclass_flags.config_from(args, finetune.FinetuneConfig, training=cfg)


def main(argv: Iterable[str] | None = None) -> None:
  print(jobs.summary_table(finetune.run(parse(argv))))
