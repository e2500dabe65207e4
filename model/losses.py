"""Losses: the paper's in-batch sampled softmax (eq. 4) with cross-replica negatives and
accidental-hit masking, and the masked-LM loss of the MLM baseline.

Eq. 4: for a batch of B (query, document) pairs,
  p(d_i | q_i) = exp(<phi(q_i), psi(d_i)>) / sum_j exp(<phi(q_i), psi(d_j)>),
the loss is the mean of -log p(d_i | q_i). Under `tf.distribute`, each replica holds
B_local = B / R pairs; the documents of every replica are gathered (`all_gather`, as ORQA
and TF Recommenders do), so every query still sees the whole global batch of B documents,
and its positive sits at column `replica_id * B_local + i`.

Accidental hits: the same document (same `doc_page_id`, `doc_passage_id`) can appear twice in
a global batch (a passage feeds several ICT queries); its other copy is the positive, not a
negative, so those logits are masked out (set to a large negative number) except in the
positive's own column.
"""

from __future__ import annotations

import tensorflow as tf

#: A logit that contributes exp(...) = 0 in float32 and bfloat16 alike.
MASKED_LOGIT = -1e9


def _replica_context():
  ctx = tf.distribute.get_replica_context()
  return ctx if ctx is not None and ctx.num_replicas_in_sync > 1 else None


def gather_global(x: tf.Tensor) -> tf.Tensor:
  """[B_local, ...] -> [B_global, ...]: replica 0's rows first. Identity on one replica.

  Needs a static batch dimension (`drop_remainder=True`), as TFRS's cross-replica concat.
  """
  ctx = _replica_context()
  if ctx is None:
    return x
  if x.shape[0] is None:
    raise ValueError("cross-replica negatives need a static batch dimension: batch the "
                     "dataset with drop_remainder=True")
  if not x.device:
    # Under MultiWorkerMirroredStrategy, tensors that come straight from the distributed
    # dataset carry no device inside `strategy.run`, and `all_gather` then fails with
    # "destinations can not be empty": pin them to this worker's device first.
    with tf.device(tf.distribute.get_strategy().extended.worker_devices[0]):
      x = tf.identity(x)
  gathered = ctx.all_gather(x, axis=0)
  return tf.ensure_shape(gathered, [x.shape[0] * ctx.num_replicas_in_sync] + x.shape[1:])


def positive_columns(local_batch: int | tf.Tensor) -> tf.Tensor:
  """int32 [B_local]: column of each local query's positive in the global logits."""
  ctx = _replica_context()
  offset = 0
  if ctx is not None:
    offset = tf.cast(ctx.replica_id_in_sync_group, tf.int32) * local_batch
  return offset + tf.range(local_batch, dtype=tf.int32)


def in_batch_logits(query_emb: tf.Tensor, doc_emb: tf.Tensor,
                    doc_ids: tf.Tensor | None = None, temperature: float = 1.0,
                    ) -> tuple[tf.Tensor, tf.Tensor]:
  """Logits of every local query against every document of the global batch.

  Args:
    query_emb: float [B_local, d], this replica's queries.
    doc_emb: float [B_local, d], this replica's documents (query i's positive is doc i).
    doc_ids: int64 [B_local, K] document identity, e.g. (doc_page_id, doc_passage_id); rows
      equal to the positive's elsewhere in the global batch are masked. None: no masking.
    temperature: logits are divided by it.
  Returns:
    logits float32 [B_local, B_global] (masked entries = MASKED_LOGIT), and
    labels int32 [B_local] (the positive's column).
  """
  global_docs = gather_global(doc_emb)
  logits = tf.matmul(tf.cast(query_emb, tf.float32), tf.cast(global_docs, tf.float32),
                     transpose_b=True)
  if temperature != 1.0:
    logits = logits / temperature
  labels = positive_columns(tf.shape(query_emb)[0])
  if doc_ids is not None:
    global_ids = gather_global(doc_ids)
    same_doc = tf.reduce_all(doc_ids[:, None, :] == global_ids[None, :, :], axis=-1)
    is_positive = tf.one_hot(labels, tf.shape(global_ids)[0], on_value=True, off_value=False)
    accidental = tf.logical_and(same_doc, tf.logical_not(is_positive))
    logits = tf.where(accidental, tf.constant(MASKED_LOGIT, logits.dtype), logits)
  return logits, labels


def in_batch_softmax_loss(query_emb: tf.Tensor, doc_emb: tf.Tensor,
                          doc_ids: tf.Tensor | None = None, temperature: float = 1.0,
                          ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """Eq. 4 on this replica's queries: (mean loss [], logits [B_local, B_global], labels).

  The mean is over local queries; the global loss is the mean of the replicas' losses, so a
  train step under R replicas divides by R before Keras sums the gradients.
  """
  logits, labels = in_batch_logits(query_emb, doc_emb, doc_ids, temperature)
  per_query = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
  return tf.reduce_mean(per_query), logits, labels


def in_batch_accuracy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
  """float32 [B_local]: 1 where the positive has the largest logit (chance: 1 / B_global)."""
  return tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32)


def masked_lm_loss(logits: tf.Tensor, mask_ids: tf.Tensor, mask_weights: tf.Tensor,
                   ) -> tuple[tf.Tensor, tf.Tensor]:
  """Masked-LM cross-entropy averaged over real predictions.

  Args:
    logits: float [B, P, V] at the P masked positions.
    mask_ids: int [B, P] original token ids.
    mask_weights: float32 [B, P], 1 on real predictions, 0 on padding slots.
  Returns:
    (loss [], accuracy []) over weighted positions.
  """
  logits = tf.cast(logits, tf.float32)
  per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=mask_ids, logits=logits)
  total = tf.maximum(tf.reduce_sum(mask_weights), 1.0)
  loss = tf.reduce_sum(per_token * mask_weights) / total
  correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32),
                             tf.cast(mask_ids, tf.int32)), tf.float32)
  return loss, tf.reduce_sum(correct * mask_weights) / total
