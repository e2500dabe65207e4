"""Links recovered from titles (pipelines.wiki.title_links) against the real links of dumps.

    .venv/bin/python -m benchmarks.link_recovery                  # the slice and ltgwiki
    .venv/bin/python -m benchmarks.link_recovery --dumps A.xml.bz2,B.xml.bz2 --errors 20
    .venv/bin/python -m benchmarks.link_recovery --corpus ../shared/data/wiki/enwiki-2018-wikiextractor.txt.bz2

Each dump's articles are parsed as `twotower pairs` parses them (pipelines.wiki.wikitext: links
become their anchor text, as extracted text shows it), their links are set aside, and the
links are recovered from the text alone: once with the naive probe of issue 37 (whole words,
case-sensitive, longest title first, redirects as aliases: `title_links.NAIVE`) and once with
the defaults of `TitleLinkConfig`. Both are compared with the real links, per (page, target
article) pair: a real link counts when its target (through redirects) is an article of the
dump other than the page itself, the only links text matching can find. Precision and recall
are printed overall and for targets whose title (qualifier stripped) is one word or several,
with the ratio of the rules' precision to the naive probe's. `--errors N` prints N false
positives and N misses of the rules, for reading.

`--corpus FILE` (text without links, e.g. the WikiExtractor corpus) instead runs the pair
pipeline's pieces over it with the Beam transform, as `twotower pairs --recover_links` would:
ReadTextPages -> RecoverTitleLinks -> ResolveLinks -> MakePassages -> MakePairs, and prints
the transform's counters and the WLP pairs (train / heldout at 5 %), with the CPU time.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import pathlib
import random
import sys
import time

from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.wiki import parse_pages, title_links, wikidump

DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data" / "wiki"
DEFAULT_DUMPS = (str(DATA / "enwiki-slice-pages-articles.xml.bz2"),
                 str(DATA / "ltgwiki-pages-articles.xml.bz2"))
KINDS = ("all", "one-word", "multi-word")


@dataclasses.dataclass
class Dump:
  name: str
  pages: list  # Page, as ParsePages keeps them (links still on them)
  redirects: list  # (source, target)


def load(path: str) -> Dump:
  pages, redirects = [], []
  for raw in wikidump.iter_dump_pages(path):
    kind, value = parse_pages.route_page(raw)
    if kind == "article":
      pages.append(value)
    elif kind == "redirect":
      redirects.append(value)
  return Dump(pathlib.Path(path).name.split("-")[0], pages, redirects)


def kind_of(title: str) -> str:
  name = title_links._QUALIFIER.sub(r"\1", title)  # pylint: disable=protected-access
  return "one-word" if len(name.split()) == 1 else "multi-word"


def real_links(dump: Dump) -> set[tuple[int, str]]:
  """(page id, target article) of every real link that text matching could find."""
  titles = {p.title for p in dump.pages}
  index = title_links.TitleIndex.build(titles, dump.redirects, title_links.NAIVE)
  # Where a title or redirect leads (naive index: every alias, no rule applied).
  leads = {e.link: e.target for e in index.phrases.values()}
  return {(p.page_id, leads[t]) for p in dump.pages for t in p.links
          if t in leads and leads[t] != p.title}


def named_in_text(dump: Dump, real: set[tuple[int, str]]) -> int:
  """Real links whose target's title or a redirect to it occurs in the page's text (any
  case, any place): the most that matching names can find."""
  index = title_links.TitleIndex.build({p.title for p in dump.pages}, dump.redirects,
                                       title_links.NAIVE)
  names: dict[str, set[str]] = collections.defaultdict(set)
  for entry in index.phrases.values():
    names[entry.target].add(entry.link.lower())
  text = {p.page_id: " ".join(t for s in p.sections for t in s.paragraphs).lower()
          for p in dump.pages}
  return sum(any(n in text[page_id] for n in names[target]) for page_id, target in real)


def recovered(dump: Dump, config: title_links.TitleLinkConfig) -> set[tuple[int, str]]:
  """(page id, target article) of every link recovered from the pages' text alone."""
  stripped = [dataclasses.replace(p, links=()) for p in dump.pages]
  targets = [p.title for p in stripped if not title_links.is_disambiguation(p)]
  index = title_links.TitleIndex.build(targets, dump.redirects, config)
  if config.max_lowercase_share < 1:
    counts: collections.Counter = collections.Counter()
    words = index.one_word()
    for page in stripped:
      counts.update(title_links.word_case_counts(page, words))
    index = index.without(title_links.common_words(counts, config))
  found = {(p.page_id, e.target) for p in stripped
           for e in title_links.recover_links(p, index)[0]}
  hubs = title_links.hub_targets(collections.Counter(t for _, t in found), len(stripped),
                                 config)
  return {(page_id, target) for page_id, target in found if target not in hubs}


def scores(found: set, real: set) -> dict[str, tuple[float, float, int, int]]:
  """kind -> (precision, recall, found, real)."""
  out = {}
  for kind in KINDS:
    f = {x for x in found if kind == "all" or kind_of(x[1]) == kind}
    r = {x for x in real if kind == "all" or kind_of(x[1]) == kind}
    hit = len(f & r)
    out[kind] = (hit / len(f) if f else 0.0, hit / len(r) if r else 0.0, len(f), len(r))
  return out


def corpus_wlp(path: str, sample: int) -> dict:
  """Counters of the pair pipeline's pieces over `path` with recovered links, WLP pairs
  counted as `pairs_wlp` / `pairs_wlp_heldout`; `sample` WLP pairs printed."""
  import apache_beam as beam  # pylint: disable=import-outside-toplevel
  from twotower.core import contracts, files as tio  # pylint: disable=import-outside-toplevel
  from twotower.core.contracts import counters as C  # pylint: disable=import-outside-toplevel
  from twotower.pipelines.wiki import inputs, links, passages, textdocs  # pylint: disable=import-outside-toplevel
  from twotower.pipelines.wiki.pairs import MakePairs  # pylint: disable=import-outside-toplevel

  def count(pair):
    beam_jobs.counter(C.pairs("wlp")).inc()
    if contracts.pair_split(pair.query_page_id, pair.doc_page_id, 5.0) != contracts.TRAIN:
      beam_jobs.counter(C.pairs("wlp", contracts.HELDOUT)).inc()
    return pair

  def build(pipeline):
    articles = pipeline | textdocs.ReadTextPages(inputs.match_inputs(path))
    redirects = pipeline | "NoRedirects" >> beam.Create([])
    linked = ({"articles": articles, "redirects": redirects}
              | title_links.RecoverTitleLinks())
    resolved = {"articles": linked, "redirects": redirects} | links.ResolveLinks()
    made = resolved["pages"] | passages.MakePassages()
    wlp = ({"passages": made, "inlinks": resolved["inlinks"]} | MakePairs())["wlp"]
    counted = wlp | "Count" >> beam.Map(count)
    if sample:
      _ = (counted | beam.combiners.Sample.FixedSizeGlobally(sample)
           | beam.FlatMap(lambda ps: ps)
           | beam.Map(lambda p: print(f"  WLP q=[{p.query_page_id}] {p.query[:150]!r}\n"
                                      f"      d=[{p.doc_title}] {p.doc_text[:300]!r}")))

  return beam_jobs.run_beam_job(build)


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--dumps", default=",".join(DEFAULT_DUMPS),
                 help="comma list of pages-articles dumps (default: the slice and ltgwiki)")
  p.add_argument("--errors", type=int, default=0,
                 help="print this many false positives and misses of the rules per dump")
  p.add_argument("--corpus", default="",
                 help="text without links: run the pair pipeline's pieces over it with "
                 "recovered links and print the WLP pairs it gives (instead of --dumps)")
  p.add_argument("--sample", type=int, default=0, help="with --corpus: print this many WLP pairs")
  args = p.parse_args(argv)
  if args.corpus:
    start = time.process_time()
    stats = corpus_wlp(args.corpus, args.sample)
    print("| counter | value |\n|---|---:|")
    for name in sorted(stats):
      if name.startswith(("title_links_", "pairs_wlp", "pages_", "links_")):
        print(f"| {name} | {stats[name]} |")
    print(f"| CPU seconds (this process) | {time.process_time() - start:.0f} |")
    return 0
  rules = title_links.TitleLinkConfig(only_unlinked=False)
  print("| dump | titles | kind | real links | naive P | naive R | rules P | rules R "
        "| P ratio | rules found | seconds |")
  print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
  for path in args.dumps.split(","):
    if not pathlib.Path(path).exists():
      print(f"| {path} | absent: skipped | | | | | | | | | |")
      continue
    dump = load(path)
    real = real_links(dump)
    naive = scores(recovered(dump, title_links.NAIVE), real)
    start = time.process_time()
    found = recovered(dump, rules)
    seconds = time.process_time() - start
    ours = scores(found, real)
    print(f"| {dump.name} | | real links named in the text at all (recall ceiling): "
          f"{named_in_text(dump, real)} of {len(real)} | | | | | | | |")
    for kind in KINDS:
      (np_, nr, _, n_real), (rp, rr, n_found, _) = naive[kind], ours[kind]
      ratio = f"{rp / np_:.2f}x" if np_ else "-"
      print(f"| {dump.name} | {len(dump.pages)} | {kind} | {n_real} | {np_:.2f} | {nr:.2f} "
            f"| {rp:.2f} | {rr:.2f} | {ratio} | {n_found} | "
            f"{seconds:.1f} |" if kind == "all" else
            f"| {dump.name} | | {kind} | {n_real} | {np_:.2f} | {nr:.2f} | {rp:.2f} | {rr:.2f} "
            f"| {ratio} | {n_found} | |")
    if args.errors:
      titles = {p.page_id: p.title for p in dump.pages}
      rng = random.Random(0)
      for label, pairs in (("false positive", found - real), ("missed", real - found)):
        for page_id, target in rng.sample(sorted(pairs), min(args.errors, len(pairs))):
          print(f"  {dump.name} {label}: {titles[page_id]!r} -> {target!r}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
