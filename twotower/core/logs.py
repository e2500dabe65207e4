"""Logging for the command line: quiet by default, like pip, pytest and Pyserini's search CLI.

Default: warnings and errors of every library, twotower's progress lines (one per stage or
long step, logger `twotower.progress`), progress bars, and each command's own result table.
Library chatter is off: Beam's INFO (type-hint conversions, runner set-up), TensorFlow's C++
start-up lines, absl, FAISS's loader probing, Lucene's INFO.

`--verbose`: everything at INFO, with times and logger names, TensorFlow's C++ INFO
included.

    from twotower.core import logs
    logs.progress("[2/8] vocab done in 23 s")        # shown by default
    logger.info("indexed %d candidates", n)          # shown with --verbose
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import logging
import os
import sys
import tempfile

PROGRESS_LOGGER = "twotower.progress"
#: Third-party loggers that are chatty at INFO.
_LIBRARIES = ("apache_beam", "tensorflow", "absl", "faiss", "jnius", "kivy", "pyserini",
              "h5py", "matplotlib", "urllib3", "keras", "numexpr")

_progress = logging.getLogger(PROGRESS_LOGGER)
_verbose = False


def progress(message: str, *args) -> None:
  """A progress line: printed at the default verbosity (no time or logger name)."""
  _progress.info(message, *args)


def is_verbose() -> bool:
  return _verbose


class _Formatter(logging.Formatter):
  """Progress lines bare; everything else `HH:MM:SS LEVEL logger: message`."""

  def __init__(self):
    super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")

  def format(self, record: logging.LogRecord) -> str:
    if record.name == PROGRESS_LOGGER and not _verbose:
      return record.getMessage()
    return super().format(record)


@contextlib.contextmanager
def _stderr_to_file():
  """Sends file descriptor 2 (C and C++ writes included) to a temporary file; on the way out
  restores it and returns the captured lines through the yielded list."""
  lines: list[str] = []
  sys.stderr.flush()
  with tempfile.TemporaryFile() as tmp:
    saved = os.dup(2)
    os.dup2(tmp.fileno(), 2)
    try:
      yield lines
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      tmp.seek(0)
      lines.extend(tmp.read().decode("utf-8", "replace").splitlines())


#: TensorFlow's import-time C++ lines: absl INFO written before absl's logging starts (so
#: TF_CPP_MIN_LOG_LEVEL cannot stop them), and their preamble and continuation.
_TF_STARTUP_NOISE = ("I0000 ", "WARNING: All log messages before absl::InitializeLog()",
                     "To enable the following instructions:")


class _QuietLoader(importlib.abc.Loader):
  """Runs TensorFlow's import with stderr captured, then replays what is not start-up INFO
  (a real warning or an import error's output still reaches the user)."""

  def __init__(self, loader):
    self.loader = loader

  def create_module(self, spec):
    return self.loader.create_module(spec)

  def exec_module(self, module):
    lines: list[str] = []
    try:
      with _stderr_to_file() as lines:
        self.loader.exec_module(module)
    finally:  # replayed on failure too: an import error's C++ output matters
      kept = [line for line in lines if not line.startswith(_TF_STARTUP_NOISE)]
      if kept:
        sys.stderr.write("\n".join(kept) + "\n")


class _QuietTensorFlowFinder(importlib.abc.MetaPathFinder):
  """Finds `tensorflow` as usual and wraps its loader in _QuietLoader (once)."""

  def find_spec(self, name, path, target=None):
    if name != "tensorflow":
      return None
    sys.meta_path.remove(self)
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is not None and spec.loader is not None:
      spec.loader = _QuietLoader(spec.loader)
    return spec


def setup(verbose: bool = False) -> None:
  """Configures logging for a command-line run; call before TensorFlow is imported (its C++
  log level is read from the environment at import)."""
  global _verbose
  _verbose = verbose
  # TensorFlow's C++ logging: 0 everything; 3 none (its CUDA probing on a machine without a
  # GPU and its oneDNN notes are logged as errors; real failures still raise in Python).
  # Set only if the user did not.
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0" if verbose else "3")
  if not verbose and "tensorflow" not in sys.modules and not any(
      isinstance(f, _QuietTensorFlowFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _QuietTensorFlowFinder())
  handler = logging.StreamHandler(sys.stderr)
  handler.setFormatter(_Formatter())
  root = logging.getLogger()
  for h in list(root.handlers):
    root.removeHandler(h)
  root.addHandler(handler)
  root.setLevel(logging.INFO if verbose else logging.WARNING)
  logging.getLogger("twotower").setLevel(logging.INFO if verbose else logging.WARNING)
  _progress.setLevel(logging.INFO)
  for name in _LIBRARIES:
    logging.getLogger(name).setLevel(logging.INFO if verbose else logging.WARNING)
  # Beam logs a failing DoFn's traceback at ERROR, then re-raises: the command prints the
  # error's one line, so the traceback is for --verbose only.
  logging.getLogger("apache_beam.runners.common").setLevel(
      logging.INFO if verbose else logging.CRITICAL)
  # FAISS logs each CPU-specific build it fails to load, with a traceback, at INFO.
  logging.getLogger("faiss.loader").setLevel(logging.WARNING)
  if not verbose:
    try:  # absl (used by TensorFlow) would otherwise print its own WARNING preamble
      from absl import logging as absl_logging  # pylint: disable=import-outside-toplevel
      absl_logging.set_verbosity(absl_logging.ERROR)
    except ImportError:
      pass
