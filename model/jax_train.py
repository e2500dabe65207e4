"""The trainer on JAX (`runtime.backend: jax`): the same job, run folder and callbacks as the
TensorFlow trainer (train.py), with what only TensorFlow had replaced:

  train(job, build_model, make_batches, learning_rate=, steps=, ...) -> TrainResult
    1. set-up     a fresh Keras state, the precision (bfloat16 compute where
                  trainer.mixed_precision), every seed; every local device in one
                  `keras.distribution.DataParallel` (the batch split over them, one program
                  over the global batch: in-batch negatives are the global batch's)
    2. model      build_model(vocab_size), compiled with XLA (always, on JAX) and the same
                  AdamW, warm-up and linear decay (optimizer.py)
    3. data       make_batches(tokenizer, skip) -> (training batches, held-out batches or
                  None): numpy batches from np_input.py, read and tokenized without
                  TensorFlow on background threads
    4. loop       Keras `fit`, which differentiates TwoTowerModel.compute_loss; a checkpoint
                  (h5_checkpoints.py: .weights.h5, backend-neutral) every `checkpoint_every`
                  steps; a killed run resumes from the latest one
    5. selection  with `select`, the weights of the best checkpoint by that logged metric
    6. export     OUT/export/two_tower.keras, vocab.txt, config.yaml, then the SavedModel
                  with string signatures written in a TensorFlow process (export.py)

This module and everything it imports run without TensorFlow: the process that trains on
JAX keeps it out (jax_launch.py), as on a machine that has none. TensorBoard logs (logs/) are
TensorFlow's and not written here; history.csv is.

What trains on TensorFlow only (refused by config.TrainingConfig for runtime.backend=jax,
naming the setting): MLM, the gradient cache, MoCo, the Condenser head.
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any, Callable, Iterator, Mapping

import keras
import numpy as np

from twotower.core import contracts
from twotower.core import files as io
from twotower.core import outputs
from twotower.model import callbacks as callbacks_lib
from twotower.model import config as config_lib
from twotower.model import h5_checkpoints
from twotower.model.jobs import (TrainResult, TrainRunConfig, checkpoint_interval, claim_run_dir,
                                 config_text, run_settings)
from twotower.model.optimizer import make_optimizer

logger = logging.getLogger(__name__)

#: make_batches(tokenizer, skip) -> (an iterator of training batches, skipping the first
#: `skip`; a list of held-out batches or None).
MakeBatches = Callable[[Any, int], "tuple[Iterator[dict], list[dict] | None]"]


def set_up(trainer: config_lib.TrainerConfig) -> None:
  """A fresh Keras state, the compute precision and every seed (Python, NumPy, Keras's
  initialisers and dropout). XLA on CPU gives the same floats run after run; on GPUs
  `trainer.op_determinism` asks XLA for deterministic kernels (--xla_gpu_deterministic_ops),
  which must be set before JAX starts: jax_launch.py does, here it is only checked."""
  keras.backend.clear_session()
  keras.mixed_precision.set_global_policy(
      "mixed_bfloat16" if trainer.mixed_precision else "float32")
  keras.utils.set_random_seed(trainer.seed)


def set_distribution(batch_size: int) -> int:
  """Every local device in one data-parallel mesh (none for one device); the number of
  devices. The global batch must split evenly over them."""
  import jax  # pylint: disable=import-outside-toplevel
  devices = jax.local_devices()
  if len(devices) > 1:
    if batch_size % len(devices):
      raise ValueError(f"data.batch_size={batch_size} does not split over {len(devices)} "
                       "local devices (keras.distribution.DataParallel): make it a multiple")
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
  else:
    keras.distribution.set_distribution(None)
  return len(devices)


def _tokenizer(job: TrainRunConfig):
  from twotower.model.np_tokenizer import NumpyTokenizer  # pylint: disable=import-outside-toplevel
  m = job.training.model
  return NumpyTokenizer.from_file(job.vocab, m.query_len, m.doc_len)


def two_tower_builder(cfg: config_lib.TrainingConfig, init: str | None):
  """build_model for `train`: the two towers of `cfg.model`, restored from `init` (a JAX
  run, or a `.keras` file such as any run's export/two_tower.keras) if given."""
  def build(vocab_size: int) -> keras.Model:
    from twotower.model.two_tower import build_two_tower  # pylint: disable=import-outside-toplevel
    model = build_two_tower(cfg.model, vocab_size, cfg.trainer.temperature)
    if init and init.lower() != "none":
      init_towers(model, init)
    else:
      logger.info("INIT: random initialisation of the towers (no --init)")
    return model
  return build


def init_towers(model, path: str) -> None:
  """Restores the towers from a JAX run (h5_checkpoints) or a `.keras` file; a TensorFlow
  run's tf.train checkpoints are refused by name (they need TensorFlow to read)."""
  found = h5_checkpoints.init_weights(path)
  if found:
    h5_checkpoints.init_towers_from_weights(model, *found)
    return
  keras_file = (path if path.endswith(".keras")
                else os.path.join(contracts.export_dir(path), contracts.KERAS_FILE))
  if io.match_files(keras_file, missing_ok=True):
    source = keras.saving.load_model(keras_file, compile=False)
    pairs = [("query_tower", source.query_tower, model.query_tower)]
    if not model.shared_towers:
      pairs.append(("doc_tower", source.doc_tower, model.doc_tower))
    for name, src, dst in pairs:
      if [tuple(w.shape) for w in src.weights] != [tuple(w.shape) for w in dst.weights]:
        raise ValueError(f"--init {keras_file}: its {name} is another architecture")
      dst.set_weights(src.get_weights())
    logger.warning("INIT: restored %s from %s", " + ".join(n for n, _, _ in pairs), keras_file)
    return
  if h5_checkpoints.holds_tf_checkpoints(contracts.checkpoint_dir(path)) or (
      h5_checkpoints.holds_tf_checkpoints(path)):
    raise ValueError(f"--init {path}: a TensorFlow run's checkpoints, which need TensorFlow to "
                     "read; fine-tune it with runtime.backend=tensorflow, or export it "
                     f"(its {contracts.KERAS_FILE} is read on JAX)")
  raise FileNotFoundError(f"--init {path}: no checkpoint there")


class SaveCheckpoint(keras.callbacks.Callback):
  """Saves model + optimizer (+ the dropout RNG states) at the end of each epoch, numbered by
  optimizer step (h5_checkpoints.save)."""

  def __init__(self, directory: str, keep: int):
    super().__init__()
    self.directory, self.keep = directory, keep

  def on_epoch_end(self, epoch, logs=None):
    step = callbacks_lib._step(self.model)  # pylint: disable=protected-access
    path = h5_checkpoints.save(self.model, self.directory, step, self.keep)
    logger.info("checkpoint at step %d: %s", step, path)


def _as_inputs(batches: Iterator[dict]):
  """What Keras's `fit` takes from a Python generator: a tuple (inputs,) per batch."""
  for batch in batches:
    yield (batch,)


def _cycled(batches: list[dict]):
  while True:
    for batch in batches:
      yield (batch,)


def train(job: TrainRunConfig, build_model: Callable[[int], keras.Model],
          make_batches: MakeBatches, *, learning_rate: float, steps: int,
          callbacks: Callable | None = None, select: str = "", select_window: int = 1,
          patience: int = 0, stop_at: int = 0, exportable: bool = True,
          run_info: Mapping[str, Any] | None = None) -> TrainResult:
  """Builds, trains (resuming from OUT/checkpoints), selects and exports one model on JAX;
  the arguments are train.train's, `make_batches` in place of its datasets."""
  from twotower.model import export as export_lib  # pylint: disable=import-outside-toplevel
  started = time.perf_counter()
  cfg, t = job.training, job.training.trainer
  if cfg.runtime.backend != "jax" or keras.backend.backend() != "jax":
    raise RuntimeError(f"jax_train.train runs a runtime.backend=jax job in a Keras process on "
                       f"JAX (here: job {cfg.runtime.backend}, Keras {keras.backend.backend()})")
  set_up(t)
  devices = set_distribution(cfg.data.batch_size)
  tokenizer = _tokenizer(job)
  if steps == 0:
    logger.warning("0 steps: %s will hold the initial towers, untrained", job.out)
  length = min(stop_at, steps) if stop_at else steps
  per_epoch = checkpoint_interval(length, t.checkpoint_every)
  epochs = math.ceil(length / per_epoch)
  if epochs * per_epoch != length:
    logger.warning("steps %d rounded up to %d (a multiple of checkpoint_every=%d)", length,
                   epochs * per_epoch, per_epoch)
  text = config_text(cfg, {"vocab": job.vocab, "init": job.init, "steps": steps,
                          "learning_rate": learning_rate, "replicas": devices,
                          "select": select, **(run_info or {})})
  checkpoints = contracts.checkpoint_dir(job.out)
  if h5_checkpoints.holds_tf_checkpoints(checkpoints):
    raise ValueError(f"{job.out} holds a TensorFlow run's checkpoints: resume it with "
                     "runtime.backend=tensorflow (or start over in another folder)")
  claim_run_dir(job, text)
  io.makedirs(job.out)
  io.write_text(contracts.run_config_path(job.out), text)
  io.log_settings("train", {"out": job.out, "backend": "jax", "devices": devices,
                            "steps": steps, "lr": learning_rate, "batch": cfg.data.batch_size,
                            "mixed_precision": t.mixed_precision, "seed": t.seed})
  model = build_model(cfg.model.vocab_size or tokenizer.vocab_size)
  # XLA always: Keras on JAX without jit runs the step op by op (trainer.jit_compile is
  # TensorFlow's choice, slower on its CPU kernels).
  model.compile(optimizer=make_optimizer(learning_rate, steps, t.warmup_fraction,
                                         t.weight_decay), jit_compile=True)
  model.optimizer.build(model.trainable_variables)
  logger.info("%s: %.2fM parameters (%s)", model.name, model.count_params() / 1e6, cfg.model)

  latest = h5_checkpoints.latest(checkpoints)
  if latest:
    h5_checkpoints.restore(model, latest)
    logger.warning("RESUME: restored %s (step %d)", latest,
                   int(model.optimizer.iterations.numpy()))
  step = int(model.optimizer.iterations.numpy())
  history = callbacks_lib.History(contracts.history_path(job.out), step)
  keep_best = (callbacks_lib.KeepBest(
      select, h5_checkpoints.BestWeights(model, contracts.best_checkpoint_dir(job.out)),
      history, window=select_window, patience=patience) if select else None)
  initial_epoch = step // per_epoch
  if initial_epoch >= epochs:
    logger.info("already trained %d steps (>= %d): nothing to do", step, steps)
  elif keep_best and keep_best.stopped:
    logger.info("stopped at step %d (%d checkpoints past the best): nothing to do", step,
                patience)
  else:
    # The input skips what the restored steps trained on without decoding it, so that a
    # resumed run sees the batches an uninterrupted one would.
    train_batches, eval_batches = make_batches(tokenizer, step)
    # Before History: it adds the row's wall_seconds.
    cbs = [callbacks_lib.WallBudget(job.wall_budget_s)] if job.wall_budget_s else []
    cbs += list(callbacks(model, tokenizer) if callbacks else [])
    cbs += [keep_best] if keep_best else []
    cbs += [history, SaveCheckpoint(checkpoints, t.keep_checkpoints),
            callbacks_lib.Progress(job.progress, epochs * per_epoch, step)]
    try:
      # shuffle=False: the batches come shuffled (seeded); Keras's default only warns.
      model.fit(_as_inputs(train_batches), epochs=epochs, steps_per_epoch=per_epoch,
                initial_epoch=initial_epoch,
                validation_data=_cycled(eval_batches) if eval_batches else None,
                validation_steps=len(eval_batches) if eval_batches else None,
                callbacks=cbs, verbose=0, shuffle=False)
    finally:
      close = getattr(train_batches, "close", None)
      if close:
        close()
  steps_done = int(model.optimizer.iterations.numpy())
  selected = keep_best.restore(model) if keep_best else None
  if keep_best and selected is not None:
    logger.warning("SELECT: exporting step %d of %d, the best %s (%.4f)", selected, steps_done,
                   keep_best.key, keep_best.best)

  saved = None
  if job.export and exportable:
    out_dir = contracts.export_dir(job.out)
    export_lib.export_keras(model, job.vocab, out_dir, cfg.to_yaml())
    saved = export_lib.saved_model_in_tensorflow(out_dir)
  outputs.write_manifest(job.out, job.STAGE, run_settings(text), inputs=[job.vocab])
  return TrainResult(out=job.out, history=history.as_dict(), saved_model=saved,
                     steps=steps_done, seconds=time.perf_counter() - started,
                     selected_step=selected if selected is not None else steps_done,
                     select=keep_best.key if keep_best else select)


class JaxEncoders:
  """Embeds raw strings with a model's towers on JAX for validation (finetune.RecallAtK):
  the numpy tokenizer, then each tower's stateless call, jitted once per tower and length."""

  def __init__(self, tokenizer, model: keras.Model):
    import jax  # pylint: disable=import-outside-toplevel
    self.tokenizer, self.model = tokenizer, model

    def embed(tower):
      def fn(trainable, non_trainable, inputs):
        out, _ = tower.stateless_call(trainable, non_trainable, inputs, training=False)
        return out
      return jax.jit(fn)
    self._fns = {"query": embed(model.query_tower), "doc": embed(model.doc_tower)}

  def _embed(self, name: str, inputs: dict) -> np.ndarray:
    tower = self.model.query_tower if name == "query" else self.model.doc_tower
    values = ([v.value for v in tower.trainable_variables],
              [v.value for v in tower.non_trainable_variables])
    return np.asarray(self._fns[name](*values, inputs), np.float32)

  def queries(self, texts) -> np.ndarray:
    return self._embed("query", self.tokenizer.queries(list(texts)))

  def docs(self, titles, texts) -> np.ndarray:
    return self._embed("doc", self.tokenizer.docs(list(titles), list(texts)))
