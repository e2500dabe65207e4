"""`twotower export-hf RUN --out DIR`: a trained run as a sentence-transformers / Hugging Face
model and ONNX towers that load without twotower (model.export_hf)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.commands import dataclass_flags, flags
from twotower.model import export_hf

#: Each flag's help; name, type and default come from ExportHfConfig
#: (commands.dataclass_flags).
HELP = {
    "run": "a trained run dir (or its export/ dir, or the export's SavedModel)",
    "out": "the model directory to write",
    "onnx": "skip the ONNX files (onnx/model.onnx, onnx_towers/)",
}


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser(export_hf.STAGE, export_hf.__doc__)
  dataclass_flags.add_fields(p, export_hf.ExportHfConfig, HELP, exclude=("overwrite",),
                             positional=("run",),
                             kwargs={"onnx": dataclass_flags.SWITCH_OFF})
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> export_hf.ExportHfConfig:
  args = build_parser().parse_args(None if argv is None else list(argv))
  return dataclass_flags.config_from(args, export_hf.ExportHfConfig)


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
