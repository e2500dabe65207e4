"""Joins whose data goes through files on the local runner: bounded memory on one machine.

Beam's local runner (FnApiRunner, behind DirectRunner) runs a pipeline stage by stage and
holds every PCollection that crosses a stage boundary in memory: every GroupByKey's input,
every Reshuffle. On a dump that is the whole wikitext, every page and every passage, so its
memory grows with the dump. A distributed runner shuffles through its own service instead.

`Shuffle` chooses, once per pipeline, how the pair pipeline's groupings move their data:

* `Shuffle()` (any runner; the default off the local runner): Beam's own `GroupByKey`,
  `CoGroupByKey`, `Reshuffle`. The graph is exactly Beam's.
* `Shuffle(directory, buckets)` (the default on the local runner): a *disk shuffle*. The
  stage that produces (key, value) pairs appends them, pickled, to one file per hash bucket
  of the key (`_SpillFn`, fused into the producing stage); only (bucket, file)
  references go through Beam's GroupByKey; the consuming stage reads one bucket's files at a
  time and groups them in memory (`_GroupBucketFn`). Memory holds one bucket, and the number
  of buckets grows with the dump (`buckets_for`), so peak memory does not. With
  `--direct_num_workers=N` the buckets are spread over the workers (N processes on one
  machine share the directory).

The three transforms below take the `Shuffle` and give Beam's semantics either way:

    GroupByKey(shuffle)     PCollection[(K, V)] -> PCollection[(K, list[V])]
    CoGroupByKey(shuffle)   {tag: PCollection[(K, V)]} -> PCollection[(K, {tag: list[V]})]
                            (inputs named "<tag>:<n>" join their tag's group)
    Reshuffle(shuffle)      PCollection[T] -> PCollection[T], spread over workers

Values within a group come in no particular order (as with Beam); keys must be hashable,
and equal keys must have equal `repr` (str, int and tuples of them do), which decides the
bucket. Files live under `directory`, which the caller removes after the run
(pipelines.wiki.pairs does).
"""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
import re
import uuid
import zlib
from typing import Iterator, Optional, Sequence

import apache_beam as beam
from apache_beam.transforms import window

#: Target size of one bucket, in bytes of dump XML that produced it: the largest bucket in
#: memory (cleaned pages, grouped by title) takes about 2.5 bytes of Python objects per byte
#: of XML (16 MB measured for a 7 MB bucket), so about 20 MB here. Thousands of buckets cost
#: little: a file each per spilling stage.
BUCKET_XML_BYTES = 8 << 20
#: At least this many buckets: work for a few workers even on a small dump.
MIN_BUCKETS = 8
MAX_BUCKETS = 4096
#: A spill writer appends its buffers to disk after this many pickled bytes.
_FLUSH_BYTES = 1 << 20


def buckets_for(xml_bytes: int) -> int:
  """Buckets for a dump of `xml_bytes` (decompressed): one per BUCKET_XML_BYTES, within
  [MIN_BUCKETS, MAX_BUCKETS]."""
  return max(MIN_BUCKETS, min(MAX_BUCKETS, math.ceil(xml_bytes / BUCKET_XML_BYTES)))


@dataclasses.dataclass(frozen=True)
class Shuffle:
  """How groupings move data: through the runner (`directory` None) or through files."""
  directory: Optional[str] = None
  buckets: int = MIN_BUCKETS

  @property
  def on_disk(self) -> bool:
    return self.directory is not None


def _bucket(key, buckets: int) -> int:
  """A bucket that every process computes the same for equal keys (unlike `hash`)."""
  return zlib.crc32(repr(key).encode("utf-8", "surrogatepass")) % buckets


def _global(value):
  return window.GlobalWindows.windowed_value(value)


class _SpillFn(beam.DoFn):
  """(K, V) -> nothing per element; at the end of a bundle, (bucket, (tag, path)) per file
  written.

  Each record is pickled as it comes and buffered per bucket; the buffers are appended to
  the buckets' files every _FLUSH_BYTES, so memory holds at most that much, whatever the
  records' sizes (a batch count would not: a dump's pages run from 100 bytes to 1 MB).
  """

  def __init__(self, directory: str, buckets: int, tag: str = "", keyed: bool = True):
    self.directory = directory
    self.buckets = buckets
    self.tag = tag  # the CoGroupByKey tag of these records
    self.keyed = keyed  # False: spread elements round-robin (Reshuffle), no key

  def start_bundle(self):
    self._buffers = [bytearray() for _ in range(self.buckets)]
    self._paths: dict[int, str] = {}
    self._bundle = uuid.uuid4().hex
    self._buffered = 0
    self._next = 0

  def process(self, element):
    if self.keyed:
      bucket = _bucket(element[0], self.buckets)
    else:
      bucket = self._next
      self._next = (bucket + 1) % self.buckets
    data = pickle.dumps(element, protocol=pickle.HIGHEST_PROTOCOL)
    self._buffers[bucket] += data
    self._buffered += len(data)
    if self._buffered >= _FLUSH_BYTES:
      self._flush()

  def _flush(self):
    for bucket, buffer in enumerate(self._buffers):
      if not buffer:
        continue
      path = self._paths.get(bucket)
      if path is None:
        os.makedirs(self.directory, exist_ok=True)
        path = self._paths[bucket] = os.path.join(self.directory,
                                                  f"{bucket:05d}-{self._bundle}.pickle")
      # Opened per flush: a process may spill to thousands of bucket files.
      with open(path, "ab") as f:
        f.write(buffer)
      buffer.clear()
    self._buffered = 0

  def finish_bundle(self):
    self._flush()
    for bucket, path in sorted(self._paths.items()):
      yield _global((bucket, (self.tag, path)))


def _read_spill(path: str) -> Iterator:
  """The records of one spill file, in order."""
  with open(path, "rb", buffering=1 << 20) as f:
    while True:
      try:
        yield pickle.load(f)
      except EOFError:
        return
      except pickle.UnpicklingError as e:
        raise ValueError(f"{path}: damaged spill file (a worker died while writing?): {e}")


class _GroupBucketFn(beam.DoFn):
  """(bucket, [(tag, path)]) -> (K, list[V]) or (K, {tag: list[V]}) for every key of the
  bucket, read from its files."""

  def __init__(self, tags: Optional[Sequence[str]]):
    self.tags = tuple(tags) if tags is not None else None  # None: GroupByKey

  def process(self, element):
    _, refs = element
    groups: dict = {}
    for tag, path in sorted(refs):
      if self.tags is None:
        for key, value in _read_spill(path):
          values = groups.get(key)
          if values is None:
            groups[key] = [value]
          else:
            values.append(value)
      else:
        for key, value in _read_spill(path):
          entry = groups.get(key)
          if entry is None:
            entry = groups[key] = {t: [] for t in self.tags}
          entry[tag].append(value)
    while groups:  # hand groups on, and let go of each one
      yield groups.popitem()


def _read_bucket(element) -> Iterator:
  """(bucket, [(tag, path)]) -> every element spilled to the bucket (Reshuffle)."""
  _, refs = element
  for _, path in sorted(refs):
    yield from _read_spill(path)


def _spill(pcoll, kind: str, shuffle: Shuffle, tag: str = "", name: str = "",
           keyed: bool = True):
  """PCollection -> PCollection[(bucket, (tag, path))] of the files it was spilled to."""
  label = "".join(part.title() for part in re.split(r"[^A-Za-z0-9]+", name or tag))
  directory = os.path.join(shuffle.directory, f"{kind}-{uuid.uuid4().hex[:8]}",
                           re.sub(r"[^A-Za-z0-9]+", "-", name or tag or "_"))
  return pcoll | f"Spill{label}" >> beam.ParDo(
      _SpillFn(directory, shuffle.buckets, tag, keyed))


class GroupByKey(beam.PTransform):
  """PCollection[(K, V)] -> PCollection[(K, list[V])], as beam.GroupByKey (module doc)."""

  def __init__(self, shuffle: Shuffle):
    super().__init__()
    self.shuffle = shuffle

  def expand(self, pcoll):
    if not self.shuffle.on_disk:
      return pcoll | "GroupByKey" >> beam.GroupByKey()
    return (_spill(pcoll, "group", self.shuffle)
            # (bucket, [(tag, path)]): the files of each bucket
            | "GroupFiles" >> beam.GroupByKey()
            | "GroupBucket" >> beam.ParDo(_GroupBucketFn(None)))


class CoGroupByKey(beam.PTransform):
  """{name: PCollection[(K, V)]} -> PCollection[(K, {tag: list[V]})], as beam.CoGroupByKey on
  a dict; every tag is in every group. Inputs named "<tag>:<anything>" are one tag together
  (a union: Beam's inputs cannot hold a list of PCollections)."""

  def __init__(self, shuffle: Shuffle):
    super().__init__()
    self.shuffle = shuffle

  def expand(self, inputs):
    tags: dict[str, list] = {}
    for name, pcoll in inputs.items():
      tags.setdefault(name.split(":", 1)[0], []).append((name, pcoll))
    if not self.shuffle.on_disk:
      flat = {tag: (named[0][1] if len(named) == 1 else
                    tuple(p for _, p in named) | f"Flatten{tag.title()}" >> beam.Flatten())
              for tag, named in tags.items()}
      return flat | "CoGroupByKey" >> beam.CoGroupByKey()
    # Each input is spilled in the stage that makes it: a Flatten of data across stages
    # would be held in memory by the local runner; a Flatten of file references is not.
    refs = tuple(_spill(pcoll, "cogroup", self.shuffle, tag, name)
                 for tag, named in tags.items() for name, pcoll in named)
    return (refs
            | "FlattenFiles" >> beam.Flatten()
            | "GroupFiles" >> beam.GroupByKey()
            | "GroupBucket" >> beam.ParDo(_GroupBucketFn(list(tags))))


class Reshuffle(beam.PTransform):
  """PCollection[T] -> the same elements, spread over workers, as beam.Reshuffle."""

  def __init__(self, shuffle: Shuffle):
    super().__init__()
    self.shuffle = shuffle

  def expand(self, pcoll):
    if not self.shuffle.on_disk:
      return pcoll | "Reshuffle" >> beam.Reshuffle()
    return (_spill(pcoll, "reshuffle", self.shuffle, keyed=False)
            | "GroupFiles" >> beam.GroupByKey()
            | "ReadBucket" >> beam.FlatMap(_read_bucket))
