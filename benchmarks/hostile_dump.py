"""Peak memory of `twotower pairs` on a whitespace bomb against the English slice.

    .venv/bin/python -m benchmarks.hostile_dump [--dump PATH] [--whitespace_gb 1.5]

A whitespace bomb is a valid dump with a few articles and `--whitespace_gb` GB of whitespace
between two of its pages (issue 34: 1.5 GB of it, a 1.5 to 2 MB .gz, took `pairs` to 1.8 GB
of memory, linear in the whitespace). It is written here, streamed through gzip, into a
temporary folder. Both runs go through `python -m twotower.pipelines.wiki.pairs` in a child
process (one worker, the local runner's disk shuffle), and the table gives each one's peak
RSS (all its processes together, sampled every 0.2 s: benchmarks.pipeline_vs_floor), wall
seconds and its stats.json's `dump_whitespace_capped`, with the bomb's peak as a multiple of
the slice's. The reader caps a whitespace run at pipelines.wiki.text_stream.MAX_WHITESPACE_RUN
characters while it reads, so the bomb's peak should be about the slice's or below.

Reference (the slice when ../shared/data has it; else --dump any dump).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import sys
import tempfile

from benchmarks.pipeline_vs_floor import DEFAULT_DUMP, run_pairs

#: Whitespace written per gzip write (MB): the benchmark's own memory stays small.
_BLOCK = 16 << 20


def write_bomb(path: str, whitespace_bytes: int) -> int:
  """A .gz dump of three articles with `whitespace_bytes` of whitespace between the first
  two; returns its compressed size."""
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
  # pylint: disable-next=import-outside-toplevel
  from wikidump_fixtures import DumpPage, dump_xml, page_xml
  text = ("{name} is a town with a river, a market and a long history of trade. Its people "
          "built a bridge over the river. It is linked to [[{other}]].")
  pages = [DumpPage(i, name, text.format(name=name, other=other)) for i, (name, other) in
           enumerate([("Alpha", "Beta"), ("Beta", "Gamma"), ("Gamma", "Alpha")], 1)]
  head, tail = dump_xml([]).split("</siteinfo>\n")
  block = (" \n\t\r" * (_BLOCK // 4)).encode()
  with gzip.open(path, "wb", compresslevel=9) as f:
    f.write((head + "</siteinfo>\n" + page_xml(pages[0])).encode())
    left = whitespace_bytes
    while left > 0:
      f.write(block[:min(left, len(block))])
      left -= len(block)
    f.write(("".join(page_xml(p) for p in pages[1:]) + tail).encode())
  return os.path.getsize(path)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--dump", default=str(DEFAULT_DUMP), help="the reference dump")
  p.add_argument("--whitespace_gb", type=float, default=1.5,
                 help="GB of whitespace between two pages of the bomb")
  args = p.parse_args(argv)
  rows = []
  with tempfile.TemporaryDirectory(prefix="hostile-dump-") as tmp:
    bomb = os.path.join(tmp, "bomb-pages-articles.xml.gz")
    size = write_bomb(bomb, int(args.whitespace_gb * 1e9))
    for name, dump, compressed in (("slice", args.dump, os.path.getsize(args.dump)),
                                   (f"whitespace bomb ({args.whitespace_gb:g} GB)", bomb, size)):
      out = os.path.join(tmp, f"out-{len(rows)}")
      result = run_pairs(dump, out, 1, [])
      with open(os.path.join(out, "stats.json"), encoding="utf-8") as f:
        stats = json.load(f)
      rows.append((name, compressed, result, stats))
  base = rows[0][2]["peak_mb"]
  print(f"\n| input | file MB | pages read | whitespace runs capped | peak RSS MB | x slice "
        f"| wall s |\n|---|---:|---:|---:|---:|---:|---:|")
  for name, compressed, result, stats in rows:
    print(f"| {name} | {compressed / 1e6:.2f} | {stats.get('pages_read', 0)} | "
          f"{stats.get('dump_whitespace_capped', 0)} | {result['peak_mb']:.0f} | "
          f"{result['peak_mb'] / base:.2f} | {result['wall']:.1f} |")
  return 0


if __name__ == "__main__":
  sys.exit(main())
