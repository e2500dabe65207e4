"""A tower exported as ONNX (`twotower export-hf`, `twotower bundle --onnx`), run with
onnxruntime and `tokenizers` alone: no TensorFlow, no PyTorch.

    FOLDER/model.onnx      input_ids, attention_mask int64 [batch, length] -> embedding
                           float32 [batch, d] (BertModel, the [CLS] state, the projection)
    FOLDER/tokenizer.json  the in-graph tokenizer's normalisation and WordPiece, with
                           `[CLS] ... [SEP]` and the cut to the tower's length built in
    FOLDER/tower.json      layout ("query" or "document"), max_length, embedding_dim, and
                           vocab_sha256: tokenizer.json's vocabulary is checked against it

    tower = OnnxTower("DIR/onnx_towers/query")
    tower.encode(["who wrote hamlet?"])                       # float32 [1, d]
    OnnxTower("DIR/onnx_towers/document").encode_documents(["Hamlet"], ["Hamlet is ..."])

A document is one string, `title + DOC_JOIN + text`: the tokenizer matches `[SEP]` as the
special token, so the ids are `[CLS] title [SEP] text [SEP]`, cut from the end.
"""

from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
TOWER_FILE = "tower.json"
FILES = (MODEL_FILE, TOKENIZER_FILE, TOWER_FILE)
FORMAT = "twotower-onnx-tower"
#: What joins a title and a text into the document tower's one input string.
DOC_JOIN = " [SEP] "


def is_tower(folder: str) -> bool:
  """Whether `folder` holds an ONNX tower (every file of FILES)."""
  return all(os.path.isfile(os.path.join(folder, name)) for name in FILES)


def document_string(title: str, text: str) -> str:
  return f"{title or ''}{DOC_JOIN}{text or ''}"


def _check_vocabulary(folder: str, tokenizer, want: str | None) -> None:
  """Refuses a tokenizer.json whose vocabulary is not the one tower.json records (a tokenizer
  of another model, or two tokens' ids swapped, tokenizes without an error and embeds
  wrongly). Towers exported before tower.json recorded it are not checked."""
  if not want:
    return
  from twotower.model import hf_tokenizer  # pylint: disable=import-outside-toplevel
  vocab = tokenizer.get_vocab(with_added_tokens=True)
  tokens = sorted(vocab, key=vocab.__getitem__)
  if sorted(vocab.values()) != list(range(len(tokens))):
    raise ValueError(f"{folder}/{TOKENIZER_FILE}: its vocabulary's ids are not "
                     f"0..{len(tokens) - 1} (a damaged tokenizer)")
  got = hf_tokenizer.vocab_digest(tokens)
  if got != want:
    raise ValueError(f"{folder}/{TOKENIZER_FILE}: its vocabulary (sha256 {got[:12]}) is not the "
                     f"one {TOWER_FILE} records ({want[:12]}): a tokenizer of another model, or "
                     "a changed one; export the tower again")


class OnnxTower:
  """One tower: strings -> embeddings float32 [n, d], with onnxruntime on the CPU."""

  def __init__(self, folder: str, threads: int = 0):
    import onnxruntime  # pylint: disable=import-outside-toplevel
    from tokenizers import Tokenizer  # pylint: disable=import-outside-toplevel
    if not is_tower(folder):
      missing = [n for n in FILES if not os.path.isfile(os.path.join(folder, n))]
      raise FileNotFoundError(f"{folder}: not an ONNX tower (missing {', '.join(missing)})")
    with open(os.path.join(folder, TOWER_FILE), encoding="utf-8") as f:
      self.spec = json.load(f)
    if self.spec.get("format") != FORMAT:
      raise ValueError(f"{folder}/{TOWER_FILE}: format {self.spec.get('format')!r}, "
                       f"expected {FORMAT!r}")
    self.layout = self.spec["layout"]
    self.max_length = int(self.spec["max_length"])
    self.embedding_dim = int(self.spec["embedding_dim"])
    self.pad_id = int(self.spec.get("pad_id", 0))
    self.tokenizer = Tokenizer.from_file(os.path.join(folder, TOKENIZER_FILE))
    _check_vocabulary(folder, self.tokenizer, self.spec.get("vocab_sha256"))
    self.tokenizer.enable_truncation(max_length=self.max_length)
    options = onnxruntime.SessionOptions()
    if threads:
      options.intra_op_num_threads = int(threads)
    # Idle threads sleep instead of spinning: on a machine whose cores the caller shares
    # (a server and its clients on 2 cores), spinning threads steal them. One query, 2
    # threads, under load: p90 0.71 ms without spinning, 10.1 ms with it (p50 0.59 / 0.45).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    self.session = onnxruntime.InferenceSession(os.path.join(folder, MODEL_FILE), options,
                                                providers=["CPUExecutionProvider"])

  def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
    """The ids of each string, `[CLS] ... [SEP]`, unpadded."""
    return [e.ids for e in self.tokenizer.encode_batch(list(texts))]

  def encode(self, texts: Sequence[str], batch_size: int = 256) -> np.ndarray:
    """Strings (queries, or `document_string`s) -> float32 [n, d]."""
    out = [np.zeros((0, self.embedding_dim), np.float32)]
    for start in range(0, len(texts), batch_size):
      rows = self.token_ids(texts[start:start + batch_size])
      width = max(len(r) for r in rows)
      ids = np.full((len(rows), width), self.pad_id, np.int64)
      mask = np.zeros((len(rows), width), np.int64)
      for i, r in enumerate(rows):
        ids[i, :len(r)], mask[i, :len(r)] = r, 1
      (emb,) = self.session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})
      out.append(np.asarray(emb, np.float32))
    return np.concatenate(out)

  def encode_documents(self, titles: Sequence[str], texts: Sequence[str],
                       batch_size: int = 256) -> np.ndarray:
    return self.encode([document_string(t, x) for t, x in zip(titles, texts)], batch_size)
