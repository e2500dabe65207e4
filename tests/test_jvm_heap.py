"""The JVM heap cap (twotower.core.pyserini_env: TWOTOWER_JVM_HEAP, `twotower beir
--jvm_heap`): the -Xmx option it adds before the JVM starts, the sizes it refuses, and, in a
fresh process, the heap the JVM then has."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from twotower.core import pyserini_env


@pytest.mark.parametrize("size", ["512m", "2g", "2G", "1048576", "64k"])
def test_java_sizes_are_taken(size):
  assert pyserini_env.check_heap_size(size) == size


@pytest.mark.parametrize("size", ["", "0g", "2gb", "-1g", "1.5g", "lots", "2 g"])
def test_other_sizes_are_refused(size):
  with pytest.raises(ValueError, match="expected a Java size such as 512m or 2g"):
    pyserini_env.check_heap_size(size)


def test_the_option_replaces_an_earlier_cap_and_leaves_the_others(monkeypatch, caplog):
  import jnius_config  # pylint: disable=import-outside-toplevel
  # pyjnius' option list as before a JVM starts (another test may have started this
  # process's JVM: the list is then only a list, which the test puts back).
  monkeypatch.setattr(jnius_config, "vm_running", False, raising=False)
  monkeypatch.setattr(jnius_config, "options", ["-Dx=1", "-Xmx8g"])
  monkeypatch.delenv(pyserini_env.JVM_HEAP_ENV, raising=False)
  assert pyserini_env.max_heap_option() == []  # unset: Java's default, nothing added
  assert jnius_config.get_options() == ["-Dx=1", "-Xmx8g"]
  pyserini_env.set_max_heap("")  # "" leaves it unset
  assert pyserini_env.JVM_HEAP_ENV not in os.environ
  pyserini_env.set_max_heap("768m")
  assert pyserini_env.max_heap_option() == ["-Xmx768m"]
  assert jnius_config.get_options() == ["-Dx=1", "-Xmx768m"]
  assert pyserini_env.max_heap_option() == []  # already there
  # Once the JVM runs its heap is what it is: another size is a warning, nothing changes.
  monkeypatch.setattr(jnius_config, "vm_running", True)
  pyserini_env.set_max_heap("1g")
  assert pyserini_env.max_heap_option() == [] and "its heap cannot change" in caplog.text
  monkeypatch.setattr(jnius_config, "vm_running", False)
  monkeypatch.setenv(pyserini_env.JVM_HEAP_ENV, "huge")
  with pytest.raises(ValueError, match="JVM heap 'huge'"):
    pyserini_env.max_heap_option()


@pytest.mark.slow  # a fresh interpreter starts the JVM: ~20-45 s on 2 shared cores
def test_the_jvm_starts_with_the_cap():
  code = textwrap.dedent("""
      from twotower.core import pyserini_env
      pyserini_env.set_max_heap("192m")
      pyserini_env.import_lucene_searcher()
      from jnius import autoclass
      print(autoclass("java.lang.Runtime").getRuntime().maxMemory())
  """)
  env = {k: v for k, v in os.environ.items() if k != pyserini_env.JVM_HEAP_ENV}
  done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                        text=True, timeout=300, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  max_memory = int(done.stdout.strip().splitlines()[-1])
  # Runtime.maxMemory is -Xmx less what the collector keeps back (a survivor space).
  assert 150 * 2**20 < max_memory <= 192 * 2**20


def test_a_batch_search_that_lost_queries_under_a_cap_names_the_heap(monkeypatch):
  """What Anserini raised at -Xmx256m on 1M documents (benchmarks/beir_stage.py): under a
  cap, `twotower beir` says what to change; without one, the error is left as it is."""
  from twotower.eval import beir_eval  # pylint: disable=import-outside-toplevel
  config = beir_eval.BeirConfig(data="d", out="o")
  lost = RuntimeError("JVM exception occurred: java.lang.RuntimeException: queryCount = 1000 "
                      "is not equal to completedTaskCount =  953\n\tat io.anserini...")
  monkeypatch.delenv(pyserini_env.JVM_HEAP_ENV, raising=False)
  assert beir_eval._heap_hint(lost, "bm25-flat", config) is lost
  monkeypatch.setenv(pyserini_env.JVM_HEAP_ENV, "256m")
  hint = str(beir_eval._heap_hint(lost, "bm25-flat", config))
  assert hint.startswith("bm25-flat: Lucene's batch search lost queries (JVM exception")
  assert "the JVM heap cap 256m: raise --jvm_heap" in hint and "\n" not in hint
  other = ValueError("something else")
  assert beir_eval._heap_hint(other, "bm25-flat", config) is other
