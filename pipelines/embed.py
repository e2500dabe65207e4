"""`twotower embed`: a Beam job that embeds ReQA candidates, Wikipedia passages or questions
with an exported SavedModel and writes `embeddings/*.parquet` shards.

  rows of candidates.parquet | passages/*.parquet | questions-<split>.parquet
    --ToExamples-->    (id, (title, text)) or (id, (query,))   [bad rows counted, skipped]
    --RunInference-->  (id, float32[d])     KeyedModelHandler(SavedModelHandler), BatchElements
    --ToTables-->      pyarrow Tables       contracts.embedding_schema(d, id_type), columnar
    --WriteToParquetBatched-> OUT/embeddings-SSSSS-of-NNNNN.parquet, OUT/stats.json
  beside it, the examples' digest (and, for an input shard, the whole input's):
    --*Digests--> (what, sha256 bytes)  --SumDigests--> {what: RowsDigest record}
  then OUT/vectors.json: the model's fingerprint, the id set (read back from the written
  shards) and the digest of the rows embedded (twotower.core.fingerprints); `index`, `search` and
  `bundle` refuse vectors of two models, `bundle` vectors of other text than its documents'

Why a handler of our own: Beam's stock TensorFlow handler (`TFModelHandlerTensor`) loads
through `keras.models.load_model`, which under Keras 3 rejects SavedModels, and it imports
tensorflow_hub; our export is a plain SavedModel whose signatures take raw strings.
`SavedModelHandler` is a `ModelHandler` that calls `tf.saved_model.load` and one named
signature, so RunInference's batching (BatchElements), model sharing and metrics all apply.

Input shards (`--num_input_shards N --input_shard i`, as Tevatron's and DPR's static shard
flags): a run embeds only the rows whose id hashes to shard i (row_shard), into its own --out
with its own manifest, vectors.json and stats.json (which records the shard and its input);
`index`, `search` and `bundle` read the N folders as one set (eval.embeddings).

What a row's digest covers (twotower.core.fingerprints.RowsDigest, a sum of per-row sha256s):
`vectors.json` `rows` the id and the text fields the tower read (`example_values`) of each
row embedded; an input shard's `input` every row of the whole input, embedded by this shard
or not, by the columns embedding reads (`input_values`). Every shard reads every row anyway,
so each computes the same input digest at the cost of one sha256 a row, in the job, on its
workers: `index` then tells shards of two inputs apart by comparing N small records, without
reading any input, and `bundle` checks the text of its documents against `rows`.

Document ids are int64 (candidate_id, or contracts.passage_uid(page_id, passage_id)); question
ids are strings. Consumers of a tensorflow-text export need `import tensorflow_text` before
loading: the handler does it. Tests and benchmarks use a small stand-in SavedModel with the
same signatures (twotower.testing.embed_standin).

`run(EmbedConfig)` is the typed entry point; `twotower embed` (twotower.commands.embed) is its
flag parser, and passes every flag it does not know as a Beam pipeline option.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import sys
from typing import Any, Iterable, Iterator, Optional, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.ml.inference.base import KeyedModelHandler, ModelHandler, RunInference

from twotower.core import contracts
from twotower.core import fingerprints
from twotower.core import files as tio
from twotower.core import outputs
from twotower.core import tower_text as texts
from twotower.core.contracts import codecs
from twotower.core.contracts import counters as C
from twotower.pipelines.shared import beam_jobs
from twotower.core.saved_model import LoadedSignature, embedding_dim, load_signature

logger = logging.getLogger(__name__)

#: What `twotower embed` reads: ReQA candidates and Wikipedia passages go through the document
#: signature, questions through the query signature.
KINDS = ("candidates", "passages", "questions")
#: Input names of the two signatures, in the order ToExamples packs them.
DOC_INPUTS = ("title", "text")
QUERY_INPUTS = ("query",)
#: Why a row is skipped (row_to_example) -> its counter.
SKIP_COUNTERS = {"empty": C.EMBED_ROWS_SKIPPED_EMPTY, "bad_id": C.EMBED_ROWS_SKIPPED_BAD_ID}


@dataclasses.dataclass(frozen=True)
class EmbedConfig:
  """Everything `twotower embed` needs besides Beam's own options."""
  model: str                  # exported SavedModel directory
  out: str                    # embeddings directory (embeddings-*.parquet, stats.json)
  kind: str                   # one of KINDS
  path: str                   # candidates.parquet, passages (contracts.passages_pattern), or
                              # questions-<split>.parquet
  doc_text: str = texts.DEFAULT_DOC_TEXT  # layout of a candidate's document text
  batch_size: int = 256       # largest batch per SavedModel call
  min_batch_size: int = 0     # smallest batch BatchElements forms (0: batch_size, fixed)
  num_shards: int = 0         # output shards (0: the runner decides)
  large_model: bool = False   # one model shared across worker processes
  model_copies: Optional[int] = None  # exact model copies per machine
  overwrite: bool = False     # replace an --out that holds another run (outputs.claim)
  beam_args: tuple[str, ...] = ()  # Beam pipeline options (--runner, --direct_num_workers ...)
  num_input_shards: int = 1   # N > 1: embed only the rows of input shard `input_shard` of N
  input_shard: int = 0        # (row_shard); each shard its own --out, read together by
                              # eval.embeddings.embedding_files


# ---------------------------------------------------------------------------------------------
# The model handler.
# ---------------------------------------------------------------------------------------------


class SavedModelHandler(ModelHandler[tuple, np.ndarray, LoadedSignature]):
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

  def load_model(self) -> LoadedSignature:
    return load_signature(self._model_path, self._signature)

  def run_inference(self, batch: Sequence[tuple], model: LoadedSignature,
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
  kind: str                   # one of KINDS
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
    return InputSpec(kind, contracts.passages_pattern(path),
                     ("page_id", "passage_id", "title", "text"),
                     contracts.DOC_SIGNATURE, DOC_INPUTS, pa.int64(), doc_text)
  if kind == "questions":
    return InputSpec(kind, path, ("question_id", "question"), contracts.QUERY_SIGNATURE,
                     QUERY_INPUTS, pa.string(), doc_text)
  raise ValueError(f"unknown input kind {kind!r}; expected one of {KINDS}")


def row_id(spec: InputSpec, row: dict) -> Any:
  """The id a row is embedded under, or None when it has no usable one (a bad id)."""
  if spec.kind == "candidates":
    uid = row.get("candidate_id")
  elif spec.kind == "passages":
    if row.get("page_id") is None or row.get("passage_id") is None:
      return None
    try:
      uid = contracts.passage_uid(row["page_id"], row["passage_id"])
    except ValueError:
      return None
  else:
    uid = row.get("question_id")
  return None if uid is None or uid == "" else uid


def row_to_example(spec: InputSpec, row: dict) -> tuple[Any, tuple] | str:
  """(id, inputs) for a row, or the name of the skip reason ("bad_id" / "empty")."""
  uid = row_id(spec, row)
  if uid is None:
    return "bad_id"
  if spec.kind == "candidates":
    # The same layout BM25 and fine-tuning use; a candidate whose layout is empty is skipped.
    text = texts.candidate_doc_text(row.get("sentence") or "", row.get("passage") or "",
                                    spec.doc_text)
    inputs = (row.get("title") or "", text)
  elif spec.kind == "passages":
    text = (row.get("text") or "").strip()
    inputs = (row.get("title") or "", text)
  else:
    text = (row.get("question") or "").strip()
    inputs = (text,)
  if not text:
    return "empty"
  return uid, inputs


def row_shard(uid: Any, num_shards: int) -> int:
  """The input shard (0..num_shards-1) of a row whose id is `uid` (None: no usable id).

  Why a hash of the id, not the row's position: a row's shard then depends on nothing but
  its id -- not on how the input is cut into files, the order a file matcher lists them in,
  their sizes, or the runner's bundles -- so N machines that each see the same rows agree
  without agreeing on anything else, and rows of one id stay together. The price: each
  shard reads every row (only the columns embedding needs) and keeps its own, cheap next to
  running the model. blake2b, not `hash()`: Python salts str hashes per process. Rows
  without a usable id go to shard 0, which counts them (bad ids) once for the whole input."""
  if num_shards <= 1 or uid is None:
    return 0
  key = (uid.encode("utf-8") if isinstance(uid, str)
         else int(uid).to_bytes(8, "little", signed=True))
  return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") % num_shards


def input_values(spec: InputSpec, row: dict) -> tuple:
  """What an input row's digest covers: the columns embedding reads, in `spec` order (the
  id's columns and the text; raw, so that any change to them changes the input)."""
  return tuple(row.get(column) for column in spec.columns)


def example_values(uid: Any, inputs: tuple) -> tuple:
  """What an embedded row's digest covers: its id and the strings the tower read."""
  return (uid, *inputs)


def input_digest(spec: InputSpec, rows: Iterable[dict]) -> fingerprints.RowsDigest:
  """The digest of a whole input, as every input shard's job computes it (`input_values`
  of every row): for a check outside the job, streamed."""
  digest = fingerprints.RowsDigest()
  for row in rows:
    digest.add(input_values(spec, row))
  return digest


def embedded_rows(spec: InputSpec, rows: Iterable[dict], num_shards: int = 1
                  ) -> Iterator[tuple[int, Any, tuple]]:
  """(input shard, id, example_values) of each row the job embeds, in the order of `rows`:
  the rows it skips (no id, no text) have no vector and no digest."""
  for row in rows:
    result = row_to_example(spec, row)
    if isinstance(result, str):
      continue
    uid, inputs = result
    yield row_shard(uid, num_shards), uid, example_values(uid, inputs)


def example_digests(spec: InputSpec, rows: Iterable[dict], num_shards: int = 1
                    ) -> list[fingerprints.RowsDigest]:
  """For each input shard 0..num_shards-1, the digest of the rows it embeds (the `rows` of
  its vectors.json), streamed."""
  digests = [fingerprints.RowsDigest() for _ in range(max(num_shards, 1))]
  for shard, _, values in embedded_rows(spec, rows, num_shards):
    digests[shard].add(values)
  return digests


class _SumDigests(beam.CombineFn):
  """Row sha256s (32 bytes) -> fingerprints.RowsDigest's record (count and sum mod 2^256).

  Order-free, so workers combine their parts in any order. The sum travels as 32 bytes, in
  the elements and in the (count, sum) accumulator alike: a 256-bit int could be given Beam's
  64-bit integer coder by type inference."""

  @staticmethod
  def _digest(accumulator: tuple[int, bytes]) -> fingerprints.RowsDigest:
    return fingerprints.RowsDigest(accumulator[0], int.from_bytes(accumulator[1], "big"))

  @staticmethod
  def _pair(digest: fingerprints.RowsDigest) -> tuple[int, bytes]:
    return digest.count, digest.total.to_bytes(32, "big")

  def create_accumulator(self) -> tuple[int, bytes]:
    return self._pair(fingerprints.RowsDigest())

  def add_input(self, accumulator: tuple[int, bytes], value: bytes) -> tuple[int, bytes]:
    return self._pair(self._digest(accumulator).add_hash(int.from_bytes(value, "big")))

  def merge_accumulators(self, accumulators: Iterable[tuple[int, bytes]]
                         ) -> tuple[int, bytes]:
    merged = fingerprints.RowsDigest()
    for accumulator in accumulators:
      merged.merge(self._digest(accumulator))
    return self._pair(merged)

  def extract_output(self, accumulator: tuple[int, bytes]) -> dict:
    return self._digest(accumulator).record()


#: The digests the job writes, while it runs, into --out (read, then removed, by `run`).
DIGESTS_FILE = ".digests.json"
#: Its keys: the rows embedded, and the whole input (input shards only).
EXAMPLES_KEY, INPUT_KEY = "examples", "input"


def _write_digests(digests: dict, path: str) -> None:
  tio.write_json(path, digests)


class _ToExamples(beam.DoFn):
  """row dict -> (id, inputs); rows without id or text are counted and skipped. With
  `num_shards` > 1, only the rows of input shard `shard` (row_shard) are read (counted)."""

  def __init__(self, spec: InputSpec, shard: int = 0, num_shards: int = 1):
    self._spec = spec
    self._shard = shard
    self._num_shards = num_shards
    self._read = beam_jobs.counter(C.EMBED_ROWS_READ)
    self._skipped = {reason: beam_jobs.counter(name) for reason, name in SKIP_COUNTERS.items()}

  def process(self, row: dict) -> Iterator[tuple[Any, tuple]]:
    if (self._num_shards > 1
        and row_shard(row_id(self._spec, row), self._num_shards) != self._shard):
      # Another shard's row. (A bare `return`: Beam warns of `return <anything>` beside a
      # yield, a comment on that line included.)
      return
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
    self._embedded = beam_jobs.counter(C.EMBED_ROWS_EMBEDDED)

  def process(self, batch: list[tuple[Any, np.ndarray]]) -> Iterator[pa.Table]:
    self._embedded.inc(len(batch))
    ids = pa.array([uid for uid, _ in batch], type=self._schema.field("id").type)
    vectors = np.stack([v for _, v in batch]).astype(np.float32, copy=False)
    embeddings = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), vectors.shape[1])
    yield pa.Table.from_arrays([ids, embeddings], schema=self._schema)


class Embed(beam.PTransform):
  """PCollection of input rows (dicts) -> PCollection of pyarrow Tables of the embedding
  schema (contracts.embedding_schema(dim, spec.id_type)), up to `table_rows` rows each.

  With `digests` (a file path), the digests of the rows embedded and, for an input shard of
  several, of every input row are also written there as JSON ({EXAMPLES_KEY: RowsDigest
  record, INPUT_KEY: ...}; a key without rows is absent): no side input, one small file."""

  def __init__(self, spec: InputSpec, handler: SavedModelHandler, dim: int,
               table_rows: int = 4096, shard: int = 0, num_shards: int = 1,
               digests: Optional[str] = None):
    super().__init__()
    self._spec = spec
    self._shard = shard
    self._num_shards = num_shards
    self._handler = handler
    self._schema = contracts.embedding_schema(dim, spec.id_type)
    self._table_rows = table_rows
    self._digests = digests

  def _digest_rows(self, rows, examples) -> None:
    spec = self._spec
    # (what, sha256 bytes) for each row embedded, and each input row (an input shard's)
    hashes = [examples | "ExampleDigests" >> beam.Map(
        lambda e: (EXAMPLES_KEY, fingerprints.row_sha256(example_values(*e))))]
    if self._num_shards > 1:
      hashes.append(rows | "InputDigests" >> beam.Map(
          lambda row: (INPUT_KEY, fingerprints.row_sha256(input_values(spec, row)))))
    _ = (hashes | "FlattenDigests" >> beam.Flatten()
         | "SumDigests" >> beam.CombinePerKey(_SumDigests())
         | "DigestsToDict" >> beam.combiners.ToDict()
         | "WriteDigests" >> beam.Map(_write_digests, self._digests))

  def expand(self, rows):
    # (id, tuple of strings)
    examples = rows | "ToExamples" >> beam.ParDo(
        _ToExamples(self._spec, self._shard, self._num_shards))
    if self._digests:
      self._digest_rows(rows, examples)
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


def handler(config: EmbedConfig, spec: InputSpec) -> SavedModelHandler:
  """The RunInference handler of `config`'s model for `spec`'s signature."""
  return SavedModelHandler(config.model, spec.signature, spec.input_names,
                           min_batch_size=config.min_batch_size or config.batch_size,
                           max_batch_size=config.batch_size, large_model=config.large_model,
                           model_copies=config.model_copies)


def build(pipeline: beam.Pipeline, config: EmbedConfig, dim: int) -> None:
  """Adds the whole embedding job to `pipeline`, for a model whose embeddings have `dim`
  dimensions."""
  spec = input_spec(config.kind, config.path, config.doc_text)
  # row dicts of the input Parquet
  rows = pipeline | "ReadRows" >> beam.io.ReadFromParquet(spec.pattern,
                                                          columns=list(spec.columns))
  # pyarrow Tables of the embedding schema
  tables = rows | "Embed" >> Embed(spec, handler(config, spec), dim,
                                   shard=config.input_shard,
                                   num_shards=config.num_input_shards,
                                   digests=digests_path(config.out))
  _ = tables | "WriteEmbeddings" >> beam.io.WriteToParquetBatched(
      contracts.embeddings_prefix(config.out),
      schema=contracts.embedding_schema(dim, spec.id_type),
      file_name_suffix=contracts.EMBEDDINGS_SUFFIX, num_shards=config.num_shards)


def digests_path(out: str) -> str:
  return f"{out.rstrip('/')}/{DIGESTS_FILE}"


def read_digests(out: str) -> dict[str, fingerprints.RowsDigest]:
  """The digests the job wrote into `out` (Embed's `digests`); a kind without rows is an
  empty digest."""
  written = tio.read_json(digests_path(out))
  return {key: fingerprints.RowsDigest.of_record(written[key]) if key in written
          else fingerprints.RowsDigest() for key in (EXAMPLES_KEY, INPUT_KEY)}


def finish_stats(counters: dict[str, int], shard: Optional[dict] = None) -> dict:
  """stats.json: every counter, 0 for those nothing incremented; for one input shard of
  several, its record (input_shard_record) under contracts.EMBED_INPUT_SHARD_KEY."""
  stats: dict[str, Any] = dict(counters)
  for name in C.EMBED_ALWAYS:
    stats.setdefault(name, 0)
  if shard is not None:
    stats[contracts.EMBED_INPUT_SHARD_KEY] = shard
  return dict(sorted(stats.items()))


def input_record(spec: InputSpec, digest: fingerprints.RowsDigest) -> dict:
  """What an input shard embedded a part of: the kind, the document layout and the rows of
  the whole input by their content (`input_values`; input_digest), never by the names or
  the cut of its files: {"kind", "doc_text", "rows", "content_sha256"}. Every shard of one
  input records the same; eval.embeddings refuses shards whose records differ."""
  return {"kind": spec.kind, "doc_text": spec.doc_text, "rows": digest.count,
          "content_sha256": fingerprints.rows_sha256(f"{spec.kind}\0{spec.doc_text}", digest)}


def input_shard_record(config: EmbedConfig, spec: InputSpec,
                       digest: fingerprints.RowsDigest) -> dict:
  """Which shard a run embedded, of what: {"index": i, "count": N, "input": input_record}."""
  return {"index": config.input_shard, "count": config.num_input_shards,
          "input": input_record(spec, digest)}


def check(config: EmbedConfig) -> None:
  """A ValueError for settings the job cannot run with (before the model is loaded)."""
  if config.kind not in KINDS:
    raise ValueError(f"unknown input kind {config.kind!r}; expected one of {KINDS}")
  if config.doc_text not in texts.DOC_TEXT_MODES:
    raise ValueError(f"unknown doc text mode {config.doc_text!r}; expected one of "
                     f"{texts.DOC_TEXT_MODES}")
  if config.batch_size < 1 or config.min_batch_size < 0:
    raise ValueError(f"batch sizes must be positive, got {config.min_batch_size}.."
                     f"{config.batch_size}")
  if config.min_batch_size > config.batch_size:
    raise ValueError(f"min_batch_size {config.min_batch_size} > batch_size "
                     f"{config.batch_size}")
  if config.num_input_shards < 1 or not 0 <= config.input_shard < config.num_input_shards:
    raise ValueError(f"input shard {config.input_shard} of {config.num_input_shards}: needs "
                     "num_input_shards >= 1 and 0 <= input_shard < num_input_shards")


def run(config: EmbedConfig) -> outputs.StageResult:
  """Runs the job; writes embeddings-*.parquet, stats.json and vectors.json under
  `config.out`."""
  check(config)
  spec = input_spec(config.kind, config.path, config.doc_text)
  inputs = tio.match_files(spec.pattern)  # a clear error now rather than an empty job
  for path in inputs:
    # A candidates file given as --questions (or the reverse) reads no row and embeds
    # nothing, a warning per row: check the footer's columns against the flag.
    footer = tio.open_parquet(path)
    codecs.require_kind(path, footer.schema_arrow.names, config.kind, spec.columns)
  sharded = config.num_input_shards > 1
  dim = embedding_dim(config.model, spec.signature)
  model = fingerprints.model_record(config.model)
  tio.log_settings("twotower embed", {**dataclasses.asdict(config), "signature": spec.signature,
                                      "pattern": spec.pattern, "dim": dim})
  # Written beside --out, then moved into place: an index never reads two runs' shards.
  # Batch sizes and model copies change the speed, not the embeddings: not settings. An
  # unsharded run keeps the settings it had before input shards existed (its folder is
  # still this run's).
  unsharded = ("num_input_shards", "input_shard") if not sharded else ()
  settings = outputs.settings_of(config, skip=("batch_size", "min_batch_size", "large_model",
                                               "model_copies", *unsharded))
  with outputs.staged(config.out, "embed", settings, inputs=inputs,
                      overwrite=config.overwrite) as out:
    # Absolute paths: the workers may run in another directory (a worker pool).
    staged = tio.with_absolute_paths(dataclasses.replace(config, out=out), "out", "path", "model")
    digests: dict[str, fingerprints.RowsDigest] = {}

    def finish(counters: dict[str, int]) -> dict:
      # The job's digests are read before stats.json is written: it records the input's.
      digests.update(read_digests(out))
      return finish_stats(counters, input_shard_record(config, spec, digests[INPUT_KEY])
                          if sharded else None)

    stats = beam_jobs.run_beam_job(lambda pipeline: build(pipeline, staged, dim),
                                   config.beam_args, stats_dir=out, finish=finish)
    outputs.discard(digests_path(out))  # in vectors.json and stats.json now
    try:
      shards = tio.match_files(contracts.embeddings_pattern(out))
    except FileNotFoundError:  # nothing embedded: no shard
      shards = []
    fingerprints.write_record(fingerprints.folder_record_path(out), model,
                              fingerprints.ids_record(fingerprints.file_ids(shards)), dim,
                              rows=digests[EXAMPLES_KEY].record())
    if sharded and not stats.get(C.EMBED_ROWS_EMBEDDED, 0):
      # One shard of a small input may hold no row; the union is checked where it is read.
      logger.warning("%s: input shard %d of %d holds no row to embed", config.path,
                     config.input_shard, config.num_input_shards)
    elif not stats.get(C.EMBED_ROWS_EMBEDDED, 0):  # an empty output would "succeed" downstream
      raise ValueError(f"{config.path}: no row to embed ({stats.get(C.EMBED_ROWS_READ, 0)} "
                       f"read, {stats.get(C.EMBED_ROWS_SKIPPED_EMPTY, 0)} empty, "
                       f"{stats.get(C.EMBED_ROWS_SKIPPED_BAD_ID, 0)} with a bad id); "
                       f"{config.out} is left as it was")
  return outputs.StageResult.of(config.out, stats)


def summary_table(stats: dict, config: EmbedConfig) -> str:
  """The command's result: rows read, embedded and skipped, and where they went."""
  part = (f" (input shard {config.input_shard} of {config.num_input_shards})"
          if config.num_input_shards > 1 else "")
  return (f"{config.kind}{part}: {stats.get(C.EMBED_ROWS_EMBEDDED, 0)} of "
          f"{stats.get(C.EMBED_ROWS_READ, 0)} rows embedded (skipped: empty "
          f"{stats.get(C.EMBED_ROWS_SKIPPED_EMPTY, 0)}, bad id "
          f"{stats.get(C.EMBED_ROWS_SKIPPED_BAD_ID, 0)})\nwritten to "
          f"{contracts.embeddings_pattern(config.out)}, {contracts.STATS_FILE}, "
          f"{fingerprints.RECORD_FILE}")


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("embed"))
