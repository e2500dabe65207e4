"""`twotower bundle --model RUN --reqa DIR | --passages DIR --out DIR`: a retriever bundle
(the flags of deploy.serving.bundle; any flag it does not know is a Beam pipeline option of
the embedding job)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower import texts
from twotower.commands import flags
from twotower.commands.index import add_index_flags, index_config
from twotower.deploy.serving import bundle


def build_parser() -> argparse.ArgumentParser:
  d = bundle.BundleConfig(model="", out="", reqa="-")
  p = flags.parser("bundle", bundle.__doc__)
  p.add_argument("--model", required=True,
                 help="a training run directory (its export/saved_model) or a SavedModel")
  p.add_argument("--out", required=True, help="the bundle directory to write")
  docs = p.add_mutually_exclusive_group(required=True)
  docs.add_argument("--reqa", help="documents = this `twotower reqa` dir's candidates")
  docs.add_argument("--passages", help="documents = this `twotower pairs` output's passages")
  p.add_argument("--embeddings", default="",
                 help="the documents' embeddings (`twotower embed` of the same model and "
                      "documents: their vectors.json must name the model and digest the "
                      "documents' ids and text; folders, files or globs, comma-separated, as "
                      "index --embeddings, input shards of one input included); default: "
                      "embed them here")
  p.add_argument("--doc_text", choices=texts.DOC_TEXT_MODES, default=d.doc_text,
                 help="a candidate's document text, as fine-tuning, embed and BM25 read it")
  add_index_flags(p)
  p.add_argument("--k1", type=float, default=d.k1, help="BM25 k1")
  p.add_argument("--b", type=float, default=d.b, help="BM25 b")
  hybrid = p.add_mutually_exclusive_group()
  hybrid.add_argument("--weight", type=float, default=None,
                      help="BM25's weight in the hybrid, in [0, 1] (as `twotower fuse "
                           "--run BM25 DENSE --weight W`); default: tuned or 0.5")
  hybrid.add_argument("--tune_split", default="",
                      help="tune the weight on this validation split of --reqa "
                           "(e.g. validation-5)")
  p.add_argument("--tune_metric", default=d.tune_metric, help="what the tuning maximises")
  p.add_argument("--hybrid_depth", type=int, default=d.hybrid_depth,
                 help="hits each side gives the hybrid (twotower fuse fuses 100-deep runs)")
  p.add_argument("--onnx", action="store_true",
                 help="also write the query tower as ONNX (query_onnx/): `twotower serve` "
                      "and Retriever then embed queries with onnxruntime, without TensorFlow")
  p.add_argument("--overwrite", action="store_true", help="replace an existing bundle")
  return p


def parse(argv: Iterable[str] | None) -> bundle.BundleConfig:
  p = build_parser()
  args, beam_args = flags.parse_with_beam(p, argv)
  flags.hybrid_tuning(p, args.weight, args.tune_split, args.tune_metric)
  try:  # IndexSpec's and BundleConfig's own checks (flag combinations) are usage errors
    index = index_config(args)
    return bundle.BundleConfig(
        model=args.model, out=args.out, reqa=args.reqa or "", passages=args.passages or "",
        embeddings=args.embeddings, doc_text=args.doc_text, index=index,
        k1=args.k1, b=args.b, weight=args.weight, tune_split=args.tune_split,
        tune_metric=args.tune_metric, hybrid_depth=args.hybrid_depth, onnx=args.onnx,
        overwrite=args.overwrite, beam_args=beam_args)
  except ValueError as e:
    p.error(str(e))


def main(argv: Iterable[str] | None = None) -> None:
  result = bundle.run(parse(argv))
  m = result.manifest
  hybrid = m.hybrid
  tuned = (f"tuned on {hybrid.tuned_on} ({hybrid.questions} questions, {hybrid.metric})"
           if hybrid.tuned_on else "not tuned")
  print(f"bundle {result.path}: {m.documents.count} documents, dim "
        f"{m.model.embedding_dim}, index {m.index.factory}, hybrid weight "
        f"{hybrid.weight:.2f} ({tuned})\n"
        f"try: twotower query {result.path} \"your question\" --mode hybrid")
