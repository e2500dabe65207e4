"""`twotower embed --model DIR --candidates FILE --out DIR`: texts -> embeddings-*.parquet with
Beam RunInference (the flags of pipelines.embed; any other flag is a Beam pipeline option)."""

from __future__ import annotations

import argparse
import functools
from typing import Iterable

from twotower.core import tower_text as texts
from twotower.commands import dataclass_flags, flags
from twotower.pipelines import embed

#: Each flag's help; name, type and default come from EmbedConfig (commands.dataclass_flags).
HELP = {
    "model": "a training run directory (its export/saved_model) or a SavedModel",
    "out": "embeddings directory: writes embeddings-*.parquet and stats.json",
    "doc_text": "layout of a candidate's document text (twotower.core.tower_text)",
    "batch_size": "largest batch per SavedModel call (BatchElements max_batch_size)",
    "min_batch_size": "smallest batch BatchElements forms (0: --batch_size, fixed batches)",
    "num_shards": "output shards (0: the runner decides)",
    "large_model": "share one model across worker processes (RunInference large_model)",
    "model_copies": "exact number of model copies per machine (RunInference model_copies)",
    "num_input_shards": "split the input rows into N parts (by a hash of each row's id) and "
                        "embed only --input_shard's; run each part (on its own machine) into "
                        "its own --out, and give `index`/`bundle` all of them: --embeddings "
                        "out0,out1 or a glob of the folders (each records a digest of the "
                        "whole input's rows: shards of two inputs are refused)",
    "input_shard": "which part to embed, 0..N-1 (with --num_input_shards N)",
}


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("embed", embed.__doc__)
  add = functools.partial(dataclass_flags.add_fields, p, embed.EmbedConfig, HELP)
  add(names=("model", "out"))
  # One input flag per kind: the flag given names EmbedConfig.kind, its value is .path.
  src = p.add_mutually_exclusive_group(required=True)
  src.add_argument("--candidates", help="ReQA candidates.parquet (document signature)")
  src.add_argument("--passages", help="a `twotower pairs` output dir, its passages/ dir or a "
                   "glob (document signature)")
  src.add_argument("--questions", help="questions-<split>.parquet (query signature)")
  add(names=("doc_text", "batch_size", "min_batch_size", "num_shards", "large_model",
             "model_copies", "num_input_shards", "input_shard"),
      kwargs={"doc_text": {"choices": texts.DOC_TEXT_MODES}})
  flags.add_overwrite(p)
  return p


def saved_model(model: str) -> str:
  """A local training run directory -> its export's SavedModel, as `bundle --model` takes it
  (deploy.bundling.bundle.resolve_saved_model); a remote path, or one that is neither, as
  given (the job then says what is wrong with it, after checking the inputs)."""
  if "://" in model:
    return model
  from twotower.deploy.bundling import bundle  # pylint: disable=import-outside-toplevel
  try:
    return bundle.resolve_saved_model(model)
  except FileNotFoundError:
    return model


def parse(argv: Iterable[str] | None) -> embed.EmbedConfig:
  p = build_parser()
  args, beam_args = flags.parse_with_beam(p, argv)
  flags.non_negative(p, args, ("min_batch_size", "num_shards"))
  if args.batch_size < 1:
    p.error(f"--batch_size must be >= 1, got {args.batch_size}")
  if args.min_batch_size > args.batch_size:
    p.error(f"--min_batch_size {args.min_batch_size} exceeds --batch_size {args.batch_size}")
  if args.model_copies is not None and args.model_copies < 1:
    p.error(f"--model_copies must be >= 1, got {args.model_copies}")
  if args.num_input_shards < 1:
    p.error(f"--num_input_shards must be >= 1, got {args.num_input_shards}")
  if not 0 <= args.input_shard < args.num_input_shards:
    p.error(f"--input_shard must be in 0..{args.num_input_shards - 1} (--num_input_shards "
            f"{args.num_input_shards}), got {args.input_shard}")
  kind = next(k for k in embed.KINDS if getattr(args, k))
  return dataclass_flags.config_from(
      args, embed.EmbedConfig, model=saved_model(args.model), out=flags.out_folder(p, args.out),
      kind=kind, path=getattr(args, kind), beam_args=beam_args)


def main(argv: Iterable[str] | None = None) -> None:
  config = parse(argv)
  print(embed.summary_table(embed.run(config).stats, config))
