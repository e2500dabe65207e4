"""TensorFlow and JAX train the same model (issue 64): from the same initial weights and batch
the loss agrees to 1e-5 and every gradient to 1e-4 (benchmarks/backend_parity.py, tiny preset,
dropout off); a JAX step over 2 CPU devices equals the step over 1 on the global batch, whose
documents are every query's negatives (two halves on their own negatives give another
loss). Each JAX side runs in a child process with KERAS_BACKEND=jax."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

from twotower.model import config
from twotower.testing import pairs as testing


@pytest.fixture(scope="module")
def backend_parity():
  # benchmarks/ is a plain folder at the repository root, not part of the installed package.
  repo = str(pathlib.Path(__file__).resolve().parents[1])
  sys.path.insert(0, repo)
  from benchmarks import backend_parity as module  # pylint: disable=import-outside-toplevel
  yield module
  sys.path.remove(repo)


@pytest.fixture(scope="module")
def case(tmp_path_factory, backend_parity):
  root = tmp_path_factory.mktemp("parity")
  vocab = testing.write_vocab(str(root / "vocab.txt"))
  testing.write_pairs(str(root), "ict", "train", testing.synthetic_pairs(32, seed=3))
  cfg = config.load("tiny", ["model.dropout=0", "data.batch_size=8"])
  backend_parity.write_case(str(root / "case"), cfg.to_dict(), vocab, str(root))
  return backend_parity, str(root / "case"), root


@pytest.mark.slow  # a JAX process (start-up and compilation)
def test_the_same_weights_and_batch_give_the_same_loss_and_gradients(case):
  backend_parity, path, root = case
  tf_side = backend_parity.loss_and_gradients(path)
  jax_side = backend_parity.run_child("grads", path, str(root / "grads.npz"))
  result = backend_parity.compare_gradients(tf_side, jax_side)
  assert result["weights"] == 44  # every weight of both towers, named alike on both
  assert result["loss_diff"] <= 1e-5, result
  assert result["max_grad_diff"] <= 1e-4, result
  assert result["max_grad"] > 1e-3  # gradients that say something


@pytest.mark.slow  # two JAX processes
def test_two_devices_take_the_step_of_one_on_the_global_batch(case):
  backend_parity, path, root = case
  one = backend_parity.run_child("step", path, str(root / "one.npz"), devices=1)
  two = backend_parity.run_child("step", path, str(root / "two.npz"), devices=2)
  assert (int(one["devices"]), int(two["devices"])) == (1, 2)
  assert abs(float(one["loss"]) - float(two["loss"])) <= 1e-5
  weights = [k for k in one if "/" in k]
  assert len(weights) == 44
  assert max(float(np.max(np.abs(one[k] - two[k]))) for k in weights) <= 1e-5
  # Each device alone would score its 4 queries against its 4 documents: another loss.
  assert abs(float(np.mean(two["half_losses"])) - float(two["loss"])) > 0.1
