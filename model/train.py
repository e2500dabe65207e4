"""The one trainer behind `twotower pretrain` (two towers on ICT / BFS / WLP, or the MLM
backbone) and `twotower finetune`: a typed job in, a `TrainResult` out, no flags.

  train(job, build_model, make_datasets, learning_rate=, steps=, ...) -> TrainResult
    1. set-up     a fresh Keras state, the precision, every seed (TrainerConfig.deterministic;
                  op_determinism for GPUs), the strategy, the tokenizer, OUT/config.yaml
    2. model      build_model(vocab_size) in the strategy scope (two_tower_builder restores
                  `init` towers), compiled with AdamW, warm-up and linear decay
    3. data       make_datasets(tokenizer) -> (train, held-out or None)
    4. loop       loop.fit: Keras fit, or a strategy.run loop under multi_worker; a checkpoint
                  every `checkpoint_every` steps; a killed run resumes from the latest one
                  (the optimizer's step counter says where)
    5. selection  with `select`, the weights of the best checkpoint by that logged metric
    6. export     OUT/export/saved_model with string signatures (two towers only)

Strategies (`runtime.strategy`): default, mirrored and tpu run Keras `fit` with the model's
own `train_step`; multi_worker (TF_CONFIG) runs the custom loop over the same `train_step`,
because Keras 3 `fit` fails under MultiWorkerMirroredStrategy (keras-team/keras#20585).
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any, Callable, Mapping

import keras
import tensorflow as tf

from twotower.core import contracts
from twotower.core import files as io
from twotower.core import outputs
from twotower.model import callbacks as callbacks_lib
from twotower.model import config as config_lib
from twotower.model import loop
# The run's types and bookkeeping (no backend: shared with jax_train.py) and the optimizer,
# named here too, as callers have always found them.
from twotower.model.jobs import (PROGRESS_MODES, TrainResult, TrainRunConfig,  # noqa: F401
                                 checkpoint_interval, claim_run_dir, config_text, run_settings,
                                 summary_table)
from twotower.model.optimizer import WarmupLinearDecay, make_optimizer  # noqa: F401

logger = logging.getLogger(__name__)


#: build_model(vocab_size) -> a compiled-to-be keras.Model, called in the strategy scope.
BuildModel = Callable[[int], keras.Model]
#: make_datasets(tokenizer) -> (training batches, held-out batches or None).
MakeDatasets = Callable[[Any], "tuple[tf.data.Dataset, tf.data.Dataset | None]"]
#: make_callbacks(model, tokenizer) -> extra Keras callbacks, run first at each checkpoint.
MakeCallbacks = Callable[[keras.Model, Any], "list[keras.callbacks.Callback]"]


# ------------------------------------------------------------------------------------------
# Set-up: Keras state, precision, determinism, strategy, optimizer.
# ------------------------------------------------------------------------------------------


def set_up(trainer: config_lib.TrainerConfig) -> None:
  """A fresh Keras state (what ran before in this process changes nothing), the compute
  precision, op determinism when `trainer.op_determinism` (and `deterministic`), and every
  seed (Python, NumPy, tf.random, Keras initialisers and dropout); data order is seeded by
  the datasets."""
  keras.backend.clear_session()
  keras.mixed_precision.set_global_policy(
      "mixed_bfloat16" if trainer.mixed_precision else "float32")
  _set_op_determinism(trainer.deterministic and trainer.op_determinism)
  keras.utils.set_random_seed(trainer.seed)


def _op_determinism() -> bool:
  from tensorflow.python.framework import config as tf_config  # pylint: disable=import-outside-toplevel
  return tf_config.is_op_determinism_enabled()


def _set_op_determinism(enabled: bool) -> None:
  if enabled:
    tf.config.experimental.enable_op_determinism()
  else:
    # TensorFlow exports no switch back (tf.config.experimental has only `enable_`).
    from tensorflow.python.framework import config as tf_config  # pylint: disable=import-outside-toplevel
    tf_config.disable_op_determinism()


def make_strategy(runtime: config_lib.RuntimeConfig) -> tf.distribute.Strategy:
  if runtime.strategy == "mirrored":
    return tf.distribute.MirroredStrategy()
  if runtime.strategy == "multi_worker":
    if "TF_CONFIG" not in os.environ:
      raise ValueError("runtime.strategy=multi_worker needs the TF_CONFIG environment variable")
    return tf.distribute.MultiWorkerMirroredStrategy()
  if runtime.strategy == "tpu":
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=runtime.tpu or None)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
  return tf.distribute.get_strategy()


def _worker(strategy) -> int | None:
  """None on the chief (the one that writes the run dir), else this worker's index."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.task_type:
    return None
  if resolver.task_type == "chief" or (resolver.task_type == "worker" and resolver.task_id == 0):
    return None
  return int(resolver.task_id)


# ------------------------------------------------------------------------------------------
# Initialisation from another run.
# ------------------------------------------------------------------------------------------


def resolve_checkpoint(path: str) -> str:
  """A checkpoint prefix from a prefix, a `checkpoints/` dir or a run dir."""
  for candidate in (path, contracts.checkpoint_dir(path)):
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
  from tensorflow.core.protobuf import trackable_object_graph_pb2  # pylint: disable=import-outside-toplevel
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
  """Restores named towers from a two-tower or MLM checkpoint, or from a run trained on JAX
  (h5_checkpoints.init_towers_from_weights), loudly.

  Two-tower run: `query_tower` and `doc_tower` (projection included). MLM run: its
  `backbone` goes into the backbone of both towers (their projections stay random), as the
  paper's MLM baseline. Every variable of what we restore must be found in the checkpoint.
  """
  try:
    prefix = resolve_checkpoint(path)
  except FileNotFoundError:
    from twotower.model import h5_checkpoints  # pylint: disable=import-outside-toplevel
    found = h5_checkpoints.init_weights(path)  # a run trained on JAX
    if not found:
      raise
    h5_checkpoints.init_towers_from_weights(model, *found)
    return
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


def two_tower_builder(cfg: config_lib.TrainingConfig, init: str | None) -> BuildModel:
  """build_model for `train`: the two towers of `cfg.model` (with the parts `cfg.objective`
  adds for pre-training: MoCo's momentum tower and queue, Condenser heads), the towers
  restored from `init` if given."""
  def build(vocab_size: int) -> keras.Model:
    # pylint: disable=import-outside-toplevel
    from twotower.model.two_tower import build_two_tower
    if cfg.objective.condenser_head_layers:
      from twotower.model.condenser import build_condenser
      model = build_condenser(cfg, vocab_size)
    else:
      model = build_two_tower(cfg.model, vocab_size, cfg.trainer.temperature,
                              cfg.trainer.grad_cache_chunk, cfg.objective.moco_queue,
                              cfg.objective.moco_momentum)
    if init and init.lower() != "none":
      init_towers(model, init)
      if model.momentum_tower is not None:  # MoCo's key encoder starts as the restored tower
        model.sync_momentum_tower()
    else:
      logger.info("INIT: random initialisation of the towers (no --init)")
    return model
  return build


# ------------------------------------------------------------------------------------------
# The one training path.
# ------------------------------------------------------------------------------------------


def train(job: TrainRunConfig, build_model: BuildModel, make_datasets: MakeDatasets, *,
          learning_rate: float, steps: int, callbacks: MakeCallbacks | None = None,
          select: str = "", select_window: int = 1, patience: int = 0, stop_at: int = 0,
          exportable: bool = True,
          run_info: Mapping[str, Any] | None = None) -> TrainResult:
  """Builds, trains (resuming from OUT/checkpoints), selects and exports one model.

  Args:
    job: the run (config, out dir, vocabulary, progress, export).
    build_model: the model factory, called in the strategy scope.
    make_datasets: the dataset factory; not called when there is nothing left to train.
    learning_rate, steps: the peak learning rate and the optimizer steps (exact where a
      checkpoint interval divides them, see `checkpoint_interval`).
    callbacks: extra callbacks (e.g. validation Recall@k), run first at each checkpoint.
    select: a logged metric ("val_R@100"): export the best checkpoint by it (higher is
      better, lower for losses) instead of the last one.
    select_window: judge each checkpoint by the trailing moving average of `select` over
      this many checkpoints (selection.best_index: the earliest best of the average, from
      the first checkpoint whose window is full).
    patience: with `select`, stop after this many checkpoints without a new best (0: train
      every step).
    stop_at: stop after this many steps of the `steps`-step schedule (0: at its end): the
      length another run chose on the same schedule (experiment.finetune_length).
    exportable: the model has query and document towers to export (not MLM).
    run_info: extra fields for the `run:` section of OUT/config.yaml.
  """
  # Op determinism is process-wide: what a run sets, it puts back (the next run, or the
  # caller's own TensorFlow code, e.g. unseeded random ops or XLA, is not changed by it).
  before = _op_determinism()
  try:
    return _train(job, build_model, make_datasets, learning_rate=learning_rate, steps=steps,
                  callbacks=callbacks, select=select, select_window=select_window,
                  patience=patience, stop_at=stop_at, exportable=exportable,
                  run_info=run_info)
  finally:
    _set_op_determinism(before)


def _train(job: TrainRunConfig, build_model: BuildModel, make_datasets: MakeDatasets, *,
           learning_rate: float, steps: int, callbacks: MakeCallbacks | None, select: str,
           select_window: int, patience: int, stop_at: int, exportable: bool,
           run_info: Mapping[str, Any] | None) -> TrainResult:
  from twotower.model import export as export_lib  # pylint: disable=import-outside-toplevel
  from twotower.model.tokenizer import Tokenizer  # pylint: disable=import-outside-toplevel
  started = time.perf_counter()
  cfg, t = job.training, job.training.trainer
  set_up(t)
  strategy = make_strategy(cfg.runtime)
  worker = _worker(strategy)
  tokenizer = Tokenizer.from_file(job.vocab, cfg.model.query_len, cfg.model.doc_len)
  if steps == 0:
    # The No-SSL baseline (experiment.demo, `--allow_untrained`): say it, so that a log never
    # passes these towers off as trained.
    logger.warning("0 steps: %s will hold the initial towers, untrained", job.out)
  # The schedule (warm-up, decay to 0) spans `steps`; the loop may stop before its end.
  length = min(stop_at, steps) if stop_at else steps
  per_epoch = checkpoint_interval(length, t.checkpoint_every)
  epochs = math.ceil(length / per_epoch)
  if epochs * per_epoch != length:
    logger.warning("steps %d rounded up to %d (a multiple of checkpoint_every=%d)", length,
                   epochs * per_epoch, per_epoch)
  text = config_text(cfg, {"vocab": job.vocab, "init": job.init, "steps": steps,
                          "learning_rate": learning_rate,
                          "replicas": strategy.num_replicas_in_sync, "select": select,
                          **(run_info or {})})
  from twotower.model import h5_checkpoints  # pylint: disable=import-outside-toplevel
  if h5_checkpoints.latest(contracts.checkpoint_dir(job.out)):
    raise ValueError(f"{job.out} holds a JAX run's checkpoints: resume it with "
                     "runtime.backend=jax (or start over in another folder)")
  if worker in (None, 0):
    # The chief owns the run dir: its manifest and config.yaml. Another worker writes only
    # under its own folder, and only after the model's variables are made (the strategy's
    # first collective, which waits for the chief, so after its claim): a config.yaml of
    # theirs could land before the claim, as a file no stage recorded, and stop the run.
    claim_run_dir(job, text)
    io.makedirs(job.out)
    io.write_text(contracts.run_config_path(job.out), text)
  io.log_settings("train", {"out": job.out, "strategy": cfg.runtime.strategy,
                            "replicas": strategy.num_replicas_in_sync, "steps": steps,
                            "lr": learning_rate, "batch": cfg.data.batch_size,
                            "mixed_precision": t.mixed_precision,
                            "deterministic": t.deterministic,
                            "op_determinism": t.op_determinism, "seed": t.seed})
  with strategy.scope():
    model = build_model(cfg.model.vocab_size or tokenizer.vocab_size)
    model.compile(optimizer=make_optimizer(learning_rate, steps, t.warmup_fraction,
                                           t.weight_decay), jit_compile=t.jit_compile)
    model.optimizer.build(model.trainable_variables)
  logger.info("%s: %.2fM parameters (%s)", model.name, model.count_params() / 1e6, cfg.model)
  if t.jit_compile and not model.jit_compile:
    # Keras compiles nothing with XLA while op determinism is on (not every XLA op has a
    # deterministic kernel).
    logger.warning("jit_compile ignored: Keras turns XLA off under op determinism; "
                   "set trainer.op_determinism=false to compile the train step")

  # Resume, then train what is left.
  own_dir = job.out if worker is None else contracts.worker_dir(job.out, worker)
  manager = loop.checkpoint_manager(model, job.out, t.keep_checkpoints, worker)
  if manager.latest_checkpoint:
    loop.restore_latest(manager)
    logger.warning("RESUME: restored %s (step %d)", manager.latest_checkpoint,
                   int(model.optimizer.iterations.numpy()))
  step = int(model.optimizer.iterations.numpy())
  history = loop.History(contracts.history_path(job.out) if worker is None else None, step)
  keep_best = (loop.KeepBest(select, loop.TfBestCheckpoint(model,
                                                          contracts.best_checkpoint_dir(own_dir)),
                             history, window=select_window, patience=patience)
               if select else None)
  initial_epoch = step // per_epoch
  if initial_epoch >= epochs:
    logger.info("already trained %d steps (>= %d): nothing to do", step, steps)
  elif keep_best and keep_best.stopped:
    logger.info("stopped at step %d (%d checkpoints past the best): nothing to do", step,
                patience)
  else:
    train_ds, eval_ds = make_datasets(tokenizer)
    # The training input is one endless seeded stream: skip what the restored steps trained
    # on, so that a resumed run sees the batches an uninterrupted one would (it re-read the
    # stream from its start before). Skipping runs the input pipeline (so its seeded shuffles
    # and masks advance as they did), not the model.
    train_ds = train_ds.skip(step) if step else train_ds
    # Before History: it adds the row's wall_seconds.
    cbs = [callbacks_lib.WallBudget(job.wall_budget_s)] if job.wall_budget_s else []
    cbs += list(callbacks(model, tokenizer) if callbacks else [])
    cbs += [keep_best] if keep_best else []
    # History before SaveCheckpoint: every checkpoint on disk has its row in history.csv (a
    # kill between the two leaves a row past the last checkpoint, which a resume drops).
    cbs += [history, loop.SaveCheckpoint(manager),
            loop.Progress(job.progress, epochs * per_epoch, step)]
    loop.fit(model, train_ds, eval_ds, strategy=strategy,
             custom_loop=cfg.runtime.strategy == "multi_worker", epochs=epochs,
             per_epoch=per_epoch, initial_epoch=initial_epoch, eval_steps=t.eval_steps,
             callbacks=cbs, log_dir=contracts.log_dir(job.out) if worker is None else None)
  steps_done = int(model.optimizer.iterations.numpy())
  selected = keep_best.restore(model) if keep_best else None
  if keep_best and selected is not None:
    logger.warning("SELECT: exporting step %d of %d, the best %s (%.4f)", selected, steps_done,
                   keep_best.key, keep_best.best)

  saved = None
  if job.export and exportable and worker is None:
    saved = export_lib.export(model, tokenizer, job.vocab, contracts.export_dir(job.out),
                              cfg.to_yaml())
  if worker in (None, 0):
    outputs.write_manifest(job.out, job.STAGE, run_settings(text), inputs=[job.vocab])
  return TrainResult(out=job.out, history=history.as_dict(), saved_model=saved,
                     steps=steps_done, seconds=time.perf_counter() - started,
                     selected_step=selected if selected is not None else steps_done,
                     select=keep_best.key if keep_best else select)


