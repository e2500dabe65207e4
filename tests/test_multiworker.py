"""MultiWorkerMirroredStrategy for real: two `twotower pretrain --strategy multi_worker`
processes on localhost (TF_CONFIG, free ports) train a few steps on tiny pairs and end with
identical weights, after one schedule of optimizer steps (not one per replica), with the
global batch split over both workers.

This is the same code path a multi-host GPU cluster runs (model/train.py's custom
`strategy.run` loop, the cross-replica negatives of model/losses.py); only the hosts differ.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

STEPS = 4
GLOBAL_BATCH = 8  # 4 pairs per worker; every query sees the 7 other documents as negatives


def _free_ports(n: int) -> list[int]:
  sockets = [socket.socket() for _ in range(n)]
  try:
    for s in sockets:
      s.bind(("localhost", 0))
    return [s.getsockname()[1] for s in sockets]
  finally:
    for s in sockets:
      s.close()


def _run_workers(commands: list[list[str]], envs: list[dict], logs: list[str],
                 timeout: float = 420) -> list[int]:
  """Starts every worker; if one fails the others (blocked in a collective) are stopped."""
  procs = [subprocess.Popen(cmd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
           for cmd, env, log in zip(commands, envs, logs)]
  deadline = time.monotonic() + timeout
  try:
    while any(p.poll() is None for p in procs):
      if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
        break
      time.sleep(0.5)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  return [p.returncode for p in procs]


def _tail(path: str, lines: int = 25) -> str:
  with open(path, encoding="utf-8", errors="replace") as f:
    kept = [l for l in f.read().splitlines() if not l.startswith(("I0000", "W0000", "E0000"))]
  return "\n".join(kept[-lines:])


@pytest.mark.slow
def test_two_localhost_workers_end_with_the_same_weights(tmp_path):
  import tensorflow as tf
  from twotower.testing import pairs as testing

  vocab = testing.write_vocab(str(tmp_path / "vocab.txt"))
  testing.write_pairs(str(tmp_path), "ict", "train", testing.synthetic_pairs(64, seed=1),
                      shards=2)
  out = tmp_path / "run"
  cluster = {"worker": [f"localhost:{port}" for port in _free_ports(2)]}
  commands, envs, logs = [], [], []
  for index in range(2):
    commands.append([sys.executable, "-m", "twotower.cli", "pretrain", "--config", "tiny",
                     "--pairs", str(tmp_path), "--vocab", vocab, "--out", str(out),
                     "--tasks", "ict", "--strategy", "multi_worker", "--steps", str(STEPS),
                     "--batch_size", str(GLOBAL_BATCH), "--set", "trainer.checkpoint_every=2",
                     "--set", "trainer.eval_steps=0", "--no_export", "--progress", "none"])
    envs.append({**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2",
                 "TF_CONFIG": json.dumps({"cluster": cluster,
                                          "task": {"type": "worker", "index": index}})})
    logs.append(str(tmp_path / f"worker{index}.log"))
  codes = _run_workers(commands, envs, logs)
  assert codes == [0, 0], "\n\n".join(f"worker {i} exit {c}:\n{_tail(log)}"
                                      for i, (c, log) in enumerate(zip(codes, logs)))

  # Worker 0 is the chief (checkpoints/); worker 1 writes its copy under tmp_workers/.
  chief = tf.train.load_checkpoint(str(out / "checkpoints" / f"ckpt-{STEPS}"))
  other = tf.train.load_checkpoint(str(out / "tmp_workers" / "worker_1" / f"ckpt-{STEPS}"))
  start = tf.train.load_checkpoint(str(out / "checkpoints" / "ckpt-2"))
  names = [n for n in chief.get_variable_to_shape_map() if not n.startswith("_CHECKPOINTABLE")]
  assert set(names) == set(other.get_variable_to_shape_map()) - {
      n for n in other.get_variable_to_shape_map() if n.startswith("_CHECKPOINTABLE")}
  weights = [n for n in names if chief.get_tensor(n).dtype.kind == "f"]
  assert len(weights) > 10
  for name in names:
    np.testing.assert_array_equal(chief.get_tensor(name), other.get_tensor(name), err_msg=name)
  # Training moved the weights between the two checkpoints ...
  assert max(np.max(np.abs(chief.get_tensor(n) - start.get_tensor(n))) for n in weights) > 0
  # ... and the learning-rate schedule counts optimizer steps, not steps x replicas.
  iterations = next(n for n in names if n.startswith("optimizer/_iterations"))
  assert int(chief.get_tensor(iterations)) == STEPS
  # Both workers joined one 2-replica cluster, each with half the global batch.
  config = (out / "config.yaml").read_text()
  assert "replicas: 2" in config and f"batch_size: {GLOBAL_BATCH}" in config
