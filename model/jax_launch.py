"""Where a `runtime.backend: jax` run trains: a Keras backend is chosen once per process (when
Keras is imported), so a JAX job asked for from a TensorFlow process (`twotower pretrain
--backend jax`, the grid, a test) runs in a child process started with KERAS_BACKEND=jax:

  parent  run(stage, job)       the job as JSON -> `python -m twotower.model.jax_launch`
                                (KERAS_BACKEND=jax) -> waits -> its TrainResult, or its
                                error raised again here as the same kind of error
  child   main(job, result)     keeps TensorFlow out (`keep_tensorflow_out`), then the
                                stage's own run(job) on JAX (pretrain.run / finetune.run,
                                which call jax_train.train), and writes the result with the
                                TensorFlow modules it loaded (none: tests/test_jax_train.py)

A process that already is on JAX (an accelerator machine's script, KERAS_BACKEND=jax) trains
in itself: `run` calls the stage there.

TensorFlow out: KerasHub imports TensorFlow whenever it is installed (its
`keras_hub.src.utils.tensor_utils` does, for its own tokenizers), although its layers run on
JAX without it. The child marks `tensorflow` and `tensorflow_text` as absent
(`sys.modules[name] = None`, Python's way to make an import fail) before anything imports
Keras, so KerasHub takes the path it takes on a machine without TensorFlow (the accelerator
machine has none), and a TensorFlow import anywhere in training fails loudly instead of
happening.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import math
import os
import signal
import subprocess
import sys
import tempfile
import traceback

logger = logging.getLogger(__name__)

#: Modules a JAX training process keeps out.
TENSORFLOW_MODULES = ("tensorflow", "tensorflow_text")
#: stage -> (its module, its job class), imported by name as cli.py imports the stages: the
#: stages call this module, so naming them in an import would make a circle.
STAGES = {"pretrain": ("twotower.model.pretrain", "PretrainConfig"),
          "finetune": ("twotower.model.finetune", "FinetuneConfig")}


def keep_tensorflow_out() -> None:
  """Makes `import tensorflow` (and tensorflow_text) fail in this process, unless one of them
  is already imported. Call it before Keras or KerasHub is imported."""
  for name in TENSORFLOW_MODULES:
    sys.modules.setdefault(name, None)


def loaded_tensorflow() -> list[str]:
  """The TensorFlow modules this process imported (not those kept out)."""
  return sorted(name for name, module in sys.modules.items()
                if module is not None and name.split(".")[0] in TENSORFLOW_MODULES)


def on_jax() -> bool:
  """Whether Keras in this process is (or, not imported yet, will be) on JAX."""
  keras = sys.modules.get("keras")
  if keras is not None:
    return keras.backend.backend() == "jax"
  return os.environ.get("KERAS_BACKEND") == "jax"


def _stage_module(stage: str):
  """(the stage's module, its job class)."""
  module_name, job_class = STAGES[stage]
  module = importlib.import_module(module_name)
  return module, getattr(module, job_class)


def job_to_json(stage: str, job) -> dict:
  fields = {f.name: getattr(job, f.name) for f in dataclasses.fields(job) if f.name != "training"}
  return {"stage": stage, "job": fields, "training": job.training.to_dict()}


def job_from_json(spec: dict):
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  _, cls = _stage_module(spec["stage"])
  return cls(training=config_lib.from_dict(spec["training"], "the parent's job"), **spec["job"])


def _xla_flags(job) -> str:
  """XLA_FLAGS for the child: the caller's, plus deterministic GPU kernels where the job asks
  for op determinism (XLA reads them when JAX starts)."""
  flags = os.environ.get("XLA_FLAGS", "")
  t = job.training.trainer
  if t.deterministic and t.op_determinism and "xla_gpu_deterministic_ops" not in flags:
    flags = f"{flags} --xla_gpu_deterministic_ops=true".strip()
  return flags


def run(stage: str, job):
  """Trains `job` (a runtime.backend=jax PretrainConfig or FinetuneConfig) on JAX: in this
  process if it is on JAX, else in a child process; its TrainResult."""
  if stage not in STAGES:
    raise ValueError(f"stage {stage!r}: expected one of {', '.join(STAGES)}")
  if on_jax():
    if "keras_hub" not in sys.modules:
      keep_tensorflow_out()
    module, _ = _stage_module(stage)
    return module.run(job)
  return _in_child(stage, job)


_ERRORS = {"ValueError": ValueError, "FileNotFoundError": FileNotFoundError,
           "OSError": OSError, "TypeError": TypeError}


def _in_child(stage: str, job):
  from twotower.core import logs  # pylint: disable=import-outside-toplevel
  from twotower.model.jobs import TrainResult  # pylint: disable=import-outside-toplevel
  with tempfile.TemporaryDirectory(prefix="twotower-jax-") as tmp:
    job_path, result_path = os.path.join(tmp, "job.json"), os.path.join(tmp, "result.json")
    with open(job_path, "w", encoding="utf-8") as f:
      json.dump({**job_to_json(stage, job), "verbose": logs.is_verbose()}, f)
    env = {**os.environ, "KERAS_BACKEND": "jax", "XLA_FLAGS": _xla_flags(job)}
    command = [sys.executable, "-m", "twotower.model.jax_launch", job_path, result_path]
    logger.info("training %s on JAX in a child process: %s", job.out, " ".join(command))
    done = subprocess.run(command, env=env, check=False)
    if done.returncode in (130, -signal.SIGINT):
      raise KeyboardInterrupt
    result = None
    if os.path.exists(result_path):
      with open(result_path, encoding="utf-8") as f:
        result = json.load(f)
    if not result or "error" in (result or {}):
      error = (result or {}).get("error") or {
          "type": "RuntimeError",
          "message": f"the JAX training process ended with exit status {done.returncode} "
                     "and no result (its log is above)"}
      raise _ERRORS.get(error["type"], RuntimeError)(error["message"])
  if result["tensorflow_modules"]:  # keep_tensorflow_out makes this unreachable; said loudly
    logger.warning("the JAX training process imported %s", ", ".join(result["tensorflow_modules"]))
  fields = {f.name for f in dataclasses.fields(TrainResult)}
  history = {k: [math.nan if v is None else v for v in values]
             for k, values in result["result"]["history"].items()}
  return TrainResult(**{**{k: v for k, v in result["result"].items() if k in fields},
                        "history": history})


def main(argv: list[str]) -> int:
  """The child: runs the job of `argv[0]` on JAX and writes `argv[1]`."""
  keep_tensorflow_out()
  job_path, result_path = argv
  with open(job_path, encoding="utf-8") as f:
    spec = json.load(f)
  from twotower.core import logs  # pylint: disable=import-outside-toplevel
  logs.setup(verbose=bool(spec.get("verbose")))
  record: dict = {}
  status = 0
  try:
    job = job_from_json(spec)
    module, _ = _stage_module(spec["stage"])
    result = module.run(job)
    record["result"] = {**dataclasses.asdict(result), "history": {
        k: [None if isinstance(v, float) and math.isnan(v) else v for v in values]
        for k, values in result.history.items()}}
  except KeyboardInterrupt:
    status = 130
  except Exception as e:  # pylint: disable=broad-except  (raised again by the parent)
    if isinstance(e, (ValueError, OSError, RuntimeError)):
      logging.getLogger("twotower").info("failure", exc_info=True)
      record["error"] = {"type": type(e).__name__, "message": str(e)}
    else:  # a bug: the traceback is the report (cli.py's rule)
      traceback.print_exc()
      record["error"] = {"type": "RuntimeError", "message": f"{type(e).__name__}: {e}"}
    status = 1
  record["tensorflow_modules"] = loaded_tensorflow()
  with open(result_path, "w", encoding="utf-8") as f:
    json.dump(record, f)
  return status


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
