"""`twotower index`: build a FAISS index (flat / IVF / HNSW / IVF-PQ, inner product) from
embedding shards, streamed, and write it atomically; optionally as several index shards that
`twotower search` serves together through `faiss.IndexShards`.

  twotower index --embeddings run/embeddings --out run/index.faiss --type ivfpq --nlist 4096
  twotower index --embeddings run/embeddings --out run/index.faiss --type ivfpq \
      --num_index_shards 4      # writes run/index-0000{0..3}-of-00004.faiss
  twotower index --embeddings run/embeddings --out run/index.faiss --type ivfpq_rerank
      # + run/index.vectors.npy (and index.ids.npy): `twotower search` re-ranks exactly
  twotower index --embeddings 'run/emb-*' --out run/index.faiss
      # the folders of `twotower embed --num_input_shards N --input_shard i`, read together
      # (all N of them, each once; eval.embeddings); vectors go in in id order, so the index
      # is the one an unsharded run's embeddings give, byte for byte

Beside each index file, `<file>.vectors.json` (twotower.core.fingerprints) records the model of the
vectors (from the embeddings' own record) and the ids the index holds (read back from it);
shards of two models are refused, naming both, and `twotower search` checks its queries'
model against it. Embeddings whose model no record names (another tool's Parquet, a twotower
before the records), and input shards whose input no content digest records, are refused
unless `--allow_unchecked_vectors` takes them unchecked (then the index records no model).

`run(IndexConfig) -> IndexResult` is the typed entry point (twotower.commands.index parses the
flags).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time

import numpy as np

from twotower.core import file_outputs
from twotower.core import fingerprints
from twotower.core import files as tio
from twotower.core import outputs
from twotower.core.contracts import codecs
from twotower.eval import embeddings
from twotower.eval import faiss_index
from twotower.eval import rerank

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class IndexConfig:
  """Flags of `twotower index`."""
  embeddings: str                     # embed output folder(s), files or globs, comma-separated
                                      # (eval.embeddings: input shards read as one set)
  out: str                            # index file (e.g. index.faiss)
  index: faiss_index.IndexSpec = faiss_index.IndexSpec()
  num_index_shards: int = 1           # N > 1: OUT-SSSSS-of-NNNNN.faiss, for IndexShards
  block_rows: int = 65_536            # vectors read and added per step (bounds memory)
  threads: int = 0                    # FAISS OpenMP threads (0: all)
  overwrite: bool = False             # replace an --out made with other settings
  allow_unchecked_vectors: bool = False  # take embeddings no record vouches for (their
                                      # model, an input shard's input), with a warning


@dataclasses.dataclass(frozen=True)
class IndexResult:
  paths: tuple[str, ...]
  vectors: int
  seconds: float


def run(job: IndexConfig) -> IndexResult:
  import faiss  # pylint: disable=import-outside-toplevel
  if job.threads:
    faiss.omp_set_num_threads(job.threads)
  allow = job.allow_unchecked_vectors
  files = embeddings.embedding_files(job.embeddings, allow_unchecked=allow)
  for path in files:  # a candidates or questions file given as embeddings: named, not KeyError
    codecs.require_kind(path, tio.open_parquet(path).schema_arrow.names, "embeddings")
  model = fingerprints.one_model(fingerprints.embedding_records(files), allow_unchecked=allow)
  if faiss_index.count_vectors(files)[0] == 0:
    # An empty index searches fine and finds nothing: every recall 0, no error anywhere.
    raise ValueError(f"{job.embeddings}: {len(files)} embedding shard(s) hold 0 vectors; "
                     "nothing to index (see the stats.json of `twotower embed`)")
  tio.log_settings("index", {"embeddings": job.embeddings, "shards_in": len(files),
                             "factory": job.index.factory or job.index.type, "out": job.out,
                             "index_shards": job.num_index_shards})
  t0 = time.perf_counter()
  # The index file owns its shards and re-rank vectors (file_outputs.owned_files): another
  # run's index at --out is refused, and the files of the run it replaces that this one
  # does not write (4 shards replaced by 1) are removed.
  # Taking unchecked vectors changes no byte of the index: not a setting.
  settings = outputs.settings_of(job, skip=("block_rows", "threads",
                                            "allow_unchecked_vectors"))
  with file_outputs.owned_files(job.out, "index", settings, overwrite=job.overwrite,
                           inputs=files) as written:
    paths = faiss_index.shard_paths(job.out, job.num_index_shards)
    n, d = faiss_index.count_vectors(files)
    store_vectors = job.index.resolve(n, d).store_vectors
    if store_vectors and not tio.is_local(job.out):
      raise ValueError(f"{job.out}: re-rank vectors are memory-mapped at search time, so the "
                       "index must be written to a local path")
    ids = []  # each index file's ids, read back from it
    if job.num_index_shards <= 1:
      index = faiss_index.build_index(files, job.index, job.block_rows, progress=True)
      faiss_index.save_index(index, paths[0])
      written.append(paths[0])
      ids.append(faiss_index.index_ids(index))
      total = index.ntotal
    else:
      total = 0
      for path, shard in zip(paths, faiss_index.iter_index_shards(
          files, job.index, job.num_index_shards, job.block_rows, progress=True)):
        faiss_index.save_index(shard, path)
        written.append(path)
        ids.append(faiss_index.index_ids(shard))
        total += shard.ntotal
        del shard
    # One record per index file, each of the whole index (its shards search together).
    covered = fingerprints.ids_record(np.concatenate(ids))
    for path in paths:
      fingerprints.write_record(fingerprints.record_path(path), model, covered, d)
      written.append(fingerprints.record_path(path))
    if store_vectors:
      # Each index file gets the vectors of the ids it holds: a shard re-ranks its own short
      # list, and the shards' exact lists merge exactly.
      for s, path in enumerate(paths):
        rerank.write_vectors(path, lambda s=s: faiss_index.shard_blocks(
            files, s, job.num_index_shards, n, job.block_rows), d)
        written.extend(rerank.sidecar_paths(path))
  seconds = time.perf_counter() - t0
  logger.info("index: %d vectors in %s (%.1f s)", total, ", ".join(paths), seconds)
  return IndexResult(tuple(paths), total, seconds)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("index"))
