"""`twotower bundle`: a retriever bundle, one directory holding everything a query needs.

    twotower bundle --model runs/ict --reqa reqa/squad --out bundles/squad \
        --tune_split validation-5
    twotower bundle --model runs/ict --passages pairs/ --out bundles/wiki --weight 0.5

    BUNDLE/manifest.json    versions, embedding dim, counts, model (path and fingerprint),
                            index type, the hybrid's weight (and where it was tuned), the id
                            set of the store, the index and Lucene (each read back from the
                            part), every file's size and sha256
    BUNDLE/query_encoder/   the query tower: the export's SavedModel (tokenizer in the graph)
    BUNDLE/index.faiss      FAISS index of the documents' embeddings (ids = document ids)
    BUNDLE/store.sqlite     document id -> title, text, sentence, page id (deploy.serving.store)
    BUNDLE/lucene/          Lucene index for BM25, built as `twotower bm25` builds it

Documents are the candidates of a ReQA directory (`--reqa`: what the evaluation scores, so
the bundle's answers can be checked against the batch path) or the passages of a pair
pipeline output (`--passages`). Embeddings come from `--embeddings` (a `twotower embed`
output of the same model and documents: its `vectors.json` must name the bundle's model
by fingerprint, and the index built from them must hold exactly the documents' ids) or are
made here with the same Beam job. The hybrid's
weight is given (`--weight`) or tuned on a validation split of the ReQA directory
(`--tune_split`), with the bundle's own dense and BM25 searches and `eval.fusion.tune_weight`,
the function `twotower fuse --weight auto` uses.

The bundle is built in a temporary directory beside `--out` and moved into place when whole,
so a reader never sees half a bundle; an existing non-empty `--out` is refused unless
`--overwrite`. `run(BundleConfig) -> BundleResult` is the typed entry point.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import logging
import os
import platform
import shutil
import sys
import tempfile
from typing import Iterator, Optional

import numpy as np

from twotower import contracts
from twotower import fingerprints
from twotower import io as tio
from twotower import lucene
from twotower import outputs
from twotower import texts
from twotower.deploy.serving import store as store_lib
from twotower.eval import embeddings as embeddings_lib
from twotower.eval import faiss_index

logger = logging.getLogger(__name__)

FORMAT = "twotower-retriever-bundle"
#: Bumped when the layout or the manifest's meaning changes; a reader refuses other versions.
FORMAT_VERSION = 2  # 2: the model's fingerprint and each part's id set
#: Library versions recorded in the manifest (a difference at load is logged, not refused).
RECORDED_PACKAGES = ("twotower", "tensorflow", "tensorflow-text", "faiss-cpu", "pyserini")
#: Weight of BM25 in the hybrid when nothing tunes it (stated in the manifest as untuned).
DEFAULT_WEIGHT = 0.5
#: Candidates each side contributes to the hybrid: as `twotower fuse` fuses 100-deep runs.
DEFAULT_HYBRID_DEPTH = 100


@dataclasses.dataclass(frozen=True)
class BundleConfig:
  """Flags of `twotower bundle`."""
  model: str                        # a training run dir or its export's SavedModel
  out: str                          # the bundle directory
  reqa: str = ""                    # documents = this ReQA dir's candidates, or
  passages: str = ""                # documents = this pair pipeline output's passages
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
  overwrite: bool = False
  beam_args: tuple[str, ...] = ()

  def __post_init__(self):
    if bool(self.reqa) == bool(self.passages):
      raise ValueError("give the documents as exactly one of --reqa DIR or --passages DIR")
    if self.tune_split and not self.reqa:
      raise ValueError("--tune_split needs --reqa (the split's questions live there)")
    if self.tune_split and self.weight is not None:
      raise ValueError("give --weight or --tune_split, not both")
    if self.weight is not None and not 0.0 <= self.weight <= 1.0:
      raise ValueError(f"--weight {self.weight} is not in [0, 1]")
    if self.hybrid_depth < 1:
      raise ValueError(f"--hybrid_depth must be >= 1, got {self.hybrid_depth}")


@dataclasses.dataclass(frozen=True)
class BundleResult:
  path: str
  manifest: dict


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
  if config.reqa:
    for row in _parquet_rows(contracts.candidates_path(config.reqa),
                             ["candidate_id", "sentence", "passage", "title", "source",
                              "section"]):
      cid = int(row["candidate_id"])
      # Held-out benchmark candidates are whole passages, id = passage_uid(page, passage);
      # SQuAD/NQ candidates carry no page id.
      page = cid >> 20 if row["source"] == contracts.HELDOUT_SOURCE else None
      yield store_lib.Document(cid, row["title"] or "", row["passage"] or "",
                               row["sentence"] or "", page, row["source"] or "",
                               row.get("section") or "")
  else:
    for row in _parquet_rows(contracts.passages_pattern(config.passages),
                             ["page_id", "passage_id", "title", "text", "section"]):
      yield store_lib.Document(contracts.passage_uid(row["page_id"], row["passage_id"]),
                               row["title"] or "", row["text"] or "", "",
                               int(row["page_id"]), contracts.WIKIPEDIA_SOURCE,
                               row.get("section") or "")


def lucene_documents(config: BundleConfig) -> Iterator[dict]:
  """Lucene's JsonCollection documents: for ReQA candidates exactly `twotower bm25`'s (the
  same text, the same order), for passages the title and the passage."""
  if config.reqa:
    yield from lucene.candidate_documents(config.reqa, config.doc_text)
    return
  for d in sorted(iter_documents(config), key=lambda d: d.id):
    yield {"id": str(d.id), "contents": f"{d.title} {d.text}".strip()}


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


def _embed(config: BundleConfig, saved_model: str, work: str) -> str:
  from twotower.pipelines import embed  # pylint: disable=import-outside-toplevel
  out = os.path.join(work, "embeddings")
  if config.reqa:
    job = embed.EmbedConfig(model=saved_model, out=out, kind="candidates",
                            path=contracts.candidates_path(config.reqa),
                            doc_text=config.doc_text, beam_args=config.beam_args)
  else:
    job = embed.EmbedConfig(model=saved_model, out=out, kind="passages",
                            path=config.passages, beam_args=config.beam_args)
  embed.run(job)
  return out


def _build_index(config: BundleConfig, embeddings: str, path: str) -> dict:
  """The `twotower index` stage into the bundle (with `ivfpq_rerank`, its float32 vectors
  beside the index: searches re-rank exactly from them, memory-mapped)."""
  from twotower.eval import index as index_stage  # pylint: disable=import-outside-toplevel
  files = embeddings_lib.embedding_files(embeddings)
  n, d = faiss_index.count_vectors(files)
  index_stage.run(index_stage.IndexConfig(embeddings=embeddings, out=path, index=config.index))
  # The ids the index holds, as the index stage read them back from it.
  ids = fingerprints.read_record(fingerprints.record_path(path))["ids"]
  # The bundle's own manifest records its files, their checksums, the model and the ids: the
  # index stage's records of the file (the embeddings it came from) have no place in it.
  for record in (outputs.file_manifest_path(path), fingerprints.record_path(path)):
    outputs.discard(record)  # written into this run's own new bundle folder
  return {"factory": config.index.resolve(n, d).factory_string(), "vectors": int(n),
          "dim": int(d), "metric": "inner_product", "ids": ids}


def check_embeddings_model(embeddings: str, model: dict) -> None:
  """Refuses `--embeddings` that are not the bundle's model's vectors (by fingerprint), or
  whose model no record names (a bundle serves them: unknown is not good enough)."""
  for source, record in fingerprints.embedding_records(
      embeddings_lib.embedding_files(embeddings)):
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


def lucene_ids(index_dir: str) -> np.ndarray:
  """The collection ids a Lucene index holds, read from its stored `id` fields."""
  from twotower import pyserini_env  # pylint: disable=import-outside-toplevel
  searcher = pyserini_env.import_lucene_searcher()(index_dir)
  try:
    return np.array([int(searcher.doc(i).docid()) for i in range(searcher.num_docs)],
                    dtype=np.int64)
  finally:
    searcher.close()


def check_same_ids(store_ids: np.ndarray, index: dict, bm25_ids: np.ndarray,
                   embeddings_files: list[str], embeddings: str) -> tuple[dict, dict]:
  """The id records of the store and Lucene, after checking that the index and Lucene hold
  exactly the store's ids (equal sets, not only counts: ids shifted by 7 are refused)."""
  store = fingerprints.ids_record(store_ids)
  if index["ids"] != store:
    vector_ids = fingerprints.file_ids(embeddings_files)
    extra = np.setdiff1d(vector_ids, store_ids)
    missing = np.setdiff1d(store_ids, vector_ids)
    example = (f"id {extra[0]} has a vector but no document" if extra.size else
               f"document {missing[0]} has no vector" if missing.size else "ids repeat")
    raise ValueError(f"{embeddings}: vectors of other ids than the {store['count']} "
                     f"documents' ({example}): embeddings of other documents?")
  bm25 = fingerprints.ids_record(bm25_ids)
  if bm25 != store:
    raise ValueError(f"part 'lucene' holds other ids than the store ({bm25['count']} against "
                     f"{store['count']} documents)")
  return store, bm25


def package_versions() -> dict[str, str]:
  """Python's and RECORDED_PACKAGES' versions, as the manifest records them."""
  return {"python": platform.python_version(), **tio.package_versions(RECORDED_PACKAGES)}


def sha256_of(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def file_digests(bundle_dir: str) -> dict[str, dict]:
  """Every file under the bundle (but the manifest): relative path -> bytes and sha256."""
  files = {}
  for root, _, names in os.walk(bundle_dir):
    for name in sorted(names):
      path = os.path.join(root, name)
      rel = os.path.relpath(path, bundle_dir)
      if rel == contracts.BUNDLE_MANIFEST_FILE:
        continue
      files[rel] = {"bytes": os.path.getsize(path), "sha256": sha256_of(path)}
  return dict(sorted(files.items()))


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


def _tune(config: BundleConfig, split, bundle_dir: str) -> dict:
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
  return {"weight": tuning.weight, "tuned_on": split.split, "metric": tuning.metric,
          "questions": len(split.questions)}


def write_manifest(bundle_dir: str, manifest: dict) -> None:
  """Writes the manifest with every file's size and checksum (the manifest is written last)."""
  manifest["files"] = file_digests(bundle_dir)
  tio.write_json(contracts.bundle_path(bundle_dir, contracts.BUNDLE_MANIFEST_FILE), manifest)


def _claim_output(out: str, overwrite: bool, inputs: list[str]) -> set[str]:
  """Checks that `out` may take the bundle; returns the files of it that the bundle
  replaces (twotower.outputs' rules): those the old bundle's manifest lists. No input lies
  in `out`; with --overwrite, files no bundle manifest lists are kept (moved into the new
  bundle's folder), and another stage's output is refused."""
  outputs.check_inputs(out, inputs, inside=False)
  if os.path.exists(out) and not os.path.isdir(out):
    raise ValueError(f"{out}: exists and is not a directory")
  if not (os.path.isdir(out) and os.listdir(out)):
    return set()
  if not overwrite:
    raise ValueError(f"{out}: not empty; a bundle is written into a new directory "
                     "(--overwrite replaces the bundle there, keeping files it did not write)")
  stage = outputs.read_manifest(out)
  if stage is not None:
    raise ValueError(f"{out}: holds the output of `twotower {stage['stage']}`; give another "
                     "--out (--overwrite replaces only a bundle)")
  try:
    listed = tio.read_json(contracts.bundle_path(out, contracts.BUNDLE_MANIFEST_FILE))["files"]
    owned = {*listed, contracts.BUNDLE_MANIFEST_FILE}
  except (OSError, ValueError, KeyError, TypeError):
    owned = set()
  unlisted = [name for name in (*contracts.BUNDLE_PARTS, contracts.BUNDLE_MANIFEST_FILE)
              if os.path.lexists(os.path.join(out, name)) and not any(
                  f == name or f.startswith(name + "/") for f in owned)]
  if unlisted:
    raise ValueError(f"{out}: holds {', '.join(unlisted)}, which no bundle manifest there "
                     "lists; give another --out, or move them away")
  logger.warning("--overwrite: replacing the bundle in %s (files it did not write are kept)",
                 out)
  return owned


def run(config: BundleConfig) -> BundleResult:
  """Builds the bundle in a temporary directory beside `out`, then moves it into place."""
  out = config.out.rstrip("/")
  owned = _claim_output(out, config.overwrite, [config.model, config.reqa, config.passages,
                                                config.embeddings])
  saved_model = resolve_saved_model(config.model)
  model = fingerprints.model_record(saved_model)
  if config.embeddings:  # before anything is built
    check_embeddings_model(config.embeddings, model)
  split = _tuning_split(config) if config.tune_split else None
  tio.log_settings("bundle", {"model": saved_model, "documents": config.reqa or config.passages,
                              "embeddings": config.embeddings or "(embedded here)",
                              "index": config.index.factory or config.index.type,
                              "weight": config.weight, "tune_split": config.tune_split,
                              "out": out})
  parent = os.path.dirname(os.path.abspath(out))
  os.makedirs(parent, exist_ok=True)
  work = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(out)}.tmp-")
  try:
    bundle_dir = os.path.join(work, "bundle")
    os.makedirs(bundle_dir)
    part = lambda name: contracts.bundle_path(bundle_dir, name)  # noqa: E731
    shutil.copytree(saved_model, part(contracts.BUNDLE_QUERY_ENCODER_DIR))
    if config.onnx:
      from twotower.deploy.serving import query_encoders  # pylint: disable=import-outside-toplevel
      from twotower.model import export_hf  # pylint: disable=import-outside-toplevel
      export_hf.write_query_tower(saved_model, part(query_encoders.QUERY_ONNX_DIR))
    documents = store_lib.write_store(part(contracts.BUNDLE_STORE_FILE),
                                      iter_documents(config))
    if not documents:
      raise ValueError(f"{config.reqa or config.passages}: no documents to bundle")
    embeddings = config.embeddings or _embed(config, saved_model, work)
    index = _build_index(config, embeddings, part(contracts.BUNDLE_INDEX_FILE))
    lucene_docs = lucene.build_index(lucene_documents(config),
                                     part(contracts.BUNDLE_LUCENE_DIR), threads=1)
    if not index["vectors"] == documents == lucene_docs:
      raise ValueError(f"{config.embeddings or 'the embeddings'}: {index['vectors']} vectors "
                       f"for {documents} documents ({lucene_docs} in Lucene): embeddings of "
                       "other documents?")
    with store_lib.PassageStore.open(part(contracts.BUNDLE_STORE_FILE)) as store:
      store_ids = np.asarray(store.ids(), dtype=np.int64)
    store_record, bm25_record = check_same_ids(
        store_ids, index, lucene_ids(part(contracts.BUNDLE_LUCENE_DIR)),
        embeddings_lib.embedding_files(embeddings), config.embeddings or "the embeddings")
    run_config = contracts.exported_config_path(saved_model)
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": package_versions(),
        "model": {"source": os.path.abspath(saved_model), "fingerprint": model["fingerprint"],
                  "signature": contracts.QUERY_SIGNATURE,
                  "embedding_dim": index["dim"],
                  "config": tio.read_text(run_config) if os.path.isfile(run_config) else ""},
        "documents": {"count": documents, "source": os.path.abspath(config.reqa or
                                                                    config.passages),
                      "kind": "candidates" if config.reqa else "passages",
                      "doc_text": config.doc_text if config.reqa else "title+text",
                      "ids": store_record},
        "index": index,
        "bm25": {"documents": lucene_docs, "k1": config.k1, "b": config.b,
                 "ids": bm25_record},
        "hybrid": {"weight": DEFAULT_WEIGHT if config.weight is None else config.weight,
                   "tuned_on": None, "metric": None, "questions": 0,
                   "depth": config.hybrid_depth, "method": "interpolate",
                   "note": "BM25's weight, as `twotower fuse --run BM25 DENSE --weight W`"},
    }
    write_manifest(bundle_dir, manifest)
    if split is not None:
      manifest["hybrid"].update(_tune(config, split, bundle_dir))
      write_manifest(bundle_dir, manifest)
    outputs.replace_folder(out, bundle_dir, owned)  # the old bundle's files only
  finally:
    shutil.rmtree(work, ignore_errors=True)
  logger.info("bundle: %d documents, index %s, hybrid weight %.2f -> %s", documents,
              index["factory"], manifest["hybrid"]["weight"], out)
  return BundleResult(out, manifest)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("bundle"))
