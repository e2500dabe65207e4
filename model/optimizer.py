"""The optimizer of every run: AdamW (no decay on biases and LayerNorm), its learning rate
warmed up linearly, then decayed linearly to 0, as the paper's BERT recipe. In `keras.ops`,
the same on TensorFlow and JAX (the schedule is saved in a `.keras` file by its registered
name, so either backend reads it back).
"""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="twotower")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
  """0 -> peak linearly over `warmup_steps`, then linearly to 0 at `total_steps`."""

  def __init__(self, peak: float, warmup_steps: int, total_steps: int):
    self.peak, self.warmup_steps, self.total_steps = float(peak), int(warmup_steps), int(total_steps)

  def __call__(self, step):
    step = ops.cast(step, "float32")
    warm = self.peak * (step + 1.0) / max(self.warmup_steps, 1)
    decay_len = max(self.total_steps - self.warmup_steps, 1)
    decay = self.peak * ops.maximum(0.0, 1.0 - (step - self.warmup_steps) / decay_len)
    return ops.where(step < self.warmup_steps, warm, decay)

  def get_config(self):
    return {"peak": self.peak, "warmup_steps": self.warmup_steps, "total_steps": self.total_steps}


def make_optimizer(learning_rate: float, steps: int, warmup_fraction: float,
                   weight_decay: float) -> keras.optimizers.Optimizer:
  schedule = WarmupLinearDecay(learning_rate, int(round(warmup_fraction * steps)), steps)
  opt = keras.optimizers.AdamW(learning_rate=schedule, weight_decay=weight_decay,
                               beta_1=0.9, beta_2=0.999, epsilon=1e-6)
  opt.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
  return opt
