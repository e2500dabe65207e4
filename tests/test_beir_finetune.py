"""`twotower beir-to-reqa` (eval.beir_finetune): a BEIR split as the fine-tuning data `twotower
finetune` reads (pair TFRecords, candidates, validation questions), its parts (train,
validation, a scored part held out) by ReQA's seeded policy and stored; `twotower beir
--heldout` scoring the held-out part alone, and refusing a model fine-tuned on a scored query.
End to end with a real fine-tuning run (slow), and on SciFact's train split (shared data)."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest

from twotower import cli
from twotower.core import contracts
from twotower.core.contracts import codecs, manifests
from twotower.eval import beir, beir_eval, beir_finetune, fusion
from twotower.pipelines.reqa import question_splits
from beir_fixtures import DOCS, QRELS, corpus_lines, query_lines, write_beir

TRAIN, VALIDATION, TEST = beir_finetune.TRAIN, beir_finetune.VALIDATION, beir_finetune.TEST


def _convert(data, out, **fields) -> beir_finetune.BeirToReqaResult:
  return beir_finetune.run(beir_finetune.BeirToReqaConfig(data=str(data), out=str(out),
                                                          **fields))


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
  """The tiny folder's `test` split (7 judged queries, graded), 30 % held out for scoring,
  half of the rest for validation."""
  root = tmp_path_factory.mktemp("beir_finetune")
  data = write_beir(root / "tiny")
  result = _convert(data, root / "ft", split="test", scored_percent=30,
                    validation_percent=50)
  return {"root": root, "data": data, "ft": root / "ft", "result": result}


def _pairs(ft, part):
  pattern = contracts.finetune_pattern(str(ft), beir_finetune.part_split(part))
  return list(codecs.read_pairs(manifests.listed_files(str(ft), pattern)))


def test_the_conversion_is_the_layout_finetune_reads(converted):
  ft, result = converted["ft"], converted["result"]
  manifest = json.loads((ft / contracts.MANIFEST_FILE).read_text())
  assert manifest["stage"] == "beir-to-reqa" and manifest["inputs"] == [str(converted["data"])]
  assert set(manifest["files"]) == {
      "candidates.parquet", "doc_ids.parquet", "stats.json", "data.json",
      *(f"questions-{p}-beir.parquet" for p in (TRAIN, VALIDATION, TEST)),
      *(f"finetune/{p}-beir-00000-of-00001.tfrecord" for p in (TRAIN, VALIDATION))}
  # Candidates: every document, its internal id (the dataset's ids sorted) as candidate id,
  # its text as `sentence` and no passage, so every doc_text layout gives the text.
  ids = sorted(d for d, _, _ in DOCS)
  rows = sorted(codecs.read_candidates(str(ft)), key=lambda r: r["candidate_id"])
  by_id = {d: (t, x) for d, t, x in DOCS}
  assert [r["candidate_id"] for r in rows] == list(range(len(DOCS)))
  assert [(r["title"], r["sentence"], r["passage"], r["source"]) for r in rows] == [
      (*by_id[d], "", "beir") for d in ids]
  assert beir.read_doc_ids(str(ft / beir.DOC_IDS_FILE)) == ids
  # Parts: each judged query in one, by the policy; q8 (only a grade-0 judgment) has no
  # positive to train on and is counted, unless it is held out (then it is scored, as 0).
  parts = beir_finetune.read_parts(str(ft))
  judged = {q for q, _, _ in QRELS["test"]}
  policy = beir_finetune.assign_parts(
      beir.read(str(converted["data"]), progress=False).split("test").queries,
      beir_finetune.BeirToReqaConfig(data="d", out="o", split="test", scored_percent=30,
                                     validation_percent=50))
  assert parts.split == "test"
  for part in (TRAIN, VALIDATION, TEST):
    assert set(getattr(parts, part)) == {q for q, p in policy.items() if p == part
                                         and (part == TEST or q != "q8")}
  skipped = int(policy["q8"] != TEST)
  assert len(parts.train) + len(parts.validation) + len(parts.test) == len(judged) - skipped
  assert result.stats[beir_finetune.QUERIES_SKIPPED_NO_RELEVANT] == skipped
  assert parts.train and parts.validation and parts.test  # this seed fills every part


def test_pairs_are_one_per_relevant_document_grade_above_zero(converted):
  ft = converted["ft"]
  parts = beir_finetune.read_parts(str(ft))
  internal = {d: i for i, d in enumerate(sorted(d for d, _, _ in DOCS))}
  texts = {d: (t, x) for d, t, x in DOCS}
  queries = {json.loads(line)["_id"]: json.loads(line)["text"] for line in query_lines()}
  for part in (TRAIN, VALIDATION):
    expected = sorted((queries[q], *texts[d], internal[d]) for q, d, g in QRELS["test"]
                      if q in getattr(parts, part) and g > 0)
    pairs = _pairs(ft, part)
    assert sorted((p.query, p.doc_title, p.doc_text, p.doc_passage_id) for p in pairs) == \
        expected
    assert all(p.task == contracts.REQA_TASK and p.query_page_id == p.doc_page_id ==
               p.doc_passage_id for p in pairs)
    assert converted["result"].stats[beir_finetune.pairs_in(part)] == len(expected)
    # Written in the seeded order of (query, document), not grouped by query.
    doc_of = {i: d for d, i in internal.items()}
    query_of = {t: q for q, t in queries.items()}
    order = [beir_finetune._order("beir", query_of[p.query], doc_of[p.doc_passage_id])
             for p in pairs]
    assert order == sorted(order)
  # Questions: the relevant documents (grade > 0) as gold candidates; the scored part
  # keeps a query with none.
  for part in (TRAIN, VALIDATION, TEST):
    for q in codecs.read_questions(str(ft), beir_finetune.part_split(part)):
      assert set(q.gold_candidate_ids) == {internal[d] for qq, d, g in QRELS["test"]
                                           if qq == q.question_id and g > 0}


def test_parts_go_by_query_text_and_the_seed():
  queries = {f"q{i}": f"question number {i}" for i in range(400)}
  queries.update({"dup-a": "The Same  Question", "dup-b": "the same question"})
  config = beir_finetune.BeirToReqaConfig(data="d", out="o", scored_percent=30)
  parts = beir_finetune.assign_parts(queries, config)
  assert parts["dup-a"] == parts["dup-b"]  # cold start: one text, one part
  shares = {p: sum(1 for v in parts.values() if v == p) / len(parts) for p in
            (TRAIN, VALIDATION, TEST)}
  assert 0.22 < shares[TEST] < 0.38 and 0.03 < shares[VALIDATION] < 0.11
  assert beir_finetune.assign_parts(dict(reversed(list(queries.items()))), config) == parts
  other = beir_finetune.assign_parts(queries, beir_finetune.BeirToReqaConfig(
      data="d", out="o", scored_percent=30, seed="another"))
  assert other != parts
  none_scored = beir_finetune.assign_parts(queries, beir_finetune.BeirToReqaConfig(
      data="d", out="o"))
  assert TEST not in set(none_scored.values())
  # ReQA's policy at ratio 100 - scored_percent, as the module says.
  policy = question_splits.SplitPolicy((70,), 10.0, "beir")
  assert parts["q7"] == contracts.split_side(question_splits.assign_splits(["q7"], policy)[0])


@pytest.mark.parametrize("args, message", [
    (["--scored_percent", "100"], "--scored_percent 100: expected 0 to 99"),
    (["--validation_percent", "-1"], "--validation_percent -1.0: expected [0, 100)"),
])
def test_bad_shares_are_usage_errors(tmp_path, capsys, args, message):
  code = cli.main(["beir-to-reqa", "--data", str(tmp_path), "--out", str(tmp_path / "o"),
                   *args])
  assert code == 2 and message in capsys.readouterr().err


def _fake_run(tmp_path, reqa: str):
  """A run dir as `twotower finetune` leaves one, as far as the check reads it: config.yaml
  naming its --reqa, and export/saved_model."""
  run = tmp_path / "run"
  (run / "export" / "saved_model").mkdir(parents=True)
  (run / "config.yaml").write_text(f"model: {{}}\nrun:\n  reqa: {reqa}\n  split: beir\n")
  return run


def test_finetuned_on_reads_the_runs_config(tmp_path):
  run = _fake_run(tmp_path, "/data/ft")
  assert beir_finetune.finetuned_on(str(run)) == "/data/ft"
  assert beir_finetune.finetuned_on(str(run / "export" / "saved_model")) == "/data/ft"
  (run / "config.yaml").write_text("model: {}\nrun:\n  pairs: /p\n")  # a pre-training run
  assert beir_finetune.finetuned_on(str(run)) is None
  assert beir_finetune.finetuned_on(str(tmp_path / "bare_saved_model")) is None


def _beir(converted, tmp_path, *args):
  return cli.main(["beir", "--data", str(converted["data"]), "--out", str(tmp_path / "o"),
                   "--threads", "1", *args])


def test_a_model_fine_tuned_on_a_scored_query_is_refused(converted, tmp_path, capsys):
  """The check reads the run's config.yaml and the conversion's parts: no TensorFlow."""
  run = _fake_run(tmp_path, str(converted["ft"]))
  data = beir.read(str(converted["data"]), progress=False)
  parts = beir_finetune.read_parts(str(converted["ft"]))
  assert beir_finetune.check_not_trained_on(str(run), data.corpus, list(parts.test),
                                            "--model") == parts
  with pytest.raises(ValueError, match="whose train and validation parts hold"):
    beir_finetune.check_not_trained_on(str(run), data.corpus, [parts.train[0]], "--model")
  # Through the command: the whole split, with the run as the zero-shot model or as the
  # fine-tuned one; nothing written.
  for flag, systems in (("--model", "bm25-flat,dense"),
                        ("--finetuned_model", "bm25-flat,dense-finetuned")):
    assert _beir(converted, tmp_path, "--split", "test", "--systems", systems, flag,
                 str(run)) == 1
    err = capsys.readouterr().err
    assert f"{flag} {run}" in err and f"was fine-tuned on {converted['ft']} (split " in err
    assert f"score the part it held out (--heldout {converted['ft']})" in err
  assert not (tmp_path / "o").exists()


def test_a_finetuned_model_must_be_fine_tuned_on_this_dataset(converted, tmp_path, capsys):
  elsewhere = _fake_run(tmp_path, str(tmp_path / "squad-reqa"))
  assert _beir(converted, tmp_path, "--split", "test", "--heldout", str(converted["ft"]),
               "--systems", "bm25-flat,dense-finetuned", "--finetuned_model",
               str(elsewhere)) == 1
  assert "not a `twotower finetune` run on a `twotower beir-to-reqa` conversion" in \
      capsys.readouterr().err


def test_heldout_must_be_a_conversion_of_this_corpus_and_split(converted, tmp_path, capsys):
  cases = [(("--split", "dev", "--heldout", str(converted["ft"])),
            "holds out queries of split 'test', not of --split dev"),
           (("--split", "test", "--heldout", str(converted["data"])),
            "not a `twotower beir-to-reqa` output")]
  none_held = _convert(converted["data"], tmp_path / "ft0", split="test")
  cases.append((("--split", "test", "--heldout", none_held.out), "holds out no query"))
  other = write_beir(tmp_path / "other", corpus=corpus_lines(DOCS[:-1]))
  other_ft = _convert(other, tmp_path / "ft-other", split="test", scored_percent=30)
  cases.append((("--split", "test", "--heldout", other_ft.out),
                "converted from another corpus"))
  for args, message in cases:
    assert _beir(converted, tmp_path, *args) == 1
    assert message in capsys.readouterr().err, message
  assert not (tmp_path / "o").exists()


def test_heldout_scores_only_the_held_out_part(converted, tmp_path):
  result = beir_eval.run(beir_eval.BeirConfig(
      data=str(converted["data"]), out=str(tmp_path / "o"), split="test",
      heldout=str(converted["ft"]), threads=1))
  parts = beir_finetune.read_parts(str(converted["ft"]))
  for name, ev in result.evaluations.items():
    assert ev.query_ids == tuple(sorted(parts.test)), name
  assert {r["split"] for r in result.records} == {"test-heldout"}
  assert result.data["queries"] == len(parts.test)
  assert result.data["heldout"] == {"folder": str(converted["ft"]), "split": "test"}


@pytest.mark.slow  # a real fine-tuning run (TensorFlow), the embedding job, a JVM
def test_fine_tuned_on_the_conversion_scored_on_its_held_out_part(converted, tmp_path):
  """beir-to-reqa -> `twotower finetune` (as it is: the tiny preset from random weights,
  selected on the validation part) -> `twotower beir --heldout --finetuned_model`."""
  from twotower.testing import embed_standin, pairs as testing_pairs
  vocab = str(tmp_path / "vocab.txt")
  testing_pairs.write_vocab(vocab)
  run = tmp_path / "run"
  assert cli.main(["finetune", "--config", "tiny", "--init", "none", "--reqa",
                   str(converted["ft"]), "--split", beir_finetune.FINETUNE_SPLIT, "--vocab",
                   vocab, "--out", str(run), "--steps", "4", "--batch_size", "2",
                   "--select", "R@5", "--progress", "none"]) == 0
  history = (run / contracts.HISTORY_FILE).read_text()
  assert "val_R@5" in history  # selected on the conversion's validation part
  model = embed_standin.build_standin_savedmodel(str(tmp_path / "standin"))
  out = tmp_path / "o"
  systems = "bm25-flat,dense,hybrid,dense-finetuned,hybrid-finetuned"
  assert cli.main(["beir", "--data", str(converted["data"]), "--split", "test", "--heldout",
                   str(converted["ft"]), "--systems", systems, "--model", model,
                   "--finetuned_model", str(run), "--out", str(out), "--threads", "1",
                   "--min_tune_queries", "1"]) == 0
  parts = beir_finetune.read_parts(str(converted["ft"]))
  per_query = beir_eval.read_per_query(str(out / beir_eval.PER_QUERY_FILE))
  assert set(per_query) == set(systems.split(","))
  assert all(ev.query_ids == tuple(sorted(parts.test)) for ev in per_query.values())
  hybrids = json.loads((out / beir_eval.HYBRID_FILE).read_text())
  for name in ("hybrid", "hybrid-finetuned"):
    assert hybrids[name]["how"] == fusion.TUNED
    assert hybrids[name]["split"] == "test-validation"
    assert hybrids[name]["queries"] == len(parts.validation)
  intervals = json.loads((out / "intervals.json").read_text())
  assert {r["system"] for r in intervals} == set(systems.split(",")[1:])
  manifest = json.loads((out / contracts.MANIFEST_FILE).read_text())
  assert manifest["inputs"] == [str(converted["data"]), model,
                                f"{run}/export/saved_model", str(converted["ft"])]


@pytest.mark.shared_data
def test_scifact_train_converted_with_a_scored_part(scifact_train, tmp_path):
  """SciFact's 809 train claims (919 judgments, grade 1): 30 % held out for scoring, 10 % of
  the rest for validation; every judgment of the other parts a pair; the parts disjoint and
  as the policy assigns them."""
  result = _convert(scifact_train, tmp_path / "ft", scored_percent=30)
  stats = result.stats
  parts = beir_finetune.read_parts(result.out)
  data = beir.read(str(scifact_train), progress=False)
  split = data.split("train")
  assert beir_finetune.same_corpus(result.out, data.corpus)
  assert (stats["documents"], stats["queries_judged"]) == (5183, 809)
  assert stats[beir_finetune.RELEVANT_NOT_IN_CORPUS] == 0
  assert stats[beir_finetune.QUERIES_SKIPPED_NO_RELEVANT] == 0
  sizes = {p: len(getattr(parts, p)) for p in (TRAIN, VALIDATION, TEST)}
  assert sum(sizes.values()) == 809 and not set(parts.test) & parts.finetuned
  assert 0.25 < sizes[TEST] / 809 < 0.35 and 0.05 < sizes[VALIDATION] / 809 < 0.12
  for part in (TRAIN, VALIDATION):
    judged = sum(len(split.qrels[q]) for q in getattr(parts, part))
    assert stats[beir_finetune.pairs_in(part)] == judged == len(_pairs(result.out, part))
  expected = beir_finetune.assign_parts(split.queries, beir_finetune.BeirToReqaConfig(
      data="d", out="o", scored_percent=30))
  assert {q for q, p in expected.items() if p == TEST} == set(parts.test)
  # Measured (seed "beir"): the parts the SciFact figures of docs/guide/beir.md are of.
  assert sizes == {TRAIN: 513, VALIDATION: 60, TEST: 236}, sizes
  questions = pq.read_table(os.path.join(result.out, "questions-test-beir.parquet"))
  assert questions.num_rows == 236
