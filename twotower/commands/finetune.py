"""`twotower finetune --config PRESET_OR_FILE --init RUN_OR_none --reqa DIR --out DIR --vocab
FILE`: the flags of model.finetune parsed into a `FinetuneConfig` (training flags shared with
`twotower pretrain`)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower import texts
from twotower.commands import flags
from twotower.commands import pretrain as pretrain_cmd
from twotower.model import finetune, train

_STEPS, _BATCH = "trainer.finetune_steps", "trainer.finetune_batch_size"


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("finetune", finetune.__doc__)
  pretrain_cmd.add_training_flags(p, steps=_STEPS, batch=_BATCH)
  p.add_argument("--init", required=True,
                 help="checkpoint (prefix or run dir) of a pre-training or MLM run; 'none' "
                      "for random initialisation (the No-SSL baseline)")
  g = p.add_argument_group("data")
  g.add_argument("--reqa", required=True, help="ReQA dir (twotower reqa --out)")
  g.add_argument("--split", default="5",
                 help="train ratio: reads finetune/train-<ratio>-* and "
                      "questions-validation-<ratio>")
  g.add_argument("--no_recall", "--no-recall", action="store_true",
                 help="skip validation Recall@k (and so export the last checkpoint)")
  g.add_argument("--select", default=finetune.DEFAULT_SELECT,
                 help="validation metric (R@k or MRR) whose best checkpoint is exported; '' "
                      "for the last checkpoint")
  g.add_argument("--select_window", type=int, default=1, metavar="N",
                 help="judge each checkpoint by the trailing average of --select over N "
                      "checkpoints, from the first with N behind it (the earliest best wins)")
  g.add_argument("--patience", type=int, default=0, metavar="N",
                 help="stop after N checkpoints without a new best (0: train every step)")
  g.add_argument("--stop_at", type=int, default=0, metavar="STEP",
                 help="stop at this step of the --steps schedule (a length chosen by another "
                      "run on the same schedule)")
  g.add_argument("--hard_negatives", type=int, default=0, metavar="K",
                 help="K BM25 hard negatives per question in the softmax (the pairs "
                      "`twotower hardneg --k K` wrote); 0: in-batch negatives only")
  g.add_argument("--doc_text", choices=texts.DOC_TEXT_MODES, default=texts.DEFAULT_DOC_TEXT,
                 help="candidate text layout; must match the one `twotower reqa` used")
  return p


def parse(argv: Iterable[str] | None) -> finetune.FinetuneConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  cfg = pretrain_cmd.training_config(p, args, steps=_STEPS, batch=_BATCH)
  return finetune.FinetuneConfig(training=cfg, out=args.out, vocab=args.vocab, init=args.init,
                              export=not args.no_export, progress=args.progress,
                              overwrite=args.overwrite,
                              reqa=args.reqa, split=args.split, doc_text=args.doc_text,
                              validation_recall=not args.no_recall, select=args.select,
                              hard_negatives=args.hard_negatives,
                              select_window=args.select_window, patience=args.patience,
                              stop_at=args.stop_at)


def main(argv: Iterable[str] | None = None) -> None:
  print(train.summary_table(finetune.run(parse(argv))))
