"""Training curves of one or more runs (their `history.csv`) as a PNG.

  python -m twotower.model.curves --run ICT=runs/ict --run ICT+BFS+WLP=runs/all \
      --out docs/results/pretrain_cpu_small_curve.png

Left: held-out and train in-batch accuracy against optimizer steps, with chance (1/batch)
drawn; right: the losses.
"""

from __future__ import annotations

import argparse
import os

import pandas as pd
import yaml


def _load(run_dir: str) -> tuple[pd.DataFrame, int, int]:
  history = pd.read_csv(os.path.join(run_dir, "history.csv"))
  with open(os.path.join(run_dir, "config.yaml"), encoding="utf-8") as f:
    cfg = yaml.safe_load(f)
  every = int(cfg["trainer"]["checkpoint_every"])
  history["step"] = (history["epoch"] + 1) * every
  return history, int(cfg["data"]["batch_size"]), every


def plot(runs: dict[str, str], out: str, title: str = "") -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, (ax_acc, ax_loss) = plt.subplots(1, 2, figsize=(11, 4))
  batch = None
  for i, (label, run_dir) in enumerate(runs.items()):
    h, batch, _ = _load(run_dir)
    color = f"C{i}"
    if "val_in_batch_accuracy" in h:
      ax_acc.plot(h["step"], h["val_in_batch_accuracy"], "-o", color=color, label=f"{label} held-out")
      ax_loss.plot(h["step"], h["val_loss"], "-o", color=color, label=f"{label} held-out")
    ax_acc.plot(h["step"], h["in_batch_accuracy"], "--", color=color, alpha=0.6,
                label=f"{label} train")
    ax_loss.plot(h["step"], h["loss"], "--", color=color, alpha=0.6, label=f"{label} train")
  if batch:
    ax_acc.axhline(1.0 / batch, color="gray", linestyle=":", label=f"chance 1/{batch}")
  ax_acc.set_xlabel("step"); ax_acc.set_ylabel("in-batch accuracy"); ax_acc.legend(fontsize=8)
  ax_loss.set_xlabel("step"); ax_loss.set_ylabel("in-batch softmax loss"); ax_loss.legend(fontsize=8)
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  fig.savefig(out, dpi=110)


def run(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--run", action="append", required=True, metavar="LABEL=DIR",
                 help="a run dir with history.csv and config.yaml (repeatable)")
  p.add_argument("--out", required=True, help="PNG path")
  p.add_argument("--title", default="")
  args = p.parse_args(argv)
  runs = dict(item.split("=", 1) for item in args.run)
  plot(runs, args.out, args.title)


if __name__ == "__main__":
  run()
