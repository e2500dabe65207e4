"""Sharded output files written where the records are made: pair TFRecords and passage Parquet.

    WriteShards(outputs, route, temp_dir, num_shards)
      {PCollection[T], ...} --route--> (output name, record) --> <prefix>-SSSSS-of-NNNNN<suffix>

Beam's `WriteToTFRecord` / `WriteToParquet` take one PCollection per output; the pair pipeline
has six pair outputs (3 tasks x 2 splits) made in two different stages (ICT and BFS per page,
WLP after two joins), and a Flatten of pairs across stages is held in memory by the local
runner. Here every input PCollection gets a writer fused into the stage that makes it
(`_WriteBundleFn`): each bundle appends its records to one temporary file per output. Only
(output, temporary file, records) references travel on; `_Finalize` then names the files
`<prefix>-SSSSS-of-NNNNN<suffix>` (shard order is arbitrary, as with Beam) and writes one
empty shard for an output that got no record (as Beam's sinks do). Temporary files of a
bundle that a runner retried are never named, and are removed with `temp_dir`.

Fixed `num_shards` > 0 takes one of two ways. With `distribute` (a runner that shuffles, e.g.
Dataflow) the records are dealt round-robin to (output, shard) keys and grouped by the
runner, so that each shard is written by one worker, as Beam's sinks do. Without it (the
local runner, whose GroupByKey would hold every record in memory) `_Finalize` re-packs the
bundles' files into exactly that many shards, record by record, in bounded memory.

Formats: "tfrecord" (records are serialised bytes, contracts.codecs framing) and "parquet"
(records are rows, written with the options of Beam's WriteToParquet: no compression,
compliant nested types). Paths go through Beam's FileSystems, so `gs://` works.
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath
import random
import uuid
from typing import Callable, Iterable, Iterator

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms import window

from twotower.core import files as tio
from twotower.core.contracts import codecs

logger = logging.getLogger(__name__)

#: Parquet rows buffered before a row group is written.
PARQUET_ROW_GROUP = 10_000


@dataclasses.dataclass(frozen=True)
class Output:
  """One sharded output: files `<prefix>-SSSSS-of-NNNNN<suffix>` of one format."""
  prefix: str
  suffix: str
  kind: str  # "tfrecord" | "parquet"
  schema: object = None  # pyarrow.Schema of a parquet output

  def shard(self, index: int, count: int) -> str:
    return f"{self.prefix}-{index:05d}-of-{count:05d}{self.suffix}"


class _TfRecordWriter:
  def __init__(self, path: str, output: Output):
    del output
    self._file = FileSystems.create(path)

  def write(self, record: bytes) -> None:
    self._file.write(codecs.tfrecord_frame(record))

  def close(self) -> None:
    self._file.close()


class _ParquetWriter:
  def __init__(self, path: str, output: Output):
    import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
    self._schema = output.schema
    self._file = FileSystems.create(path)
    self._writer = pq.ParquetWriter(self._file, self._schema, compression="none",
                                    use_deprecated_int96_timestamps=False,
                                    use_compliant_nested_type=True)
    self._rows: list[dict] = []

  def write(self, row: dict) -> None:
    self._rows.append(row)
    if len(self._rows) >= PARQUET_ROW_GROUP:
      self._flush()

  def _flush(self) -> None:
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    if self._rows:
      self._writer.write_table(pa.Table.from_pylist(self._rows, schema=self._schema))
      self._rows = []

  def close(self) -> None:
    self._flush()
    self._writer.close()
    self._file.close()


_WRITERS = {"tfrecord": _TfRecordWriter, "parquet": _ParquetWriter}


def _read_records(path: str, output: Output) -> Iterator:
  if output.kind == "tfrecord":
    yield from codecs.read_tfrecords([path])
  else:
    pf = tio.open_parquet(path)
    for i in range(pf.num_row_groups):
      yield from pf.read_row_group(i).to_pylist()


class _WriteBundleFn(beam.DoFn):
  """T -> nothing per element; at the end of a bundle, (output name, temporary path, records,
  -1) per output it wrote to."""

  def __init__(self, outputs: dict[str, Output], route: Callable[[object], Iterable],
               temp_dir: str):
    self.outputs = outputs
    self.route = route  # element -> (output name, record) pairs
    self.temp_dir = temp_dir

  def start_bundle(self):
    self._writers: dict[str, object] = {}
    self._counts: dict[str, int] = {}
    self._paths: dict[str, str] = {}

  def process(self, element):
    writers = self._writers
    for name, record in self.route(element):
      writer = writers.get(name)
      if writer is None:
        path = f"{self.temp_dir}/{name}-{uuid.uuid4().hex}"
        writer = writers[name] = _WRITERS[self.outputs[name].kind](path, self.outputs[name])
        self._paths[name] = path
        self._counts[name] = 0
      writer.write(record)
      self._counts[name] += 1

  def finish_bundle(self):
    for name, writer in self._writers.items():
      writer.close()
      yield window.GlobalWindows.windowed_value(
          (name, self._paths[name], self._counts[name], -1))


class _KeyByShardFn(beam.DoFn):
  """T -> ((output name, shard index), record): records dealt round-robin over the shards,
  from a random shard per bundle and output (as Beam's sinks deal them)."""

  def __init__(self, route: Callable[[object], Iterable], num_shards: int):
    self.route = route
    self.num_shards = num_shards

  def start_bundle(self):
    self._next: dict[str, int] = {}

  def process(self, element):
    for name, record in self.route(element):
      index = self._next.get(name)
      if index is None:
        index = random.randrange(self.num_shards)
      self._next[name] = (index + 1) % self.num_shards
      yield (name, index), record


class _WriteShardFn(beam.DoFn):
  """((output name, shard index), [record]) -> (output name, temporary path, records, shard
  index): one shard's records in one temporary file, named by _Finalize."""

  def __init__(self, outputs: dict[str, Output], temp_dir: str):
    self.outputs = outputs
    self.temp_dir = temp_dir

  def process(self, element):
    (name, index), records = element
    path = f"{self.temp_dir}/{name}-{index:05d}-{uuid.uuid4().hex}"
    writer = _WRITERS[self.outputs[name].kind](path, self.outputs[name])
    count = 0
    for record in records:
      writer.write(record)
      count += 1
    writer.close()
    yield name, path, count, index


class _Finalize(beam.DoFn):
  """(None, [(output name, temporary path, records, shard index)]) -> final shard paths;
  removes `temp_dir`."""

  def __init__(self, outputs: dict[str, Output], temp_dir: str, num_shards: int):
    self.outputs = outputs
    self.temp_dir = temp_dir
    self.num_shards = num_shards

  def process(self, element):
    _, written = element
    by_output: dict[str, list[str]] = {name: [] for name in self.outputs}
    by_shard: dict[str, dict[int, str]] = {name: {} for name in self.outputs}
    for name, path, count, shard in written:
      if not name:
        continue
      if shard >= 0:
        by_shard[name][shard] = path
      elif count:
        by_output[name].append(path)
    for name, output in self.outputs.items():
      temps = sorted(by_output[name])
      if self.num_shards > 0 and not temps:
        yield from self._name_shards(output, by_shard[name])
      elif self.num_shards > 0:
        yield from self._repack(output, temps)
      elif not temps:
        # No record: one empty shard, as Beam's file sinks write.
        path = output.shard(0, 1)
        _WRITERS[output.kind](path, output).close()
        yield path
      else:
        finals = [output.shard(i, len(temps)) for i in range(len(temps))]
        tio.makedirs(posixpath.dirname(finals[0]))
        FileSystems.rename(temps, finals)
        yield from finals
    # What is left: files of bundles a runner retried (never named), then the directory.
    leftovers = [m.path for m in FileSystems.match([f"{self.temp_dir}/*"])[0].metadata_list]
    if leftovers:
      FileSystems.delete(leftovers)
    if tio.is_local(self.temp_dir) and FileSystems.exists(self.temp_dir):
      FileSystems.delete([self.temp_dir])

  def _name_shards(self, output: Output, shards: dict[int, str]) -> Iterator[str]:
    """Shards written by _WriteShardFn get their final names; missing ones are empty."""
    finals = [output.shard(i, self.num_shards) for i in range(self.num_shards)]
    tio.makedirs(posixpath.dirname(finals[0]))
    FileSystems.rename([shards[i] for i in sorted(shards)], [finals[i] for i in sorted(shards)])
    for i in set(range(self.num_shards)) - shards.keys():
      _WRITERS[output.kind](finals[i], output).close()
    yield from finals

  def _repack(self, output: Output, temps: list[str]) -> Iterator[str]:
    """Records of the temporary files, dealt round-robin into exactly num_shards files (the
    temporary files are removed with the directory)."""
    finals = [output.shard(i, self.num_shards) for i in range(self.num_shards)]
    writers = [_WRITERS[output.kind](path, output) for path in finals]
    index = 0
    for temp in temps:
      for record in _read_records(temp, output):
        writers[index].write(record)
        index = (index + 1) % self.num_shards
    for writer in writers:
      writer.close()
    yield from finals


class WriteShards(beam.PTransform):
  """PCollection[T] (or a tuple of them) -> PCollection[str] of the shard paths written.

  Args:
    outputs: output name -> Output.
    route: element -> iterable of (output name, record); may count (Beam metrics).
    temp_dir: a directory for this transform's temporary files (created; removed at the
      end); on the output's filesystem, so that the final names are renames.
    num_shards: shards per output; 0: one per bundle that wrote to it (the runner decides).
    distribute: with num_shards > 0, deal the records to shards through the runner's
      shuffle (a distributed runner); else re-pack the bundles' files at the end (module
      doc).
  """

  def __init__(self, outputs: dict[str, Output], route: Callable[[object], Iterable],
               temp_dir: str, num_shards: int = 0, distribute: bool = False):
    super().__init__()
    self.outputs = dict(outputs)
    self.route = route
    self.temp_dir = temp_dir.rstrip("/")
    self.num_shards = num_shards
    self.distribute = distribute

  def expand(self, pcolls):
    if not isinstance(pcolls, tuple):
      pcolls = (pcolls,)
    if self.num_shards > 0 and self.distribute:
      # ((output name, shard), record), grouped by the runner: one shard per group
      keyed = tuple(p | f"KeyByShard{i}" >> beam.ParDo(_KeyByShardFn(self.route,
                                                                     self.num_shards))
                    for i, p in enumerate(pcolls))
      written = [keyed
                 | "FlattenRecords" >> beam.Flatten()
                 | "GroupByShard" >> beam.GroupByKey()
                 | "WriteShardFiles" >> beam.ParDo(_WriteShardFn(self.outputs, self.temp_dir))]
    else:
      # (output name, temporary path, records, -1) per bundle and output, from each input's
      # stage
      written = [p | f"WriteBundles{i}" >> beam.ParDo(
                     _WriteBundleFn(self.outputs, self.route, self.temp_dir))
                 for i, p in enumerate(pcolls)]
    # One empty entry, so that Finalize runs (and writes empty shards) when nothing was.
    start = pcolls[0].pipeline | "Start" >> beam.Create([("", "", 0, -1)])
    return ((start, *written)
            | "FlattenWritten" >> beam.Flatten()
            | "KeyAll" >> beam.Map(lambda w: (None, w))
            | "GroupWritten" >> beam.GroupByKey()
            | "Finalize" >> beam.ParDo(_Finalize(self.outputs, self.temp_dir, self.num_shards)))
