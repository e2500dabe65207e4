"""Passage quality before and after the text cleanup (issue 36), in one run.

    .venv/bin/python -m benchmarks.passage_quality                 # slice + ltgwiki
    .venv/bin/python -m benchmarks.passage_quality --dumps PATH,PATH --top 25
    .venv/bin/python -m benchmarks.passage_quality --headings      # most frequent headings
    .venv/bin/python -m benchmarks.passage_quality --repeats 3      # least CPU of 3 runs each

For each dump, `twotower pairs` runs twice in a child process, as a user runs it: "before"
with `--text_cleanup=off` (every template dropped, every section kept, no stub floor: the
text of the code before this work) and "after" with the defaults. Printed per dump:

* the passage table: pages and passages kept, passages with a dangling gap (GAP_PATTERNS,
  fixed below: what a dropped template leaves), passages under 8 words, pairs per task, and
  pair-pipeline wikitext MB per CPU-second (CPU of the child and all its processes, start-up
  included; the speed bar of docs/guide/pairs.md is >= 0.5x the parse floor, printed too);
* the counters of what the cleanup leaves out (stats.json of the "after" run);
* template coverage: the most frequent template names of the dump's articles (normalised as
  pipelines.wiki.templates does), how many of their uses stand inside a line of text ("inline":
  where a dropped one leaves a gap), and whether they are rendered.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import re
import tempfile

from benchmarks import pipeline_vs_floor

DATA = pipeline_vs_floor.DEFAULT_DUMP.parent
DEFAULT_DUMPS = (str(DATA / "enwiki-slice-pages-articles.xml.bz2"),
                 str(DATA / "ltgwiki-pages-articles.xml.bz2"))

#: What a dropped template leaves in text, as regular expressions over a passage (each
#: counted once per passage): punctuation with nothing before it, empty brackets, a word that
#: wants a number followed by punctuation.
GAP_PATTERNS = {
    "space before , . ; :": re.compile(r"\w \s*[,.;:](?:\s|$)"),
    "empty brackets ( , ; )": re.compile(r"\(\s*[,;:]?\s*(?:[,;:]\s*)*\)"),
    "bracket opens with , ;": re.compile(r"\(\s*[,;]"),
    "number word then , .": re.compile(
        r"\b(?:of|approximately|nearly|roughly|measuring|weighing)\s*[,.;)]", re.IGNORECASE),
    "doubled punctuation , ,": re.compile(r"[,;]\s*[,;]"),
}
SHORT_WORDS = 8

_TEMPLATE = re.compile(r"\{\{\s*([^{}|\n<]+?)\s*(?=[|}])")
_HEADING = re.compile(r"^(={2,6})\s*(.*?)\s*\1\s*$", re.MULTILINE)


def gap_kinds(text: str) -> list[str]:
  return [name for name, pattern in GAP_PATTERNS.items() if pattern.search(text)]


def passage_stats(out: str) -> dict:
  from twotower.core.contracts import codecs
  passages = gaps = short = 0
  kinds: collections.Counter = collections.Counter()
  for p in codecs.read_passages(out, columns=["text"]):
    passages += 1
    found = gap_kinds(p.text)
    gaps += bool(found)
    kinds.update(found)
    short += len(p.text.split()) < SHORT_WORDS
  return {"passages": passages, "gaps": gaps, "short": short, "kinds": kinds}


def template_coverage(dump: str) -> tuple[collections.Counter, collections.Counter, int]:
  """(uses per normalised name, inline uses per name, articles) of a dump's articles, outside
  refs and comments; a use is inline when text precedes it on its line (not a table row)."""
  from twotower.pipelines.wiki import templates, wikidump, wikitext
  uses: collections.Counter = collections.Counter()
  inline: collections.Counter = collections.Counter()
  articles = 0
  for raw in wikidump.iter_dump_pages(dump):
    if raw.namespace != 0 or raw.redirect_title is not None:
      continue
    articles += 1
    # Refs and comments are cut before parsing (pipelines.wiki.wikitext): their templates leave
    # no gap and are not counted.
    text = wikitext._REF.sub("", wikitext._COMMENT.sub("", raw.text))  # pylint: disable=protected-access
    for m in _TEMPLATE.finditer(text):
      name = templates.normalize_name(m.group(1))
      uses[name] += 1
      line_start = text.rfind("\n", 0, m.start()) + 1
      if re.search(r"\w", text[line_start:m.start()]) and not text[line_start] in "{|!":
        inline[name] += 1
  return uses, inline, articles


def headings(dump: str, top: int) -> list[tuple[str, int]]:
  from twotower.pipelines.wiki import wikidump
  counts: collections.Counter = collections.Counter()
  for raw in wikidump.iter_dump_pages(dump):
    if raw.namespace == 0 and raw.redirect_title is None:
      counts.update(m.group(2) for m in _HEADING.finditer(raw.text))
  return counts.most_common(top)


def _row(cells) -> str:
  return "| " + " | ".join(str(c) for c in cells) + " |"


def report_dump(dump: str, work: str, top: int, repeats: int = 1) -> None:
  from twotower.pipelines.wiki import templates
  _, floor_cpu, _, size = pipeline_vs_floor.floor(dump)
  mb = size / 1e6
  runs = {}
  # before, after, before, after, ...: each keeps its least CPU (a shared machine's other
  # jobs only ever add to it), and neither always runs second.
  for _ in range(repeats):
    for label, extra in (("before", ["--text_cleanup=off"]), ("after", [])):
      out = str(pathlib.Path(work) / f"{pathlib.Path(dump).name}-{label}")
      timing = pipeline_vs_floor.run_pairs(dump, out, 1, ["--overwrite", *extra])
      if label in runs and runs[label][0]["cpu"] <= timing["cpu"]:
        continue
      stats = json.loads((pathlib.Path(out) / "stats.json").read_text())
      runs[label] = (timing, stats, passage_stats(out))
  print(f"\n## {pathlib.Path(dump).name} ({mb:.2f} MB of wikitext; parse floor "
        f"{mb / floor_cpu:.3f} MB per CPU-s)\n")
  print(_row(["", "pages kept", "passages", f"with a gap", "gap %", f"under {SHORT_WORDS} words",
              "pairs ict", "pairs bfs", "pairs wlp", "CPU s", "MB per CPU-s", "x floor"]))
  print(_row(["---"] * 12))
  for label, (timing, stats, ps) in runs.items():
    rate = mb / timing["cpu"]
    print(_row([label, stats.get("pages_kept", 0), ps["passages"], ps["gaps"],
                f"{100 * ps['gaps'] / max(ps['passages'], 1):.2f}", ps["short"],
                stats.get("pairs_ict", 0), stats.get("pairs_bfs", 0), stats.get("pairs_wlp", 0),
                f"{timing['cpu']:.1f}", f"{rate:.3f}", f"{rate / (mb / floor_cpu):.2f}"]))
  print("\ngap patterns (passages matching each, before -> after): " + "; ".join(
      f"{name}: {runs['before'][2]['kinds'][name]} -> {runs['after'][2]['kinds'][name]}"
      for name in GAP_PATTERNS))
  after = runs["after"][1]
  left_out = {k: v for k, v in sorted(after.items())
              if k.startswith(("sections_skipped_", "passages_skipped_"))
              or k == "pages_skipped_disambiguation"}
  print("\nleft out (after): " + ", ".join(f"{k} {v}" for k, v in left_out.items()))
  uses, inline, articles = template_coverage(dump)
  total = sum(uses.values())
  rendered_uses = sum(n for name, n in uses.items() if templates.renderer(name))
  inline_total = sum(inline.values())
  inline_rendered = sum(n for name, n in inline.items() if templates.renderer(name))
  print(f"\ntemplates: {total} uses in {articles} articles, {rendered_uses} rendered "
        f"({100 * rendered_uses / max(total, 1):.1f} %); inline {inline_total}, rendered "
        f"{inline_rendered} ({100 * inline_rendered / max(inline_total, 1):.1f} %)\n")
  print(_row(["template", "uses", "inline", "rendered"]))
  print(_row(["---"] * 4))
  for name, n in uses.most_common(top):
    print(_row([name, n, inline[name], "yes" if templates.renderer(name) else "-"]))
  print(f"\nmost frequent inline templates (where a dropped one leaves a gap):\n")
  print(_row(["template", "inline", "rendered"]))
  print(_row(["---"] * 3))
  for name, n in inline.most_common(top):
    print(_row([name, n, "yes" if templates.renderer(name) else "-"]))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--dumps", default=",".join(DEFAULT_DUMPS), help="comma-separated dumps")
  parser.add_argument("--work", default="", help="run outputs (default: a temporary folder)")
  parser.add_argument("--top", type=int, default=25, help="rows of the coverage tables")
  parser.add_argument("--repeats", type=int, default=1,
                      help="pipeline runs per setting, alternated; the least CPU is shown")
  parser.add_argument("--headings", action="store_true",
                      help="print each dump's most frequent section headings instead")
  args = parser.parse_args()
  dumps = [d for d in args.dumps.split(",") if d]
  if args.headings:
    for dump in dumps:
      print(f"\n{pathlib.Path(dump).name}: " + ", ".join(
          f"{h} {n}" for h, n in headings(dump, args.top)))
    return
  with tempfile.TemporaryDirectory(prefix="passage-quality-") as tmp:
    for dump in dumps:
      report_dump(dump, args.work or tmp, args.top, args.repeats)


if __name__ == "__main__":
  main()
