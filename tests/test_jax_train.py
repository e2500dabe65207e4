"""Training on JAX (`runtime.backend: jax`, model/jax_train.py): the process that trains never
imports TensorFlow; a run repeated gives the same floats, another seed other ones; a run
killed and resumed ends with the weights of one that ran through; the run folder is an
ordinary one (config, history, .weights.h5 checkpoints, export/ with the SavedModel); what
trains on TensorFlow only is refused by name, and neither trainer resumes the other's run."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from twotower.core import contracts
from twotower.model import config, jax_launch, pretrain
from twotower.testing import pairs as testing


@pytest.fixture(scope="module")
def pairs_root(tmp_path_factory):
  root = tmp_path_factory.mktemp("jax_train")
  testing.write_vocab(str(root / "vocab.txt"))
  for task, seed in (("ict", 0), ("bfs", 1)):  # 2 shards each: interleaved, then mixed
    testing.write_pairs(str(root), task, "train", testing.synthetic_pairs(64, seed, task))
    testing.write_pairs(str(root), task, "heldout", testing.synthetic_pairs(16, seed + 5, task))
  return root


def _job(root, out, seed: int = 0, export: bool = False) -> pretrain.PretrainConfig:
  # Dropout on (tiny has none): its masks are part of what must repeat and resume.
  cfg = config.load("tiny", ["data.tasks=ict,bfs", "trainer.steps=10", "model.dropout=0.1",
                             f"trainer.seed={seed}", "trainer.checkpoint_every=5",
                             "runtime.backend=jax"])
  return pretrain.PretrainConfig(training=cfg, out=str(out), vocab=str(root / "vocab.txt"),
                                 pairs=str(root), export=export, progress="none")


def _child(job, tmp) -> dict:
  """The JAX training process `twotower pretrain --backend jax` starts, run as it runs it;
  its result record (with the TensorFlow modules it loaded)."""
  os.makedirs(tmp, exist_ok=True)
  job_path, result_path = os.path.join(tmp, "job.json"), os.path.join(tmp, "result.json")
  with open(job_path, "w", encoding="utf-8") as f:
    json.dump(jax_launch.job_to_json("pretrain", job), f)
  done = subprocess.run([sys.executable, "-m", "twotower.model.jax_launch", job_path,
                         result_path], env={**os.environ, "KERAS_BACKEND": "jax"},
                        capture_output=True, text=True, check=False)
  assert done.returncode == 0, done.stderr[-4000:]
  with open(result_path, encoding="utf-8") as f:
    return json.load(f)


def _weights(run) -> dict[str, np.ndarray]:
  """Every array of the run's last checkpoint: model weights and the optimizer's moments."""
  path = sorted(glob.glob(os.path.join(contracts.checkpoint_dir(str(run)), "ckpt-*.weights.h5")),
                key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))[-1]
  out = {}
  with h5py.File(path) as f:
    f.visititems(lambda name, obj: out.__setitem__(name, obj[()])
                 if isinstance(obj, h5py.Dataset) else None)
  return out


@pytest.mark.slow  # three JAX processes
def test_a_jax_run_repeated_gives_the_same_floats_without_tensorflow(pairs_root, tmp_path):
  first = _child(_job(pairs_root, tmp_path / "a"), tmp_path / "ja")
  second = _child(_job(pairs_root, tmp_path / "b"), tmp_path / "jb")
  other = _child(_job(pairs_root, tmp_path / "c", seed=1), tmp_path / "jc")
  for record in (first, second, other):
    assert record["tensorflow_modules"] == [] and "error" not in record
  a, b, c = _weights(tmp_path / "a"), _weights(tmp_path / "b"), _weights(tmp_path / "c")
  assert len(a) > 100 and a.keys() == b.keys() == c.keys()  # 44 weights + Adam's moments
  for name in a:
    np.testing.assert_array_equal(a[name], b[name], err_msg=name)
  assert first["result"]["history"] == second["result"]["history"]
  assert max(float(np.max(np.abs(a[n] - c[n]))) for n in a if a[n].dtype.kind == "f") > 1e-3
  assert first["result"]["history"]["loss"] != other["result"]["history"]["loss"]
  history = first["result"]["history"]
  assert history["step"] == [5, 10] and len(history["val_loss"]) == 2  # held-out pairs
  # An ordinary run folder: the resolved config names the backend, as its manifest lists.
  assert "backend: jax" in open(tmp_path / "a" / "config.yaml", encoding="utf-8").read()
  listed = json.load(open(tmp_path / "a" / "_twotower.json", encoding="utf-8"))["files"]
  assert "history.csv" in listed and "checkpoints/ckpt-10.weights.h5" in listed


@pytest.mark.slow  # two JAX processes
def test_a_jax_run_resumed_after_a_kill_ends_with_the_weights_of_one_run_through(pairs_root,
                                                                                  tmp_path):
  # The "kill": a copy of a finished run that keeps only its step-5 checkpoint.
  pretrain.run(_job(pairs_root, tmp_path / "through"))  # a JAX child of this process
  through = _weights(tmp_path / "through")
  killed = tmp_path / "killed"
  shutil.copytree(tmp_path / "through", killed)
  for name in glob.glob(os.path.join(contracts.checkpoint_dir(str(killed)), "ckpt-10.*")):
    os.remove(name)
  result = pretrain.run(_job(pairs_root, killed))
  resumed = _weights(killed)
  assert result.steps == 10 and result.history["step"] == [5.0, 10.0]
  for name in through:
    np.testing.assert_array_equal(resumed[name], through[name], err_msg=name)


@pytest.mark.parametrize("overrides, named", [
    (["trainer.grad_cache_chunk=4"], "trainer.grad_cache_chunk=4"),
    (["model.shared_towers=true", "objective.moco_queue=64"], "objective.moco_queue=64"),
    (["objective.condenser_head_layers=1"], "objective.condenser_head_layers=1"),
    (["data.tasks=mlm"], "data.tasks=mlm"),
])
def test_what_trains_on_tensorflow_only_is_refused_on_jax_by_name(overrides, named):
  with pytest.raises(ValueError, match=f"{named}.*runtime.backend=tensorflow only"):
    config.load("tiny", overrides + ["runtime.backend=jax"])


def test_strategies_are_tensorflows_and_the_backend_is_checked():
  with pytest.raises(ValueError, match="runtime.strategy=mirrored is a tf.distribute strategy"):
    config.load("tiny", ["runtime.strategy=mirrored", "runtime.backend=jax"])
  with pytest.raises(ValueError, match="runtime.backend='torch'"):
    config.load("tiny", ["runtime.backend=torch"])
  # The default is left out of a config's dict, as runs before the setting recorded it.
  assert "backend" not in config.load("tiny").to_dict()["runtime"]
  assert config.load("tiny", ["runtime.backend=jax"]).to_dict()["runtime"]["backend"] == "jax"


def test_tensorflow_does_not_resume_a_jax_runs_folder(pairs_root, tmp_path):
  out = tmp_path / "jax-run"
  os.makedirs(contracts.checkpoint_dir(str(out)))
  open(os.path.join(contracts.checkpoint_dir(str(out)), "ckpt-5.weights.h5"), "wb").close()
  job = _job(pairs_root, out)
  job = pretrain.PretrainConfig(**{**job.__dict__, "training": config.replace(
      job.training, runtime={"backend": "tensorflow"})})
  with pytest.raises(ValueError, match="holds a JAX run's checkpoints: resume it with "
                                       "runtime.backend=jax"):
    pretrain.run(job)


def test_the_flag_chooses_the_backend():
  from twotower.commands import pretrain as pretrain_cmd  # pylint: disable=import-outside-toplevel
  job = pretrain_cmd.parse(["--config", "tiny", "--out", "o", "--vocab", "v", "--pairs", "p",
                            "--backend", "jax"])
  assert job.training.runtime.backend == "jax"
  assert pretrain_cmd.parse(["--config", "tiny", "--out", "o", "--vocab", "v"]
                            ).training.runtime.backend == "tensorflow"
