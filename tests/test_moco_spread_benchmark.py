"""benchmarks/moco_spread.py on synthetic crop pairs and the tiny towers: each queue size is
pre-trained once (a second call reuses the runs) and the table has every row."""

from __future__ import annotations

import os
import sys

# benchmarks/ is a plain folder at the repository root, not part of the installed package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import moco_spread  # noqa: E402
from twotower.testing import pairs as testing  # noqa: E402


def test_tiny_run_measures_every_queue_and_reuses_its_runs(tmp_path, capsys):
  root = str(tmp_path / "pairs")
  testing.write_pairs(root, "crop", "train", testing.synthetic_pairs(64, task="crop"))
  testing.write_pairs(root, "crop", "heldout", testing.synthetic_pairs(16, seed=5, task="crop"))
  vocab = testing.write_vocab(str(tmp_path / "vocab.txt"))
  argv = ["--pairs", root, "--vocab", vocab, "--work", str(tmp_path / "runs"), "--steps", "4",
          "--queues", "0,16", "--docs", "16", "--config", "tiny"]
  assert moco_spread.main(argv) == 0
  table = capsys.readouterr().out
  rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:]
          for line in table.splitlines() if line.startswith("| ") and "---" not in line}
  assert set(rows) >= {"initialisation", "in-batch", "moco-q16-m0.99"}
  for name in ("in-batch", "moco-q16-m0.99"):
    cosine, ratio, accuracy = (float(x) for x in rows[name][:3])
    assert -1.0 <= cosine <= 1.0 and 0.0 <= accuracy <= 1.0
    assert moco_spread.last_step(str(tmp_path / "runs" / name)) == 4
  assert rows["in-batch"][1] == "1.00"  # the ratio's base
  history = tmp_path / "runs" / "in-batch" / "history.csv"
  before = history.stat().st_mtime_ns
  assert moco_spread.main(argv) == 0   # reused: nothing trained again
  assert history.stat().st_mtime_ns == before
