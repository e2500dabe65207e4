"""The training loop of `train.train`: Keras `fit` (default, mirrored, TPU) or a
`strategy.run` loop (multi_worker: Keras 3 `fit` fails there, keras-team/keras#20585), both
driving the same callbacks.

One Keras "epoch" is `checkpoint_every` optimizer steps. At the end of each, in this order:

  extra callbacks  e.g. finetune.RecallAtK, which adds `val_R@k` to the logs
  KeepBest         the best checkpoint so far by a logged metric (or its moving average), in
                   checkpoints/best/ (TfBestCheckpoint); with a patience, it stops a run that
                   stopped improving
  History          one row per checkpoint (its step first) in history.csv and in memory
  SaveCheckpoint   model + optimizer, numbered by optimizer step (a killed run resumes there);
                   after History, so a checkpoint on disk always has its history row
  Progress         a tqdm bar over all steps, or one line per checkpoint, or nothing
  TensorBoard      logs/ (Keras fit; the custom loop writes the same epoch scalars itself)

History, KeepBest and Progress are backend-free (callbacks.py, shared with jax_train.py);
this module is TensorFlow's: the tf.train checkpoints, `fit` and the multi-worker loop.
"""

from __future__ import annotations

import logging
from typing import Sequence

import keras
import tensorflow as tf

from twotower.core import contracts
from twotower.model import grad_cache
# The backend-free callbacks (callbacks.py), named here too, as callers have found them.
from twotower.model.callbacks import (History, KeepBest, Progress, _floats, _step,  # noqa: F401
                                      higher_is_better)
from twotower.model.jobs import PROGRESS_MODES  # noqa: F401

logger = logging.getLogger(__name__)


class SaveCheckpoint(keras.callbacks.Callback):
  """Saves model + optimizer at the end of each epoch, numbered by optimizer step."""

  def __init__(self, manager: tf.train.CheckpointManager):
    super().__init__()
    self.manager = manager

  def on_epoch_end(self, epoch, logs=None):
    step = _step(self.model)
    logger.info("checkpoint at step %d: %s", step, self.manager.save(checkpoint_number=step))


class TfBestCheckpoint:
  """KeepBest's saver on TensorFlow: the model's weights as a tf.train checkpoint (one kept)
  under `directory`, numbered by step."""

  def __init__(self, model: keras.Model, directory: str):
    self.manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), directory,
                                              max_to_keep=1)

  def latest_step(self) -> int | None:
    latest = self.manager.latest_checkpoint
    return int(latest.rsplit("-", 1)[1]) if latest else None

  def save(self, step: int) -> None:
    self.manager.save(checkpoint_number=step)

  def restore(self, model: keras.Model) -> None:
    status = tf.train.Checkpoint(model=model).restore(self.manager.latest_checkpoint)
    status.expect_partial().assert_existing_objects_matched()


def fit(model: keras.Model, train_ds: tf.data.Dataset, eval_ds: tf.data.Dataset | None, *,
        strategy: tf.distribute.Strategy, custom_loop: bool, epochs: int, per_epoch: int,
        initial_epoch: int, eval_steps: int, callbacks: Sequence[keras.callbacks.Callback],
        log_dir: str | None) -> None:
  """Trains from `initial_epoch` to `epochs` epochs of `per_epoch` steps."""
  if custom_loop:
    _custom_loop(model, train_ds, strategy, list(callbacks), per_epoch, epochs, initial_epoch,
                 log_dir)
    return
  cbs = list(callbacks)
  if log_dir:
    cbs.append(keras.callbacks.TensorBoard(log_dir, update_freq=max(1, per_epoch // 10)))
  # shuffle=False: the datasets shuffle themselves (seeded); Keras's default True only warns
  # that it is ignored for a tf.data input.
  model.fit(train_ds, epochs=epochs, steps_per_epoch=per_epoch, initial_epoch=initial_epoch,
            validation_data=eval_ds, validation_steps=eval_steps if eval_ds is not None else None,
            callbacks=cbs, verbose=0, shuffle=False)


def _custom_loop(model, train_ds, strategy, callbacks, per_epoch, epochs, initial_epoch,
                 log_dir) -> None:
  """`strategy.run(model.train_step)` for MultiWorkerMirroredStrategy, with the callbacks
  called as Keras fit calls them."""
  dist_ds = strategy.experimental_distribute_dataset(train_ds)
  writer = tf.summary.create_file_writer(f"{log_dir}/train") if log_dir else None

  @tf.function
  def step_fn(batch):
    logs = strategy.run(model.train_step, args=(batch,))
    return {k: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None) for k, v in logs.items()}

  cbs = keras.callbacks.CallbackList(callbacks, model=model)
  model.stop_training = False  # a callback may set it (KeepBest's patience), as under fit
  cbs.on_train_begin()
  iterator = iter(dist_ds)
  for epoch in range(initial_epoch, epochs):
    for m in model.metrics:
      m.reset_state()
    cbs.on_epoch_begin(epoch)
    logs = {}
    for i in range(per_epoch):
      logs = step_fn(next(iterator))
      cbs.on_train_batch_end(i, logs)
    logs = _floats(logs)
    if writer is not None:
      with writer.as_default(step=_step(model)):
        for k, v in logs.items():
          tf.summary.scalar(f"epoch_{k}", v)
    cbs.on_epoch_end(epoch, logs)
    if model.stop_training:
      break
  cbs.on_train_end()


def checkpoint_manager(model: keras.Model, run_dir: str, keep: int,
                       worker: int | None) -> tf.train.CheckpointManager:
  """Model + optimizer under `run_dir/checkpoints`; a non-chief worker of a multi-worker run
  writes its own copy under `run_dir/tmp_workers/worker_<i>` (only the chief's is kept)."""
  directory = contracts.checkpoint_dir(run_dir)
  if worker is not None:
    directory = contracts.worker_dir(run_dir, worker)
  # The dropout RNG states are not model weights, so Keras leaves them out: without them a
  # resumed run draws other masks than an uninterrupted one (tests/test_model_determinism.py).
  checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer,
                                   dropout_rng=grad_cache.seed_states([model]))
  return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=keep)


def restore_latest(manager: tf.train.CheckpointManager) -> None:
  """Restores the latest checkpoint of a `checkpoint_manager`, every object matched. One
  written before the dropout RNG states were saved restores without them (they keep their
  seeds), with a warning: that run goes on, but not bit-identical to one never stopped."""
  path, checkpoint = manager.latest_checkpoint, manager.checkpoint
  if any(name.startswith("dropout_rng/") for name, _ in tf.train.list_variables(path)):
    checkpoint.restore(path).assert_existing_objects_matched()
    return
  tf.train.Checkpoint(model=checkpoint.model, optimizer=checkpoint.optimizer).restore(
      path).assert_existing_objects_matched()
  if checkpoint.dropout_rng:
    logger.warning("%s holds no dropout RNG states (written by an older twotower): the "
                   "resumed run draws other dropout masks than an uninterrupted one", path)
