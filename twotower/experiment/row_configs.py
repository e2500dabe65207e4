"""A grid row's model configs: the pre-training and fine-tuning `TrainingConfig` of a row
(grid.System) at a size (grid.Variant) and seed, and the word-piece cut of a BM25 row that
reads what the towers read. Pure: model.config needs no TensorFlow."""

from __future__ import annotations

from typing import Any

from twotower.experiment.grid import GridSpec, System, Variant

def _sized_like(grid_model: str, variant: Variant) -> list[str]:
  """Overrides that size another preset (BoW-MLP) like the grid's variant: same lengths,
  embedding dimension, tower sharing, batches and steps (the paper's BoW-MLP has the
  Transformer's d; a baseline with other tower sharing than the rows it is compared with
  would be handicapped, not compared)."""
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  c = config_lib.load(grid_model, variant.overrides)
  return [f"model.query_len={c.model.query_len}", f"model.doc_len={c.model.doc_len}",
          f"model.embedding_dim={c.model.embedding_dim}",
          f"model.shared_towers={str(c.model.shared_towers).lower()}",
          f"data.batch_size={c.data.batch_size}", f"trainer.steps={c.trainer.steps}",
          f"trainer.checkpoint_every={c.trainer.checkpoint_every}",
          f"trainer.eval_steps={c.trainer.eval_steps}",
          f"trainer.finetune_batch_size={c.trainer.finetune_batch_size}",
          f"trainer.finetune_steps={c.trainer.finetune_steps}"]


def model_overrides(spec: GridSpec, system: System, variant: Variant,
                    phase: str) -> tuple[str, tuple[str, ...]]:
  """(preset, overrides) of a row's model for "pretrain" or "finetune"."""
  phase_overrides = (system.pretrain_overrides if phase == "pretrain"
                     else system.finetune_overrides)
  if system.backend:
    phase_overrides += (f"runtime.backend={system.backend}",)
  if system.model:
    return system.model, tuple(_sized_like(spec.model, variant)) + phase_overrides
  return spec.model, variant.overrides + phase_overrides


def bm25_cut(spec: GridSpec, system: System) -> tuple[int, int]:
  """(doc_pieces, query_pieces) of a BM25 row cut as the towers read (`truncate: tower`): its
  own, else the grid model's doc_len / query_len; (0, 0) for whole texts."""
  if system.truncate != "tower":
    return 0, 0
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  model = config_lib.load(spec.model).model
  return system.doc_pieces or model.doc_len, system.query_pieces or model.query_len


def pretrain_config(spec: GridSpec, system: System, variant: Variant, seed: int):
  """The TrainingConfig of a row's pre-training: tasks, batch, steps (the variant's own, else
  the grid's, else the preset's; scaled for a larger batch so that as many examples are
  seen), seed."""
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  preset, overrides = model_overrides(spec, system, variant, "pretrain")
  cfg = config_lib.load(preset, overrides)
  steps = variant.pretrain_steps or spec.pretrain_steps or cfg.trainer.steps
  data: dict[str, Any] = {"tasks": tuple(system.tasks)}
  trainer: dict[str, Any] = {"seed": seed}
  if system.pretrain_batch:
    examples = steps * cfg.data.batch_size
    steps = max(1, examples // system.pretrain_batch)
    data["batch_size"] = system.pretrain_batch
    # A checkpoint interval that divides the steps: the trainer rounds the steps up to a
    # multiple of it, which would show this row more examples than the row it is compared with.
    trainer["checkpoint_every"] = max(d for d in range(1, min(cfg.trainer.checkpoint_every,
                                                             steps) + 1) if steps % d == 0)
  trainer["steps"] = steps
  return config_lib.replace(cfg, data=data, trainer=trainer)


#: A carried cell's `trainer.finetune_steps`: the length comes from its `length` dependency
#: when it runs (experiment.cells).
CARRIED_STEPS = 0


def finetune_config(spec: GridSpec, system: System, variant: Variant, ratio: int, seed: int):
  """A row's fine-tuning config at a ratio: the grid's steps; under `finetune_select`, the
  cap and its validation checkpoints, or CARRIED_STEPS where the length is carried."""
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  preset, overrides = model_overrides(spec, system, variant, "finetune")
  cfg = config_lib.load(preset, overrides)
  sel = spec.finetune_select
  if sel is not None and sel.source(ratio, seed) is not None:
    return config_lib.replace(cfg, trainer={"seed": seed, "finetune_steps": CARRIED_STEPS})
  if sel is not None and ratio in sel.max_steps:
    return config_lib.replace(cfg, trainer={"seed": seed,
                                            "finetune_steps": sel.max_steps[ratio],
                                            "checkpoint_every": sel.checkpoint_every(ratio)})
  steps = spec.finetune_steps_for(ratio) or cfg.trainer.finetune_steps
  return config_lib.replace(cfg, trainer={"seed": seed, "finetune_steps": steps})
