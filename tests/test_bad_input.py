"""Bad input at every stage: the issue-20 table. Each case runs `twotower.cli.main` on real
files the test writes and checks the exit code (1 bad input, 2 usage) and the one line on
stderr: no traceback, the file named where there is one."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twotower import cli, contracts
from twotower.pipelines import reqa

ARTICLES = [
    {"title": "Volcano", "paragraphs": [{"context": (
        "A volcano is a rupture in the crust of a planet. Lava erupts from magma chambers. "
        "Mount Etna is an active stratovolcano in Sicily."), "qas": [
        {"id": "v1", "question": "Where is Mount Etna?",
         "answers": [{"text": "Sicily", "answer_start": 106}]},
        {"id": "v2", "question": "What erupts from magma chambers?",
         "answers": [{"text": "Lava", "answer_start": 49}]}]}]},
    {"title": "Bread", "paragraphs": [{"context": (
        "Bread is baked from a dough of flour and water. Yeast makes the dough rise."), "qas": [
        {"id": "b1", "question": "What makes dough rise?",
         "answers": [{"text": "Yeast", "answer_start": 48}]}]}]},
]
D = 8


def write_embeddings(directory, ids, id_type=pa.int64(), seed=0):
  directory.mkdir(parents=True, exist_ok=True)
  x = np.random.default_rng(seed).normal(size=(len(ids), D)).astype(np.float32)
  emb = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel(), pa.float32()), D)
  pq.write_table(pa.Table.from_arrays([pa.array(ids, id_type), emb],
                                      schema=contracts.embedding_schema(D, id_type)),
                 directory / "embeddings-00000-of-00001.parquet")
  return directory


@pytest.fixture(scope="module")
def work(tmp_path_factory):
  """A tiny ReQA dir (one real `reqa` run), candidate and question embeddings, a flat index,
  and a SQuAD file with a byte that is not UTF-8."""
  root = tmp_path_factory.mktemp("bad_input")
  squad = root / "squad.json"
  squad.write_text(json.dumps({"data": ARTICLES}), encoding="utf-8")
  reqa.run(reqa.ReqaConfig(out=str(root / "reqa"), squad=str(squad)))
  raw = squad.read_bytes()
  (root / "latin1.json").write_bytes(raw[:40] + b"\xe9" + raw[41:])
  cands = [r["candidate_id"] for r in pq.read_table(root / "reqa" / "candidates.parquet")
           .to_pylist()]
  questions = [r["question_id"] for r in pq.read_table(
      root / "reqa" / "questions-all.parquet").to_pylist()]
  write_embeddings(root / "emb", cands)
  write_embeddings(root / "qemb", questions, pa.string(), seed=1)
  assert cli.main(["index", "--embeddings", str(root / "emb"),
                   "--out", str(root / "index.faiss")]) == 0
  return root


def run_cli(capsys, args):
  code = cli.main([str(a) for a in args])
  err = capsys.readouterr().err.strip().splitlines()
  return code, err


def one_line(err):
  """The error line; there is nothing else on stderr but argparse's usage lines."""
  assert not any("Traceback" in line for line in err), err
  return err[-1]


# (case id, argv with {w} for the work dir, exit code, text the error line must hold).
CASES = [
    ("search-k-0", ["search", "--index", "{w}/index.faiss", "--queries", "{w}/qemb",
                    "--out", "{w}/o/run.trec", "--k", "0"], 2, "--k: must be >= 1, got 0"),
    ("bm25-hits-0", ["bm25", "--reqa", "{w}/reqa", "--out", "{w}/o/bm25", "--hits", "0"], 2,
     "--hits: must be >= 1, got 0"),
    ("evaluate-ks-0", ["evaluate", "--reqa", "{w}/reqa", "--run", "{w}/none.trec", "--out",
                       "{w}/o/ev", "--ks", "1,0"], 2, "--ks: must be >= 1, got 0"),
    ("fuse-depth-0", ["fuse", "--run", "{w}/a.trec", "{w}/b.trec", "--out", "{w}/o/f.trec",
                      "--weight", "0.5", "--depth", "0"], 2, "--depth: must be >= 1, got 0"),
    ("squad-not-utf8", ["reqa", "--squad", "{w}/latin1.json", "--out", "{w}/o/reqa"], 1,
     "latin1.json: not UTF-8 text (byte 40"),
    ("vocab-of-candidates", ["vocab", "--passages", "{w}/reqa/candidates.parquet", "--out",
                             "{w}/o/vocab.txt"], 1,
     "candidates.parquet: expected passages (columns page_id, passage_id, text), found a "
     "candidates file"),
    ("search-missing-index", ["search", "--index", "{w}/none.faiss", "--queries", "{w}/qemb",
                              "--out", "{w}/o/run.trec"], 1, "none.faiss"),
]


@pytest.mark.parametrize("args, code, message", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input_is_one_line(work, capsys, args, code, message):
  got, err = run_cli(capsys, [a.format(w=work) for a in args])
  line = one_line(err)
  assert got == code, err
  assert line.startswith(f"twotower {args[0]}: error:"), line
  assert message in line, line
  assert not (work / "o" / "reqa").exists()  # a failed reqa writes nothing


def test_missing_vocab_is_one_line_not_tensorflow(work, capsys):
  code, err = run_cli(capsys, ["finetune", "--config", "tiny", "--init", "none", "--reqa",
                               work / "reqa", "--out", work / "o" / "ft", "--vocab",
                               work / "no-vocab.txt", "--steps", "1", "--progress", "none"])
  assert code == 1
  assert one_line(err) == (f"twotower finetune: error: {work}/no-vocab.txt: no such "
                           "vocabulary file (`twotower vocab` writes one)")


def test_library_errors_are_one_line():
  """TensorFlow's and Java's exceptions: the first line of the message, by class name."""
  tf = pytest.importorskip("tensorflow")
  e = tf.errors.NotFoundError(None, None, "x.txt; No such file or directory\n  at C++ frame")
  assert cli.error_line(e) == "x.txt; No such file or directory"
  assert cli._library_error(e)  # pylint: disable=protected-access
  assert not cli._library_error(KeyError("a bug"))  # pylint: disable=protected-access
