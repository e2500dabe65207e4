"""Typed configuration of pre-training and fine-tuning: `TrainingConfig(model, data, trainer,
runtime, objective)`, as tensorflow/models' `official/core/config_definitions.py` splits an experiment.

A config comes from a preset name (`model/presets/<name>.yaml`) or a YAML file, then
`--set section.field=value` overrides; the resolved config is written next to the
checkpoints (`config.yaml`) so that a run can be reproduced and resumed with the same
hyperparameters.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import math
import os
from typing import Any, Mapping, Optional, Sequence

import yaml

ENCODERS = ("transformer", "bow_mlp")
STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")
#: The Keras backends a run trains on (RuntimeConfig.backend); a Keras backend is chosen per
#: process, so a run on another backend than its caller's trains in a process of its own.
BACKENDS = ("tensorflow", "jax")
#: How the pre-training tasks are mixed (DataConfig.mixture).
MIXTURES = ("equal", "pooled")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """The towers.

  Attributes:
    encoder: "transformer" (BERT-style, paper) or "bow_mlp" (baseline of Table 3).
    num_layers: L, Transformer blocks.
    hidden_dim: H, width of the token states (BoW-MLP: width of the MLP's hidden layer).
    num_heads: A, attention heads.
    intermediate_dim: feed-forward width of a block (BERT: 4 H).
    dropout: dropout rate in embeddings and blocks.
    embedding_dim: d, the final embedding (a linear layer on [CLS]; paper 512).
    query_len: static length of `[CLS] q [SEP]` in word pieces (paper 64).
    doc_len: static length of `[CLS] title [SEP] passage [SEP]` (paper 288).
    shared_towers: one encoder for queries and documents (paper: separate towers).
    vocab_size: rows of the token embedding; 0 means "the size of the vocabulary file".
    bow_layer_norm: BoW-MLP only: layer-normalize the pooled average before the MLP, as the
      Transformer normalizes its embeddings. Off (the paper's literal MLP), the average of
      small random embeddings gives scores near 0, and the loss stays at chance through a
      fine-tuning schedule of a few hundred steps.
  """
  encoder: str = "transformer"
  num_layers: int = 2
  hidden_dim: int = 128
  num_heads: int = 2
  intermediate_dim: int = 512
  dropout: float = 0.1
  embedding_dim: int = 128
  query_len: int = 32
  doc_len: int = 128
  shared_towers: bool = False
  vocab_size: int = 0
  bow_layer_norm: bool = False

  def __post_init__(self):
    if self.encoder not in ENCODERS:
      raise ValueError(f"model.encoder={self.encoder!r}: expected one of {ENCODERS}")
    if self.bow_layer_norm and self.encoder != "bow_mlp":
      raise ValueError("model.bow_layer_norm needs model.encoder=bow_mlp")
    if self.encoder == "transformer" and self.hidden_dim % self.num_heads:
      raise ValueError(f"model.hidden_dim={self.hidden_dim} is not divisible by "
                       f"model.num_heads={self.num_heads}")
    if self.query_len < 3 or self.doc_len < 4:
      raise ValueError(f"model.query_len={self.query_len} / doc_len={self.doc_len} too short "
                       "for [CLS] ... [SEP]")


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """Input pipeline.

  Attributes:
    tasks: pre-training tasks ("ict", "bfs", "wlp"; "crop", Contriever's, when the pairs have
      it) mixed by sampling, or ("mlm",).
    mixture: how several tasks are mixed. The paper (sec. 4.1): "pre-trained on one combined
      set of (q, d) pairs, where each pair is uniformly sampled from the three pre-training
      tasks in Table 1", which reads two ways: "equal" draws each pair from a task chosen
      with equal probability (1/3 each, whatever the tasks' sizes); "pooled" draws uniformly
      from the pooled pairs, i.e. a task with probability proportional to its number of
      training pairs (Table 1's sizes give 54/19/27 %). Counts come from the pair pipeline's
      stats.json (see data.task_weights).
    batch_size: the global batch (split over replicas); every other document of the global
      batch is a negative of a query.
    shuffle_buffer: examples per task held in the shuffle buffer.
    mlm_rate: fraction of word pieces selected for masked-LM prediction.
    mlm_max_predictions: static number of predicted positions per sequence; 0 (default)
      derives it from the length so that it never caps `mlm_rate`
      (`mlm_predictions`: 19 at 128 pieces, 43 at 288).
  """
  tasks: tuple[str, ...] = ("ict",)
  mixture: str = "equal"
  batch_size: int = 64
  shuffle_buffer: int = 10_000
  mlm_rate: float = 0.15
  mlm_max_predictions: int = 0

  def __post_init__(self):
    if self.mixture not in MIXTURES:
      raise ValueError(f"data.mixture={self.mixture!r}: expected one of {MIXTURES}")

  def mlm_predictions(self, length: int) -> int:
    """Predicted positions per MLM row at `length` word pieces."""
    return self.mlm_max_predictions or mlm_predictions(length, self.mlm_rate)


def mlm_predictions(length: int, rate: float) -> int:
  """Predicted positions per row that never cap `rate` of a full `[CLS] ... [SEP]` row:
  ceil(rate * (length - 2)), 19 at 128 pieces and 77 at 512 (BERT scales its cap with the
  length too: 20 at 128, 76 at 512)."""
  return max(1, math.ceil(rate * (length - 2)))


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
  """Optimisation (AdamW, warm-up then linear decay, as the paper's BERT recipe).

  Attributes:
    learning_rate: peak learning rate, reached after `warmup_fraction * steps`.
    steps: optimizer steps of the run.
    weight_decay: AdamW decoupled weight decay (not on biases and LayerNorm).
    temperature: logits are `<q, d> / temperature` (1.0 = the paper's plain inner product).
    mixed_precision: compute in bfloat16 with float32 variables ("mixed_bfloat16").
    checkpoint_every: steps between checkpoints (also the length of a Keras "epoch").
    keep_checkpoints: checkpoints kept on disk.
    eval_steps: held-out batches evaluated at each checkpoint (0: no held-out evaluation).
    jit_compile: XLA-compile the train step (slower on this CPU; see deploy/tpu/README.md).
    seed: initialisation, dropout, data order and MLM masking.
    grad_cache_chunk: 0 (default) embeds each replica's batch under one tape; N > 0 trains
      with the gradient cache (model/grad_cache.py): memory bounded by N pairs whatever the
      batch, the same gradients, a second forward pass (~1/3 more compute). N must divide
      the per-replica batch.
    deterministic: the same job gives the same weights: every seed set (Python, NumPy,
      tf.random, Keras) from a fresh Keras state, and tf.data kept in order. On CPU that is
      enough: two runs end bit-identical (tests/test_model_determinism.py). False trades it
      for a little speed (unordered parallel input).
    op_determinism: also TensorFlow op determinism
      (`tf.config.experimental.enable_op_determinism`), which GPUs need for identical runs
      (their reductions use atomics). Off by default: on this 2-core CPU it runs the train
      step on about one core, 1.6x slower (40 s -> 64 s per 100 cpu-small steps, idle), for
      results that are already identical; and Keras turns XLA off under it.
    finetune_learning_rate / finetune_batch_size / finetune_steps: `twotower finetune`.
  """
  learning_rate: float = 5e-4
  warmup_fraction: float = 0.1
  steps: int = 2000
  weight_decay: float = 0.01
  temperature: float = 1.0
  mixed_precision: bool = False
  checkpoint_every: int = 200
  keep_checkpoints: int = 3
  eval_steps: int = 10
  jit_compile: bool = False
  seed: int = 0
  grad_cache_chunk: int = 0
  deterministic: bool = True
  op_determinism: bool = False
  finetune_learning_rate: float = 3e-5  # the paper's (ICLR text, sec. 4.1; arXiv: 5e-5)
  finetune_batch_size: int = 64
  finetune_steps: int = 500

  def __post_init__(self):
    if self.grad_cache_chunk < 0:
      raise ValueError(f"trainer.grad_cache_chunk={self.grad_cache_chunk}: expected 0 (off) "
                       "or a chunk size that divides the per-replica batch")


@dataclasses.dataclass(frozen=True)
class ObjectiveConfig:
  """What pre-training adds to the paper's in-batch softmax: the successors' methods, each
  off by default (a config that leaves them all off writes no `objective:` section, so the
  runs and grid cells made before this section existed keep their settings and keys).

  Attributes:
    moco_queue: MoCo (He et al., CVPR 2020) as Contriever (Izacard et al., TMLR 2022) uses
      it: the documents are embedded by a momentum copy of the tower, and the last
      `moco_queue` documents' embeddings (all replicas') are extra negatives of every query,
      beside the global batch's. 0: off. Needs shared towers (the momentum copy follows the
      one tower that gets gradients) and no gradient cache.
    moco_momentum: m in theta_k <- m * theta_k + (1 - m) * theta_q, applied before every
      step's documents are embedded (MoCo's order). Contriever: 0.9995 over 500k steps.
    condenser_head_layers: Condenser (Gao & Callan, EMNLP 2021): a head of this many
      Transformer blocks reads the last layer's [CLS] state with the token states of layer
      `condenser_skip_layer` and predicts masked tokens, so that [CLS] must carry the
      passage. The head is dropped at export. 0: off. Condenser and coCondenser: 2.
    condenser_skip_layer: the layer whose token states the head reads (1-based); 0: the
      middle one, num_layers // 2 (Condenser: 6 of 12).
    condenser_mlm_rate: share of word pieces masked for the head's MLM (BERT: 0.15).
    condenser_mlm_weight: the weight of the MLM losses beside the contrastive loss
      (coCondenser adds them with weight 1).
  """
  moco_queue: int = 0
  moco_momentum: float = 0.999
  condenser_head_layers: int = 0
  condenser_skip_layer: int = 0
  condenser_mlm_rate: float = 0.15
  condenser_mlm_weight: float = 1.0

  def __post_init__(self):
    if self.moco_queue < 0:
      raise ValueError(f"objective.moco_queue={self.moco_queue}: expected 0 (off) or a size")
    if not 0.0 <= self.moco_momentum < 1.0:
      raise ValueError(f"objective.moco_momentum={self.moco_momentum}: expected 0 <= m < 1")
    if self.condenser_head_layers < 0 or self.condenser_skip_layer < 0:
      raise ValueError("objective.condenser_head_layers / condenser_skip_layer: expected >= 0")
    if not 0.0 < self.condenser_mlm_rate < 1.0:
      raise ValueError(f"objective.condenser_mlm_rate={self.condenser_mlm_rate}: expected "
                       "0 < rate < 1")

  @property
  def is_default(self) -> bool:
    return self == ObjectiveConfig()


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
  """Where it runs.

  Attributes:
    strategy: "default" (one device), "mirrored" (all local devices), "multi_worker"
      (TF_CONFIG cluster; custom `strategy.run` loop since Keras 3 `fit` fails there), "tpu".
      TensorFlow's; on JAX only "default".
    tpu: TPU name or grpc address for TPUClusterResolver ("" = local / environment).
    backend: the Keras backend that trains: "tensorflow" (tf.distribute, the default) or
      "jax" (model/jax_train.py: `keras.distribution.DataParallel` over every local device,
      input read and tokenized without TensorFlow). The run folder is the same either way;
      MLM, the gradient cache, MoCo and the Condenser head train on TensorFlow only.
  """
  strategy: str = "default"
  tpu: str = ""
  backend: str = "tensorflow"

  def __post_init__(self):
    if self.strategy not in STRATEGIES:
      raise ValueError(f"runtime.strategy={self.strategy!r}: expected one of {STRATEGIES}")
    if self.backend not in BACKENDS:
      raise ValueError(f"runtime.backend={self.backend!r}: expected one of {BACKENDS}")
    if self.backend == "jax" and self.strategy != "default":
      raise ValueError(f"runtime.strategy={self.strategy} is a tf.distribute strategy; on "
                       "runtime.backend=jax the batch is split over every local device "
                       "(keras.distribution.DataParallel): leave runtime.strategy=default")


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """What pre-training and fine-tuning read: model + data + trainer + runtime, and a human
  description (a preset file, `load(preset, overrides)`)."""
  model: ModelConfig = ModelConfig()
  data: DataConfig = DataConfig()
  trainer: TrainerConfig = TrainerConfig()
  runtime: RuntimeConfig = RuntimeConfig()
  description: str = ""
  objective: ObjectiveConfig = ObjectiveConfig()

  def __post_init__(self):
    o, m = self.objective, self.model
    if o.moco_queue and not m.shared_towers:
      raise ValueError("objective.moco_queue needs model.shared_towers=true: the momentum "
                       "encoder follows the one tower that gets gradients")
    if o.moco_queue and self.trainer.grad_cache_chunk:
      raise ValueError("objective.moco_queue and trainer.grad_cache_chunk do not combine yet")
    if o.condenser_head_layers and m.encoder != "transformer":
      raise ValueError("objective.condenser_head_layers needs model.encoder=transformer")
    if o.condenser_head_layers and o.moco_queue:
      raise ValueError("objective.condenser_head_layers and objective.moco_queue do not "
                       "combine (coCondenser's contrastive loss is in-batch)")
    if o.condenser_head_layers and self.trainer.grad_cache_chunk:
      raise ValueError("objective.condenser_head_layers and trainer.grad_cache_chunk do not "
                       "combine yet")
    if o.condenser_skip_layer > m.num_layers:
      raise ValueError(f"objective.condenser_skip_layer={o.condenser_skip_layer} > "
                       f"model.num_layers={m.num_layers}")
    if self.runtime.backend == "jax":
      refused = [name for name, on in (
          ("data.tasks=mlm", tuple(self.data.tasks) == ("mlm",)),
          (f"trainer.grad_cache_chunk={self.trainer.grad_cache_chunk}",
           self.trainer.grad_cache_chunk),
          (f"objective.moco_queue={o.moco_queue}", o.moco_queue),
          (f"objective.condenser_head_layers={o.condenser_head_layers}",
           o.condenser_head_layers)) if on]
      if refused:
        raise ValueError(f"{', '.join(refused)}: trained on runtime.backend=tensorflow only "
                         "(their train steps are TensorFlow's); drop it or train on TensorFlow")

  def to_dict(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    d["data"]["tasks"] = list(self.data.tasks)
    # Settings added after runs were recorded are left out while off, as those runs recorded
    # them (a grid cell's key is its config).
    if self.objective.is_default:
      del d["objective"]
    if not self.model.bow_layer_norm:
      del d["model"]["bow_layer_norm"]
    if self.runtime.backend == RuntimeConfig.backend:
      del d["runtime"]["backend"]
    return d

  def to_yaml(self) -> str:
    return yaml.safe_dump(self.to_dict(), sort_keys=False, width=100)


_SECTIONS = {"model": ModelConfig, "data": DataConfig, "trainer": TrainerConfig,
             "runtime": RuntimeConfig, "objective": ObjectiveConfig}


def _coerce(cls, name: str, value: Any, where: str) -> Any:
  """Converts a YAML/flag value to the type of field `name` of dataclass `cls`."""
  field = {f.name: f for f in dataclasses.fields(cls)}.get(name)
  if field is None:
    raise ValueError(f"{where}: unknown field {cls.__name__}.{name}; known: "
                     f"{', '.join(f.name for f in dataclasses.fields(cls))}")
  default = field.default
  if isinstance(default, tuple):
    if isinstance(value, str):
      value = [v for v in value.split(",") if v]
    return tuple(str(v) for v in value)
  if isinstance(default, bool):
    if isinstance(value, str):
      if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError(f"{where}: {name}={value!r} is not a boolean")
      return value.lower() in ("true", "1", "yes")
    return bool(value)
  if isinstance(default, int):
    return int(float(value)) if isinstance(value, str) else int(value)
  if isinstance(default, float):
    return float(value)
  return str(value)


def from_dict(raw: Mapping[str, Any], where: str = "config") -> TrainingConfig:
  """A TrainingConfig from nested dicts; unknown sections or fields are errors."""
  kwargs: dict[str, Any] = {}
  for key, value in (raw or {}).items():
    if key == "description":
      kwargs[key] = str(value)
      continue
    if key not in _SECTIONS:
      raise ValueError(f"{where}: unknown section {key!r}; known: {', '.join(_SECTIONS)}")
    cls = _SECTIONS[key]
    kwargs[key] = cls(**{k: _coerce(cls, k, v, where) for k, v in (value or {}).items()})
  return TrainingConfig(**kwargs)


def preset_names() -> list[str]:
  files = importlib.resources.files("twotower.model") / "presets"
  return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".yaml"))


def _read_preset_or_file(name_or_path: str) -> tuple[str, str]:
  if os.path.exists(name_or_path) or name_or_path.endswith((".yaml", ".yml")):
    from twotower.core import files as io
    return name_or_path, io.read_text(name_or_path)
  resource = importlib.resources.files("twotower.model") / "presets" / f"{name_or_path}.yaml"
  if not resource.is_file():
    raise ValueError(f"--config {name_or_path!r} is neither a file nor a preset; presets: "
                     f"{', '.join(preset_names())}")
  return f"preset {name_or_path}", resource.read_text(encoding="utf-8")


def parse_overrides(overrides: Sequence[str]) -> dict[str, dict[str, str]]:
  """["trainer.steps=10", "model.num_layers=4"] -> {"trainer": {"steps": "10"}, ...}."""
  nested: dict[str, dict[str, str]] = {}
  for item in overrides or ():
    key, sep, value = item.partition("=")
    section, dot, field = key.strip().partition(".")
    if not sep or not dot:
      raise ValueError(f"--set {item!r}: expected section.field=value, e.g. trainer.steps=100")
    nested.setdefault(section, {})[field] = value.strip()
  return nested


def load(name_or_path: str, overrides: Sequence[str] = ()) -> TrainingConfig:
  """Preset name or YAML file, then `section.field=value` overrides."""
  where, text = _read_preset_or_file(name_or_path)
  raw = yaml.safe_load(text) or {}
  if not isinstance(raw, dict):
    raise ValueError(f"{where}: expected a mapping at the top level")
  for section, fields in parse_overrides(overrides).items():
    if section == "description":
      continue
    raw.setdefault(section, {}).update(fields)
  return from_dict(raw, where)


def replace(config: TrainingConfig, **sections: Mapping[str, Any]) -> TrainingConfig:
  """`replace(cfg, trainer={"steps": 10})`: a copy with some fields changed."""
  changed = {}
  for name, fields in sections.items():
    current = getattr(config, name)
    changed[name] = dataclasses.replace(
        current, **{k: _coerce(type(current), k, v, "replace") for k, v in fields.items()})
  return dataclasses.replace(config, **changed)
