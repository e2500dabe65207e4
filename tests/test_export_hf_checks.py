"""`twotower export-hf` checks what it copies against the model: a vocab.txt or config.yaml
that is not the model's, and a damaged two_tower.keras, are refused in one line naming the
file (and the first line that differs), on copies of a tiny trained run's export/."""

from __future__ import annotations

# pylint: disable=redefined-outer-name  (pytest fixtures: `runs`, `model`, `vocab`)

import hashlib
import json
import os
import re
import shutil
import string
import struct
import zipfile

import keras
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# The module fixture of two tiny trained runs (separate and shared towers), reused.
from test_export_hf import runs  # noqa: F401  pylint: disable=unused-import
from twotower import cli
from twotower.core import contracts
from twotower.model import hf_run
from twotower.model import hf_tokenizer
from twotower.model import run_checks
from twotower.model import two_tower  # noqa: F401  pylint: disable=unused-import  (.keras classes)

#: Same-size corruptions: one ASCII character for another keeps the file's bytes.
CHARACTERS = string.ascii_letters + string.digits + string.punctuation + " "


def _copy(run: str, tmp_path) -> str:
  """A copy of the run's export/ (a run dir that export-hf reads), free to be damaged."""
  copy = tmp_path / "run"
  shutil.copytree(contracts.export_dir(run), contracts.export_dir(str(copy)))
  return str(copy)


def _lines(path: str) -> list[str]:
  with open(path, encoding="utf-8") as f:
    return f.read().splitlines()


def _write_lines(path: str, lines: list[str]) -> None:
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")


def _export(run: str, tmp_path, capsys) -> tuple[int, str]:
  """export-hf without ONNX; (exit status, stderr)."""
  capsys.readouterr()
  status = cli.main(["export-hf", run, "--out", str(tmp_path / "hf"), "--no_onnx"])
  return status, capsys.readouterr().err


def _one_line_error(err: str) -> str:
  lines = [l for l in err.splitlines() if l.strip()]
  assert len(lines) == 1 and "Traceback" not in err, err
  return lines[0]


@pytest.fixture(scope="module")
def model(runs):
  """The separate-towers run's own vocabulary (run_checks.ModelVocab), loaded once."""
  export = contracts.export_dir(runs["separate"])
  keras_file = os.path.join(export, contracts.KERAS_FILE)
  towers = keras.saving.load_model(keras_file, compile=False)
  return run_checks.model_vocab(export, towers.query_tower, towers.doc_tower,
                                run_checks.built_with(keras_file))


@pytest.fixture(scope="module")
def vocab(runs):
  return _lines(os.path.join(contracts.export_dir(runs["separate"]), contracts.VOCAB_FILE))


# ---------------------------------------------------------------------------------------------
# The vocabulary.
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_intact_export_passes_and_its_card_carries_the_vocabulary_digest(runs, tmp_path,
                                                                            capsys):
  run = _copy(runs["shared"], tmp_path)
  status, err = _export(run, tmp_path, capsys)
  assert status == 0, err
  with open(os.path.join(contracts.export_dir(run), contracts.VOCAB_FILE), "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()  # the digest of the content, as written
  with open(tmp_path / "hf" / "README.md", encoding="utf-8") as f:
    assert f"`{digest}`" in f.read()


@pytest.mark.slow
def test_an_onnx_tower_refuses_a_tokenizer_of_another_vocabulary(runs, tmp_path):
  """The ONNX tower checks its tokenizer.json against the digest its tower.json records: two
  tokens' ids swapped load and tokenize without an error, and embed wrongly."""
  from twotower.model import export_hf, onnx_encoder
  tower = str(tmp_path / "query")
  export_hf.write_query_tower(runs["separate"], tower)
  assert onnx_encoder.OnnxTower(tower).encode(["w1 w2"]).shape[0] == 1
  tokenizer_json = os.path.join(tower, onnx_encoder.TOKENIZER_FILE)
  with open(tokenizer_json, encoding="utf-8") as f:
    spec = json.load(f)
  vocab = spec["model"]["vocab"]
  vocab["w1"], vocab["w2"] = vocab["w2"], vocab["w1"]
  with open(tokenizer_json, "w", encoding="utf-8") as f:
    json.dump(spec, f)
  with pytest.raises(ValueError, match=r"tokenizer.json: its vocabulary \(sha256 \w+\) is not "
                                       r"the one tower.json records"):
    onnx_encoder.OnnxTower(tower)


@pytest.mark.slow
def test_two_swapped_vocabulary_lines_are_refused_naming_the_first(runs, tmp_path, capsys):
  """The issue: w1 and w2 swapped in vocab.txt exported with exit 0, the sentence-transformers
  model differing from the SavedModel."""
  run = _copy(runs["separate"], tmp_path)
  path = os.path.join(contracts.export_dir(run), contracts.VOCAB_FILE)
  lines = _lines(path)
  i, j = lines.index("w1"), lines.index("w2")
  lines[i], lines[j] = lines[j], lines[i]
  _write_lines(path, lines)
  status, err = _export(run, tmp_path, capsys)
  assert status == 1
  assert _one_line_error(err) == (f"twotower export-hf: error: {path} line {i + 1} is 'w2', "
                                  "the model's vocabulary has 'w1'")
  assert not os.path.exists(tmp_path / "hf")


@pytest.mark.parametrize("a, b, line, message", [
    ("[CLS]", "[SEP]", 3, "line 3 is '[SEP]', the model's vocabulary has '[CLS]'"),
    ("[SEP]", "[MASK]", 4, "line 4 is '[MASK]', the model's vocabulary has '[SEP]'"),
    ("[UNK]", "[CLS]", 2, "line 2 is '[CLS]', the model's vocabulary has '[UNK]'"),
    ("##s", "##ed", 0, "is '##ed', the model's vocabulary has '##s'"),
    ("[CLS]", "w5", 3, "line 3 is 'w5', which the model's vocabulary has on line 11"),
])
def test_swapped_special_and_suffix_tokens_are_refused(model, vocab, tmp_path, a, b, line,
                                                       message):
  """[CLS], [SEP] and [MASK] are not in the compiled WordPiece (a token with punctuation
  inside): their ids are asked of the SavedModel's embeddings; "##x" through a word px."""
  tokens = list(vocab)
  i, j = tokens.index(a), tokens.index(b)
  tokens[i], tokens[j] = tokens[j], tokens[i]
  path = str(tmp_path / "vocab.txt")
  _write_lines(path, tokens)
  with pytest.raises(ValueError) as refused:
    run_checks.check_vocab(path, model)
  assert str(refused.value).startswith(f"{path} line {line or min(i, j) + 1} ")
  assert message in str(refused.value)


def test_a_mixed_precision_export_passes(runs, tmp_path_factory):
  """bfloat16 towers: the SavedModel's graph and the eager towers round differently (1e-3),
  which must not read as another vocabulary."""
  from twotower.model import config, pretrain  # pylint: disable=import-outside-toplevel
  root = tmp_path_factory.mktemp("bf16")
  data = os.path.dirname(runs["separate"])  # the runs' vocabulary and pairs
  cfg = config.load("tiny", ["trainer.steps=2", "trainer.mixed_precision=true"])
  try:
    pretrain.run(pretrain.PretrainConfig(training=cfg, out=str(root / "run"),
                                         vocab=os.path.join(data, "vocab.txt"), pairs=data,
                                         progress="none"))
  finally:
    keras.mixed_precision.set_global_policy("float32")  # training set it for the process
  spec = hf_run.load_run(str(root / "run"))
  assert spec.query_tower.compute_dtype == "bfloat16"
  assert len(spec.vocab) == spec.query_tower.backbone.vocab_size


def test_a_vocabulary_of_another_size_is_refused(model, vocab, tmp_path):
  path = str(tmp_path / "vocab.txt")
  _write_lines(path, vocab + ["extra"])
  with pytest.raises(ValueError, match=re.escape(
      f"{path}: {len(vocab) + 1} tokens, the model's vocabulary has {len(vocab)} (the token "
      "embeddings of ")):
    run_checks.check_vocab(path, model)


def test_the_models_own_vocabulary_passes_with_its_content_digest(model, vocab, runs,
                                                                  tmp_path):
  path = os.path.join(contracts.export_dir(runs["separate"]), contracts.VOCAB_FILE)
  assert run_checks.check_vocab(path, model) == vocab
  with open(path, "rb") as f:
    assert hf_tokenizer.vocab_digest(vocab) == hashlib.sha256(f.read()).hexdigest()
  moved = str(tmp_path / "any-name.txt")  # a digest of the content, not of the name
  shutil.copy(path, moved)
  assert (hf_tokenizer.vocab_digest(run_checks.check_vocab(moved, model))
          == hf_tokenizer.vocab_digest(vocab))


@st.composite
def _corruption(draw, vocab: list[str]):
  """(kind, line index, the corrupted tokens): two lines swapped, or one character of a line
  changed for another (the file keeps its size)."""
  tokens = list(vocab)
  if draw(st.booleans()):
    i = draw(st.integers(0, len(tokens) - 2))
    j = draw(st.integers(i + 1, len(tokens) - 1))
    tokens[i], tokens[j] = tokens[j], tokens[i]
    return "swap", i, tokens
  i = draw(st.integers(0, len(tokens) - 1))
  k = draw(st.integers(0, len(tokens[i]) - 1))
  c = draw(st.sampled_from(CHARACTERS).filter(lambda c: c != tokens[i][k]))
  tokens[i] = tokens[i][:k] + c + tokens[i][k + 1:]
  return "change", i, tokens


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
  return str(tmp_path_factory.mktemp("vocab_corruptions") / "vocab.txt")


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_every_same_size_corruption_of_the_vocabulary_is_refused(model, vocab, scratch, data):
  kind, i, tokens = data.draw(_corruption(vocab))
  _write_lines(scratch, tokens)
  assert os.path.getsize(scratch) == len("\n".join(vocab) + "\n")
  with pytest.raises(ValueError) as refused:
    run_checks.check_vocab(scratch, model)
  message = str(refused.value)
  assert message.startswith(scratch) and "\n" not in message
  if kind == "swap":  # the first of the two lines is named (read_vocab's too: line 1, [PAD])
    assert f"line {i + 1} " in message, message
  else:  # the changed line, unless read_vocab refuses a duplicate or a lost special token
    assert (f"line {i + 1} " in message or "duplicate tokens" in message
            or "lacks the special tokens" in message), message


# ---------------------------------------------------------------------------------------------
# The config and the .keras file.
# ---------------------------------------------------------------------------------------------


def _edit_config(run: str, old: str, new: str) -> tuple[str, int]:
  """Replaces a line of the copy's config.yaml; (its path, the line's number)."""
  path = os.path.join(contracts.export_dir(run), contracts.RUN_CONFIG_FILE)
  lines = _lines(path)
  number = lines.index(old) + 1
  lines[number - 1] = new
  _write_lines(path, lines)
  return path, number


@pytest.mark.parametrize("old, new, message", [
    ("  query_len: 12", "  query_len: 16", "model.query_len is 16, the model in "
     "two_tower.keras was built with 12"),
    ("  doc_len: 24", "  doc_len: 20", "model.doc_len is 20, the model in two_tower.keras "
     "was built with 24"),
    ("  shared_towers: false", "  shared_towers: true", "model.shared_towers is True, the "
     "model in two_tower.keras was built with False"),
    ("  hidden_dim: 32", "  hidden_dim: 64", "model.hidden_dim is 64, the model in "
     "two_tower.keras was built with 32"),
])
def test_a_config_other_than_the_models_is_refused(runs, tmp_path, old, new, message):
  run = _copy(runs["separate"], tmp_path)
  path, number = _edit_config(run, old, new)
  with pytest.raises(ValueError) as refused:
    hf_run.load_run(run)
  assert str(refused.value) == f"{path} line {number}: {message}"


def test_a_changed_config_length_is_refused_by_the_cli(runs, tmp_path, capsys):
  run = _copy(runs["separate"], tmp_path)
  path, number = _edit_config(run, "  query_len: 12", "  query_len: 32")
  status, err = _export(run, tmp_path, capsys)
  assert status == 1
  assert _one_line_error(err) == (f"twotower export-hf: error: {path} line {number}: "
                                  "model.query_len is 32, the model in two_tower.keras was "
                                  "built with 12")


def test_a_truncated_keras_file_is_named_damaged_not_missing(runs, tmp_path, capsys):
  run = _copy(runs["separate"], tmp_path)
  path = os.path.join(contracts.export_dir(run), contracts.KERAS_FILE)
  with open(path, "rb") as f:
    data = f.read()
  with open(path, "wb") as f:
    f.write(data[:len(data) // 2])
  status, err = _export(run, tmp_path, capsys)
  assert status == 1
  line = _one_line_error(err)
  assert line.startswith(f"twotower export-hf: error: {path}: damaged or truncated, not a "
                         "whole .keras zip archive"), line
  assert "not found" not in line.lower()
  # bundle --onnx reads the towers through the same load_run
  with pytest.raises(ValueError, match="damaged or truncated"):
    hf_run.load_run(run)


def test_a_keras_file_with_a_damaged_member_is_refused(runs, tmp_path):
  run = _copy(runs["separate"], tmp_path)
  path = os.path.join(contracts.export_dir(run), contracts.KERAS_FILE)
  with zipfile.ZipFile(path) as archive:
    member = archive.getinfo("model.weights.h5")
  with open(path, "r+b") as f:  # one byte of the weights, inside the archive
    f.seek(member.header_offset + 26)  # the local header's name and extra field lengths
    name, extra = struct.unpack("<HH", f.read(4))
    f.seek(member.header_offset + 30 + name + extra + member.compress_size // 2)
    byte = f.read(1)
    f.seek(-1, os.SEEK_CUR)
    f.write(bytes([byte[0] ^ 0xFF]))
  with pytest.raises(ValueError, match="^" + re.escape(
      f"{path}: damaged: its member model.weights.h5 fails its CRC check")):
    hf_run.load_run(run)
