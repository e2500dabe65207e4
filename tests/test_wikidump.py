"""The streaming dump reader (pipelines.wiki.wikidump): formats, damage, bad records, Beam."""

from __future__ import annotations

import bz2
import collections
import functools
import logging

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
import pytest

from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.wiki import inputs
from twotower.pipelines.shared import shuffle as shuffle_lib
from twotower.pipelines.wiki import wikidump
from wikidump_fixtures import DumpPage, DumpSite, dump_xml, write_bytes, write_dump

PAGES = [
    DumpPage(10, "Hà Nội", "'''Hà Nội''' là thủ đô."),
    DumpPage(11, "Hanoi", "#đổi [[Hà Nội]]", redirect="Hà Nội"),
    DumpPage(12, "Not a redirect", "#REDIRECT [[Hà Nội]]"),
    DumpPage(13, "Category:Cities", "cities", ns=14),
    DumpPage(14, "Amp & <angle>", "a < b && c > d"),
]


def _read(path) -> tuple[list, collections.Counter]:
  counts: collections.Counter = collections.Counter()
  return list(wikidump.iter_dump_pages(str(path), counts)), counts


@pytest.mark.parametrize("suffix", [".xml", ".xml.bz2", ".xml.gz"])
def test_reads_every_format(tmp_path, suffix):
  path = write_dump(tmp_path / f"dump{suffix}", PAGES)
  pages, counts = _read(path)
  assert [p.page_id for p in pages] == [10, 11, 12, 13, 14]
  assert counts == {"dump_files_read": 1, "pages_read": 5}
  assert pages[0].title == "Hà Nội" and pages[0].text == "'''Hà Nội''' là thủ đô."
  assert pages[4].title == "Amp & <angle>" and pages[4].text == "a < b && c > d"
  assert pages[3].namespace == 14
  assert all(p.source == path for p in pages)
  site = pages[0].site
  assert site.dbname == "testwiki" and site.case == "first-letter"
  assert site.namespace_names()[14] == "Category"
  assert wikidump.read_siteinfo(path) == site


def test_redirect_tag_is_the_source_of_truth(tmp_path):
  pages, _ = _read(write_dump(tmp_path / "d.xml", PAGES))
  by_id = {p.page_id: p for p in pages}
  assert by_id[11].redirect_title == "Hà Nội"      # "#đổi" text, with the tag.
  assert by_id[12].redirect_title is None          # "#REDIRECT" text, no tag.
  assert by_id[10].redirect_title is None


@pytest.mark.parametrize("export_ns, version", [
    ("http://www.mediawiki.org/xml/export-0.3/", "0.3"),
    ("http://www.mediawiki.org/xml/export-0.11/", "0.11"),
    ("", "0.10"),
])
def test_any_export_version(tmp_path, export_ns, version):
  site = DumpSite(export_ns=export_ns, version=version)
  xml = dump_xml(PAGES, site)
  if not export_ns:
    xml = xml.replace(' xmlns=""', "")
  pages, counts = _read(write_bytes(tmp_path / "d.xml", xml.encode()))
  assert [p.page_id for p in pages] == [10, 11, 12, 13, 14]
  assert pages[0].site.namespace_names()[14] == "Category"
  assert counts["dump_files_truncated"] == 0


def test_bad_records_are_counted_logged_and_skipped(tmp_path, caplog):
  pages = [
      DumpPage(1, "Good one", "text"),
      DumpPage(None, "No id", "text"),
      DumpPage("abc", "Letters id", "text"),
      DumpPage(4, "No ns", "text", ns=None),
      DumpPage(5, "No text", None),
      DumpPage(6, None, "no title"),
      DumpPage(7, "Good two", "text"),
  ]
  caplog.set_level(logging.WARNING)
  path = write_dump(tmp_path / "bad.xml.bz2", pages)
  read, counts = _read(path)
  assert [p.page_id for p in read] == [1, 7]
  assert counts == {"dump_files_read": 1, "pages_read": 7, "pages_skipped_missing_id": 1,
                    "pages_skipped_bad_id": 1, "pages_skipped_missing_ns": 1,
                    "pages_skipped_no_text": 1, "pages_skipped_missing_title": 1}
  messages = [r.getMessage() for r in caplog.records]
  for needle in ["'No id'", "'abc'", "'No ns'", "'No text'", "id=6"]:
    assert any(needle in m and path in m for m in messages), needle


def test_invalid_utf8_skips_only_that_page(tmp_path, caplog):
  xml = dump_xml([DumpPage(1, "Before", "fine \ufffd kept: a real U+FFFD"),
                  DumpPage(2, "Broken", "bad BYTES here"),
                  DumpPage(3, "Control", "bell CTRL here"),
                  DumpPage(4, "After", "fine")]).encode()
  xml = xml.replace(b"BYTES", b"\xff\xfe\xc3").replace(b"CTRL", b"\x07")
  caplog.set_level(logging.WARNING)
  read, counts = _read(write_bytes(tmp_path / "utf8.xml.gz", xml))
  assert [p.page_id for p in read] == [1, 4]
  assert counts["pages_skipped_invalid_utf8"] == 2
  assert counts["pages_read"] == 4 and counts["dump_files_truncated"] == 0
  assert any("'Broken'" in r.getMessage() for r in caplog.records)


def test_malformed_xml_mid_file_loses_only_that_page(tmp_path, caplog):
  xml = dump_xml([DumpPage(i, f"Page {i}", f"text {i}") for i in range(1, 6)])
  # Break page 3's markup: an unclosed tag inside <page>.
  xml = xml.replace("<title>Page 3</title>", "<title>Page 3</titl>")
  caplog.set_level(logging.WARNING)
  read, counts = _read(write_bytes(tmp_path / "broken.xml.bz2", xml.encode()))
  assert [p.page_id for p in read] == [1, 2, 4, 5]
  assert counts["dump_xml_errors"] == 1 and counts["pages_read"] == 4
  assert counts["dump_files_truncated"] == 0
  assert any("malformed XML" in r.getMessage() and "id=2" in r.getMessage()
             for r in caplog.records)


def test_not_a_dump_is_counted_not_raised(tmp_path):
  path = write_bytes(tmp_path / "junk.xml.bz2", b"this is not xml at all\n" * 10)
  read, counts = _read(path)
  assert read == [] and counts["dump_files_truncated"] == 1


def test_corrupt_compressed_file_is_truncated_not_raised(tmp_path):
  path = tmp_path / "junk.xml.gz"
  path.write_bytes(b"\x1f\x8b\x08\x00garbage")
  read, counts = _read(path)
  assert read == [] and counts["dump_files_truncated"] == 1


# ---------------------------------------------------------------------------------------------
# Truncation of the real dumps, at many byte offsets.
# ---------------------------------------------------------------------------------------------

_XML_CUTS = 12
_BZ2_CUTS = 8


def _complete_pages(xml: bytes) -> int:
  """Pages whose `</page>` lies wholly inside `xml`."""
  return xml.count(b"</page>")


def _decompressed_lengths(data: bytes, cuts: list[int]) -> list[int]:
  """For each cut (ascending), how many bytes a bz2 decoder gets out of `data[:cut]`: one
  decoder fed the segments between cuts (it emits all it can from what it was given)."""
  decompressor, produced, lengths, start = bz2.BZ2Decompressor(), 0, [], 0
  for cut in cuts:
    segment = data[start:cut]
    while segment:
      out = decompressor.decompress(segment)
      produced += len(out)
      segment = decompressor.unused_data if decompressor.eof else b""
      if decompressor.eof:  # Multi-stream: the next stream starts in the rest.
        decompressor = bz2.BZ2Decompressor()
    lengths.append(produced)
    start = cut
  return lengths


@functools.lru_cache(maxsize=None)
def _full_read(path) -> tuple[list[int], bytes]:
  full, counts = _read(path)
  assert counts["dump_files_truncated"] == 0
  return [p.page_id for p in full], bz2.decompress(path.read_bytes())


@pytest.fixture(params=["ltgwiki", "enwiki_slice"])
def shared_dump(request):
  path = request.getfixturevalue(request.param)
  return (path,) + _full_read(path)


def test_truncated_xml_yields_every_complete_page(shared_dump, tmp_path):
  path, full_ids, xml = shared_dump
  first_page = xml.index(b"<page>")
  offsets = [first_page - 10] + [first_page + (len(xml) - first_page) * k // _XML_CUTS
                                 for k in range(1, _XML_CUTS)] + [len(xml) - 20]
  for i, cut in enumerate(offsets):
    # Mostly plain XML (fast); two re-compressed, to cross the bz2 path too.
    suffix = ".xml.bz2" if i in (3, 9) else ".xml"
    cut_path = write_bytes(tmp_path / f"cut{i}{suffix}", xml[:cut])
    pages, counts = _read(cut_path)
    expected = _complete_pages(xml[:cut])
    assert [p.page_id for p in pages] == full_ids[:expected], cut
    assert counts["dump_files_truncated"] == 1, cut


def test_truncated_bz2_yields_every_decompressed_page(shared_dump, tmp_path):
  path, full_ids, xml = shared_dump
  data = path.read_bytes()
  offsets = [100] + [len(data) * k // _BZ2_CUTS for k in range(1, _BZ2_CUTS)] + [len(data) - 5]
  for i, (cut, length) in enumerate(zip(offsets, _decompressed_lengths(data, offsets))):
    cut_path = tmp_path / f"cut{i}.xml.bz2"
    cut_path.write_bytes(data[:cut])
    pages, counts = _read(cut_path)
    expected = _complete_pages(xml[:length])
    assert [p.page_id for p in pages] == full_ids[:expected], cut
    assert counts["dump_files_truncated"] == 1, cut


def test_corrupt_bz2_block_yields_pages_before_it(shared_dump, tmp_path):
  path, full_ids, _ = shared_dump
  data = bytearray(path.read_bytes())
  # Flip bytes in the middle of the file: the block there fails its CRC.
  middle = len(data) // 2
  data[middle:middle + 64] = bytes(64)
  cut_path = tmp_path / "corrupt.xml.bz2"
  cut_path.write_bytes(bytes(data))
  pages, counts = _read(cut_path)
  ids = [p.page_id for p in pages]
  assert ids == full_ids[:len(ids)] and 0 < len(ids) < len(full_ids)
  assert counts["dump_files_truncated"] == 1


@pytest.mark.parametrize("on_disk", [False, True], ids=["beam-shuffle", "disk-shuffle"])
def test_beam_reads_a_truncated_file_and_the_others(tmp_path, ltgwiki, on_disk):
  xml = bz2.decompress(ltgwiki.read_bytes())
  cut = len(xml) // 2
  write_bytes(tmp_path / "a-cut.xml.bz2", xml[:cut])
  write_dump(tmp_path / "b-small.xml.gz", PAGES)
  expected_cut = _complete_pages(xml[:cut])
  shuffle = (shuffle_lib.Shuffle(str(tmp_path / "shuffle"), buckets=4) if on_disk
             else shuffle_lib.Shuffle())
  p = TestPipeline()
  files = inputs.match_inputs(f"{tmp_path}/*.xml.bz2,{tmp_path}/*.xml.gz")
  pages = p | wikidump.ReadDumpPages(files, shuffle=shuffle)
  per_file = (pages | beam.Map(lambda page: (page.source.rsplit("/", 1)[-1], 1))
              | beam.CombinePerKey(sum))
  assert_that(per_file, equal_to([("a-cut.xml.bz2", expected_cut),
                                  ("b-small.xml.gz", len(PAGES))]))
  result = p.run()
  result.wait_until_finish()
  assert beam_jobs.beam_counters(result) == {
      "dump_files_read": 2, "dump_files_truncated": 1,
      "pages_read": expected_cut + len(PAGES)}


def test_missing_dump_fails_before_a_pipeline_is_built(tmp_path):
  """ReadDumpPages reads files already matched: a glob matching nothing fails there."""
  with pytest.raises(FileNotFoundError, match="no file matches"):
    inputs.match_inputs(str(tmp_path / "nothing-*.xml.bz2"))


def test_memory_is_flat_in_dump_size(tmp_path):
  """The reader holds one page at a time: peak traced memory does not grow with pages."""
  import tracemalloc
  peaks = []
  for n in (200, 2000):
    text = "word " * 2000
    path = write_dump(tmp_path / f"m{n}.xml", [DumpPage(i, f"P{i}", text) for i in range(n)])
    tracemalloc.start()
    count = sum(1 for _ in wikidump.iter_dump_pages(path))
    peaks.append(tracemalloc.get_traced_memory()[1])
    tracemalloc.stop()
    assert count == n
  assert peaks[1] < 1.5 * peaks[0], peaks
