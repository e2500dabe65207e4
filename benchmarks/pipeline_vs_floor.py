"""The whole `twotower pairs` pipeline vs the bare floor, on the same dump.

    .venv/bin/python -m benchmarks.pipeline_vs_floor [--dump PATH] [--profile] [--memory]

Floor: stream the dump (pipelines.wikidump.iter_dump_pages) + mwparserfromhell parse +
strip_code, for every namespace-0 article (no Beam, no links, no sentences, no pairs).
Pipeline: `twotower pairs` in-process on DirectRunner (reading, parsing, link resolution,
spaCy sentences, passages, ICT/BFS/WLP pairs, TFRecord + Parquet + stats.json).
Both are measured in pages/s and wikitext MB/s over the same denominator (the dump's
namespace-0 articles and their wikitext bytes); ratio = pipeline / floor.

--breakdown: CPU of each step of the pipeline as a plain loop, the rest being Beam's
           (where the time goes, unprofiled).
--profile: cProfile of the pipeline run, self time grouped by package (cProfile inflates
           code with many small Python-level calls, e.g. spaCy's Doc/Span API).
--memory:  peak RSS of `twotower pairs` (a child process) on the dump and on a dump ~10x
           larger made from its real pages with fresh ids and titles (make_big_dump).
"""

from __future__ import annotations

import argparse
import bz2
import collections
import cProfile
import logging
import os
import pathlib
import pstats
import re
import resource
import subprocess
import sys
import tempfile
import time

DEFAULT_DUMP = pathlib.Path(__file__).resolve().parents[1].parent / (
    "shared/data/wiki/enwiki-slice-pages-articles.xml.bz2")


def floor(dump: str) -> tuple[float, float, int, int]:
  """(wall seconds, CPU seconds, articles, wikitext bytes) of stream + parse + strip_code."""
  import mwparserfromhell
  from twotower.pipelines import wikidump
  start, cpu = time.perf_counter(), time.process_time()
  pages = size = 0
  for raw in wikidump.iter_dump_pages(dump):
    if raw.namespace != 0 or raw.redirect_title is not None:
      continue
    mwparserfromhell.parse(raw.text).strip_code()
    pages += 1
    size += len(raw.text.encode("utf-8"))
  return time.perf_counter() - start, time.process_time() - cpu, pages, size


def pipeline(dump: str, out: str, beam_args: list[str],
             profile: bool) -> tuple[float, float, dict]:
  """(wall seconds, CPU seconds of this process, stats) of `twotower pairs` in-process."""
  from twotower.commands import pairs as pairs_cmd
  from twotower.pipelines import pairs
  config = pairs_cmd.parse(["--dump", dump, "--out", out, *beam_args])
  profiler = cProfile.Profile() if profile else None
  start, cpu = time.perf_counter(), time.process_time()
  if profiler:
    profiler.enable()
  stats = pairs.run(config)
  if profiler:
    profiler.disable()
  seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
  if profiler:
    print_profile(profiler, seconds)
  return seconds, cpu, stats


def breakdown(dump: str, pipeline_cpu: float) -> None:
  """CPU seconds of each stage's work as a plain loop; the rest of the pipeline's CPU is
  Beam (runner, coders between stages, shuffles) and the writers."""
  from twotower.contracts import codecs
  from twotower.pipelines import pair_tasks, passages, sentences, wikidump, wikitext
  steps: collections.Counter = collections.Counter()

  def timed(name, fn, *a):
    start = time.process_time()
    value = fn(*a)
    steps[name] += time.process_time() - start
    return value

  raws = timed("read dump (bz2 + XML)", lambda: list(wikidump.iter_dump_pages(dump)))
  pages = [p for kind, p in (timed("parse + clean wikitext (wikitext.route_page)",
                                   wikitext.route_page, r) for r in raws)
           if kind == "article"]
  splitter = sentences.get_splitter("spacy")
  config, pair_config = passages.PassageConfig(), pair_tasks.PairConfig()
  for page in pages:
    texts = [p for section in page.sections for p in section.paragraphs]
    split = iter(timed("spaCy sentences", lambda: list(splitter.split_many(texts))))
    page_sentences = [[next(split) for _ in s.paragraphs] for s in page.sections]
    page_passages, _ = timed("passages", passages.pack_page, page, page_sentences, config)
    pairs = timed("ICT + BFS pairs", lambda: pair_tasks.ict_pairs(page_passages, pair_config)
                  + pair_tasks.bfs_pairs(page_passages, pair_config))
    timed("encode Examples", lambda: [codecs.encode_pair(p) for p in pairs])
  print(f"\nwhere the pipeline's CPU goes (each step as a plain loop; {pipeline_cpu:.1f} s "
        "pipeline CPU)")
  for name, seconds in steps.items():
    print(f"  {name:<46} {seconds:6.1f} s  {100 * seconds / pipeline_cpu:5.1f} %")
  rest = pipeline_cpu - sum(steps.values())
  print(f"  {'Beam runner, coders, joins, WLP, writers (rest)':<46} {rest:6.1f} s  "
        f"{100 * rest / pipeline_cpu:5.1f} %")


_GROUPS = (("mwparserfromhell", "mwparserfromhell (parse, strip_code)"),
           ("spacy", "spaCy (sentences)"), ("thinc", "spaCy (sentences)"),
           ("twotower/pipelines/wikitext", "twotower wikitext cleaning"),
           ("pipelines/wikitext", "twotower wikitext cleaning"),
           ("pipelines/titles", "twotower titles"),
           ("pipelines/wikidump", "dump reading (XML, bz2)"),
           ("xml/etree", "dump reading (XML, bz2)"),
           ("bz2", "dump reading (XML, bz2)"), ("_compression", "dump reading (XML, bz2)"),
           ("pipelines/passages", "twotower passages"), ("pipelines/pair_tasks", "twotower pairs"),
           ("pipelines/links", "twotower links"), ("pyarrow", "Parquet / TFRecord writing"),
           ("apache_beam/io", "Parquet / TFRecord writing"),
           ("crc32c", "Parquet / TFRecord writing"),
           ("apache_beam/coders", "Beam coders (pickling)"), ("pickle", "Beam coders (pickling)"),
           ("dill", "Beam coders (pickling)"), ("apache_beam", "Beam runner, other"),
           ("re/", "regular expressions"), ("{", "builtins / C calls"), ("~", "builtins / C calls"))


def print_profile(profiler: cProfile.Profile, seconds: float) -> None:
  stats = pstats.Stats(profiler)
  groups: collections.Counter = collections.Counter()
  for (filename, _, _), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
    name = next((label for key, label in _GROUPS if key in filename), "other Python")
    groups[name] += tottime
  total = sum(groups.values())
  print(f"\nwhere the pipeline's time goes (cProfile self time, {seconds:.1f} s wall, profiled)")
  for name, t in groups.most_common():
    print(f"  {name:<40} {t:7.1f} s  {100 * t / total:5.1f} %")


def make_big_dump(source: str, target: str, copies: int = 10) -> int:
  """Writes `copies` copies of `source`'s pages to `target` (.xml.bz2), copy k > 0 with page
  ids + k * (max id + 1) and titles suffixed " (copy k)"; returns the number of pages."""
  from twotower.pipelines import wikidump
  with wikidump._open_decompressed(source) as f:  # pylint: disable=protected-access
    xml = f.read().decode("utf-8")
  first, last = xml.index("<page>"), xml.rindex("</page>") + len("</page>")
  header, body, footer = xml[:first], xml[first:last], xml[last:]
  pages = re.findall(r"<page>.*?</page>", body, flags=re.S)
  offset = max(int(m) for m in re.findall(r"<page>.*?<id>(\d+)</id>", body, flags=re.S)) + 1
  with bz2.open(target, "wt", encoding="utf-8") as out:
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
  return len(pages) * copies


_READ_ONLY = ("import sys; from twotower.pipelines import wikidump; "
              "sum(1 for _ in wikidump.iter_dump_pages(sys.argv[1]))")


def peak_rss_mb(dump: str, out: str, beam_args: list[str],
                read_only: bool = False) -> tuple[float, float]:
  """(peak RSS in MB, seconds) of `python -m twotower.pipelines.pairs` in a child process
  (or, with `read_only`, of streaming the dump's pages and nothing else)."""
  child = (["-c", _READ_ONLY, dump] if read_only else
           ["-m", "twotower.pipelines.pairs", "--dump", dump, "--out", out, *beam_args])
  code = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], "
          "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
          "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
  start = time.perf_counter()
  result = subprocess.run([sys.executable, "-c", code, sys.executable, *child],
                          capture_output=True, text=True, check=True)
  seconds = time.perf_counter() - start
  returncode, maxrss_kb = map(int, result.stdout.split())
  if returncode:
    raise RuntimeError(f"twotower pairs failed on {dump} (exit {returncode})")
  return maxrss_kb / 1024, seconds


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--dump", default=str(DEFAULT_DUMP), help="dump file (default: the enwiki slice)")
  p.add_argument("--profile", action="store_true", help="profile the pipeline run")
  p.add_argument("--breakdown", action="store_true",
                 help="CPU of each step as a plain loop (where the time goes, unprofiled)")
  p.add_argument("--memory", action="store_true", help="peak RSS on the dump and on ~10x")
  p.add_argument("--copies", type=int, default=10, help="size factor of the big dump")
  args, beam_args = p.parse_known_args(argv)
  logging.basicConfig(level=logging.WARNING)
  with tempfile.TemporaryDirectory() as tmp:
    floor_s, floor_cpu, pages, size = floor(args.dump)
    pipe_s, pipe_cpu, stats = pipeline(args.dump, f"{tmp}/out", beam_args, args.profile)
    mb = size / 1e6
    print(f"\n{args.dump}: {pages} namespace-0 articles, {mb:.2f} MB wikitext "
          f"({stats.get('pages_read')} pages read)")
    print(f"{'run':<34} {'wall s':>7} {'pages/s':>8} {'MB/s':>6} {'CPU s':>7} {'MB/CPU s':>8}")
    label = "twotower pairs " + (" ".join(beam_args) or "(DirectRunner)")
    for name, wall, cpu in (("floor (stream+parse+strip_code)", floor_s, floor_cpu),
                            (label, pipe_s, pipe_cpu)):
      print(f"{name[:34]:<34} {wall:7.1f} {pages / wall:8.2f} {mb / wall:6.3f} {cpu:7.1f} "
            f"{mb / cpu:8.3f}")
    print(f"ratio pipeline / floor: {floor_s / pipe_s:.2f} (wall), {floor_cpu / pipe_cpu:.2f} "
          "(CPU of this process; a shared machine's load skews wall times)")
    if args.breakdown:
      breakdown(args.dump, pipe_cpu)
    if args.memory:
      big = f"{tmp}/big-pages-articles.xml.bz2"
      n = make_big_dump(args.dump, big, args.copies)
      small_rss, small_s = peak_rss_mb(args.dump, f"{tmp}/small", beam_args)
      big_rss, big_s = peak_rss_mb(big, f"{tmp}/big", beam_args)
      print(f"\npeak RSS of `twotower pairs` {' '.join(beam_args)}")
      print(f"  {'dump':<28} {'pages':>7} {'seconds':>8} {'peak RSS MB':>12}")
      print(f"  {'slice':<28} {stats.get('pages_read', 0):>7} {small_s:8.1f} {small_rss:12.0f}")
      print(f"  {f'{args.copies}x (fresh ids, titles)':<28} {n:>7} {big_s:8.1f} {big_rss:12.0f}")
      print(f"  ratio big / slice: {big_rss / small_rss:.2f}")
      read_small, _ = peak_rss_mb(args.dump, "", [], read_only=True)
      read_big, _ = peak_rss_mb(big, "", [], read_only=True)
      print(f"  streaming the dump alone (wikidump.iter_dump_pages): {read_small:.0f} MB vs "
            f"{read_big:.0f} MB (ratio {read_big / read_small:.2f})")


if __name__ == "__main__":
  main()
