"""The in-graph tokenizer of model/tokenizer.py rebuilt with Hugging Face `tokenizers`, so that
an exported tower (model/export_hf.py: sentence-transformers, ONNX) gives the same token ids
with none of our code and no tensorflow-text.

tensorflow-text's FastBertNormalizer is not BERT's normaliser: it case-folds with NFKC
(ß -> ss, full-width letters to ASCII), turns control characters into spaces, keeps U+FFFD and
private-use characters ([UNK]) and knows newer Unicode tables. The differences are measured
on every code point at export time (normalizer_differences) and written into the tokenizer
as replacements; the code points tensorflow-text splits off as words of their own are split
before BERT's pre-tokenizer (TF_SPLIT_RANGES). tests/test_export_hf.py and
benchmarks/export_equality.py check the ids against the SavedModel's.
"""

from __future__ import annotations

import hashlib

from twotower.core import contracts


def vocab_digest(vocab: list[str]) -> str:
  """sha256 hex of a vocabulary's content: its tokens, UTF-8, each ended by a newline (the
  bytes of the vocab.txt `twotower vocab` writes), so equal for equal tokens in equal order
  whatever the file is called. An export records it in each tower.json; the ONNX tower checks
  its tokenizer.json against it (model/onnx_encoder.py)."""
  return hashlib.sha256("".join(t + "\n" for t in vocab).encode("utf-8")).hexdigest()


def normalizer_differences() -> dict[str, str]:
  """Every code point that tensorflow-text's FastBertNormalizer (lower_case_nfd_strip_accents:
  NFKC case folding, NFD, accents stripped, control characters to spaces) normalises
  otherwise than `tokenizers`' NFKC + BertNormalizer -> what tensorflow-text makes of it.

  Measured here, not listed by hand, because the two disagree on ~4,900 of 1.1M code points,
  by their rules and by their Unicode versions: case folding is not lower-casing (ß -> ss,
  ς -> σ, ᾳ -> αι), default-ignorable and unassigned code points are dropped, control
  characters become spaces where BertNormalizer drops them, U+FFFD and private-use
  characters are kept ([UNK]) where it drops them. About 6 s."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tensorflow_text as tf_text  # pylint: disable=import-outside-toplevel
  chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
  reference = tf_text.FastBertNormalizer(lower_case_nfd_strip_accents=True)
  ours = _base_normalizer(handle_chinese_chars=False)
  differences = {}
  for start in range(0, len(chars), 1 << 17):
    batch = chars[start:start + (1 << 17)]
    for char, want in zip(batch, reference.normalize(tf.constant(batch)).numpy()):
      want = want.decode("utf-8")
      if ours.normalize_str(char) != want:
        differences[char] = want
  return differences


def _base_normalizer(handle_chinese_chars: bool = True):
  from tokenizers import normalizers  # pylint: disable=import-outside-toplevel
  return normalizers.Sequence([
      normalizers.NFKC(),
      normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=handle_chinese_chars,
                                 strip_accents=True, lowercase=True)])


def _regex_class(chars) -> str:
  return "[" + "".join(f"\\x{{{ord(c):x}}}" for c in sorted(chars)) + "]"


def tf_compatible_normalizer(differences: dict[str, str]):
  """`tokenizers` normaliser equal to tensorflow-text's on every single code point: first
  the measured differences (one Replace per distinct replacement, its code points as one
  regex class), then NFKC and BertNormalizer (lower case, NFD, strip accents, spaces around
  CJK characters, which BERT's pre-tokenizer then splits as tensorflow-text does)."""
  from tokenizers import Regex  # pylint: disable=import-outside-toplevel
  from tokenizers import normalizers  # pylint: disable=import-outside-toplevel
  by_replacement: dict[str, list[str]] = {}
  for char, replacement in differences.items():
    by_replacement.setdefault(replacement, []).append(char)
  steps = [normalizers.Replace(Regex(_regex_class(chars)), replacement)
           for replacement, chars in sorted(by_replacement.items(), key=lambda kv: -len(kv[1]))]
  return normalizers.Sequence(steps + [_base_normalizer()])


#: Code points tensorflow-text's end-to-end WordPiece splits off as words of their own
#: (punctuation and CJK ideographs of Unicode versions newer than `tokenizers`' tables) where
#: BERT's pre-tokenizer does not: measured on every code point c as "x{c}y" with
#: tensorflow-text 2.21.1 and tokenizers 0.23.3 (396 code points; the one difference left is
#: U+166D CANADIAN SYLLABICS CHI SIGN, which `tokenizers` splits and tensorflow-text does not).
TF_SPLIT_RANGES = (
    (1565, 1565), (2557, 2557), (2678, 2678), (3191, 3191), (3204, 3204), (6990, 6991),
    (7037, 7039), (11843, 11855), (11858, 11869), (68974, 68974), (69293, 69293),
    (69461, 69465), (69510, 69513), (70612, 70613), (70615, 70616), (70731, 70735),
    (70746, 70747), (70749, 70749), (71264, 71276), (71353, 71353), (71739, 71739),
    (72004, 72006), (72162, 72162), (72255, 72262), (72346, 72348), (72350, 72354),
    (72448, 72457), (72673, 72673), (72769, 72773), (72816, 72817), (73463, 73464),
    (73539, 73551), (73727, 73727), (77809, 77810), (93549, 93551), (93847, 93850),
    (94178, 94178), (124415, 124415), (125278, 125279), (178208, 178463))


def pre_tokenizer():
  """BERT's pre-tokenizer, after splitting off TF_SPLIT_RANGES as tensorflow-text does."""
  from tokenizers import Regex  # pylint: disable=import-outside-toplevel
  from tokenizers import pre_tokenizers  # pylint: disable=import-outside-toplevel
  ranges = "".join(f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in TF_SPLIT_RANGES)
  return pre_tokenizers.Sequence([
      pre_tokenizers.Split(Regex(f"[{ranges}]"), behavior="isolated"),
      pre_tokenizers.BertPreTokenizer()])


_DIFFERENCES: dict[str, str] | None = None


def recorded_normalizer_differences() -> dict[str, str]:
  """`normalizer_differences()` as recorded in normalizer_table.py, for a process that must
  not import TensorFlow (the JAX trainer's input, model/np_tokenizer.py);
  tests/test_jax_input.py checks it against the measurement with the installed
  tensorflow-text, and `python -m twotower.model.normalizer_table` rewrites it."""
  from twotower.model import normalizer_table  # pylint: disable=import-outside-toplevel
  return {chr(c): replacement for replacement, ranges in normalizer_table.DIFFERENCES.items()
          for start, end in ranges for c in range(start, end + 1)}


def hf_tokenizer(vocab: list[str], max_length: int | None = None, specials_in_text: bool = True,
                 differences: dict[str, str] | None = None):
  """A `tokenizers.Tokenizer` that gives the in-graph tokenizer's ids: `[CLS] text [SEP]`,
  cut from the end to `max_length` (None: no cut).

  `specials_in_text`: a literal `[SEP]` (`[CLS]`, ...) in the input is the special token, as
  the document layout `title [SEP] text` needs. False for a query tower: there it is three
  word pieces, as in the trained model (a transformers tokenizer always matches them).
  `differences`: the normaliser's (`recorded_normalizer_differences()`); None measures
  them with tensorflow-text (`normalizer_differences()`, once a process)."""
  global _DIFFERENCES  # pylint: disable=global-statement
  from tokenizers import AddedToken  # pylint: disable=import-outside-toplevel
  from tokenizers import Tokenizer  # pylint: disable=import-outside-toplevel
  from tokenizers import decoders, models, processors  # pylint: disable=import-outside-toplevel
  if differences is None:
    if _DIFFERENCES is None:  # the same for every vocabulary: measured once a process
      _DIFFERENCES = normalizer_differences()
    differences = _DIFFERENCES
  index = {t: i for i, t in enumerate(vocab)}
  tok = Tokenizer(models.WordPiece(index, unk_token=contracts.UNK, continuing_subword_prefix="##",
                                   max_input_chars_per_word=100))
  tok.normalizer = tf_compatible_normalizer(differences)
  tok.pre_tokenizer = pre_tokenizer()
  tok.decoder = decoders.WordPiece(prefix="##")
  if specials_in_text:
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in contracts.RESERVED_TOKENS])
  cls, sep = contracts.CLS, contracts.SEP
  tok.post_processor = processors.TemplateProcessing(
      single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
      special_tokens=[(cls, index[cls]), (sep, index[sep])])
  if max_length:
    tok.enable_truncation(max_length=max_length)
  return tok


def transformers_tokenizer(vocab: list[str], max_length: int):
  """The same as a transformers fast tokenizer (what sentence-transformers loads)."""
  from transformers import PreTrainedTokenizerFast  # pylint: disable=import-outside-toplevel
  tok = hf_tokenizer(vocab)
  return PreTrainedTokenizerFast(
      tokenizer_object=tok, model_max_length=max_length, unk_token=contracts.UNK,
      sep_token=contracts.SEP, pad_token=contracts.PAD, cls_token=contracts.CLS,
      mask_token=contracts.MASK, padding_side="right", truncation_side="right")


def normalizer_table_source(differences: dict[str, str]) -> str:
  """The text of normalizer_table.py for `differences` (char -> replacement): each
  replacement's code points as merged (first, last) ranges, with the library versions that
  measured them."""
  import importlib.metadata  # pylint: disable=import-outside-toplevel
  by_replacement: dict[str, list[list[int]]] = {}
  for char in sorted(differences, key=ord):
    ranges = by_replacement.setdefault(differences[char], [])
    if ranges and ranges[-1][1] == ord(char) - 1:
      ranges[-1][1] = ord(char)
    else:
      ranges.append([ord(char), ord(char)])
  versions = {name: importlib.metadata.version(name) for name in ("tensorflow-text", "tokenizers")}
  dropped = len(by_replacement.get("", ()))
  lines = [
      '"""tensorflow-text\'s FastBertNormalizer where it differs from `tokenizers`\' NFKC +',
      "BertNormalizer, code point by code point: `hf_tokenizer.normalizer_differences()` measured",
      f"with tensorflow-text {versions['tensorflow-text']} and tokenizers "
      f"{versions['tokenizers']} ({len(differences)} code points), recorded so that a",
      "process without TensorFlow (the JAX trainer's input, model/np_tokenizer.py) tokenizes as the",
      "in-graph tokenizer does. Generated; tests/test_jax_input.py checks it against the",
      "measurement with the installed libraries. Rewrite it with",
      "",
      "    python -m twotower.model.hf_tokenizer",
      '"""',
      "",
      "#: replacement -> the (first, last) code point ranges that become it",
      f"#: ({dropped} ranges are dropped: replacement \"\").",
      "DIFFERENCES: dict[str, tuple[tuple[int, int], ...]] = {"]
  for replacement, ranges in sorted(by_replacement.items()):
    pairs = [f"({a}, {b})" for a, b in ranges]
    lines.append(f"    {replacement!r}: (")
    for i in range(0, len(pairs), 5):
      lines.append("        " + ", ".join(pairs[i:i + 5]) + ",")
    lines.append("    ),")
  lines.append("}")
  return "\n".join(lines) + "\n"


if __name__ == "__main__":
  import os  # pylint: disable=import-outside-toplevel
  with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "normalizer_table.py"), "w",
            encoding="utf-8") as f:
    f.write(normalizer_table_source(normalizer_differences()))
