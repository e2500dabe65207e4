"""Extracted text as pair-pipeline input (pipelines.wiki.textdocs): WikiExtractor text and JSON,
JSONL documents; alone and mixed with a dump, by `twotower pairs`."""

from __future__ import annotations

import bz2
import collections
import json

import pytest

from twotower import cli
from twotower.core import contracts
from twotower.core.contracts import counters
from twotower.core.contracts import Page, Section
from twotower.pipelines.wiki import inputs, textdocs
from outputs_fixtures import output_digest, read_pairs, read_passages
from textdocs_fixtures import (Doc, jsonl_record, linked_docs, wikiextractor_text, write_jsonl,
                               write_wikiextractor, write_wikiextractor_json)
from wikidump_fixtures import many_pages, write_bytes, write_dump

STRIDE = inputs.TEXT_ID_STRIDE

DOC = Doc(7, "Café Müller", [
    "Café Müller is a [[Dance theatre|dance piece]] by [[Pina Bausch]] & company.",
    "It was first shown in 1978 in Wuppertal."],
    [("History", ["The piece was made for six dancers."]),
     ("Reception", ["Critics praised it, and it toured [[Europe]]."])])
#: What every format makes of DOC (ids and sources aside).
SECTIONS = (
    Section("", 0, ("Café Müller is a dance piece by Pina Bausch & company.",
                    "It was first shown in 1978 in Wuppertal.")),
    Section("History", 2, ("The piece was made for six dancers.",)),
    Section("Reception", 2, ("Critics praised it, and it toured Europe.",)))


def _pages(path, fmt=None, index=0):
  fmt = fmt or inputs.sniff_format(str(path))
  counts: collections.Counter = collections.Counter()
  file = inputs.InputFile(str(path), fmt, index, str(path))
  return list(textdocs.iter_text_pages(file, counts)), counts


@pytest.mark.parametrize("name, links, fmt, expected_links", [
    ("wiki_00", False, "wikiextractor", ()),
    ("wiki_00.bz2", True, "wikiextractor", ("Dance theatre", "Pina Bausch", "Europe")),
    ("wiki_00.json.gz", True, "wikiextractor-json", ("Dance theatre", "Pina Bausch", "Europe")),
    ("docs.jsonl", True, "jsonl", ("Dance theatre", "Pina Bausch", "Europe")),
], ids=["wikiextractor", "wikiextractor-links-bz2", "wikiextractor-json-gz", "jsonl"])
def test_each_format_gives_the_same_page(tmp_path, name, links, fmt, expected_links):
  path = tmp_path / name
  if fmt == "wikiextractor":
    write_wikiextractor(path, [DOC], links=links)
  elif fmt == "wikiextractor-json":
    write_wikiextractor_json(path, [DOC], links=links)
  else:
    write_jsonl(path, [jsonl_record(DOC)])
  assert inputs.sniff_format(str(path)) == fmt
  pages, counts = _pages(path, index=2)
  assert pages == [Page(3 * STRIDE + 7, "Café Müller", SECTIONS, expected_links, str(path))]
  assert counts == {"text_files_read": 1, "pages_read": 1}


def test_headings_are_short_period_lines_not_one_sentence_paragraphs():
  assert textdocs.is_heading("Early life and career.")
  assert textdocs.is_heading("2015–16 season.")
  for line in ("He retired in 2005.", "In 1971 he defended his dissertation.",
               "Its body is darker brown in color.", "Rev. d'hist. ecclés.", "Awards!",
               "the lower case start.", "A very long line of many words that goes on and on."):
    assert not textdocs.is_heading(line), line
  # The last line is text even when it looks like a heading (WikiExtractor writes a heading
  # only before text); two headings in a row give an empty section.
  sections, _ = textdocs.wikiextractor_sections(
      ["T", "", "T was a footballer.", "Career.", "Club career.", "He played 40 games.",
       "Honours."], "T")
  assert sections == [("", ["T was a footballer."]), ("Career", []),
                      ("Club career", ["He played 40 games.", "Honours."])]


def test_bad_records_are_counted_by_reason_and_the_rest_kept(tmp_path, caplog):
  good = [Doc(1, "Good one", ["Some text of the first good document."]),
          Doc(2, "Good two", ["Some text of the second good document."])]
  text = "stray line before any doc\n" + wikiextractor_text(good[:1]) + (
      '<doc url="x" title="No id">\nNo id\n\nText.\n</doc>\n'
      '<doc id="12a" url="x" title="Letters">\nLetters\n\nText.\n</doc>\n'
      '<doc id="13" url="x">\n\nNo title.\n</doc>\n'
      '<doc id="14" url="x" title="Stub">\nStub\n\n\n</doc>\n'
      '<doc id="15" url="x" title="Unclosed">\nUnclosed\n\nText.\n'
      '<doc id="16" url="x" title="Bad BYTES">\nBad\n\nText.\n</doc>\n'
  ) + wikiextractor_text(good[1:])
  data = text.encode().replace(b"BYTES", b"\xff\xfe")
  path = write_bytes(tmp_path / "wiki_00.bz2", data)
  caplog.set_level("WARNING")
  pages, counts = _pages(path)
  assert [p.page_id for p in pages] == [STRIDE + 1, STRIDE + 2]
  assert counts == {"text_files_read": 1, "text_stray_lines": 1, "pages_read": 8,
                    "pages_skipped_missing_id": 1, "pages_skipped_bad_id": 1,
                    "pages_skipped_missing_title": 1, "pages_skipped_empty": 1,
                    "pages_skipped_malformed": 1, "pages_skipped_invalid_utf8": 1}
  assert any("Unclosed" in r.getMessage() and path in r.getMessage() for r in caplog.records)

  records = [jsonl_record(good[0]), "not json {", "[1, 2]", {"id": 3, "title": "No text"},
             {"id": 4, "text": "No title here."}, {"id": "x4", "title": "Bad", "text": "a b"},
             {"id": STRIDE, "title": "Too big", "text": "a b"},
             {"id": 6, "title": "Bad sections", "text": "a b", "sections": "History"},
             {"id": 7, "title": "[bad]", "text": "a b"}, {"id": 8, "title": "Blank", "text": " "},
             jsonl_record(good[1])]
  pages, counts = _pages(write_jsonl(tmp_path / "docs.jsonl.gz", records))
  assert [p.page_id for p in pages] == [STRIDE + 1, STRIDE + 2]
  assert counts == {"text_files_read": 1, "pages_read": 11, "pages_skipped_malformed": 3,
                    "pages_skipped_no_text": 1, "pages_skipped_missing_title": 1,
                    "pages_skipped_bad_id": 2, "pages_skipped_bad_title": 1,
                    "pages_skipped_empty": 1}


def test_a_file_cut_mid_document_keeps_every_complete_one(tmp_path):
  docs = linked_docs(30)
  data = wikiextractor_text(docs).encode()
  path = tmp_path / "wiki_00"
  path.write_bytes(data[:len(data) * 2 // 3])
  pages, counts = _pages(path)
  assert 0 < len(pages) < 30
  assert [p.title for p in pages] == [d.title for d in docs[:len(pages)]]
  assert counts["text_files_truncated"] == 1 and counts["pages_read"] == len(pages)


@pytest.mark.parametrize("content, message", [
    (b'<?xml version="1.0"?>\n<rss version="2.0"><channel/></rss>\n', "root is <rss>"),
    (b"just some words\n", "not a MediaWiki dump, WikiExtractor output or JSONL"),
    (b'{"title": "x"}\n', "without a 'text' field"),
    (b"", "empty file"),
], ids=["other-xml", "plain-text", "json-without-text", "empty"])
def test_a_file_in_no_known_format_is_an_error_naming_it(tmp_path, content, message):
  path = write_bytes(tmp_path / "input.xml.bz2", content)
  with pytest.raises(ValueError, match=message) as error:
    inputs.match_inputs(path)
  assert path in str(error.value)


def test_remote_sizes_come_from_one_listing_of_the_glob(monkeypatch):
  """A remote glob's sizes (they size the disk shuffle) come from one FileSystems listing."""
  from apache_beam.io.filesystem import FileMetadata, MatchResult
  from apache_beam.io.filesystems import FileSystems
  listed = []
  def match(patterns):
    listed.extend(patterns)
    return [MatchResult(patterns[0], [FileMetadata("gs://b/a.xml", 10),
                                      FileMetadata("gs://b/b.xml", 20)])]
  monkeypatch.setattr(FileSystems, "match", match)
  assert inputs._sizes("gs://b/*.xml", ["gs://b/a.xml", "gs://b/b.xml"]) == {
      "gs://b/a.xml": 10, "gs://b/b.xml": 20}
  assert listed == ["gs://b/*.xml"]


def test_cli_refuses_wrong_inputs_in_one_line(tmp_path, capsys):
  dump = write_dump(tmp_path / "a-pages-articles.xml", many_pages(6))
  (tmp_path / "dir").mkdir()
  empty = write_dump(tmp_path / "empty-pages-articles.xml", [])
  rss = write_bytes(tmp_path / "feed.xml", b'<?xml version="1.0"?>\n<rss><channel/></rss>\n')
  cases = [(str(tmp_path / "dir"), "is a directory"),
           (rss, "not a MediaWiki export"),
           (f"{dump},{tmp_path}/missing-*.jsonl", "no file matches"),
           (f"{dump},{dump}", "matched by two inputs"),
           (empty, "no page or document read"),
           (f"{dump},{empty}", "no page or document read")]
  for i, (dump_arg, message) in enumerate(cases):
    # One folder per case: a stage owns its output folder, so a second run with other
    # inputs into the first one's folder would be refused for that reason instead.
    code = cli.main(["pairs", "--dump", dump_arg, "--out", str(tmp_path / f"out-{i}")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1, dump_arg
    assert len(err) == 1 and err[0].startswith("twotower pairs: error:") and message in err[0], err


def run_pairs(dump: str, out, *flags) -> dict:
  from twotower.commands import pairs as pairs_cmd
  pairs_cmd.main(["--dump", dump, "--out", str(out), *flags])
  return json.loads((out / contracts.STATS_FILE).read_text())


@pytest.fixture(scope="module")
def mixed_inputs(tmp_path_factory):
  """A dump, WikiExtractor text with links (two files), WikiExtractor JSON without links and
  JSONL documents, whose raw ids overlap (1..n in every input)."""
  tmp = tmp_path_factory.mktemp("mixed")
  write_dump(tmp / "testwiki-pages-articles.xml.bz2", many_pages(12))
  docs = linked_docs(12)
  write_wikiextractor(tmp / "AA-wiki_00.bz2", docs[:6], links=True)
  write_wikiextractor(tmp / "AA-wiki_01.bz2", docs[6:], links=True)
  write_wikiextractor_json(tmp / "nolinks.json", linked_docs(8, prefix="Plain"))
  write_jsonl(tmp / "docs.jsonl.gz", [jsonl_record(d) for d in linked_docs(8, prefix="Item")])
  return (f"{tmp}/testwiki-pages-articles.xml.bz2,{tmp}/AA-wiki_*.bz2,{tmp}/nolinks.json,"
          f"{tmp}/docs.jsonl.gz")


@pytest.fixture(scope="module")
def mixed_run(mixed_inputs, tmp_path_factory):
  out = tmp_path_factory.mktemp("mixed-out") / "out"
  return str(out), run_pairs(mixed_inputs, out, "--heldout_percent", "10")


def test_a_mix_of_inputs_counts_pages_and_pairs_per_input(mixed_run):
  out, stats = mixed_run
  # 12 dump articles + 5 redirects; 12 + 8 + 8 documents, all kept.
  assert {k: v for k, v in stats.items() if k.startswith(("input", "mediawiki_"))
          and "pairs" not in k} == {
      "input0_pages_read": 17, "input1_pages_read": 12, "input2_pages_read": 8,
      "input3_pages_read": 8, "mediawiki_pages_kept": 12, "input1_pages_kept": 12,
      "input2_pages_kept": 8, "input3_pages_kept": 8,
      # two links per document, but none in WikiExtractor JSON written without --links
      "input1_links_total": 24, "input2_links_total": 0, "input3_links_total": 16}
  skipped = sum(v for k, v in stats.items() if k.startswith("pages_skipped_"))
  assert stats["pages_read"] == 45 == stats["pages_kept"] + stats["pages_redirect"] + skipped
  assert stats["text_files_read"] == 4 and stats["dump_files_read"] == 1
  for task in contracts.PRETRAIN_TASKS:
    per_input = [stats.get(f"{name}_pairs_{task}", 0)
                 for name in ("mediawiki", "input1", "input2", "input3")]
    assert sum(per_input) == stats[f"pairs_{task}"], task
    heldout = [stats.get(f"{name}_pairs_{task}_heldout", 0)
               for name in ("mediawiki", "input1", "input2", "input3")]
    assert sum(heldout) == stats[f"pairs_{task}_heldout"], task
    with_links = [0, 1, 3] if task == "wlp" else [0, 1, 2, 3]
    assert all(per_input[i] > 0 for i in with_links), (task, per_input)
  # WikiExtractor JSON written without --links: no WLP pair from it, said, and no error.
  assert stats["input2_pairs_wlp"] == 0
  # Page ids: one range per input, none shared; WLP only within an input's links.
  rows = read_passages(out).to_pylist()
  ids = {r["page_id"] for r in rows}
  assert len(ids) == 40
  by_range = collections.Counter(inputs.input_of(i) for i in ids)
  assert by_range == {None: 12, 1: 12, 2: 8, 3: 8}
  for pair in read_pairs(out, "wlp"):
    assert inputs.input_of(pair["query_page_id"]) == inputs.input_of(pair["doc_page_id"])
  titles = {r["title"] for r in rows}
  assert {"Topic 0", "Subject 0", "Plain 0", "Item 0"} <= titles


@pytest.mark.slow
def test_a_mix_writes_the_same_outputs_in_one_process_and_in_two(mixed_inputs, mixed_run,
                                                                  tmp_path):
  out, _ = mixed_run
  run_pairs(mixed_inputs, tmp_path / "multi", "--heldout_percent", "10",
            "--direct_running_mode=multi_processing", "--direct_num_workers=2",
            "--shuffle_buckets=3")
  assert output_digest(str(tmp_path / "multi")) == output_digest(out)


@pytest.mark.shared_data
def test_the_shared_wikiextractor_corpus_reads_into_sections(wikiextractor_corpus, tmp_path):
  """The first 400 documents of the real corpus, as a file of their own: kept pages have a
  lead, most have sections, and stubs are counted as empty."""
  head = []
  with bz2.open(wikiextractor_corpus, "rt", encoding="utf-8") as f:
    for line in f:
      head.append(line)
      if line.startswith("</doc>") and sum(1 for h in head if h.startswith("</doc>")) == 400:
        break
  path = write_bytes(tmp_path / "wiki_head.bz2", "".join(head).encode())
  pages, counts = _pages(path)
  assert counts["pages_read"] == 400
  assert counts["pages_read"] == len(pages) + counts["pages_skipped_empty"]
  assert all(p.sections[0].heading == "" for p in pages)
  with_sections = sum(len(p.sections) > 1 for p in pages)
  assert with_sections > len(pages) // 3


def test_table1_counts_pairs_per_input_as_stats_json_does(mixed_inputs, mixed_run, tmp_path):
  from twotower.eval import data_stats
  from twotower.testing import pairs as testing
  out, stats = mixed_run
  vocab = testing.write_vocab(str(tmp_path / "vocab.txt"))
  rows = data_stats.table1(out, vocab)
  for row in rows:
    expected = {name: stats[f"{name}_pairs_{row['task']}"]
                for name in ("mediawiki", "input1", "input2", "input3")
                if stats[f"{name}_pairs_{row['task']}"]}
    assert row["by_input"] == expected and sum(expected.values()) == row["pairs"]
  assert "Pairs per input" in data_stats.markdown(rows, [])
  # Given the run's --dump list, extracted text is named by its file (or glob), in order.
  names = {"input1": "AA-wiki_*.bz2", "input2": "nolinks.json", "input3": "docs.jsonl.gz"}
  named = data_stats.table1(out, vocab, inputs=mixed_inputs.split(","))
  assert [r["by_input"] for r in named] == [
      {names.get(k, k): v for k, v in r["by_input"].items()} for r in rows]
  assert "| task | AA-wiki_*.bz2 | docs.jsonl.gz | mediawiki | nolinks.json |" in \
      data_stats.markdown(named, [])


def test_recover_links_gives_text_without_links_its_wlp_pairs(tmp_path):
  """`--recover_links`: each document names the next two by title ("See Subject 3."), with no
  link marks; the titles found become links, and those links WLP pairs. Without the flag the
  same text has no link and no WLP pair, and its config.json does not name the setting (runs
  from before it record the same settings)."""
  dump = write_wikiextractor(tmp_path / "wiki_00.bz2", linked_docs(12), links=False)
  plain = run_pairs(dump, tmp_path / "plain")
  recovered = run_pairs(dump, tmp_path / "recovered", "--recover_links")
  assert plain[counters.LINKS_TOTAL] == 0 and plain[counters.pairs("wlp")] == 0
  assert "title_links_pages" not in plain
  assert recovered["title_links_pages"] == 12
  assert recovered["title_links_found"] == recovered["title_links_multi_word"] == 24
  assert recovered[counters.LINKS_TOTAL] == recovered[counters.LINKS_RESOLVED] == 24
  assert recovered[counters.pairs("wlp")] > 0
  assert ({k: v for k, v in recovered.items() if not k.startswith("title_links_")
           and "wlp" not in k and "link" not in k and not k.startswith("mean_")}
          == {k: v for k, v in plain.items() if "wlp" not in k and "link" not in k
              and not k.startswith("mean_")})
  config = json.loads((tmp_path / "recovered" / contracts.PAIRS_CONFIG_FILE).read_text())
  assert config["recover_links"] is True
  assert "recover_links" not in json.loads(
      (tmp_path / "plain" / contracts.PAIRS_CONFIG_FILE).read_text())
