"""In-graph tokenizer: raw strings -> static-length `token_ids` / `padding_mask`.

Built only from tensorflow-text ops, so it runs inside `tf.data`, inside a `tf.function`
and inside an exported SavedModel (a consumer needs `import tensorflow_text` for the custom
ops, nothing of ours):

  text   --FastBertNormalizer (lower case, NFD, strip accents)-->
         --FastWordpieceTokenizer (end to end: splits words, then word pieces)--> ragged ids
  query  = [CLS] q [SEP]                          (WaterfallTrimmer to query_len - 2)
  doc    = [CLS] title [SEP] passage [SEP]        (WaterfallTrimmer: the passage is cut first)
         --combine_segments--> --pad_model_inputs(static length)--> token_ids, padding_mask

The vocabulary file has one token per line, `[PAD]` on line 0 (id 0 is padding), and
`[UNK]`, `[CLS]`, `[SEP]`, `[MASK]` somewhere (as `twotower vocab` writes it).
"""

from __future__ import annotations

import logging

import tensorflow as tf
import tensorflow_text as tf_text

logger = logging.getLogger(__name__)

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)


def read_vocab(path: str) -> list[str]:
  """Tokens of a WordPiece vocabulary file, one per line, checked for the special tokens."""
  with tf.io.gfile.GFile(path, "r") as f:
    tokens = [line.rstrip("\n").rstrip("\r") for line in f]
  while tokens and not tokens[-1]:
    tokens.pop()
  if not tokens or tokens[0] != PAD:
    raise ValueError(f"{path}: line 1 must be {PAD} (id 0 is padding), got "
                     f"{tokens[0] if tokens else 'an empty file'!r}")
  missing = [t for t in SPECIAL_TOKENS if t not in tokens]
  if missing:
    raise ValueError(f"{path}: vocabulary lacks the special tokens {missing}")
  dupes = len(tokens) - len(set(tokens))
  if dupes:
    raise ValueError(f"{path}: {dupes} duplicate tokens")
  return tokens


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
    self._query_trimmer = tf_text.WaterfallTrimmer(self.query_len - 2)
    self._doc_trimmer = tf_text.WaterfallTrimmer(self.doc_len - 3)

  @classmethod
  def from_file(cls, path: str, query_len: int, doc_len: int) -> "Tokenizer":
    vocab = read_vocab(path)
    logger.info("vocabulary %s: %d tokens", path, len(vocab))
    return cls(vocab, query_len, doc_len)

  def word_pieces(self, text: tf.Tensor) -> tf.RaggedTensor:
    """string [batch] -> int64 ragged [batch, (pieces)], no special tokens."""
    return self._wordpiece.tokenize(self._normalizer.normalize(text))

  def _pack(self, segments: list[tf.RaggedTensor], length: int) -> dict[str, tf.Tensor]:
    ids, _ = tf_text.combine_segments(segments, start_of_sequence_id=self.cls_id,
                                      end_of_segment_id=self.sep_id)
    token_ids, mask = tf_text.pad_model_inputs(ids, max_seq_length=length, pad_value=self.pad_id)
    return {"token_ids": tf.cast(token_ids, tf.int32), "padding_mask": tf.cast(mask, tf.int32)}

  def queries(self, query: tf.Tensor) -> dict[str, tf.Tensor]:
    """string [batch] -> `[CLS] q [SEP]` ids/mask, int32 [batch, query_len]."""
    (q,) = self._query_trimmer.trim([self.word_pieces(query)])
    return self._pack([q], self.query_len)

  def docs(self, title: tf.Tensor, text: tf.Tensor) -> dict[str, tf.Tensor]:
    """string [batch] x2 -> `[CLS] title [SEP] passage [SEP]` ids/mask, [batch, doc_len]."""
    t, p = self._doc_trimmer.trim([self.word_pieces(title), self.word_pieces(text)])
    return self._pack([t, p], self.doc_len)

  def passages(self, text: tf.Tensor, length: int) -> dict[str, tf.Tensor]:
    """string [batch] -> `[CLS] text [SEP]` ids/mask, [batch, length] (MLM inputs)."""
    (p,) = tf_text.WaterfallTrimmer(length - 2).trim([self.word_pieces(text)])
    return self._pack([p], length)

  def mask_for_mlm(self, token_ids: tf.Tensor, rate: float, max_predictions: int,
                   ) -> dict[str, tf.Tensor]:
    """BERT masking of a packed batch, with tensorflow-text's MLM ops.

    Args:
      token_ids: int32 [batch, length], padded with [PAD]=0.
    Returns:
      `token_ids` (masked) and `padding_mask` int32 [batch, length]; `mask_positions`,
      `mask_ids` int32 [batch, max_predictions] and `mask_weights` float32 [batch,
      max_predictions] (0 on padding slots).
    """
    ragged = tf.RaggedTensor.from_tensor(tf.cast(token_ids, tf.int64), padding=self.pad_id)
    selector = tf_text.RandomItemSelector(
        max_selections_per_batch=max_predictions, selection_rate=rate,
        unselectable_ids=[self.pad_id, self.cls_id, self.sep_id])
    chooser = tf_text.MaskValuesChooser(self.vocab_size, self.mask_id, mask_token_rate=0.8,
                                        random_token_rate=0.1)
    masked, positions, original = tf_text.mask_language_model(ragged, selector, chooser)
    length = token_ids.shape[1]
    masked_ids, padding_mask = tf_text.pad_model_inputs(masked, max_seq_length=length)
    positions, weights = tf_text.pad_model_inputs(positions, max_seq_length=max_predictions)
    original, _ = tf_text.pad_model_inputs(original, max_seq_length=max_predictions)
    return {"token_ids": tf.cast(masked_ids, tf.int32),
            "padding_mask": tf.cast(padding_mask, tf.int32),
            "mask_positions": tf.cast(positions, tf.int32),
            "mask_ids": tf.cast(original, tf.int32),
            "mask_weights": tf.cast(weights, tf.float32)}
