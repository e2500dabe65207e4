"""The JAX trainer's input, without TensorFlow: pair TFRecords -> tokenised numpy batches of
the layout data.py makes in tf.data, prefetched on background threads.

  pairs/<task>/<split>-*.tfrecord   (contracts.PAIR_FEATURES, one tf.train.Example per pair)
    per task: shards in a seeded order -> read round-robin, 4 at a time
              (codecs.read_tfrecords: the length and data CRC-32C of every record checked)
              -> shuffle buffer -> repeat (each pass shuffled on its own, as tf.data's
              shuffle before repeat: every pair once a pass)
    tasks mixed by drawing each pair's task with the weights of data.task_weights
    -> batches of raw records (one producer thread: every random draw is made there, in
       order, so the batches are the same whatever the threads do)
    -> decoded (codecs.decode_example) and tokenised (np_tokenizer) by worker threads,
       handed out in order
  element: {"query": {"token_ids", "padding_mask"} int32 [B, query_len],
            "doc":   {"token_ids", "padding_mask"} int32 [B, doc_len],
            "doc_id": int32 [B, 2] (doc_page_id, doc_passage_id), renumbered per batch}
  with k hard negatives per pair, also "neg_doc" [B * k, doc_len] and "neg_doc_id" [B * k]
  (the first k of each pair's list, padded with empty documents of id -1).

The ids are renumbered within each batch (`renumber_ids`): JAX's default integers are 32
bits, and ReQA's ids are 63-bit hashes, which JAX would truncate. The loss reads ids only for
equality (which document is the same as which), and the renumbering keeps it exactly.

The batches are not tf.data's: the same shards, tasks, mixture weights, batch size and
tokenisation, but another seeded order (tf.data's shuffle cannot be replayed without
TensorFlow). A seed gives the same batches run after run; a resumed run skips the batches
the restored steps trained on without decoding them.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import queue
import threading
from typing import Iterator, Mapping, Sequence

import numpy as np

from twotower.core import contracts
from twotower.core.contracts import codecs

logger = logging.getLogger(__name__)

#: Shards read at a time per task (tf.data's interleave cycle in data.py).
CYCLE = 4


def _one_pass(files: Sequence[str], rng: np.random.Generator, shuffle: bool) -> Iterator[bytes]:
  """The records of `files` once, CYCLE shards at a time round-robin, the shards in an order
  drawn for this pass when shuffling."""
  order = list(files)
  if shuffle:
    order = [order[i] for i in rng.permutation(len(order))]
  pending = collections.deque(order)
  open_readers: collections.deque = collections.deque()
  while pending or open_readers:
    while pending and len(open_readers) < CYCLE:
      open_readers.append(codecs.read_tfrecords([pending.popleft()]))
    reader = open_readers.popleft()
    record = next(reader, None)
    if record is not None:
      yield record
      open_readers.append(reader)


def _shuffled(records: Iterator[bytes], rng: np.random.Generator, size: int) -> Iterator[bytes]:
  """tf.data's shuffle buffer: fill `size` records, then hand out a random one and put the
  next record in its place."""
  buffer: list[bytes] = []
  for record in records:
    if len(buffer) < size:
      buffer.append(record)
      continue
    i = int(rng.integers(size))
    yield buffer[i]
    buffer[i] = record
  while buffer:
    yield buffer.pop(int(rng.integers(len(buffer))))


def task_records(files: Sequence[str], *, seed: int, shuffle: bool, repeat: bool,
                 shuffle_buffer: int) -> Iterator[bytes]:
  """One task's serialized pairs, in the order of `seed`: pass after pass over the shards,
  each pass shuffled on its own (tf.data's shuffle before repeat: every pair once a pass)."""
  rng = np.random.default_rng(seed)
  while True:
    records = _one_pass(files, rng, shuffle)
    yield from _shuffled(records, rng, shuffle_buffer) if shuffle else records
    if not repeat:
      return


def mixed_records(files_by_task: Mapping[str, Sequence[str]],
                  weights: Mapping[str, float] | None, *, seed: int, shuffle: bool,
                  repeat: bool, shuffle_buffer: int) -> Iterator[bytes]:
  """Pairs of several tasks, each drawn from a task chosen with probability `weights[task]`
  (default equal), as tf.data's sample_from_datasets; tasks in sorted order, task i seeded
  with seed + i as data.pair_dataset seeds them. Without `repeat`, it stops at the first
  task that runs out (stop_on_empty_dataset)."""
  tasks = sorted(files_by_task)
  streams = [task_records(files_by_task[task], seed=seed + i, shuffle=shuffle, repeat=repeat,
                          shuffle_buffer=shuffle_buffer) for i, task in enumerate(tasks)]
  if len(streams) == 1:
    yield from streams[0]
    return
  p = np.asarray([float((weights or {}).get(t, 1.0 / len(tasks))) for t in tasks])
  p = p / p.sum()
  rng = np.random.default_rng([seed, len(tasks)])
  while True:
    record = next(streams[int(rng.choice(len(streams), p=p))], None)
    if record is None:
      return
    yield record


def raw_batches(records: Iterator[bytes], batch_size: int) -> Iterator[list[bytes]]:
  """Lists of `batch_size` serialized pairs; a short last one is dropped (drop_remainder)."""
  while True:
    batch = [record for _, record in zip(range(batch_size), records)]
    if len(batch) < batch_size:
      return
    yield batch


def _decode(serialized: bytes) -> dict[str, list]:
  """A pair record's features, tf.io.parse_example's defaults ("" and -1) for a missing one."""
  features = codecs.decode_example(serialized)
  for name in contracts.PAIR_BYTES_FEATURES:
    features[name] = features.get(name) or [b""]
  for name in contracts.PAIR_INT64_FEATURES:
    features[name] = features.get(name) or [-1]
  return features


def renumber_ids(*columns: np.ndarray) -> list[np.ndarray]:
  """int32 copies of int64 id arrays that keep which ids are equal, jointly over `columns`
  (one id space): each id becomes its rank among the ids that occur, -1 (padding) stays -1."""
  flat = np.concatenate([np.asarray(c, np.int64).ravel() for c in columns])
  uniques, inverse = np.unique(flat, return_inverse=True)
  ranks = np.where(flat < 0, -1, inverse - np.searchsorted(uniques, 0)).astype(np.int32)
  out, start = [], 0
  for c in columns:
    n = np.asarray(c).size
    out.append(ranks[start:start + n].reshape(np.shape(c)))
    start += n
  return out


def _texts(values: Sequence[bytes]) -> list[str]:
  return [v.decode("utf-8") for v in values]


class PairBatcher:
  """Serialized pairs -> the model's batch dict (data.tokenize_pairs without TensorFlow)."""

  def __init__(self, tokenizer, hard_negatives: int = 0):
    self.tokenizer, self.k = tokenizer, int(hard_negatives)

  def __call__(self, serialized: Sequence[bytes]) -> dict:
    ex = [_decode(s) for s in serialized]
    tok = self.tokenizer
    batch = {"query": tok.queries(_texts(e["query"][0] for e in ex)),
             "doc": tok.docs(_texts(e["doc_title"][0] for e in ex),
                             _texts(e["doc_text"][0] for e in ex))}
    page = np.asarray([e["doc_page_id"][0] for e in ex], np.int64)
    passage = np.asarray([e["doc_passage_id"][0] for e in ex], np.int64)
    if not self.k:
      batch["doc_id"] = np.stack([renumber_ids(page)[0], renumber_ids(passage)[0]], axis=1)
      return batch
    titles, texts, ids = [], [], []
    for e in ex:  # the first k of each list, padded with "" and -1 (fixed_hard_negatives)
      for field, out, pad in (("neg_doc_title", titles, b""), ("neg_doc_text", texts, b""),
                              ("neg_doc_id", ids, -1)):
        values = list(e.get(field, ()))[:self.k]
        out.extend(values + [pad] * (self.k - len(values)))
    # Candidate ids: a positive's (doc_passage_id) and the negatives' are one id space.
    passage, neg_ids = renumber_ids(passage, np.asarray(ids, np.int64))
    batch["doc_id"] = np.stack([renumber_ids(page)[0], passage], axis=1)
    batch["neg_doc"] = tok.docs(_texts(titles), _texts(texts))
    batch["neg_doc_id"] = neg_ids
    return batch


class Prefetcher:
  """An iterator over `make_batch(raw)` of each raw batch of `raws`, in order, computed
  ahead by `workers` threads while the accelerator trains on earlier ones.

  One producer thread reads the raw batches (every random draw of the input happens there,
  in order) and hands each to the worker pool; up to `depth` batches wait ready. An error in
  either is raised by `__next__`. `close()` stops the threads (also at garbage collection).
  """

  _END = object()

  def __init__(self, raws: Iterator, make_batch, workers: int = 2, depth: int = 8):
    self._futures: queue.Queue = queue.Queue(maxsize=max(1, depth))
    self._stop = threading.Event()
    self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers),
                                                       thread_name_prefix="input")
    self._thread = threading.Thread(target=self._produce, args=(raws, make_batch),
                                    name="input-reader", daemon=True)
    self._thread.start()

  def _put(self, item) -> bool:
    while not self._stop.is_set():
      try:
        self._futures.put(item, timeout=0.1)
        return True
      except queue.Full:
        continue
    return False

  def _produce(self, raws, make_batch) -> None:
    try:
      for raw in raws:
        if not self._put(self._pool.submit(make_batch, raw)):
          return
    except BaseException as e:  # pylint: disable=broad-except  (raised by __next__)
      failed: concurrent.futures.Future = concurrent.futures.Future()
      failed.set_exception(e)
      self._put(failed)
      return
    self._put(self._END)

  def __iter__(self):
    return self

  def __next__(self):
    item = self._futures.get()
    if item is self._END:
      self._futures.put(self._END)  # every later call ends too
      raise StopIteration
    return item.result()

  def close(self) -> None:
    self._stop.set()
    self._pool.shutdown(wait=False, cancel_futures=True)

  def __del__(self):
    self.close()


def pair_batches(files_by_task: Mapping[str, Sequence[str]], tokenizer, batch_size: int, *,
                 weights: Mapping[str, float] | None = None, shuffle: bool = True,
                 repeat: bool = True, seed: int = 0, shuffle_buffer: int = 10_000,
                 hard_negatives: int = 0, skip: int = 0, workers: int = 2) -> Prefetcher:
  """Batches of tokenised pairs (data.pair_dataset's element), prefetched; `skip` batches
  are passed over unread (a resumed run's trained steps)."""
  if hard_negatives < 0:
    raise ValueError(f"hard_negatives={hard_negatives}: expected k >= 0")
  if not files_by_task:
    raise ValueError("pair_batches needs at least one task")
  records = mixed_records(files_by_task, weights, seed=seed, shuffle=shuffle, repeat=repeat,
                          shuffle_buffer=shuffle_buffer)
  raws = raw_batches(records, batch_size)
  for _ in range(skip):
    if next(raws, None) is None:
      break
  return Prefetcher(raws, PairBatcher(tokenizer, hard_negatives), workers=workers)


def first_batches(batches: Iterator[dict], n: int) -> list[dict]:
  """The first `n` batches of `batches`, held in memory (data.cached_batches: a fixed
  held-out sample evaluated at every checkpoint)."""
  out = [batch for _, batch in zip(range(n), batches)]
  close = getattr(batches, "close", None)
  if close:
    close()
  return out
