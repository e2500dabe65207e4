"""Tables and plots of metrics records (contracts.metrics_record), for any stage.

    records = [contracts.metrics_record(...), ...]
    report.write_report(records, "out/", stem="metrics")  # metrics.json/.md/.csv/.png

Generic: a list of records in, the four files out. Markdown shows recalls in percent (as the
paper's tables); CSV and JSON keep fractions in [0, 1]. Each record may carry a `gold` key
(twotower.core.metrics.GOLD_CONVENTIONS) that the table shows as a column.
"""

from __future__ import annotations

import csv
import io as _io
import os
import re
from typing import Sequence

from twotower.core import files as tio


def metric_names(records: Sequence[dict]) -> list[str]:
  """R@k columns by k, then MRR, then any other metric, in first-seen order."""
  names: list[str] = []
  for r in records:
    for k in r["metrics"]:
      if k not in names:
        names.append(k)
  recalls = sorted((n for n in names if re.fullmatch(r"R@\d+", n)), key=lambda n: int(n[2:]))
  rest = [n for n in names if n not in recalls]
  rest.sort(key=lambda n: n != "MRR")
  return recalls + rest


def _label_columns(records: Sequence[dict]) -> list[str]:
  cols = ["system", "split"]
  if any("gold" in r for r in records):
    cols.append("gold")
  return cols + ["questions", "candidates"]


def markdown_table(records: Sequence[dict], digits: int = 2) -> str:
  """A Markdown table, recalls and MRR in percent."""
  labels, names = _label_columns(records), metric_names(records)
  head = labels + names
  lines = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---" if c in ("system", "split", "gold") else "---:"
                          for c in head) + "|"]
  for r in records:
    cells = [str(r.get(c, "")) for c in labels]
    cells += [f"{100 * r['metrics'][n]:.{digits}f}" if n in r["metrics"] else ""
              for n in names]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def csv_text(records: Sequence[dict], digits: int = 4) -> str:
  labels, names = _label_columns(records), metric_names(records)
  buf = _io.StringIO()
  writer = csv.writer(buf, lineterminator="\n")
  writer.writerow(labels + names)
  for r in records:
    writer.writerow([r.get(c, "") for c in labels]
                    + [f"{r['metrics'][n]:.{digits}f}" if n in r["metrics"] else ""
                       for n in names])
  return buf.getvalue()


def plot_recall(records: Sequence[dict], path: str, title: str = "Recall@k") -> None:
  """One recall@k curve per record (x: k, log scale), saved as a PNG."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
  all_ks: set[int] = set()
  for r in records:
    ks = sorted(int(n[2:]) for n in r["metrics"] if re.fullmatch(r"R@\d+", n))
    if not ks:
      continue
    label = " / ".join(str(r[c]) for c in ("system", "split", "gold") if r.get(c))
    style = "--" if r.get("gold") == "sentence" else "-"  # ReQA's convention dashed
    ax.plot(ks, [100 * r["metrics"][f"R@{k}"] for k in ks], style, marker="o", label=label)
    all_ks.update(ks)
  ax.set_xscale("log")
  if all_ks:
    ax.set_xticks(sorted(all_ks), [str(k) for k in sorted(all_ks)])
  ax.set_xlabel("k")
  ax.set_ylabel("Recall@k (%)")
  ax.set_ylim(0, 100)
  ax.set_title(title)
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=7, loc="lower right")
  fig.tight_layout()
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  tmp = os.path.join(directory, f".tmp-{os.path.basename(path)}")
  fig.savefig(tmp, format="png")
  plt.close(fig)
  os.replace(tmp, path)


def write_report(records: Sequence[dict], out_dir: str, stem: str = "metrics",
                 title: str = "Recall@k") -> dict[str, str]:
  """Writes `<stem>.json` (a list when several records), `.md`, `.csv`, `.png` under out_dir;
  returns {suffix: path}."""
  out_dir = out_dir.rstrip("/")
  tio.makedirs(out_dir)
  paths = {s: f"{out_dir}/{stem}.{s}" for s in ("json", "md", "csv", "png")}
  records = list(records)
  tio.write_json(paths["json"], records[0] if len(records) == 1 else records)
  tio.write_text(paths["md"], markdown_table(records))
  tio.write_text(paths["csv"], csv_text(records))
  plot_recall(records, paths["png"], title)
  return paths


def with_gold(record: dict, gold: str) -> dict:
  """`record` plus the gold convention it was computed under."""
  return {**record, "gold": gold}

