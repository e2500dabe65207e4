"""`twotower <stage> ...`: one entry point in front of every stage.

Each stage is a module with `run(argv: list[str] | None) -> None` that parses its own flags
(Beam stages hand unknown flags to `PipelineOptions`), so `twotower pairs ...` and
`python -m twotower.pipelines.pairs ...` are the same program. Stages are imported lazily:
`twotower bm25` never pays for importing TensorFlow.

Exit status: 0 on success, 2 on a usage error (argparse), 1 on a failure, with one clear
line on stderr.
"""

from __future__ import annotations

import importlib
import logging
import sys

# stage -> (module, one-line help). Order is the order of the pipeline.
COMMANDS: dict[str, tuple[str, str]] = {
    "pairs": ("twotower.pipelines.pairs",
              "Wikipedia dump -> ICT/BFS/WLP pairs (TFRecord), passages (Parquet), stats.json"),
    "vocab": ("twotower.pipelines.vocab", "learn a WordPiece vocabulary from passages/"),
    "reqa": ("twotower.pipelines.reqa",
             "SQuAD / Natural Questions -> ReQA candidates, questions, fine-tuning pairs"),
    "pretrain": ("twotower.model.pretrain", "pre-train the two towers (ICT/BFS/WLP/MLM)"),
    "finetune": ("twotower.model.finetune", "fine-tune the towers on ReQA pairs"),
    "embed": ("twotower.pipelines.embed", "Beam RunInference: texts -> embeddings/*.parquet"),
    "index": ("twotower.eval.index", "build a FAISS index from embedding shards"),
    "search": ("twotower.eval.search", "search a FAISS index with query embeddings -> run file"),
    "bm25": ("twotower.eval.bm25", "Pyserini BM25 over ReQA candidates -> run file, metrics"),
    "evaluate": ("twotower.eval.evaluate", "Recall@k / MRR of run files -> md, csv, json, png"),
    "experiment": ("twotower.eval.experiment", "the paper's grid of systems x splits"),
    "demo": ("twotower.eval.demo", "end-to-end demo on the embedded Wikipedia slice"),
}


def _usage() -> str:
  width = max(map(len, COMMANDS))
  lines = ["usage: twotower <stage> [flags]   (twotower <stage> --help for its flags)", "",
           "stages:"]
  lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
  return "\n".join(lines)


def setup_logging(level: int = logging.INFO) -> None:
  logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                      datefmt="%H:%M:%S")
  # FAISS logs each CPU-specific build it fails to load (with a traceback) at INFO.
  logging.getLogger("faiss.loader").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if not argv or argv[0] in ("-h", "--help", "help"):
    print(_usage())
    return 0 if argv else 2
  stage, rest = argv[0], argv[1:]
  if stage not in COMMANDS:
    print(f"twotower: unknown stage {stage!r}\n\n{_usage()}", file=sys.stderr)
    return 2
  setup_logging()
  module = importlib.import_module(COMMANDS[stage][0])
  try:
    module.run(rest)
  except SystemExit as e:  # argparse usage errors (2) and explicit exits pass through
    return e.code if isinstance(e.code, int) else 1
  except KeyboardInterrupt:
    print(f"twotower {stage}: interrupted", file=sys.stderr)
    return 130
  except (ValueError, FileNotFoundError, OSError, RuntimeError) as e:
    logging.getLogger("twotower").debug("failure", exc_info=True)
    print(f"twotower {stage}: error: {e}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
