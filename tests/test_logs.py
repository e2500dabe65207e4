"""Quiet by default: library INFO and TensorFlow's C++ start-up lines are off, progress lines
and warnings stay; --verbose shows everything."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

CODE = textwrap.dedent("""
    import logging, sys
    from twotower.core import logs
    logs.setup(verbose=sys.argv[1] == "1")
    import tensorflow as tf
    tf.constant([1, 2], tf.int64).numpy()
    logging.getLogger("apache_beam.typehints").info("beam chatter")
    logging.getLogger("twotower.pipelines.x").info("stage detail")
    logging.getLogger("twotower.pipelines.x").warning("a warning that matters")
    logs.progress("[1/2] pairs done")
""")


def _run(verbose: bool) -> str:
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  done = subprocess.run([sys.executable, "-c", CODE, "1" if verbose else "0"],
                        capture_output=True, text=True, timeout=300, check=True, env=env)
  return done.stderr


@pytest.mark.slow  # two fresh interpreters import TensorFlow
def test_default_is_quiet_and_verbose_shows_everything():
  quiet = _run(False)
  lines = [line for line in quiet.splitlines() if line.strip()]
  assert "[1/2] pairs done" in lines
  assert any("a warning that matters" in line for line in lines)
  assert not any("beam chatter" in line or "stage detail" in line for line in lines)
  assert not any(line.startswith(("I0000", "E0000", "WARNING: All log messages"))
                 for line in lines), lines
  loud = _run(True)
  assert "beam chatter" in loud and "stage detail" in loud
  assert "I0000" in loud  # TensorFlow's own start-up lines are back
