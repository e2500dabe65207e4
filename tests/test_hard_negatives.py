"""`twotower hardneg` on a ReQA set built by `twotower reqa` from a small SQuAD file, on real
Lucene: no mined negative is a gold, a sibling of a gold (same passage) or a gold's sentence
in another passage; the counts; the files round-trip through contracts.codecs; and the mined
pairs feed `pair_dataset(hard_negatives=k)` and a train step of the towers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from twotower import cli
from twotower.core import contracts, tower_text as texts
from twotower.core import files as tio
from twotower.core.contracts import codecs
from twotower.core.contracts import counters as C
from twotower.core.contracts.counters import HardNeg
from twotower.pipelines import hardneg
from twotower.pipelines.reqa import builder as reqa

P_PARIS = ("Paris is the capital of France. The Louvre museum is in Paris. "
           "The Seine river flows through Paris.")
P_LYON = ("Lyon is a city in France. Lyon hosts a famous festival of lights. "
          "The Rhone river flows through Lyon.")
P_BERLIN = ("Berlin is the capital of Germany. The Spree river flows through Berlin. "
            "Berlin has many museums.")
# The sentence of q1's gold, again, in another passage: ReQA's sentence rule counts it a hit.
P_SEINE = "The Seine river flows through Paris. It is a long river in northern France."
P_ZEBRA = "Zebras zigzag quietly at dawn. Xylophones yodel."


def _qa(qid, question, context, answer):
  return {"id": qid, "question": question,
          "answers": [{"text": answer, "answer_start": context.index(answer)}]}


ARTICLES = [
    {"title": "Paris", "paragraphs": [
        {"context": P_PARIS, "qas": [
            _qa("q1", "What river flows through Paris?", P_PARIS, "Seine"),
            _qa("q2", "Which museum is in Paris?", P_PARIS, "Louvre")]},
        {"context": P_SEINE, "qas": [
            _qa("q5", "Which long river is in northern France?", P_SEINE, "long river")]}]},
    {"title": "Lyon", "paragraphs": [{"context": P_LYON, "qas": [
        _qa("q3", "What river flows through Lyon?", P_LYON, "Rhone")]}]},
    {"title": "Berlin", "paragraphs": [{"context": P_BERLIN, "qas": [
        _qa("q4", "What is the capital of Germany?", P_BERLIN, "Berlin")]}]},
    # Its words occur in its own passage only: BM25 finds no negative for it.
    {"title": "Zebra", "paragraphs": [{"context": P_ZEBRA, "qas": [
        _qa("q6", "When do zebras zigzag?", P_ZEBRA, "dawn")]}]},
]


@pytest.fixture(scope="module")
def mined(tmp_path_factory):
  """A ReQA set (validation 0 %, so every train-side question is in train-<r>) and its
  negatives at k = 1 and k = 2."""
  root = tmp_path_factory.mktemp("hardneg")
  (root / "squad.json").write_text(json.dumps({"version": "t", "data": ARTICLES}),
                                   encoding="utf-8")
  out = str(root / "reqa")
  reqa.run(reqa.ReqaConfig(out=out, squad=str(root / "squad.json"), ratios=(5, 80),
                           validation_percent=0.0))
  stats = {k: hardneg.run(hardneg.HardNegConfig(reqa=out, ratios=(5, 80), k=k,
                                                threads=1)).stats
           for k in (1, 2)}
  return out, stats


def _candidates(out):
  return {c["candidate_id"]: c for c in codecs.read_candidates(out)}


@pytest.mark.slow  # starts the JVM (~20-40 s)
def test_no_negative_is_a_gold_a_sibling_or_the_gold_sentence(mined):
  out, _ = mined
  cands = _candidates(out)
  golds = {q.question: set(q.gold_candidate_ids) for q in codecs.read_questions(out, "all")}
  for k in (1, 2):
    pairs = list(codecs.read_pairs(contracts.hard_negatives_pattern(out, "train-80", k)))
    assert pairs
    for pair in pairs:
      gold = golds[pair.query]
      gold_passages = {cands[g]["passage"] for g in gold}
      gold_sentences = {cands[g]["sentence"] for g in gold}
      assert len(pair.hard_negatives) <= k
      for title, text, cid in pair.hard_negatives:
        assert cid not in gold
        assert cands[cid]["passage"] not in gold_passages
        assert cands[cid]["sentence"] not in gold_sentences
        # The negative is laid out as the positives are (twotower.core.tower_text).
        assert (title, text) == (cands[cid]["title"], texts.candidate_doc_text(
            cands[cid]["sentence"], cands[cid]["passage"]))


@pytest.mark.slow
def test_negatives_and_counts_on_the_test_set(mined):
  out, stats = mined
  cid = reqa.candidate_id
  # The split hash puts all six questions on the 80 % train side and none on the 5 % side
  # (golden: a stable hash of the question id).
  assert {q.question_id for q in codecs.read_questions(out, "train-80")} == {
      "q1", "q2", "q3", "q4", "q5", "q6"}
  assert not codecs.read_questions(out, "train-5")
  by_query = {p.query: [n[2] for n in p.hard_negatives] for p in codecs.read_pairs(
      contracts.hard_negatives_pattern(out, "train-80", 1))}
  # Golden, from Lucene's BM25 ranking. q1 passes over its gold, its Paris siblings and the
  # Seine passage (which repeats its gold sentence) and lands on another river sentence.
  assert by_query == {
      "What river flows through Paris?": [
          cid("The Spree river flows through Berlin.", P_BERLIN)],
      "Which museum is in Paris?": [cid("The Seine river flows through Paris.", P_SEINE)],
      "Which long river is in northern France?": [
          cid("Paris is the capital of France.", P_PARIS)],
      "What river flows through Lyon?": [cid("The Seine river flows through Paris.", P_SEINE)],
      "What is the capital of Germany?": [cid("Paris is the capital of France.", P_PARIS)],
      "When do zebras zigzag?": [],  # its words match its own passage only
  }
  s1 = stats[1]
  assert s1[C.HARDNEG_CANDIDATES_INDEXED] == 13
  assert s1[C.HARDNEG_QUESTION_TEXTS_SEARCHED] == 6
  assert {what: s1[C.hardneg(what, "train-80")] for what in HardNeg} == {
      HardNeg.QUESTIONS: 6, HardNeg.PAIRS: 6, HardNeg.PAIRS_WITHOUT_QUESTION: 0,
      HardNeg.NEGATIVES: 5, HardNeg.QUESTIONS_SHORT: 1, HardNeg.QUESTIONS_NONE: 1,
      HardNeg.HITS_SKIPPED_GOLD: 6, HardNeg.HITS_SKIPPED_SIBLING: 10,
      HardNeg.HITS_SKIPPED_GOLD_SENTENCE: 2}
  assert all(s1[C.hardneg(what, "train-5")] == 0 for what in HardNeg)
  # k = 2: more negatives, at most 2 per pair; q6 still has none.
  s2 = stats[2]
  negatives = s2[C.hardneg(HardNeg.NEGATIVES, "train-80")]
  assert 5 < negatives <= 2 * 5
  assert s2[C.hardneg(HardNeg.QUESTIONS_NONE, "train-80")] == 1
  assert s2[C.hardneg(HardNeg.QUESTIONS_SHORT, "train-80")] >= 1
  on_disk = json.loads(open(contracts.hard_negatives_stats_path(out, 1), encoding="utf-8").read())
  assert on_disk == s1


@pytest.mark.slow
def test_files_round_trip_and_stay_apart_from_the_plain_pairs(mined):
  out, _ = mined
  plain = list(codecs.read_pairs(contracts.finetune_pattern(out, "train-80")))
  mined_pairs = list(codecs.read_pairs(contracts.hard_negatives_pattern(out, "train-80", 1)))
  # The same pairs, in order, with negatives; the plain pattern does not pick up the -hn1
  # shards next to it.
  assert [(p.query, p.doc_passage_id) for p in plain] == [
      (p.query, p.doc_passage_id) for p in mined_pairs]
  assert all(not p.hard_negatives for p in plain)
  plain_files = tio.match_files(contracts.finetune_pattern(out, "train-80"))
  assert plain_files and not any("-hn" in path for path in plain_files)
  for pair in mined_pairs:
    assert codecs.decode_pair(codecs.encode_pair(pair)) == pair


@pytest.mark.slow
def test_command_line(mined, capsys):
  out, _ = mined
  # The settings of the fixture's k = 1 run: its -hn1 pairs are replaced (others are refused).
  assert cli.main(["hardneg", "--reqa", out, "--ratios", "5,80", "--k", "1",
                   "--threads", "1"]) == 0
  table = capsys.readouterr().out
  assert "train-80" in table and "questions" in table
  assert cli.main(["hardneg", "--reqa", out, "--ratios", "3"]) == 2
  assert cli.main(["hardneg", "--reqa", out, "--k", "0"]) == 2


@pytest.mark.slow
def test_a_pairs_layout_other_than_doc_text_is_an_error(mined):
  out, _ = mined
  with pytest.raises(ValueError, match=r"not the --doc_text 'sentence' layout"):
    hardneg.run(hardneg.HardNegConfig(reqa=out, ratios=(80,), doc_text="sentence", threads=1))


def _write_vocab(path, *corpora):
  from twotower.core.contracts import RESERVED_TOKENS  # pylint: disable=import-outside-toplevel
  words = sorted({w.strip(".,?").lower() for text in corpora for w in text.split()} - {""})
  path.write_text("\n".join(list(RESERVED_TOKENS) + words + [".", ",", "?"]) + "\n",
                  encoding="utf-8")
  return str(path)


@pytest.mark.slow
def test_mined_pairs_feed_the_towers(mined, tmp_path):
  import keras  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from twotower.model import config, data, train  # pylint: disable=import-outside-toplevel
  from twotower.model.tokenizer import Tokenizer  # pylint: disable=import-outside-toplevel
  from twotower.model.two_tower import build_two_tower  # pylint: disable=import-outside-toplevel
  out, _ = mined
  files = tio.match_files(contracts.hard_negatives_pattern(out, "train-80", 2))
  pairs = list(codecs.read_pairs(files[0]))
  vocab = _write_vocab(tmp_path / "vocab.txt", P_PARIS, P_LYON, P_BERLIN, P_SEINE, P_ZEBRA,
                       *(a["title"] for a in ARTICLES),
                       *(qa["question"] for a in ARTICLES for p in a["paragraphs"]
                         for qa in p["qas"]))
  tokenizer = Tokenizer.from_file(vocab, 12, 48)
  ds = data.pair_dataset({contracts.REQA_TASK: files}, tokenizer, 4, shuffle=False,
                         repeat=False, hard_negatives=2)
  batch = next(iter(ds))
  assert batch["neg_doc"]["token_ids"].shape == (8, 48)
  assert batch["neg_doc_id"].shape == (8,)
  expected_ids = []
  for pair in pairs[:4]:
    ids = [n[2] for n in pair.hard_negatives]
    expected_ids += ids + [-1] * (2 - len(ids))
  assert batch["neg_doc_id"].numpy().tolist() == expected_ids
  # A negative is tokenised as a document; padding is an empty document.
  first = pairs[0].hard_negatives[0]
  np.testing.assert_array_equal(
      batch["neg_doc"]["token_ids"][0].numpy(),
      tokenizer.docs(tf.constant([first[0]]), tf.constant([first[1]]))["token_ids"][0].numpy())
  # One train step of small towers on it, with the gradient cache on (chunks of 2 pairs).
  keras.utils.set_random_seed(0)
  model = build_two_tower(config.ModelConfig(num_layers=1, hidden_dim=16, num_heads=2,
                                             intermediate_dim=32, embedding_dim=8,
                                             query_len=12, doc_len=48),
                          tokenizer.vocab_size, grad_cache_chunk=2)
  model.compile(optimizer=train.make_optimizer(1e-3, 2, 0.5, 0.0))
  model.optimizer.build(model.trainable_variables)  # as train.py: the step traced once
  history = model.fit(ds.take(1).repeat(), steps_per_epoch=1, verbose=0).history
  assert np.isfinite(history["loss"][0])
  # Without hard negatives the batch is what it always was.
  plain = next(iter(data.pair_dataset({contracts.REQA_TASK: files}, tokenizer, 4,
                                      shuffle=False, repeat=False)))
  assert set(plain) == {"query", "doc", "doc_id"}
