"""What a training run is and gives back, and the run folder's bookkeeping, on any Keras
backend and without one: `TrainRunConfig` -> `TrainResult`, config.yaml's text and the
settings a resumed run must keep, the run folder's claim, the checkpoint interval and the
summary table. The TensorFlow trainer (train.py) and the JAX trainer (jax_train.py) share
them, and the command modules read them without importing Keras or TensorFlow (a JAX
machine has no TensorFlow at all).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from twotower.core import outputs
from twotower.model import config as config_lib

#: How a run shows its progress (TrainRunConfig.progress; callbacks.Progress).
PROGRESS_MODES = ("bar", "epoch", "none")


@dataclasses.dataclass(frozen=True)
class TrainRunConfig:
  """One training run, besides its data (pretrain.PretrainConfig, finetune.FinetuneConfig add it).

  Attributes:
    training: model, data, trainer and runtime settings (`config.load(preset, overrides)`,
      `config.replace`), read by pre-training and fine-tuning alike.
    out: the run dir: config.yaml, checkpoints/, logs/, history.csv, export/.
    vocab: the WordPiece vocabulary file (`twotower vocab`).
    init: start the towers from this checkpoint (a prefix, a checkpoints/ dir or a run dir
      of a two-tower or MLM run); None or "none": random initialisation.
    export: write export/ (SavedModel with string signatures, .keras) at the end.
    progress: "bar" (one tqdm bar over all steps), "epoch" (one line per checkpoint) or
      "none" (callbacks.Progress).
    wall_budget_s: stop training once this many seconds of this invocation's training have
      passed (callbacks.WallBudget; the checkpoint of the stopping step is written); 0: off.
  """
  training: config_lib.TrainingConfig
  out: str
  vocab: str
  init: str | None = None
  export: bool = True
  progress: str = "bar"
  overwrite: bool = False  # start over in an `out` that holds another run (twotower.core.outputs)
  wall_budget_s: float = 0.0

  #: The stage named in the run dir's manifest.
  STAGE: ClassVar[str] = "train"

  def __post_init__(self):
    if self.progress not in PROGRESS_MODES:
      raise ValueError(f"progress={self.progress!r}: expected one of {PROGRESS_MODES}")
    if self.wall_budget_s < 0:
      raise ValueError(f"wall_budget_s={self.wall_budget_s}: expected 0 (off) or seconds")


@dataclasses.dataclass(frozen=True)
class TrainResult:
  """What a run gives back, so that a caller never re-reads the run dir.

  Attributes:
    out: the run dir.
    history: {metric: [value per checkpoint]} over the whole run (a resumed run includes the
      checkpoints of earlier invocations): `step`, `epoch`, then e.g. loss,
      in_batch_accuracy, val_loss, val_in_batch_accuracy; in fine-tuning val_R@k, val_MRR.
    saved_model: the exported SavedModel; None without export, and for MLM.
    steps: optimizer steps trained at the end of the run.
    seconds: wall time of this invocation.
    selected_step: the step whose weights are exported: the best checkpoint by `select`,
      else the last step.
    select: the logged metric that chose it ("" = the last checkpoint), e.g. "val_R@100",
      or its moving average "val_R@100_avg3" (`select_window`).
  """
  out: str
  history: dict[str, list[float]]
  saved_model: str | None
  steps: int
  seconds: float
  selected_step: int | None = None
  select: str = ""

  def curve(self, metric: str) -> list[tuple[int, float]]:
    """[(step, value)] of a logged metric, e.g. the validation curve `curve("val_R@100")`."""
    return [(int(s), v) for s, v in zip(self.history.get("step", ()), self.history[metric])]


def config_text(cfg: config_lib.TrainingConfig, extra: Mapping | None = None) -> str:
  """OUT/config.yaml: the resolved config, then the run's own fields under `run:`."""
  text = cfg.to_yaml()
  if extra:
    import yaml  # pylint: disable=import-outside-toplevel
    text += yaml.safe_dump({"run": dict(extra)}, sort_keys=False)
  return text


def run_settings(text: str) -> dict:
  """The settings of a run that decide what it trains, from its config.yaml text: where it
  runs (`runtime`, the replica count) may change when a run resumes, nothing else may."""
  import yaml  # pylint: disable=import-outside-toplevel
  settings = yaml.safe_load(text) or {}
  settings.pop("runtime", None)
  (settings.get("run") or {}).pop("replicas", None)
  return settings


def claim_run_dir(job: TrainRunConfig, text: str) -> None:
  """Refuses (outputs.claim) a run dir that holds another run: fine-tuning split 10 into a
  split-5 run, other --tasks, another hidden_dim would resume or overwrite it. Then records
  this run's manifest, before anything is trained, so that a killed run resumes."""
  settings = run_settings(text)
  # --init is read where the run writes its checkpoints: never the run dir or inside it.
  # The vocabulary may sit in it: kept, as every file the run did not write (outputs).
  if job.init and job.init.lower() != "none":
    outputs.check_inputs(job.out, [job.init], inside=False)
  resumed = outputs.claim(job.out, job.STAGE, settings, overwrite=job.overwrite,
                          inputs=[job.vocab])
  outputs.start(job.out, job.STAGE, settings, inputs=[job.vocab], resumed=resumed)


def checkpoint_interval(steps: int, every: int) -> int:
  """Steps between checkpoints (one Keras epoch): `every`, or the largest divisor of `steps`
  between every/2 and `every`, so that a run trains exactly `steps` (640 steps at
  checkpoint_every=100 checkpoint every 80, not 700 steps). Without such a divisor the run
  rounds up to a multiple of `every` and says so."""
  every = max(1, min(every, steps))
  for interval in range(every, (every + 1) // 2 - 1, -1):
    if interval > 0 and steps % interval == 0:
      return interval
  return every


def summary_table(result: TrainResult) -> str:
  """The command's result: the last value of each metric, the exported step and paths."""
  if not result.history.get("step"):
    return f"nothing trained: {result.out} has no history"
  metrics = {k: v for k, v in result.history.items() if k not in ("step", "epoch")}
  width = max([len(k) for k in metrics] + [14])
  lines = [f"{'steps':<{width}}  {result.steps}"]
  lines += [f"{k:<{width}}  {v[-1]:.4f}" for k, v in metrics.items() if v]
  if result.select:
    lines.append(f"{'selected step':<{width}}  {result.selected_step} (best {result.select})")
  lines.append(f"{'run dir':<{width}}  {result.out}")
  if result.saved_model:
    lines.append(f"{'saved model':<{width}}  {result.saved_model}")
  lines.append(f"{'seconds':<{width}}  {result.seconds:.0f}")
  return "\n".join(lines)
