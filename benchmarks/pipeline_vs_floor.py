"""The whole `twotower pairs` pipeline vs the bare floor, on the slice and on dumps 10x, 100x it.

    .venv/bin/python -m benchmarks.pipeline_vs_floor                      # the slice, 1 process
    .venv/bin/python -m benchmarks.pipeline_vs_floor --sizes 1,10,100 --workers 1,2
    .venv/bin/python -m benchmarks.pipeline_vs_floor --breakdown          # where the CPU goes

Floor: stream the slice (pipelines.wiki.wikidump.iter_dump_pages) + mwparserfromhell parse +
strip_code of every namespace-0 article, in this process (no Beam, no links, sentences or
pairs). Its rate is the same on the bigger dumps, which repeat the slice's pages.
Pipeline: `python -m twotower.pipelines.wiki.pairs` as a user runs it, in a child process, on
DirectRunner (the local FnApiRunner) with one process or `--direct_num_workers=N`
(`--direct_running_mode=multi_processing`): reading, parsing, link resolution, sentences,
passages, ICT/BFS/WLP pairs, TFRecord + Parquet + stats.json. Measured per run:

* CPU seconds of the run and of every process it started (interpreter start-up and imports
  included), and wikitext MB per CPU-second: the per-core rate, which other jobs on a
  shared machine barely change;
* wall seconds and wall MB/s (load-dependent: the load average is printed with each row);
* peak RSS of all its processes together (sampled from /proc every 0.2 s), and of the
  largest one.

Bigger dumps are made from the slice's real pages with fresh ids and titles (`make_dump`,
copy k's ids shifted by k x (max id + 1), titles suffixed " (copy k)"), so links resolve
within each copy as in the slice; they are kept in `--work` for the next run. The start-up
cost of N workers is a run on the slice's first pages only.

--corpus: also the pipeline on extracted text (default: the WikiExtractor corpus of
           ../shared/data; `--corpus_docs N` its first N documents, as a file in `--work`),
           in MB of document text (the lines inside `<doc>`, UTF-8) per CPU-second beside the
           dump's MB of wikitext: the "x floor" columns are the dump floor's, not a text floor.

--breakdown: CPU of each step of the pipeline as a plain loop on the slice, the rest being
           Beam's (runner, joins) and the writers.
--profile: cProfile of an in-process pipeline run on the slice, self time grouped by package.
"""

from __future__ import annotations

import argparse
import bz2
import collections
import cProfile
import os
import pathlib
import pstats
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time

DEFAULT_DUMP = pathlib.Path(__file__).resolve().parents[1].parent / (
    "shared/data/wiki/enwiki-slice-pages-articles.xml.bz2")
DEFAULT_CORPUS = DEFAULT_DUMP.parent / "enwiki-2018-wikiextractor.txt.bz2"
#: Pages of the slice in the start-up run (a dump with almost no work).
STARTUP_PAGES = 3


def floor(dump: str) -> tuple[float, float, int, int]:
  """(wall seconds, CPU seconds, articles, wikitext bytes) of stream + parse + strip_code."""
  import mwparserfromhell
  from twotower.pipelines.wiki import wikidump
  start, cpu = time.perf_counter(), time.process_time()
  pages = size = 0
  for raw in wikidump.iter_dump_pages(dump):
    if raw.namespace != 0 or raw.redirect_title is not None:
      continue
    mwparserfromhell.parse(raw.text).strip_code()
    pages += 1
    size += len(raw.text.encode("utf-8"))
  return time.perf_counter() - start, time.process_time() - cpu, pages, size


def make_dump(source: str, target: str, copies: int = 10, limit: int = 0) -> int:
  """Writes `copies` copies of `source`'s pages (its first `limit`, if > 0) to `target`
  (.xml.bz2), copy k > 0 with page ids + k * (max id + 1) and titles (and redirect targets)
  suffixed " (copy k)"; returns the number of pages."""
  from twotower.pipelines.wiki import text_stream
  with text_stream.open_decompressed(source) as f:
    xml = f.read().decode("utf-8")
  first, last = xml.index("<page>"), xml.rindex("</page>") + len("</page>")
  header, body, footer = xml[:first], xml[first:last], xml[last:]
  pages = re.findall(r"<page>.*?</page>", body, flags=re.S)
  pages = pages[:limit] if limit else pages
  offset = max(int(m) for m in re.findall(r"<page>.*?<id>(\d+)</id>", body, flags=re.S)) + 1
  tmp = f"{target}.partial"
  with bz2.open(tmp, "wt", encoding="utf-8") as out:
    out.write(header)
    for k in range(copies):
      for page in pages:
        if k:
          page = re.sub(r"<title>(.*?)</title>", rf"<title>\1 (copy {k})</title>", page, count=1)
          page = re.sub(r"(<redirect title=\"[^\"]*)\"", rf"\1 (copy {k})\"", page, count=1)
          page = re.sub(r"<id>(\d+)</id>", lambda m: f"<id>{int(m.group(1)) + k * offset}</id>",
                        page, count=1)
        out.write("  " + page + "\n")
    out.write(footer)
  os.replace(tmp, target)
  return len(pages) * copies


def corpus_slice(source: str, target: str, docs: int) -> None:
  """Writes the first `docs` documents of a WikiExtractor file to `target` (.bz2)."""
  from twotower.pipelines.wiki import text_stream
  out, closed = [], 0
  with text_stream.open_decompressed(source) as f:
    for line in f:
      out.append(line)
      if line.startswith(b"</doc>"):
        closed += 1
        if closed == docs:
          break
  with bz2.open(target, "wb") as f:
    f.write(b"".join(out))


def corpus_text_bytes(path: str) -> tuple[int, int]:
  """(documents, UTF-8 bytes of the lines inside their `<doc>`) of a WikiExtractor file."""
  from twotower.pipelines.wiki import text_stream
  docs = size = 0
  inside = False
  with text_stream.open_decompressed(path) as f:
    for line in f:
      if line.startswith(b"<doc"):
        inside, docs = True, docs + 1
      elif line.startswith(b"</doc>"):
        inside = False
      elif inside:
        size += len(line)
  return docs, size


class _TreeMemory:
  """Peak summed RSS of a process and all its descendants (`peak`), and the peak RSS of the
  largest one (`largest`), sampled from /proc (Linux); `also`: more roots, counted with it
  (services a run talks to, e.g. a job service and a worker pool)."""

  def __init__(self, pid: int, every: float = 0.2, also: tuple[int, ...] = ()):
    self.pid, self.every, self.peak, self.largest = pid, every, 0, 0
    self.also = tuple(also)
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)
    self._page = os.sysconf("SC_PAGE_SIZE")

  def __enter__(self):
    self._thread.start()
    return self

  def __exit__(self, *exc):
    self._stop.set()
    self._thread.join()

  def _tree_rss(self) -> tuple[int, int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
      if entry.isdigit():
        try:
          with open(f"/proc/{entry}/stat", "rb") as f:
            stat = f.read()
          parents[int(entry)] = int(stat[stat.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError):
          continue
    tree, frontier = {self.pid, *self.also}, [self.pid, *self.also]
    while frontier:
      parent = frontier.pop()
      for pid, ppid in parents.items():
        if ppid == parent and pid not in tree:
          tree.add(pid)
          frontier.append(pid)
    total = largest = 0
    for pid in tree:
      try:
        with open(f"/proc/{pid}/statm") as f:
          rss = int(f.read().split()[1]) * self._page
      except (OSError, ValueError, IndexError):
        continue
      total += rss
      largest = max(largest, rss)
    return total, largest

  def _run(self):
    while not self._stop.is_set():
      total, largest = self._tree_rss()
      self.peak, self.largest = max(self.peak, total), max(self.largest, largest)
      self._stop.wait(self.every)


def run_pairs(dump: str, out: str, workers: int, extra: list[str]) -> dict:
  """Runs `python -m twotower.pipelines.wiki.pairs` in a child process; its wall and CPU seconds
  (all its processes), peak RSS (all processes together; largest one) and load averages."""
  beam = ([f"--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]
          if workers > 1 else [])
  command = [sys.executable, "-m", "twotower.pipelines.wiki.pairs", "--dump", dump, "--out", out,
             *beam, *extra]
  return measure(command)


def measure(command: list[str], also: tuple[int, ...] = ()) -> dict:
  """Runs `command` to its end: wall and CPU seconds (it and its child processes), peak RSS
  of its process tree plus the processes `also` (all together; largest one), load averages
  before and after. A failed command raises with the end of its stderr."""
  load = os.getloadavg()[0]
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.perf_counter()
  with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as child:
    with _TreeMemory(child.pid, also=also) as memory:
      _, stderr = child.communicate()
  wall = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  if child.returncode:
    raise RuntimeError(f"{' '.join(command)} failed (exit {child.returncode}):\n"
                       f"{stderr.decode(errors='replace')[-2000:]}")
  cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
  return {"wall": wall, "cpu": cpu, "peak_mb": memory.peak / 2**20,
          "largest_mb": memory.largest / 2**20, "load": (load, os.getloadavg()[0])}


def breakdown(dump: str) -> None:
  """CPU seconds of each stage's work as a plain loop; the rest of the pipeline's CPU is
  Beam (runner, joins) and the writers."""
  from twotower.core.contracts import codecs
  from twotower.pipelines.wiki import pair_tasks, parse_pages, passages, wikidump
  from twotower.pipelines.sentences import splitters
  steps: collections.Counter = collections.Counter()

  def timed(name, fn, *a):
    start = time.process_time()
    value = fn(*a)
    steps[name] += time.process_time() - start
    return value

  raws = timed("read dump (bz2 + XML)", lambda: list(wikidump.iter_dump_pages(dump)))
  pages = [p for kind, p in (timed("parse + clean wikitext (parse_pages.route_page)",
                                   parse_pages.route_page, r) for r in raws)
           if kind == "article"]
  splitter = timed("sentences (default splitter)", splitters.get_splitter, "spacy")
  config, pair_config = passages.PassageConfig(), pair_tasks.PairConfig()
  all_texts = []
  for page in pages:
    texts = [p for section in page.sections for p in section.paragraphs]
    all_texts.extend(texts)
    split = iter(timed("sentences (default splitter)",
                       lambda: list(splitter.split_many(texts))))
    page_sentences = [[next(split) for _ in s.paragraphs] for s in page.sections]
    page_passages, _ = timed("passages", passages.pack_page, page, page_sentences, config)
    pairs = timed("ICT + BFS pairs", lambda: pair_tasks.ict_pairs(page_passages, pair_config)
                  + pair_tasks.bfs_pairs(page_passages, pair_config))
    timed("encode Examples", lambda: [codecs.encode_pair(p) for p in pairs])
  with tempfile.TemporaryDirectory() as tmp:
    from twotower.commands import pairs as pairs_cmd
    from twotower.pipelines.wiki import pairs as pairs_lib
    start = time.process_time()
    pairs_lib.run(pairs_cmd.parse(["--dump", dump, "--out", f"{tmp}/out"]))
    pipeline_cpu = time.process_time() - start
  start = time.process_time()
  library = splitters.get_splitter("spacy:blank:en")
  list(library.split_many(all_texts))
  spacy_cpu = time.process_time() - start
  print(f"\nwhere the pipeline's CPU goes (each step as a plain loop; {pipeline_cpu:.1f} s "
        "pipeline CPU in this process, after imports)")
  for name, seconds in steps.items():
    print(f"  {name:<46} {seconds:6.1f} s  {100 * seconds / pipeline_cpu:5.1f} %")
  rest = pipeline_cpu - sum(steps.values())
  print(f"  {'Beam runner, joins, WLP, writers (rest)':<46} {rest:6.1f} s  "
        f"{100 * rest / pipeline_cpu:5.1f} %")
  print(f"  (the spaCy library's blank sentencizer, same sentences: {spacy_cpu:.1f} s with "
        "`import spacy`)")


_GROUPS = (("mwparserfromhell", "mwparserfromhell tokenizer"),
           ("pipelines/spacy_sentencizer", "sentences (pipelines.sentences.spacy_sentencizer)"),
           ("spacy", "spaCy"), ("thinc", "spaCy"),
           ("pipelines/wikitext", "twotower wikitext cleaning"),
           ("pipelines/titles", "twotower titles"),
           ("pipelines/wikidump", "dump reading (XML, bz2)"),
           ("xml/etree", "dump reading (XML, bz2)"),
           ("bz2", "dump reading (XML, bz2)"), ("_compression", "dump reading (XML, bz2)"),
           ("pipelines/passages", "twotower passages"), ("pipelines/pair_tasks", "twotower pairs"),
           ("pipelines/links", "twotower links"), ("pipelines/shuffle", "disk shuffle"),
           ("pipelines/shards", "writers"), ("pyarrow", "writers"), ("crc32c", "writers"),
           ("apache_beam/coders", "Beam coders"), ("pickle", "pickling"),
           ("apache_beam", "Beam runner, other"),
           ("re/", "regular expressions"), ("{", "builtins / C calls"), ("~", "builtins / C calls"))


def profile(dump: str) -> None:
  """cProfile of an in-process run, self time grouped by package (cProfile inflates code
  with many small Python-level calls)."""
  from twotower.commands import pairs as pairs_cmd
  from twotower.pipelines.wiki import pairs
  with tempfile.TemporaryDirectory() as tmp:
    config = pairs_cmd.parse(["--dump", dump, "--out", f"{tmp}/out"])
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    pairs.run(config)
    profiler.disable()
  groups: collections.Counter = collections.Counter()
  for (filename, _, _), (_, _, tottime, _, _) in pstats.Stats(profiler).stats.items():  # type: ignore[attr-defined]
    groups[next((label for key, label in _GROUPS if key in filename), "other Python")] += tottime
  total = sum(groups.values())
  print(f"\nwhere the pipeline's CPU goes (cProfile self CPU time, {total:.1f} s, profiled)")
  for name, t in groups.most_common():
    print(f"  {name:<40} {t:7.1f} s  {100 * t / total:5.1f} %")


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--dump", default=str(DEFAULT_DUMP), help="the dump (default: the enwiki slice)")
  p.add_argument("--sizes", default="1", help="dump sizes, in copies of --dump, e.g. 1,10,100")
  p.add_argument("--workers", default="1", help="worker processes per run, e.g. 1,2")
  p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "twotower-bench"),
                 help="where the bigger dumps are kept between runs")
  p.add_argument("--corpus", nargs="?", const=str(DEFAULT_CORPUS), default="",
                 help="also run on WikiExtractor text (default with the flag: the shared corpus)")
  p.add_argument("--corpus_docs", type=int, default=0,
                 help="only the first N documents of --corpus (0: all)")
  p.add_argument("--breakdown", action="store_true", help="CPU of each step as a plain loop")
  p.add_argument("--profile", action="store_true", help="profile an in-process run")
  args, extra = p.parse_known_args(argv)
  sizes = [int(s) for s in args.sizes.split(",")]
  workers = [int(w) for w in args.workers.split(",")]
  os.makedirs(args.work, exist_ok=True)

  print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
        f"({os.cpu_count()} CPUs)")
  floor_wall, floor_cpu, articles, size = floor(args.dump)
  mb = size / 1e6
  print(f"{args.dump}: {articles} namespace-0 articles, {mb:.2f} MB wikitext")
  print(f"floor (stream + parse + strip_code, in process): {mb / floor_cpu:.3f} MB per "
        f"CPU-second, {mb / floor_wall:.3f} MB/s wall")

  dumps = {1: args.dump}
  for copies in sizes:
    if copies > 1:
      path = os.path.join(args.work, f"x{copies}-{pathlib.Path(args.dump).name}")
      if not os.path.exists(path):
        print(f"making the {copies}x dump {path} ...", flush=True)
        make_dump(args.dump, path, copies)
      dumps[copies] = path
  startup = os.path.join(args.work, f"startup-{pathlib.Path(args.dump).name}")
  if not os.path.exists(startup):
    make_dump(args.dump, startup, 1, limit=STARTUP_PAGES)

  rows = []
  with tempfile.TemporaryDirectory(dir=args.work) as tmp:
    for n in workers:
      rows.append(("start-up", n, 0.0, run_pairs(startup, f"{tmp}/s{n}", n, extra)))
    for copies in sizes:
      for n in workers:
        result = run_pairs(dumps[copies], f"{tmp}/x{copies}w{n}", n, extra)
        rows.append((f"{copies}x", n, mb * copies, result))
        print(f"  done: {copies}x, {n} worker(s): {result['wall']:.0f} s", flush=True)
    if args.corpus:
      corpus = args.corpus
      if args.corpus_docs:
        corpus = os.path.join(args.work, f"first{args.corpus_docs}-{pathlib.Path(corpus).name}")
        if not os.path.exists(corpus):
          corpus_slice(args.corpus, corpus, args.corpus_docs)
      docs, text_bytes = corpus_text_bytes(corpus)
      print(f"{corpus}: {docs} documents, {text_bytes / 1e6:.2f} MB text", flush=True)
      for n in workers:
        result = run_pairs(corpus, f"{tmp}/corpus-w{n}", n, extra)
        rows.append(("corpus", n, text_bytes / 1e6, result))
        print(f"  done: corpus, {n} worker(s): {result['wall']:.0f} s", flush=True)

  print(f"\n{'dump':<9} {'MB':>7} {'workers':>7} {'wall s':>7} {'CPU s':>7} {'MB/CPU-s':>8} "
        f"{'x floor':>7} {'MB/s wall':>9} {'x floor':>7} {'peak RSS MB':>11} {'largest':>7} "
        f"{'load':>9}")
  for name, n, size_mb, r in rows:
    rate = size_mb / r["cpu"] if size_mb else 0.0
    wall_rate = size_mb / r["wall"] if size_mb else 0.0
    # The "x floor" columns compare with the dump's floor: none for extracted text.
    vs_floor = ((f"{rate / (mb / floor_cpu):7.2f}", f"{wall_rate / (mb / floor_wall):7.2f}")
                if name != "corpus" else (f"{'-':>7}", f"{'-':>7}"))
    print(f"{name:<9} {size_mb:7.1f} {n:7d} {r['wall']:7.1f} {r['cpu']:7.1f} {rate:8.3f} "
          f"{vs_floor[0]} {wall_rate:9.3f} {vs_floor[1]} "
          f"{r['peak_mb']:11.0f} {r['largest_mb']:7.0f} "
          f"{r['load'][0]:4.1f}-{r['load'][1]:<4.1f}")
  by = {(name, n): r for name, n, _, r in rows}
  if len(workers) > 1:
    base, other = workers[0], workers[-1]
    print(f"\n{other} workers vs {base}: wall speed-up "
          + ", ".join(f"{name} {by[(name, base)]['wall'] / by[(name, other)]['wall']:.2f}x"
                      for name, n, _, _ in rows if n == base and name != "start-up")
          + f"; start-up {by[('start-up', other)]['wall']:.1f} s wall / "
            f"{by[('start-up', other)]['cpu']:.1f} CPU s vs {by[('start-up', base)]['wall']:.1f}"
            f" / {by[('start-up', base)]['cpu']:.1f}")
  print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
  if args.breakdown:
    breakdown(args.dump)
  if args.profile:
    profile(args.dump)


if __name__ == "__main__":
  main()
