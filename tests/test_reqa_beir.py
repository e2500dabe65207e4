"""`twotower reqa-to-beir`: a ReQA split written as a BEIR folder, read back by eval.beir, and
one BM25 run scored through both metric paths (twotower.core.metrics, ReQA's; eval.ir_metrics,
trec_eval's Success@k / MRR): every R@k and MRR equal, under both gold conventions."""

from __future__ import annotations

import copy
import json
import logging
import time

import pytest

from twotower import cli
from twotower.core import contracts
from twotower.core import tower_text as texts
from twotower.core.contracts import Question, codecs
from twotower.eval import beir, bm25, ir_metrics, reqa_beir
from twotower.eval import runs as runs_lib
from twotower.pipelines.reqa import builder as reqa
from twotower.testing import squad as squad_testing

from reqa_fixtures import squad_file

logger = logging.getLogger(__name__)

SPLIT = contracts.scored_split(5)
#: ReQA's R@k as eval.ir_metrics names it, and its MRR.
AS_BEIR = {**{f"R@{k}": f"Success@{k}" for k in contracts.DEFAULT_KS}, "MRR": "MRR"}


def _articles() -> list[dict]:
  """The shipped synthetic SQuAD plus one article that makes the two gold conventions differ:
  its paragraph repeats a sentence of another (one sentence, two candidates) and its
  question repeats that paragraph's question text (two ids, one question string)."""
  data = squad_testing.squad_articles(n_articles=6, paragraphs=2)
  source = data[0]["paragraphs"][0]
  sentence = source["context"].split(". ")[0] + "."
  context = f"{sentence} It stands beside a quiet lake."
  qa = copy.deepcopy(source["qas"][0])
  answer = qa["answers"][0]["text"]
  data.append({"title": "Mirror", "paragraphs": [{"context": context, "qas": [
      {"id": "Mirror-0-0", "question": qa["question"],
       "answers": [{"text": answer, "answer_start": context.index(answer)}]}]}]})
  return data


def _build(tmp_path, squad: str, split: str = SPLIT, ratios=(5,)):
  """ReQA, BM25 the ReQA way (eval.bm25: twotower.core.metrics, both conventions) and the
  BEIR folder of the split."""
  reqa_dir, bm25_dir, beir_dir = (str(tmp_path / n) for n in ("reqa", "bm25", "beir"))
  reqa.run(reqa.ReqaConfig(out=reqa_dir, squad=squad, ratios=ratios))
  scored = bm25.run(bm25.Bm25Config(reqa=reqa_dir, out=bm25_dir, splits=(split,),
                                    golds=("pair", "sentence"), threads=1))
  written = reqa_beir.run(reqa_beir.ReqaBeirConfig(reqa=reqa_dir, out=beir_dir, split=split))
  return reqa_dir, scored, written


def _beir_means(beir_dir: str, qrels_split: str, run_file: str) -> dict[str, float]:
  """The BM25 run file scored through eval.beir + eval.ir_metrics, in ReQA's names."""
  qrels = beir.read(beir_dir, progress=False).split(qrels_split).qrels
  ranked = runs_lib.ids_only(runs_lib.read_run(run_file))
  means = ir_metrics.evaluate(qrels, reqa_beir.ir_run(ranked), tuple(AS_BEIR.values())).means()
  return {name: means[beir_name] for name, beir_name in AS_BEIR.items()}


def _assert_equal_paths(beir_dir: str, split: str, scored: bm25.Bm25Result) -> dict:
  shown = {}
  for record in scored.records:
    qrels_split = split if record["gold"] == "pair" else reqa_beir.sentence_split(split)
    through_beir = _beir_means(beir_dir, qrels_split, scored.run_file)
    logger.info("%s: ReQA %s BEIR %s", record["gold"], record["metrics"], through_beir)
    assert through_beir.keys() == record["metrics"].keys()
    for name, value in record["metrics"].items():
      assert through_beir[name] == pytest.approx(value, abs=1e-9), (record["gold"], name)
    shown[record["gold"]] = (record["questions"], record["metrics"])
  return shown


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  root = tmp_path_factory.mktemp("reqa_beir")
  return root, _build(root, squad_file(root, _articles()))


def test_the_folder_is_what_the_beir_reader_reads(built):
  root, (reqa_dir, _, written) = built
  data = beir.read(str(root / "beir"), progress=False)
  candidates = codecs.read_candidates(reqa_dir)
  questions = codecs.read_questions(reqa_dir, SPLIT)
  assert not data.problems.counts
  assert len(data.corpus) == written.documents == len(candidates)
  laid_out = {str(c["candidate_id"]): (c["title"], texts.candidate_doc_text(c["sentence"],
                                                                           c["passage"]))
              for c in candidates}
  assert {d.doc_id: (d.title, d.text) for d in data.corpus.documents(progress=False)} == laid_out
  pair = data.split(SPLIT)
  assert not pair.problems.counts
  assert pair.queries == {q.question_id: q.question for q in questions}
  assert pair.qrels == {q.question_id: {str(c): 1 for c in q.gold_candidate_ids}
                        for q in questions}
  sentence = data.split(reqa_beir.sentence_split(SPLIT))
  assert len(sentence.qrels) == len({q.question for q in questions}) < len(questions)
  assert sentence.pairs > pair.pairs  # the repeated sentence: two candidates
  assert beir.splits(str(root / "beir")) == [SPLIT, reqa_beir.sentence_split(SPLIT)]
  manifest = json.loads((root / "beir" / contracts.MANIFEST_FILE).read_text())
  assert manifest["stage"] == "reqa-to-beir"


def test_bm25_through_the_beir_folder_gives_the_reqa_numbers(built):
  """The same run file (eval.bm25's run.trec) through both metric paths. (`twotower beir`'s
  own bm25-flat run would differ: it indexes title + text, ReQA's BM25 the text alone.)"""
  root, (_, scored, _) = built
  shown = _assert_equal_paths(str(root / "beir"), SPLIT, scored)
  assert shown["sentence"][0] < shown["pair"][0]  # one question string of two ids


def test_sentence_qrels_group_question_strings_under_their_smallest_id():
  sentence_of = {1: "A.", 2: "A.", 3: "B.", 4: "C."}
  questions = [Question("q9", "same?", (1,)), Question("q2", "same?", (3,)),
               Question("q5", "other?", (4,))]
  assert reqa_beir.sentence_qrels(questions, sentence_of) == {
      "q2": {"1": 1, "2": 1, "3": 1}, "q5": {"4": 1}}
  assert reqa_beir.pair_qrels(questions) == {"q9": {"1": 1}, "q2": {"3": 1}, "q5": {"4": 1}}


def test_the_command_writes_the_folder_and_refuses_a_question_without_gold(built, tmp_path,
                                                                            capsys):
  root, (reqa_dir, _, written) = built
  out = tmp_path / "cmd"
  assert cli.main(["reqa-to-beir", "--reqa", reqa_dir, "--split", SPLIT, "--out",
                   str(out), "--doc_text", "sentence"]) == 0
  assert f"{written.documents} documents" in capsys.readouterr().out
  first = json.loads((out / beir.CORPUS_FILE).read_text().splitlines()[0])
  row = next(c for c in codecs.read_candidates(reqa_dir) if str(c["candidate_id"]) == first["_id"])
  assert first["text"] == row["sentence"]
  with pytest.raises(ValueError, match="no gold candidate"):
    reqa_beir._check_ids([Question("q1", "why?", ())])  # pylint: disable=protected-access


@pytest.mark.shared_data
@pytest.mark.slow  # ~55 s: 11,242 BM25 queries on one thread
def test_squad_subset_through_the_beir_folder_gives_the_reqa_numbers(squad_subset, tmp_path):
  started = time.perf_counter()
  _, scored, _ = _build(tmp_path, str(squad_subset))
  _assert_equal_paths(str(tmp_path / "beir"), SPLIT, scored)
  logger.info("squad subset: %.0f s", time.perf_counter() - started)
