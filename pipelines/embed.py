"""`twotower embed`: a Beam job that embeds ReQA candidates, Wikipedia passages or questions
with an exported SavedModel and writes `embeddings/*.parquet` shards.

  rows of candidates.parquet | passages/*.parquet | questions-<split>.parquet
    --ToExamples-->    (id, (title, text)) or (id, (query,))   [bad rows counted, skipped]
    --RunInference-->  (id, float32[d])     KeyedModelHandler(SavedModelHandler), BatchElements
    --ToTables-->      pyarrow Tables       contracts.embedding_schema(d, id_type), columnar
    --WriteToParquetBatched-> OUT/embeddings-SSSSS-of-NNNNN.parquet, OUT/stats.json

Why a handler of our own: Beam's stock TensorFlow handler (`TFModelHandlerTensor`) loads
through `keras.models.load_model`, which under Keras 3 rejects SavedModels, and it imports
tensorflow_hub; our export is a plain SavedModel whose signatures take raw strings.
`SavedModelHandler` is a `ModelHandler` that calls `tf.saved_model.load` and one named
signature, so RunInference's batching (BatchElements), model sharing and metrics all apply.

Document ids are int64 (candidate_id, or contracts.passage_uid(page_id, passage_id)); question
ids are strings. Consumers of a tensorflow-text export need `import tensorflow_text` before
loading: the handler does it.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.ml.inference.base import KeyedModelHandler, ModelHandler, RunInference

from twotower import contracts
from twotower import io as tio
from twotower import texts
from twotower.contracts import counters

logger = logging.getLogger(__name__)

#: Shards are `<out>/embeddings-SSSSS-of-NNNNN.parquet`.
EMBEDDINGS_PREFIX = "embeddings"
EMBEDDINGS_SUFFIX = ".parquet"

COUNTER_READ = counters.EMBED_ROWS_READ
COUNTER_EMBEDDED = counters.EMBED_ROWS_EMBEDDED
COUNTER_SKIPPED_EMPTY = counters.EMBED_ROWS_SKIPPED_EMPTY
COUNTER_SKIPPED_BAD_ID = counters.EMBED_ROWS_SKIPPED_BAD_ID

#: Input names of the two signatures, in the order ToExamples packs them.
DOC_INPUTS = ("title", "text")
QUERY_INPUTS = ("query",)


def embeddings_pattern(directory: str) -> str:
  return f"{directory.rstrip('/')}/*{EMBEDDINGS_SUFFIX}"


# ---------------------------------------------------------------------------------------------
# The model handler.
# ---------------------------------------------------------------------------------------------


class _LoadedSignature:
  """A signature plus the loaded object that owns its variables (a bare signature whose
  SavedModel object is garbage-collected loses its weights)."""

  def __init__(self, loaded: Any, fn: Callable):
    self.loaded = loaded
    self.fn = fn

  def __call__(self, **inputs):
    return self.fn(**inputs)


def load_signature(model_path: str, signature: str) -> _LoadedSignature:
  """Loads one signature of a SavedModel (after `import tensorflow_text` for its custom ops)."""
  import tensorflow as tf
  try:
    import tensorflow_text  # noqa: F401  (registers the tf-text ops an export may use)
  except ImportError:  # a model without tf-text ops still loads
    logger.warning("tensorflow_text is not importable; a tf-text export will fail to load")
  loaded = tf.saved_model.load(model_path)
  if signature not in loaded.signatures:
    raise ValueError(f"{model_path}: no signature {signature!r}; it has "
                     f"{sorted(loaded.signatures)}")
  return _LoadedSignature(loaded, loaded.signatures[signature])


def embedding_dim(model_path: str, signature: str) -> int:
  """d of a signature's `embedding` output: read from saved_model.pb's signature def (no
  variable is loaded), else from one call on one row."""
  try:
    from tensorflow.python.saved_model import loader_impl  # pylint: disable=g-direct-tensorflow-import
    sig = loader_impl.parse_saved_model(model_path).meta_graphs[0].signature_def[signature]
    dims = sig.outputs[contracts.EMBEDDING_OUTPUT].tensor_shape.dim
    if len(dims) == 2 and dims[-1].size > 0:
      return int(dims[-1].size)
  except (ImportError, KeyError, IndexError, OSError) as e:  # fall back to a real call
    logger.debug("no static embedding dim in %s (%s)", model_path, e)
  import tensorflow as tf
  model = load_signature(model_path, signature)
  spec = model.fn.structured_outputs.get(contracts.EMBEDDING_OUTPUT)
  if spec is None:
    raise ValueError(f"{model_path}: signature {signature!r} has no "
                     f"{contracts.EMBEDDING_OUTPUT!r} output")
  names = sorted(model.fn.structured_input_signature[1])
  out = model(**{n: tf.constant(["probe"]) for n in names})[contracts.EMBEDDING_OUTPUT]
  return int(out.shape[-1])


class SavedModelHandler(ModelHandler[tuple, np.ndarray, _LoadedSignature]):
  """RunInference handler for one string signature of a SavedModel.

  Examples are tuples of strings, one per signature input (`input_names` order); a batch of
  them becomes one call `signature(name=string[batch], ...)`, and each example's prediction
  is its row of `embedding`, float32[d].
  """

  def __init__(self, model_path: str, signature: str, input_names: Sequence[str], *,
               min_batch_size: int = 256, max_batch_size: int = 256,
               large_model: bool = False, model_copies: Optional[int] = None):
    super().__init__(min_batch_size=min_batch_size, max_batch_size=max_batch_size,
                     large_model=large_model, model_copies=model_copies)
    self._model_path = model_path
    self._signature = signature
    self._input_names = tuple(input_names)

  def load_model(self) -> _LoadedSignature:
    return load_signature(self._model_path, self._signature)

  def run_inference(self, batch: Sequence[tuple], model: _LoadedSignature,
                    inference_args: Optional[dict[str, Any]] = None) -> Iterable[np.ndarray]:
    import tensorflow as tf
    columns = list(zip(*batch))  # one tuple of strings per input
    inputs = {name: tf.constant(col, dtype=tf.string)
              for name, col in zip(self._input_names, columns)}
    embeddings = model(**inputs)[contracts.EMBEDDING_OUTPUT].numpy()  # float32[batch, d]
    return list(embeddings)

  def get_num_bytes(self, batch: Sequence[tuple]) -> int:
    return sum(len(s) for example in batch for s in example)

  def get_metrics_namespace(self) -> str:
    return "twotower_runinference"


# ---------------------------------------------------------------------------------------------
# Rows -> examples.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class InputSpec:
  """What to read and how a row becomes (id, inputs) for one signature."""
  kind: str                   # "candidates" | "passages" | "questions"
  pattern: str                # file or glob
  columns: tuple[str, ...]    # Parquet columns read
  signature: str              # contracts.DOC_SIGNATURE or QUERY_SIGNATURE
  input_names: tuple[str, ...]
  id_type: pa.DataType
  doc_text: str = texts.DEFAULT_DOC_TEXT


def input_spec(kind: str, path: str, doc_text: str = texts.DEFAULT_DOC_TEXT) -> InputSpec:
  if kind == "candidates":
    return InputSpec(kind, path, ("candidate_id", "sentence", "passage", "title"),
                     contracts.DOC_SIGNATURE, DOC_INPUTS, pa.int64(), doc_text)
  if kind == "passages":
    pattern = path if path.endswith(".parquet") else f"{path.rstrip('/')}/*.parquet"
    return InputSpec(kind, pattern, ("page_id", "passage_id", "title", "text"),
                     contracts.DOC_SIGNATURE, DOC_INPUTS, pa.int64(), doc_text)
  if kind == "questions":
    return InputSpec(kind, path, ("question_id", "question"), contracts.QUERY_SIGNATURE,
                     QUERY_INPUTS, pa.string(), doc_text)
  raise ValueError(f"unknown input kind {kind!r}")


def row_to_example(spec: InputSpec, row: dict) -> tuple[Any, tuple] | str:
  """(id, inputs) for a row, or the name of the skip reason ("bad_id" / "empty")."""
  if spec.kind == "candidates":
    uid = row.get("candidate_id")
    # The same layout BM25 and fine-tuning use; a candidate whose layout is empty is skipped.
    text = texts.candidate_doc_text(row.get("sentence") or "", row.get("passage") or "",
                                    spec.doc_text)
    inputs = (row.get("title") or "", text)
  elif spec.kind == "passages":
    if row.get("page_id") is None or row.get("passage_id") is None:
      return "bad_id"
    try:
      uid = contracts.passage_uid(row["page_id"], row["passage_id"])
    except ValueError:
      return "bad_id"
    text = (row.get("text") or "").strip()
    inputs = (row.get("title") or "", text)
  else:
    uid = row.get("question_id")
    text = (row.get("question") or "").strip()
    inputs = (text,)
  if uid is None or uid == "":
    return "bad_id"
  if not text:
    return "empty"
  return uid, inputs


class _ToExamples(beam.DoFn):
  """row dict -> (id, inputs); rows without id or text are counted and skipped."""

  def __init__(self, spec: InputSpec):
    self._spec = spec
    self._read = tio.counter(COUNTER_READ)
    self._skipped = {"empty": tio.counter(COUNTER_SKIPPED_EMPTY),
                     "bad_id": tio.counter(COUNTER_SKIPPED_BAD_ID)}

  def process(self, row: dict) -> Iterator[tuple[Any, tuple]]:
    self._read.inc()
    result = row_to_example(self._spec, row)
    if isinstance(result, str):
      self._skipped[result].inc()
      logger.warning("%s: skipped a row (%s): %s", self._spec.pattern, result,
                     {k: row.get(k) for k in self._spec.columns[:2]})
      return
    yield result


class _ToTables(beam.DoFn):
  """A batch of (id, float32[d]) -> one pyarrow Table of the embedding schema (columnar:
  no per-row conversion on the write path)."""

  def __init__(self, schema: pa.Schema):
    self._schema = schema
    self._embedded = tio.counter(COUNTER_EMBEDDED)

  def process(self, batch: list[tuple[Any, np.ndarray]]) -> Iterator[pa.Table]:
    self._embedded.inc(len(batch))
    ids = pa.array([uid for uid, _ in batch], type=self._schema.field("id").type)
    vectors = np.stack([v for _, v in batch]).astype(np.float32, copy=False)
    embeddings = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), vectors.shape[1])
    yield pa.Table.from_arrays([ids, embeddings], schema=self._schema)


class Embed(beam.PTransform):
  """PCollection of input rows (dicts) -> PCollection of pyarrow Tables of the embedding
  schema (contracts.embedding_schema(dim, spec.id_type)), up to `table_rows` rows each."""

  def __init__(self, spec: InputSpec, handler: SavedModelHandler, dim: int,
               table_rows: int = 4096):
    super().__init__()
    self._spec = spec
    self._handler = handler
    self._schema = contracts.embedding_schema(dim, spec.id_type)
    self._table_rows = table_rows

  def expand(self, rows):
    # (id, tuple of strings)
    examples = rows | "ToExamples" >> beam.ParDo(_ToExamples(self._spec))
    # (id, float32[d])
    embedded = examples | "RunInference" >> RunInference(KeyedModelHandler(self._handler))
    # list of (id, float32[d])
    batches = embedded | "BatchForWrite" >> beam.BatchElements(
        min_batch_size=self._table_rows, max_batch_size=self._table_rows)
    # pyarrow.Table {"id", "embedding"}
    return batches | "ToTables" >> beam.ParDo(_ToTables(self._schema))


# ---------------------------------------------------------------------------------------------
# Entry point.
# ---------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      prog="twotower embed", description=__doc__.split("\n\n")[0],
      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument("--model", required=True, help="exported SavedModel directory")
  p.add_argument("--out", required=True,
                 help="embeddings directory: writes embeddings-*.parquet and stats.json")
  src = p.add_mutually_exclusive_group(required=True)
  src.add_argument("--candidates", help="ReQA candidates.parquet (document signature)")
  src.add_argument("--passages", help="passages/ directory or glob (document signature)")
  src.add_argument("--questions", help="questions-<split>.parquet (query signature)")
  p.add_argument("--doc_text", choices=texts.DOC_TEXT_MODES, default=texts.DEFAULT_DOC_TEXT,
                 help="layout of a candidate's document text (twotower.texts)")
  p.add_argument("--batch_size", type=int, default=256,
                 help="largest batch per SavedModel call (BatchElements max_batch_size)")
  p.add_argument("--min_batch_size", type=int, default=None,
                 help="smallest batch BatchElements forms (default: --batch_size, fixed batches)")
  p.add_argument("--num_shards", type=int, default=0,
                 help="output shards (0: the runner decides)")
  p.add_argument("--large_model", action="store_true",
                 help="share one model across worker processes (RunInference large_model)")
  p.add_argument("--model_copies", type=int, default=None,
                 help="exact number of model copies per machine (RunInference model_copies)")
  return p


def build_pipeline(pipeline: beam.Pipeline, spec: InputSpec, model: str, out: str, dim: int,
                   handler: SavedModelHandler, num_shards: int = 0) -> None:
  # row dicts of the input Parquet
  rows = pipeline | "ReadRows" >> beam.io.ReadFromParquet(spec.pattern,
                                                          columns=list(spec.columns))
  # pyarrow Tables of the embedding schema
  tables = rows | "Embed" >> Embed(spec, handler, dim)
  tables | "WriteEmbeddings" >> beam.io.WriteToParquetBatched(
      f"{out.rstrip('/')}/{EMBEDDINGS_PREFIX}",
      schema=contracts.embedding_schema(dim, spec.id_type),
      file_name_suffix=EMBEDDINGS_SUFFIX, num_shards=num_shards)


def run(argv: list[str] | None = None) -> None:
  args, beam_args = _parser().parse_known_args(None if argv is None else list(argv))
  kind, path = next((k, getattr(args, k)) for k in ("candidates", "passages", "questions")
                    if getattr(args, k))
  spec = input_spec(kind, path, args.doc_text)
  tio.match_files(spec.pattern)  # a clear error now rather than an empty job
  dim = embedding_dim(args.model, spec.signature)
  min_batch = args.min_batch_size or args.batch_size
  tio.log_settings("embed", {"model": args.model, "signature": spec.signature, "input": kind,
                             "pattern": spec.pattern, "dim": dim, "doc_text": args.doc_text,
                             "batch": f"{min_batch}..{args.batch_size}", "out": args.out})
  handler = SavedModelHandler(args.model, spec.signature, spec.input_names,
                              min_batch_size=min_batch, max_batch_size=args.batch_size,
                              large_model=args.large_model, model_copies=args.model_copies)
  tio.makedirs(args.out)
  pipeline = tio.make_pipeline(beam_args)
  build_pipeline(pipeline, spec, args.model, args.out, dim, handler, args.num_shards)
  result = pipeline.run()
  result.wait_until_finish()
  stats = tio.beam_counters(result)
  tio.write_json(f"{args.out.rstrip('/')}/{contracts.STATS_FILE}", stats)
  logger.info("embed: %s", stats)


if __name__ == "__main__":
  run()
