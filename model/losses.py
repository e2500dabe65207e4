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

Hard negatives (DPR; mined with BM25 by `twotower hardneg`): each pair may bring k negative
documents. They join the documents every query is scored against: a query sees the global
batch's B positives and its B * k hard negatives, logits [B_local, B_global * (1 + k)]. A
padded negative (a question with fewer than k, id -1) is masked for every query; a hard
negative that is a query's own positive (same candidate id) is masked for that query.

MoCo queue (`objective.moco_queue`, Contriever's negatives): the last N documents' embeddings
from the momentum encoder are columns after the batch's (`queue_logits`), masked where a slot
is empty or holds the query's own document.

Written in `keras.ops`, so the same functions run on TensorFlow and JAX. The one thing that
differs is where the global batch is: under `tf.distribute` each replica holds its share and
gathers the others' (model/tf_replicas.py); on JAX, `keras.distribution.DataParallel` shards
one program over the devices, so the arrays already are the global batch and XLA inserts the
collectives (`gather_global` is the identity there, the positives' columns start at 0).
"""

from __future__ import annotations

import keras
from keras import ops

#: A logit that contributes exp(...) = 0 in float32 and bfloat16 alike.
MASKED_LOGIT = -1e9


def _tf_replicas():
  """model/tf_replicas.py under TensorFlow, None under JAX (never imports TensorFlow there)."""
  if keras.backend.backend() != "tensorflow":
    return None
  from twotower.model import tf_replicas  # pylint: disable=import-outside-toplevel
  return tf_replicas


def gather_global(x):
  """[B_local, ...] -> [B_global, ...]: replica 0's rows first; the identity on one replica
  and on JAX (whose arrays are the global batch). Needs a static batch dimension under
  `tf.distribute` (`drop_remainder=True`), as TFRS's cross-replica concat."""
  replicas = _tf_replicas()
  return x if replicas is None else replicas.gather_global(x)


def positive_columns(local_batch):
  """int32 [B_local]: column of each local query's positive in the global logits."""
  replicas = _tf_replicas()
  offset = 0 if replicas is None else replicas.replica_offset(local_batch)
  return offset + ops.arange(local_batch, dtype="int32")


def in_batch_logits(query_emb, doc_emb, doc_ids=None, temperature: float = 1.0, neg_emb=None,
                    neg_ids=None):
  """Logits of every local query against every document of the global batch.

  Args:
    query_emb: float [B_local, d], this replica's queries.
    doc_emb: float [B_local, d], this replica's documents (query i's positive is doc i).
    doc_ids: int64 [B_local, K] document identity, e.g. (doc_page_id, doc_passage_id); rows
      equal to the positive's elsewhere in the global batch are masked. None: no masking.
    temperature: logits are divided by it.
    neg_emb: float [B_local * k, d], this replica's hard negatives, rows i*k .. i*k+k-1 those
      of pair i; None (or k = 0): no hard negatives, the logits are eq. 4's exactly.
    neg_ids: int64 [B_local * k], required with neg_emb: each negative's candidate id, named
      as the last column of doc_ids names a positive (ReQA pairs: doc_passage_id is the
      candidate id); -1 marks padding.
  Returns:
    logits float32 [B_local, B_global * (1 + k)] (masked entries = MASKED_LOGIT): the
    global batch's positives (replica 0's first), then its hard negatives (replica 0's
    first), and labels int32 [B_local] (the positive's column).
  """
  global_docs = gather_global(doc_emb)
  logits = _scores(query_emb, global_docs, temperature)
  labels = positive_columns(ops.shape(query_emb)[0])
  if doc_ids is not None:
    global_ids = gather_global(doc_ids)
    same_doc = ops.all(ops.equal(doc_ids[:, None, :], global_ids[None, :, :]), axis=-1)
    columns = ops.arange(ops.shape(global_ids)[0], dtype="int32")
    is_positive = ops.equal(columns[None, :], labels[:, None])
    accidental = ops.logical_and(same_doc, ops.logical_not(is_positive))
    logits = ops.where(accidental, ops.cast(MASKED_LOGIT, logits.dtype), logits)
  if neg_emb is not None and neg_emb.shape[0] != 0:
    if neg_ids is None:
      raise ValueError("hard negatives need their ids (neg_ids; -1 marks padding)")
    positive_ids = None if doc_ids is None else doc_ids[:, -1]
    logits = ops.concatenate([logits, hard_negative_logits(query_emb, neg_emb, neg_ids,
                                                           positive_ids, temperature)], axis=1)
  return logits, labels


def _scores(query_emb, docs, temperature: float):
  """float32 [B_q, B_d] = <q, d> / temperature, in float32 whatever the compute dtype."""
  logits = ops.matmul(ops.cast(query_emb, "float32"), ops.transpose(ops.cast(docs, "float32")))
  return logits / temperature if temperature != 1.0 else logits


def hard_negative_logits(query_emb, neg_emb, neg_ids, positive_ids=None,
                         temperature: float = 1.0):
  """Logits of every local query against every hard negative of the global batch.

  Args:
    query_emb: float [B_local, d].
    neg_emb: float [B_local * k, d], this replica's hard negatives.
    neg_ids: int64 [B_local * k], candidate ids; -1 (padding) is masked for every query.
    positive_ids: int64 [B_local], the candidate id of each query's positive: a negative
      with that id is masked for that query (accidental hit). None: no such masking.
    temperature: logits are divided by it.
  Returns:
    float32 [B_local, B_global * k].
  """
  global_ids = gather_global(neg_ids)
  logits = _scores(query_emb, gather_global(neg_emb), temperature)
  masked = ops.broadcast_to(ops.less(global_ids[None, :], 0), ops.shape(logits))
  if positive_ids is not None:
    masked = ops.logical_or(masked, ops.equal(positive_ids[:, None], global_ids[None, :]))
  return ops.where(masked, ops.cast(MASKED_LOGIT, logits.dtype), logits)


def queue_logits(query_emb, queue_emb, queue_ids, positive_ids=None, temperature: float = 1.0):
  """Logits of every local query against a MoCo queue of past documents' embeddings.

  Args:
    query_emb: float [B_local, d].
    queue_emb: float32 [N, d], the same on every replica (it holds the global batches).
    queue_ids: int64 [N, K], each slot's document id as `doc_ids` names one; a row of -1 is
      an empty slot (the queue fills during the first N / B steps) and is masked.
    positive_ids: int64 [B_local, K], each query's positive: a slot holding the same
      document (another crop of a passage seen a few steps ago) is masked for that query,
      as accidental hits are in the batch. None: no such masking.
    temperature: logits are divided by it.
  Returns:
    float32 [B_local, N].
  """
  logits = _scores(query_emb, queue_emb, temperature)
  empty = ops.any(ops.less(queue_ids, 0), axis=-1)
  masked = ops.broadcast_to(empty[None, :], ops.shape(logits))
  if positive_ids is not None:
    same = ops.all(ops.equal(positive_ids[:, None, :], queue_ids[None, :, :]), axis=-1)
    masked = ops.logical_or(masked, same)
  return ops.where(masked, ops.cast(MASKED_LOGIT, logits.dtype), logits)


def in_batch_softmax_loss(query_emb, doc_emb, doc_ids=None, temperature: float = 1.0,
                          neg_emb=None, neg_ids=None):
  """Eq. 4 on this replica's queries: (mean loss [], logits [B_local, B_global * (1 + k)],
  labels [B_local]); arguments as `in_batch_logits`.

  The mean is over local queries; the global loss is the mean of the replicas' losses, so a
  train step under R replicas divides by R before Keras sums the gradients.
  """
  logits, labels = in_batch_logits(query_emb, doc_emb, doc_ids, temperature, neg_emb, neg_ids)
  return softmax_loss(logits, labels)


def softmax_loss(logits, labels):
  """(mean cross-entropy [], logits, labels) of logits whose positive is column `labels`
  (TensorFlow: `tf.nn.sparse_softmax_cross_entropy_with_logits`; JAX: a log-softmax)."""
  per_query = ops.sparse_categorical_crossentropy(labels, logits, from_logits=True)
  return ops.mean(per_query), logits, labels


def in_batch_accuracy(logits, labels):
  """float32 [B_local]: 1 where the positive has the largest logit (chance: 1 / columns)."""
  best = ops.cast(ops.argmax(logits, axis=-1), "int32")
  return ops.cast(ops.equal(best, ops.cast(labels, "int32")), "float32")


def masked_lm_loss(logits, mask_ids, mask_weights):
  """Masked-LM cross-entropy averaged over real predictions.

  Args:
    logits: float [B, P, V] at the P masked positions.
    mask_ids: int [B, P] original token ids.
    mask_weights: float32 [B, P], 1 on real predictions, 0 on padding slots.
  Returns:
    (loss [], accuracy []) over weighted positions.
  """
  logits = ops.cast(logits, "float32")
  per_token = ops.sparse_categorical_crossentropy(mask_ids, logits, from_logits=True)
  total = ops.maximum(ops.sum(mask_weights), 1.0)
  loss = ops.sum(per_token * mask_weights) / total
  correct = ops.cast(ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"),
                               ops.cast(mask_ids, "int32")), "float32")
  return loss, ops.sum(correct * mask_weights) / total
