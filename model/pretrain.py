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
(twotower.commands.pretrain) is its flag parser.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from typing import ClassVar

from twotower.core import contracts
from twotower.model import train

logger = logging.getLogger(__name__)

MLM_TASKS = ("mlm",)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PretrainConfig(train.TrainRunConfig):
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


def run(job: PretrainConfig) -> train.TrainResult:
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
  from twotower.model import data  # pylint: disable=import-outside-toplevel
  cfg = job.training
  d, t = cfg.data, cfg.trainer
  for task in tasks:
    data.require_records(data.pair_files(job.pairs, task, contracts.TRAIN),
                         f"{task} {contracts.TRAIN} pairs")
  weights = (data.task_weights(job.pairs, tasks, contracts.TRAIN, d.mixture)
             if len(tasks) > 1 else None)
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

  info = {"pairs": job.pairs, "tasks": list(tasks), "mixture": d.mixture}
  if weights:
    info["task_weights"] = {k: round(v, 4) for k, v in weights.items()}
  return train.train(job, train.two_tower_builder(cfg, job.init), make_datasets,
                     learning_rate=t.learning_rate, steps=t.steps, run_info=info)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("pretrain"))
