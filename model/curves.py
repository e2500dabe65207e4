"""Training curves of one or more runs as a PNG: held-out and train in-batch accuracy against
optimizer steps, with chance (1/batch) drawn, on the left; the losses on the right. Fine-tuning
runs that validated by retrieval (`val_R@100` in their history) show validation Recall@100 on
the left instead, the number their length is chosen by.

  twotower curves --run ICT=runs/ict --run ICT+BFS+WLP=runs/all \
      --out docs/results/pretrain_cpu_small_curve.png

`plot(curves, out)` draws histories a caller already holds (`TrainResult.history`);
`run(CurvesConfig)` reads them from run dirs (history.csv, config.yaml). `table(curves)` gives
the plotted metric as a Markdown table (`--table FILE.md`), so that the numbers a page quotes
come from the runs, not from a reading of the figure.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import sys
from typing import Mapping, Sequence

import yaml

from twotower.core import contracts
from twotower.core import files as tio


@dataclasses.dataclass(frozen=True)
class Curve:
  """One run's history ({metric: [value per checkpoint]}, with `step`) and global batch."""
  history: Mapping[str, Sequence[float]]
  batch_size: int


@dataclasses.dataclass(frozen=True)
class CurvesConfig:
  """runs: (label, run dir) pairs; out: the PNG path; title: the figure's title."""
  runs: tuple[tuple[str, str], ...]
  out: str
  title: str = ""
  table: str = ""   # also write the plotted metric as a Markdown table here
  every: int = 0    # the table's steps: every `every` steps (0: every checkpoint)


def load(run_dir: str) -> Curve:
  """A run dir's history.csv and batch size (its config.yaml)."""
  rows = list(csv.DictReader(io.StringIO(tio.read_text(contracts.history_path(run_dir)))))
  cfg = yaml.safe_load(tio.read_text(contracts.run_config_path(run_dir)))
  history: dict[str, list[float]] = {}
  for row in rows:
    for k, v in row.items():
      history.setdefault(k, []).append(float(v) if v not in ("", None) else float("nan"))
  if "step" not in history:  # a history.csv of an older version: Keras epochs only
    every = int(cfg["trainer"]["checkpoint_every"])
    history["step"] = [(e + 1) * every for e in history.get("epoch", [])]
  return Curve(history, int(cfg["data"]["batch_size"]))


def plot(curves: Mapping[str, Curve], out: str, title: str = "") -> str:
  """Draws `curves` (label -> Curve) into the PNG `out`; returns `out`."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, (ax_acc, ax_loss) = plt.subplots(1, 2, figsize=(11, 4))
  batch = None
  recall = all("val_R@100" in c.history for c in curves.values())
  for i, (label, curve) in enumerate(curves.items()):
    h, batch, color = curve.history, curve.batch_size, f"C{i}"
    if recall:
      ax_acc.plot(h["step"], [100 * v for v in h["val_R@100"]], "-o", color=color,
                  label=f"{label} validation")
    elif "val_in_batch_accuracy" in h:
      ax_acc.plot(h["step"], h["val_in_batch_accuracy"], "-o", color=color,
                  label=f"{label} held-out")
      ax_loss.plot(h["step"], h["val_loss"], "-o", color=color, label=f"{label} held-out")
    if "in_batch_accuracy" in h and not recall:
      ax_acc.plot(h["step"], h["in_batch_accuracy"], "--", color=color, alpha=0.6,
                  label=f"{label} train")
    ax_loss.plot(h["step"], h["loss"], "--", color=color, alpha=0.6, label=f"{label} train")
  if batch and not recall:
    ax_acc.axhline(1.0 / batch, color="gray", linestyle=":", label=f"chance 1/{batch}")
  ax_acc.set_xlabel("step")
  ax_acc.set_ylabel("validation Recall@100 (%)" if recall else "in-batch accuracy")
  ax_acc.legend(fontsize=8)
  ax_loss.set_xlabel("step")
  ax_loss.set_ylabel("in-batch softmax loss")
  ax_loss.legend(fontsize=8)
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  fig.savefig(out, dpi=110)
  plt.close(fig)
  return out


def plotted_metric(curves: Mapping[str, Curve]) -> str:
  """The history column the left panel shows: validation Recall@100, else held-out accuracy."""
  if all("val_R@100" in c.history for c in curves.values()):
    return "val_R@100"
  return "val_in_batch_accuracy"


def table(curves: Mapping[str, Curve], every: int = 0) -> str:
  """The plotted metric of each run at each step (every `every` steps) as Markdown: one row
  per run, one column per step; blank where a run has no checkpoint at that step."""
  metric = plotted_metric(curves)
  values = {label: dict(zip(c.history["step"], c.history.get(metric, ())))
            for label, c in curves.items()}
  steps = sorted({int(s) for v in values.values() for s in v
                  if not every or int(s) % every == 0})
  percent = metric == "val_R@100"
  lines = [f"| {metric} at step | " + " | ".join(f"{s:,}" for s in steps) + " |",
           "|---|" + "---:|" * len(steps)]
  for label, by_step in values.items():
    cells = [("" if s not in by_step else
              f"{100 * by_step[s]:.1f}" if percent else f"{by_step[s]:.3f}") for s in steps]
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


@dataclasses.dataclass(frozen=True)
class CurvesResult:
  plot: str                   # the PNG
  table: str                  # the Markdown table ("" when not asked for)


def run(config: CurvesConfig) -> CurvesResult:
  """Plots the runs of `config` (and writes their table)."""
  curves = {label: load(run_dir) for label, run_dir in config.runs}
  if config.table:
    tio.write_text(config.table, table(curves, config.every))
  return CurvesResult(plot(curves, config.out, config.title), config.table)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("curves"))
