"""`twotower <stage> ...`: one entry point in front of every stage.

Each stage has a command module (`twotower.commands.<stage>`) whose `main(argv)` parses the
stage's flags into its config and calls the stage's typed `run(config)` (in the stage's own
module, COMMANDS). Stages are imported
lazily: `twotower bm25` never pays for importing TensorFlow. `python -m <stage module>` goes
through `run_stage` too, so both ways of running a stage behave the same.

Exit status: 0 on success, 2 on a usage error (argparse), 1 on a failure, with one clear
line on stderr (`--verbose` adds the traceback to the log), 130 when interrupted (SIGINT,
Ctrl-C): also when the KeyboardInterrupt reaches us wrapped in another error (Beam re-raises
one raised inside a DoFn as a RuntimeError "KeyboardInterrupt [while running ...]", and a
worker process killed by the same Ctrl-C fails the job with its own error).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import shutil
import signal
import sys
import threading
from typing import Sequence

from twotower.core import logs

# stage -> (the stage's module, one-line help), in pipeline order. The stage's flags are parsed
# by `twotower.commands.<stage>`; `python -m <the stage's module>` runs the same command.
COMMANDS: dict[str, tuple[str, str]] = {
    "pairs": ("twotower.pipelines.wiki.pairs",
              "Wikipedia dump -> ICT/BFS/WLP pairs (TFRecord), passages (Parquet), stats.json"),
    "vocab": ("twotower.pipelines.vocab", "learn a WordPiece vocabulary from passages/"),
    "reqa": ("twotower.pipelines.reqa.builder",
             "SQuAD / Natural Questions -> ReQA candidates, questions, fine-tuning pairs"),
    "heldout": ("twotower.pipelines.reqa.heldout",
                "held-out pages of a pairs output -> a ReQA-layout benchmark"),
    "hardneg": ("twotower.pipelines.hardneg",
                "BM25 hard negatives for the ReQA fine-tuning pairs -> finetune/*-hn<k>-*"),
    "pretrain": ("twotower.model.pretrain", "pre-train the two towers (ICT/BFS/WLP/MLM)"),
    "finetune": ("twotower.model.finetune", "fine-tune the towers on ReQA pairs"),
    "embed": ("twotower.pipelines.embed", "Beam RunInference: texts -> embeddings/*.parquet"),
    "index": ("twotower.eval.index", "build a FAISS index from embedding shards"),
    "search": ("twotower.eval.search", "search a FAISS index with query embeddings -> run file"),
    "bm25": ("twotower.eval.bm25", "Pyserini BM25 over ReQA candidates -> run file, metrics"),
    "fuse": ("twotower.eval.fusion", "hybrid of two runs (interpolation or RRF) -> run file"),
    "evaluate": ("twotower.eval.evaluate", "Recall@k / MRR of run files -> md, csv, json, png"),
    "beir": ("twotower.eval.beir_eval", "BM25, dense, hybrid on a BEIR folder -> nDCG@10, runs"),
    "reqa-to-beir": ("twotower.eval.reqa_beir", "one split of a ReQA folder -> a BEIR folder"),
    "beir-to-reqa": ("twotower.eval.beir_finetune",
                     "a BEIR split -> fine-tuning data in the ReQA layout (+ a scored part)"),
    "curves": ("twotower.model.curves", "training curves of runs (history.csv) -> PNG"),
    "experiment": ("twotower.experiment", "the paper's grid of systems x splits"),
    "demo": ("twotower.experiment.demo", "end-to-end demo on the embedded Wikipedia slice"),
    "bundle": ("twotower.deploy.bundling.bundle",
               "a retriever bundle: query tower, FAISS index, passage store, Lucene, weight"),
    "query": ("twotower.deploy.serving.query", "search a retriever bundle from the shell"),
    "serve": ("twotower.deploy.serving.app", "HTTP search service over a retriever bundle"),
    "export-hf": ("twotower.model.export_hf",
                  "a run as a sentence-transformers / Hugging Face model and ONNX towers"),
    "runner": ("twotower.deploy.portable.launcher",
               "start|stop|status Beam's job service + worker pool on 127.0.0.1 "
               "(PortableRunner)"),
}


def command_module(stage: str) -> str:
  return f"twotower.commands.{stage.replace('-', '_')}"


def _usage() -> str:
  width = max(map(len, COMMANDS))
  lines = ["usage: twotower <stage> [flags]   (twotower <stage> --help for its flags)", "",
           "stages:"]
  lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
  return "\n".join(lines)


def _library_error(e: BaseException) -> bool:
  """TensorFlow's OpError (a missing or unreadable file given to a TF op: NotFoundError,
  InvalidArgumentError, ...) and pyjnius' JavaException (Lucene refusing an input) reach us
  for user errors too; matched by class, without importing either library."""
  for cls in type(e).__mro__:
    name = f"{cls.__module__}.{cls.__qualname__}"
    if name in ("tensorflow.python.framework.errors_impl.OpError", "jnius.JavaException"):
      return True
  return False


def error_line(e: BaseException) -> str:
  """The one line a failure prints: the first non-empty line of its message (a Java or
  TensorFlow message goes on with a stack trace, shown with --verbose)."""
  text = getattr(e, "message", None) if _library_error(e) else None
  if isinstance(e, shutil.Error) and e.args and isinstance(e.args[0], list) and e.args[0]:
    # copytree's error is a list of (source, destination, why) of every file that failed (a
    # full disk fails them all): the first one, said as a sentence, and how many more.
    failed = e.args[0]
    source, destination, why = (tuple(failed[0]) + ("", "", ""))[:3]
    more = f" (and {len(failed) - 1} more files)" if len(failed) > 1 else ""
    text = f"copying {source} to {destination} failed: {why}{more}"
  lines = [line.strip() for line in str(text or e).splitlines() if line.strip()]
  return lines[0] if lines else type(e).__name__


#: Exit status of a run stopped by SIGINT (128 + 2, as shells report it).
INTERRUPTED = 130


@contextlib.contextmanager
def _noting_interrupts():
  """Yields an Event set by SIGINT, which still raises KeyboardInterrupt as Python's own
  handler does; left alone where SIGINT is ignored or handled by someone else, or off the
  main thread."""
  interrupted = threading.Event()

  def handler(signum, frame):
    interrupted.set()
    signal.default_int_handler(signum, frame)

  try:
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:
      yield interrupted
      return
    signal.signal(signal.SIGINT, handler)
  except ValueError:  # not the main thread
    yield interrupted
    return
  try:
    yield interrupted
  finally:
    signal.signal(signal.SIGINT, previous)


def _interrupted(stage: str) -> int:
  print(f"twotower {stage}: interrupted", file=sys.stderr)
  return INTERRUPTED


def run_stage(stage: str, argv: Sequence[str] | None = None) -> int:
  """Runs one stage's command with quiet-by-default logging; returns the exit status."""
  argv = list(sys.argv[1:] if argv is None else argv)
  logs.setup(verbose="--verbose" in argv or "-v" in argv)
  module = importlib.import_module(command_module(stage))
  with _noting_interrupts() as interrupted:
    try:
      return _run(stage, module, argv, interrupted)
    except KeyboardInterrupt:  # (one that came after the stage's own error)
      return _interrupted(stage)


def _run(stage: str, module, argv: list[str], interrupted: threading.Event) -> int:
  try:
    module.main(argv)
  except SystemExit as e:  # argparse usage errors (2) and explicit exits pass through
    if interrupted.is_set():
      return _interrupted(stage)
    return e.code if isinstance(e.code, int) else 1
  except KeyboardInterrupt:
    return _interrupted(stage)
  except Exception as e:  # pylint: disable=broad-except
    if interrupted.is_set():  # whatever error the interrupt became on its way up
      logging.getLogger("twotower").info("interrupted", exc_info=True)
      return _interrupted(stage)
    if not isinstance(e, (ValueError, OSError, RuntimeError)) and not _library_error(e):
      raise  # a bug: the traceback is the report
    logging.getLogger("twotower").info("failure", exc_info=True)
    print(f"twotower {stage}: error: {error_line(e)}", file=sys.stderr)
    return 1
  return 0


def main(argv: Sequence[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if not argv or argv[0] in ("-h", "--help", "help"):
    print(_usage())
    return 0 if argv else 2
  stage, rest = argv[0], argv[1:]
  if stage not in COMMANDS:
    print(f"twotower: unknown stage {stage!r}\n\n{_usage()}", file=sys.stderr)
    return 2
  return run_stage(stage, rest)


if __name__ == "__main__":
  sys.exit(main())
