"""Memory and time of the BEIR stage on a generated corpus: the reader's peak RSS against the
corpus file, and `twotower beir --systems bm25-flat` per document at N/10 and at N.

  .venv/bin/python -m benchmarks.beir_stage [--docs 1000000] [--queries 1000]
                                            [--scale_docs 100000] [--threads 2]
                                            [--jvm_heaps ,1g]

A BEIR folder of --docs documents is written, streamed, into a temporary folder (the corpus
is never held): each text 50 to 70 words, each title 3, drawn with a Zipf-like law (rank r
weighed 1/r) from a generated list of --vocab made-up words, seeded (--seed). --queries
queries each judge 1 to 3 documents relevant (`qrels/test.tsv`, grade 1); a query is 4
words of the list's rare half, and the same 4 words are put into each of its documents, so
BM25 can find them (nDCG@10 is near 1: a check that the stage searched, not a quality
figure).

Each measurement runs in a child process of its own (`--child`), which reports its own peak
RSS (/proc/self/status VmHWM; the JVM Pyserini starts runs inside it, through pyjnius) and
wall time:

  * reader: eval.beir.read (the ids pass: ids, lines, internal ids) and one
    `Corpus.documents()` pass (what indexing streams), and nothing else. Its peak above the
    child's RSS after imports, against the corpus file's bytes, is the bounded-memory claim
    of eval/beir.py: below 1, and falling as N grows towards the marginal ratio (what one
    more document adds to the peak, about 90 bytes of ids and line numbers, over its bytes
    in the file) that the last line gives from N/10 to N.
  * stage: eval.beir_eval.run with systems bm25-flat (what `twotower beir --systems
    bm25-flat` runs: read, index, search, score, write OUT), with its phases timed from its
    own log lines: read (the ids pass), index (doc ids, the documents pass into Lucene, JVM
    start included), search (1,000 hits a query, --remove_query), metrics (trec_eval's
    measures, runs, report, OUT moved into place).

The stage runs once per --jvm_heaps value (`twotower beir --jvm_heap`; "" is Java's default
heap, a quarter of the machine's memory): by default Java's default against a 1 GB cap, and
a line per corpus gives the cap's peak RSS and wall time against the default's. Beside the
peak RSS (VmHWM), a sampling thread records the peaks of its two parts: anonymous memory
(Python's, the JVM's heap and native memory: what a heap cap bounds) and file pages (the
libraries and the Lucene index Lucene maps while it searches).

With --scale_docs M (default --docs / 10; 0: none), a second folder of M documents (and
--queries * M / --docs queries, at least 50) is measured the same way first, and the ratio
line gives the stage's seconds per document at N against at M (1.0: linear).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

logger = logging.getLogger("benchmarks.beir_stage")

_SYLLABLES = tuple(c + v for c in "bdfgklmnprstvz" for v in "aeiou")  # 70
#: Documents generated per numpy draw.
_BATCH = 10_000
_RESULT = "RESULT "
SPLIT = "test"
#: The `--jvm_heap` the stage is compared at, against Java's default.
DEFAULT_COMPARED_HEAP = "1g"


def vocabulary(size: int) -> list[str]:
  """`size` distinct made-up words, shortest first (the frequent ranks get the short ones):
  word i is i + len(_SYLLABLES) written in base len(_SYLLABLES), a syllable a digit."""
  words = []
  base = len(_SYLLABLES)
  for i in range(size):
    n, parts = i + base, []
    while n:
      n, digit = divmod(n, base)
      parts.append(_SYLLABLES[digit])
    words.append("".join(reversed(parts)))
  return words


def write_folder(folder: str, docs: int, queries: int, vocab_size: int, seed: int) -> int:
  """A BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) at `folder`, the corpus
  written a batch at a time; returns the corpus file's bytes."""
  rng = np.random.default_rng(seed)
  words = np.array(vocabulary(vocab_size), dtype=object)
  cdf = np.cumsum(1.0 / np.arange(1, vocab_size + 1))
  cdf /= cdf[-1]
  # Each query: 1-3 relevant documents (no document relevant to two queries), 4 rare words.
  per_query = rng.integers(1, 4, size=queries)
  relevant = rng.choice(docs, size=int(per_query.sum()), replace=False)
  injected: dict[int, list[str]] = {}
  os.makedirs(os.path.join(folder, "qrels"))
  with open(os.path.join(folder, "queries.jsonl"), "w", encoding="utf-8") as qf, \
      open(os.path.join(folder, "qrels", f"{SPLIT}.tsv"), "w", encoding="utf-8") as rf:
    rf.write("query-id\tcorpus-id\tscore\n")
    at = 0
    for q, n in enumerate(per_query):
      terms = words[rng.choice(np.arange(vocab_size // 2, vocab_size), 4, replace=False)]
      qf.write(json.dumps({"_id": f"q{q}", "text": " ".join(terms)}) + "\n")
      for d in relevant[at:at + n]:
        injected[int(d)] = list(terms)
        rf.write(f"q{q}\td{d}\t1\n")
      at += n
  path = os.path.join(folder, "corpus.jsonl")
  with open(path, "w", encoding="utf-8", buffering=1 << 20) as f:
    for start in range(0, docs, _BATCH):
      n = min(_BATCH, docs - start)
      drawn = np.searchsorted(cdf, rng.random((n, 73)))
      lengths = rng.integers(50, 71, size=n)
      lines = []
      for j in range(n):
        row = words[drawn[j]]
        text = list(row[3:3 + lengths[j]])
        terms = injected.get(start + j)
        if terms:
          for term, where in zip(terms, rng.choice(len(text), 4, replace=False)):
            text[where] = term
        lines.append(json.dumps({"_id": f"d{start + j}", "title": " ".join(row[:3]),
                                 "text": " ".join(text)}))
      f.write("\n".join(lines) + "\n")
  return os.path.getsize(path)


# ------------------------------------------------------------------------------------------
# The children.
# ------------------------------------------------------------------------------------------


def _status_mb(field: str) -> float:
  """VmHWM / VmRSS of this process, MB."""
  with open("/proc/self/status", encoding="ascii") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1]) * 1024 / 1e6
  raise RuntimeError(f"/proc/self/status has no {field}")


def _child_reader(folder: str) -> dict:
  from twotower.eval import beir  # pylint: disable=import-outside-toplevel
  start_mb = _status_mb("VmRSS")
  started = time.perf_counter()
  data = beir.read(folder, progress=False)
  ids_s = time.perf_counter() - started
  step = time.perf_counter()
  n = sum(1 for _ in data.corpus.documents(progress=False))
  assert n == len(data.corpus), (n, len(data.corpus))
  return {"documents": n, "ids_s": ids_s, "docs_s": time.perf_counter() - step,
          "wall_s": time.perf_counter() - started, "start_mb": start_mb,
          "peak_mb": _status_mb("VmHWM")}


class _Sampler:
  """The largest RssAnon (the process's own memory: Python's, the JVM's heap and its other
  allocations) and RssFile (file pages mapped in: libraries, and the Lucene index Lucene
  mmaps while it searches) seen, read from /proc/self/status every `every` seconds in a
  thread. VmHWM is their sum's peak; the split says what a heap cap can bound."""

  def __init__(self, every: float = 0.1):
    self.every, self.peak = every, {"RssAnon": 0.0, "RssFile": 0.0}
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._loop, daemon=True)

  def _loop(self) -> None:
    while not self._stop.is_set():
      for field in self.peak:
        self.peak[field] = max(self.peak[field], _status_mb(field))
      self._stop.wait(self.every)

  def __enter__(self) -> "_Sampler":
    self._thread.start()
    return self

  def __exit__(self, *exc) -> None:
    self._stop.set()
    self._thread.join()


class _Marks(logging.Handler):
  """When each of the stage's phase log lines came (record.created)."""

  def __init__(self):
    super().__init__(logging.INFO)
    self.marks: dict[str, float] = {}

  def emit(self, record: logging.LogRecord) -> None:
    message = record.getMessage()
    if "(read in" in message:
      self.marks.setdefault("read", record.created)
    elif ": indexed " in message:
      self.marks.setdefault("index", record.created)
    elif message.startswith("beir: bm25-flat: "):
      self.marks.setdefault("search", record.created)


def _child_stage(folder: str, out: str, threads: int, jvm_heap: str) -> dict:
  from twotower.core import logs  # pylint: disable=import-outside-toplevel
  logs.setup()
  from twotower.eval import beir_bm25  # pylint: disable=import-outside-toplevel
  from twotower.eval import beir_eval  # pylint: disable=import-outside-toplevel
  marks = _Marks()
  for name in (logs.PROGRESS_LOGGER, beir_bm25.logger.name):
    logging.getLogger(name).addHandler(marks)
  beir_bm25.logger.setLevel(logging.INFO)  # its "indexed" line, not shown without --verbose
  beir_bm25.logger.propagate = False
  start_mb = _status_mb("VmRSS")
  started = time.time()
  with _Sampler() as sampled:
    result = beir_eval.run(beir_eval.BeirConfig(data=folder, out=out, split=SPLIT,
                                                systems=("bm25-flat",), threads=threads,
                                                jvm_heap=jvm_heap))
  ended = time.time()
  times = [started, *(marks.marks[k] for k in ("read", "index", "search")), ended]
  phases = dict(zip(("read_s", "index_s", "search_s", "metrics_s"), np.diff(times).tolist()))
  return {"documents": result.records[0]["candidates"], "wall_s": ended - started,
          **phases, "nDCG@10": result.records[0]["metrics"]["nDCG@10"], "start_mb": start_mb,
          "peak_mb": _status_mb("VmHWM"), "anon_mb": sampled.peak["RssAnon"],
          "file_mb": sampled.peak["RssFile"]}


def _measure(kind: str, folder: str, out: str, threads: int, jvm_heap: str = "") -> dict:
  """One child's result (`--child kind`), its progress lines passed on to stderr. The child
  gets no TWOTOWER_JVM_HEAP of ours: its heap is `jvm_heap` alone ("": Java's default)."""
  from twotower.core import pyserini_env  # pylint: disable=import-outside-toplevel
  cmd = [sys.executable, "-m", "benchmarks.beir_stage", "--child", kind, "--data", folder,
         "--out", out, "--threads", str(threads), "--jvm_heap", jvm_heap]
  env = {k: v for k, v in os.environ.items() if k != pyserini_env.JVM_HEAP_ENV}
  done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True, env=env,
                        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  line = next(l for l in reversed(done.stdout.splitlines()) if l.startswith(_RESULT))
  return json.loads(line[len(_RESULT):])


# ------------------------------------------------------------------------------------------
# The table.
# ------------------------------------------------------------------------------------------


def _heap_name(heap: str) -> str:
  return f"-Xmx{heap}" if heap else "Java's default"


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--docs", type=int, default=1_000_000, help="documents of the corpus")
  p.add_argument("--queries", type=int, default=1_000, help="judged queries")
  p.add_argument("--scale_docs", type=int, default=-1,
                 help="also a corpus of this many documents, for the scaling ratio "
                      "(default --docs / 10; 0: none)")
  p.add_argument("--vocab", type=int, default=30_000, help="words in the generated list")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1),
                 help="Lucene indexing and search threads")
  p.add_argument("--jvm_heaps", default=f",{DEFAULT_COMPARED_HEAP}",
                 help="comma list of `twotower beir --jvm_heap` values the stage is run with "
                      "on each corpus, '' for Java's default (default: the default against "
                      f"{DEFAULT_COMPARED_HEAP})")
  p.add_argument("--tmp", default=None, help="where the temporary folders go")
  p.add_argument("--child", choices=("reader", "stage"), help=argparse.SUPPRESS)
  p.add_argument("--data", help=argparse.SUPPRESS)
  p.add_argument("--out", help=argparse.SUPPRESS)
  p.add_argument("--jvm_heap", default="", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.child:
    fn = _child_reader if args.child == "reader" else (
        lambda d: _child_stage(d, args.out, args.threads, args.jvm_heap))
    print(_RESULT + json.dumps(fn(args.data)), flush=True)
    return 0
  heaps = [h.strip() for h in args.jvm_heaps.split(",")]
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
  scale = args.docs // 10 if args.scale_docs < 0 else args.scale_docs
  sizes = ([(scale, max(50, args.queries * scale // args.docs))] if scale else [])
  sizes.append((args.docs, args.queries))
  rows = []
  with tempfile.TemporaryDirectory(prefix="beir-stage-", dir=args.tmp) as tmp:
    for docs, queries in sizes:
      folder = os.path.join(tmp, f"beir-{docs}")
      started = time.perf_counter()
      size = write_folder(folder, docs, queries, args.vocab, args.seed)
      logger.info("wrote %d documents (%.0f MB), %d queries in %.0f s", docs, size / 1e6,
                  queries, time.perf_counter() - started)
      reader = _measure("reader", folder, "", args.threads)
      logger.info("reader: %s", reader)
      stages = {}
      for i, heap in enumerate(heaps):
        stages[heap] = _measure("stage", folder, os.path.join(tmp, f"out-{docs}-{i}"),
                                args.threads, heap)
        logger.info("stage (%s): %s", _heap_name(heap), stages[heap])
      rows.append((docs, queries, size, reader, stages))
      # The corpus this run generated in its own temporary folder: freed before the next
      # size is written, so the disk holds one corpus at a time.
      os.remove(os.path.join(folder, "corpus.jsonl"))
  print(f"\nThe reader (eval.beir.read + one documents() pass), each in a child process:\n\n"
        "| documents | corpus MB | ids pass s | documents pass s | peak RSS MB | "
        "RSS after imports MB | peak above imports MB | above imports / corpus bytes |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|")
  for docs, _, size, r, _ in rows:
    above = r["peak_mb"] - r["start_mb"]
    print(f"| {docs:,} | {size / 1e6:.0f} | {r['ids_s']:.1f} | {r['docs_s']:.1f} | "
          f"{r['peak_mb']:.0f} | {r['start_mb']:.0f} | {above:.0f} | {above * 1e6 / size:.3f} |")
  print(f"\n`twotower beir --systems bm25-flat --threads {args.threads} [--jvm_heap H]` "
        "(eval.beir_eval.run), each in a child process:\n\n"
        "| documents | queries | JVM heap | wall s | read s | index s | search s | metrics s | "
        "µs / document | peak RSS MB | peak anon MB | peak file MB | nDCG@10 |\n"
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
  for docs, queries, _, _, stages in rows:
    for heap, s in stages.items():
      print(f"| {docs:,} | {queries:,} | {_heap_name(heap)} | {s['wall_s']:.0f} | "
            f"{s['read_s']:.1f} | {s['index_s']:.1f} | {s['search_s']:.1f} | "
            f"{s['metrics_s']:.1f} | {s['wall_s'] / docs * 1e6:.0f} | {s['peak_mb']:.0f} | "
            f"{s['anon_mb']:.0f} | {s['file_mb']:.0f} | {s['nDCG@10']:.3f} |")
  docs, _, size, r, stages = rows[-1]
  print(f"\nreader's peak above imports / corpus bytes at {docs:,}: "
        f"{(r['peak_mb'] - r['start_mb']) * 1e6 / size:.3f}")
  for docs_at, _, _, _, at in rows:
    first = heaps[0]
    for heap in heaps[1:]:
      print(f"stage at {docs_at:,} documents, {_heap_name(heap)} / {_heap_name(first)}: peak "
            f"RSS {at[heap]['peak_mb'] / at[first]['peak_mb']:.2f}x, peak anon "
            f"{at[heap]['anon_mb'] / at[first]['anon_mb']:.2f}x, wall time "
            f"{at[heap]['wall_s'] / at[first]['wall_s']:.2f}x")
  if len(rows) == 2:
    small = rows[0]
    print(f"reader's peak growth / corpus growth, {small[0]:,} -> {docs:,}: "
          f"{(r['peak_mb'] - small[3]['peak_mb']) * 1e6 / (size - small[2]):.3f} "
          f"({(r['peak_mb'] - small[3]['peak_mb']) * 1e6 / (docs - small[0]):.0f} bytes a "
          "document)")
    for heap in heaps:
      s, s_small = stages[heap], small[4][heap]
      print(f"stage seconds per document ({_heap_name(heap)}), {docs:,} / {small[0]:,}: "
            f"{(s['wall_s'] / docs) / (s_small['wall_s'] / small[0]):.2f}x (1.00: linear)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
