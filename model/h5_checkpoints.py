"""The JAX trainer's checkpoints, in Keras's backend-neutral weights format, and how any
backend reads them (fine-tuning `--init` a JAX run on TensorFlow, or on JAX).

  OUT/checkpoints/ckpt-<step>.weights.h5   model + optimizer (`model.save_weights`: Keras's
                                           H5 layout, the same on TensorFlow and JAX)
  OUT/checkpoints/ckpt-<step>.rng.npz      the dropout RNG states (Keras `SeedGenerator`
                                           states are no weights, and without them a resumed
                                           run draws other masks than one never stopped)
  OUT/checkpoints/best/best-<step>.weights.h5   KeepBest's checkpoint (finetune --select)

The `.weights.h5` file is written last and atomically (a temporary name, then a rename), so
a checkpoint exists once it is whole; the `keep` newest are kept, as tf.train's manager
keeps them. A TensorFlow run's checkpoints (tf.train's `ckpt-<step>.index`) are a format of
their own: each trainer refuses the other's run folder to resume, by name.
"""

from __future__ import annotations

import glob
import logging
import os
import re

import keras
import numpy as np

from twotower.core import contracts

logger = logging.getLogger(__name__)

WEIGHTS_SUFFIX = ".weights.h5"
RNG_SUFFIX = ".rng.npz"
_STEP = re.compile(r"^(?:ckpt|best)-(\d+)\.weights\.h5$")


def _steps(directory: str, prefix: str = "ckpt") -> list[int]:
  """Steps of the whole checkpoints in `directory`, ascending."""
  names = (os.path.basename(p) for p in glob.glob(os.path.join(directory, f"{prefix}-*")))
  return sorted(int(m.group(1)) for m in map(_STEP.match, names) if m)


def weights_path(directory: str, step: int, prefix: str = "ckpt") -> str:
  return os.path.join(directory, f"{prefix}-{step}{WEIGHTS_SUFFIX}")


def latest(directory: str) -> str | None:
  """The newest `ckpt-<step>.weights.h5` in `directory`, None when there is none."""
  steps = _steps(directory)
  return weights_path(directory, steps[-1]) if steps else None


def holds_tf_checkpoints(directory: str) -> bool:
  """Whether `directory` holds tf.train checkpoints (a TensorFlow run's)."""
  return bool(glob.glob(os.path.join(directory, "ckpt-*.index")))


def seed_states(model: keras.Model) -> list:
  """The model's dropout RNG states: its variables that are not weights, in a stable order
  (grad_cache.seed_states' rule, without TensorFlow)."""
  weights = {id(w) for w in model.weights}
  return [v for v in model.variables if id(v) not in weights]


def _atomic_save_weights(model: keras.Model, path: str) -> None:
  tmp = os.path.join(os.path.dirname(path), f".tmp-{os.path.basename(path)}")
  model.save_weights(tmp)
  os.replace(tmp, path)


def save(model: keras.Model, directory: str, step: int, keep: int) -> str:
  """Writes checkpoint `step` (RNG states, then the weights, atomically); removes the
  oldest beyond `keep`. Returns the weights' path."""
  os.makedirs(directory, exist_ok=True)
  path = weights_path(directory, step)
  rng = path[:-len(WEIGHTS_SUFFIX)] + RNG_SUFFIX
  states = {f"{i:04d}:{v.path}": np.asarray(v.numpy()) for i, v in enumerate(seed_states(model))}
  tmp = os.path.join(directory, f".tmp-{os.path.basename(rng)}")
  with open(tmp, "wb") as f:
    np.savez(f, **states)
  os.replace(tmp, rng)
  _atomic_save_weights(model, path)
  for old in _steps(directory)[:-keep] if keep > 0 else ():
    for suffix in (WEIGHTS_SUFFIX, RNG_SUFFIX):
      old_path = os.path.join(directory, f"ckpt-{old}{suffix}")
      if os.path.exists(old_path):
        os.remove(old_path)
  return path


def restore(model: keras.Model, path: str) -> None:
  """Loads checkpoint `path` (weights, optimizer and, where saved, the RNG states) into a
  built model whose optimizer is built."""
  model.load_weights(path)
  rng = path[:-len(WEIGHTS_SUFFIX)] + RNG_SUFFIX
  states = seed_states(model)
  if not os.path.exists(rng):
    if states:
      logger.warning("%s has no dropout RNG states beside it: the resumed run draws other "
                     "dropout masks than an uninterrupted one", path)
    return
  with np.load(rng) as saved:
    values = [saved[k] for k in sorted(saved.files)]
  if len(values) != len(states):
    raise ValueError(f"{rng}: {len(values)} RNG states for a model with {len(states)}")
  for variable, value in zip(states, values):
    variable.assign(value)


class BestWeights:
  """KeepBest's saver on JAX (callbacks.BestSaver): the model's weights of the best
  checkpoint as `best-<step>.weights.h5` under `directory`, one kept."""

  def __init__(self, model: keras.Model, directory: str):
    self.model, self.directory = model, directory

  def latest_step(self) -> int | None:
    steps = _steps(self.directory, "best")
    return steps[-1] if steps else None

  def save(self, step: int) -> None:
    os.makedirs(self.directory, exist_ok=True)
    previous = self.latest_step()
    _atomic_save_weights(self.model, weights_path(self.directory, step, "best"))
    if previous is not None and previous != step:
      os.remove(weights_path(self.directory, previous, "best"))

  def restore(self, model: keras.Model) -> None:
    model.load_weights(weights_path(self.directory, self.latest_step(), "best"))


def init_weights(path: str) -> tuple[str, str] | None:
  """(run dir, weights file) of an `--init` that names a JAX run: its run dir, its
  checkpoints/ dir or one `ckpt-<step>.weights.h5`; None for anything else."""
  path = path.rstrip("/")
  if path.endswith(WEIGHTS_SUFFIX) and os.path.isfile(path):
    return os.path.dirname(os.path.dirname(os.path.abspath(path))), path
  for run_dir, directory in ((os.path.dirname(path), path),
                             (path, contracts.checkpoint_dir(path))):
    found = latest(directory) if os.path.isdir(directory) else None
    if found:
      return run_dir, found
  return None


def init_towers_from_weights(model, run_dir: str, weights: str) -> None:
  """Restores `model`'s towers from a JAX run's checkpoint, loudly: the run's model (from its
  config.yaml) is built, the checkpoint loaded into it (every weight of it must be there),
  and its towers' weights copied into `model`'s (shapes checked)."""
  from twotower.core import files as io  # pylint: disable=import-outside-toplevel
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  from twotower.model.two_tower import build_two_tower  # pylint: disable=import-outside-toplevel
  import yaml  # pylint: disable=import-outside-toplevel
  config_path = contracts.run_config_path(run_dir)
  raw = yaml.safe_load(io.read_text(config_path)) or {}
  raw.pop("run", None)
  source = config_lib.from_dict(raw, config_path)
  vocab_size = model.query_tower.get_config()["vocab_size"]
  twin = build_two_tower(source.model, source.model.vocab_size or vocab_size)
  twin.load_weights(weights, skip_mismatch=False)
  pairs = [("query_tower", twin.query_tower, model.query_tower)]
  if not model.shared_towers:
    pairs.append(("doc_tower", twin.doc_tower, model.doc_tower))
  restored = 0
  for name, src, dst in pairs:
    if len(src.weights) != len(dst.weights):
      raise ValueError(f"--init {weights}: its {name} has {len(src.weights)} weights, this "
                       f"model's {len(dst.weights)} (another architecture)")
    for s, d in zip(src.weights, dst.weights):
      if tuple(s.shape) != tuple(d.shape):
        raise ValueError(f"--init {weights}: {name} weight {d.path} is {tuple(s.shape)} "
                         f"there, {tuple(d.shape)} here (another architecture)")
      d.assign(keras.ops.convert_to_numpy(s.value))
      restored += 1
  logger.warning("INIT: restored %s (%d variables) from the JAX run's checkpoint %s",
                 " + ".join(n for n, _, _ in pairs), restored, weights)
