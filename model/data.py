"""Input pipelines: pair TFRecords -> tokenised, batched, static-shaped
dicts that feed `TwoTowerModel` on CPU, under MirroredStrategy and on TPU alike.

  pairs/<task>/<split>-*.tfrecord   (contracts.PAIR_FEATURES, one tf.train.Example per pair)
    per task: list_files -> interleave(TFRecordDataset) -> shuffle -> repeat
    tasks mixed by sampling (sample_from_datasets, the paper's ICT+BFS+WLP) with the weights
    of `task_weights`: equal shares, or shares of the pooled training pairs
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
documents of the train pair records): {"token_ids", "padding_mask", "mask_positions",
"mask_ids", "mask_weights"}, all [B, ...] static. Passages of held-out pages
(`contracts.is_heldout`) never feed MLM, as they never feed the pair tasks.

Every dataset is in a fixed order for a seed (`deterministic=True`, the default): seeded
shuffles, and parallel interleave / map that keep their input order.
"""

from __future__ import annotations

import logging
from typing import Mapping, Sequence

import tensorflow as tf

from twotower.core import contracts
# Which shards and how tasks mix (no TensorFlow: shared with the JAX input, np_input.py),
# named here too, as callers have always found them.
from twotower.model.pair_files import (count_pairs, has_pairs, pair_files,  # noqa: F401
                                       require_records, task_weights)
from twotower.model.tokenizer import Tokenizer

logger = logging.getLogger(__name__)


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
             shuffle_buffer: int, deterministic: bool = True) -> tf.data.Dataset:
  ds = tf.data.Dataset.from_tensor_slices(list(files))
  if shuffle:
    ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
  ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(4, len(files)),
                     num_parallel_calls=tf.data.AUTOTUNE,
                     deterministic=deterministic or not shuffle)
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


def pair_dataset(files_by_task: Mapping[str, Sequence[str]], tokenizer: Tokenizer,
                 batch_size: int, *, weights: Mapping[str, float] | None = None,
                 shuffle: bool = True, repeat: bool = True, seed: int = 0,
                 shuffle_buffer: int = 10_000, deterministic: bool = True,
                 hard_negatives: int = 0) -> tf.data.Dataset:
  """Batches of tokenised pairs; several tasks are mixed by sampling each pair from a task
  drawn with probability `weights[task]` (default: equal).

  `batch_size` is the global batch; under a strategy, pass this dataset to `fit` (or to
  `experimental_distribute_dataset`), which splits it over replicas. `hard_negatives` k > 0
  adds "neg_doc" / "neg_doc_id" (k per pair; 0: the batch has no such keys).
  """
  if hard_negatives < 0:
    raise ValueError(f"hard_negatives={hard_negatives}: expected k >= 0")
  if not files_by_task:
    raise ValueError("pair_dataset needs at least one task")
  tasks = sorted(files_by_task)
  per_task = [_records(files_by_task[task], shuffle, seed + i, repeat, shuffle_buffer,
                       deterministic) for i, task in enumerate(tasks)]
  if len(per_task) == 1:
    ds = per_task[0]
  else:
    probabilities = [float((weights or {}).get(task, 1.0 / len(tasks))) for task in tasks]
    ds = tf.data.Dataset.sample_from_datasets(
        per_task, weights=probabilities, seed=seed, stop_on_empty_dataset=not repeat)
  ds = ds.batch(batch_size, drop_remainder=True)
  ds = ds.map(tokenize_pairs(tokenizer, batch_size, hard_negatives),
              num_parallel_calls=tf.data.AUTOTUNE,
              deterministic=deterministic or not shuffle)
  return ds.prefetch(tf.data.AUTOTUNE)


def pretrain_dataset(pairs_root: str, tasks: Sequence[str], split: str, tokenizer: Tokenizer,
                     batch_size: int, *, weights: Mapping[str, float] | None = None,
                     **kwargs) -> tf.data.Dataset:
  """`pair_dataset` over `<pairs_root>/pairs/<task>/<split>-*` of `tasks`, mixed by
  `weights` (task_weights; default equal). A task that `weights` leaves out (no pairs in
  this split) is not read."""
  if weights is not None:
    tasks = [task for task in tasks if task in weights]
  files = {task: pair_files(pairs_root, task, split) for task in tasks}
  logger.info("%s pairs: %s", split, ", ".join(
      f"{t}: {len(f)} shards" + (f", p={weights[t]:.3f}" if weights else "")
      for t, f in files.items()))
  return pair_dataset(files, tokenizer, batch_size, weights=weights, **kwargs)


#: The Condenser's MLM targets of a masked pair batch: "<side>_mlm" for each tower's input.
MLM_TARGETS = ("mask_positions", "mask_ids", "mask_weights")
MASKED_SIDES = ("query", "doc")


def mask_pairs_for_mlm(ds: tf.data.Dataset, tokenizer: Tokenizer, rate: float,
                       query_predictions: int, doc_predictions: int,
                       seed: int = 0) -> tf.data.Dataset:
  """Pair batches (`pair_dataset`) with BERT masking of the query and document word pieces,
  for the Condenser head's masked LM (model/condenser.py).

  Each batch keeps its keys, with "query" and "doc" `token_ids` masked
  (`Tokenizer.mask_for_mlm`: `rate` of the pieces, 80/10/10), and gains "query_mlm" and
  "doc_mlm": {"mask_positions", "mask_ids" int32, "mask_weights" float32} [B, P] with P =
  `query_predictions` / `doc_predictions`. The towers see the masked ids, for the
  contrastive loss too, as coCondenser's spans go masked through its one forward pass.
  Batch i's side k (0 query, 1 document) is masked with the stateless seed
  fold_in((seed, i), k): a resumed run that skips i batches masks the rest as one run
  through would. Hard negatives ("neg_doc") are left unmasked.

  A new map over the batches: `pair_dataset` itself is unchanged, so runs without the
  Condenser head read byte-identical batches.
  """
  predictions = {"query": int(query_predictions), "doc": int(doc_predictions)}

  def fn(index, batch):
    batch = dict(batch)
    base = tf.stack([tf.constant(seed, tf.int64), index])
    for k, side in enumerate(MASKED_SIDES):
      inputs = batch[side]
      masked = tokenizer.mask_for_mlm(
          inputs["token_ids"], rate, predictions[side],
          seed=tf.random.experimental.stateless_fold_in(base, k))
      batch[side] = {**inputs, "token_ids": masked["token_ids"]}
      batch[f"{side}_mlm"] = {name: masked[name] for name in MLM_TARGETS}
    return batch
  ds = ds.enumerate().map(fn, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return ds.prefetch(tf.data.AUTOTUNE)


def _passage_texts(passages_dir: str, heldout_percent: float) -> tf.data.Dataset:
  """string [] "title text" of the passages of pages that are not held out, streamed one
  row group at a time (contracts.codecs.read_passages)."""
  # The shards the pair pipeline's manifest lists; a clear error now, not inside the generator.
  files = contracts.codecs.passage_files(passages_dir)
  if not files:
    raise FileNotFoundError(f"no passages Parquet at {passages_dir!r}")
  pattern = contracts.passages_pattern(passages_dir)

  def gen():
    kept = skipped = 0
    for passage in contracts.codecs.read_passages(passages_dir):
      if heldout_percent and contracts.is_heldout(passage.page_id, heldout_percent):
        skipped += 1
        continue
      kept += 1
      yield f"{passage.title} {passage.text}".strip()
    logger.info("MLM: one pass over %s: %d passages, %d of held-out pages skipped", pattern,
                kept, skipped)
  return tf.data.Dataset.from_generator(gen, output_signature=tf.TensorSpec([], tf.string))


def mlm_dataset(tokenizer: Tokenizer, batch_size: int, length: int, rate: float,
                max_predictions: int = 0, *, passages_dir: str | None = None,
                heldout_percent: float = 0.0, pair_files_: Sequence[str] = (),
                shuffle: bool = True, repeat: bool = True, seed: int = 0,
                shuffle_buffer: int = 10_000, deterministic: bool = True) -> tf.data.Dataset:
  """Masked-LM batches from passages (skipping pages held out at `heldout_percent`, see
  contracts.is_heldout), or from the documents of pair records.

  `max_predictions` 0 derives the static number of predicted positions from the length
  (config.mlm_predictions), so that `rate` is never capped. Batch i is masked with the
  stateless seed (seed, i): the same seed masks the same batches the same way.
  """
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  max_predictions = max_predictions or config_lib.mlm_predictions(length, rate)
  if passages_dir:
    texts = _passage_texts(passages_dir, heldout_percent)
    if shuffle:
      texts = texts.shuffle(shuffle_buffer, seed=seed)
    if repeat:
      texts = texts.repeat()
  else:
    if not pair_files_:
      raise ValueError("MLM needs a passages/ dir or pair records")

    def doc_text(serialized):
      ex = parse_pairs(serialized[None])
      return tf.strings.join([ex["doc_title"][0], ex["doc_text"][0]], " ")
    texts = _records(pair_files_, shuffle, seed, repeat, shuffle_buffer,
                     deterministic).map(doc_text)
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
