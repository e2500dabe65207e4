"""The same command gives the same numbers (issue 11): with `trainer.deterministic` (the
default) two runs of one job with one seed end with identical weights and histories, in the
same process one after the other; another seed gives other weights."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from twotower import contracts
from twotower.model import config, pretrain
from twotower.testing import pairs as testing


@pytest.fixture(scope="module")
def pairs_root(tmp_path_factory):
  root = tmp_path_factory.mktemp("determinism")
  testing.write_vocab(str(root / "vocab.txt"))
  for task, seed in (("ict", 0), ("bfs", 1)):  # 2 shards each: interleaved, then mixed
    testing.write_pairs(str(root), task, "train", testing.synthetic_pairs(64, seed, task))
  return root


def _train(root, out, seed: int):
  # Dropout on (tiny has none) so that its random masks are part of what must repeat.
  cfg = config.load("tiny", ["data.tasks=ict,bfs", "trainer.steps=10", "trainer.eval_steps=0",
                             "model.dropout=0.1", f"trainer.seed={seed}"])
  assert cfg.trainer.deterministic
  result = pretrain.run(pretrain.PretrainJob(config=cfg, out=str(out),
                                             vocab=str(root / "vocab.txt"), pairs=str(root),
                                             export=False, progress="none"))
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(contracts.checkpoint_dir(str(out))))
  # Every float tensor of the checkpoint: the towers' weights (saved under the optimizer's
  # `_trainable_variables` path) and Adam's moments.
  weights = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
             if not name.startswith("_CHECKPOINTABLE") and reader.get_tensor(name).dtype.kind == "f"}
  return result, weights


def test_the_same_seed_gives_identical_weights_and_another_seed_does_not(pairs_root, tmp_path):
  from tensorflow.python.framework import config as tf_config
  assert not tf_config.is_op_determinism_enabled()
  first, a = _train(pairs_root, tmp_path / "a", seed=0)
  second, b = _train(pairs_root, tmp_path / "b", seed=0)
  other, c = _train(pairs_root, tmp_path / "c", seed=1)
  assert len(a) > 10 and a.keys() == b.keys() == c.keys()
  for name in a:
    np.testing.assert_array_equal(a[name], b[name], err_msg=name)
  assert first.history == second.history
  assert max(float(np.max(np.abs(a[n] - c[n]))) for n in a) > 1e-3
  assert first.history["loss"] != other.history["loss"]
  # Op determinism was on for each run only: the process is as it was (XLA, unseeded ops).
  assert not tf_config.is_op_determinism_enabled()
