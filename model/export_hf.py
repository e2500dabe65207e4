"""`twotower export-hf RUN --out DIR`: a trained run as a Hugging Face / sentence-transformers
model and as ONNX, loadable with none of our code (no TensorFlow, no tensorflow-text):

    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer("DIR")
    q = model.encode_query(["who wrote hamlet?"])
    d = model.encode_document(["Hamlet [SEP] Hamlet is a tragedy by William Shakespeare ..."])

Our towers are BERT-shaped, so they map onto `transformers.BertModel` without loss: KerasHub
`TransformerEncoder` blocks are post-LayerNorm (`normalize_first=False`) with exact (erf)
GELU and epsilon 1e-12, as BERT's; token + position embeddings, then a LayerNorm; the
embedding is a Dense layer on the last layer's [CLS] state (no normalisation: scores are
inner products). The model has no token types: `type_vocab_size` 1, its one row zeros.

    DIR/                      a sentence-transformers model (modules.json):
      config.json, model.safetensors, tokenizer.json, ...   shared towers: one BertModel
      1_Pooling/, 2_Dense/                                  [CLS] pooling, the projection
      query_0_Transformer/, document_0_Transformer/, ...    separate towers: a `Router`
                                                            (encode_query / encode_document)
      onnx/model.onnx         (shared) BertModel only, where `backend="onnx"` looks
      <route>/onnx/model.onnx (separate) the same per tower
      onnx_towers/query/, onnx_towers/document/   the whole tower as ONNX for onnxruntime
                              alone: model.onnx (input_ids, attention_mask -> embedding),
                              tokenizer.json (truncation and [CLS]/[SEP] built in),
                              tower.json (max length, dimension, the document layout)
      README.md               model card: the run's config, data and numbers

The tokenizer is the in-graph one (model/tokenizer.py) rebuilt with `tokenizers`
(model/hf_tokenizer.py: tensorflow-text's normalisation measured and matched, BERT's
pre-tokenizer, WordPiece with [UNK] for a word it cannot spell). Queries are `[CLS] q [SEP]` cut to query_len; documents are one string
`title [SEP] text` (the [SEP] is matched as the special token), giving
`[CLS] title [SEP] text [SEP]` cut from the end to doc_len, which is the in-graph
WaterfallTrimmer's cut while the title is shorter than doc_len - 3 word pieces.
benchmarks/export_equality.py measures ids and embeddings against the SavedModel.

The run's `vocab.txt` and `config.yaml` are checked against the model before anything is
written (model/run_checks.py, from hf_run.load_run): a vocabulary other than the one
compiled into the SavedModel, or lengths other than those two_tower.keras was built with,
are refused naming the file and its first differing line; so is a truncated or damaged
two_tower.keras. The model card and each `tower.json` carry the vocabulary's sha256
(`hf_tokenizer.vocab_digest`).

The BoW-MLP towers have no BERT counterpart and are refused.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import tempfile
import warnings

import numpy as np

from twotower.core import contracts
from twotower.core import files as tio
from twotower.core import outputs
from twotower.model import hf_run
from twotower.model import hf_tokenizer
from twotower.model import onnx_encoder

logger = logging.getLogger(__name__)

STAGE = "export-hf"
#: The folder of the whole-tower ONNX files (one sub-folder per tower: model/onnx_encoder.py).
ONNX_TOWERS_DIR = "onnx_towers"
DOC_JOIN = onnx_encoder.DOC_JOIN
OPSET = 17  # LayerNormalization is an ONNX op from opset 17


@dataclasses.dataclass(frozen=True)
class ExportHfConfig:
  """Flags of `twotower export-hf`."""
  run: str                  # a training run dir, its export/ dir, or the export's SavedModel
  out: str                  # the model directory
  onnx: bool = True         # also write the ONNX files
  overwrite: bool = False


@dataclasses.dataclass(frozen=True)
class ExportHfResult:
  out: str
  towers: str               # "shared" or "separate"
  files: tuple[str, ...]


# ---------------------------------------------------------------------------------------------
# Weights: KerasHub TransformerEncoder -> transformers BertModel.
# ---------------------------------------------------------------------------------------------


def bert_config(tower, vocab_size: int):
  """A `transformers.BertConfig` with the tower's shape (dropout is off at inference)."""
  from transformers import BertConfig  # pylint: disable=import-outside-toplevel
  b = tower.backbone
  return BertConfig(
      vocab_size=vocab_size, hidden_size=b.hidden_dim, num_hidden_layers=b.num_layers,
      num_attention_heads=b.num_heads, intermediate_size=b.intermediate_dim,
      hidden_act="gelu",  # exact erf GELU: keras.activations.gelu(approximate=False)
      hidden_dropout_prob=b.dropout, attention_probs_dropout_prob=b.dropout,
      max_position_embeddings=b.max_length, type_vocab_size=1, layer_norm_eps=1e-12,
      pad_token_id=0, initializer_range=0.02)


def _np(variable) -> np.ndarray:
  return np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable, np.float32)


def _linear(dense) -> tuple[np.ndarray, np.ndarray]:
  """A Keras Dense / EinsumDense (kernel [in, ...out] or [...in, out]) -> torch Linear
  (weight [out, in], bias [out]); `dense` is (kernel, bias, in_dim)."""
  kernel, bias, in_dim = dense
  kernel = _np(kernel).reshape(in_dim, -1)
  return np.ascontiguousarray(kernel.T), _np(bias).reshape(-1)


def bert_state_dict(tower) -> dict[str, np.ndarray]:
  """The tower's backbone as BertModel weights (pooler included, see below)."""
  b = tower.backbone
  h = b.hidden_dim
  state = {
      "embeddings.word_embeddings.weight": _np(b.token_embedding.embeddings),
      "embeddings.position_embeddings.weight": _np(b.position_embedding.position_embeddings),
      "embeddings.token_type_embeddings.weight": np.zeros((1, h), np.float32),
      "embeddings.LayerNorm.weight": _np(b.embeddings_norm.gamma),
      "embeddings.LayerNorm.bias": _np(b.embeddings_norm.beta),
  }
  # KerasHub's TransformerEncoder keeps its sub-layers in private attributes (keras_hub
  # 0.32, pinned); a renamed one fails here, loudly, not in a silently wrong model.
  # pylint: disable=protected-access
  for i, block in enumerate(b.blocks):
    attention = block._self_attention_layer
    p = f"encoder.layer.{i}."
    parts = {
        "attention.self.query": (attention._query_dense, h),
        "attention.self.key": (attention._key_dense, h),
        "attention.self.value": (attention._value_dense, h),
        # [heads, head_dim, H]: heads-major, as BertSelfAttention concatenates its heads.
        "attention.output.dense": (attention._output_dense, h),
        "intermediate.dense": (block._feedforward_intermediate_dense, h),
        "output.dense": (block._feedforward_output_dense, b.intermediate_dim),
    }
    for name, (dense, in_dim) in parts.items():
      weight, bias = _linear((dense.kernel, dense.bias, in_dim))
      state[p + name + ".weight"], state[p + name + ".bias"] = weight, bias
    for name, norm in (("attention.output.LayerNorm", block._self_attention_layer_norm),
                       ("output.LayerNorm", block._feedforward_layer_norm)):
      state[p + name + ".weight"], state[p + name + ".bias"] = _np(norm.gamma), _np(norm.beta)
  # pylint: enable=protected-access
  # Our towers have no pooler; BertModel has one. An identity keeps transformers from
  # initialising it at random on every load (pooler_output = tanh(h_CLS), not our embedding).
  state["pooler.dense.weight"] = np.eye(h, dtype=np.float32)
  state["pooler.dense.bias"] = np.zeros((h,), np.float32)
  return state


def projection(tower) -> tuple[np.ndarray, np.ndarray]:
  """The [CLS] projection as torch Linear weight [d, H] and bias [d]."""
  return _linear((tower.projection.kernel, tower.projection.bias, tower.backbone.hidden_dim))


def bert_model(tower, vocab_size: int):
  """A `transformers.BertModel` holding the tower's backbone, in eval mode."""
  import torch  # pylint: disable=import-outside-toplevel
  from transformers import BertModel  # pylint: disable=import-outside-toplevel
  model = BertModel(bert_config(tower, vocab_size))
  state = {k: torch.from_numpy(v) for k, v in bert_state_dict(tower).items()}
  missing, unexpected = model.load_state_dict(state, strict=False)
  # position_ids / token_type_ids are buffers transformers fills itself.
  missing = [k for k in missing if not k.endswith(("position_ids", "token_type_ids"))]
  if missing or unexpected:
    raise RuntimeError(f"BertModel weights: missing {missing}, unexpected {unexpected}")
  return model.eval()


# ---------------------------------------------------------------------------------------------
# sentence-transformers.
# ---------------------------------------------------------------------------------------------


def _portable_tokenizer_config(folder: str) -> None:
  """Names the tokenizer class every transformers release knows: transformers 5 writes
  `"backend": "tokenizers"` with its own class name, which transformers 4.x (the one
  sentence-transformers' ONNX backend, through Optimum, still needs) cannot load; 5.x reads
  `PreTrainedTokenizerFast` as the same tokenizer."""
  path = os.path.join(folder, "tokenizer_config.json")
  config = tio.read_json(path)
  config.pop("backend", None)
  config["tokenizer_class"] = "PreTrainedTokenizerFast"
  tio.write_json(path, config)


def _st_modules(spec: hf_run.TowerSpec, tower, work: str, name: str, route: str | None):
  """[Transformer, Pooling(cls), Dense(identity)] of one tower (BertModel written to
  `work/name` first: sentence-transformers' Transformer loads from a folder)."""
  import torch  # pylint: disable=import-outside-toplevel
  from sentence_transformers.sentence_transformer import modules  # pylint: disable=import-outside-toplevel
  folder = os.path.join(work, name)
  bert_model(tower, len(spec.vocab)).save_pretrained(folder, safe_serialization=True)
  hf_tokenizer.transformers_tokenizer(spec.vocab, spec.doc_len).save_pretrained(folder)
  _portable_tokenizer_config(folder)
  lengths = {"query_length": spec.query_len, "document_length": spec.doc_len}
  if route == "query":
    lengths = {"query_length": spec.query_len, "max_seq_length": spec.query_len}
  elif route == "document":
    lengths = {"document_length": spec.doc_len, "max_seq_length": spec.doc_len}
  else:
    lengths["max_seq_length"] = spec.doc_len
  transformer = modules.Transformer(folder, processor_kwargs={"model_max_length": spec.doc_len},
                                    model_kwargs={"attn_implementation": "eager"}, **lengths)
  pooling = modules.Pooling(tower.backbone.hidden_dim, pooling_mode="cls")
  weight, bias = projection(tower)
  dense = modules.Dense(weight.shape[1], weight.shape[0], bias=True,
                        activation_function=torch.nn.Identity(),
                        init_weight=torch.from_numpy(weight), init_bias=torch.from_numpy(bias))
  return [transformer, pooling, dense]


def sentence_transformer(spec: hf_run.TowerSpec, work: str):
  """The towers as a `SentenceTransformer` (a Router of two when the towers are separate)."""
  from sentence_transformers import SentenceTransformer  # pylint: disable=import-outside-toplevel
  from sentence_transformers.sentence_transformer import modules  # pylint: disable=import-outside-toplevel
  if spec.shared:
    return SentenceTransformer(modules=_st_modules(spec, spec.query_tower, work, "tower", None),
                               device="cpu")
  router = modules.Router.for_query_document(
      query_modules=_st_modules(spec, spec.query_tower, work, "query", "query"),
      document_modules=_st_modules(spec, spec.doc_tower, work, "document", "document"))
  return SentenceTransformer(modules=[router], device="cpu")


# ---------------------------------------------------------------------------------------------
# ONNX.
# ---------------------------------------------------------------------------------------------


def _export_onnx(module, path: str, output: str) -> None:
  import torch  # pylint: disable=import-outside-toplevel
  os.makedirs(os.path.dirname(path), exist_ok=True)
  ids = torch.tensor([[2, 5, 6, 3], [2, 7, 3, 0]], dtype=torch.int64)
  mask = (ids != 0).to(torch.int64)
  # The TorchScript exporter: no onnxscript needed, and dynamic batch and length axes. Its
  # warnings are about what tracing fixes, checked here: transformers' mask padding branch
  # (the mask is always as long as the ids) and indexing by non-negative positions; the
  # equality of the traced graph at other shapes is measured (benchmarks/export_equality.py).
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    _export_traced(torch, module, ids, mask, path, output)


def _export_traced(torch, module, ids, mask, path: str, output: str) -> None:
  torch.onnx.export(module, (ids, mask), path, dynamo=False, opset_version=OPSET,
                    input_names=["input_ids", "attention_mask"], output_names=[output],
                    dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                  "attention_mask": {0: "batch", 1: "sequence"},
                                  output: {0: "batch"} if output == "embedding"
                                  else {0: "batch", 1: "sequence"}})


def _wrappers():
  import torch  # pylint: disable=import-outside-toplevel

  class Tower(torch.nn.Module):
    """BertModel, the [CLS] state, the projection: ids -> embedding."""

    def __init__(self, bert, weight: np.ndarray, bias: np.ndarray):
      super().__init__()
      self.bert = bert
      self.projection = torch.nn.Linear(weight.shape[1], weight.shape[0])
      with torch.no_grad():
        self.projection.weight.copy_(torch.from_numpy(weight))
        self.projection.bias.copy_(torch.from_numpy(bias))

    def forward(self, input_ids, attention_mask):
      states = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                         token_type_ids=torch.zeros_like(input_ids)).last_hidden_state
      return self.projection(states[:, 0])

  class Backbone(torch.nn.Module):
    """BertModel alone (Optimum's feature-extraction layout: last_hidden_state)."""

    def __init__(self, bert):
      super().__init__()
      self.bert = bert

    def forward(self, input_ids, attention_mask):
      return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                       token_type_ids=torch.zeros_like(input_ids)).last_hidden_state

  return Tower, Backbone


def write_onnx_tower(tower, vocab: list[str], max_length: int, out_dir: str, layout: str) -> None:
  """One whole tower as ONNX for onnxruntime alone: `out_dir/model.onnx` (input_ids,
  attention_mask int64 [batch, length] -> embedding float32 [batch, d]), `tokenizer.json`
  (its truncation to `max_length` and the [CLS]/[SEP] template built in) and `tower.json`.
  `layout`: "query" or "document" (what tower.json says the input string is)."""
  import torch  # pylint: disable=import-outside-toplevel
  tower_cls, _ = _wrappers()
  os.makedirs(out_dir, exist_ok=True)
  weight, bias = projection(tower)
  with torch.no_grad():
    _export_onnx(tower_cls(_eager(bert_model(tower, len(vocab))), weight, bias),
                 os.path.join(out_dir, onnx_encoder.MODEL_FILE), "embedding")
  hf_tokenizer.hf_tokenizer(vocab, max_length, specials_in_text=layout != "query").save(
      os.path.join(out_dir, onnx_encoder.TOKENIZER_FILE))
  tio.write_json(os.path.join(out_dir, onnx_encoder.TOWER_FILE), {
      "format": onnx_encoder.FORMAT, "format_version": 1, "layout": layout,
      "input": ("a query string" if layout == "query"
                else f"one string: title + {DOC_JOIN!r} + text"),
      "max_length": int(max_length), "embedding_dim": int(weight.shape[0]),
      "inputs": ["input_ids", "attention_mask"], "output": "embedding",
      "pad_id": vocab.index(contracts.PAD), "score": "inner product",
      # What tokenizer.json's vocabulary must be (hf_tokenizer.vocab_digest): the ONNX tower
      # checks the file it is given against it (onnx_encoder.OnnxTower).
      "vocab_sha256": hf_tokenizer.vocab_digest(vocab)})


#: Queries a written ONNX query tower is checked on against the SavedModel (bundle --onnx).
CHECK_QUERIES = ("who wrote hamlet?", "WHEN did Apollo 8 orbit the Moon", "café naïve 東京",
                 "", "a " * 300)


def write_query_tower(run: str, out_dir: str) -> None:
  """The query tower of `run` (a run, its export/ or the export's SavedModel) as an ONNX
  tower in `out_dir` (what `twotower bundle --onnx` carries), checked against the
  SavedModel's query signature on CHECK_QUERIES (ids and embeddings)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tensorflow_text  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  spec = hf_run.load_run(run)
  write_onnx_tower(spec.query_tower, spec.vocab, spec.query_len, out_dir, "query")
  saved = tf.saved_model.load(os.path.join(spec.export_dir, contracts.SAVED_MODEL_DIR))
  want = saved.signatures[contracts.QUERY_SIGNATURE](
      query=tf.constant(CHECK_QUERIES))[contracts.EMBEDDING_OUTPUT].numpy()
  got = onnx_encoder.OnnxTower(out_dir).encode(list(CHECK_QUERIES))
  worst = float(np.abs(want - got).max())
  if worst > 1e-4:
    raise RuntimeError(f"{out_dir}: the ONNX query tower differs from {spec.export_dir}'s "
                       f"SavedModel by {worst:.2e} (max abs) on {len(CHECK_QUERIES)} queries")
  logger.info("ONNX query tower -> %s (max abs difference to the SavedModel %.1e)", out_dir,
              worst)


def _eager(bert):
  """Plain softmax attention for the exporter (SDPA's masking traces into more ops)."""
  bert.config._attn_implementation = "eager"  # pylint: disable=protected-access
  bert.set_attn_implementation("eager")
  return bert


def _write_st_onnx(st_model, out: str, shared: bool) -> list[str]:
  """`<module dir>/onnx/model.onnx` for each Transformer module: where
  sentence-transformers' `backend="onnx"` looks for a BertModel exported by Optimum."""
  import torch  # pylint: disable=import-outside-toplevel
  _, backbone_cls = _wrappers()
  written = []
  if shared:
    targets = [(st_model[0].auto_model, out)]
  else:
    router = st_model[0]
    targets = [(router.sub_modules[route][0].auto_model,
                os.path.join(out, f"{route}_0_Transformer")) for route in ("query", "document")]
  for bert, folder in targets:
    path = os.path.join(folder, "onnx", "model.onnx")
    with torch.no_grad():
      _export_onnx(backbone_cls(_eager(bert)), path, "last_hidden_state")
    written.append(path)
  return written


# ---------------------------------------------------------------------------------------------
# The stage.
# ---------------------------------------------------------------------------------------------


def run(config: ExportHfConfig) -> ExportHfResult:
  """Writes the model directory (beside `out` first, moved into place when whole)."""
  from transformers.utils import logging as hf_logging  # pylint: disable=import-outside-toplevel
  hf_logging.disable_progress_bar()  # "Writing model shards" bars: not this stage's output
  spec = hf_run.load_run(config.run)
  settings = {"run": os.path.abspath(spec.export_dir), "onnx": config.onnx}
  tio.log_settings(STAGE, {**settings, "out": config.out})
  with outputs.staged(config.out, STAGE, settings, overwrite=config.overwrite) as tmp:
    with tempfile.TemporaryDirectory() as work:  # the BertModel folders the modules load
      st_model = sentence_transformer(spec, work)
      st_model.save(tmp, create_model_card=False)
    notes = []
    if config.onnx:
      _write_st_onnx(st_model, tmp, spec.shared)
      write_onnx_tower(spec.query_tower, spec.vocab, spec.query_len,
                       os.path.join(tmp, ONNX_TOWERS_DIR, "query"), "query")
      write_onnx_tower(spec.doc_tower, spec.vocab, spec.doc_len,
                       os.path.join(tmp, ONNX_TOWERS_DIR, "document"), "document")
      notes.append(f"ONNX: `{ONNX_TOWERS_DIR}/query/` and `{ONNX_TOWERS_DIR}/document/` hold "
                   "each whole tower (model.onnx: input_ids, attention_mask -> embedding; "
                   "tokenizer.json; tower.json) for onnxruntime alone; `onnx/model.onnx` "
                   "(per Transformer module) is the BertModel where sentence-transformers' "
                   "`backend=\"onnx\"` looks.")
    tio.write_text(os.path.join(tmp, "README.md"),
                   hf_run.model_card(spec, config.run, config.out, "\n".join(notes)))
  towers = "shared" if spec.shared else "separate"
  logger.info("export-hf: %s towers -> %s", towers, config.out)
  return ExportHfResult(config.out, towers, outputs.files_of(config.out))


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage(STAGE))
