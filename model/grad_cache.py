"""Gradient cache (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under
Memory Limited Setup"; Tevatron's GradCache, sentence-transformers' CachedMNRL): the exact
gradient of an in-batch loss over a batch of any size, with activation memory bounded by one
chunk of the batch.

The in-batch softmax couples every query with every document, so the batch cannot be cut
into independent micro-batches; but the loss reaches the weights only through the
embeddings. Per replica, with the batch's tower inputs cut into n chunks:

  1. embed chunk by chunk, no tape (no activations kept): embeddings E, float32 [R, d] per
     input, saving each chunk's dropout RNG state first;
  2. the loss L(E) on the cached embeddings (cross-replica gather included) and G = dL/dE;
  3. per chunk c: restore its RNG state, re-embed E_c under a tape and add the gradient of
     sum(E_c * G_c), i.e. (dE_c/dW)^T G_c, to each weight's gradient.

Step 3 is the chain rule dL/dW = sum_c (dE_c/dW)^T dL/dE_c, so the gradients equal the
full-batch ones up to float rounding (tests/test_grad_cache.py checks every one to 1e-5). The
price is a second forward pass of the towers, about a third more compute per step.

Dropout: each Keras dropout layer draws its mask from a `SeedGenerator` whose state (a
variable in `layer.variables` but not in `layer.weights`) advances at every call. Step 1
snapshots all states before each chunk and step 3 restores them, so the re-forward draws
the very masks of the pass whose embeddings the loss saw; after step 3 the states stand
where step 1 left them. Masks are drawn per chunk: the same distribution as one full-batch
call, not the same numbers (with one chunk they are the direct path's exactly).

Both loops are `tf.while_loop(parallel_iterations=1)`: a graph of one chunk's size whatever
the number of chunks, and one chunk's activations alive at a time (an unrolled Python loop
lets the executor start later chunks' forward passes before earlier backward passes free
their activations).
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import tensorflow as tf

#: encode(chunk inputs) -> {name: float32 [rows of the chunk, d]}
Encoder = Callable[[Mapping], Mapping[str, tf.Tensor]]


def seed_states(layers: Sequence) -> list:
  """The dropout RNG states (Keras `SeedGenerator` state variables) of `layers`, in a stable
  order, each once: the variables of a layer that are not its weights."""
  states, seen = [], set()
  for layer in layers:
    weights = {id(w) for w in layer.weights}
    for v in layer.variables:
      if id(v) not in weights and id(v) not in seen:
        seen.add(id(v))
        states.append(v)
  return states


def _rows(tree) -> int:
  rows = {t.shape[0] for t in tf.nest.flatten(tree)}
  if len(rows) != 1 or None in rows:
    raise ValueError(f"gradient caching needs one static batch dimension per input (batch "
                     f"with drop_remainder=True); got {sorted(map(str, rows))}")
  return rows.pop()


def split_chunks(inputs: Mapping, num_chunks: int) -> dict:
  """{name: tree of [R, ...]} -> {name: tree of [num_chunks, R / num_chunks, ...]}."""
  out = {}
  for name, tree in inputs.items():
    tree = tf.nest.map_structure(tf.convert_to_tensor, tree)
    rows = _rows(tree)
    if rows % num_chunks:
      raise ValueError(f"{name}: {rows} rows do not split into {num_chunks} equal chunks")
    out[name] = tf.nest.map_structure(
        lambda t, r=rows: tf.reshape(t, [num_chunks, r // num_chunks] + t.shape[1:].as_list()),
        tree)
  return out


def _take(chunks: Mapping, i) -> dict:
  return tf.nest.map_structure(lambda t: tf.gather(t, i), dict(chunks))


def _read(states: Sequence) -> tf.Tensor:
  return tf.stack([tf.convert_to_tensor(s) for s in states])


def _restore(states: Sequence, values: tf.Tensor) -> None:
  for i, state in enumerate(states):
    state.assign(values[i])


def _loop(body, loop_vars, num_chunks: int):
  return tf.while_loop(lambda i, *_: i < num_chunks, body, (tf.constant(0),) + loop_vars,
                       parallel_iterations=1)[1:]


def embed_in_chunks(encode: Encoder, inputs: Mapping, num_chunks: int,
                    dims: Mapping[str, int], states: Sequence = (),
                    ) -> tuple[dict[str, tf.Tensor], tf.Tensor | None]:
  """Step 1: every input embedded chunk by chunk (call it outside any tape).

  Args:
    encode: chunk inputs -> {name: float32 [rows / num_chunks, dims[name]]}.
    inputs: {name: tree of int [rows, ...]}, each name's rows a multiple of num_chunks.
    num_chunks: n.
    dims: the embedding width of each input.
    states: RNG state variables (`seed_states`) to snapshot before each chunk.
  Returns:
    {name: float32 [rows, d]} in row order, and the snapshots [n, len(states), 2] (None
    without states).
  """
  chunks = split_chunks(inputs, num_chunks)
  names = sorted(inputs)
  rows = {n: _rows(inputs[n]) for n in names}
  arrays = tuple(tf.TensorArray(tf.float32, size=num_chunks,
                                element_shape=[rows[n] // num_chunks, dims[n]]) for n in names)
  if states:
    snapshot = _read(states)
    snapshots = tf.TensorArray(snapshot.dtype, size=num_chunks, element_shape=snapshot.shape)

  def body(i, arrays, *rest):
    rest = (rest[0].write(i, _read(states)),) if states else ()
    emb = encode(_take(chunks, i))
    return (i + 1, tuple(a.write(i, tf.cast(emb[n], tf.float32))
                         for a, n in zip(arrays, names))) + rest

  out = _loop(body, (arrays,) + ((snapshots,) if states else ()), num_chunks)
  embeddings = {n: tf.reshape(a.stack(), [rows[n], dims[n]]) for a, n in zip(out[0], names)}
  return embeddings, (out[1].stack() if states else None)


def _dense(grad, variable) -> tf.Tensor:
  if grad is None:
    return tf.zeros(variable.shape, variable.dtype)
  return tf.convert_to_tensor(grad)  # IndexedSlices of embedding lookups -> dense


def cached_gradients(encode: Encoder, inputs: Mapping, num_chunks: int,
                     dims: Mapping[str, int], loss_fn: Callable, variables: Sequence,
                     states: Sequence = ()) -> tuple[object, list[tf.Tensor]]:
  """Steps 1-3: the gradient of `loss_fn` with respect to `variables`, in chunks.

  Args:
    encode, inputs, num_chunks, dims, states: as `embed_in_chunks`; `encode` runs in
      training mode (dropout on) and is called in the same order in steps 1 and 3.
    loss_fn: {name: float32 [rows, d]} -> (scalar to differentiate, e.g. the loss scaled for
      mixed precision and divided by the replicas; anything to return alongside).
    variables: the trainable variables.
  Returns:
    (what loss_fn returned alongside, [dense gradient of each variable]).
  """
  embeddings, snapshots = embed_in_chunks(encode, inputs, num_chunks, dims, states)
  names = sorted(embeddings)
  cached = [embeddings[n] for n in names]
  with tf.GradientTape() as tape:
    tape.watch(cached)
    objective, aux = loss_fn(embeddings)
  emb_grads = tape.gradient(objective, cached)
  emb_grads = {n: tf.reshape(tf.zeros_like(e) if g is None else g,
                             [num_chunks, -1, dims[n]])
               for n, e, g in zip(names, cached, emb_grads)}
  chunks = split_chunks(inputs, num_chunks)

  def body(i, accumulated):
    if states:
      _restore(states, snapshots[i])
    with tf.GradientTape() as chunk_tape:
      emb = encode(_take(chunks, i))
      surrogate = tf.add_n([tf.reduce_sum(tf.cast(emb[n], tf.float32) * emb_grads[n][i])
                            for n in names])
    grads = chunk_tape.gradient(surrogate, list(variables))
    return i + 1, tuple(a + _dense(g, v) for a, g, v in zip(accumulated, grads, variables))

  zeros = tuple(tf.zeros(v.shape, v.dtype) for v in variables)
  (accumulated,) = _loop(body, (zeros,), num_chunks)
  return aux, list(accumulated)
