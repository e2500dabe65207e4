"""Training shared by `twotower pretrain` and `twotower finetune`.

* Strategy by flag (`runtime.strategy`): default, mirrored, tpu run Keras `fit` with the
  model's own `train_step`; multi_worker (TF_CONFIG) runs a custom `strategy.run` loop over
  the same `train_step`, because Keras 3 `fit` fails under MultiWorkerMirroredStrategy
  (keras-team/keras#20585).
* AdamW, linear warm-up over `warmup_fraction` of the steps, then linear decay to 0.
* Checkpoints (`tf.train.CheckpointManager` of model + optimizer) every `checkpoint_every`
  steps, one Keras "epoch" each; a killed run restarts from the latest checkpoint: the
  optimizer's step counter says where, and `fit(initial_epoch=...)` carries on.
* TensorBoard logs, a CSV history (`history.csv`), the Keras progress bar.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
from typing import Callable, Sequence

import keras
import tensorflow as tf

from twotower import io
from twotower.model import config as config_lib

logger = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoints"
LOG_DIR = "logs"
EXPORT_DIR = "export"
CONFIG_FILE = "config.yaml"
HISTORY_FILE = "history.csv"


# ------------------------------------------------------------------------------------------
# Flags shared by pretrain and finetune.
# ------------------------------------------------------------------------------------------


def add_common_flags(parser: argparse.ArgumentParser) -> None:
  g = parser.add_argument_group("config")
  g.add_argument("--config", required=True,
                 help=f"preset name ({', '.join(config_lib.preset_names())}) or a YAML file")
  g.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                 help="override one config field, e.g. --set trainer.steps=100 (repeatable)")
  g.add_argument("--out", required=True, help="output dir: checkpoints/, logs/, export/")
  g.add_argument("--vocab", required=True, help="WordPiece vocabulary file (twotower vocab)")
  g.add_argument("--init", default=None,
                 help="checkpoint (file prefix or run dir) to start the towers from: a "
                      "pre-training or MLM run; 'none' for random initialisation")
  g.add_argument("--steps", type=int, default=None, help="optimizer steps (overrides config)")
  g.add_argument("--batch_size", "--batch-size", type=int, default=None, help="global batch (overrides config)")
  g.add_argument("--strategy", choices=config_lib.STRATEGIES, default=None,
                 help="tf.distribute strategy (overrides runtime.strategy)")
  g.add_argument("--tpu", default=None, help="TPU name/address for TPUClusterResolver")
  g.add_argument("--mixed_precision", "--mixed-precision", action="store_true", default=None,
                 help="bfloat16 compute, float32 variables")
  g.add_argument("--jit_compile", "--jit-compile", action="store_true", default=None,
                 help="XLA-compile the train step (slower on CPU)")
  g.add_argument("--no_export", "--no-export", action="store_true", help="skip the SavedModel export")
  g.add_argument("--verbose", type=int, default=None,
                 help="Keras fit verbosity (default: progress bar on a terminal)")


def load_config(args: argparse.Namespace, **extra: dict) -> config_lib.PretrainConfig:
  cfg = config_lib.load(args.config, args.set)
  runtime = {k: v for k, v in (("strategy", args.strategy), ("tpu", args.tpu)) if v is not None}
  trainer = {k: v for k, v in (("mixed_precision", args.mixed_precision),
                               ("jit_compile", args.jit_compile)) if v is not None}
  sections = {"runtime": runtime, "trainer": trainer}
  for key, fields in extra.items():
    sections.setdefault(key, {}).update(fields)
  return config_lib.replace(cfg, **{k: v for k, v in sections.items() if v})


# ------------------------------------------------------------------------------------------
# Strategy, optimizer.
# ------------------------------------------------------------------------------------------


def make_strategy(runtime: config_lib.RuntimeConfig) -> tf.distribute.Strategy:
  if runtime.strategy == "mirrored":
    return tf.distribute.MirroredStrategy()
  if runtime.strategy == "multi_worker":
    if "TF_CONFIG" not in os.environ:
      raise ValueError("--strategy multi_worker needs the TF_CONFIG environment variable")
    return tf.distribute.MultiWorkerMirroredStrategy()
  if runtime.strategy == "tpu":
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=runtime.tpu or None)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
  return tf.distribute.get_strategy()


@keras.saving.register_keras_serializable(package="twotower")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
  """0 -> peak linearly over `warmup_steps`, then linearly to 0 at `total_steps`."""

  def __init__(self, peak: float, warmup_steps: int, total_steps: int):
    self.peak, self.warmup_steps, self.total_steps = float(peak), int(warmup_steps), int(total_steps)

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    warm = self.peak * (step + 1.0) / max(self.warmup_steps, 1)
    decay_len = max(self.total_steps - self.warmup_steps, 1)
    decay = self.peak * tf.maximum(0.0, 1.0 - (step - self.warmup_steps) / decay_len)
    return tf.where(step < self.warmup_steps, warm, decay)

  def get_config(self):
    return {"peak": self.peak, "warmup_steps": self.warmup_steps, "total_steps": self.total_steps}


def make_optimizer(learning_rate: float, steps: int, warmup_fraction: float,
                   weight_decay: float) -> keras.optimizers.Optimizer:
  schedule = WarmupLinearDecay(learning_rate, int(round(warmup_fraction * steps)), steps)
  opt = keras.optimizers.AdamW(learning_rate=schedule, weight_decay=weight_decay,
                               beta_1=0.9, beta_2=0.999, epsilon=1e-6)
  opt.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
  return opt


def set_precision(mixed: bool) -> None:
  keras.mixed_precision.set_global_policy("mixed_bfloat16" if mixed else "float32")


# ------------------------------------------------------------------------------------------
# Initialisation from another run.
# ------------------------------------------------------------------------------------------


def resolve_checkpoint(path: str) -> str:
  """A checkpoint prefix from a prefix, a `checkpoints/` dir or a run dir."""
  for candidate in (path, os.path.join(path, CHECKPOINT_DIR)):
    if tf.io.gfile.isdir(candidate):
      latest = tf.train.latest_checkpoint(candidate)
      if latest:
        return latest
  if tf.io.gfile.exists(path + ".index"):
    return path
  raise FileNotFoundError(f"--init {path}: no checkpoint there")


def _children(prefix: str, *path: str) -> set[str]:
  """Names of the objects under `path` in a checkpoint's object graph (variable names alone
  do not tell: a variable is saved under its first path, often the optimizer's)."""
  from tensorflow.core.protobuf import trackable_object_graph_pb2
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(tf.train.load_checkpoint(prefix).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
  node = graph.nodes[0]
  for name in path:
    ids = [c.node_id for c in node.children if c.local_name == name]
    if not ids:
      return set()
    node = graph.nodes[ids[0]]
  return {c.local_name for c in node.children}


def init_towers(model, path: str) -> None:
  """Restores named towers from a two-tower or MLM checkpoint, loudly.

  Two-tower run: `query_tower` and `doc_tower` (projection included). MLM run: its
  `backbone` goes into the backbone of both towers (their projections stay random), as the
  paper's MLM baseline. Every variable of what we restore must be found in the checkpoint.
  """
  prefix = resolve_checkpoint(path)
  saved = _children(prefix, "model")
  if "query_tower" in saved:
    parts = {"query_tower": model.query_tower}
    if not model.shared_towers:
      parts["doc_tower"] = model.doc_tower
    status = tf.train.Checkpoint(model=tf.train.Checkpoint(**parts)).restore(prefix)
    status.expect_partial().assert_existing_objects_matched()
    restored = sum(len(p.weights) for p in parts.values())
    logger.warning("INIT: restored %s (%d variables) from two-tower checkpoint %s",
                   " + ".join(parts), restored, prefix)
  elif "backbone" in saved:
    towers = [model.query_tower] if model.shared_towers else [model.query_tower, model.doc_tower]
    for tower in towers:
      if not hasattr(tower, "backbone"):
        raise ValueError(f"--init {path}: an MLM checkpoint needs Transformer towers")
      status = tf.train.Checkpoint(model=tf.train.Checkpoint(backbone=tower.backbone)).restore(prefix)
      status.expect_partial().assert_existing_objects_matched()
    logger.warning("INIT: restored the MLM backbone (%d variables) from %s into %s; "
                   "projections are random", len(towers[0].backbone.weights), prefix,
                   " and ".join(t.name for t in towers))
  else:
    raise ValueError(f"--init {prefix}: neither a two-tower nor an MLM checkpoint")


# ------------------------------------------------------------------------------------------
# The training loop.
# ------------------------------------------------------------------------------------------


class _SaveCheckpoint(keras.callbacks.Callback):
  """Saves model + optimizer at the end of each Keras epoch, numbered by optimizer step."""

  def __init__(self, manager: tf.train.CheckpointManager):
    super().__init__()
    self.manager = manager

  def on_epoch_end(self, epoch, logs=None):
    step = int(self.model.optimizer.iterations.numpy())
    path = self.manager.save(checkpoint_number=step)
    logger.info("checkpoint at step %d: %s", step, path)


def _is_chief(strategy) -> bool:
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.task_type:
    return True
  return resolver.task_type == "chief" or (
      resolver.task_type == "worker" and resolver.task_id == 0)


def fit(model: keras.Model, train_ds: tf.data.Dataset, eval_ds: tf.data.Dataset | None,
        cfg: config_lib.PretrainConfig, out_dir: str, strategy: tf.distribute.Strategy,
        steps: int, callbacks: Sequence[keras.callbacks.Callback] = (),
        verbose: int | str = "auto") -> dict:
  """Trains `model` (built and compiled in `strategy.scope()`) to `steps` optimizer steps,
  resuming from `<out_dir>/checkpoints` when a checkpoint is there. Returns the history
  of this invocation ({metric: [per epoch]})."""
  t = cfg.trainer
  per_epoch = max(1, min(t.checkpoint_every, steps))
  epochs = math.ceil(steps / per_epoch)
  if epochs * per_epoch != steps:
    logger.info("steps %d rounded up to %d (a multiple of checkpoint_every=%d)", steps,
                epochs * per_epoch, per_epoch)
  ckpt_dir = os.path.join(out_dir, CHECKPOINT_DIR)
  if not _is_chief(strategy):  # every worker writes; only the chief's copy is kept
    ckpt_dir = os.path.join(out_dir, "tmp_workers", f"worker_{strategy.cluster_resolver.task_id}")
  with strategy.scope():
    model.optimizer.build(model.trainable_variables)
  checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
  manager = tf.train.CheckpointManager(checkpoint, ckpt_dir, max_to_keep=t.keep_checkpoints)
  if manager.latest_checkpoint:
    checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
    logger.warning("RESUME: restored %s (step %d)", manager.latest_checkpoint,
                   int(model.optimizer.iterations.numpy()))
  step = int(model.optimizer.iterations.numpy())
  initial_epoch = step // per_epoch
  if initial_epoch >= epochs:
    logger.info("already trained %d steps (>= %d): nothing to do", step, steps)
    return {}
  if cfg.runtime.strategy == "multi_worker":
    return _custom_loop(model, train_ds, strategy, manager, per_epoch, epochs, initial_epoch,
                        out_dir)
  cbs = list(callbacks) + [
      _SaveCheckpoint(manager),
      keras.callbacks.TensorBoard(os.path.join(out_dir, LOG_DIR), update_freq=max(1, per_epoch // 10)),
      keras.callbacks.CSVLogger(os.path.join(out_dir, HISTORY_FILE), append=True),
  ]
  history = model.fit(train_ds, epochs=epochs, steps_per_epoch=per_epoch,
                      initial_epoch=initial_epoch, validation_data=eval_ds,
                      validation_steps=t.eval_steps if eval_ds is not None else None,
                      callbacks=cbs, verbose=verbose)
  return history.history


def _custom_loop(model, train_ds, strategy, manager, per_epoch, epochs, initial_epoch,
                 out_dir) -> dict:
  """`strategy.run(model.train_step)` for MultiWorkerMirroredStrategy (no Keras fit)."""
  dist_ds = strategy.experimental_distribute_dataset(train_ds)
  writer = tf.summary.create_file_writer(os.path.join(out_dir, LOG_DIR, "train"))

  @tf.function
  def step_fn(batch):
    logs = strategy.run(model.train_step, args=(batch,))
    return {k: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None) for k, v in logs.items()}

  history: dict[str, list] = {}
  iterator = iter(dist_ds)
  for epoch in range(initial_epoch, epochs):
    for m in model.metrics:
      m.reset_state()
    bar = keras.utils.Progbar(per_epoch, stateful_metrics=None)
    for i in range(per_epoch):
      logs = step_fn(next(iterator))
      bar.update(i + 1, [(k, float(v)) for k, v in logs.items()])
    step = int(model.optimizer.iterations.numpy())
    with writer.as_default(step=step):
      for k, v in logs.items():
        tf.summary.scalar(f"epoch_{k}", v)
        history.setdefault(k, []).append(float(v))
    manager.save(checkpoint_number=step)
    logger.info("epoch %d/%d step %d: %s", epoch + 1, epochs, step,
                json.dumps({k: round(float(v), 4) for k, v in logs.items()}))
  return history


def write_config(out_dir: str, cfg: config_lib.PretrainConfig, extra: dict | None = None) -> None:
  text = cfg.to_yaml()
  if extra:
    import yaml
    text += yaml.safe_dump({"run": extra}, sort_keys=False)
  io.write_text(os.path.join(out_dir, CONFIG_FILE), text)


def log_params(model: keras.Model, cfg: config_lib.PretrainConfig) -> None:
  m = cfg.model
  logger.info("model: %s L%d/H%d/A%d d=%d q%d/d%d, %s towers, %.2fM parameters", m.encoder,
              m.num_layers, m.hidden_dim, m.num_heads, m.embedding_dim, m.query_len, m.doc_len,
              "shared" if m.shared_towers else "separate", model.count_params() / 1e6)


def train_two_tower(cfg: config_lib.PretrainConfig, args: argparse.Namespace,
                    make_datasets: Callable, learning_rate: float, steps: int,
                    callbacks: Callable | None = None) -> tuple[keras.Model, dict]:
  """Builds (in the strategy scope), initialises, trains and exports a TwoTowerModel.

  `make_datasets(tokenizer) -> (train_ds, eval_ds or None)`; `callbacks(model, tokenizer)`
  returns extra Keras callbacks (e.g. validation Recall@k).
  """
  from twotower.model import data as data_lib  # noqa: F401  (import cost paid here)
  from twotower.model import export as export_lib
  from twotower.model.tokenizer import Tokenizer
  from twotower.model.two_tower import build_two_tower

  set_precision(cfg.trainer.mixed_precision)
  keras.utils.set_random_seed(cfg.trainer.seed)
  strategy = make_strategy(cfg.runtime)
  tokenizer = Tokenizer.from_file(args.vocab, cfg.model.query_len, cfg.model.doc_len)
  vocab_size = cfg.model.vocab_size or tokenizer.vocab_size
  io.makedirs(args.out)
  write_config(args.out, cfg, {"vocab": args.vocab, "init": args.init, "steps": steps,
                               "learning_rate": learning_rate,
                               "replicas": strategy.num_replicas_in_sync})
  io.log_settings("train", {"out": args.out, "strategy": cfg.runtime.strategy,
                            "replicas": strategy.num_replicas_in_sync, "steps": steps,
                            "lr": learning_rate, "batch": cfg.data.batch_size,
                            "mixed_precision": cfg.trainer.mixed_precision})
  with strategy.scope():
    model = build_two_tower(cfg.model, vocab_size, cfg.trainer.temperature,
                            cfg.trainer.grad_cache_chunk)
    if args.init and args.init.lower() != "none":
      init_towers(model, args.init)
    else:
      logger.warning("INIT: random initialisation of the towers (no --init)")
    model.compile(optimizer=make_optimizer(learning_rate, steps, cfg.trainer.warmup_fraction,
                                           cfg.trainer.weight_decay),
                  jit_compile=cfg.trainer.jit_compile)
  log_params(model, cfg)
  train_ds, eval_ds = make_datasets(tokenizer)
  extra = callbacks(model, tokenizer) if callbacks else []
  verbose = args.verbose if args.verbose is not None else "auto"
  history = fit(model, train_ds, eval_ds, cfg, args.out, strategy, steps, extra, verbose)
  if not args.no_export and _is_chief(strategy):
    export_lib.export(model, tokenizer, args.vocab, os.path.join(args.out, EXPORT_DIR),
                      cfg.to_yaml())
  return model, history


def summary_table(history: dict) -> str:
  """The last value of each metric, one line each (the CLI's final summary)."""
  if not history:
    return "nothing trained (already at the requested step)"
  width = max(map(len, history))
  return "\n".join(f"{k:<{width}}  {v[-1]:.4f}" for k, v in history.items() if v)
