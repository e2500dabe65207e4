"""Issue 34: ids unique across inputs (items 4), hostile dumps read in bounded memory (8),
and the exit codes and messages of item 9 (the non-HTTP cases), each on files the test
writes."""

from __future__ import annotations

import collections
import gzip
import json
import os
import subprocess
import sys
import textwrap
import types

import pyarrow.parquet as pq
import pytest

from twotower import cli
from twotower.core import contracts
from twotower.core.contracts import SiteInfo
from twotower.core.contracts import counters as C
from twotower.pipelines.wiki import inputs, parse_pages, wikidump, wikitext
from twotower.pipelines.shared import unique_ids
from outputs_fixtures import read_pairs, read_passages
from reqa_fixtures import ARTICLES, squad_file
from textdocs_fixtures import write_jsonl
from wikidump_fixtures import DumpPage, DumpSite, dump_xml, page_xml, write_dump

STRIDE = inputs.TEXT_ID_STRIDE
LEAD = ("{name} is a place in the test world with many long streets. It has a river and a "
        "market that people visit on every day of the week. The town hall stands on its square.")


def _article(page_id: int, title: str, links: tuple[str, ...], extra: str = "") -> DumpPage:
  body = LEAD.format(name=title) + " " + " ".join(f"It is near [[{t}]]." for t in links)
  return DumpPage(page_id, title, f"{body}{extra}\n\n== History ==\n{LEAD.format(name=title)}")


# ---------------------------------------------------------------------------------------------
# Item 4: ids unique across inputs, and within one.
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_wikis(tmp_path_factory):
  """An "English" and a "Latgalian" dump whose page ids overlap (1..4 in both), each with a
  "Paris" and links to it; the English one repeats id 3, and holds a nesting bomb; and a
  JSONL file that repeats an id. One `pairs` run over all three."""
  tmp = tmp_path_factory.mktemp("two_wikis")
  bomb = " " + "{{" * 10_000 + "x" + "}}" * 10_000 + " After the bomb."
  en = [_article(1, "Paris", ("London", "Rome")), _article(2, "London", ("Paris",)),
        _article(3, "Rome", ("Paris", "London"), bomb),
        _article(3, "Roma twin", ("Paris",)),  # the repeated id: skipped, counted
        _article(4, "Berlin", ("Paris", "Rome"))]
  ltg = [_article(1, "Rēzekne", ("Paris",)), _article(2, "Paris", ("Rēzekne", "Daugpiļs")),
         _article(3, "Daugpiļs", ("Paris", "Rēzekne")), _article(4, "Ludza", ("Paris",))]
  write_dump(tmp / "enwiki-pages-articles.xml.bz2", en, DumpSite(dbname="enwiki"))
  write_dump(tmp / "ltgwiki-pages-articles.xml.bz2", ltg, DumpSite(dbname="ltgwiki"))
  docs = [{"id": 7, "title": "Doc seven", "text": LEAD.format(name="Doc seven"),
           "links": ["Doc eight"]},
          {"id": 8, "title": "Doc eight", "text": LEAD.format(name="Doc eight"),
           "links": ["Doc seven"]},
          {"id": 7, "title": "Doc seven again", "text": LEAD.format(name="Another")}]
  write_jsonl(tmp / "docs.jsonl", docs)
  out = tmp / "out"
  dump = ",".join(str(tmp / name) for name in ("enwiki-pages-articles.xml.bz2",
                                               "ltgwiki-pages-articles.xml.bz2", "docs.jsonl"))
  assert cli.main(["pairs", "--dump", dump, "--out", str(out), "--heldout_percent", "0",
                   "--wlp_per_page", "5"]) == 0
  return str(out), json.loads((out / contracts.STATS_FILE).read_text())


def test_two_dumps_get_disjoint_ids_and_links_stay_in_their_wiki(two_wikis):
  out, stats = two_wikis
  rows = read_passages(out).to_pylist()
  titles = {}
  for row in rows:
    assert titles.setdefault(row["page_id"], row["title"]) == row["title"], row
  # The first dump keeps its ids; the second (position 1) and the JSONL (2) move.
  assert titles == {1: "Paris", 2: "London", 3: "Rome", 4: "Berlin",
                    2 * STRIDE + 1: "Rēzekne", 2 * STRIDE + 2: "Paris",
                    2 * STRIDE + 3: "Daugpiļs", 2 * STRIDE + 4: "Ludza",
                    3 * STRIDE + 7: "Doc seven", 3 * STRIDE + 8: "Doc eight"}
  # Both "Paris" articles are kept: titles are per wiki, not a duplicate.
  assert stats.get("pages_skipped_duplicate_title", 0) == 0
  wlp = read_pairs(out, "wlp")
  assert wlp
  for pair in wlp:
    assert inputs.id_space(pair["query_page_id"]) == inputs.id_space(pair["doc_page_id"]), pair
  # Every WLP pair about English Paris comes from an English page linking to it, and the
  # Latgalian Paris gets its own (its lead sentence is the same text, its id is not).
  queried = collections.Counter(p["query_page_id"] for p in wlp)
  assert queried[1] > 0 and queried[2 * STRIDE + 2] > 0
  assert {p["doc_page_id"] for p in wlp if p["query_page_id"] == 1} <= {2, 3, 4}
  assert {p["doc_page_id"] for p in wlp if p["query_page_id"] == 2 * STRIDE + 2} <= {
      2 * STRIDE + 1, 2 * STRIDE + 3, 2 * STRIDE + 4}
  assert stats["input1_pages_kept"] == 4 and stats["input1_links_total"] == 6
  assert stats["mediawiki_pages_kept"] == 4 and stats["input2_pages_kept"] == 2


def test_a_repeated_page_id_or_jsonl_id_is_counted_and_the_first_kept(two_wikis):
  out, stats = two_wikis
  assert stats["pages_skipped_duplicate_id"] == 2  # enwiki's id 3, the JSONL's id 7
  titles = {r["title"] for r in read_passages(out).to_pylist()}
  assert "Roma twin" not in titles and "Doc seven again" not in titles
  skipped = sum(v for k, v in stats.items() if k.startswith(C.PAGES_SKIPPED_PREFIX))
  assert stats["pages_read"] == 5 + 4 + 3
  assert stats["pages_read"] == stats["pages_kept"] + stats["pages_redirect"] + skipped


def test_a_nesting_bomb_in_wikitext_is_dropped_and_counted(two_wikis):
  out, stats = two_wikis
  assert stats[C.MARKUP_TOO_DEEP] == 1
  rome = [r["text"] for r in read_passages(out).to_pylist() if r["title"] == "Rome"]
  assert rome and not any("{{" in t or "}}" in t for t in rome)
  assert any("After the bomb." in t for t in rome)


def test_the_first_of_a_repeated_id_wins_in_any_delivery_order():
  """The runner may hand a group's values in any order: the kept page depends on the place
  (file rank, position) only."""
  page = lambda title: types.SimpleNamespace(title=title, source="f")  # noqa: E731
  placed = [((0, 5), page("first")), ((0, 9), page("later")), ((1, 0), page("next file"))]
  for order in (placed, placed[::-1], placed[1:] + placed[:1]):
    fn = unique_ids._FirstPerIdFn()  # pylint: disable=protected-access
    assert [p.title for p in fn.process((3, order))] == ["first"]


def test_id_ranges_follow_the_wiki_and_a_glob_of_two_ranges_is_refused(tmp_path):
  en, ltg = DumpSite(dbname="enwiki"), DumpSite(dbname="ltgwiki")
  write_dump(tmp_path / "en1.xml.bz2", [_article(1, "A", ())], en)
  write_dump(tmp_path / "en2.xml.bz2", [_article(2, "B", ())], en)  # enwiki's next file
  write_dump(tmp_path / "ltg.xml.bz2", [_article(1, "C", ())], ltg)
  write_jsonl(tmp_path / "c.jsonl", [{"id": 1, "title": "C", "text": "x y z"}])
  files = inputs.match_inputs(",".join(f"{tmp_path}/{n}" for n in (
      "en1.xml.bz2", "ltg.xml.bz2", "en2.xml.bz2", "c.jsonl")))
  # One wiki in two globs is one id space (the grid's slice + SQuAD articles); another
  # wiki and the text move, by the first glob naming them.
  assert [(f.wiki, f.id_offset) for f in files] == [
      ("enwiki", 0), ("ltgwiki", 2 * STRIDE), ("enwiki", 0), ("", 4 * STRIDE)]
  assert inputs.own_title_spaces(files) == {2}
  (tmp_path / "more").mkdir()
  os.replace(tmp_path / "ltg.xml.bz2", tmp_path / "more" / "ltg.xml.bz2")
  os.replace(tmp_path / "c.jsonl", tmp_path / "more" / "c.jsonl")
  with pytest.raises(ValueError, match="holds extracted text and the ltgwiki dump"):
    inputs.match_inputs(f"{tmp_path}/en1.xml.bz2,{tmp_path}/more/*")


@pytest.fixture(scope="module")
def shared_question_ids(tmp_path_factory):
  from twotower.pipelines.reqa import builder as reqa
  tmp = tmp_path_factory.mktemp("reqa_ids")
  articles = json.loads(json.dumps(ARTICLES[:4]))
  articles[1]["paragraphs"][0]["qas"][0]["id"] = "q0"   # another question under q0
  articles[2]["paragraphs"][0]["qas"][0]["id"] = "q0"   # and a third
  out = tmp / "reqa"
  reqa.run(reqa.ReqaConfig(out=str(out), squad=squad_file(tmp, articles)))
  return out, json.loads((out / contracts.STATS_FILE).read_text())


def test_reqa_renames_ids_shared_by_different_questions_and_counts_them(shared_question_ids):
  out, stats = shared_question_ids
  rows = pq.read_table(out / "questions-all.parquet").to_pylist()
  by_id = {r["question_id"]: r["question"] for r in rows}
  assert len(by_id) == len(rows) == 4
  assert by_id == {"q0": "What colour has thing 0?", "q0#1": "What colour has thing 1?",
                   "q0#2": "What colour has thing 2?", "q3": "What colour has thing 3?"}
  assert stats[C.QUESTIONS_RENAMED_DUPLICATE_ID] == 2 and stats[C.QUESTIONS] == 4


# ---------------------------------------------------------------------------------------------
# Item 8: hostile dumps, bounded while reading.
# ---------------------------------------------------------------------------------------------


def _write_gz(path, parts):
  """A .gz written part by part (the test never holds the whole XML)."""
  with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as f:
    for part in parts:
      f.write(part)
  return str(path)


def _read(path):
  counts = collections.Counter()
  return list(wikidump.iter_dump_pages(str(path), counts)), counts


def test_a_whitespace_bomb_is_capped_while_reading(tmp_path):
  head, tail = dump_xml([]).split("</siteinfo>\n")
  spaces = " \n\t" * (1 << 20)  # 3 MiB per write: 48 MiB of whitespace in all
  path = _write_gz(tmp_path / "bomb.xml.gz", [
      head, "</siteinfo>\n", page_xml(_article(1, "Before", ())),
      *([spaces] * 8),  # between two pages
      page_xml(_article(2, "After", ())).replace("<title>", "<title>" + spaces[:99], 1)
      .replace("<ns>", spaces * 8 + "<ns>", 1),  # inside a page, between its tags
      tail])
  assert os.path.getsize(path) < 1 << 20
  pages, counts = _read(path)
  assert [p.title.strip() for p in pages] == ["Before", "After"]
  assert [p.page_id for p in pages] == [1, 2]
  assert pages[1].text.startswith("After is a place")
  assert counts[C.DUMP_WHITESPACE_CAPPED] == 2
  assert counts[C.PAGES_READ] == 2 and not counts[C.DUMP_FILES_TRUNCATED]


def test_a_text_run_bomb_skips_its_page_and_reads_on(tmp_path):
  head, tail = dump_xml([]).split("</siteinfo>\n")
  huge = page_xml(DumpPage(2, "Huge", "PLACEHOLDER")).replace("PLACEHOLDER", "a" * (12 << 20))
  path = _write_gz(tmp_path / "text.xml.gz", [
      head, "</siteinfo>\n", page_xml(_article(1, "Before", ())), huge,
      page_xml(_article(3, "After", ())), tail])
  pages, counts = _read(path)
  assert [p.title for p in pages] == ["Before", "After"]
  assert counts[C.DUMP_TEXT_CAPPED] == 1 and counts["pages_skipped_too_large"] == 1
  assert counts[C.PAGES_READ] == 3


def test_xml_nested_too_deep_skips_its_page_and_reads_on(tmp_path):
  head, tail = dump_xml([]).split("</siteinfo>\n")
  deep = page_xml(_article(2, "Deep", ())).replace(
      "<ns>", "<x>" * 10_000 + "</x>" * 10_000 + "<ns>", 1)
  path = _write_gz(tmp_path / "deep.xml.gz", [
      head, "</siteinfo>\n", page_xml(_article(1, "Before", ())), deep,
      page_xml(_article(3, "After", ())), tail])
  pages, counts = _read(path)
  assert [p.title for p in pages] == ["Before", "After"]
  assert counts["pages_skipped_too_deep"] == 1 and counts[C.PAGES_READ] == 3


@pytest.mark.parametrize("bomb", [
    "{{" * 10_000 + "x" + "}}" * 10_000, "{{" * 10_000 + "x", "[[" * 10_000 + "x" + "]]" * 10_000,
    "{{{" * 5_000 + "x" + "}}}" * 5_000, "[[a|" * 5_000 + "x" + "]]" * 5_000,
    "<b>" * 10_000 + "x", "<div>" * 10_000 + "x" + "</div>" * 10_000, "-{" * 10_000 + "x"])
def test_nesting_bombs_leave_no_raw_markup(bomb):
  text = f"Before the bomb. {bomb} After the bomb.\n\nA second paragraph [[with a link]]."
  page = parse_pages.parse_page(wikidump.RawPage(1, "T", 0, text, None, "f", SiteInfo()))
  paragraphs = [p for s in page.sections for p in s.paragraphs]
  assert paragraphs[0].startswith("Before the bomb.") and len(" ".join(paragraphs)) < 200
  for mark in ("{{", "}}", "[[", "]]", "<b>", "<div>", "-{"):
    assert mark not in " ".join(paragraphs), (mark, paragraphs)
  assert paragraphs[-1] == "A second paragraph with a link."


def test_ordinary_nesting_is_kept():
  text = "{{a|{{b|{{c}}}}}} Some [[link|text]] here with {{d|[[e]]}} words."
  assert wikitext.drop_deep_nesting(text) == (text, 0)


# ---------------------------------------------------------------------------------------------
# Item 9: exit codes and messages (non-HTTP).
# ---------------------------------------------------------------------------------------------


def run_cli(capsys, args):
  code = cli.main([str(a) for a in args])
  err = capsys.readouterr().err.strip().splitlines()
  assert not any("Traceback" in line for line in err), err
  return code, err[-1] if err else ""


def test_pairs_out_dot_is_refused_at_once(tmp_path, capsys, monkeypatch):
  write_dump(tmp_path / "d.xml.bz2", [_article(1, "A", ())])
  monkeypatch.chdir(tmp_path)
  for out in (".", str(tmp_path), ".."):
    code, line = run_cli(capsys, ["pairs", "--dump", "d.xml.bz2", "--out", out])
    assert code == 2 and "is the working directory" in line, line
  assert sorted(os.listdir(tmp_path)) == ["d.xml.bz2"]


def test_an_interrupt_wrapped_by_beam_exits_130():
  """SIGINT inside a DoFn reaches the command as Beam's RuntimeError("KeyboardInterrupt
  [while running ...]"): still 130, "interrupted". In a fresh process: what a test worker
  ran before (a JVM, a server) may own SIGINT there, and the signal would never reach Python
  (it failed so, in a full `make test`, twice, and passed alone)."""
  script = textwrap.dedent("""
      import os, signal, sys, types
      import apache_beam as beam
      from twotower import cli

      def interrupt(x):
        os.kill(os.getpid(), signal.SIGINT)
        return x

      def main(argv):
        with beam.Pipeline() as p:
          _ = p | beam.Create([1]) | beam.Map(interrupt)

      sys.modules["fake_stage_command"] = types.SimpleNamespace(main=main)
      cli.command_module = lambda stage: "fake_stage_command"
      code = cli.run_stage("pairs", [])
      assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
      sys.exit(code)
      """)
  done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                        timeout=300, check=False)
  assert done.returncode == 130, done.stderr[-2000:]
  assert done.stderr.strip().splitlines()[-1] == "twotower pairs: interrupted"


@pytest.mark.parametrize("args, message", [
    (["bundle", "--model", "m", "--passages", "p", "--out", "o", "--tune_split",
      "validation-5"], "--tune_split needs --reqa"),
    (["bundle", "--model", "m", "--reqa", "r", "--out", "o", "--weight", "1.5"],
     "--weight 1.5 is not in [0, 1]"),
    (["bundle", "--model", "m", "--reqa", "r", "--out", "o", "--tune_split", "test-5"],
     "only a validation split"),
    (["bundle", "--model", "m", "--reqa", "r", "--out", "o", "--hybrid_depth", "0"],
     "--hybrid_depth must be >= 1"),
    (["fuse", "--run", "a", "b", "--out", "f", "--weight", "1.5"], "--weight 1.5 is not in"),
    (["fuse", "--run", "a", "b", "--out", "f", "--reqa", "r", "--tune_split", "test-5"],
     "only a validation split"),
    (["fuse", "--run", "a", "b", "--out", "f", "--reqa", "r", "--tune_split",
      "validation-5", "--tune_metric", "R@7"], "--tune_metric 'R@7': expected one of"),
    (["fuse", "--run", "a", "b", "--out", "f", "--weight", "x"], "--weight 'x': expected"),
], ids=["bundle-tune-no-reqa", "bundle-weight", "bundle-test-split", "bundle-depth",
        "fuse-weight", "fuse-test-split", "fuse-metric", "fuse-weight-text"])
def test_usage_errors_of_bundle_and_fuse_exit_2(tmp_path, capsys, monkeypatch, args, message):
  monkeypatch.chdir(tmp_path)
  code, line = run_cli(capsys, args)
  assert code == 2 and message in line, line
  assert os.listdir(tmp_path) == []


def test_a_binary_or_non_utf8_vocabulary_is_an_error_naming_the_file(tmp_path):
  tokenizer = pytest.importorskip("twotower.model.tokenizer")
  binary = tmp_path / "vocab.bin"
  binary.write_bytes(b"\x00\x01\x02[PAD]\n" * 10)
  with pytest.raises(ValueError, match=f"{binary}: a binary file, not a vocabulary"):
    tokenizer.read_vocab(str(binary))
  latin1 = tmp_path / "vocab.txt"
  latin1.write_bytes(b"[PAD]\n[UNK]\ncaf\xe9\n")
  with pytest.raises(ValueError, match=f"{latin1}:3: not UTF-8"):
    tokenizer.read_vocab(str(latin1))


def test_invalid_utf8_in_query_jsonl_names_the_file_and_line(tmp_path):
  from twotower.deploy.serving import query
  path = tmp_path / "q.jsonl"
  path.write_bytes(b'{"query": "fine"}\n{"query": "caf\xe9"}\n')
  with open(path, encoding="utf-8", errors="surrogateescape") as f:
    lines = query.read_queries(f, str(path))
    assert next(lines) == ("1", "fine", None)  # (id, query, no filter of its own)
    with pytest.raises(ValueError, match=f"{path}:2: not UTF-8"):
      next(lines)


@pytest.fixture(scope="module")
def standin_run(tmp_path_factory):
  """A training run dir whose export holds a stand-in SavedModel, and a candidates file
  with no row."""
  pytest.importorskip("tensorflow")
  from twotower.testing.embed_standin import StandinConfig, build_standin_savedmodel
  root = tmp_path_factory.mktemp("standin")
  run = root / "run"
  build_standin_savedmodel(contracts.saved_model_path(str(run)),
                           StandinConfig(dim=8, buckets=100, hidden=8))
  pq.write_table(contracts.CANDIDATE_SCHEMA.empty_table(), root / "empty.parquet")
  return root, run


def test_embed_takes_a_run_dir_and_refuses_zero_rows(standin_run, capsys):
  root, run = standin_run
  from twotower.commands import embed as embed_cmd
  config = embed_cmd.parse(["--model", str(run), "--candidates", "x", "--out", "o"])
  assert config.model == contracts.saved_model_path(str(run))
  code, line = run_cli(capsys, ["embed", "--model", run, "--candidates",
                                root / "empty.parquet", "--out", root / "emb"])
  assert code == 1 and "empty.parquet: no row to embed (0 read" in line, line
  assert not (root / "emb").exists()
