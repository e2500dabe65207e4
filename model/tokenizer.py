"""In-graph tokenizer: raw strings -> static-length `token_ids` / `padding_mask`.

Built only from TensorFlow and tensorflow-text ops, so it runs inside `tf.data`, inside a
`tf.function` and inside an exported SavedModel (a consumer needs `import tensorflow_text`
for the custom ops, nothing of ours):

  text   --FastBertNormalizer (lower case, NFD, strip accents)-->
         --FastWordpieceTokenizer (end to end: splits words, then word pieces)--> ragged ids
  query  = [CLS] q [SEP]                          (cut to query_len - 2 pieces)
  doc    = [CLS] title [SEP] passage [SEP]        (cut in order: the passage is cut first)
         --padded to a static length--> token_ids, padding_mask

The cut and the packing are tensorflow-text's WaterfallTrimmer + combine_segments +
pad_model_inputs, written as one gather (`pack_segments`): the same ids, in 111 graph ops
where those make 1,547 for a document (73 / 870 for a question), which every tf.data map,
tf.function and export that holds the tokenizer paid for in seconds of tracing.

The vocabulary file has one token per line, `[PAD]` on line 0 (id 0 is padding), and the
other `contracts.RESERVED_TOKENS` (`[UNK]`, `[CLS]`, `[SEP]`, `[MASK]`) somewhere (as
`twotower vocab` writes it).
"""

from __future__ import annotations

import logging

import tensorflow as tf
import tensorflow_text as tf_text

from twotower.core.contracts import CLS, MASK, PAD, SEP, UNK
from twotower.model.vocab_file import read_vocab  # noqa: F401  (read here too, as always)

logger = logging.getLogger(__name__)


@tf.autograph.experimental.do_not_convert  # plain ops, a Python loop over the segments
def pack_segments(segments: list[tf.RaggedTensor], length: int, cls_id: int, sep_id: int,
                  pad_id: int) -> tuple[tf.Tensor, tf.Tensor]:
  """`[CLS] s1 [SEP] s2 [SEP] ... [PAD]...` of ragged int [batch, (pieces)] segments, cut to
  fit `length` in order (the first segment keeps up to length - 1 - len(segments) pieces,
  the next what is left, and so on, each losing its tail): tensorflow-text's
  WaterfallTrimmer(length - 1 - len(segments)) + combine_segments + pad_model_inputs, as
  one gather. Returns int32 (token_ids, padding_mask), both [batch, length]."""
  columns = tf.range(length, dtype=tf.int64)[None, :]
  left = tf.constant(length - 1 - len(segments), tf.int64)  # pieces the segments may keep
  start = tf.ones_like(segments[0].row_lengths())[:, None]  # after [CLS]
  ids = tf.where(columns == 0, tf.constant(cls_id, tf.int64), tf.constant(pad_id, tf.int64))
  for segment in segments:
    kept = tf.minimum(segment.row_lengths(), left)
    left -= kept
    end = start + kept[:, None]
    # Column c holds the segment's piece c - start where start <= c < end; the dense copy is
    # cut at `length` columns, enough for any kept piece.
    pieces = segment.to_tensor(default_value=pad_id, shape=[None, length])
    offset = tf.clip_by_value(columns - start, 0, length - 1)
    ids = tf.where((columns >= start) & (columns < end),
                   tf.gather(pieces, offset, batch_dims=1), ids)
    ids = tf.where(columns == end, tf.constant(sep_id, tf.int64), ids)
    start = end + 1
  return tf.cast(ids, tf.int32), tf.cast(columns < start, tf.int32)


def pack_segments_tf_text(segments: list[tf.RaggedTensor], length: int, cls_id: int,
                          sep_id: int, pad_id: int) -> tuple[tf.Tensor, tf.Tensor]:
  """What `pack_segments` replaced, from tensorflow-text's ops: kept as the reference its
  test and benchmarks/tokenizer_packing.py compare it with."""
  trimmed = tf_text.WaterfallTrimmer(length - 1 - len(segments)).trim(segments)
  ids, _ = tf_text.combine_segments(trimmed, start_of_sequence_id=cls_id,
                                    end_of_segment_id=sep_id)
  token_ids, mask = tf_text.pad_model_inputs(ids, max_seq_length=length, pad_value=pad_id)
  return tf.cast(token_ids, tf.int32), tf.cast(mask, tf.int32)


class Tokenizer(tf.Module):
  """Raw query / (title, passage) strings -> fixed-length id and mask tensors.

  Outputs are dicts with KerasHub's names, `token_ids` int32 [batch, length] and
  `padding_mask` int32 [batch, length] (1 on real tokens), `length` static.
  """

  def __init__(self, vocab: list[str], query_len: int, doc_len: int, name: str = "tokenizer"):
    super().__init__(name=name)
    self.vocab_size = len(vocab)
    self.query_len = int(query_len)
    self.doc_len = int(doc_len)
    index = {t: i for i, t in enumerate(vocab)}
    self.pad_id, self.unk_id = index[PAD], index[UNK]
    self.cls_id, self.sep_id, self.mask_id = index[CLS], index[SEP], index[MASK]
    self._normalizer = tf_text.FastBertNormalizer(lower_case_nfd_strip_accents=True)
    self._wordpiece = tf_text.FastWordpieceTokenizer(
        vocab=vocab, token_out_type=tf.int64, unknown_token=UNK, no_pretokenization=False)

  @classmethod
  def from_file(cls, path: str, query_len: int, doc_len: int) -> "Tokenizer":
    vocab = read_vocab(path)
    logger.info("vocabulary %s: %d tokens", path, len(vocab))
    return cls(vocab, query_len, doc_len)

  # Not converted by AutoGraph: tensorflow-text's Python has no tensor-dependent control flow,
  # and converting it cost a second or more in each process that traces the tokenizer.
  @tf.autograph.experimental.do_not_convert
  def word_pieces(self, text: tf.Tensor) -> tf.RaggedTensor:
    """string [batch] -> int64 ragged [batch, (pieces)], no special tokens."""
    return self._wordpiece.tokenize(self._normalizer.normalize(text))

  def _pack(self, segments: list[tf.RaggedTensor], length: int) -> dict[str, tf.Tensor]:
    token_ids, mask = pack_segments(segments, length, self.cls_id, self.sep_id, self.pad_id)
    return {"token_ids": token_ids, "padding_mask": mask}

  def queries(self, query: tf.Tensor) -> dict[str, tf.Tensor]:
    """string [batch] -> `[CLS] q [SEP]` ids/mask, int32 [batch, query_len]."""
    return self._pack([self.word_pieces(query)], self.query_len)

  def docs(self, title: tf.Tensor, text: tf.Tensor) -> dict[str, tf.Tensor]:
    """string [batch] x2 -> `[CLS] title [SEP] passage [SEP]` ids/mask, [batch, doc_len]."""
    return self._pack([self.word_pieces(title), self.word_pieces(text)], self.doc_len)

  def passages(self, text: tf.Tensor, length: int) -> dict[str, tf.Tensor]:
    """string [batch] -> `[CLS] text [SEP]` ids/mask, [batch, length] (MLM inputs)."""
    return self._pack([self.word_pieces(text)], length)

  def mask_for_mlm(self, token_ids: tf.Tensor, rate: float, max_predictions: int,
                   seed: tf.Tensor) -> dict[str, tf.Tensor]:
    """BERT masking of a packed batch: `rate` of the word pieces of each row are predicted;
    of those, 80 % become [MASK], 10 % a random token, 10 % stay.

    Each row predicts floor(n * rate) or one more of its n maskable pieces (stochastic
    rounding), so the masked fraction is `rate` in expectation at every sequence length: a
    fixed ceil (tensorflow-text's RandomItemSelector) or round is off by up to 1/n, 3 points
    at 32 pieces. `max_predictions` is the static width of the outputs; it should be at least
    `config.mlm_predictions(length, rate)`, else it caps long rows below `rate`.

    Args:
      token_ids: int32 [batch, length], `[CLS] ... [SEP]` padded with [PAD]=0.
      rate: share of maskable pieces (not [PAD], [CLS], [SEP]) to predict.
      max_predictions: P, predicted positions per row (static).
      seed: int [2], a stateless-random seed (the same seed masks the same way).
    Returns:
      `token_ids` (masked) and `padding_mask` int32 [batch, length]; `mask_positions`,
      `mask_ids` int32 [batch, P] and `mask_weights` float32 [batch, P] (0 on unused slots,
      whose position is 0 and id the original [CLS]).
    """
    ids = tf.cast(token_ids, tf.int32)
    length = ids.shape[1]
    predictions = min(int(max_predictions), length)
    shape = tf.shape(ids)
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=4)
    maskable = ((ids != self.pad_id) & (ids != self.cls_id) & (ids != self.sep_id))
    n = tf.reduce_sum(tf.cast(maskable, tf.float32), axis=1)
    count = tf.floor(n * rate + tf.random.stateless_uniform([shape[0]], seeds[0]))
    count = tf.minimum(tf.cast(count, tf.int32), predictions)
    # Maskable positions in a random order first (unmaskable ones score 2 and sort last).
    scores = tf.where(maskable, tf.random.stateless_uniform(shape, seeds[1]), 2.0)
    order = tf.argsort(scores, axis=1, stable=True)[:, :predictions]
    weights = tf.range(predictions)[None, :] < count[:, None]
    positions = tf.where(weights, order, 0)
    original = tf.gather(ids, positions, batch_dims=1)
    draw = tf.random.stateless_uniform(tf.shape(positions), seeds[2])
    random_ids = tf.random.stateless_uniform(tf.shape(positions), seeds[3], minval=0,
                                             maxval=self.vocab_size, dtype=tf.int32)
    replaced = tf.where(draw < 0.8, self.mask_id, tf.where(draw < 0.9, random_ids, original))
    replaced = tf.where(weights, replaced, original)
    rows = tf.broadcast_to(tf.range(shape[0])[:, None], tf.shape(positions))
    masked = tf.tensor_scatter_nd_update(ids, tf.stack([rows, positions], axis=-1), replaced)
    return {"token_ids": masked,
            "padding_mask": tf.cast(ids != self.pad_id, tf.int32),
            "mask_positions": positions,
            "mask_ids": original,
            "mask_weights": tf.cast(weights, tf.float32)}

