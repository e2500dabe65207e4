"""Reading embeddings: which files a source names, and the blocks of vectors they hold. One
definition for `index`, `search` (its queries and --reference), `bundle`, the benchmarks and
the tests.

A source (`--embeddings`, `--queries`, `--reference`) is

  * a `twotower embed` output folder: the shards its manifest lists (outputs.listed), never a
    stray shard of another run; a folder without a manifest (an older output, or files put
    together by hand): its *.parquet;
  * a Parquet file, or a glob of files;
  * several of these, comma-separated, or a glob that matches local folders (`run/emb-*`;
    on an object store, which has no folders, a glob of the files: `gs://b/emb-*/*.parquet`):
    their union.

The folders of `twotower embed --num_input_shards N --input_shard i` are read only as a
complete set: every i of one N exactly once, all of one input (the `input_shard` record of
each stats.json, contracts.EMBED_INPUT_SHARD_KEY: a digest of the whole input's rows by their
content, pipelines.embed.input_record), nothing else beside them; anything else is refused
with a one-line error naming what is missing, given twice or mixed (shards of two inputs:
both folders and both shards). Shards recorded before their input was digested by content
(by file names and row counts only) cannot be told apart from shards of another input of the
same names and counts: refused, unless the caller takes them unchecked
(fingerprints.UNCHECKED_FLAG). (Their models are checked by the caller, as for any source:
fingerprints.one_model over embedding_records.)

Where the record of an index file's vectors lives (`index_record`): its `<file>.vectors.json`,
or, for a retriever bundle's `index.faiss`, the bundle's `manifest.json` (its model and the
index's ids), read, never rewritten. (An embed folder's is its `vectors.json`:
fingerprints.embedding_records.)

An index adds its vectors in id order (`iter_blocks_by_id`), so that it does not depend on how
the vectors were split into files and folders: the input shards' union gives the same index,
byte for byte, as one unsharded run (and `--num_shards 1` as `--num_shards 8`).
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import tempfile
from typing import Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from twotower.core import contracts
from twotower.core import fingerprints
from twotower.core import files as tio
from twotower.core import outputs
from twotower.core.contracts import bundle_manifest

logger = logging.getLogger(__name__)

#: Most id-range buckets `iter_blocks_by_id` spills vectors into (temporary files open at
#: once); a bucket holds at least `block_rows` rows, so memory is about n / MAX_BUCKETS rows.
MAX_BUCKETS = 256
_GLOB_CHARS = "*?["


# ---------------------------------------------------------------------------------------------
# Which files.
# ---------------------------------------------------------------------------------------------


def embedding_files(source: str, *, allow_unchecked: bool = False,
                    flag: Optional[str] = fingerprints.UNCHECKED_FLAG) -> list[str]:
  """The embedding Parquet files `source` names (see the module docstring), folders in input
  shard order, each folder's files in its manifest's order. `allow_unchecked`, `flag`: for
  input shards whose input no content digest records (check_input_shards).

  Raises:
    FileNotFoundError: a part of `source` matches nothing.
    ValueError: a folder whose manifest lists no shard, or input shards that are not one
      complete set (names the folders).
  """
  folders: list[str] = []
  files: list[str] = []
  for part in (p.strip() for p in source.split(",")):
    if part:
      part_folders, part_files = _expand(part)
      folders += part_folders
      files += part_files
  folders = _unique(folders)
  # Files named one by one inside shard folders take part in the check as their folders.
  parents = [_parent(f) for f in files]
  ordered = check_input_shards(_unique(folders + [p for p in parents if p not in folders]),
                               source, allow_unchecked=allow_unchecked, flag=flag)
  rank = {folder: r for r, folder in enumerate(ordered)}
  result = [f for folder in folders_in(ordered, folders) for f in folder_files(folder)]
  # Loose files after the folders, those of shard folders in shard order.
  result += sorted(files, key=lambda f: rank.get(_parent(f), len(rank)))
  return _unique(result)


def folders_in(ordered: Sequence[str], given: Sequence[str]) -> list[str]:
  """The folders of `given`, in the order of `ordered` (input shard order)."""
  chosen = set(given)
  return [f for f in ordered if f in chosen]


def folder_files(folder: str) -> list[str]:
  """The embedding shards of one folder: those its manifest lists, else its *.parquet."""
  listed = outputs.listed(folder) if tio.is_local(folder) else None
  if listed is None:
    return tio.match_files(f"{folder.rstrip('/')}/*.parquet")
  shards = [f for f in listed if f.endswith(contracts.EMBEDDINGS_SUFFIX)]
  if not shards and input_shard(folder) is None:  # an input shard of a few rows may hold none
    raise ValueError(f"{folder}: its manifest lists no embedding shards")
  return shards


def input_shard(folder: str) -> Optional[dict]:
  """The input shard record of an embed output folder's stats.json, or None (unsharded, or
  no stats.json).

  Raises:
    ValueError: a record that is not one (names the file).
  """
  path = contracts.stats_path(folder)
  if tio.is_local(path):
    if not os.path.isfile(path):
      return None
    stats = tio.read_json(path)
  else:
    try:
      stats = tio.read_json(path)
    except OSError:  # no such object (Beam raises its own IOError)
      return None
  record = stats.get(contracts.EMBED_INPUT_SHARD_KEY) if isinstance(stats, dict) else None
  if record is None:
    return None
  if (not isinstance(record, dict) or not isinstance(record.get("index"), int)
      or not isinstance(record.get("count"), int)
      or not 0 <= record["index"] < record["count"]):
    raise ValueError(f"{path}: {contracts.EMBED_INPUT_SHARD_KEY!r} is not an input shard "
                     f"record ({{'index': i, 'count': N, 'input': ...}}): {record!r}")
  return record


def check_input_shards(folders: Sequence[str], source: str = "", *,
                       allow_unchecked: bool = False,
                       flag: Optional[str] = fingerprints.UNCHECKED_FLAG) -> list[str]:
  """`folders` as given when none is an input shard; else, when they are every input shard
  of one input exactly once, in shard order. Shards whose record digests their input by
  names only (`by_content` false) are refused, or with `allow_unchecked` compared by those
  names with a warning (fingerprints.unchecked; `flag` names the flag that allows it).

  Raises:
    ValueError: a shard missing, given twice, of another N or another input, or a folder
      beside them that is not a shard; a shard whose input no content digest records, unless
      `allow_unchecked` (one line, naming the folders).
  """
  records = {folder: input_shard(folder) for folder in folders}
  sharded = [f for f in folders if records[f] is not None]
  if not sharded:
    return list(folders)
  where = f"{source}: " if source else ""
  for folder in sharded:
    if not by_content(records[folder]):
      fingerprints.unchecked(
          f"{where}{folder}: input shard {records[folder]['index']} of "
          f"{records[folder]['count']} records its input by file names and row counts only "
          "(embedded before shards digested their rows' content), so shards of another "
          "input with the same names and counts cannot be told apart; embed the shards "
          "again", allow_unchecked, flag)
      break
  first, head = sharded[0], records[sharded[0]]
  count = head["count"]
  for folder in folders:
    record = records[folder]
    if record is None:
      raise ValueError(f"{where}{folder} is not an input shard, but {first} is input shard "
                       f"{head['index']} of {count}: give the folders of one sharded "
                       "embedding, and only them")
    if record["count"] != count:
      raise ValueError(f"{where}{folder} is input shard {record['index']} of "
                       f"{record['count']}, but {first} is shard {head['index']} of {count}: "
                       "shards of two splits")
    if record.get("input") != head.get("input"):
      raise ValueError(f"{where}{folder} (input shard {record['index']} of {count}) embedded "
                       f"another input than {first} (input shard {head['index']} of {count}): "
                       f"{_describe_input(record.get('input'))} against "
                       f"{_describe_input(head.get('input'))}: shards of two inputs")
  by_index: dict[int, list[str]] = {}
  for folder in sharded:
    by_index.setdefault(records[folder]["index"], []).append(folder)
  for index, given in sorted(by_index.items()):
    if len(given) > 1:
      raise ValueError(f"{where}input shard {index} of {count} given twice: "
                       f"{' and '.join(given)}")
  missing = [i for i in range(count) if i not in by_index]
  if missing:
    have = ", ".join(f"{i} ({by_index[i][0]})" for i in sorted(by_index))
    raise ValueError(f"{where}input shard{'s' if len(missing) > 1 else ''} "
                     f"{', '.join(map(str, missing))} of {count} missing (given: {have})")
  return [by_index[i][0] for i in range(count)]


def by_content(record: dict) -> bool:
  """Whether an input shard record digests its input by the rows' content
  (pipelines.embed.input_record), not by file names and row counts (a twotower before)."""
  return isinstance((record.get("input") or {}).get("content_sha256"), str)


def _describe_input(record: Optional[dict]) -> str:
  if not record:
    return "no input record"
  if "content_sha256" in record:
    return (f"{record.get('kind')} ({record.get('doc_text')}), {record.get('rows')} rows, "
            f"content [{str(record['content_sha256'])[:fingerprints.SHORT]}]")
  return (f"{record.get('kind')}, {record.get('files')} files, {record.get('rows')} rows, "
          f"by names [{str(record.get('sha256'))[:fingerprints.SHORT]}]")


# ---------------------------------------------------------------------------------------------
# Where a record lives.
# ---------------------------------------------------------------------------------------------


def index_record(index_file: str) -> Optional[dict]:
  """The vectors record of an index file: `<file>.vectors.json` (`twotower index`), else, for
  a retriever bundle's `index.faiss` (its folder holds the bundle's manifest), the model and
  the index's ids the manifest records; None when neither is there.

  Raises:
    ValueError: no such index file; a record or bundle manifest that does not read; an
      index.faiss of another size or sha256 than its bundle's manifest records (not that
      bundle's).
  """
  if tio.is_local(index_file) and not os.path.isfile(index_file):
    raise ValueError(f"{index_file}: no such index file")
  record = fingerprints.read_record(fingerprints.record_path(index_file))
  if record is not None or not tio.is_local(index_file):
    return record
  folder = os.path.dirname(os.path.abspath(index_file))
  manifest_path = bundle_manifest.manifest_path(folder)
  if (os.path.basename(index_file) != contracts.BUNDLE_INDEX_FILE
      or not os.path.isfile(manifest_path) or not _is_bundle_manifest(manifest_path)):
    return None
  manifest = bundle_manifest.read(folder)  # BundleError: one line naming the file
  listed = manifest.files.get(contracts.BUNDLE_INDEX_FILE)
  size = os.path.getsize(index_file)
  if listed is None or listed.bytes != size:
    raise ValueError(f"{index_file}: {size} bytes, but the bundle manifest {manifest_path} "
                     f"records {'no such part' if listed is None else f'{listed.bytes} bytes'}"
                     ": not that bundle's index, so its model is unknown")
  # The content, as every bundle loader checks it by default (Retriever.load's sha256): a
  # same-size index of another bundle would otherwise borrow this manifest's model.
  if fingerprints.file_sha256(index_file) != listed.sha256:
    raise ValueError(f"{index_file}: differs from its sha256 checksum in the bundle manifest "
                     f"{manifest_path} (changed, or another bundle's index), so its model is "
                     "unknown")
  return {"model": {"path": manifest.model.source, "fingerprint": manifest.model.fingerprint},
          "ids": {"count": manifest.index.ids.count, "sha256": manifest.index.ids.sha256},
          "dim": manifest.index.dim}


def _is_bundle_manifest(path: str) -> bool:
  """A manifest.json of a bundle (any version: bundle_manifest.read says which it reads),
  not some other file of that name beside an index."""
  try:
    value = tio.read_json(path)
  except ValueError:
    return False
  return isinstance(value, dict) and value.get("format") == bundle_manifest.FORMAT


def _expand(part: str) -> tuple[list[str], list[str]]:
  """(folders, files) one comma-separated part names."""
  if not any(c in part for c in _GLOB_CHARS):
    if _is_folder(part):
      return [part.rstrip("/") or "/"], []
    return [], tio.match_files(part)
  # A glob of folders (`run/emb-*`): Beam's match lists files only.
  folders = (sorted(p for p in glob.glob(part) if os.path.isdir(p)) if tio.is_local(part)
             else [])
  try:
    files = tio.match_files(part)
  except FileNotFoundError:
    if not folders:
      raise
    files = []
  return folders, files


def _is_folder(path: str) -> bool:
  if tio.is_local(path):
    return os.path.isdir(path)
  return not path.endswith(contracts.EMBEDDINGS_SUFFIX)  # object stores have no folders


def _parent(path: str) -> str:
  return os.path.dirname(path) if tio.is_local(path) else path.rsplit("/", 1)[0]


def _unique(items: Sequence[str]) -> list[str]:
  return list(dict.fromkeys(items))


# ---------------------------------------------------------------------------------------------
# Blocks of vectors.
# ---------------------------------------------------------------------------------------------


def _to_numpy(batch: pa.RecordBatch, path: str) -> tuple[np.ndarray, np.ndarray]:
  ids = batch.column("id")
  emb = batch.column("embedding")
  if emb.null_count or ids.null_count:
    keep = pa.compute.and_(pa.compute.is_valid(emb), pa.compute.is_valid(ids))
    logger.warning("%s: skipped %d rows with a null id or embedding", path,
                   len(batch) - pa.compute.sum(keep).as_py())
    ids, emb = ids.filter(keep), emb.filter(keep)
  d = emb.type.list_size
  vectors = np.ascontiguousarray(emb.flatten().to_numpy(zero_copy_only=False)
                                 .reshape(-1, d), dtype=np.float32)
  if pa.types.is_integer(ids.type):
    return ids.to_numpy().astype(np.int64, copy=False), vectors
  return np.asarray(ids.to_pylist(), dtype=object), vectors


def iter_blocks(files: Sequence[str], block_rows: int = 65_536,
                progress: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
  """Yields (ids int64[b] or str[b], vectors float32[b, d]) blocks, file after file."""
  # disable=None: no bar where stderr is not a terminal (log files, CI).
  for f in tqdm(files, desc="shards", unit="shard", disable=None if progress else True):
    pf = tio.open_parquet(f)
    for batch in pf.iter_batches(batch_size=block_rows, columns=["id", "embedding"]):
      yield _to_numpy(batch, f)


def iter_blocks_by_id(files: Sequence[str], block_rows: int = 65_536,
                      progress: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
  """The blocks of `iter_blocks`, in ascending id order (equal ids in file order), each at
  most `block_rows` rows: the order an index adds (and samples) its vectors in, whatever
  files and folders hold them.

  Memory: the ids (8 bytes a row, as the index's id record reads them anyway) and one
  id-range bucket of vectors. Above one bucket, the vectors are first spilled by id range into
  up to MAX_BUCKETS temporary files (deleted when closed), then each bucket is sorted and
  yielded: one more write and read of the vectors."""
  ids = fingerprints.file_ids(files)
  n = len(ids)
  if n == 0:
    return
  bucket_rows = max(block_rows, -(-n // MAX_BUCKETS))
  if n <= bucket_rows:  # one bucket: sorted in memory
    blocks = list(iter_blocks(files, block_rows, progress))
    all_ids = np.concatenate([b[0] for b in blocks])
    vectors = np.concatenate([b[1] for b in blocks])
    del blocks
    yield from _sorted_slices(all_ids, vectors, block_rows)
    return
  if ids.dtype != np.int64:
    raise ValueError(f"{files[0]}: ids of {ids.dtype}, not int64: only document embeddings "
                     "(int64 ids) are ordered for an index")
  # The first id of each bucket; equal ids always fall into one bucket (searchsorted right).
  bounds = np.unique(np.sort(ids)[::bucket_rows])
  del ids
  with contextlib.ExitStack() as stack:
    spills = [stack.enter_context(tempfile.TemporaryFile(prefix="twotower-sort-"))
              for _ in bounds]
    record = None
    for block_ids, vectors in iter_blocks(files, block_rows, progress):
      if record is None:
        record = np.dtype([("id", "<i8"), ("vector", "<f4", (vectors.shape[1],))])
      bucket = np.searchsorted(bounds, block_ids, side="right") - 1
      order = np.argsort(bucket, kind="stable")
      rows = np.empty(len(order), record)
      rows["id"], rows["vector"] = block_ids[order], vectors[order]
      edges = np.searchsorted(bucket[order], np.arange(len(bounds) + 1))
      for b in range(len(bounds)):
        if edges[b] < edges[b + 1]:
          spills[b].write(rows[edges[b]:edges[b + 1]].tobytes())
    for spill in spills:
      spill.seek(0)
      rows = np.frombuffer(spill.read(), dtype=record)
      yield from _sorted_slices(rows["id"], rows["vector"], block_rows)


def _sorted_slices(ids: np.ndarray, vectors: np.ndarray, block_rows: int
                   ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
  order = np.argsort(ids, kind="stable")
  for start in range(0, len(order), block_rows):
    take = order[start:start + block_rows]
    yield ids[take], np.ascontiguousarray(vectors[take], dtype=np.float32)


def read_embeddings(source: str, files: Optional[Sequence[str]] = None
                    ) -> tuple[np.ndarray, np.ndarray]:
  """All (ids, vectors) of a source (of `files`, where the caller has resolved them), in
  file order: for queries, not for the corpus."""
  blocks = list(iter_blocks(embedding_files(source) if files is None else files))
  if not blocks:
    raise ValueError(f"{source}: no embeddings")
  return np.concatenate([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks])
