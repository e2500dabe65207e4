"""The accelerator preset and the prepared accelerator run (issue 64): the h200-6min preset
states the size and step arithmetic of the model it builds; a wall budget stops either
trainer; benchmarks/accelerator_run.py packs its inputs and runs pre-training to a wall
budget, fine-tuning and scoring on JAX in a process that never imports TensorFlow (here on
CPU, at the tiny preset and a few seconds: no GPU has run it)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import accelerator_run
from benchmarks.train_speed import train_flops_per_example
from twotower.model import config
from twotower.pipelines.reqa import builder as reqa
from twotower.testing import pairs as testing
from twotower.testing import squad

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The preset's stated assumptions (its description): H200 bf16 peak and MFU.
PEAK_TFLOPS, MFU = 790.0, 0.30


def _stated(description: str, pattern: str) -> str:
  found = re.search(pattern, description)
  assert found, pattern
  return found.group(1)


def test_the_h200_preset_states_the_model_it_builds():
  from twotower.model.two_tower import build_two_tower
  cfg = config.load("h200-6min")
  m, d, t = cfg.model, cfg.data, cfg.trainer
  assert cfg.runtime.backend == "jax" and t.mixed_precision
  assert 6 <= m.num_layers <= 12 and 512 <= m.hidden_dim <= 768
  assert (m.query_len, m.doc_len) == (64, 288) and d.batch_size >= 1024
  vocab = 30_522
  assert "30,522-token vocabulary" in cfg.description
  model = build_two_tower(m, vocab)
  assert _stated(cfg.description, r"([\d.]+)M parameters") == f"{model.count_params() / 1e6:.1f}"
  assert _stated(cfg.description, r"\(([\d.]+)M per tower") == (
      f"{model.query_tower.count_params() / 1e6:.1f}")
  assert _stated(cfg.description, r"([\d.]+)M of it token embeddings") == (
      f"{vocab * m.hidden_dim / 1e6:.1f}")
  per_example = train_flops_per_example(m, d.batch_size)
  per_step = per_example * d.batch_size
  step_seconds = per_step / (PEAK_TFLOPS * 1e12 * MFU)
  assert _stated(cfg.description, r"([\d.]+) GFLOP per training example") == (
      f"{per_example / 1e9:.1f}")
  assert _stated(cfg.description, r"([\d.]+) TFLOP per step") == f"{per_step / 1e12:.1f}"
  assert _stated(cfg.description, r"([\d.]+) s per step") == f"{step_seconds:.2f}"
  assert _stated(cfg.description, r"(\d+) steps in") == str(t.steps)
  assert _stated(cfg.description, r"steps in ([\d.]+)\s+minutes") == (
      f"{t.steps * step_seconds / 60:.1f}")
  assert _stated(cfg.description, r"([\d.]+)M pairs") == f"{t.steps * d.batch_size / 1e6:.2f}"


def test_throughput_leaves_the_first_rows_compilation_out():
  rows = [{"step": 5.0, "wall_seconds": 20.0}, {"step": 10.0, "wall_seconds": 22.0},
          {"step": 15.0, "wall_seconds": 24.0}]
  assert accelerator_run.throughput(rows, batch=8) == pytest.approx(10 * 8 / 4.0)
  assert accelerator_run.throughput(rows[:1], batch=8) is None


def test_the_wall_budget_stops_a_tensorflow_run_too(tmp_path):
  """TrainRunConfig.wall_budget_s on the TensorFlow trainer (the JAX one: below): the run
  stops long before its schedule's end, with the stopping step's checkpoint and row."""
  from twotower.core import contracts
  from twotower.model import pretrain
  root = str(tmp_path)
  vocab = testing.write_vocab(os.path.join(root, "vocab.txt"))
  testing.write_pairs(root, "ict", "train", testing.synthetic_pairs(64))
  out = os.path.join(root, "run")
  result = pretrain.run(pretrain.PretrainConfig(
      training=config.load("tiny", ["trainer.steps=100000", "trainer.eval_steps=0"]), out=out,
      vocab=vocab, pairs=root, export=False, progress="none", wall_budget_s=1.0))
  assert 0 < result.steps < 100_000
  assert result.history["step"][-1] == result.steps and result.history["wall_seconds"][-1] >= 1.0
  assert os.listdir(contracts.checkpoint_dir(out))


def _inputs(root: str) -> tuple[str, str, str]:
  """(pairs dir, vocabulary, ReQA dir with an 80 % split): the tests' synthetic pairs and
  SQuAD file, written by the product's writers."""
  pairs = os.path.join(root, "pairs")
  vocab = testing.write_vocab(os.path.join(root, "vocab.txt"))
  testing.write_pairs(pairs, "ict", "train", testing.synthetic_pairs(128))
  testing.write_pairs(pairs, "ict", "heldout", testing.synthetic_pairs(32, seed=5))
  reqa_dir = os.path.join(root, "reqa")
  reqa.run(reqa.ReqaConfig(out=reqa_dir, squad=squad.write_squad(os.path.join(root, "sq.json")),
                           ratios=(80,)))
  return pairs, vocab, reqa_dir


@pytest.mark.slow  # three XLA compilations on CPU and a Beam job: ~100 s on 2 loaded cores
def test_the_run_packs_trains_to_its_budget_and_scores_without_tensorflow(tmp_path):
  root = str(tmp_path)
  pairs, vocab, reqa_dir = _inputs(root)
  packed = os.path.join(root, "accel")
  assert accelerator_run.main(["--pack", packed, "--pairs", pairs, "--vocab", vocab,
                               "--reqa", reqa_dir, "--no_wheels", "--max_mib", "1000"]) == 0
  assert sorted(os.listdir(packed)) == ["pairs", "reqa", "vocab.txt"]

  out, part_mib = os.path.join(root, "out"), 0.02
  # A schedule far longer than the budget: the budget stops it.
  command = [sys.executable, os.path.join(ROOT, "benchmarks", "accelerator_run.py"),
             "--data", packed, "--config", "tiny", "--set", "trainer.steps=100000",
             "--budget_s", "4", "--select", "MRR", "--finetune_checkpoint_every", "5",
             "--save_weights", "--weights_part_mib", str(part_mib),
             "--work", os.path.join(root, "work"), "--out", out]
  done = subprocess.run(command, cwd=root, env={**os.environ, "KERAS_BACKEND": "jax"},
                        capture_output=True, text=True, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "| zero-shot |" in done.stdout and "| finetuned |" in done.stdout

  with open(os.path.join(out, "metrics.json"), encoding="utf-8") as f:
    metrics = json.load(f)
  assert metrics["tensorflow_modules"] == []
  assert metrics["precision"] == "f32" and metrics["device"]["platform"] == "cpu"
  p = metrics["pretrain"]
  assert p["stopped_by"] == "budget" and 0 < p["steps"] < 100_000
  assert p["pairs_seen"] == p["steps"] * 8 > 0
  assert p["history"] and all(row["wall_seconds"] > 0 for row in p["history"])
  assert p["examples_per_s_with_compile"] > 0 and 0 < p["fraction_of_peak"] < 1
  assert p["achieved_tflops"] == pytest.approx(
      p["flops_per_example"] * (p["examples_per_s"] or p["examples_per_s_with_compile"]) / 1e12)
  ft = metrics["finetune"]
  assert ft["steps"] == 10 and ft["selected_step"] in (5, 10) and len(ft["history"]) == 2
  test = metrics["test"]
  assert test["split"] == "test-80" and test["questions"] > 0 and test["candidates"] > 0
  for name in ("zero_shot", "finetuned"):
    assert set(test[name]) == {"R@1", "R@10", "R@100", "MRR"}
    assert all(0.0 <= v <= 1.0 for v in test[name].values())
    assert test[name]["R@1"] <= test[name]["R@10"] <= test[name]["R@100"]
  for name in ("pretrain_history.csv", "finetune_history.csv", "table.md"):
    assert os.path.getsize(os.path.join(out, name)) > 0

  # The weights: parts no larger than asked, whole again when concatenated.
  parts = [os.path.join(out, name) for name in metrics["weights"]]
  assert len(parts) > 1 and all(os.path.getsize(p) <= part_mib * 1024 * 1024 for p in parts)
  whole = b"".join(open(p, "rb").read() for p in parts)
  with np.load(io.BytesIO(whole)) as arrays:
    assert sum(arrays[k].size for k in arrays.files) == metrics["parameters"]
    assert all(arrays[k].dtype == np.float16 for k in arrays.files)
