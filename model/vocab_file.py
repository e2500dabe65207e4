"""The WordPiece vocabulary file (`twotower vocab`): one token per line, `[PAD]` on line 0
(id 0 is padding), the other `contracts.RESERVED_TOKENS` somewhere. Read without TensorFlow,
for the in-graph tokenizer (tokenizer.py) and the JAX trainer's (np_tokenizer.py) alike.
"""

from __future__ import annotations

import os

from twotower.core import files as tio
from twotower.core.contracts import PAD, RESERVED_TOKENS


def _read_bytes(path: str) -> bytes | None:
  """The file's bytes; None where there is no such file (a folder is none either)."""
  if tio.is_local(path):
    if not os.path.isfile(path):
      return None
    with open(path, "rb") as f:
      return f.read()
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  if not FileSystems.exists(path):
    return None
  with FileSystems.open(path) as f:
    return f.read()


def read_vocab(path: str) -> list[str]:
  """Tokens of a WordPiece vocabulary file, one per line, checked for the special tokens."""
  data = _read_bytes(path)
  if data is None:
    raise FileNotFoundError(f"{path}: no such vocabulary file (`twotower vocab` writes one)")
  if b"\0" in data[:4096]:
    raise ValueError(f"{path}: a binary file, not a vocabulary (one UTF-8 token per line, "
                     "as `twotower vocab` writes)")
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    line = data.count(b"\n", 0, e.start) + 1
    raise ValueError(f"{path}:{line}: not UTF-8 ({e.reason}); a vocabulary is one UTF-8 "
                     "token per line, as `twotower vocab` writes") from None
  tokens = [line.rstrip("\r") for line in text.split("\n")]
  while tokens and not tokens[-1]:
    tokens.pop()
  if not tokens or tokens[0] != PAD:
    raise ValueError(f"{path}: line 1 must be {PAD} (id 0 is padding), got "
                     f"{tokens[0] if tokens else 'an empty file'!r}")
  missing = [t for t in RESERVED_TOKENS if t not in tokens]
  if missing:
    raise ValueError(f"{path}: vocabulary lacks the special tokens {missing}")
  dupes = len(tokens) - len(set(tokens))
  if dupes:
    raise ValueError(f"{path}: {dupes} duplicate tokens")
  return tokens
