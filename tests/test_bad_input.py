"""Bad input at every stage: the issue-20 table. Each case runs `twotower.cli.main` on real
files the test writes and checks the exit code (1 bad input, 2 usage) and the one line on
stderr: no traceback, the file named where there is one."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twotower import cli
from twotower.pipelines.reqa import builder as reqa
from outputs_fixtures import write_embeddings
from reqa_fixtures import ARTICLES

@pytest.fixture(scope="module")
def work(tmp_path_factory):
  """A tiny ReQA dir (one real `reqa` run), candidate and question embeddings, a flat index,
  and a SQuAD file with a byte that is not UTF-8."""
  root = tmp_path_factory.mktemp("bad_input")
  squad = root / "squad.json"
  squad.write_text(json.dumps({"data": ARTICLES}), encoding="utf-8")
  reqa.run(reqa.ReqaConfig(out=str(root / "reqa"), squad=str(squad),
                           validation_percent=50))
  raw = squad.read_bytes()
  (root / "latin1.json").write_bytes(raw[:40] + b"\xe9" + raw[41:])
  cands = [r["candidate_id"] for r in pq.read_table(root / "reqa" / "candidates.parquet")
           .to_pylist()]
  questions = [r["question_id"] for r in pq.read_table(
      root / "reqa" / "questions-all.parquet").to_pylist()]
  write_embeddings(root / "emb", cands)
  write_embeddings(root / "qemb", questions, pa.string(), seed=1)
  write_embeddings(root / "emb0", [])
  # A run over another candidate pool, and one of other questions (TREC).
  (root / "other-pool.trec").write_text(f"{questions[0]} Q0 999 1 1.0 x\n", encoding="utf-8")
  (root / "other-questions.trec").write_text(f"nq-1 Q0 {cands[0]} 1 1.0 x\n",
                                             encoding="utf-8")
  (root / "all.trec").write_text("".join(f"{q} Q0 {cands[0]} 1 1.0 x\n" for q in questions),
                                 encoding="utf-8")
  # Pairs of a dump that yielded none: the shard is there, and empty.
  (root / "pairs" / "pairs" / "ict").mkdir(parents=True)
  (root / "pairs" / "pairs" / "ict" / "train-00000-of-00001.tfrecord").write_bytes(b"")
  # Hand-written vectors: no vectors.json names their model, so they are taken unchecked.
  assert cli.main(["index", "--embeddings", str(root / "emb"),
                   "--out", str(root / "index.faiss"), "--allow_unchecked_vectors"]) == 0
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
    ("index-0-vectors", ["index", "--embeddings", "{w}/emb0", "--out", "{w}/o/i.faiss",
                         "--allow_unchecked_vectors"], 1,
     "emb0: 1 embedding shard(s) hold 0 vectors"),
    ("index-unrecorded-vectors", ["index", "--embeddings", "{w}/emb", "--out", "{w}/o/i.faiss"],
     1, "emb: no vectors record names the model of its vectors (made before twotower recorded "
        "models, or by another tool): their model cannot be checked; give "
        "--allow_unchecked_vectors to use them unchecked"),
    ("search-unrecorded-vectors", ["search", "--index", "{w}/index.faiss", "--queries",
                                   "{w}/qemb", "--out", "{w}/o/run.trec"], 1,
     "index.faiss: no vectors record names the model"),
    ("index-of-candidates", ["index", "--embeddings", "{w}/reqa/candidates.parquet", "--out",
                             "{w}/o/i.faiss"], 1,
     "expected embeddings (columns id, embedding), found a candidates file"),
    ("embed-questions-of-candidates", ["embed", "--model", "{w}/no-model", "--questions",
                                       "{w}/reqa/candidates.parquet", "--out", "{w}/o/e"], 1,
     "candidates.parquet: expected questions (columns question_id, question), found a "
     "candidates file"),
    ("embed-candidates-of-questions", ["embed", "--model", "{w}/no-model", "--candidates",
                                       "{w}/reqa/questions-all.parquet", "--out", "{w}/o/e"],
     1, "questions-all.parquet: expected candidates"),
    ("evaluate-other-pool", ["evaluate", "--reqa", "{w}/reqa", "--run", "{w}/other-pool.trec",
                             "--out", "{w}/o/ev"], 1,
     "other-pool.trec: 1 of 1 ranked candidate ids (e.g. 999) are not in the 24 candidates"),
    ("evaluate-other-questions", ["evaluate", "--reqa", "{w}/reqa", "--run",
                                  "{w}/other-questions.trec", "--out", "{w}/o/ev"], 1,
     "other-questions.trec: ranks none of the 12 all questions"),
    ("fuse-tune-split-not-covered", ["fuse", "--run", "{w}/all.trec",
                                     "{w}/other-questions.trec", "--out", "{w}/o/f.trec",
                                     "--reqa", "{w}/reqa", "--tune_split", "validation-80"],
     1, "other-questions.trec: ranks none of the 8 validation-80 questions"),
    ("fuse-tune-split-empty", ["fuse", "--run", "{w}/all.trec", "{w}/all.trec", "--out",
                               "{w}/o/f.trec", "--reqa", "{w}/reqa", "--tune_split",
                               "validation-5"], 1,
     "validation-5 has no questions to tune the weight on"),
    ("pretrain-empty-pairs", ["pretrain", "--config", "tiny", "--pairs", "{w}/pairs",
                              "--tasks", "ict", "--vocab", "{w}/no-vocab.txt", "--out",
                              "{w}/o/pt", "--steps", "1"], 1,
     "no ict train pairs in {w}/pairs/pairs/ict/train-00000-of-00001.tfrecord: every shard "
     "is empty"),
    ("finetune-empty-split", ["finetune", "--config", "tiny", "--init", "none", "--reqa",
                              "{w}/reqa", "--split", "5", "--vocab", "{w}/no-vocab.txt",
                              "--out", "{w}/o/ft", "--steps", "1"], 1,
     "no train-5 fine-tuning pairs in"),
    ("finetune-steps-0", ["finetune", "--config", "tiny", "--init", "none", "--reqa",
                          "{w}/reqa", "--vocab", "{w}/no-vocab.txt", "--out", "{w}/o/ft",
                          "--steps", "0"], 2,
     "trainer.finetune_steps is 0: give --steps >= 1, or --allow_untrained"),
    ("vocab-out-is-a-folder", ["vocab", "--passages", "{w}/reqa", "--out", "{w}/reqa"], 1,
     "reqa: is a directory; --out is the vocabulary file"),
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
  assert message.format(w=work) in line, line
  assert not (work / "o").exists()  # a failed stage writes nothing (no output, no temp file)
  assert not list(work.glob(".tmp-*")) and not list(work.glob("*.tmp-*"))


def test_run_files_go_into_folders_made_for_them(work, capsys):
  """The guides' `--out runs/dense/run.parquet` (and fuse's) work without a mkdir first."""
  out = work / "new" / "runs" / "dense" / "run.parquet"
  assert run_cli(capsys, ["search", "--index", work / "index.faiss", "--queries",
                          work / "qemb", "--out", out, "--k", "3",
                          "--allow_unchecked_vectors"])[0] == 0
  fused = work / "new" / "runs" / "hybrid" / "run.parquet"
  assert run_cli(capsys, ["fuse", "--run", work / "all.trec", out, "--out", fused,
                          "--weight", "0.5"])[0] == 0
  assert out.is_file() and fused.is_file()
  assert not [p for p in (work / "new").rglob(".tmp-*")]


def test_missing_vocab_is_one_line_not_tensorflow(work, capsys):
  code, err = run_cli(capsys, ["finetune", "--config", "tiny", "--init", "none", "--reqa",
                               work / "reqa", "--split", "80", "--out", work / "o" / "ft", "--vocab",
                               work / "no-vocab.txt", "--steps", "1", "--progress", "none",
                               "--no_recall"])
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
