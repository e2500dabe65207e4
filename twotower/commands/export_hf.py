"""`twotower export-hf RUN --out DIR`: a trained run as a sentence-transformers / Hugging Face
model and ONNX towers that load without twotower (model.export_hf)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.commands import flags
from twotower.model import export_hf


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser(export_hf.STAGE, export_hf.__doc__)
  p.add_argument("run", help="a trained run dir (or its export/ dir, or the export's SavedModel)")
  p.add_argument("--out", required=True, help="the model directory to write")
  p.add_argument("--no_onnx", action="store_true",
                 help="skip the ONNX files (onnx/model.onnx, onnx_towers/)")
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> export_hf.ExportHfConfig:
  args = build_parser().parse_args(None if argv is None else list(argv))
  return export_hf.ExportHfConfig(run=args.run, out=args.out, onnx=not args.no_onnx,
                                  overwrite=args.overwrite)


def main(argv: Iterable[str] | None = None) -> None:
  config = parse(argv)
  result = export_hf.run(config)
  print(f"exported {config.run} ({result.towers} towers) -> {result.out}: "
        f"{len(result.files)} files")
  print(f"  sentence-transformers: SentenceTransformer({result.out!r}).encode_query([...]) / "
        f".encode_document([title + {export_hf.DOC_JOIN!r} + text])")
  if config.onnx:
    print(f"  onnxruntime: {result.out}/{export_hf.ONNX_TOWERS_DIR}/query/model.onnx, "
          f"{result.out}/{export_hf.ONNX_TOWERS_DIR}/document/model.onnx")
