"""`twotower bundle --model RUN --reqa DIR | --passages DIR | --docs FILE --out DIR`: a
retriever bundle (the flags of deploy.bundling.bundle; any flag it does not know is a Beam
pipeline option of the embedding job).

`twotower bundle update BUNDLE --add FILE --delete FILE --out DIR`: a new bundle with
documents added and deleted (deploy.bundling.update; the old one is left as it was)."""

from __future__ import annotations

import argparse
import functools
from typing import Iterable

from twotower.core import tower_text as texts
from twotower.commands import dataclass_flags, flags
from twotower.commands.index import add_index_flags, index_config
from twotower.deploy.bundling import bundle
from twotower.deploy.bundling import update

#: Each flag's help; name, type and default come from BundleConfig (commands.dataclass_flags;
#: the index flags are `twotower index`'s).
HELP = {
    "model": "a training run directory (its export/saved_model) or a SavedModel",
    "out": "the bundle directory to write",
    "reqa": "documents = this `twotower reqa` dir's candidates",
    "passages": "documents = this `twotower pairs` output's passages",
    "docs": "documents = these JSON lines ({\"id\": int, \"title\", \"text\", any fields}; "
            "embedded here, each field filterable)",
    "embeddings": "the documents' embeddings (`twotower embed` of the same model and "
                  "documents: their vectors.json must name the model and digest the "
                  "documents' ids and text; folders, files or globs, comma-separated, as "
                  "index --embeddings, input shards of one input included); default: "
                  "embed them here",
    "doc_text": "a candidate's document text, as fine-tuning, embed and BM25 read it",
    "k1": "BM25 k1",
    "b": "BM25 b",
    "weight": "BM25's weight in the hybrid, in [0, 1] (as `twotower fuse --run BM25 DENSE "
              "--weight W`); default: tuned or 0.5",
    "tune_split": "tune the weight on this validation split of --reqa (e.g. validation-5)",
    "tune_metric": "what the tuning maximises",
    "hybrid_depth": "hits each side gives the hybrid (twotower fuse fuses 100-deep runs)",
    "onnx": "also write the query tower as ONNX (query_onnx/): `twotower serve` and "
            "Retriever then embed queries with onnxruntime, without TensorFlow",
    "overwrite": "replace an existing bundle",
}


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("bundle", bundle.__doc__)
  add = functools.partial(dataclass_flags.add_fields, p, bundle.BundleConfig, HELP)
  add(names=("model", "out"))
  # One source of documents; None: the other flag of the group was given (parse makes it "").
  dataclass_flags.add_fields(p.add_mutually_exclusive_group(required=True), bundle.BundleConfig,
                             HELP, names=("reqa", "passages", "docs"),
                             kwargs={"reqa": {"default": None}, "passages": {"default": None},
                                     "docs": {"default": None}})
  add(names=("embeddings", "doc_text"), kwargs={"doc_text": {"choices": texts.DOC_TEXT_MODES}})
  add_index_flags(p)
  add(names=("k1", "b"))
  # A weight given, or one tuned on a split: not both.
  dataclass_flags.add_fields(p.add_mutually_exclusive_group(), bundle.BundleConfig, HELP,
                             names=("weight", "tune_split"))
  add(names=("tune_metric", "hybrid_depth", "onnx", "overwrite"))
  return p


def parse(argv: Iterable[str] | None) -> bundle.BundleConfig:
  p = build_parser()
  args, beam_args = flags.parse_with_beam(p, argv)
  flags.hybrid_tuning(p, args.weight, args.tune_split, args.tune_metric)
  try:  # IndexSpec's and BundleConfig's own checks (flag combinations) are usage errors
    return dataclass_flags.config_from(
        args, bundle.BundleConfig, reqa=args.reqa or "", passages=args.passages or "",
        docs=args.docs or "", index=index_config(args), beam_args=beam_args)
  except ValueError as e:
    p.error(str(e))


UPDATE_HELP = {
    "bundle": "the bundle to update (read only: the new bundle is a changed copy)",
    "out": "the new bundle's directory",
    "add": "documents to add, one JSON object a line ({\"id\": int, \"title\", \"text\", "
           "fields of the bundle}); embedded with the bundle's own model",
    "delete": "ids of documents to delete, one a line",
    "embeddings": "the added documents' vectors (a `twotower embed` output of the bundle's "
                  "model) instead of embedding them here",
    "overwrite": "replace an --out of another update",
}


def build_update_parser() -> argparse.ArgumentParser:
  p = flags.parser("bundle update", update.__doc__)
  dataclass_flags.add_fields(p, update.UpdateConfig, UPDATE_HELP, positional=("bundle",))
  return p


def parse_update(argv: Iterable[str]) -> update.UpdateConfig:
  p = build_update_parser()
  args = p.parse_args(list(argv))
  try:
    return dataclass_flags.config_from(args, update.UpdateConfig)
  except ValueError as e:
    p.error(str(e))


def main(argv: Iterable[str] | None = None) -> None:
  argv = None if argv is None else list(argv)
  if argv and argv[0] == "update":
    config = parse_update(argv[1:])
    result = update.run(config)
    m = result.manifest
    tombstones = f", {m.index.tombstones} tombstones" if m.index.tombstones else ""
    print(f"bundle {result.path}: {m.documents.count} documents ({len(m.lineage.operations)} "
          f"operation(s) since {m.lineage.parent.path}{tombstones})\n"
          f"serve it: POST /v1/admin/swap {{\"bundle\": \"{result.path}\"}}")
    return
  result = bundle.run(parse(argv))
  m = result.manifest
  hybrid = m.hybrid
  tuned = (f"tuned on {hybrid.tuned_on} ({hybrid.questions} questions, {hybrid.metric})"
           if hybrid.tuned_on else "not tuned")
  print(f"bundle {result.path}: {m.documents.count} documents, dim "
        f"{m.model.embedding_dim}, index {m.index.factory}, hybrid weight "
        f"{hybrid.weight:.2f} ({tuned})\n"
        f"try: twotower query {result.path} \"your question\" --mode hybrid")
