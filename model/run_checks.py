"""Checks of a training run's exported files against its model, before `twotower export-hf`
(through `hf_run.load_run`) trusts them.

The export's `vocab.txt` and `config.yaml` are copies that sit beside the model; both are
checked against the model itself, since a wrong copy gives a sentence-transformers model
that loads, runs and answers wrongly:

  * `two_tower.keras` against itself: a whole zip archive, every member's CRC
    (`check_keras_file`);
  * `config.yaml`'s lengths and tower shape against what `two_tower.keras` was built with
    (its own config.json: the input shapes and the tower's layers; `check_config`);
  * `vocab.txt` against the vocabulary the SavedModel's graph holds: no list of tokens, but
    the tokenizer compiled from it (tensorflow-text's FastWordpiece model, every word piece
    and [UNK] with its id), which must be the very bytes `vocab.txt` compiles to, and the ids
    of [CLS] and [SEP] that its packing puts into every input, which the towers' embeddings
    with `vocab.txt`'s ids must reproduce (`check_vocab`).

A refusal is one line naming the file and the first line that differs.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import zipfile

from twotower.core import contracts

logger = logging.getLogger(__name__)

#: The suffix indicator of the in-graph tokenizer's WordPiece (tensorflow-text's default).
SUFFIX = "##"
#: Longest word, in bytes, the in-graph WordPiece spells (tensorflow-text's default).
MAX_BYTES_PER_WORD = 100
#: Embeddings of the SavedModel and of the .keras towers on the same ids agree to float
#: error, relative to their largest value: 6e-8 measured in float32, 1e-3 when the towers
#: compute in bfloat16 (mixed precision: the SavedModel's graph and the eager towers round
#: differently); a wrong [CLS] or [SEP] id moved them by 0.08 or more (the tiny preset).
EMBEDDING_TOLERANCE = {"float32": 1e-4, "other": 1e-2}
#: Settings in config.yaml's `model:` that two_tower.keras records too.
_TOWER_FIELDS = ("num_layers", "hidden_dim", "num_heads", "intermediate_dim", "embedding_dim")


@dataclasses.dataclass(frozen=True)
class ModelVocab:
  """The vocabulary as the trained model itself holds it (`model_vocab`), what `check_vocab`
  compares a vocabulary file with."""
  saved_model: str          # the SavedModel's path (for messages)
  keras_file: str
  wordpiece: bytes          # the FastWordpiece model compiled into the SavedModel's graph
  size: int                 # rows of the towers' token embeddings
  query_len: int
  doc_len: int
  saved: object             # the loaded SavedModel (its string signatures)
  query_tower: object
  doc_tower: object


# ---------------------------------------------------------------------------------------------
# The model's own files.
# ---------------------------------------------------------------------------------------------


def check_keras_file(path: str) -> None:
  """Refuses a `.keras` file that is not a whole zip archive. Keras reads a file it cannot
  open as a zip as some other format and reports "File not found" for a truncated one; a
  damaged member would fail deep inside h5py."""
  try:
    with zipfile.ZipFile(path) as archive:
      damaged = archive.testzip()  # reads every member against its CRC
  except (zipfile.BadZipFile, EOFError) as e:
    raise ValueError(f"{path}: damaged or truncated, not a whole .keras zip archive ({e}); "
                     "export the run again") from None
  if damaged is not None:
    raise ValueError(f"{path}: damaged: its member {damaged} fails its CRC check; export the "
                     "run again")


def built_with(keras_path: str) -> dict:
  """What the model in `keras_path` was built with, from the file's own config.json: its
  input lengths (`query_len`, `doc_len`), `shared_towers`, `vocab_size` and the query tower's
  shape (_TOWER_FIELDS, where the tower has them)."""
  try:
    with zipfile.ZipFile(keras_path) as archive:
      config = json.loads(archive.read("config.json"))
  except (KeyError, ValueError) as e:  # no such member; not JSON
    raise ValueError(f"{keras_path}: not a Keras model file (its config.json: {e})") from None
  try:
    shapes = config["build_config"]["input_shape"]
    towers = config["config"]
    tower = towers["query_tower"]["config"]
    built = {"query_len": int(shapes["query"]["token_ids"][1]),
             "doc_len": int(shapes["doc"]["token_ids"][1]),
             "shared_towers": towers.get("doc_tower") is None,
             "vocab_size": int(tower["vocab_size"])}
  except (KeyError, TypeError, IndexError) as e:
    raise ValueError(f"{keras_path}: not a built two-tower model (its config.json has no "
                     f"{e})") from None
  built.update({k: tower[k] for k in _TOWER_FIELDS if k in tower})
  return built


def check_config(config_path: str, config_yaml: str, built: dict) -> None:
  """Refuses a config.yaml whose `model:` lengths or tower shape are not those the model was
  built with (`built_with`), naming the first setting that differs and its line."""
  import yaml  # pylint: disable=import-outside-toplevel
  model_config = (yaml.safe_load(config_yaml) or {}).get("model") or {}
  for key, got in built.items():
    if key not in model_config or (key == "vocab_size" and not model_config[key]):
      continue  # vocab_size 0: the vocabulary file's size
    want = model_config[key]
    if want != got:
      raise ValueError(f"{config_path} line {_yaml_line(config_yaml, key)}: model.{key} is "
                       f"{want!r}, the model in {contracts.KERAS_FILE} was built with {got!r}")


def _yaml_line(config_yaml: str, key: str) -> int:
  """The line of `key:` under `model:` (1-based; 0 where it cannot be found)."""
  inside = False
  for number, line in enumerate(config_yaml.splitlines(), 1):
    if not line.startswith((" ", "\t")):
      inside = line.rstrip() == "model:"
    elif inside and line.strip().startswith(f"{key}:"):
      return number
  return 0


def saved_wordpiece(saved_model: str) -> bytes:
  """The FastWordpiece model (flatbuffer bytes) compiled into the SavedModel's tokenizer: the
  constant its signatures' FastWordpieceTokenizeWithOffsets op reads, found through the
  object graph's bound inputs (a captured tensor is an argument of the traced function)."""
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=import-outside-toplevel
  from tensorflow.python.framework import tensor_util  # pylint: disable=import-outside-toplevel
  path = os.path.join(saved_model, "saved_model.pb")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path}: missing (the SavedModel holds the model's compiled "
                            f"vocabulary, which {contracts.VOCAB_FILE} is checked against)")
  proto = saved_model_pb2.SavedModel()
  try:
    with open(path, "rb") as f:
      proto.ParseFromString(f.read())
  except Exception as e:  # pylint: disable=broad-except  (protobuf's DecodeError)
    raise ValueError(f"{path}: damaged, not a SavedModel ({e})") from None
  graph = proto.meta_graphs[0]
  objects = graph.object_graph_def
  functions = {f.signature.name: f for f in graph.graph_def.library.function}
  constants = {n.name: n for n in graph.graph_def.node if n.op == "Const"}
  found = set()
  for name, concrete in objects.concrete_functions.items():
    function = functions.get(name)
    if function is None:
      continue
    args = [a.name for a in function.signature.input_arg]
    nodes = {n.name: n for n in function.node_def}
    for node in function.node_def:
      if node.op != "FastWordpieceTokenizeWithOffsets":
        continue
      source = node.input[1].split(":")[0]
      while source in nodes and nodes[source].op == "Identity":
        source = nodes[source].input[0].split(":")[0]
      if source not in args:
        continue
      bound = args.index(source) - (len(args) - len(concrete.bound_inputs))
      operation = objects.nodes[concrete.bound_inputs[bound]].constant.operation
      if operation in constants:
        found.add(tensor_util.MakeNdarray(constants[operation].attr["value"].tensor).tobytes())
  if len(found) != 1:
    raise ValueError(f"{saved_model}: {'no' if not found else len(found)} compiled WordPiece "
                     "vocabularies in its signatures, one expected (not a `twotower` export?)")
  return found.pop()


def wordpiece_model(vocab: list[str]) -> bytes:
  """The FastWordpiece model the in-graph tokenizer (model/tokenizer.py) compiles `vocab`
  into, with its settings: the bytes its SavedModel holds (the builder is deterministic)."""
  # The builder tensorflow-text's FastWordpieceTokenizer(vocab=...) itself calls.
  from tensorflow_text.core.pybinds import (  # pylint: disable=import-outside-toplevel
      pywrap_fast_wordpiece_tokenizer_model_builder as builder)
  return builder.build_fast_wordpiece_model(vocab, MAX_BYTES_PER_WORD, SUFFIX, contracts.UNK,
                                            False, False)  # end to end, no detokenization


def model_vocab(export_dir: str, query_tower, doc_tower, built: dict) -> ModelVocab:
  """The model's own vocabulary: the SavedModel's compiled tokenizer, the .keras towers'."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tensorflow_text  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  saved_model = os.path.join(export_dir, contracts.SAVED_MODEL_DIR)
  wordpiece = saved_wordpiece(saved_model)
  return ModelVocab(saved_model, os.path.join(export_dir, contracts.KERAS_FILE), wordpiece,
                    built["vocab_size"], built["query_len"], built["doc_len"],
                    tf.saved_model.load(saved_model), query_tower, doc_tower)


# ---------------------------------------------------------------------------------------------
# The vocabulary file against the model's.
# ---------------------------------------------------------------------------------------------


def check_vocab(path: str, model: ModelVocab) -> list[str]:
  """The tokens of the vocabulary file `path`, refused (ValueError, one line naming the file
  and its first line that differs) unless they are the model's vocabulary: as many as the
  towers' token embeddings, compiling to the SavedModel's very WordPiece model, and giving
  the SavedModel's embeddings with their [CLS] and [SEP] ids."""
  from twotower.model import tokenizer as tokenizer_lib  # pylint: disable=import-outside-toplevel
  vocab = tokenizer_lib.read_vocab(path)
  if len(vocab) != model.size:
    raise ValueError(f"{path}: {len(vocab)} tokens, the model's vocabulary has {model.size} "
                     f"(the token embeddings of {model.keras_file})")
  if wordpiece_model(vocab) != model.wordpiece:
    raise ValueError(f"{path} {_wordpiece_difference(vocab, model)}")
  _check_special_ids(path, vocab, model)
  return vocab


def _wordpiece(buffer: bytes):
  """A tensorflow-text FastWordpieceTokenizer on a compiled model (ids out)."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tensorflow_text as tf_text  # pylint: disable=import-outside-toplevel
  # A uint8 tensor, not bytes: the class turns bytes into a Python list first (seconds for a
  # real vocabulary's megabytes).
  return tf_text.FastWordpieceTokenizer(
      model_buffer=tf.constant(np.frombuffer(buffer, np.uint8)), token_out_type=tf.int64)


def _pieces(tokenizer, texts: list[str]) -> list[list[int]]:
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  if not texts:
    return []
  return tokenizer.tokenize(tf.constant(texts)).to_list()


def _wordpiece_difference(vocab: list[str], model: ModelVocab) -> str:
  """Where `vocab` (which compiles to another WordPiece model than the SavedModel's) first
  differs from the model's vocabulary: "line N is 'x', the model's vocabulary has 'y'".

  The model's WordPiece has no list of tokens to read, so it is asked: each token of the
  file, as a word (a suffix piece `##x` after a prefix word both agree on, `px`) and a word
  neither can spell (the [UNK] id), is tokenized by both. A word the file makes token i that
  the model makes token j says the model has it on line j + 1."""
  ours, theirs = _wordpiece(wordpiece_model(vocab)), _wordpiece(model.wordpiece)
  model_id: dict[str, int] = {}   # a file token -> the id the model gives it
  unmatched: set[int] = set()     # lines whose token the model does not have as one piece
  checked: set[int] = set()
  used = set("".join(vocab))
  # A private-use character no token holds: a word neither vocabulary can spell.
  unknown = next(chr(c) for c in range(0xE000, 0xF900) if chr(c) not in used)
  unk = vocab.index(contracts.UNK)
  if _pieces(ours, [unknown]) == [[unk]]:
    (got,) = _pieces(theirs, [unknown])
    checked.add(unk)
    if len(got) == 1:
      model_id[contracts.UNK] = got[0]
  model_unk = model_id.get(contracts.UNK)

  def ask(lines: list[int], texts: list[str], prefix: list[int]) -> list[int]:
    """Asks both about `texts` (one per line); returns the lines the file did not make
    prefix + [line] (not a piece of its own there)."""
    left = []
    for line, want, got in zip(lines, _pieces(ours, texts), _pieces(theirs, texts)):
      if want != prefix + [line]:
        left.append(line)
        continue
      checked.add(line)
      if len(got) == len(want) and got[:-1] == prefix and got[-1] != model_unk:
        model_id[vocab[line]] = got[-1]
      else:
        unmatched.add(line)
    return left

  def is_suffix(token: str) -> bool:
    return token.startswith(SUFFIX) and token != SUFFIX

  words = [i for i, t in enumerate(vocab) if t and not is_suffix(t) and t != SUFFIX]
  ask(words, [vocab[i] for i in words], [])
  # Prefix words both vocabularies give the same id, shortest first: `p` + "x" asks about
  # "##x" where the file spells it p, ##x.
  prefixes = sorted((i for i in words if model_id.get(vocab[i]) == i and vocab[i].isalnum()),
                    key=lambda i: (len(vocab[i]), i))[:16]
  suffixes = [i for i, t in enumerate(vocab) if is_suffix(t)]
  for p in prefixes:
    if not suffixes:
      break
    suffixes = ask(suffixes, [vocab[p] + vocab[i][len(SUFFIX):] for i in suffixes], [p])
  index = {t: i for i, t in enumerate(vocab)}
  claims: dict[int, list[str]] = {}
  for token, j in model_id.items():
    claims.setdefault(j, []).append(token)
  # The model's token on line j + 1: the one file token it gives id j. Where several are
  # given j (a word the model spells as one of its pieces, "w1 " as "w1"), the one on that
  # line in the file too is it, and the others are not the model's.
  model_at = {}
  for j, tokens in claims.items():
    own = [t for t in tokens if index[t] == j]
    model_at[j] = own[0] if own else tokens[0] if len(tokens) == 1 else None
    unmatched.update(index[t] for t in tokens if t != model_at[j])
  differing = sorted({index[t] for t, j in model_id.items() if model_at[j] == t != vocab[j]}
                     | {j for j, t in model_at.items() if t and j < len(vocab) and vocab[j] != t}
                     | unmatched)
  if differing:
    i = differing[0]
    line = f"line {i + 1} is {vocab[i]!r}"
    if model_at.get(i) and model_at[i] != vocab[i]:
      return f"{line}, the model's vocabulary has {model_at[i]!r}"
    if vocab[i] in model_id and model_at[model_id[vocab[i]]] == vocab[i]:
      return (f"{line}, which the model's vocabulary has on line {model_id[vocab[i]] + 1} "
              f"({model.saved_model})")
    return f"{line}, a token the model's vocabulary does not have ({model.saved_model})"
  unasked = [i for i in range(len(vocab)) if i not in checked
             and vocab[i] not in contracts.RESERVED_TOKENS]
  where = (f"; line {unasked[0] + 1} ({vocab[unasked[0]]!r}) is the first it cannot be asked "
           "about" if unasked else "")
  return (f"compiles to another WordPiece model than {model.saved_model}'s, yet every token "
          f"the model can be asked about agrees{where}")


def _check_special_ids(path: str, vocab: list[str], model: ModelVocab) -> None:
  """Refuses `vocab` unless the towers, fed its [CLS] and [SEP] ids, embed as the SavedModel
  does. The compiled WordPiece leaves out tokens with punctuation inside ([CLS], [SEP],
  [MASK]): their ids are constants of the SavedModel's packing, asked here through its
  embeddings of an empty query and document and of ones cut to length (which also catch a
  SavedModel and a .keras of two exports)."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel

  from twotower.model import tokenizer as tokenizer_lib  # pylint: disable=import-outside-toplevel
  # A word the normaliser leaves as it is, repeated past the cut.
  word = next((t for t in vocab if t.isascii() and t.isalnum() and t == t.lower()), "")
  queries = ["", " ".join([word] * model.query_len)]
  titles, texts = ["", word], ["", " ".join([word] * model.doc_len)]
  saved = model.saved.signatures
  want_q = saved[contracts.QUERY_SIGNATURE](query=tf.constant(queries))[
      contracts.EMBEDDING_OUTPUT].numpy()
  want_d = saved[contracts.DOC_SIGNATURE](title=tf.constant(titles), text=tf.constant(texts))[
      contracts.EMBEDDING_OUTPUT].numpy()
  scale = max(1.0, float(np.abs(want_q).max()), float(np.abs(want_d).max()))
  compute = str(getattr(model.query_tower, "compute_dtype", "float32"))
  tolerance = EMBEDDING_TOLERANCE["float32" if compute == "float32" else "other"] * scale
  tokenizer = tokenizer_lib.Tokenizer(vocab, model.query_len, model.doc_len)
  q_pieces = [tokenizer.word_pieces(tf.constant(queries))]
  d_pieces = [tokenizer.word_pieces(tf.constant(titles)), tokenizer.word_pieces(tf.constant(texts))]
  pad = vocab.index(contracts.PAD)

  def difference(cls: int, sep: int) -> float:
    q = tokenizer_lib.pack_segments(q_pieces, model.query_len, cls, sep, pad)
    d = tokenizer_lib.pack_segments(d_pieces, model.doc_len, cls, sep, pad)
    got_q = np.asarray(model.query_tower({"token_ids": q[0], "padding_mask": q[1]},
                                         training=False))
    got_d = np.asarray(model.doc_tower({"token_ids": d[0], "padding_mask": d[1]},
                                       training=False))
    return max(float(np.abs(got_q - want_q).max()), float(np.abs(got_d - want_d).max()))

  ours = (vocab.index(contracts.CLS), vocab.index(contracts.SEP))
  worst = difference(*ours)
  logger.debug("%s: [CLS], [SEP] on lines %d, %d: embeddings within %.1e of %s's", path,
               ours[0] + 1, ours[1] + 1, worst, model.saved_model)
  if worst <= tolerance:
    return
  specials = [vocab.index(t) for t in (contracts.CLS, contracts.SEP, contracts.MASK)]
  tried = {pair: difference(*pair) for pair in itertools.permutations(specials, 2)
           if pair != ours}
  logger.debug("other places of [CLS], [SEP]: %s", tried)
  best = min(tried, key=tried.get) if tried else None
  if best is None or tried[best] > tolerance:
    raise ValueError(f"{model.saved_model}: its embeddings differ from those of "
                     f"{model.keras_file}'s towers by {worst:.2e} (max abs) on the same text, "
                     f"with {os.path.basename(path)}'s ids and with any other place of "
                     "[CLS]/[SEP]: the two are not of one export")
  lines = sorted((i, t) for i, t in zip(best, (contracts.CLS, contracts.SEP)) if vocab[i] != t)
  i, token = lines[0]
  raise ValueError(f"{path} line {i + 1} is {vocab[i]!r}, the model's vocabulary has "
                   f"{token!r} ({model.saved_model} packs it into every input)")
