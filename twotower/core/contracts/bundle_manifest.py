"""A retriever bundle's `manifest.json` (format v3; v2 still read), as one frozen record: what
`twotower bundle`, `twotower bundle update` and the grid's bundle cell write, and what
`Retriever.load` reads and checks.

    manifest = BundleManifest(created=..., versions=..., model=ModelPart(...), ...)
    manifest.signed(bundle_dir).write(bundle_dir)   # every file's size and sha256, then JSON
    manifest = read(bundle_dir)                      # parsed, each field typed, or BundleError
    manifest.check_files(bundle_dir, "sha256")       # every part present with its digest
    manifest.check_ids(bundle_dir)                   # the index and Lucene hold the store's ids

The JSON, in the order it is written (a contract: the same inputs give the same bytes):

    format, format_version   "twotower-retriever-bundle", 3 (READABLE_VERSIONS: 2 and 3)
    created, versions        when, and the stack that built it (Python, RECORDED_PACKAGES)
    model                    source, fingerprint (twotower.core.fingerprints), signature,
                             embedding_dim, config (the run's config.yaml text, or "")
    documents                count, source, kind, doc_text, ids (the store's id set)
    index                    factory, vectors, dim, metric, ids (read back from the index:
                             the ids its searches can return), tombstones (v3: vectors of
                             deleted documents the index cannot remove, HNSW's; their ids in
                             TOMBSTONES_FILE, filtered out of every search)
    bm25                     documents, k1, b, ids (read back from Lucene)
    hybrid                   weight, tuned_on, metric, questions, depth, method, note
                             [, partner: the dense row the grid's fuse cell chose]
    metadata                 (v3) fields: [{name, type, documents}] stored in `metadata/`
                             (contracts.bundle_metadata), what filters may name
    lineage                  (v3, an updated bundle only) parent: {path, created,
                             manifest_sha256}, operations: [{op: add | delete, documents,
                             source, sha256}], what `twotower bundle update` did to the parent
    files                    relative path -> {bytes, sha256}, every file but the manifest
                             (and the stage's ownership record, twotower.core.outputs)

Format 2 (before metadata) has no `metadata` part, no `lineage` and no tombstones: such a
bundle loads and searches as before, filters by ids only, and a v2 manifest read and written
again is the same bytes.

It lives in contracts/ beside the other records because it is one: the writer
(deploy.bundling.bundle), the grid (experiment.cells) and the reader (deploy.serving.retriever)
all import it from here, and none of them imports another for the format.
"""

from __future__ import annotations

import dataclasses
import os
import platform
from typing import Any, Mapping, Optional

from twotower.core import fingerprints
from twotower.core import files as tio
from twotower.core.contracts import bundle_metadata
from twotower.core.contracts import layout

FORMAT = "twotower-retriever-bundle"
#: Bumped when the layout or the manifest's meaning changes; a reader refuses other versions.
FORMAT_VERSION = 3  # 2: the model's fingerprint and each part's id set; 3: metadata/,
                    # tombstones, lineage
#: The versions this reader reads.
READABLE_VERSIONS = (2, 3)
#: Ids of deleted documents whose vectors the index keeps (HNSW cannot remove one): int64,
#: sorted. Present only when the manifest counts tombstones.
TOMBSTONES_FILE = "tombstones.npy"
#: What an update's lineage records for each operation.
OPERATIONS = ("add", "delete")
#: Library versions recorded in the manifest (a difference at load is logged, not refused).
RECORDED_PACKAGES = ("twotower", "tensorflow", "tensorflow-text", "faiss-cpu", "pyserini")
#: How the hybrid combines the two sides (eval.fusion.interpolate), and what its weight means.
HYBRID_METHOD = "interpolate"
HYBRID_NOTE = "BM25's weight, as `twotower fuse --run BM25 DENSE --weight W`"
#: How much of the bundle `check_files` reads: presence, sizes, or contents.
VERIFY = ("none", "size", "sha256")


class BundleError(ValueError):
  """A bundle that is incomplete or whose parts disagree; the message names the part."""


# ---------------------------------------------------------------------------------------------
# The record.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class IdSet:
  """An id set's digest (fingerprints.ids_record): equal sets have equal records."""
  count: int
  sha256: str

  @classmethod
  def of(cls, record: Mapping[str, Any]) -> "IdSet":
    """From fingerprints.ids_record's {"count", "sha256"}."""
    return cls(int(record["count"]), str(record["sha256"]))


@dataclasses.dataclass(frozen=True)
class FileDigest:
  bytes: int
  sha256: str


@dataclasses.dataclass(frozen=True)
class ModelPart:
  """The query tower: the SavedModel it was copied from and the model's fingerprint."""
  source: str
  fingerprint: str
  signature: str
  embedding_dim: int
  config: str  # the training run's config.yaml beside the export ("" when there is none)


@dataclasses.dataclass(frozen=True)
class DocumentsPart:
  """The store: what the documents are and where they came from."""
  count: int
  source: str
  kind: str      # "candidates" (a ReQA directory) or "passages" (a pair pipeline output)
  doc_text: str  # a candidate's text as BM25 and the towers read it; "title+text" for passages
  ids: IdSet


@dataclasses.dataclass(frozen=True)
class IndexPart:
  """The FAISS index, as the index stage read it back: `vectors` it holds, of which
  `tombstones` are deleted documents' (v3), and the `ids` of the others."""
  factory: str
  vectors: int
  dim: int
  metric: str
  ids: IdSet
  tombstones: int = 0


@dataclasses.dataclass(frozen=True)
class Bm25Part:
  """The Lucene index and the BM25 parameters a search uses."""
  documents: int
  k1: float
  b: float
  ids: IdSet


@dataclasses.dataclass(frozen=True)
class Hybrid:
  """BM25's weight in the hybrid and where it was chosen: `tuned_on` a validation split
  (None: given, untuned), `questions` how many it had (None: unknown to the bundle, as when
  the grid's fuse cell chose it), `partner` the dense row the fuse cell kept (grid only)."""
  weight: float
  depth: int
  tuned_on: Optional[str] = None
  metric: Optional[str] = None
  questions: Optional[int] = 0
  method: str = HYBRID_METHOD
  note: str = HYBRID_NOTE
  partner: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class MetadataPart:
  """The document fields `metadata/` stores (v3)."""
  fields: tuple[bundle_metadata.FieldInfo, ...]

  def types(self) -> dict[str, str]:
    return {f.name: f.type for f in self.fields}


@dataclasses.dataclass(frozen=True)
class Parent:
  """The bundle an update started from: where it was, when it was made, its manifest's
  sha256 (which pins every file of it)."""
  path: str
  created: str
  manifest_sha256: str


@dataclasses.dataclass(frozen=True)
class Operation:
  """One operation of an update: `op` (OPERATIONS), how many `documents`, from which file
  (`source`, with its sha256)."""
  op: str
  documents: int
  source: str
  sha256: str


@dataclasses.dataclass(frozen=True)
class Lineage:
  """Where an updated bundle comes from (v3): its parent and the operations applied, the
  parent's own lineage's operations first."""
  parent: Parent
  operations: tuple[Operation, ...]


@dataclasses.dataclass(frozen=True)
class BundleManifest:
  """manifest.json of a retriever bundle (see the module docstring)."""
  created: str
  versions: Mapping[str, str]
  model: ModelPart
  documents: DocumentsPart
  index: IndexPart
  bm25: Bm25Part
  hybrid: Hybrid
  files: Mapping[str, FileDigest] = dataclasses.field(default_factory=dict)
  metadata: Optional[MetadataPart] = None
  lineage: Optional[Lineage] = None
  format_version: int = FORMAT_VERSION

  def __post_init__(self):
    if self.format_version >= 3 and self.metadata is None:  # v3 always lists its fields
      object.__setattr__(self, "metadata", MetadataPart(()))

  def to_json(self) -> dict:
    """The manifest as written, field for field in the format's order (a v2 manifest as v2
    wrote it)."""
    hybrid = dataclasses.asdict(self.hybrid)
    hybrid = {k: hybrid[k] for k in ("weight", "tuned_on", "metric", "questions", "depth",
                                     "method", "note")}
    if self.hybrid.partner is not None:
      hybrid["partner"] = self.hybrid.partner
    index = dataclasses.asdict(self.index)
    if self.format_version < 3:
      del index["tombstones"]
    value = {"format": FORMAT, "format_version": self.format_version, "created": self.created,
             "versions": dict(self.versions), "model": dataclasses.asdict(self.model),
             "documents": dataclasses.asdict(self.documents), "index": index,
             "bm25": dataclasses.asdict(self.bm25), "hybrid": hybrid}
    if self.format_version >= 3:
      value["metadata"] = {"fields": [dataclasses.asdict(f) for f in self.metadata.fields]}
      if self.lineage is not None:
        value["lineage"] = {"parent": dataclasses.asdict(self.lineage.parent),
                            "operations": [dataclasses.asdict(o)
                                           for o in self.lineage.operations]}
    value["files"] = {rel: dataclasses.asdict(d) for rel, d in self.files.items()}
    return value

  @property
  def parts(self) -> tuple[str, ...]:
    """The parts a bundle of this manifest's version holds."""
    extra = (bundle_metadata.METADATA_DIR,) if self.format_version >= 3 else ()
    if self.index.tombstones:
      extra += (TOMBSTONES_FILE,)
    return layout.BUNDLE_PARTS + extra

  @classmethod
  def from_json(cls, value: Any, path: str) -> "BundleManifest":
    """Parses a manifest read from `path`.

    Raises:
      BundleError: one line naming `path` and the first field that is missing or mistyped.
    """
    if not isinstance(value, dict):
      raise BundleError(f"{path}: part 'manifest.json' is a JSON {type(value).__name__}, "
                        f"not a {FORMAT} manifest (an object)")
    if value.get("format") != FORMAT:
      raise BundleError(f"{path}: not a {FORMAT} manifest")
    version = value.get("format_version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
      raise BundleError(f"{path}: bundle format version {version}, this twotower reads "
                        f"versions {', '.join(map(str, READABLE_VERSIONS))}: rebuild it with "
                        "`twotower bundle`")
    top = _Fields(path, value)
    versions, files = top.nested("versions"), top.nested("files")
    index = top.record("index", IndexPart)
    metadata = lineage = None
    if version >= 3:
      fields = top.nested("metadata").array("fields")
      metadata = MetadataPart(tuple(fields.record_at(i, bundle_metadata.FieldInfo)
                                    for i in range(len(fields.value))))
      if "lineage" in value:
        record = top.nested("lineage")
        ops = record.array("operations")
        lineage = Lineage(record.record("parent", Parent),
                          tuple(ops.record_at(i, Operation) for i in range(len(ops.value))))
    elif "tombstones" in top.nested("index").value:
      raise BundleError(f"{path}: the manifest's 'index' has 'tombstones', which format 2 "
                        "does not: rebuild the bundle")
    return cls(created=top.get("created", str),
               versions={name: versions.get(name, str) for name in versions.value},
               model=top.record("model", ModelPart),
               documents=top.record("documents", DocumentsPart),
               index=index, bm25=top.record("bm25", Bm25Part),
               hybrid=top.record("hybrid", Hybrid),
               files={rel: files.record(rel, FileDigest) for rel in files.value},
               metadata=metadata, lineage=lineage, format_version=version)

  # -------------------------------------------------------------------------------------------
  # Writing.
  # -------------------------------------------------------------------------------------------

  def signed(self, bundle_dir: str) -> "BundleManifest":
    """This manifest with the size and sha256 of every file under `bundle_dir` (write it
    last: it is not one of them)."""
    return dataclasses.replace(self, files=file_digests(bundle_dir))

  def write(self, bundle_dir: str) -> None:
    tio.write_json(layout.bundle_path(bundle_dir, layout.BUNDLE_MANIFEST_FILE), self.to_json())

  # -------------------------------------------------------------------------------------------
  # Checking a bundle against it.
  # -------------------------------------------------------------------------------------------

  def check_files(self, bundle_dir: str, verify: str = "sha256") -> None:
    """Every part present, every file the manifest lists there, with its size (`verify`
    "size") and its sha256 too ("sha256": a same-size file of another bundle is caught).

    Raises:
      BundleError: naming the part and the file.
    """
    if verify not in VERIFY:
      raise ValueError(f"verify must be one of {VERIFY}, got {verify!r}")
    if not self.files:
      raise BundleError(f"{bundle_dir}: manifest lists no files")
    for part in self.parts:
      if not os.path.exists(layout.bundle_path(bundle_dir, part)):
        raise BundleError(f"{bundle_dir}: part {part!r} is missing (an incomplete bundle)")
    for rel, want in self.files.items():
      path = os.path.join(bundle_dir, rel)
      part = rel.split(os.sep, 1)[0]
      if not os.path.isfile(path):
        raise BundleError(f"{bundle_dir}: part {part!r} is missing its file {rel}")
      if verify in ("size", "sha256") and os.path.getsize(path) != want.bytes:
        raise BundleError(f"{bundle_dir}: part {part!r}: {rel} has {os.path.getsize(path)} "
                          f"bytes, the manifest says {want.bytes}")
      if verify == "sha256" and fingerprints.file_sha256(path) != want.sha256:
        raise BundleError(f"{bundle_dir}: part {part!r}: {rel} differs from its sha256 "
                          "checksum in the manifest (changed, or a file of another bundle)")

  def check_ids(self, bundle_dir: str) -> None:
    """The index and Lucene hold the store's ids: the build read each part's ids back and
    recorded their digests, and the file checksums tie the parts to those digests.

    Raises:
      BundleError: naming the part whose ids differ.
    """
    store = self.documents.ids
    for part, ids in ((layout.BUNDLE_INDEX_FILE, self.index.ids),
                      (layout.BUNDLE_LUCENE_DIR, self.bm25.ids)):
      if ids != store:
        raise BundleError(f"{bundle_dir}: part {part!r} holds other ids than part "
                          f"{layout.BUNDLE_STORE_FILE!r} ({ids.count} against {store.count}, "
                          "by the manifest's id digests): parts of two bundles")


def manifest_path(bundle_dir: str) -> str:
  return layout.bundle_path(bundle_dir, layout.BUNDLE_MANIFEST_FILE)


def read(bundle_dir: str) -> BundleManifest:
  """The manifest of `bundle_dir`, parsed.

  Raises:
    BundleError: no such folder, no manifest, not JSON, another format or version, or a
      field missing or mistyped: one line naming the file (and the field).
  """
  path = manifest_path(bundle_dir)
  if not os.path.isdir(bundle_dir):
    raise BundleError(f"{bundle_dir}: no such bundle directory")
  if not os.path.isfile(path):
    raise BundleError(f"{bundle_dir}: part 'manifest.json' is missing (not a bundle, or an "
                      "incomplete one: `twotower bundle` writes it last)")
  try:
    value = tio.read_json(path)
  except ValueError as e:
    raise BundleError(f"{path}: part 'manifest.json' is not JSON ({e})") from e
  return BundleManifest.from_json(value, path)


def running_versions() -> dict[str, str]:
  """Python's and RECORDED_PACKAGES' versions in this process: what a manifest records (the
  writer) and what a reader compares it with."""
  return {"python": platform.python_version(), **tio.package_versions(RECORDED_PACKAGES)}


def file_digests(bundle_dir: str) -> dict[str, FileDigest]:
  """Every file under the bundle but the manifest and the stage's ownership record
  (twotower.core.outputs writes it after the manifest): relative path -> bytes and sha256, sorted
  by path."""
  skipped = {layout.BUNDLE_MANIFEST_FILE, layout.MANIFEST_FILE}
  files = {}
  for root, _, names in os.walk(bundle_dir):
    for name in sorted(names):
      path = os.path.join(root, name)
      rel = os.path.relpath(path, bundle_dir)
      if rel not in skipped:
        files[rel] = FileDigest(os.path.getsize(path), fingerprints.file_sha256(path))
  return dict(sorted(files.items()))


# ---------------------------------------------------------------------------------------------
# Parsing: one typed field at a time, each error naming the file and the field.
# ---------------------------------------------------------------------------------------------


#: Field type -> (check, the name a message gives it). Numbers are kept as JSON gave them (an
#: int where a float is expected stays an int), so that a manifest read and written again is
#: the same bytes; a bool is never a number.
_KINDS = {
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "int"),
    float: (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "float"),
    str: (lambda v: isinstance(v, str), "str"),
    Optional[str]: (lambda v: v is None or isinstance(v, str), "str or null"),
    Optional[int]: (lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
                    "int or null"),
}
_TYPES = {"int": int, "float": float, "str": str, "Optional[str]": Optional[str],
          "Optional[int]": Optional[int], "IdSet": IdSet}


@dataclasses.dataclass(frozen=True)
class _Fields:
  """One JSON object of the manifest at `path`; `key` names it in messages ("" for the top
  level, "model", "files.index.faiss", ...)."""
  path: str
  value: Mapping[str, Any]
  key: str = ""

  def _where(self) -> str:
    return f"the manifest's {self.key!r}" if self.key else "the manifest"

  def get(self, name: str, kind: Any) -> Any:
    field = self.value.get(name)
    check, label = _KINDS[kind]
    if not check(field):
      raise BundleError(f"{self.path}: {self._where()} has no {label} {name!r} (got "
                        f"{field!r}): rebuild the bundle")
    return field

  def nested(self, name: str) -> "_Fields":
    value = self.value.get(name)
    if not isinstance(value, dict):
      raise BundleError(f"{self.path}: {self._where()} has no {name!r} object (not written "
                        "by `twotower bundle`, or edited): rebuild the bundle")
    return _Fields(self.path, value, f"{self.key}.{name}" if self.key else name)

  def array(self, name: str) -> "_Items":
    value = self.value.get(name)
    if not isinstance(value, list):
      raise BundleError(f"{self.path}: {self._where()} has no {name!r} list (not written by "
                        "`twotower bundle`, or edited): rebuild the bundle")
    return _Items(self.path, value, f"{self.key}.{name}" if self.key else name)

  def record(self, name: str, record: type) -> Any:
    """The object `name` as `record` (a dataclass of this module), each field checked by its
    annotation; a field with a default may be absent (it takes the default)."""
    return self._as_record(self.nested(name), record)

  @staticmethod
  def _as_record(fields: "_Fields", record: type) -> Any:
    values = {}
    for f in dataclasses.fields(record):
      if f.name not in fields.value and f.default is not dataclasses.MISSING:
        continue
      kind = _TYPES[f.type]
      values[f.name] = (fields.record(f.name, IdSet) if kind is IdSet
                        else fields.get(f.name, kind))
    return record(**values)


@dataclasses.dataclass(frozen=True)
class _Items:
  """One JSON list of the manifest, its items objects."""
  path: str
  value: list
  key: str

  def record_at(self, i: int, record: type) -> Any:
    item = self.value[i]
    if not isinstance(item, dict):
      raise BundleError(f"{self.path}: the manifest's '{self.key}[{i}]' is not an object: "
                        "rebuild the bundle")
    return _Fields._as_record(_Fields(self.path, item, f"{self.key}[{i}]"), record)
