"""The BEIR folder reader (eval.beir): string ids kept, internal ids in one place (sorted),
streaming, and every kind of bad input counted and named by file:line, or refused in one
line (also through `twotower beir`: exit 1, nothing written)."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from twotower import cli
from twotower.eval import beir
from beir_fixtures import DOCS, QRELS, QUERIES, corpus_lines, qrels_text, query_lines, write_beir


def test_ids_are_kept_and_internal_ids_follow_their_sorted_order(tmp_path):
  data = beir.read(str(write_beir(tmp_path / "d")), progress=False)
  ids = [d for d, _, _ in DOCS]
  assert data.corpus.ids.to_pylist() == sorted(ids)  # code point order: "00" < "10" < "9"
  docs = list(data.corpus.documents(progress=False))
  assert [d.doc_id for d in docs] == ids  # file order
  assert all(data.corpus.doc_id(d.internal_id) == d.doc_id for d in docs)
  assert [(d.title, d.text) for d in docs] == [(t, x) for _, t, x in DOCS]
  assert data.corpus.internal_ids(["9", "nope", "10"]).tolist() == [
      sorted(ids).index("9"), -1, sorted(ids).index("10")]
  assert data.queries == dict(QUERIES)
  assert not data.problems.counts


def test_doc_ids_mapping_round_trips(tmp_path):
  data = beir.read(str(write_beir(tmp_path / "d")), progress=False)
  beir.write_doc_ids(data.corpus, str(tmp_path / beir.DOC_IDS_FILE))
  assert beir.read_doc_ids(str(tmp_path / beir.DOC_IDS_FILE)) == data.corpus.ids.to_pylist()


def test_a_split_keeps_graded_judgments_and_queries_without_a_relevant_document(tmp_path):
  data = beir.read(str(write_beir(tmp_path / "d")), progress=False)
  test = data.split("test")
  assert test.qrels["q1"] == {"10": 2, "doc/ä-1": 1}
  assert test.qrels["q8"] == {"Z": 0}  # judged, nothing relevant: still a judged query
  assert set(test.queries) == {q for q, _, _ in QRELS["test"]}
  assert test.pairs == len(QRELS["test"]) and not test.problems.counts
  assert beir.splits(str(tmp_path / "d")) == ["dev", "test"]
  summary = beir.summary(data, test)
  assert summary["relevant_pairs"] == sum(1 for _, _, g in QRELS["test"] if g > 0)


def test_bad_lines_are_counted_named_and_skipped(tmp_path):
  lines = corpus_lines()
  bad = ["{not json", "[1, 2]", json.dumps({"title": "no id", "text": "x"}),
         json.dumps({"_id": "has space", "text": "x"}), json.dumps({"_id": "", "text": "x"}),
         json.dumps({"_id": "t", "title": 3, "text": "x"})]
  folder = write_beir(tmp_path / "d", corpus=lines[:2] + bad + lines[2:])
  raw = (folder / "corpus.jsonl").read_bytes()
  (folder / "corpus.jsonl").write_bytes(raw + b'{"_id": "latin", "text": "caf\xe9"}\n')
  data = beir.read(str(folder), progress=False)
  path = str(folder / "corpus.jsonl")
  p = data.problems
  assert p.counts == {beir.NOT_JSON: 1, beir.NOT_OBJECT: 1, beir.BAD_ID: 3, beir.BAD_FIELD: 1,
                      beir.NOT_UTF8: 1}
  assert p.where[beir.NOT_JSON][0].startswith(f"{path}:3 ")
  assert p.where[beir.NOT_OBJECT] == [f"{path}:4"]
  assert [w.split(" ")[0] for w in p.where[beir.BAD_ID]] == [f"{path}:{n}" for n in (5, 6, 7)]
  assert p.where[beir.BAD_FIELD][0].startswith(f"{path}:8 ")
  assert p.where[beir.NOT_UTF8][0].startswith(f"{path}:{len(lines) + len(bad) + 1} ")
  assert len(data.corpus) == len(DOCS)
  assert [d.doc_id for d in data.corpus.documents(progress=False)] == [d for d, _, _ in DOCS]


def test_qrels_ids_missing_from_the_corpus_or_the_queries_are_named(tmp_path):
  rows = QRELS["test"] + (("q1", "ghost", 1), ("q-none", "10", 1), ("q1", "10", 1))
  folder = write_beir(tmp_path / "d", qrels={"test": qrels_text(rows)})
  test = beir.read(str(folder), progress=False).split("test")
  path = str(folder / "qrels" / "test.tsv")
  n = len(QRELS["test"]) + 1  # the header is line 1
  assert test.problems.where[beir.UNKNOWN_DOC] == [f"{path}:{n + 1} (q1 ghost)"]
  assert test.problems.where[beir.UNKNOWN_QUERY] == [f"{path}:{n + 2} (q-none)"]
  assert test.problems.where[beir.JUDGED_TWICE] == [f"{path}:{n + 3} (q1 10)"]
  # A relevant document no system can find still counts; a query without text cannot be
  # searched; a pair judged twice keeps its last grade (as BEIR's loader).
  assert test.qrels["q1"] == {"10": 1, "doc/ä-1": 1, "ghost": 1}
  assert "q-none" not in test.qrels and "q-none" not in test.queries


def test_an_empty_query_is_counted_and_kept(tmp_path):
  folder = write_beir(tmp_path / "d", queries=query_lines() + [json.dumps({"_id": "qe"})])
  data = beir.read(str(folder), progress=False)
  assert data.queries["qe"] == ""
  assert data.problems.counts == {beir.EMPTY_QUERY: 1}


@pytest.mark.parametrize("case, expected", [
    ("duplicate_doc", "corpus.jsonl:3: duplicate _id '10' (first at line 1"),
    ("duplicate_query", "queries.jsonl:4: duplicate _id 'q2' (first at line 2)"),
    ("no_header", "test.tsv:1: no header line"),
    ("bad_grade", "test.tsv:4: grade '1.5' is not an integer (2 such lines)"),
    ("columns", "test.tsv:2: 2 tab-separated fields, expected 3"),
    ("no_split", "train.tsv: no qrels for split 'train' (this folder has: dev, test)"),
])
def test_refused_input_is_one_line_and_nothing_is_written(tmp_path, capsys, case, expected):
  corpus, queries, qrels = corpus_lines(), query_lines(), None
  test_rows = qrels_text(QRELS["test"])
  if case == "duplicate_doc":
    corpus = corpus[:2] + [corpus[0]] + corpus[2:]
  elif case == "duplicate_query":
    queries = queries[:3] + [queries[1]] + queries[3:]
  elif case == "no_header":
    qrels = {"test": qrels_text(QRELS["test"], header=False)}
  elif case == "bad_grade":
    qrels = {"test": test_rows.replace("q2\t9\t2", "q2\t9\t1.5").replace("q5\tq-7\t1",
                                                                         "q5\tq-7\tyes")}
  elif case == "columns":
    qrels = {"test": test_rows.replace("q1\t10\t2", "q1 10\t2")}
  folder = write_beir(tmp_path / "d", corpus=corpus, queries=queries, qrels=qrels)
  split = "train" if case == "no_split" else "test"
  out = tmp_path / "out"
  code = cli.main(["beir", "--data", str(folder), "--split", split, "--out", str(out)])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 1 and not any("Traceback" in line for line in err)
  assert err[-1].startswith("twotower beir: error: ") and expected in err[-1], err[-1]
  assert not out.exists() and not list(tmp_path.glob("out.tmp-*"))


def test_the_corpus_texts_are_never_held(tmp_path):
  """One pass keeps ids and line numbers: on a 20,000-document corpus (about 10 MB) the
  reader's Python allocations peak at a small part of the file."""
  folder = tmp_path / "big"
  text = "word " * 100
  write_beir(folder, corpus=[json.dumps({"_id": f"d{i}", "title": "t", "text": text})
                             for i in range(20_000)])
  size = (folder / "corpus.jsonl").stat().st_size
  tracemalloc.start()
  try:
    corpus = beir.read_corpus(str(folder / "corpus.jsonl"), progress=False)
    _, peak = tracemalloc.get_traced_memory()
  finally:
    tracemalloc.stop()
  assert len(corpus) == 20_000
  assert peak < size / 4, (peak, size)
