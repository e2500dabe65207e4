"""Cross-replica negatives under `tf.distribute`: the TensorFlow half of losses.py.

Each replica holds B_local = B / R pairs; the documents of every replica are gathered
(`all_gather`, as ORQA and TF Recommenders do), so every query still sees the whole global
batch of B documents, and its positive sits at column `replica_id * B_local + i`. On JAX
none of this exists: `keras.distribution` runs one program over the global batch.
"""

from __future__ import annotations

import tensorflow as tf


def _replica_context():
  ctx = tf.distribute.get_replica_context()
  return ctx if ctx is not None and ctx.num_replicas_in_sync > 1 else None


def num_replicas() -> int:
  return tf.distribute.get_strategy().num_replicas_in_sync


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


def replica_offset(local_batch) -> tf.Tensor | int:
  """The global column of this replica's first row: replica_id * B_local (0 on one)."""
  ctx = _replica_context()
  if ctx is None:
    return 0
  return tf.cast(ctx.replica_id_in_sync_group, tf.int32) * tf.cast(local_batch, tf.int32)
