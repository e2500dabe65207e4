"""`twotower beir --data DIR --split SPLIT --out DIR`: every system on a BEIR dataset (the
flags of eval.beir_eval: one per BeirConfig field, dataclass_flags); prints the metrics
table and, for each system after the first, the paired bootstrap interval of its difference
from the first on each judged query (twotower.experiment.bootstrap)."""

from __future__ import annotations

import argparse
from typing import Iterable, Sequence

from twotower.commands import dataclass_flags, flags
from twotower.commands.embed import saved_model
from twotower.eval import beir_eval, report
from twotower.experiment import bootstrap

#: Metrics the printed intervals are of (where --metrics has them).
INTERVAL_METRICS = ("nDCG@10", "R@100")


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("beir", beir_eval.__doc__)
  dataclass_flags.add_fields(
      p, beir_eval.BeirConfig, exclude=("overwrite", "beam_args"),
      kwargs={"systems": {"type": flags.csv}, "metrics": {"type": flags.csv},
              "hits": {"type": flags.positive_int}, "threads": {"type": flags.positive_int},
              "batch_size": {"type": flags.positive_int},
              "embed_batch_size": {"type": flags.positive_int},
              "min_tune_queries": {"type": flags.positive_int}})
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> beir_eval.BeirConfig:
  p = build_parser()
  args, beam_args = flags.parse_with_beam(p, argv)
  try:  # what BeirConfig refuses (systems, metrics, weight, model) is a usage error
    return dataclass_flags.config_from(
        args, beir_eval.BeirConfig, out=flags.out_folder(p, args.out),
        model=saved_model(args.model) if args.model else "", beam_args=beam_args)
  except ValueError as e:
    p.error(str(e))


def intervals(result: beir_eval.BeirResult,
              metrics: Sequence[str] = INTERVAL_METRICS) -> str:
  """A Markdown table: each system after the first against the first, per metric, the mean
  difference in points and its paired bootstrap 95 % interval over the judged queries."""
  systems = [r["system"] for r in result.records]
  first = result.evaluations[systems[0]]
  rows = ["| system | vs | metric | difference | 95 % interval |", "|---|---|---|---:|---:|"]
  for name in systems[1:]:
    other = result.evaluations[name]
    for metric in (m for m in metrics if m in first.metrics):
      interval = bootstrap.paired_values(other.bootstrap_values(metric, first.query_ids),
                                         first.bootstrap_values(metric))
      rows.append(f"| {name} | {systems[0]} | {metric} | {interval.difference:+.2f} | "
                  f"[{interval.low:+.2f}, {interval.high:+.2f}] |")
  return "\n".join(rows) + "\n" if len(rows) > 2 else ""


def main(argv: Iterable[str] | None = None) -> None:
  result = beir_eval.run(parse(argv))
  print(report.markdown_table(result.records), end="")
  if result.hybrid is not None:
    print(f"\nhybrid: weight {result.hybrid['weight']:.2f} on {beir_eval.HYBRID_FIRST}, "
          f"{result.hybrid['text']}")
  table = intervals(result)
  if table:
    print("\n" + table, end="")
