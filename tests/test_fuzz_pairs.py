"""Seeded fuzz of `twotower pairs` over a small MediaWiki dump: random truncations, byte flips
and deleted elements. Every run either succeeds with its counters accounting for every page
(pages_read = pages_kept + pages_redirect + pages_skipped_*), or fails with one line (exit 1
or 2, no traceback); and it leaves nothing half-written: no temporary folder beside --out,
no output without a manifest, no file in it that the manifest does not list."""

from __future__ import annotations

import bz2
import json
import os
import random
import re

import pytest

from twotower import cli
from twotower.core import contracts
from twotower.core.contracts import counters as C
from wikidump_fixtures import DumpPage, dump_xml, many_pages

# Six linked articles, five redirects, and one page of each kind the reader skips.
PAGES = [*many_pages(6),
         DumpPage(50, "Talk:Topic 0", "A talk page about the first topic.", ns=1),
         DumpPage(51, "Stub", "Too short."),
         DumpPage(52, "Empty", "")]
ELEMENTS = ("title", "ns", "id", "text", "redirect", "revision", "page")


def _delete_element(xml: str, rng: random.Random) -> tuple[str, str]:
  """`xml` without one element (an open/close pair, or a self-closing one) of a random
  kind, picked among its occurrences."""
  name = rng.choice(ELEMENTS)
  found = list(re.finditer(rf"<{name}\b[^>]*/>|<{name}\b[^>]*>.*?</{name}>", xml, re.S))
  match = rng.choice(found)
  return name, xml[:match.start()] + xml[match.end():]


def mutations(seed: int = 20, n: int = 9):
  """(name, file suffix, the file's bytes): n seeded mutations of the dump, a third of each
  kind."""
  rng = random.Random(seed)
  xml = dump_xml(PAGES)
  raw = xml.encode("utf-8")
  cases = []
  for i in range(n):
    kind = ("truncate", "flip", "delete")[i % 3]
    if kind == "truncate" and i == 3:  # a bz2 stream cut short
      packed = bz2.compress(raw)
      cut = rng.randrange(1, len(packed))
      cases.append((f"truncate-bz2-{cut}", ".xml.bz2", packed[:cut]))
    elif kind == "truncate":
      cut = rng.randrange(1, len(raw))
      cases.append((f"truncate-{cut}", ".xml", raw[:cut]))
    elif kind == "flip":
      at = rng.randrange(len(raw))
      cases.append((f"flip-{at}", ".xml", raw[:at] + bytes([rng.randrange(256)])
                    + raw[at + 1:]))
    else:
      name, mutated = _delete_element(xml, rng)
      cases.append((f"delete-{name}-{i}", ".xml", mutated.encode("utf-8")))
  return cases


CASES = mutations()


@pytest.mark.slow  # about half the cases run the Beam job (~5 s each)
@pytest.mark.parametrize("name, suffix, data", CASES, ids=[c[0] for c in CASES])
def test_pairs_on_a_mutated_dump(tmp_path, capsys, name, suffix, data):
  dump = tmp_path / f"fuzz-pages-articles{suffix}"
  dump.write_bytes(data)
  out = tmp_path / "pairs"
  code = cli.main(["pairs", "--dump", str(dump), "--out", str(out), "--heldout_percent", "0"])
  err = capsys.readouterr().err
  assert "Traceback" not in err, (name, err)
  # Nothing half-written: the output folder is there whole or not at all, no temp beside it.
  assert sorted(os.listdir(tmp_path)) == sorted([dump.name, *(["pairs"] if code == 0 else [])]), \
      name
  if code != 0:
    assert code in (1, 2), (name, err)
    line = err.strip().splitlines()[-1]
    assert line.startswith("twotower pairs: error: ") and "\n" not in line, (name, line)
    assert dump.name in line, (name, line)  # names the file it could not use
    return
  stats = json.loads((out / contracts.STATS_FILE).read_text())
  skipped = sum(v for k, v in stats.items() if k.startswith(C.PAGES_SKIPPED_PREFIX))
  assert stats[C.PAGES_READ] == (stats[C.PAGES_KEPT] + stats[C.PAGES_REDIRECT] + skipped), \
      (name, stats)
  # Every <page> the file still holds whole is read (a cut or flip may spoil the last one).
  if suffix == ".xml":
    assert data.count(b"</page>") - 1 <= stats[C.PAGES_READ] <= data.count(b"<page>"), \
        (name, stats)
  manifest = json.loads((out / contracts.MANIFEST_FILE).read_text())
  on_disk = sorted(os.path.relpath(os.path.join(root, f), out).replace(os.sep, "/")
                   for root, _, files in os.walk(out) for f in files
                   if f != contracts.MANIFEST_FILE)
  assert on_disk == sorted(manifest["files"]), name
