"""The tokenizer's cut and packing: `pack_segments` (one gather) against tensorflow-text's
WaterfallTrimmer + combine_segments + pad_model_inputs, which it replaced.

  .venv/bin/python -m benchmarks.tokenizer_packing [--squad FILE] [--batch 256]
      [--batches 20] [--rounds 3]

Both pack the same word pieces (FastBertNormalizer + FastWordpieceTokenizer, shared) of real
documents (`[CLS] title [SEP] paragraph [SEP]`, cpu-small's 128 pieces) and questions
(`[CLS] q [SEP]`, 32): the SQuAD file's when given or present in ../shared/data, otherwise
synthetic text. Per side it prints the graph's op count, the seconds to trace it (what every
tf.data map, tf.function and SavedModel export that holds the tokenizer pays, once per
process and function), and rows/s through the traced function, with each ratio to
tensorflow-text's, and whether the ids are equal. Rounds alternate the two, best kept.
"""

from __future__ import annotations

import argparse
import pathlib
import time

import numpy as np
import tensorflow as tf

from twotower.core import contracts
from twotower.model.tokenizer import Tokenizer, pack_segments, pack_segments_tf_text
from twotower.pipelines.reqa import squad

SQUAD = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data" / "squad" / \
    "train-subset-v1.1.json"
DOC_LEN, QUERY_LEN = 128, 32


def squad_texts(path: str) -> tuple[list[str], list[str], list[str]]:
  """(titles, paragraphs, questions) of a SQuAD file: a title per paragraph."""
  titles, paragraphs, questions = [], [], []
  for article in squad.load_squad(path)["data"]:
    for paragraph in article["paragraphs"]:
      titles.append(article["title"].replace("_", " "))
      paragraphs.append(paragraph["context"])
      questions.extend(qa["question"] for qa in paragraph["qas"])
  return titles, paragraphs, questions


def vocabulary(texts: list[str]) -> list[str]:
  """A WordPiece vocabulary good enough to pack: the reserved tokens, up to 20,000 of the
  texts' words, and single-character suffixes (so no word is all [UNK])."""
  words = sorted({w.lower().strip(".,;:()\"'") for t in texts for w in t.split()} - {""})
  return [*contracts.RESERVED_TOKENS, *words[:20000],
          *[f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz0123456789"]]


def _texts(path: pathlib.Path | None, rng: np.random.Generator):
  """`squad_texts` of the file and its name, or synthetic texts of like lengths."""
  if path is not None and path.exists():
    return (*squad_texts(str(path)), str(path))
  words = [f"w{i}" for i in range(3000)]
  text = lambda n: " ".join(rng.choice(words, n))  # noqa: E731
  return ([text(3) for _ in range(2000)], [text(int(rng.integers(20, 300))) for _ in range(2000)],
          [text(int(rng.integers(4, 20))) for _ in range(8000)], "synthetic text")


def measure(pack, tok: Tokenizer, columns: list[list[str]], length: int, batch: int,
            batches: int) -> dict:
  """Op count, trace seconds and rows/s of `pack` over the word pieces of COLUMNS."""
  specs = [tf.TensorSpec([None], tf.string) for _ in columns]

  def fn(*texts):
    return pack([tok.word_pieces(t) for t in texts], length, tok.cls_id, tok.sep_id, tok.pad_id)
  start = time.perf_counter()
  concrete = tf.function(fn).get_concrete_function(*specs)
  traced = time.perf_counter() - start
  inputs = [[tf.constant(c[i * batch:(i + 1) * batch]) for c in columns] for i in range(batches)]
  concrete(*inputs[0])  # warm
  start = time.perf_counter()
  out = [concrete(*x)[0].numpy() for x in inputs]
  seconds = time.perf_counter() - start
  return {"ops": len(concrete.graph.get_operations()), "trace_s": traced,
          "rows_per_s": batch * batches / seconds, "ids": np.concatenate(out)}


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--squad", type=pathlib.Path, default=SQUAD,
                 help="a SQuAD v1.1 JSON file (default: the shared subset; absent: synthetic)")
  p.add_argument("--batch", type=int, default=256)
  p.add_argument("--batches", type=int, default=20)
  p.add_argument("--rounds", type=int, default=3)
  args = p.parse_args(argv)
  rng = np.random.default_rng(0)
  titles, paragraphs, questions, source = _texts(args.squad, rng)
  need = args.batch * args.batches
  titles, paragraphs = (titles * (need // len(titles) + 1))[:need], \
      (paragraphs * (need // len(paragraphs) + 1))[:need]
  questions = (questions * (need // len(questions) + 1))[:need]
  tok = Tokenizer(vocabulary(paragraphs + questions), QUERY_LEN, DOC_LEN)
  sides = {"document": ([titles, paragraphs], DOC_LEN), "question": ([questions], QUERY_LEN)}
  packers = {"pack_segments": pack_segments, "tensorflow-text": pack_segments_tf_text}
  best: dict[tuple[str, str], dict] = {}
  for _ in range(args.rounds):
    for side, (columns, length) in sides.items():
      for name, pack in packers.items():
        m = measure(pack, tok, columns, length, args.batch, args.batches)
        old = best.get((side, name))
        best[(side, name)] = m if old is None else {
            **m, "trace_s": min(m["trace_s"], old["trace_s"]),
            "rows_per_s": max(m["rows_per_s"], old["rows_per_s"])}
  print(f"tokenizer packing: {need:,} rows of {source} per side, batch {args.batch}, "
        f"best of {args.rounds} rounds (trace once per round, fresh function)\n")
  print("| side | packing | graph ops | trace s | rows/s | ops ratio | trace ratio | "
        "rows/s ratio | ids equal |")
  print("|---|---|---|---|---|---|---|---|---|")
  for side in sides:
    ref = best[(side, "tensorflow-text")]
    for name in packers:
      m = best[(side, name)]
      same = bool(np.array_equal(m["ids"], ref["ids"]))
      print(f"| {side} | {name} | {m['ops']:,} | {m['trace_s']:.2f} | {m['rows_per_s']:,.0f} | "
            f"{m['ops'] / ref['ops']:.3f} | {m['trace_s'] / ref['trace_s']:.3f} | "
            f"{m['rows_per_s'] / ref['rows_per_s']:.2f} | {'yes' if same else 'NO'} |")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
