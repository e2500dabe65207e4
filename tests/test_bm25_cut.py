"""BM25 over the words the towers read (eval.bm25_cut): the cut is the Tokenizer's own, and a
run over it differs from whole-text BM25 exactly where the text was cut."""

from __future__ import annotations

import json

import pytest

from twotower.core import contracts
from twotower.testing import pairs as testing
from twotower.eval import bm25_cut
from twotower.eval import runs as runs_lib
from twotower.experiment import cells
from twotower.experiment.cell_id import CellId
from twotower.experiment.params import Bm25Params
from twotower.experiment.plan import Cell
from twotower.model.tokenizer import Tokenizer
from twotower.pipelines.reqa import builder as reqa

WORDS = testing.WORDS + ("zanzibar", "harbour")


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
  return testing.write_vocab(str(tmp_path_factory.mktemp("vocab") / contracts.VOCAB_FILE),
                             WORDS)


def test_join_glues_continuations_to_their_word():
  assert bm25_cut.join_pieces(["the", "cat", "##s", "sat", "?"]) == "the cats sat ?"
  assert bm25_cut.join_pieces(["##s", "cat", "##"]) == "##s cat ##"  # nothing to glue to
  assert bm25_cut.join_pieces([]) == ""


def test_the_cut_keeps_the_title_and_the_texts_first_pieces_as_the_tower_does(vocab):
  """doc_len 10: [CLS] title [SEP] and 6 text pieces [SEP]; query_len 5: 3 pieces. Written out
  by hand, then checked against the tower's own token ids."""
  cut = bm25_cut.TowerText(vocab, doc_pieces=10, query_pieces=5)
  title, text = "Paris", "The cats sat on the mat . w1 w2 w3"
  assert cut.docs([title], [text]) == ["paris the cats sat on the"]
  assert cut.queries(["Who wrote the cats?"]) == ["who wrote the"]
  # Accents stripped, case folded, an unspellable word ([UNK]) left out, as the tower sees it.
  assert cut.docs(["Pàris"], ["Zebra cat"]) == ["paris cat"]
  assert cut.counts.candidates == 2 and cut.counts.candidates_cut == 1
  assert cut.counts.questions == 1 and cut.counts.questions_cut == 1
  # The words' pieces are exactly the pieces the tower keeps (markers and padding aside).
  tower = Tokenizer.from_file(vocab, query_len=5, doc_len=10)
  markers = {tower.pad_id, tower.cls_id, tower.sep_id}
  words = ["w1 w20 cats", "the city on paris sat on the river mat w3 w4 w5 w6",
           "king wrote music ."]
  for t, w in zip(cut.docs(["King"] * 3, words), words):
    kept = [i for i in tower.docs(_tf(["King"]), _tf([w]))["token_ids"].numpy()[0]
            if i not in markers]
    assert tower.word_pieces(_tf([t])).numpy()[0].tolist() == kept


def test_a_text_within_the_cut_is_unchanged_but_for_the_piece_join(vocab):
  cut = bm25_cut.TowerText(vocab, doc_pieces=128, query_pieces=32)
  assert cut.docs(["King"], ["The queen wrote music ."]) == ["king the queen wrote music ."]
  assert cut.queries(["who wrote music?"]) == ["who wrote music ?"]
  assert cut.counts.candidates_cut == 0 and cut.counts.questions_cut == 0
  # A side of 0 pieces is left whole: the document is BM25's own (no title), as uncut.
  whole = bm25_cut.TowerText(vocab, doc_pieces=0, query_pieces=32)
  assert whole.docs(["King"], ["The Queen"]) == ["The Queen"]
  with pytest.raises(ValueError, match="doc_pieces=2"):
    bm25_cut.TowerText(vocab, doc_pieces=2, query_pieces=32)


def _tf(strings):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return tf.constant(strings)


LONG = "Harbour " + " ".join(f"w{i}" for i in range(140)) + " zanzibar"
ARTICLES = [
    {"title": "Harbour", "paragraphs": [{"context": f"{LONG}. The harbour is old.", "qas": [
        {"id": "far", "question": "Where is zanzibar?",
         "answers": [{"text": "zanzibar", "answer_start": LONG.index("zanzibar")}]}]}]},
    # (A title the vocabulary cannot spell: the cut row indexes titles, whole-text BM25 not.)
    {"title": "Royals", "paragraphs": [{"context": (
        "The king wrote music. The queen sat on the mat."), "qas": [
        {"id": "near", "question": "Who wrote music?",
         "answers": [{"text": "The king", "answer_start": 0}]}]}]},
]


@pytest.mark.slow  # starts the JVM and imports Pyserini (~20-40 s)
def test_the_cut_cell_misses_exactly_what_lies_past_the_cut(tmp_path, vocab):
  """A question whose only matching word sits past piece 128 of its candidate is found by
  whole-text BM25 and missed by the cut row; a question matched early ranks the same."""
  (tmp_path / "squad.json").write_text(json.dumps({"data": ARTICLES}), encoding="utf-8")
  reqa_dir = tmp_path / "reqa"
  reqa.run(reqa.ReqaConfig(out=str(reqa_dir), squad=str(tmp_path / "squad.json"),
                           ratios=(5,)))
  vocab_dir = tmp_path / "vocab"
  vocab_dir.mkdir()
  (vocab_dir / contracts.VOCAB_FILE).write_text(open(vocab, encoding="utf-8").read(),
                                                encoding="utf-8")
  dirs = {"reqa/squad": str(reqa_dir), "vocab/wiki": str(vocab_dir)}
  ctx = cells.Context(work=str(tmp_path), dirs=dirs, done=dict)
  scored = {"splits": (contracts.ALL_QUESTIONS,), "doc_text": "sentence", "golds": ("pair",)}
  whole = Cell(CellId("bm25", "squad"), Bm25Params(system="bm25", **scored),
               {"reqa": "reqa/squad"}, "k1")
  cut = Cell(CellId("bm25", "squad", system="bm25-cut"),
             Bm25Params(system="bm25-cut", doc_pieces=128, query_pieces=32, **scored),
             {"reqa": "reqa/squad", "vocab": "vocab/wiki"}, "k2")
  done = {c.name: cells._bm25(c, ctx, str(tmp_path / c.dirname)) for c in (whole, cut)}
  runs = {name: runs_lib.read_run(d["run_file"]) for name, d in done.items()}
  candidates = reqa_candidates(reqa_dir)
  gold = {"far": candidates[LONG + "."], "near": candidates["The king wrote music."]}
  assert runs["bm25/squad"]["far"].candidate_ids[0] == gold["far"]
  # Nothing the cut row indexed holds the word: the question has no hit at all.
  assert "far" not in runs["bm25/squad/bm25-cut"]
  assert (runs["bm25/squad"]["near"].candidate_ids
          == runs["bm25/squad/bm25-cut"]["near"].candidate_ids == (gold["near"],))
  recall = {name: d["records"][0]["metrics"]["R@1"] for name, d in done.items()}
  assert recall == {"bm25/squad": 1.0, "bm25/squad/bm25-cut": 0.5}
  assert [r["system"] for r in done["bm25/squad/bm25-cut"]["records"]] == ["bm25-cut"]
  assert "cut" not in done["bm25/squad"]
  counts = done["bm25/squad/bm25-cut"]["cut"]
  assert (counts["candidates"], counts["candidates_cut"]) == (4, 1)
  assert (counts["questions"], counts["questions_cut"]) == (2, 0)


def reqa_candidates(reqa_dir) -> dict[str, int]:
  """candidate sentence -> candidate id."""
  from twotower.core.contracts import codecs  # pylint: disable=import-outside-toplevel
  return {r["sentence"]: r["candidate_id"]
          for r in codecs.read_candidates(str(reqa_dir), ["candidate_id", "sentence"])}


def test_the_cut_flags_need_the_towers_vocabulary(capsys):
  from twotower.commands import bm25 as bm25_cmd  # pylint: disable=import-outside-toplevel
  config = bm25_cmd.parse(["--reqa=r", "--out=o", "--vocab=v.txt", "--doc_pieces=128",
                           "--query_pieces=32"])
  assert (config.vocab, config.doc_pieces, config.query_pieces, config.cut) == (
      "v.txt", 128, 32, True)
  assert not bm25_cmd.parse(["--reqa=r", "--out=o"]).cut
  for bad in (["--doc_pieces=128"], ["--vocab=v.txt", "--query_pieces=-1"]):
    with pytest.raises(SystemExit) as exit_info:
      bm25_cmd.parse(["--reqa=r", "--out=o", *bad])
    assert exit_info.value.code == 2
  assert "give their --vocab" in capsys.readouterr().err
