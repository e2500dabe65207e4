"""Wikitext cleaning cost: twotower's parse_page against the mwparserfromhell "bare floor".

    .venv/bin/python -m benchmarks.parse_floor [--dump PATH] [--repeats N]

On the same namespace-0 articles of a dump (read once, untimed), it times:

* floor: `mwparserfromhell.parse(text).strip_code(normalize=True, collapse=True)`;
* floor + TFDS clean: the same, after the TFDS Wikipedia builder's cleaning (per section:
  remove File/Image/Media links and ref/table tags, rewrite Category links), as TFDS does;
* twotower parse_page: pipelines.wiki.wikitext (sections, paragraphs, links), and its parts:
  the comment/ref pre-strip, the tokenizer alone, and the rest (token walk + paragraphs);

and prints pages/s, wikitext MB/s and the ratio to each floor (higher is faster). Rates and
ratios use the CPU time of this (single-threaded) process, which other jobs on a shared
machine do not inflate; wall seconds are shown too. The median over `--repeats` runs.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import statistics
import time
from typing import Callable

DEFAULT_DUMP = pathlib.Path(__file__).resolve().parents[1].parent / (
    "shared/data/wiki/enwiki-slice-pages-articles.xml.bz2")


def _tfds_clean(text: str) -> str:
  """The TFDS Wikipedia builder's `_parse_and_clean_wikicode` (tensorflow/datasets), as a
  reference cost: per-section removal of media links, refs and tables, then strip_code."""
  import mwparserfromhell
  wikicode = mwparserfromhell.parse(text)
  re_rm_magic = re.compile("__[A-Z]*__", flags=re.UNICODE)
  re_rm_wikilink = re.compile("^(?:File|Image|Media):", flags=re.IGNORECASE | re.UNICODE)
  re_clean_wikilink = re.compile(r"^Category:", flags=re.IGNORECASE | re.UNICODE)

  def rm_tag(obj):
    return str(obj.tag) in {"ref", "table"}

  section_text = []
  for section in wikicode.get_sections(flat=True, include_lead=True, include_headings=True):
    for obj in section.ifilter_wikilinks(recursive=True):
      if re_rm_wikilink.match(str(obj.title)):
        try:
          section.remove(obj)
        except ValueError:
          pass
      elif re_clean_wikilink.match(str(obj.title)):
        try:
          wikicode.replace(obj, re_clean_wikilink.sub("", str(obj.title)))
        except ValueError:
          pass
    for obj in section.ifilter_tags(matches=rm_tag, recursive=True):
      try:
        section.remove(obj)
      except ValueError:
        pass
    section_text.append(re_rm_magic.sub(
        "", section.strip_code(normalize=True, collapse=True).strip()))
  return "\n\n".join(section_text)


def _time(fn: Callable, items: list, repeats: int) -> tuple[float, float]:
  """(median wall seconds, median CPU seconds of this process) over `repeats` runs."""
  walls, cpus = [], []
  for _ in range(repeats):
    wall, cpu = time.perf_counter(), time.process_time()
    for item in items:
      fn(item)
    walls.append(time.perf_counter() - wall)
    cpus.append(time.process_time() - cpu)
  return statistics.median(walls), statistics.median(cpus)


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--dump", default=str(DEFAULT_DUMP),
                      help="a pages-articles dump (default: %(default)s)")
  parser.add_argument("--repeats", type=int, default=1,
                      help="timed runs per row; the median is reported (default: %(default)s)")
  args = parser.parse_args(argv)

  import mwparserfromhell
  from twotower.pipelines.wiki import parse_pages, wikidump, wikitext

  raws = [raw for raw in wikidump.iter_dump_pages(args.dump)
          if raw.namespace == 0 and raw.redirect_title is None]
  texts = [raw.text for raw in raws]
  mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
  stripped = [wikitext._REF.sub("", wikitext._COMMENT.sub("", t))  # pylint: disable=protected-access
              for t in texts]
  tokenizer = wikitext._TOKENIZER  # pylint: disable=protected-access

  rows = [
      ("floor: parse + strip_code", _time(
          lambda t: mwparserfromhell.parse(t).strip_code(normalize=True, collapse=True),
          texts, args.repeats)),
      ("floor + TFDS clean", _time(_tfds_clean, texts, args.repeats)),
      ("mwparserfromhell.parse alone", _time(mwparserfromhell.parse, texts, args.repeats)),
      ("twotower parse_page", _time(parse_pages.parse_page, raws, args.repeats)),
      ("  part: comment/ref pre-strip", _time(
          lambda t: wikitext._REF.sub("", wikitext._COMMENT.sub("", t)),  # pylint: disable=protected-access
          texts, args.repeats)),
      ("  part: tokenizer (C)", _time(lambda t: tokenizer.tokenize(t, 0, True), stripped,
                                      args.repeats)),
  ]
  floor, tfds = rows[0][1][1], rows[1][1][1]
  ours = rows[3][1]
  rows.append(("  part: token walk + paragraphs",
               tuple(o - a - b for o, a, b in zip(ours, rows[4][1], rows[5][1]))))
  ours = ours[1]

  print(f"\n{args.dump}: {len(texts)} namespace-0 articles, {mb:.2f} MB wikitext, "
        f"median of {args.repeats} run(s)\n")
  print(f"| {'what':34s} | {'wall s':>6s} | {'CPU s':>6s} | {'pages/s':>8s} | {'MB/s':>6s} | "
        f"{'vs floor':>8s} | {'vs TFDS':>7s} |")
  print(f"|{'-' * 36}|{'-' * 8}|{'-' * 8}|{'-' * 10}|{'-' * 8}|{'-' * 10}|{'-' * 9}|")
  for name, (wall, seconds) in rows:
    print(f"| {name:34s} | {wall:6.2f} | {seconds:6.2f} | {len(texts) / seconds:8.1f} | "
          f"{mb / seconds:6.2f} | {floor / seconds:7.2f}x | {tfds / seconds:6.2f}x |")
  print(f"\nparse_page / floor speed ratio: {floor / ours:.2f} "
        f"(>1: twotower's full cleaning with sections and links is faster than the floor)")


if __name__ == "__main__":
  main()
