"""A run trained on JAX is an ordinary run (issue 64): `twotower pretrain --backend jax` writes
the run folder a TensorFlow run writes, export/saved_model included; TensorFlow fine-tuning
starts from its checkpoint (the towers restored exactly: fine-tuned for 0 steps they embed as
the JAX run's own SavedModel does); a JAX fine-tuning from it goes through `embed`, `bundle`
and `query` as any run does."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

from twotower import cli
from twotower.core import contracts
from twotower.core.contracts import codecs
from twotower.pipelines.reqa import builder as reqa
from twotower.testing import pairs as testing
from twotower.testing import squad

pytestmark = pytest.mark.slow  # three JAX processes, a Beam job, FAISS and Lucene

TEXTS = ["w1 w2 the cat", "who wrote w3?", "w4 w5 w6 w7"]


def _cli(args: list[str]) -> None:
  assert cli.main(args + ["--progress", "none"] if args[0] in ("pretrain", "finetune")
                  else args) == 0, args


def _query_embeddings(run: str) -> np.ndarray:
  model = tf.saved_model.load(contracts.saved_model_path(run))
  return model.signatures[contracts.QUERY_SIGNATURE](query=tf.constant(TEXTS))["embedding"].numpy()


def test_a_jax_run_goes_through_finetune_embed_bundle_query(tmp_path):
  root = str(tmp_path)
  vocab = testing.write_vocab(os.path.join(root, "vocab.txt"))
  testing.write_pairs(root, "ict", "train", testing.synthetic_pairs(64))
  testing.write_pairs(root, "ict", "heldout", testing.synthetic_pairs(16, seed=5))
  reqa_dir = os.path.join(root, "reqa")
  reqa.run(reqa.ReqaConfig(out=reqa_dir, squad=squad.write_squad(os.path.join(root, "sq.json")),
                           ratios=(80,)))
  pre, ft_tf, ft_jax = (os.path.join(root, name) for name in ("pre", "ft-tf", "ft-jax"))
  common = ["--config", "tiny", "--vocab", vocab]

  _cli(["pretrain", "--backend", "jax", *common, "--steps", "10", "--pairs", root,
        "--out", pre])
  assert sorted(os.listdir(contracts.export_dir(pre))) == [
      contracts.RUN_CONFIG_FILE, contracts.SAVED_MODEL_DIR, contracts.KERAS_FILE,
      contracts.VOCAB_FILE]

  # TensorFlow fine-tuning from the JAX run: 0 steps exports the towers it restored.
  _cli(["finetune", *common, "--init", pre, "--reqa", reqa_dir, "--split", "80",
        "--steps", "0", "--allow_untrained", "--no_recall", "--out", ft_tf])
  np.testing.assert_allclose(_query_embeddings(ft_tf), _query_embeddings(pre), atol=1e-6)

  _cli(["finetune", "--backend", "jax", *common, "--init", pre, "--reqa", reqa_dir,
        "--split", "80", "--steps", "10", "--select", "R@10", "--out", ft_jax])
  history = open(contracts.history_path(ft_jax), encoding="utf-8").read()
  assert "val_R@10" in history.splitlines()[0]
  assert not np.allclose(_query_embeddings(ft_jax), _query_embeddings(pre), atol=1e-4)

  emb, bundle = os.path.join(root, "emb"), os.path.join(root, "bundle")
  _cli(["embed", "--model", ft_jax, "--candidates", contracts.candidates_path(reqa_dir),
        "--out", emb])
  _cli(["bundle", "--model", ft_jax, "--reqa", reqa_dir, "--embeddings", emb, "--out", bundle,
        "--weight", "0.5"])
  queries, hits = os.path.join(root, "q.jsonl"), os.path.join(root, "hits.jsonl")
  questions = codecs.read_questions(reqa_dir, "test-80")[:3]
  with open(queries, "w", encoding="utf-8") as f:
    for q in questions:
      f.write(json.dumps({"id": q.question_id, "query": q.question}) + "\n")
  _cli(["query", bundle, "--jsonl", queries, "--out", hits, "--k", "5"])
  candidates = {c["candidate_id"] for c in codecs.read_candidates(reqa_dir, ["candidate_id"])}
  lines = [json.loads(line) for line in open(hits, encoding="utf-8")]
  assert [line["id"] for line in lines] == [q.question_id for q in questions]
  for line in lines:
    assert len(line["hits"]) == 5 and {h["id"] for h in line["hits"]} <= candidates
    scores = [h["score"] for h in line["hits"]]
    assert scores == sorted(scores, reverse=True)
