"""`twotower pretrain`: pre-train the two towers on ICT / BFS / WLP pairs, or a Transformer
backbone with masked-LM (`data.tasks: [mlm]`), through the one trainer (`train.train`).

  twotower pretrain --config cpu-small --pairs DIR --vocab vocab.txt --out runs/ict \
      --tasks ict
  twotower pretrain --config cpu-small --pairs DIR --vocab vocab.txt --out runs/all \
      --tasks ict,bfs,wlp --mixture pooled
  twotower pretrain --config cpu-small --passages DIR/passages --vocab vocab.txt \
      --out runs/mlm --tasks mlm

With `objective.condenser_head_layers > 0` (Condenser / coCondenser, model/condenser.py)
the pair batches are also masked for a masked-LM head on each tower, and the model is
`condenser.CondenserTwoTowerModel`; export writes its towers only.

Several tasks are mixed by `data.mixture` (config.DataConfig): "equal" thirds, or "pooled"
(uniform over the pooled training pairs). Writes `OUT/config.yaml`, `OUT/checkpoints/`,
`OUT/logs/` (TensorBoard), `OUT/history.csv` (train and held-out loss / in-batch accuracy per
checkpoint) and `OUT/export/` (SavedModel with string signatures + .keras). Running the
same job again after a kill resumes.

`run(PretrainConfig) -> train.TrainResult` is the typed entry point; `twotower pretrain`
(twotower.commands.pretrain) is its flag parser. With `runtime.backend: jax` (`--backend
jax`) the same run trains on JAX (jax_train.py), in a process of its own unless this one is
already on JAX (jax_launch.py), with the same shards, task weights and run folder.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from typing import ClassVar

from twotower.core import contracts
from twotower.model import jobs

logger = logging.getLogger(__name__)

MLM_TASKS = ("mlm",)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PretrainConfig(jobs.TrainRunConfig):
  """A pre-training run: the tasks are `config.data.tasks` (`("mlm",)` is MLM).

  Attributes:
    pairs: the pair pipeline's output dir (pairs/<task>/, stats.json, config.json).
    passages: the passages/ dir (MLM text; default: the documents of the ICT train pairs).
    eval_split: the pair split of the held-out metrics at each checkpoint.
  """
  pairs: str | None = None
  passages: str | None = None
  eval_split: str = contracts.HELDOUT

  STAGE: ClassVar[str] = "pretrain"


def run(job: PretrainConfig) -> jobs.TrainResult:
  """Pre-trains (or resumes) `job` and returns its result."""
  if not isinstance(job, PretrainConfig):
    raise TypeError(f"pretrain.run takes a PretrainConfig, not {type(job).__name__}; flags are "
                    "parsed by twotower.commands.pretrain.parse(argv)")
  tasks = tuple(job.training.data.tasks)
  if tasks == MLM_TASKS:
    from twotower.model import mlm  # pylint: disable=import-outside-toplevel
    return mlm.run(job)
  unknown = sorted(set(tasks) - set(contracts.PAIR_TASKS))
  if unknown or not tasks:
    raise ValueError(f"data.tasks: unknown {unknown or 'empty'}; use a subset of "
                     f"{contracts.PAIR_TASKS}, or mlm alone")
  if not job.pairs:
    raise ValueError("ICT/BFS/WLP/crop pre-training needs the pair pipeline's output (--pairs DIR)")
  from twotower.model import pair_files  # pylint: disable=import-outside-toplevel
  cfg = job.training
  d, t = cfg.data, cfg.trainer
  for task in tasks:
    pair_files.require_records(pair_files.pair_files(job.pairs, task, contracts.TRAIN),
                               f"{task} {contracts.TRAIN} pairs")
  weights = (pair_files.task_weights(job.pairs, tasks, contracts.TRAIN, d.mixture)
             if len(tasks) > 1 else None)
  info = {"pairs": job.pairs, "tasks": list(tasks), "mixture": d.mixture}
  if weights:
    info["task_weights"] = {k: round(v, 4) for k, v in weights.items()}
  if cfg.runtime.backend == "jax":
    return _run_on_jax(job, tasks, weights, info)
  from twotower.model import data  # pylint: disable=import-outside-toplevel
  from twotower.model import train  # pylint: disable=import-outside-toplevel
  options = {"seed": t.seed, "deterministic": t.deterministic}
  condenser = None
  if cfg.objective.condenser_head_layers:  # Condenser's masked LM on both sides of a pair
    from twotower.model import condenser  # pylint: disable=import-outside-toplevel

  def make_datasets(tokenizer):
    def masked(ds, seed):
      return condenser.pair_masker(cfg, tokenizer)(ds, seed) if condenser else ds
    train_ds = masked(data.pretrain_dataset(job.pairs, tasks, contracts.TRAIN, tokenizer,
                                            d.batch_size, weights=weights,
                                            shuffle_buffer=d.shuffle_buffer, **options), t.seed)
    eval_ds = None
    if t.eval_steps > 0:
      try:
        eval_weights = (data.task_weights(job.pairs, tasks, job.eval_split, d.mixture)
                        if len(tasks) > 1 else None)
        # A fixed sample of held-out batches, shuffled once: in file order a batch would
        # hold passages of one or two pages only (much harder negatives than training sees).
        eval_ds = data.cached_batches(masked(data.pretrain_dataset(
            job.pairs, tasks, job.eval_split, tokenizer, d.batch_size, weights=eval_weights,
            shuffle=True, **{**options, "seed": t.seed + 1}), t.seed + 1), t.eval_steps)
      except FileNotFoundError as e:
        logger.warning("no held-out evaluation: %s", e)
    return train_ds, eval_ds

  return train.train(job, train.two_tower_builder(cfg, job.init), make_datasets,
                     learning_rate=t.learning_rate, steps=t.steps, run_info=info)


def _run_on_jax(job: PretrainConfig, tasks, weights, info) -> jobs.TrainResult:
  """The same pre-training on JAX: in a child process unless this one is on JAX
  (jax_launch.run), the shards read by np_input.py with the same task weights."""
  from twotower.model import jax_launch  # pylint: disable=import-outside-toplevel
  if not jax_launch.on_jax():
    return jax_launch.run("pretrain", job)
  from twotower.model import jax_train, np_input, pair_files  # pylint: disable=import-outside-toplevel
  cfg = job.training
  d, t = cfg.data, cfg.trainer

  def batches(tokenizer, split, split_weights, seed, shuffle, skip=0):
    if split_weights is not None:
      split_tasks = [task for task in tasks if task in split_weights]
    else:
      split_tasks = list(tasks)
    files = {task: pair_files.pair_files(job.pairs, task, split) for task in split_tasks}
    return np_input.pair_batches(files, tokenizer, d.batch_size, weights=split_weights,
                                 shuffle=shuffle, seed=seed, shuffle_buffer=d.shuffle_buffer,
                                 skip=skip)

  def make_batches(tokenizer, skip):
    train_batches = batches(tokenizer, contracts.TRAIN, weights, t.seed, True, skip)
    eval_batches = None
    if t.eval_steps > 0:
      try:
        eval_weights = (pair_files.task_weights(job.pairs, tasks, job.eval_split, d.mixture)
                        if len(tasks) > 1 else None)
        # A fixed sample of held-out batches, shuffled once (as the tf.data path).
        eval_batches = np_input.first_batches(
            batches(tokenizer, job.eval_split, eval_weights, t.seed + 1, True), t.eval_steps)
      except FileNotFoundError as e:
        logger.warning("no held-out evaluation: %s", e)
    return train_batches, eval_batches

  return jax_train.train(job, jax_train.two_tower_builder(cfg, job.init), make_batches,
                         learning_rate=t.learning_rate, steps=t.steps, run_info=info)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("pretrain"))
