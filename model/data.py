"""Input pipelines: pair TFRecords (DESIGN stage 5) -> tokenised, batched, static-shaped
dicts that feed `TwoTowerModel` on CPU, under MirroredStrategy and on TPU alike.

  pairs/<task>/<split>-*.tfrecord   (contracts.PAIR_FEATURES, one tf.train.Example per pair)
    per task: list_files -> interleave(TFRecordDataset) -> shuffle -> repeat
    tasks mixed by uniform sampling (sample_from_datasets, as the paper's ICT+BFS+WLP)
    -> batch(drop_remainder=True) -> parse_example -> Tokenizer (in graph) -> prefetch
  element: {"query": {"token_ids", "padding_mask"} int32 [B, query_len],
            "doc":   {"token_ids", "padding_mask"} int32 [B, doc_len],
            "doc_id": int64 [B, 2] (doc_page_id, doc_passage_id)}
  with k hard negatives per pair (`hard_negatives=k`, pairs of `twotower hardneg`), also
           "neg_doc": {"token_ids", "padding_mask"} int32 [B * k, doc_len] (pair i's
                      negatives in rows i*k .. i*k+k-1, the first k of its list),
           "neg_doc_id": int64 [B * k] candidate ids, -1 where a pair has fewer than k
                      (padding: empty title and text, masked in the loss)

Masked-LM batches come from `passages/*.parquet` text (or, without passages, from the
documents of the pair records): {"token_ids", "padding_mask", "mask_positions", "mask_ids",
"mask_weights"}, all [B, ...] static.
"""

from __future__ import annotations

import logging
from typing import Sequence

import tensorflow as tf

from twotower import contracts
from twotower import io as tio
from twotower.model.tokenizer import Tokenizer

logger = logging.getLogger(__name__)


def pair_files(pairs_root: str, task: str, split: str) -> list[str]:
  """Shards of `<pairs_root>/pairs/<task>/<split>-*.tfrecord`; a clear error when none."""
  pattern = f"{contracts.pairs_prefix(pairs_root, task, split)}-*{contracts.PAIRS_SUFFIX}"
  files = sorted(tf.io.gfile.glob(pattern))
  if not files:
    raise FileNotFoundError(f"no pair shards match {pattern}")
  return files


def parse_pairs(serialized: tf.Tensor, hard_negatives: int = 0) -> dict[str, tf.Tensor]:
  """string [B] serialized tf.train.Example -> dict of [B] tensors (contracts.PAIR_FEATURES);
  with `hard_negatives` k > 0 also the hard-negative lists, each [B * k]
  (`fixed_hard_negatives`)."""
  spec = {name: tf.io.FixedLenFeature([], tf.string, default_value="")
          for name in contracts.PAIR_BYTES_FEATURES}
  spec.update({name: tf.io.FixedLenFeature([], tf.int64, default_value=-1)
               for name in contracts.PAIR_INT64_FEATURES})
  if hard_negatives:
    spec.update({name: tf.io.RaggedFeature(tf.string)
                 for name in contracts.HARD_NEGATIVE_BYTES_FEATURES})
    spec.update({name: tf.io.RaggedFeature(tf.int64)
                 for name in contracts.HARD_NEGATIVE_INT64_FEATURES})
  ex = tf.io.parse_example(serialized, spec)
  if hard_negatives:
    ex.update(fixed_hard_negatives(ex, hard_negatives))
  return ex


def fixed_hard_negatives(ex: dict, k: int) -> dict[str, tf.Tensor]:
  """Ragged hard-negative lists [B, (n)] -> static [B * k]: the first k of each pair's list,
  padded with "" (texts) and -1 (ids) when it has fewer."""
  out = {}
  for name in contracts.HARD_NEGATIVE_BYTES_FEATURES + contracts.HARD_NEGATIVE_INT64_FEATURES:
    pad = "" if name in contracts.HARD_NEGATIVE_BYTES_FEATURES else -1
    out[name] = tf.reshape(ex[name].to_tensor(default_value=pad, shape=[None, k]), [-1])
  return out


def _records(files: Sequence[str], shuffle: bool, seed: int, repeat: bool,
             shuffle_buffer: int) -> tf.data.Dataset:
  ds = tf.data.Dataset.from_tensor_slices(list(files))
  if shuffle:
    ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
  ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(4, len(files)),
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=not shuffle)
  if shuffle:
    ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
  if repeat:
    ds = ds.repeat()
  return ds


def _static(tree, batch_size: int):
  """Pins the batch dimension of every tensor so element_spec is fully static."""
  return tf.nest.map_structure(lambda t: tf.ensure_shape(t, [batch_size] + t.shape[1:]), tree)


def tokenize_pairs(tokenizer: Tokenizer, batch_size: int, hard_negatives: int = 0):
  """A map fn: string [B] serialized examples -> the model's batch dict."""
  def fn(serialized):
    ex = parse_pairs(serialized, hard_negatives)
    batch = {"query": tokenizer.queries(ex["query"]),
             "doc": tokenizer.docs(ex["doc_title"], ex["doc_text"]),
             "doc_id": tf.stack([ex["doc_page_id"], ex["doc_passage_id"]], axis=1)}
    batch = _static(batch, batch_size)
    if hard_negatives:
      batch.update(_static({"neg_doc": tokenizer.docs(ex["neg_doc_title"], ex["neg_doc_text"]),
                            "neg_doc_id": ex["neg_doc_id"]}, batch_size * hard_negatives))
    return batch
  return fn


def pair_dataset(files_by_task: dict[str, Sequence[str]], tokenizer: Tokenizer,
                 batch_size: int, *, shuffle: bool = True, repeat: bool = True, seed: int = 0,
                 shuffle_buffer: int = 10_000, hard_negatives: int = 0) -> tf.data.Dataset:
  """Batches of tokenised pairs; several tasks are mixed by uniform sampling.

  `batch_size` is the global batch; under a strategy, pass this dataset to `fit` (or to
  `experimental_distribute_dataset`), which splits it over replicas. `hard_negatives` k > 0
  adds "neg_doc" / "neg_doc_id" (k per pair; 0: the batch has no such keys).
  """
  if hard_negatives < 0:
    raise ValueError(f"hard_negatives={hard_negatives}: expected k >= 0")
  if not files_by_task:
    raise ValueError("pair_dataset needs at least one task")
  per_task = [_records(files, shuffle, seed + i, repeat, shuffle_buffer)
              for i, (_, files) in enumerate(sorted(files_by_task.items()))]
  if len(per_task) == 1:
    ds = per_task[0]
  else:
    ds = tf.data.Dataset.sample_from_datasets(
        per_task, weights=[1.0 / len(per_task)] * len(per_task), seed=seed,
        stop_on_empty_dataset=not repeat)
  ds = ds.batch(batch_size, drop_remainder=True)
  ds = ds.map(tokenize_pairs(tokenizer, batch_size, hard_negatives),
              num_parallel_calls=tf.data.AUTOTUNE,
              deterministic=not shuffle)
  return ds.prefetch(tf.data.AUTOTUNE)


def pretrain_dataset(pairs_root: str, tasks: Sequence[str], split: str, tokenizer: Tokenizer,
                     batch_size: int, **kwargs) -> tf.data.Dataset:
  files = {task: pair_files(pairs_root, task, split) for task in tasks}
  logger.info("%s pairs: %s", split, ", ".join(f"{t}: {len(f)} shards" for t, f in files.items()))
  return pair_dataset(files, tokenizer, batch_size, **kwargs)


def _passage_texts(passages_dir: str) -> tf.data.Dataset:
  """string [] passage texts of `passages/*.parquet`, streamed one row group at a time."""
  files = tio.match_files(f"{passages_dir.rstrip('/')}/*.parquet")

  def gen():
    for path in files:
      pf = tio.open_parquet(path)
      for i in range(pf.num_row_groups):
        table = pf.read_row_group(i, columns=["title", "text"])
        for title, text in zip(table.column("title").to_pylist(),
                               table.column("text").to_pylist()):
          yield f"{title or ''} {text or ''}".strip()
  return tf.data.Dataset.from_generator(gen, output_signature=tf.TensorSpec([], tf.string))


def mlm_dataset(tokenizer: Tokenizer, batch_size: int, length: int, rate: float,
                max_predictions: int = 0, *, passages_dir: str | None = None,
                pair_files_: Sequence[str] = (), shuffle: bool = True, repeat: bool = True,
                seed: int = 0, shuffle_buffer: int = 10_000) -> tf.data.Dataset:
  """Masked-LM batches from passages (or from the documents of pair records).

  `max_predictions` 0 derives the static number of predicted positions from the length
  (config.mlm_predictions), so that `rate` is never capped. Batch i is masked with the
  stateless seed (seed, i): the same seed masks the same batches the same way.
  """
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  max_predictions = max_predictions or config_lib.mlm_predictions(length, rate)
  if passages_dir:
    texts = _passage_texts(passages_dir)
    if shuffle:
      texts = texts.shuffle(shuffle_buffer, seed=seed)
    if repeat:
      texts = texts.repeat()
  else:
    if not pair_files_:
      raise ValueError("MLM needs --passages DIR or pair records")
    texts = _records(pair_files_, shuffle, seed, repeat, shuffle_buffer).map(
        lambda s: tf.strings.join([parse_pairs(s[None])["doc_title"][0],
                                   parse_pairs(s[None])["doc_text"][0]], " "))
  ds = texts.batch(batch_size, drop_remainder=True).enumerate()

  def fn(index, text):
    packed = tokenizer.passages(text, length)
    masked = tokenizer.mask_for_mlm(packed["token_ids"], rate, max_predictions,
                                    seed=tf.stack([tf.constant(seed, tf.int64), index]))
    return _static(masked, batch_size)
  ds = ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return ds.prefetch(tf.data.AUTOTUNE)


def cached_batches(ds: tf.data.Dataset, n: int) -> tf.data.Dataset:
  """The first `n` batches of `ds`, held in memory and repeated (input-pipeline-free timing)."""
  return ds.take(n).cache().repeat()
