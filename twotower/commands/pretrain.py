"""`twotower pretrain --config PRESET_OR_FILE --out DIR --vocab FILE` + data flags: the flags
of model.pretrain parsed into a `PretrainConfig`; also the training flags `twotower finetune`
shares (`add_training_flags`, `training_config`).
"""

from __future__ import annotations

import argparse
import functools
from typing import Any, Iterable

from twotower.core import contracts
from twotower.commands import dataclass_flags, flags
from twotower.model import config as config_lib
from twotower.model import jobs, pretrain

#: The help of the training flags that are jobs.TrainRunConfig fields (name, type and
#: default from the dataclass, commands.dataclass_flags), shared with `twotower finetune`.
TRAINING_HELP = {
    "out": "run dir: config.yaml, checkpoints/, logs/, history.csv, export/",
    "vocab": "WordPiece vocabulary file (twotower vocab)",
    "export": "skip the SavedModel export",
    "progress": "bar: one progress bar over all steps; epoch: one line per checkpoint; none",
}

#: Each flag's help of `twotower pretrain` beyond the training flags (PretrainConfig).
HELP = {
    "init": "checkpoint (prefix or run dir) of a two-tower run to continue from",
    "pairs": "pair pipeline output dir (pairs/<task>/, stats.json, config.json)",
    "passages": "passages/ dir (MLM text; held-out pages are skipped)",
    "eval_split": "pair split of the held-out metrics",
}


def add_training_flags(p: argparse.ArgumentParser, *, steps: str, batch: str) -> None:
  """The flags of every training command; `steps` and `batch` name the config fields that
  --steps and --batch_size override.

  Those of the run's own fields come from jobs.TrainRunConfig; the others are written out
  here: --config and --set choose the TrainingConfig, and the rest override one of its nested
  fields only when given (default None or SUPPRESS: the preset's value, which no dataclass
  default can say), --steps / --batch_size a different field per command."""
  g = p.add_argument_group("config")
  add = functools.partial(dataclass_flags.add_fields, g, jobs.TrainRunConfig, TRAINING_HELP)
  g.add_argument("--config", required=True,
                 help=f"preset name ({', '.join(config_lib.preset_names())}) or a YAML file")
  g.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                 help="override one config field, e.g. --set trainer.seed=1 (repeatable)")
  add(names=("out", "vocab"))
  g.add_argument("--steps", type=int, default=None, help=f"optimizer steps (overrides {steps})")
  g.add_argument("--batch_size", "--batch-size", type=int, default=None,
                 help=f"global batch (overrides {batch})")
  g.add_argument("--strategy", choices=config_lib.STRATEGIES, default=None,
                 help="tf.distribute strategy (overrides runtime.strategy)")
  g.add_argument("--tpu", default=None, help="TPU name/address for TPUClusterResolver")
  g.add_argument("--backend", choices=config_lib.BACKENDS, default=None,
                 help="Keras backend that trains (overrides runtime.backend): tensorflow, or "
                      "jax in a process of its own, the batch over every local device")
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
  add(names=("export",), flag_names={"export": ("--no_export", "--no-export")},
      kwargs={"export": dataclass_flags.SWITCH_OFF})
  flags.add_overwrite(g)
  # A guard on the steps count, not a setting: no config field.
  g.add_argument("--allow_untrained", "--allow-untrained", action="store_true",
                 help=f"let {steps}=0 export the initial towers untrained (random, or "
                      "--init's: the No-SSL baseline); without it 0 steps is refused")
  add(names=("progress",), kwargs={"progress": {"choices": jobs.PROGRESS_MODES}})


def training_config(p: argparse.ArgumentParser, args: argparse.Namespace, *, steps: str,
                    batch: str, **sections: dict[str, Any]) -> config_lib.TrainingConfig:
  """The preset or file, then --set, then the dedicated flags (and `sections`); a usage
  error for a negative step count, or 0 steps without --allow_untrained."""
  cfg = config_lib.load(args.config, args.set)
  chosen = {"runtime": {"strategy": args.strategy, "tpu": args.tpu, "backend": args.backend},
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
  add = functools.partial(dataclass_flags.add_fields, config_class=pretrain.PretrainConfig,
                          help=HELP)
  add(p, names=("init",))
  g = p.add_argument_group("data")
  add(g, names=("pairs", "passages"))
  # Overrides of the config's data.tasks / data.mixture (None: the config's), as above.
  g.add_argument("--tasks", default=None,
                 help=f"comma list of {','.join(contracts.PAIR_TASKS)}, or mlm "
                      "(default: data.tasks of the config)")
  g.add_argument("--mixture", choices=config_lib.MIXTURES, default=None,
                 help="several tasks: equal shares, or pooled (uniform over all training "
                      "pairs; default: data.mixture of the config)")
  add(g, names=("eval_split",), flag_names={"eval_split": ("--eval_split", "--eval-split")})
  return p


def parse(argv: Iterable[str] | None) -> pretrain.PretrainConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  cfg = training_config(p, args, steps="trainer.steps", batch="data.batch_size",
                        data={"tasks": flags.csv(args.tasks) or None, "mixture": args.mixture})
  return dataclass_flags.config_from(args, pretrain.PretrainConfig, training=cfg)


def main(argv: Iterable[str] | None = None) -> None:
  print(jobs.summary_table(pretrain.run(parse(argv))))
