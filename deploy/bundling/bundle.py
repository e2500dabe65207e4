"""`twotower bundle`: a retriever bundle, one directory holding everything a query needs.

    twotower bundle --model runs/ict --reqa reqa/squad --out bundles/squad \
        --tune_split validation-5
    twotower bundle --model runs/ict --passages pairs/ --out bundles/wiki --weight 0.5
    twotower bundle --model runs/ict --docs docs.jsonl --out bundles/docs --weight 0.5
    twotower bundle update bundles/docs --add new.jsonl --delete gone.txt --out bundles/docs-2

    BUNDLE/manifest.json    versions, embedding dim, counts, model (path and fingerprint),
                            index type, the hybrid's weight (and where it was tuned), the id
                            set of the store, the index and Lucene (each read back from the
                            part), every file's size and sha256: contracts.bundle_manifest
    BUNDLE/query_encoder/   the query tower: the export's SavedModel (tokenizer in the graph)
    BUNDLE/index.faiss      FAISS index of the documents' embeddings (ids = document ids)
    BUNDLE/store.sqlite     document id -> title, text, sentence, page id (deploy.serving.store)
    BUNDLE/lucene/          Lucene index for BM25, built as `twotower bm25` builds it
    BUNDLE/metadata/        per document: page id, title, section path, source, wiki,
                            language, input (contracts.bundle_metadata): what filters name

Documents are the candidates of a ReQA directory (`--reqa`: what the evaluation scores, so
the bundle's answers can be checked against the batch path), the passages of a pair
pipeline output (`--passages`), or JSON lines (`--docs`, deploy.bundling.documents: an id,
a title, a text and any fields of their own, which become filterable metadata; embedded here
in this process, bad lines counted and skipped). `twotower bundle update` (deploy.bundling.
update) adds and deletes documents of a bundle into a new one. Embeddings come from `--embeddings` (a `twotower embed`
output of the same model and documents: its `vectors.json` must name the bundle's model
by fingerprint, its digest of the rows embedded must be that of the documents' ids and text
as the embedding job reads them, input shards must be of one input, and the index built from
them must hold exactly the documents' ids) or are made here with the same Beam job. The
hybrid's
weight is given (`--weight`) or tuned on a validation split of the ReQA directory
(`--tune_split`), with the bundle's own dense and BM25 searches and `eval.fusion.tune_weight`,
the function `twotower fuse --weight auto` uses.

The bundle is an output like every stage's (twotower.core.outputs): built in a folder beside
`--out` and moved into place when whole, so a reader never sees half a bundle, with the
stage's manifest (`_twotower.json`) beside the bundle's own; a folder of another bundle run
is refused unless `--overwrite`, which removes only the files that run's manifest lists.
`run(BundleConfig) -> BundleResult` is the typed entry point.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import shutil
import sys
from typing import Iterator, Optional

import numpy as np

from twotower.core import contracts
from twotower.core import fingerprints
from twotower.core import files as tio
from twotower.core import lucene
from twotower.core import outputs
from twotower.core import tower_text as texts
from twotower.core.contracts import bundle_manifest
from twotower.core.contracts import bundle_metadata
from twotower.core.contracts.bundle_manifest import BundleManifest, IdSet
from twotower.deploy.bundling import documents as documents_lib
from twotower.deploy.bundling import index_part
from twotower.deploy.serving import store as store_lib
from twotower.eval import embeddings as embeddings_lib
from twotower.eval import faiss_index

logger = logging.getLogger(__name__)

#: The stage name its outputs manifest records (twotower.core.outputs).
STAGE = "bundle"
#: Weight of BM25 in the hybrid when nothing tunes it (stated in the manifest as untuned).
DEFAULT_WEIGHT = 0.5
#: Candidates each side contributes to the hybrid: as `twotower fuse` fuses 100-deep runs.
DEFAULT_HYBRID_DEPTH = 100


@dataclasses.dataclass(frozen=True)
class ChosenWeight:
  """Where a given weight was chosen, when a stage before the bundle tuned it (the grid's
  fuse cell): the manifest records it as the hybrid's `tuned_on`, `metric` and `partner`."""
  split: Optional[str]
  metric: Optional[str]
  partner: Optional[str] = None  # the dense row the fuse cell kept


@dataclasses.dataclass(frozen=True)
class BundleConfig:
  """Flags of `twotower bundle`."""
  model: str                        # a training run dir or its export's SavedModel
  out: str                          # the bundle directory
  reqa: str = ""                    # documents = this ReQA dir's candidates, or
  passages: str = ""                # documents = this pair pipeline output's passages, or
  docs: str = ""                    # documents = these JSON lines (deploy.bundling.documents)
  embeddings: str = ""              # the documents' embeddings (else embedded here, Beam)
  doc_text: str = texts.DEFAULT_DOC_TEXT  # a candidate's text, as fine-tuning and BM25 read it
  index: faiss_index.IndexSpec = faiss_index.IndexSpec()  # default flat: exact search
  k1: float = lucene.DEFAULT_K1     # BM25 (Pyserini's defaults, as `twotower bm25`)
  b: float = lucene.DEFAULT_B
  weight: Optional[float] = None    # BM25's weight in the hybrid; None: tune or default
  tune_split: str = ""              # a validation split of `reqa` to tune the weight on
  tune_metric: str = contracts.MEAN_RECALL  # the mean of R@1..100 (eval.fusion)
  hybrid_depth: int = DEFAULT_HYBRID_DEPTH
  onnx: bool = False                # also the query tower as ONNX (query_onnx/): a service
                                    # that needs no TensorFlow (model.export_hf)
  chosen_weight: Optional[ChosenWeight] = None  # where `weight` was tuned (Python API only)
  overwrite: bool = False
  beam_args: tuple[str, ...] = ()

  def __post_init__(self):
    if sum(map(bool, (self.reqa, self.passages, self.docs))) != 1:
      raise ValueError("give the documents as exactly one of --reqa DIR, --passages DIR or "
                       "--docs FILE")
    if self.docs and self.embeddings:
      raise ValueError("--docs documents are embedded here: --embeddings takes a `twotower "
                       "embed` output of --reqa or --passages")
    if self.tune_split and not self.reqa:
      raise ValueError("--tune_split needs --reqa (the split's questions live there)")
    if self.tune_split and self.weight is not None:
      raise ValueError("give --weight or --tune_split, not both")
    if self.weight is not None and not 0.0 <= self.weight <= 1.0:
      raise ValueError(f"--weight {self.weight} is not in [0, 1]")
    if self.hybrid_depth < 1:
      raise ValueError(f"--hybrid_depth must be >= 1, got {self.hybrid_depth}")
    if self.chosen_weight is not None and self.weight is None:
      raise ValueError("chosen_weight says where a given weight was tuned: give the weight")


@dataclasses.dataclass(frozen=True)
class BundleResult:
  path: str
  manifest: BundleManifest


# ---------------------------------------------------------------------------------------------
# Documents: what the store, the FAISS index and Lucene hold, under one id.
# ---------------------------------------------------------------------------------------------


def _parquet_rows(pattern: str, columns: list[str]) -> Iterator[dict]:
  """Rows of `columns`; a column a file lacks (`section`, in files written before it) is
  left out of its rows."""
  for path in tio.match_files(pattern):
    table = tio.open_parquet(path)
    present = [c for c in columns if c in table.schema_arrow.names]
    for batch in table.iter_batches(batch_size=8192, columns=present):
      yield from batch.to_pylist()


def iter_documents(config: BundleConfig) -> Iterator[store_lib.Document]:
  """The bundle's documents, streamed, with the ids the embedding job gives them."""
  for document, _ in iter_documents_with_fields(config):
    yield document


def iter_documents_with_fields(config: BundleConfig,
                               writer: Optional[bundle_metadata.MetadataWriter] = None
                               ) -> Iterator[tuple[store_lib.Document, dict]]:
  """(document, its metadata fields) of the bundle's documents, streamed: what the pipeline
  knows of each (contracts.bundle_metadata.BUILTIN_FIELDS; None where it knows nothing), and
  a JSONL document's own fields (checked by `writer`)."""
  if config.docs:
    for document in documents_lib.read_jsonl(config.docs, documents_lib.DOCUMENTS,
                                             config.doc_text, writer, strict=False):
      yield document.row, {"input": config.docs, **document.fields}
  elif config.reqa:
    for row in _parquet_rows(contracts.candidates_path(config.reqa),
                             ["candidate_id", "sentence", "passage", "title", "source",
                              "section"]):
      cid = int(row["candidate_id"])
      # Held-out benchmark candidates are whole passages, id = passage_uid(page, passage);
      # SQuAD/NQ candidates carry no page id.
      page = (contracts.passage_uid_page(cid) if row["source"] == contracts.HELDOUT_SOURCE
              else None)
      document = store_lib.Document(cid, row["title"] or "", row["passage"] or "",
                                    row["sentence"] or "", page, row["source"] or "",
                                    row.get("section") or "")
      yield document, {"page_id": page, "title": document.title,
                       "section": row.get("section"), "source": document.source or None}
  else:
    inputs = PageInputs(config.passages)
    for row in _parquet_rows(contracts.passages_pattern(config.passages),
                             ["page_id", "passage_id", "title", "text", "section"]):
      document = store_lib.Document(contracts.passage_uid(row["page_id"], row["passage_id"]),
                                    row["title"] or "", row["text"] or "", "",
                                    int(row["page_id"]), contracts.WIKIPEDIA_SOURCE,
                                    row.get("section") or "")
      yield document, {"page_id": document.page_id, "title": document.title,
                       "section": row.get("section"), "source": document.source,
                       **inputs.of(document.page_id)}


class PageInputs:
  """Which wiki and which input of a pair pipeline output a page comes from: its page id's id
  space (pipelines.wiki.inputs) against the output's `--dump` list (its config.json), each
  dump's wiki read from its <siteinfo>. Empty when the inputs are no longer where the run read
  them (logged once): the pages keep every other field."""

  def __init__(self, pairs_dir: str):
    self._spaces: dict[int, dict] = {}
    self._files = None
    config_path = contracts.pairs_config_path(pairs_dir)
    dump = (tio.read_json(config_path).get("dump", "") if os.path.isfile(config_path)
            else "")
    if not dump:
      return
    from twotower.pipelines.wiki import inputs  # pylint: disable=import-outside-toplevel
    self._inputs = inputs
    try:
      self._files = inputs.match_inputs(dump)
    except (ValueError, OSError) as e:
      logger.warning("%s: the pair pipeline's inputs (%s) cannot be read (%s): documents are "
                     "bundled without their wiki and input", pairs_dir, dump, e)

  def of(self, page_id: int) -> dict:
    if self._files is None:
      return {}
    space = self._inputs.id_space(page_id)
    if space not in self._spaces:
      files = [f for f in self._files if self._inputs.id_space(f.id_offset) == space]
      wiki = next((f.wiki for f in files if f.wiki), "")
      patterns = list(dict.fromkeys(f.pattern for f in files))
      self._spaces[space] = {"wiki": wiki or None,
                             "language": bundle_metadata.language_of(wiki) or None,
                             "input": ",".join(patterns) or None}
    return self._spaces[space]


def lucene_documents(config: BundleConfig) -> Iterator[dict]:
  """Lucene's JsonCollection documents: for ReQA candidates exactly `twotower bm25`'s (the
  same text, the same order), for passages the title and the passage."""
  if config.reqa:
    yield from lucene.candidate_documents(config.reqa, config.doc_text)
    return
  for d in sorted(iter_documents(config), key=lambda d: d.id):
    yield {"id": str(d.id), "contents": documents_lib.lucene_contents(d, _kind(config),
                                                                      config.doc_text)}


def _kind(config: BundleConfig) -> str:
  return (documents_lib.CANDIDATES if config.reqa else documents_lib.PASSAGES
          if config.passages else documents_lib.DOCUMENTS)


# ---------------------------------------------------------------------------------------------
# Parts.
# ---------------------------------------------------------------------------------------------


def resolve_saved_model(model: str) -> str:
  """A training run dir -> its export's SavedModel; a SavedModel dir as it is."""
  if os.path.isfile(os.path.join(model, "saved_model.pb")):
    return model
  exported = contracts.saved_model_path(model)
  if os.path.isfile(os.path.join(exported, "saved_model.pb")):
    return exported
  raise FileNotFoundError(f"{model}: neither a SavedModel nor a training run with "
                          f"{exported}/saved_model.pb (was the run exported?)")


def _embed(config: BundleConfig, saved_model: str, out: str) -> str:
  """The documents' embeddings, made here with the embedding job into `out`."""
  from twotower.pipelines import embed  # pylint: disable=import-outside-toplevel
  if config.reqa:
    job = embed.EmbedConfig(model=saved_model, out=out, kind="candidates",
                            path=contracts.candidates_path(config.reqa),
                            doc_text=config.doc_text, beam_args=config.beam_args)
  else:
    job = embed.EmbedConfig(model=saved_model, out=out, kind="passages",
                            path=config.passages, beam_args=config.beam_args)
  embed.run(job)
  return out


def _build_index(config: BundleConfig, embeddings: str, path: str
                 ) -> bundle_manifest.IndexPart:
  """The `twotower index` stage into the bundle (with `ivfpq_rerank`, its float32 vectors
  beside the index: searches re-rank exactly from them, memory-mapped)."""
  from twotower.eval import index as index_stage  # pylint: disable=import-outside-toplevel
  files = embeddings_lib.embedding_files(embeddings)
  n, d = faiss_index.count_vectors(files)
  index_stage.run(index_stage.IndexConfig(embeddings=embeddings, out=path, index=config.index))
  # The ids the index holds, as the index stage read them back from it.
  ids = IdSet.of(fingerprints.read_record(fingerprints.record_path(path))["ids"])
  # The bundle's own manifest records its files, their checksums, the model and the ids: the
  # index stage's records of the file (the embeddings it came from) have no place in it.
  for record in (outputs.file_manifest_path(path), fingerprints.record_path(path)):
    outputs.discard(record)  # written into this run's own new bundle folder
  return bundle_manifest.IndexPart(factory=config.index.resolve(n, d).factory_string(),
                                   vectors=int(n), dim=int(d), metric="inner_product", ids=ids)


def check_embeddings_model(embeddings: str, model: dict) -> None:
  """Refuses `--embeddings` that are not the bundle's model's vectors (by fingerprint), or
  whose model no record names (a bundle serves them: unknown is not good enough), and input
  shards that are not one input's (eval.embeddings; no flag takes them unchecked here)."""
  for source, record in fingerprints.embedding_records(
      embeddings_lib.embedding_files(embeddings, flag=None)):
    theirs = (record or {}).get("model")
    if not theirs:
      raise ValueError(f"{source}: no {fingerprints.RECORD_FILE} names the model of these "
                       "vectors (made before twotower recorded models, or by another tool); "
                       f"embed the documents again with `twotower embed --model "
                       f"{model['path']}`")
    if not fingerprints.same_model(theirs, model):
      raise ValueError(f"{source}: vectors of model {fingerprints.describe(theirs)}, not of "
                       f"the bundle's model {fingerprints.describe(model)}; embed the "
                       "documents with the bundle's model")


def _documents_spec(config: BundleConfig):
  """The embedding job's reading of the bundle's documents (pipelines.embed.InputSpec)."""
  from twotower.pipelines import embed  # pylint: disable=import-outside-toplevel
  if config.reqa:
    return embed.input_spec("candidates", contracts.candidates_path(config.reqa),
                            config.doc_text)
  return embed.input_spec("passages", config.passages)


def check_embeddings_rows(config: BundleConfig, embeddings: str) -> None:
  """Refuses `--embeddings` made from other text than the documents the bundle stores: the
  digest of the rows each folder embedded (its vectors.json `rows`: each row's id and the
  text the tower read) against the digest of the documents as the embedding job reads them
  (pipelines.embed.embedded_rows), input shard by input shard. Before anything is built:
  one streamed pass over the documents, their ids kept (8 bytes each).

  A folder whose ids differ from its documents' is left to check_same_ids, which names an id
  once the index is built; where folders are not input shards of one run and not a single
  folder, only their sum can be compared, and a difference is of ids or of text.

  Raises:
    ValueError: a folder without a digest of its rows (made before twotower recorded it), or
      one whose rows differ from the documents' (naming it and the documents' file).
  """
  from twotower.pipelines import embed  # pylint: disable=import-outside-toplevel
  records = dict(fingerprints.embedding_records(
      embeddings_lib.embedding_files(embeddings, flag=None)))
  for folder, record in records.items():
    if "rows" not in (record or {}):
      raise ValueError(f"{folder}: its {fingerprints.RECORD_FILE} records no digest of the "
                       "rows it embedded (made before twotower recorded them), so their text "
                       "cannot be checked against the documents'; embed the documents again "
                       "with `twotower embed`")
  shards = {folder: embeddings_lib.input_shard(folder) for folder in records}
  count = next((shard["count"] for shard in shards.values() if shard), 1)
  spec = _documents_spec(config)
  ours = [fingerprints.RowsDigest() for _ in range(count)]
  our_ids: list[list] = [[] for _ in range(count)]
  for shard, uid, values in embed.embedded_rows(
      spec, _parquet_rows(spec.pattern, list(spec.columns)), count):
    ours[shard].add(values)
    our_ids[shard].append(uid)
  documents = spec.pattern
  layout = f" laid out as --doc_text {config.doc_text}" if config.reqa else ""
  what = f"each row's id and the text{layout} the tower reads"
  if count > 1 or len(records) == 1:
    for folder, record in records.items():
      index = shards[folder]["index"] if count > 1 else 0
      if record.get("ids") != fingerprints.ids_record(our_ids[index]):
        continue  # other ids: check_same_ids names one
      theirs = fingerprints.RowsDigest.of_record(record["rows"])
      if theirs != ours[index]:
        part = f" (input shard {index} of {count})" if count > 1 else ""
        raise ValueError(
            f"{folder}{part}: its vectors were made from other text than {documents} holds "
            f"for the same ids ({theirs.short()} embedded, {ours[index].short()} in the "
            f"documents; digests of {what}): embeddings of another version of the documents"
            f"{' or of another --doc_text' if config.reqa else ''}? embed these documents")
    return
  theirs = fingerprints.RowsDigest()
  for record in records.values():
    theirs.merge(fingerprints.RowsDigest.of_record(record["rows"]))
  if theirs != ours[0]:
    raise ValueError(f"{embeddings}: vectors made from other rows than {documents} holds "
                     f"({theirs.short()} embedded, {ours[0].short()} in the documents; "
                     f"digests of {what}): embeddings of other ids or another text of the "
                     "documents? embed these documents")


def lucene_ids(index_dir: str) -> np.ndarray:
  """The collection ids a Lucene index holds, read from its stored `id` fields."""
  searcher = lucene.Bm25Searcher(index_dir)
  try:
    return searcher.ids()
  finally:
    searcher.close()


def check_same_ids(store_ids: np.ndarray, index: bundle_manifest.IndexPart,
                   bm25_ids: np.ndarray, embeddings_files: list[str], embeddings: str
                   ) -> tuple[IdSet, IdSet]:
  """The id sets of the store and Lucene, after checking that the index and Lucene hold
  exactly the store's ids (equal sets, not only counts: ids shifted by 7 are refused)."""
  store = IdSet.of(fingerprints.ids_record(store_ids))
  if index.ids != store:
    vector_ids = fingerprints.file_ids(embeddings_files)
    extra = np.setdiff1d(vector_ids, store_ids)
    missing = np.setdiff1d(store_ids, vector_ids)
    example = (f"id {extra[0]} has a vector but no document" if extra.size else
               f"document {missing[0]} has no vector" if missing.size else "ids repeat")
    raise ValueError(f"{embeddings}: vectors of other ids than the {store.count} "
                     f"documents' ({example}): embeddings of other documents?")
  bm25 = IdSet.of(fingerprints.ids_record(bm25_ids))
  if bm25 != store:
    raise ValueError(f"part 'lucene' holds other ids than the store ({bm25.count} against "
                     f"{store.count} documents)")
  return store, bm25


def _tuning_split(config: BundleConfig):
  """The validation split the weight is tuned on, checked before anything is built."""
  from twotower.eval import evaluate  # pylint: disable=import-outside-toplevel
  if contracts.split_side(config.tune_split) != contracts.VALIDATION_SIDE:
    raise ValueError(f"--tune_split {config.tune_split!r}: only a validation split may tune "
                     "the hybrid's weight")
  (split,) = evaluate.load_splits(config.reqa, [config.tune_split])
  if not split.questions:
    raise ValueError(f"{contracts.questions_path(config.reqa, config.tune_split)}: no "
                     "questions to tune the hybrid's weight on")
  return split


def _tune(config: BundleConfig, split, bundle_dir: str,
          hybrid: bundle_manifest.Hybrid) -> bundle_manifest.Hybrid:
  """The hybrid's weight, tuned with the bundle's own searches on a validation split."""
  from twotower.deploy.serving import retriever as retriever_lib  # pylint: disable=import-outside-toplevel
  from twotower.eval import fusion  # pylint: disable=import-outside-toplevel
  retriever = retriever_lib.Retriever.load(bundle_dir, verify="none")
  try:
    dense, bm25 = retriever.runs([(q.question_id, q.question) for q in split.questions],
                                 config.hybrid_depth)
  finally:
    retriever.close()
  tuning = fusion.tune_weight(bm25, dense, split, config.tune_metric, depth=config.hybrid_depth)
  logger.info("hybrid weight %.2f tuned on %s (%d questions) by %s", tuning.weight,
              split.split, len(split.questions), tuning.metric)
  return dataclasses.replace(hybrid, weight=tuning.weight, tuned_on=split.split,
                             metric=tuning.metric, questions=len(split.questions))


def _given_hybrid(config: BundleConfig) -> bundle_manifest.Hybrid:
  """The hybrid as given: `weight` (or the default, untuned), and where it was chosen."""
  if config.chosen_weight is None:
    return bundle_manifest.Hybrid(
        weight=DEFAULT_WEIGHT if config.weight is None else config.weight,
        depth=config.hybrid_depth)
  chosen = config.chosen_weight  # tuned by a stage before: how many questions is its record's
  return bundle_manifest.Hybrid(weight=config.weight, depth=config.hybrid_depth,
                                tuned_on=chosen.split, metric=chosen.metric, questions=None,
                                partner=chosen.partner)


def _refuse_unrecorded_parts(out: str) -> None:
  """A folder whose bundle parts no stage's manifest records (a bundle of a twotower before
  bundles had one, or files of the user's) is refused before anything is built: the new
  bundle would be written over them (outputs.replace_folder refuses that at the end)."""
  from twotower.deploy.serving import query_encoders  # pylint: disable=import-outside-toplevel
  if not os.path.isdir(out) or outputs.read_manifest(out) is not None:
    return
  names = (contracts.BUNDLE_MANIFEST_FILE, *contracts.BUNDLE_PARTS,
           query_encoders.QUERY_ONNX_DIR)
  found = [name for name in names if os.path.lexists(os.path.join(out, name))]
  if found:
    raise ValueError(f"{out}: holds {', '.join(found)}, which no twotower manifest "
                     f"({contracts.MANIFEST_FILE}) records (a bundle of an earlier twotower, "
                     "or files of yours); give another --out, or move them away")


def run(config: BundleConfig) -> BundleResult:
  """Builds the bundle in a folder beside `out` (outputs.staged), then moves it into place."""
  out = config.out.rstrip("/")
  inputs = [config.model, config.reqa, config.passages, config.docs, config.embeddings]
  # Nothing of `out` is carried into the new bundle's place but the user's files: an input
  # inside it would be read while it is replaced.
  outputs.check_inputs(out, inputs, inside=False)
  _refuse_unrecorded_parts(out)
  with outputs.staged(out, STAGE, outputs.settings_of(config), inputs=inputs,
                      overwrite=config.overwrite) as bundle_dir:
    manifest = _build(config, bundle_dir)
  logger.info("bundle: %d documents, index %s, hybrid weight %.2f -> %s",
              manifest.documents.count, manifest.index.factory, manifest.hybrid.weight, out)
  return BundleResult(out, manifest)


def _build(config: BundleConfig, bundle_dir: str) -> BundleManifest:
  """Every part into `bundle_dir` (the stage's new folder), then the manifest, last."""
  saved_model = resolve_saved_model(config.model)
  model = fingerprints.model_record(saved_model)
  if config.embeddings:  # before anything is built
    check_embeddings_model(config.embeddings, model)
    check_embeddings_rows(config, config.embeddings)
  split = _tuning_split(config) if config.tune_split else None
  source = config.reqa or config.passages or config.docs
  tio.log_settings("bundle", {"model": saved_model, "documents": source,
                              "embeddings": config.embeddings or "(embedded here)",
                              "index": config.index.factory or config.index.type,
                              "weight": config.weight, "tune_split": config.tune_split,
                              "out": config.out})
  part = lambda name: contracts.bundle_path(bundle_dir, name)  # noqa: E731
  shutil.copytree(saved_model, part(contracts.BUNDLE_QUERY_ENCODER_DIR))
  if config.onnx:
    from twotower.deploy.serving import query_encoders  # pylint: disable=import-outside-toplevel
    from twotower.model import export_hf  # pylint: disable=import-outside-toplevel
    export_hf.write_query_tower(saved_model, part(query_encoders.QUERY_ONNX_DIR))
  metadata = bundle_metadata.MetadataWriter()
  rows: list[store_lib.Document] = []  # --docs: kept to embed in this process

  def with_metadata() -> Iterator[store_lib.Document]:
    for document, fields in iter_documents_with_fields(config, metadata):
      metadata.add(document.id, fields)
      if config.docs:
        rows.append(document)
      yield document
  documents = store_lib.write_store(part(contracts.BUNDLE_STORE_FILE), with_metadata())
  fields = metadata.write(bundle_dir, order=tuple(bundle_metadata.BUILTIN_FIELDS))
  if not documents:
    raise ValueError(f"{source}: no documents to bundle")
  lucene_docs = lucene.build_index(lucene_documents(config), part(contracts.BUNDLE_LUCENE_DIR),
                                   threads=1)
  with store_lib.PassageStore.open(part(contracts.BUNDLE_STORE_FILE)) as store:
    store_ids = np.asarray(store.ids(), dtype=np.int64)
  if config.docs:
    vectors = documents_lib.embed(saved_model, rows, documents_lib.DOCUMENTS, config.doc_text)
    index = index_part.build(config.index, np.asarray([d.id for d in rows], np.int64),
                             vectors, part(contracts.BUNDLE_INDEX_FILE))
    store_set = IdSet.of(fingerprints.ids_record(store_ids))
    bm25_set = IdSet.of(fingerprints.ids_record(lucene_ids(part(contracts.BUNDLE_LUCENE_DIR))))
    if not index.ids == store_set == bm25_set:
      raise ValueError(f"{source}: the index, the store and Lucene hold other ids")
  else:
    # Embeddings made here live in the new folder until the index is built from them.
    embeddings = config.embeddings or _embed(config, saved_model, part(".embeddings"))
    index = _build_index(config, embeddings, part(contracts.BUNDLE_INDEX_FILE))
    if not index.vectors == documents == lucene_docs:
      raise ValueError(f"{config.embeddings or 'the embeddings'}: {index.vectors} vectors "
                       f"for {documents} documents ({lucene_docs} in Lucene): embeddings of "
                       "other documents?")
    store_set, bm25_set = check_same_ids(
        store_ids, index, lucene_ids(part(contracts.BUNDLE_LUCENE_DIR)),
        embeddings_lib.embedding_files(embeddings), config.embeddings or "the embeddings")
    if not config.embeddings:
      outputs.discard(embeddings)  # this run's own, not a part of the bundle
  run_config = contracts.exported_config_path(saved_model)
  manifest = BundleManifest(
      created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      versions=bundle_manifest.running_versions(),
      model=bundle_manifest.ModelPart(
          source=os.path.abspath(saved_model), fingerprint=model["fingerprint"],
          signature=contracts.QUERY_SIGNATURE, embedding_dim=index.dim,
          config=tio.read_text(run_config) if os.path.isfile(run_config) else ""),
      documents=bundle_manifest.DocumentsPart(
          count=documents, source=os.path.abspath(source), kind=_kind(config),
          doc_text=config.doc_text if config.reqa else "title+text", ids=store_set),
      index=index,
      bm25=bundle_manifest.Bm25Part(documents=lucene_docs, k1=config.k1, b=config.b,
                                    ids=bm25_set),
      hybrid=_given_hybrid(config),
      metadata=bundle_manifest.MetadataPart(tuple(fields))).signed(bundle_dir)
  manifest.write(bundle_dir)
  if split is not None:  # with the bundle's own searches: the manifest is the one it loads
    manifest = dataclasses.replace(manifest, hybrid=_tune(config, split, bundle_dir,
                                                          manifest.hybrid))
    manifest = manifest.signed(bundle_dir)
    manifest.write(bundle_dir)
  return manifest


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("bundle"))
