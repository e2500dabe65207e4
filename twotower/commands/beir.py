"""`twotower beir --data DIR --split SPLIT --out DIR`: every system on a BEIR dataset (the
flags of eval.beir_eval: one per BeirConfig field, dataclass_flags); prints the metrics
table, each hybrid's weight and the paired bootstrap interval of each system's difference
from bm25-flat (or the first system) on each judged query (eval.beir_eval.paired_intervals,
also in OUT/intervals.md)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.commands import dataclass_flags, flags
from twotower.commands.embed import saved_model
from twotower.eval import beir_eval, report


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("beir", beir_eval.__doc__)
  dataclass_flags.add_fields(
      p, beir_eval.BeirConfig, exclude=("overwrite", "beam_args"),
      kwargs={"systems": {"type": flags.csv}, "metrics": {"type": flags.csv},
              "interval_metrics": {"type": flags.csv},
              "hits": {"type": flags.positive_int}, "threads": {"type": flags.positive_int},
              "batch_size": {"type": flags.positive_int},
              "embed_batch_size": {"type": flags.positive_int},
              "min_tune_queries": {"type": flags.positive_int}})
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> beir_eval.BeirConfig:
  p = build_parser()
  args, beam_args = flags.parse_with_beam(p, argv)
  try:  # what BeirConfig refuses (systems, metrics, weight, model, heap) is a usage error
    return dataclass_flags.config_from(
        args, beir_eval.BeirConfig, out=flags.out_folder(p, args.out),
        model=saved_model(args.model) if args.model else "",
        finetuned_model=saved_model(args.finetuned_model) if args.finetuned_model else "",
        beam_args=beam_args)
  except ValueError as e:
    p.error(str(e))


def main(argv: Iterable[str] | None = None) -> None:
  result = beir_eval.run(parse(argv))
  print(report.markdown_table(result.records), end="")
  for name, hybrid in result.hybrid.items():
    print(f"\n{name}: weight {hybrid['weight']:.2f} on {beir_eval.HYBRID_FIRST}, "
          f"{hybrid['text']}")
  table = beir_eval.intervals_markdown(result.intervals)
  if table:
    print("\n" + table, end="")
