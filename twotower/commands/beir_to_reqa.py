"""`twotower beir-to-reqa --data DIR --split SPLIT --out DIR`: a BEIR split as the fine-tuning
data `twotower finetune --split beir` reads (the flags of eval.beir_finetune: one per
BeirToReqaConfig field, dataclass_flags); prints the parts and their pairs."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.commands import dataclass_flags, flags
from twotower.eval import beir_finetune


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("beir-to-reqa", beir_finetune.__doc__)
  dataclass_flags.add_fields(p, beir_finetune.BeirToReqaConfig, exclude=("overwrite",))
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> beir_finetune.BeirToReqaConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  try:  # what BeirToReqaConfig refuses (the shares) is a usage error
    return dataclass_flags.config_from(args, beir_finetune.BeirToReqaConfig,
                                      out=flags.out_folder(p, args.out))
  except ValueError as e:
    p.error(str(e))


def summary(result: beir_finetune.BeirToReqaResult) -> str:
  stats = result.stats
  lines = [f"{result.out}: {stats[beir_finetune.DOCUMENTS]} candidates, "
           f"{stats[beir_finetune.QUERIES_JUDGED]} judged queries",
           "", "| part | queries | pairs |", "|---|---:|---:|"]
  for part in (beir_finetune.TRAIN, beir_finetune.VALIDATION, beir_finetune.TEST):
    if beir_finetune.queries_in(part) in stats:
      pairs = stats.get(beir_finetune.pairs_in(part), "")
      lines.append(f"| {part} | {stats[beir_finetune.queries_in(part)]} | {pairs} |")
  skipped = {k: v for k, v in stats.items() if ("skipped" in k or "not_in" in k) and v}
  lines += ["", "skipped: " + (", ".join(f"{k} {v}" for k, v in skipped.items()) or "none"),
            f"fine-tune with: twotower finetune --reqa {result.out} --split "
            f"{beir_finetune.FINETUNE_SPLIT} ..."]
  return "\n".join(lines)


def main(argv: Iterable[str] | None = None) -> None:
  print(summary(beir_finetune.run(parse(argv))))
