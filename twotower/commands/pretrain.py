"""`twotower pretrain --config PRESET_OR_FILE --out DIR --vocab FILE` + data flags: the flags
of model.pretrain parsed into a `PretrainConfig`; also the training flags `twotower finetune`
shares (`add_training_flags`, `training_config`).
"""

from __future__ import annotations

import argparse
from typing import Any, Iterable

from twotower import contracts
from twotower.commands import flags
from twotower.model import config as config_lib
from twotower.model import pretrain, train

def add_training_flags(p: argparse.ArgumentParser, *, steps: str, batch: str) -> None:
  """The flags of every training command; `steps` and `batch` name the config fields that
  --steps and --batch_size override."""
  g = p.add_argument_group("config")
  g.add_argument("--config", required=True,
                 help=f"preset name ({', '.join(config_lib.preset_names())}) or a YAML file")
  g.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                 help="override one config field, e.g. --set trainer.seed=1 (repeatable)")
  g.add_argument("--out", required=True,
                 help="run dir: config.yaml, checkpoints/, logs/, history.csv, export/")
  g.add_argument("--vocab", required=True, help="WordPiece vocabulary file (twotower vocab)")
  g.add_argument("--steps", type=int, default=None, help=f"optimizer steps (overrides {steps})")
  g.add_argument("--batch_size", "--batch-size", type=int, default=None,
                 help=f"global batch (overrides {batch})")
  g.add_argument("--strategy", choices=config_lib.STRATEGIES, default=None,
                 help="tf.distribute strategy (overrides runtime.strategy)")
  g.add_argument("--tpu", default=None, help="TPU name/address for TPUClusterResolver")
  g.add_argument("--mixed_precision", "--mixed-precision", action="store_true", default=None,
                 help="bfloat16 compute, float32 variables")
  g.add_argument("--jit_compile", "--jit-compile", action="store_true", default=None,
                 help="XLA-compile the train step (slower on CPU)")
  # SUPPRESS: neither flag given leaves trainer.deterministic as the config says.
  g.add_argument("--deterministic", dest="deterministic", action="store_true",
                 default=argparse.SUPPRESS,
                 help="every seed and ordered input: the same command gives the same "
                      "weights (trainer.deterministic; on in every preset)")
  g.add_argument("--no_deterministic", "--no-deterministic", dest="deterministic",
                 action="store_false", default=argparse.SUPPRESS,
                 help="trade reproducibility for speed")
  g.add_argument("--grad_cache_chunk", type=int, default=None, metavar="N",
                 help="gradient cache: the global batch embedded N pairs at a time, memory "
                      "bounded by N, the same gradients (trainer.grad_cache_chunk; 0: off)")
  g.add_argument("--no_export", "--no-export", action="store_true",
                 help="skip the SavedModel export")
  flags.add_overwrite(g)
  g.add_argument("--allow_untrained", "--allow-untrained", action="store_true",
                 help=f"let {steps}=0 export the initial towers untrained (random, or "
                      "--init's: the No-SSL baseline); without it 0 steps is refused")
  g.add_argument("--progress", choices=train.PROGRESS_MODES, default="bar",
                 help="bar: one progress bar over all steps; epoch: one line per checkpoint; "
                      "none")


def training_config(p: argparse.ArgumentParser, args: argparse.Namespace, *, steps: str,
                    batch: str, **sections: dict[str, Any]) -> config_lib.TrainingConfig:
  """The preset or file, then --set, then the dedicated flags (and `sections`); a usage
  error for a negative step count, or 0 steps without --allow_untrained."""
  cfg = config_lib.load(args.config, args.set)
  chosen = {"runtime": {"strategy": args.strategy, "tpu": args.tpu},
            "trainer": {"mixed_precision": args.mixed_precision,
                        "jit_compile": args.jit_compile,
                        "grad_cache_chunk": args.grad_cache_chunk,
                        "deterministic": getattr(args, "deterministic", None)}}
  for name, value in ((steps, args.steps), (batch, args.batch_size)):
    section, field = name.split(".")
    chosen.setdefault(section, {})[field] = value
  for section, fields in sections.items():
    chosen.setdefault(section, {}).update(fields)
  changed = {s: {k: v for k, v in f.items() if v is not None} for s, f in chosen.items()}
  cfg = config_lib.replace(cfg, **{s: f for s, f in changed.items() if f})
  section, field = steps.split(".")
  n = getattr(getattr(cfg, section), field)
  if n < 0 or (n == 0 and not args.allow_untrained):
    # 0 steps exports the initial towers as if trained: a typo must not pass for a model.
    p.error(f"{steps} is {n}: give --steps >= 1, or --allow_untrained to export the initial "
            "towers untrained (the No-SSL baseline)")
  return cfg


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("pretrain", pretrain.__doc__)
  add_training_flags(p, steps="trainer.steps", batch="data.batch_size")
  p.add_argument("--init", default=None,
                 help="checkpoint (prefix or run dir) of a two-tower run to continue from")
  g = p.add_argument_group("data")
  g.add_argument("--pairs", default=None,
                 help="pair pipeline output dir (pairs/<task>/, stats.json, config.json)")
  g.add_argument("--passages", default=None,
                 help="passages/ dir (MLM text; held-out pages are skipped)")
  g.add_argument("--tasks", default=None,
                 help=f"comma list of {','.join(contracts.PAIR_TASKS)}, or mlm "
                      "(default: data.tasks of the config)")
  g.add_argument("--mixture", choices=config_lib.MIXTURES, default=None,
                 help="several tasks: equal shares, or pooled (uniform over all training "
                      "pairs; default: data.mixture of the config)")
  g.add_argument("--eval_split", "--eval-split", default=contracts.HELDOUT,
                 help="pair split of the held-out metrics")
  return p


def parse(argv: Iterable[str] | None) -> pretrain.PretrainConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  cfg = training_config(p, args, steps="trainer.steps", batch="data.batch_size",
                        data={"tasks": flags.csv(args.tasks) or None, "mixture": args.mixture})
  return pretrain.PretrainConfig(training=cfg, out=args.out, vocab=args.vocab, init=args.init,
                              export=not args.no_export, progress=args.progress,
                              overwrite=args.overwrite,
                              pairs=args.pairs, passages=args.passages,
                              eval_split=args.eval_split)


def main(argv: Iterable[str] | None = None) -> None:
  print(train.summary_table(pretrain.run(parse(argv))))
