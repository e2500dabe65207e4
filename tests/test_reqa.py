"""`twotower reqa`: the job on SQuAD and NQ input, bad input, candidates, golds, outputs, the
open-domain pool. (Parsers: test_squad, test_nq; the split policy: test_reqa_splits.)"""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twotower.core import contracts
from twotower.commands import reqa as reqa_cmd
from twotower.core.contracts import counters as C
from twotower.pipelines.reqa import builder as reqa
from twotower.pipelines.reqa.question_splits import question_key
from reqa_fixtures import P1, nq_record, span, squad_file

CTX1 = "Paris is the capital of France. It has the Louvre. The Seine flows through it."
CTX2 = "Berlin is in Germany. It is the capital."


def _qa(qid, question, *answers):
  return {"id": qid, "question": question,
          "answers": [{"text": t, "answer_start": s} for s, t in answers]}


GOOD = [{"title": "Paris", "paragraphs": [{"context": CTX1, "qas": [
    _qa("q1", "What is the capital of France?", (0, "Paris")),
    # Two answers in two sentences: two golds.
    _qa("q2", "What is in Paris?", (CTX1.index("Louvre"), "Louvre"),
        (CTX1.index("Seine"), "Seine")),
    # answer_start off by 3: the nearest occurrence of the text is used.
    _qa("q3", "Which river?", (CTX1.index("Seine") + 3, "Seine")),
]}]}, {"title": "Berlin", "paragraphs": [{"context": CTX2, "qas": [
    _qa("q4", "Where is Berlin?", (CTX2.index("Germany"), "Germany")),
]}]}]


def read_table(path) -> list[dict]:
  return pq.read_table(path).to_pylist()


def run_reqa(tmp_path, **kw) -> tuple[dict, str]:
  out = str(tmp_path / "out")
  config = reqa.ReqaConfig(out=out, **kw)
  return reqa.run(config).stats, out


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> tuple[dict, str]:
  """One Beam run on GOOD, shared by the tests that only read its outputs."""
  tmp_path = tmp_path_factory.mktemp("good")
  return run_reqa(tmp_path, squad=squad_file(tmp_path, GOOD))


def test_squad_outputs(good_run):
  stats, out = good_run
  cands = read_table(f"{out}/{contracts.CANDIDATES_FILE}")
  assert pq.read_schema(f"{out}/{contracts.CANDIDATES_FILE}").equals(contracts.CANDIDATE_SCHEMA)
  assert sorted(c["sentence"] for c in cands) == sorted([
      "Paris is the capital of France.", "It has the Louvre.", "The Seine flows through it.",
      "Berlin is in Germany.", "It is the capital."])
  by_sentence = {c["sentence"]: c for c in cands}
  assert by_sentence["It has the Louvre."]["passage"] == CTX1
  assert by_sentence["It has the Louvre."]["title"] == "Paris"
  assert {c["source"] for c in cands} == {"squad"}
  assert all(c["candidate_id"] == reqa.candidate_id(c["sentence"], c["passage"]) for c in cands)
  questions = {q["question_id"]: q for q in read_table(f"{out}/{contracts.questions_file('all')}")}
  id_of = {s: c["candidate_id"] for s, c in by_sentence.items()}
  assert questions["q1"]["gold_candidate_ids"] == [id_of["Paris is the capital of France."]]
  assert questions["q2"]["gold_candidate_ids"] == [id_of["It has the Louvre."],
                                                   id_of["The Seine flows through it."]]
  assert questions["q3"]["gold_candidate_ids"] == [id_of["The Seine flows through it."]]
  assert stats["candidates"] == 5
  assert stats["questions"] == 4
  assert stats["reqa_qa_inputs"] == 5  # q2 has two answer sentences
  assert stats["answers_start_fixed"] == 1
  # Every split file exists (empty ones too) and partitions `all` per ratio.
  for r in contracts.REQA_RATIOS:
    ids = []
    for side in ("train", "validation", "test"):
      rows = read_table(f"{out}/{contracts.questions_file(f'{side}-{r}')}")
      ids += [q["question_id"] for q in rows]
    assert sorted(ids) == ["q1", "q2", "q3", "q4"]


def test_finetune_pairs(good_run):
  import pathlib  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  stats, out = good_run
  train = {q["question_id"] for q in read_table(f"{out}/questions-train-80.parquet")}
  assert train, "the 80 % train side of four questions should not be empty"
  files = sorted((pathlib.Path(out) / "finetune").glob("train-80-*-of-*.tfrecord"))
  assert files, "no fine-tuning shards"
  examples = [tf.train.Example.FromString(r.numpy())
              for r in tf.data.TFRecordDataset([str(f) for f in files])]
  # One pair per (question, gold candidate): q2 has two.
  assert stats["questions_train_80"] == len(train)
  assert len(examples) == sum(2 if q == "q2" else 1 for q in train)
  for ex in examples:
    f = ex.features.feature
    assert set(f) == set(contracts.PAIR_FEATURES)
    assert f["task"].bytes_list.value[0] == b"reqa"
    text = f["doc_text"].bytes_list.value[0].decode()
    passage = CTX1 if CTX1 in text else CTX2
    assert text.endswith(passage) and text != passage  # the sentence, then its passage
    assert f["doc_page_id"].int64_list.value[0] == reqa.passage_id(passage)
    assert f["query_page_id"].int64_list.value[0] == reqa.passage_id(passage)
    sentence = text[:-len(passage)].strip()
    assert f["doc_passage_id"].int64_list.value[0] == reqa.candidate_id(sentence, passage)


BAD = [
    {"title": "Paris", "paragraphs": [
        {"context": CTX1, "qas": [
            _qa("ok", "What is the capital of France?", (0, "Paris")),
            _qa("lost", "Which ocean?", (3, "Pacific")),        # text nowhere: skipped
            {"id": "noq", "answers": [{"text": "Paris", "answer_start": 0}]},  # no question
            {"id": "v2", "question": "Who is king?", "answers": [], "is_impossible": True,
             "plausible_answers": [{"text": "Louvre", "answer_start": 3}]},
            _qa("none", "Nothing?"),                             # v1.1 with no answer
        ]},
        {"context": "   ", "qas": [_qa("empty", "Where?", (0, "x"))]},  # empty passage
        {"qas": [_qa("nocontext", "Where?", (0, "x"))]},                 # no context field
    ]},
    {"paragraphs": "not a list"},
]


def test_bad_squad_records_are_counted_skips(tmp_path, caplog):
  stats, out = run_reqa(tmp_path, squad=squad_file(tmp_path, BAD), ratios=(5,))
  questions = read_table(f"{out}/{contracts.questions_file('all')}")
  assert [q["question_id"] for q in questions] == ["ok"]
  skipped = {k: v for k, v in stats.items() if "skipped" in k}
  assert skipped == {
      "answers_skipped_text_not_found": 1,
      "questions_skipped_no_valid_answer": 1,
      "questions_skipped_missing_field": 1,
      "questions_skipped_unanswerable": 1,
      "questions_skipped_no_answer": 1,
      "paragraphs_skipped_empty": 1,
      "questions_skipped_empty_passage": 1,
      "paragraphs_skipped_missing_field": 1,
      "articles_skipped_missing_field": 1,
  }
  # Log lines name the file and the record.
  assert "question 'noq': no 'question' field" in caplog.text
  assert "squad.json: article 0 ('Paris') paragraph 1: empty passage" in caplog.text


def test_malformed_json_is_a_named_error(tmp_path):
  path = tmp_path / "broken.json"
  path.write_text('{"data": [{"title": "x",\n', encoding="utf-8")
  with pytest.raises(Exception, match=r"broken\.json: malformed JSON at line 2"):
    run_reqa(tmp_path, squad=str(path), ratios=(5,))


# --- Natural Questions -----------------------------------------------------------------------


def test_nq_job_on_gzipped_jsonl(tmp_path):
  path = tmp_path / "nq-dev.jsonl.gz"
  lines = [json.dumps(nq_record(1, P1, [span("1978")])),
           "{not json",
           json.dumps(nq_record(2, (P1[0], 10_000), [span("1978")])),
           json.dumps(nq_record(3, P1, [span("Gary Thuerk")], "who sent the first spam"))]
  with gzip.open(path, "wt", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  stats, out = run_reqa(tmp_path, nq=str(path), ratios=(5,))
  assert stats["nq_records_read"] == 3
  assert stats["nq_skipped_malformed_json"] == 1
  assert stats["nq_skipped_bad_offsets"] == 1
  assert stats["questions"] == 2
  cands = read_table(f"{out}/{contracts.CANDIDATES_FILE}")
  # Both questions share the paragraph: its two sentences are candidates once.
  assert len(cands) == stats["candidates"] == 2
  assert {c["source"] for c in cands} == {"nq"}
  questions = {q["question_id"]: q for q in read_table(f"{out}/questions-all.parquet")}
  second = next(c for c in cands if c["sentence"].startswith("It began"))
  assert questions["1"]["gold_candidate_ids"] == [second["candidate_id"]]
  assert questions["3"]["gold_candidate_ids"] == [second["candidate_id"]]


# --- Open-domain augmentation ----------------------------------------------------------------


def write_passages(directory, n_pages=5):
  rows = []
  for page in range(n_pages):
    for passage in range(2):
      sentences = [f"Page {page} passage {passage} sentence {s}." for s in range(3)]
      rows.append({"page_id": 100 + page, "passage_id": passage, "title": f"Page {page}",
                   "text": " ".join(sentences), "sentences": sentences, "is_lead": passage == 0})
  (directory / "passages").mkdir(parents=True)
  half = len(rows) // 2
  for i, part in enumerate((rows[:half], rows[half:])):
    pq.write_table(pa.Table.from_pylist(part, schema=contracts.PASSAGE_SCHEMA),
                   directory / "passages" / f"passages-{i:05d}-of-00002.parquet")
  return rows


def test_extra_candidates_sampled_deterministically(tmp_path):
  rows = write_passages(tmp_path / "wiki")
  squad = squad_file(tmp_path, GOOD)
  runs = []
  for name in ("a", "b"):
    config = reqa.ReqaConfig(out=str(tmp_path / name), squad=squad,
                             extra_passages=str(tmp_path / "wiki"), extra_candidates=7,
                             ratios=(5,))
    stats = reqa.run(config).stats
    cands = read_table(tmp_path / name / contracts.CANDIDATES_FILE)
    runs.append(sorted((c["candidate_id"], c["sentence"], c["source"]) for c in cands))
    assert stats["candidates_extra"] == 7
    assert stats["candidates"] == 5 + 7
  assert runs[0] == runs[1]
  extra = [c for c in runs[0] if c[2] == "wikipedia"]
  all_sentences = {s for r in rows for s in r["sentences"]}
  assert len(extra) == 7 and {c[1] for c in extra} <= all_sentences


def test_extra_candidates_all_takes_every_sentence(tmp_path):
  rows = write_passages(tmp_path / "wiki")
  # `--extra_passages` may name the pairs output or its passages/ dir.
  stats, out = run_reqa(tmp_path, squad=squad_file(tmp_path, GOOD),
                        extra_passages=str(tmp_path / "wiki" / "passages"),
                        extra_candidates=reqa.ALL_EXTRA, ratios=(5,))
  extra = {(c["sentence"], c["passage"]) for c in read_table(f"{out}/{contracts.CANDIDATES_FILE}")
           if c["source"] == contracts.WIKIPEDIA_SOURCE}
  assert extra == {(s, r["text"]) for r in rows for s in r["sentences"]}
  assert stats[C.CANDIDATES_EXTRA] == len(extra) == 30
  assert stats[C.CANDIDATES] == 5 + 30
  assert stats[C.CANDIDATES_EXTRA_SKIPPED_REQA_PASSAGE] == 0


def test_extra_candidates_of_a_reqa_paragraph_are_removed_and_counted(tmp_path):
  """A pre-training dump that holds the QA articles gives back the gold paragraphs as extra
  passages (re-split, re-cased or re-spaced): they leave the pool, counted."""
  rows = write_passages(tmp_path / "wiki", n_pages=2)
  copy = "  " + CTX1.upper().replace(" ", "   ")  # CTX1, case and spacing aside
  sentences = ["PARIS IS THE CAPITAL OF FRANCE.", "IT HAS THE LOUVRE.",
               "THE SEINE FLOWS THROUGH IT."]
  # Page 900 holds the paragraph twice, once re-spaced and upper-cased, and once packed with
  # more text (passage 1: a re-packed copy, not equal to the paragraph): the whole page goes.
  packed = CTX1 + " It is also known for its cafes."
  copies = [{"page_id": 900, "passage_id": 0, "title": "Paris", "text": copy,
             "sentences": sentences, "is_lead": True},
            {"page_id": 900, "passage_id": 1, "title": "Paris", "text": packed,
             "sentences": sentences[:1] + ["It is also known for its cafes."],
             "is_lead": False},
            {"page_id": 901, "passage_id": 0, "title": "Paris (copy)", "text": CTX1,
             "sentences": sentences[:1], "is_lead": True}]
  pq.write_table(pa.Table.from_pylist(copies, schema=contracts.PASSAGE_SCHEMA),
                 tmp_path / "wiki" / "passages" / "passages-copies.parquet")
  for n in (reqa.ALL_EXTRA, 100):  # every sentence, and a sample larger than the pool
    stats, out = run_reqa(tmp_path / str(n), squad=squad_file(tmp_path, GOOD),
                          extra_passages=str(tmp_path / "wiki"), extra_candidates=n,
                          ratios=(5,))
    cands = read_table(f"{out}/{contracts.CANDIDATES_FILE}")
    assert stats[C.CANDIDATES_EXTRA_SKIPPED_REQA_PASSAGE] == 4
    assert stats[C.CANDIDATES_EXTRA_SKIPPED_REQA_PAGE] == 2
    assert not any(CTX1.lower() in " ".join(c["passage"].lower().split())
                   and c["source"] == contracts.WIKIPEDIA_SOURCE for c in cands)
    assert stats[C.CANDIDATES_EXTRA] == sum(len(r["sentences"]) for r in rows) == 12
    assert stats[C.CANDIDATES] == len(cands) == 5 + 12
  table = reqa.summary_table(stats, reqa.ReqaConfig(out=out, squad="s", ratios=(5,),
                                                    extra_passages="wiki",
                                                    extra_candidates=100))
  assert "5 ReQA + 12 extra candidates" in table and "4 removed" in table
  assert "2 more of the same source pages" in table


def test_command_parses_extra_candidates_all(tmp_path):
  config = reqa_cmd.parse(["--squad", "s.json", "--out", "o", "--extra_passages", "w",
                           "--extra_candidates", "all", "--runner", "DirectRunner"])
  assert config.extra_candidates == reqa.ALL_EXTRA and config.has_extra
  assert config.beam_args == ("--runner", "DirectRunner")
  assert reqa_cmd.parse(["--squad", "s", "--out", "o", "--extra_passages", "w",
                         "--extra_candidates", "7"]).extra_candidates == 7
  for bad in (["--extra_candidates", "-2", "--extra_passages", "w"],
              ["--extra_candidates", "some", "--extra_passages", "w"],
              ["--extra_candidates", "5"]):  # no --extra_passages
    with pytest.raises(SystemExit):
      reqa_cmd.parse(["--squad", "s", "--out", "o", *bad])
  with pytest.raises(ValueError, match="needs --extra_passages"):
    reqa.run(reqa.ReqaConfig(out=str(tmp_path), squad="s", extra_candidates=reqa.ALL_EXTRA))


def test_command_main_prints_the_summary(tmp_path, capsys):
  squad = squad_file(tmp_path, GOOD)
  reqa_cmd.main(["--squad", squad, "--out", str(tmp_path / "o")])
  out = capsys.readouterr().out
  assert "candidates 5 (extra 0), questions 4" in out and "written to" in out

# --- The shared SQuAD subset -----------------------------------------------------------------


@pytest.mark.shared_data
@pytest.mark.slow
def test_shared_squad_subset_counts(tmp_path, squad_subset):
  stats, out = run_reqa(tmp_path, squad=str(squad_subset))
  # Pinned (reviewed in diffs): ReQA-style counts with the `reqa` splitter.
  assert stats["candidates"] == 10384
  assert stats["questions"] == stats["reqa_qa_inputs"] == 11877
  assert not {k: v for k, v in stats.items() if "skipped" in k}
  test5 = read_table(f"{out}/questions-test-5.parquet")
  train5 = read_table(f"{out}/questions-train-5.parquet")
  assert len(test5) == stats["questions_test_5"]
  seen = {question_key(q["question"]) for q in train5}
  assert not any(question_key(q["question"]) in seen for q in test5)  # cold start
