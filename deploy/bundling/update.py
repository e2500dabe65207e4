"""`twotower bundle update`: a new bundle from an old one, with documents added and deleted,
and nothing rebuilt that need not be.

    twotower bundle update bundles/docs --add new.jsonl --delete gone.txt --out bundles/docs-2

Copy-on-write: the parent bundle is read, never written (its sha256 checked first, every
file); the new one is its copy, changed, in a folder beside --out that takes --out's place
when whole (twotower.core.outputs), so a failure leaves nothing half-written. What changes:

  store.sqlite   deleted rows removed, added rows inserted
  metadata/      the kept rows' codes remapped, the added documents' fields appended
  index.faiss    deleted vectors removed (flat, IVF, IVF-PQ); an HNSW graph keeps them and
                 their ids become tombstones (tombstones.npy), filtered out of every search;
                 the added documents' vectors added (an IVF keeps its trained lists), the
                 re-rank vectors beside it rewritten (deploy.bundling.index_part)
  lucene/        deleted documents removed, added ones indexed, one segment merged
                 (twotower.core.lucene.update_index: BM25's statistics as from scratch)
  manifest.json  counts, id sets read back from each part, and the lineage: the parent (path,
                 when it was made, its manifest's sha256) and every operation so far

Only the added documents are embedded, by the bundle's own SavedModel (`query_encoder/` holds
the export, the document tower with it; its fingerprint must be the manifest's), or taken from
`--embeddings` (a `twotower embed` output whose vectors.json names the bundle's model:
vectors of another model are refused, as `twotower bundle` refuses them). A running service
takes the new bundle with POST /v1/admin/swap.

Refused in one line, before anything is written: `--add` lines that are not documents, a
field the bundle does not store or a value of another type than its field's, an added id the
bundle holds or held (a tombstone), an id added twice; `--delete` ids the bundle does not
hold, lines that are not integers; a bundle of format 2 (no metadata to update: rebuild it).
`run(UpdateConfig) -> BundleResult` is the typed entry point.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import shutil
import sqlite3
from typing import Optional

import numpy as np

from twotower.core import contracts
from twotower.core import fingerprints
from twotower.core import lucene
from twotower.core import outputs
from twotower.core.contracts import bundle_manifest
from twotower.core.contracts import bundle_metadata
from twotower.core.contracts.bundle_manifest import BundleError, BundleManifest, IdSet
from twotower.deploy.bundling import documents as documents_lib
from twotower.deploy.bundling import index_part
from twotower.deploy.bundling.bundle import BundleResult, check_embeddings_model, lucene_ids
from twotower.deploy.serving import store as store_lib

logger = logging.getLogger(__name__)

STAGE = "bundle-update"


@dataclasses.dataclass(frozen=True)
class UpdateConfig:
  """Flags of `twotower bundle update`."""
  bundle: str                 # the parent bundle (read only)
  out: str                    # the new bundle
  add: str = ""               # documents to add, JSON lines (deploy.bundling.documents)
  delete: str = ""            # ids to delete, one per line
  embeddings: str = ""        # the added documents' vectors (else embedded here)
  overwrite: bool = False

  def __post_init__(self):
    if not self.add and not self.delete:
      raise ValueError("give --add FILE, --delete FILE or both: an update with nothing to do")
    if self.embeddings and not self.add:
      raise ValueError("--embeddings are the added documents' vectors: give --add")


def read_ids(path: str) -> np.ndarray:
  """The ids of a --delete file: one integer a line (blank lines and `#` comments skipped).

  Raises:
    ValueError: path:line of a line that is not an integer id, or of a repeated id.
  """
  ids: dict[int, int] = {}
  with open(path, encoding="utf-8", errors="surrogateescape") as lines:
    for n, line in enumerate(lines, start=1):
      text = line.split("#", 1)[0].strip()
      if not text:
        continue
      try:
        value = int(text)
      except ValueError:
        raise ValueError(f"{path}:{n}: {text[:40]!r} is not an integer document id") from None
      if not -2**63 <= value < 2**63:
        raise ValueError(f"{path}:{n}: {value} is out of the int64 range")
      if value in ids:
        raise ValueError(f"{path}:{n}: id {value} is listed twice (first on line "
                         f"{ids[value]})")
      ids[value] = n
  return np.asarray(sorted(ids), dtype=np.int64)


def run(config: UpdateConfig) -> BundleResult:
  parent_dir = config.bundle.rstrip("/")
  out = config.out.rstrip("/")
  inputs = [parent_dir, config.add, config.delete, config.embeddings]
  outputs.check_inputs(out, inputs, inside=False)
  parent = bundle_manifest.read(parent_dir)
  if parent.format_version < 3:
    raise BundleError(f"{parent_dir}: bundle format {parent.format_version} has no document "
                      "metadata to update; rebuild it with `twotower bundle`")
  parent.check_files(parent_dir, "sha256")  # what is copied is what the manifest signed
  plan = _plan(config, parent, parent_dir)
  with outputs.staged(out, STAGE, outputs.settings_of(config), inputs=inputs,
                      overwrite=config.overwrite) as new_dir:
    manifest = _apply(config, parent, parent_dir, plan, new_dir)
  logger.info("bundle update: %d documents (+%d, -%d%s) -> %s", manifest.documents.count,
              len(plan.added), len(plan.deleted),
              f", {manifest.index.tombstones} tombstones" if manifest.index.tombstones else "",
              out)
  return BundleResult(out, manifest)


@dataclasses.dataclass(frozen=True)
class _Plan:
  """What an update does, checked before anything is written."""
  deleted: np.ndarray                       # ids, sorted
  added: list[documents_lib.Document]
  vectors: Optional[np.ndarray]             # the added documents' (None: embed them)


def _plan(config: UpdateConfig, parent: BundleManifest, parent_dir: str) -> _Plan:
  held = bundle_metadata.Metadata.open(parent_dir).ids
  tombstones = _parent_tombstones(parent, parent_dir)
  deleted = read_ids(config.delete) if config.delete else np.zeros(0, np.int64)
  missing = np.setdiff1d(deleted, held, assume_unique=True)
  if missing.size:
    raise ValueError(f"{config.delete}: {missing.size} id(s) not in the bundle "
                     f"{parent_dir} (first: {int(missing[0])})")
  added: list[documents_lib.Document] = []
  if config.add:
    writer = bundle_metadata.MetadataWriter(parent.metadata.types(), closed=True)
    seen: dict[int, None] = {}
    for document in documents_lib.read_jsonl(config.add, parent.documents.kind,
                                             parent.documents.doc_text, writer):
      if document.id in seen:
        raise ValueError(f"{config.add}: document id {document.id} is added twice")
      seen[document.id] = None
      if "input" in writer.types:  # as `bundle --docs` records the file a document came from
        document = dataclasses.replace(document, fields={"input": config.add, **document.fields})
      added.append(document)
    ids = np.asarray(sorted(seen), dtype=np.int64)
    clash = np.intersect1d(ids, held)
    if clash.size:
      raise ValueError(f"{config.add}: document id {int(clash[0])} is already in the bundle "
                       f"({clash.size} such); to replace a document, delete it in one update "
                       "and add it under a new id")
    if tombstones is not None and (gone := np.intersect1d(ids, tombstones)).size:
      raise ValueError(f"{config.add}: document id {int(gone[0])} was deleted from this "
                       "bundle and its vector stays in its HNSW index as a tombstone: give "
                       "the document a new id")
    if not added:
      raise ValueError(f"{config.add}: no documents to add")
  vectors = _given_vectors(config, parent, added) if config.embeddings else None
  return _Plan(deleted, added, vectors)


def _given_vectors(config: UpdateConfig, parent: BundleManifest,
                   added: list[documents_lib.Document]) -> np.ndarray:
  """The added documents' vectors from --embeddings, refused unless they are the bundle's
  model's (by fingerprint) and exactly the added ids."""
  from twotower.eval import embeddings as embeddings_lib  # pylint: disable=import-outside-toplevel
  check_embeddings_model(config.embeddings, {"path": parent.model.source,
                                             "fingerprint": parent.model.fingerprint})
  ids, vectors = embeddings_lib.read_embeddings(config.embeddings)
  by_id = {int(i): n for n, i in enumerate(ids)}
  wanted = [d.id for d in added]
  if sorted(by_id) != sorted(wanted):
    extra = sorted(set(by_id) - set(wanted))
    missing = sorted(set(wanted) - set(by_id))
    example = (f"document {missing[0]} has no vector" if missing
               else f"id {extra[0]} has a vector but is not added")
    raise ValueError(f"{config.embeddings}: vectors of other ids than the {len(wanted)} added "
                     f"documents' ({example})")
  if vectors.shape[1] != parent.model.embedding_dim:
    raise ValueError(f"{config.embeddings}: vectors of dim {vectors.shape[1]}, the bundle's "
                     f"are {parent.model.embedding_dim}")
  return np.ascontiguousarray(vectors[[by_id[i] for i in wanted]], dtype=np.float32)


def _parent_tombstones(parent: BundleManifest, parent_dir: str) -> Optional[np.ndarray]:
  if not parent.index.tombstones:
    return None
  return np.load(contracts.bundle_path(parent_dir, bundle_manifest.TOMBSTONES_FILE))


def _copy_parts(parent: BundleManifest, parent_dir: str, new_dir: str) -> None:
  """Every file the parent's manifest lists, copied (never linked: SQLite writes in place)."""
  for rel in parent.files:
    target = os.path.join(new_dir, rel)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copy2(os.path.join(parent_dir, rel), target)
  shutil.rmtree(os.path.join(new_dir, bundle_metadata.METADATA_DIR))  # rewritten
  tombstones = os.path.join(new_dir, bundle_manifest.TOMBSTONES_FILE)
  if os.path.exists(tombstones):
    os.remove(tombstones)  # rewritten when any remain


def _apply(config: UpdateConfig, parent: BundleManifest, parent_dir: str, plan: _Plan,
           new_dir: str) -> BundleManifest:
  part = lambda name: contracts.bundle_path(new_dir, name)  # noqa: E731
  kind, doc_text = parent.documents.kind, parent.documents.doc_text
  _copy_parts(parent, parent_dir, new_dir)
  rows = [d.row for d in plan.added]
  vectors = plan.vectors
  if vectors is None and rows:
    saved_model = part(contracts.BUNDLE_QUERY_ENCODER_DIR)
    theirs = fingerprints.model_fingerprint(saved_model)
    if theirs != parent.model.fingerprint:
      raise BundleError(f"{parent_dir}: part 'query_encoder' has fingerprint {theirs[:12]}, "
                        f"the manifest says {parent.model.fingerprint[:12]}: vectors made with "
                        "it would not be the bundle's model's")
    vectors = documents_lib.embed(saved_model, rows, kind, doc_text)
  added_ids = np.asarray([r.id for r in rows], dtype=np.int64)

  # The store, in place on the copy.
  connection = sqlite3.connect(part(contracts.BUNDLE_STORE_FILE))
  try:
    connection.executemany("DELETE FROM documents WHERE id = ?",
                           [(int(i),) for i in plan.deleted])
    connection.commit()
  finally:
    connection.close()
  store_lib.append_store(part(contracts.BUNDLE_STORE_FILE), rows)

  # Metadata: the kept rows' codes remapped, the added documents' fields appended.
  metadata = bundle_metadata.Metadata.open(parent_dir)
  keep = ~np.isin(np.asarray(metadata.ids), plan.deleted)
  fields = metadata.write_updated(keep, [(d.id, d.fields) for d in plan.added], new_dir)

  # FAISS: removed or tombstoned, then added.
  index, tombstones = index_part.update(
      part(contracts.BUNDLE_INDEX_FILE), plan.deleted, added_ids,
      vectors if vectors is not None else np.zeros((0, parent.index.dim), np.float32),
      _parent_tombstones(parent, parent_dir), parent.index.factory)
  if tombstones is not None:
    np.save(part(bundle_manifest.TOMBSTONES_FILE), np.asarray(tombstones, np.int64))

  # Lucene: added, deleted, merged.
  lucene.update_index(part(contracts.BUNDLE_LUCENE_DIR),
                      [{"id": str(r.id), "contents": documents_lib.lucene_contents(
                          r, kind, doc_text)} for r in rows], plan.deleted)

  with store_lib.PassageStore.open(part(contracts.BUNDLE_STORE_FILE)) as store:
    store_ids = np.asarray(store.ids(), dtype=np.int64)
  store_set = IdSet.of(fingerprints.ids_record(store_ids))
  bm25_ids = lucene_ids(part(contracts.BUNDLE_LUCENE_DIR))
  bm25_set = IdSet.of(fingerprints.ids_record(bm25_ids))
  if not store_set == index.ids == bm25_set:
    raise ValueError(f"{config.out}: after the update the parts hold other ids (store "
                     f"{store_set.count}, index {index.ids.count}, Lucene {bm25_set.count})")
  operations = tuple(parent.lineage.operations) if parent.lineage else ()
  if len(plan.deleted):
    operations += (bundle_manifest.Operation("delete", int(len(plan.deleted)),
                                             os.path.abspath(config.delete),
                                             fingerprints.file_sha256(config.delete)),)
  if rows:
    operations += (bundle_manifest.Operation("add", len(rows), os.path.abspath(config.add),
                                             fingerprints.file_sha256(config.add)),)
  manifest = dataclasses.replace(
      parent,
      created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      versions=bundle_manifest.running_versions(),
      documents=dataclasses.replace(parent.documents, count=int(len(store_ids)),
                                    ids=store_set),
      index=index,
      bm25=dataclasses.replace(parent.bm25, documents=int(len(bm25_ids)), ids=bm25_set),
      metadata=bundle_manifest.MetadataPart(tuple(fields)),
      lineage=bundle_manifest.Lineage(
          bundle_manifest.Parent(os.path.abspath(parent_dir), parent.created,
                                 fingerprints.file_sha256(
                                     bundle_manifest.manifest_path(parent_dir))),
          operations),
      format_version=bundle_manifest.FORMAT_VERSION).signed(new_dir)
  manifest.write(new_dir)
  return manifest


if __name__ == "__main__":
  import sys
  from twotower import cli
  sys.exit(cli.run_stage("bundle", ["update", *sys.argv[1:]]))
