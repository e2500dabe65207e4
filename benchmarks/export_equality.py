"""`twotower export-hf` against the SavedModel it came from: token ids, embeddings, Recall@k.

  .venv/bin/python -m benchmarks.export_equality --run RUN [--squad FILE] [--texts 10000] \
      [--reqa DIR --split test-5]

Exports RUN (a trained run) into a temporary folder, then on `--texts` texts of real data —
SQuAD questions and (title, sentence) / (title, passage) documents, with variants that carry
accents, CJK, control characters, empty titles and empty strings, upper case, long (cut) and
one-word texts — compares, per tower:
  * token ids: the in-graph tokenizer (model/tokenizer.py, tensorflow-text) against the
    exported `tokenizer.json` (`tokenizers`) and the sentence-transformers model's tokenizer;
  * embeddings: the SavedModel's signatures against `SentenceTransformer(DIR).encode_query /
    encode_document` (PyTorch) and the ONNX tower (onnxruntime): max abs difference, the
    smallest cosine, the largest relative difference of the norms;
  * with `--reqa`: Recall@k (k = 1, 10, 100) on the split's questions over all candidates
    (flat inner product), the ranking of each system by its own embeddings.
Prints a table (markdown). Needs sentence-transformers and onnxruntime (pyproject pins).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import random
import tempfile
import time

import numpy as np

SQUAD = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data" / "squad" / \
    "train-subset-v1.1.json"

#: Variants that stress the normaliser and the pre-tokenizer (applied to a share of texts).
_ACCENTS = ("Café Müller", "naïve Zürich façade", "Ångström Dvořák", "São Paulo résumé",
            "İstanbul ŞİŞLİ", "Ελληνικά Ωμέγα", "Kraków Łódź")
_CJK = ("東京は日本の首都です", "北京大学", "한국어 문장", "ひらがなカタカナ", "中文，标点。")
_ODD = ("tab\there", "new\nline", "zero\u200bwidth", "nul\x00char", "soft\u00adhyphen",
        "emoji 🙂 text", "dash—dash – dash", "quote “x” ‘y’", "a\u0301 combining",
        "ﬁ ligature", "full－width ＡＢＣ", "...!!??", "\u3000ideographic space")


def _sentences(passage: str) -> list[str]:
  parts = [s.strip() for s in passage.replace("? ", "?|").replace(". ", ".|").split("|")]
  return [s for s in parts if s]


def build_texts(squad: str, n: int, seed: int = 0) -> tuple[list[str], list[tuple[str, str]]]:
  """n // 2 queries and n - n // 2 (title, text) documents from SQuAD, with variants."""
  rng = random.Random(seed)
  data = json.loads(pathlib.Path(squad).read_text(encoding="utf-8"))["data"]
  questions, docs = [], []
  for article in data:
    title = article["title"].replace("_", " ")
    for paragraph in article["paragraphs"]:
      docs.append((title, paragraph["context"]))
      docs.extend((title, s) for s in _sentences(paragraph["context"]))
      questions.extend(q["question"] for q in paragraph["qas"])
  rng.shuffle(questions)
  rng.shuffle(docs)
  nq, nd = n // 2, n - n // 2
  queries = questions[:nq]
  documents = docs[:nd]

  def vary(text: str, i: int) -> str:
    kind = i % 8
    if kind == 0:
      return f"{rng.choice(_ACCENTS)} {text}"
    if kind == 1:
      return f"{text} {rng.choice(_CJK)}"
    if kind == 2:
      return f"{rng.choice(_ODD)} {text} {rng.choice(_ODD)}"
    if kind == 3:
      return text.upper()
    if kind == 4:
      return " ".join([text] * 6)  # longer than any tower's length: the cut
    if kind == 5:
      return text.split()[0] if text.split() else ""
    if kind == 6:
      return ""
    return text

  # A fifth of each side varied, the rest as SQuAD has it.
  for i in range(0, nq, 5):
    queries[i] = vary(queries[i], i // 5)
  for i in range(0, nd, 5):
    title, text = documents[i]
    j = i // 5
    if j % 4 == 0:
      title = ""  # empty title
    elif j % 4 == 1:
      title = vary(title, j)
    documents[i] = (title, vary(text, j + 1))
  return queries, documents


class SavedModelSide:
  """The SavedModel's signatures and the in-graph tokenizer (the reference)."""

  def __init__(self, export_dir: str, query_len: int, doc_len: int):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import tensorflow_text  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    from twotower.core import contracts  # pylint: disable=import-outside-toplevel
    from twotower.model import tokenizer  # pylint: disable=import-outside-toplevel
    self.tf = tf
    self.model = tf.saved_model.load(os.path.join(export_dir, contracts.SAVED_MODEL_DIR))
    self.tokenizer = tokenizer.Tokenizer.from_file(
        os.path.join(export_dir, contracts.VOCAB_FILE), query_len, doc_len)
    self.query_fn = self.model.signatures[contracts.QUERY_SIGNATURE]
    self.doc_fn = self.model.signatures[contracts.DOC_SIGNATURE]

  @staticmethod
  def _unpad(packed) -> list[list[int]]:
    ids, mask = packed["token_ids"].numpy(), packed["padding_mask"].numpy()
    return [row[m > 0].tolist() for row, m in zip(ids, mask)]

  def query_ids(self, queries):
    return self._unpad(self.tokenizer.queries(self.tf.constant(queries)))

  def doc_ids(self, docs):
    titles, texts = zip(*docs)
    return self._unpad(self.tokenizer.docs(self.tf.constant(titles), self.tf.constant(texts)))

  def queries(self, queries, batch=256):
    return np.concatenate([self.query_fn(query=self.tf.constant(queries[i:i + batch]))
                           ["embedding"].numpy() for i in range(0, len(queries), batch)])

  def docs(self, docs, batch=256):
    out = []
    for i in range(0, len(docs), batch):
      titles, texts = zip(*docs[i:i + batch])
      out.append(self.doc_fn(title=self.tf.constant(titles),
                             text=self.tf.constant(texts))["embedding"].numpy())
    return np.concatenate(out)


class SentenceTransformerSide:
  def __init__(self, folder: str):
    from sentence_transformers import SentenceTransformer  # pylint: disable=import-outside-toplevel
    self.model = SentenceTransformer(folder, device="cpu", local_files_only=True)

  def ids(self, texts, task):
    features = self.model.preprocess(texts, task=task)
    return [row[m > 0].tolist() for row, m in
            zip(features["input_ids"].numpy(), features["attention_mask"].numpy())]

  def queries(self, queries, batch=256):
    return self.model.encode_query(queries, batch_size=batch, convert_to_numpy=True)

  def docs(self, docs, batch=256):
    from twotower.model import onnx_encoder  # pylint: disable=import-outside-toplevel
    return self.model.encode_document([onnx_encoder.document_string(t, x) for t, x in docs],
                                      batch_size=batch, convert_to_numpy=True)


def compare(reference: np.ndarray, other: np.ndarray) -> dict:
  diff = np.abs(reference.astype(np.float64) - other.astype(np.float64))
  ref_norm = np.linalg.norm(reference, axis=1)
  other_norm = np.linalg.norm(other, axis=1)
  cos = np.sum(reference * other, axis=1) / np.maximum(ref_norm * other_norm, 1e-30)
  return {"max_abs": float(diff.max()), "min_cos": float(cos.min()),
          "max_norm_ratio_dev": float(np.max(np.abs(other_norm / np.maximum(ref_norm, 1e-30)
                                                      - 1.0))),
          "ref_max_abs_value": float(np.abs(reference).max())}


def same_ids(a: list[list[int]], b: list[list[int]]) -> int:
  return sum(1 for x, y in zip(a, b) if x == y)


def recall(question_emb, candidate_emb, candidate_ids, questions, ks=(1, 10, 100)) -> dict:
  from twotower.core import metrics  # pylint: disable=import-outside-toplevel
  scores = question_emb @ candidate_emb.T
  depth = max(ks)
  top = np.argpartition(-scores, depth - 1, axis=1)[:, :depth]
  order = np.take_along_axis(scores, top, axis=1).argsort(axis=1)[:, ::-1]
  top = np.take_along_axis(top, order, axis=1)
  run = {q.question_id: [int(candidate_ids[j]) for j in row] for q, row in zip(questions, top)}
  result, _ = metrics.evaluate_run(run, questions, ks=ks)
  return {f"R@{k}": 100.0 * result[f"R@{k}"] for k in ks}


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--run", required=True, help="a trained run (or its export/ dir)")
  p.add_argument("--squad", default=str(SQUAD), help="SQuAD JSON the texts come from")
  p.add_argument("--texts", type=int, default=10000, help="queries + documents compared")
  p.add_argument("--reqa", default="", help="a ReQA dir: also Recall@k on --split")
  p.add_argument("--split", default="test-5")
  p.add_argument("--out", default="", help="export here (default: a temporary folder)")
  args = p.parse_args(argv)
  os.environ.setdefault("HF_HUB_OFFLINE", "1")
  from twotower.core import logs  # pylint: disable=import-outside-toplevel
  from twotower.model import export_hf, hf_run  # pylint: disable=import-outside-toplevel
  from twotower.model import onnx_encoder  # pylint: disable=import-outside-toplevel
  logs.setup(verbose=False)
  logging.getLogger("sentence_transformers").setLevel(logging.WARNING)
  tmp = tempfile.TemporaryDirectory()
  out = args.out or os.path.join(tmp.name, "hf")
  t0 = time.time()
  exported = export_hf.run(export_hf.ExportHfConfig(run=args.run, out=out, overwrite=True))
  export_seconds = time.time() - t0
  spec_export = hf_run.resolve_export_dir(args.run)
  import yaml  # pylint: disable=import-outside-toplevel
  cfg = yaml.safe_load(open(os.path.join(spec_export, "config.yaml"), encoding="utf-8"))["model"]
  queries, docs = build_texts(args.squad, args.texts)
  saved = SavedModelSide(spec_export, cfg["query_len"], cfg["doc_len"])
  st = SentenceTransformerSide(out)
  onnx_q = onnx_encoder.OnnxTower(os.path.join(out, export_hf.ONNX_TOWERS_DIR, "query"))
  onnx_d = onnx_encoder.OnnxTower(os.path.join(out, export_hf.ONNX_TOWERS_DIR, "document"))
  doc_strings = [onnx_encoder.document_string(t, x) for t, x in docs]

  rows = []
  ref_q, ref_d = saved.query_ids(queries), saved.doc_ids(docs)
  rows.append(("query", "token ids", "tokenizer.json (tokenizers)",
               f"{same_ids(ref_q, onnx_q.token_ids(queries))} / {len(queries)} identical"))
  rows.append(("query", "token ids", "sentence-transformers",
               f"{same_ids(ref_q, st.ids(queries, 'query'))} / {len(queries)} identical"))
  rows.append(("document", "token ids", "tokenizer.json (tokenizers)",
               f"{same_ids(ref_d, onnx_d.token_ids(doc_strings))} / {len(docs)} identical"))
  rows.append(("document", "token ids", "sentence-transformers",
               f"{same_ids(ref_d, st.ids(doc_strings, 'document'))} / {len(docs)} identical"))
  timings = {}
  embeddings = {}
  for side, name, fn_q, fn_d in (
      ("SavedModel", "SavedModel (TF)", saved.queries, saved.docs),
      ("st", "sentence-transformers", st.queries, st.docs),
      ("onnx", "ONNX (onnxruntime)", onnx_q.encode, lambda d: onnx_d.encode(doc_strings))):
    t = time.time()
    eq = fn_q(queries)
    tq = time.time() - t
    t = time.time()
    ed = fn_d(docs)
    timings[name] = (tq, time.time() - t)
    embeddings[side] = (eq, ed)
  for side, name in (("st", "sentence-transformers"), ("onnx", "ONNX (onnxruntime)")):
    for i, tower in enumerate(("query", "document")):
      c = compare(embeddings["SavedModel"][i], embeddings[side][i])
      rows.append((tower, "embedding", name,
                   f"max abs {c['max_abs']:.2e}, min cosine {c['min_cos']:.8f}, norm ratio "
                   f"within {c['max_norm_ratio_dev']:.1e} (largest abs value "
                   f"{c['ref_max_abs_value']:.3f})"))

  print(f"export-hf of {args.run} ({exported.towers} towers; query_len {cfg['query_len']}, doc_len {cfg['doc_len']}), exported in "
        f"{export_seconds:.1f} s; {len(queries)} queries + {len(docs)} documents from "
        f"{args.squad}\n")
  print("| tower | what | against the SavedModel | result |\n|---|---|---|---|")
  for r in rows:
    print("| " + " | ".join(r) + " |")
  print("\n| system | queries/s | documents/s |\n|---|---:|---:|")
  for name, (tq, td) in timings.items():
    print(f"| {name} | {len(queries) / tq:,.0f} | {len(docs) / td:,.0f} |")

  if args.reqa:
    from twotower.core import tower_text as texts_lib  # pylint: disable=import-outside-toplevel
    from twotower.core.contracts import codecs  # pylint: disable=import-outside-toplevel
    candidates = codecs.read_candidates(args.reqa, ["candidate_id", "sentence", "passage", "title"])
    questions = codecs.read_questions(args.reqa, args.split)
    cand_docs = [(c["title"] or "", texts_lib.candidate_doc_text(c["sentence"], c["passage"]))
                 for c in candidates]
    cand_ids = np.array([int(c["candidate_id"]) for c in candidates])
    qtexts = [q.question for q in questions]
    print(f"\nRecall@k (%), {args.reqa} {args.split}: {len(questions)} questions over "
          f"{len(candidates)} candidates, flat inner product\n")
    print("| system | R@1 | R@10 | R@100 | identical top-100 lists |\n|---|---:|---:|---:|---:|")
    results, tops = {}, {}
    for name, fn_q, fn_d in (
        ("SavedModel (TF)", saved.queries, saved.docs),
        ("sentence-transformers", st.queries, st.docs),
        ("ONNX (onnxruntime)", onnx_q.encode,
         lambda d: onnx_d.encode([onnx_encoder.document_string(t, x) for t, x in d]))):
      qe, de = fn_q(qtexts), fn_d(cand_docs)
      results[name] = recall(qe, de, cand_ids, questions)
      scores = qe @ de.T
      tops[name] = np.argsort(-scores, axis=1, kind="stable")[:, :100]
    for name, r in results.items():
      same = int(np.sum(np.all(tops[name] == tops["SavedModel (TF)"], axis=1)))
      print(f"| {name} | {r['R@1']:.2f} | {r['R@10']:.2f} | {r['R@100']:.2f} | "
            f"{same} / {len(questions)} |")
  tmp.cleanup()


if __name__ == "__main__":
  main()
