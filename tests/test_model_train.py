"""End to end on tiny data: `twotower pretrain` (resume after SIGKILL, export round trip in a
process that imports only TensorFlow + tensorflow_text), `twotower finetune` from a
pre-training run, from an MLM run and from random weights, with validation Recall@k."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from twotower import contracts, texts
from twotower.model import finetune, pretrain, testing, train

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  root = tmp_path_factory.mktemp("model_train")
  testing.write_vocab(str(root / "vocab.txt"))
  for task in ("ict", "bfs"):
    testing.write_pairs(str(root), task, "train", testing.synthetic_pairs(64, task=task))
    testing.write_pairs(str(root), task, "heldout", testing.synthetic_pairs(16, seed=5, task=task))
  return root


def _pretrain_args(root, out, *extra):
  return ["--config", "tiny", "--pairs", str(root), "--vocab", str(root / "vocab.txt"),
          "--out", str(out), "--verbose", "0", *extra]


@pytest.fixture(scope="module")
def pretrained(workdir):
  out = workdir / "pre"
  pretrain.run(_pretrain_args(workdir, out, "--tasks", "ict,bfs", "--steps", "10"))
  return out


def test_pretrain_writes_checkpoints_logs_history_and_export(pretrained):
  assert tf.train.latest_checkpoint(str(pretrained / "checkpoints")).endswith("ckpt-10")
  history = pd.read_csv(pretrained / "history.csv")
  assert {"loss", "in_batch_accuracy", "val_loss", "val_in_batch_accuracy"} <= set(history)
  assert len(history) == 2  # tiny: checkpoint_every=5
  assert os.listdir(pretrained / "logs")
  assert "tasks:\n  - ict\n  - bfs" in (pretrained / "config.yaml").read_text()
  for name in ("saved_model", "two_tower.keras", "vocab.txt", "config.yaml"):
    assert (pretrained / "export" / name).exists(), name


_CONSUMER = textwrap.dedent("""
    import json, sys
    import numpy as np, tensorflow as tf
    import tensorflow_text  # registers the tokenizer's custom ops; nothing of twotower
    m = tf.saved_model.load(sys.argv[1])
    q = m.signatures["query_encoder"](query=tf.constant(json.loads(sys.argv[2])))
    d = m.signatures["doc_encoder"](title=tf.constant(json.loads(sys.argv[3])),
                                    text=tf.constant(json.loads(sys.argv[4])))
    assert not any(k.startswith("twotower") for k in sys.modules), "imported our code"
    np.save(sys.argv[5], q["embedding"].numpy()); np.save(sys.argv[6], d["embedding"].numpy())
""")


def test_export_round_trip_in_a_fresh_process(pretrained, tmp_path):
  import keras
  from twotower.model.tokenizer import Tokenizer
  queries = ["who wrote the cat", "w1 w2 w3", "Ünïcode PARIS?"]
  titles = ["title w1", "", "paris"]
  bodies = ["the cat sat on the mat . " * 20, "w4 w5", "river city king"]
  out = subprocess.run(
      [sys.executable, "-c", _CONSUMER, str(pretrained / "export" / "saved_model"),
       json.dumps(queries), json.dumps(titles), json.dumps(bodies),
       str(tmp_path / "q.npy"), str(tmp_path / "d.npy")],
      capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
  assert out.returncode == 0, out.stderr[-3000:]
  q_saved, d_saved = np.load(tmp_path / "q.npy"), np.load(tmp_path / "d.npy")
  model = keras.saving.load_model(str(pretrained / "export" / "two_tower.keras"))
  tok = Tokenizer.from_file(str(pretrained / "export" / "vocab.txt"), 12, 24)
  q_keras = model.query_tower(tok.queries(tf.constant(queries))).numpy()
  d_keras = model.doc_tower(tok.docs(tf.constant(titles), tf.constant(bodies))).numpy()
  assert q_saved.shape == (3, 16) and d_saved.shape == (3, 16) and q_saved.dtype == np.float32
  np.testing.assert_allclose(q_saved, q_keras, atol=1e-5)
  np.testing.assert_allclose(d_saved, d_keras, atol=1e-5)
  assert np.abs(q_saved[0] - q_saved[1]).max() > 1e-4  # different inputs, different outputs


@pytest.mark.slow
def test_resume_after_sigkill_continues_from_the_last_checkpoint(workdir):
  out = workdir / "resume"
  cmd = [sys.executable, "-m", "twotower.model.pretrain",
         *_pretrain_args(workdir, out, "--tasks", "ict", "--steps", "400", "--no_export",
                         "--set", "trainer.checkpoint_every=10", "--set", "trainer.eval_steps=0")]
  proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  ckpts = str(out / "checkpoints")
  deadline = time.time() + 240
  latest = None
  while time.time() < deadline and proc.poll() is None:
    latest = tf.train.latest_checkpoint(ckpts) if os.path.isdir(ckpts) else None
    if latest and int(latest.rsplit("-", 1)[1]) >= 20:
      break
    time.sleep(0.5)
  assert proc.poll() is None, "training ended before it could be killed"
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  killed_at = int(tf.train.latest_checkpoint(ckpts).rsplit("-", 1)[1])
  assert 20 <= killed_at < 400
  again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
  assert again.returncode == 0, again.stderr[-3000:]
  assert f"RESUME: restored {ckpts}/ckpt-{killed_at} (step {killed_at})" in again.stderr
  assert tf.train.latest_checkpoint(ckpts).endswith("ckpt-400")
  # The second run's first epoch starts after the checkpoint, not at step 0.
  assert f"Epoch {killed_at // 10 + 1}/40" in again.stdout or "Epoch 1/40" not in again.stdout


@pytest.fixture(scope="module")
def reqa_dir(workdir):
  """A tiny ReQA dir: candidates, validation questions, fine-tuning pairs (pair schema)."""
  root = workdir / "reqa"
  rng = np.random.default_rng(0)
  words = [f"w{i}" for i in range(200)]
  sentences = [" ".join(rng.choice(words, 8)) for _ in range(30)]
  cands = pd.DataFrame({"candidate_id": np.arange(30, dtype=np.int64), "sentence": sentences,
                        "passage": [s + " w1 w2" for s in sentences],
                        "title": [f"title w{i}" for i in range(30)], "source": "test"})
  os.makedirs(root / "finetune")
  cands.to_parquet(root / contracts.CANDIDATES_FILE)
  qs = pd.DataFrame({"question_id": [f"q{i}" for i in range(10)],
                     "question": [" ".join(s.split()[:4]) for s in sentences[:10]],
                     "gold_candidate_ids": [[i] for i in range(10)]})
  qs.to_parquet(root / contracts.questions_file("validation-5"))
  pairs = [{"task": contracts.REQA_TASK, "query": " ".join(s.split()[2:6]), "doc_title": t,
            "doc_text": texts.candidate_doc_text(s, p), "query_page_id": i, "doc_page_id": i,
            "doc_passage_id": i}
           for i, (s, p, t) in enumerate(zip(sentences, cands.passage, cands.title))]
  with tf.io.TFRecordWriter(str(root / "finetune" / "train-5-00000-of-00001.tfrecord")) as w:
    for p in pairs:
      w.write(testing.pair_example(p))
  return root


def _finetune_args(workdir, reqa_dir, out, init):
  return ["--config", "tiny", "--reqa", str(reqa_dir), "--split", "5", "--vocab",
          str(workdir / "vocab.txt"), "--out", str(out), "--init", init, "--verbose", "0",
          "--no_export"]


def test_finetune_from_pretraining_restores_towers_and_reports_recall(
    workdir, reqa_dir, pretrained, caplog):
  out = workdir / "ft"
  with caplog.at_level(logging.INFO):
    finetune.run(_finetune_args(workdir, reqa_dir, out, str(pretrained)))
  assert "INIT: restored query_tower + doc_tower" in caplog.text
  history = pd.read_csv(out / "history.csv")
  for k in (1, 5, 10):
    assert f"val_R@{k}" in history and 0.0 <= history[f"val_R@{k}"].iloc[-1] <= 1.0
  assert "val_R@50" not in history  # only 30 candidates
  assert history["val_R@10"].iloc[-1] >= history["val_R@1"].iloc[-1]


def test_init_towers_restores_every_variable_of_the_pretrained_towers(workdir, pretrained):
  # The training checkpoint (model + optimizer) also names each trainable variable by its
  # index in model.trainable_variables (optimizer/_trainable_variables/N): the reference values,
  # independent of the model path that --init restores through. Every tower variable must
  # come back, the Transformer blocks included (a Keras-tracked list of blocks once hid them
  # from tf.train.Checkpoint, and fine-tuning silently started from random blocks).
  from twotower.model import config
  from twotower.model.tokenizer import Tokenizer
  from twotower.model.two_tower import build_two_tower
  cfg = config.load("tiny")
  vocab_size = Tokenizer.from_file(str(workdir / "vocab.txt"), cfg.model.query_len,
                                   cfg.model.doc_len).vocab_size
  model = build_two_tower(cfg.model, vocab_size, cfg.trainer.temperature)
  train.init_towers(model, str(pretrained))
  reader = tf.train.load_checkpoint(train.resolve_checkpoint(str(pretrained)))
  towers = {id(v) for v in model.query_tower.weights + model.doc_tower.weights}
  checked = 0
  for i, v in enumerate(model.trainable_variables):
    if id(v) in towers:
      saved = reader.get_tensor(f"optimizer/_trainable_variables/{i}/.ATTRIBUTES/VARIABLE_VALUE")
      np.testing.assert_array_equal(v.numpy(), saved, err_msg=v.path)
      checked += 1
  assert checked == len(towers)
  assert any("transformer_layer" in v.path for v in model.query_tower.weights)


@pytest.mark.slow
def test_mlm_then_towers_start_from_the_mlm_backbone(workdir, reqa_dir, caplog):
  mlm_out = workdir / "mlm"
  pretrain.run(_pretrain_args(workdir, mlm_out, "--tasks", "mlm", "--steps", "5"))
  history = pd.read_csv(mlm_out / "history.csv")
  assert "mlm_accuracy" in history and np.isfinite(history["loss"]).all()
  out = workdir / "ft-mlm"
  with caplog.at_level(logging.INFO):
    finetune.run(_finetune_args(workdir, reqa_dir, out, str(mlm_out)) + ["--steps", "5"])
  assert "INIT: restored the MLM backbone" in caplog.text
  # Both towers' backbones equal the MLM backbone right after initialisation.
  from twotower.model import config
  from twotower.model.two_tower import build_two_tower
  cfg = config.load("tiny")
  model = build_two_tower(cfg.model, 226)
  train.init_towers(model, str(mlm_out))
  from twotower.model.encoders import TransformerBackbone
  from twotower.model.two_tower import MlmModel
  m = cfg.model
  mlm = MlmModel(TransformerBackbone(226, max(m.query_len, m.doc_len), m.num_layers,
                                     m.hidden_dim, m.num_heads, m.intermediate_dim, m.dropout,
                                     name="backbone"))
  mlm.build_from_lengths(m.doc_len, cfg.data.mlm_predictions(m.doc_len))
  tf.train.Checkpoint(model=mlm).restore(
      tf.train.latest_checkpoint(str(mlm_out / "checkpoints"))).expect_partial()
  saved = mlm.backbone.token_embedding.embeddings.numpy()
  for tower in (model.query_tower, model.doc_tower):
    np.testing.assert_array_equal(tower.backbone.token_embedding.embeddings.numpy(), saved)
  assert np.abs(model.query_tower.projection.kernel.numpy()).max() > 0


def test_finetune_without_init_is_refused(workdir, reqa_dir):
  with pytest.raises(ValueError, match="--init is required"):
    finetune.run(["--config", "tiny", "--reqa", str(reqa_dir), "--vocab",
                  str(workdir / "vocab.txt"), "--out", str(workdir / "x")])


@pytest.mark.slow
def test_multi_worker_runs_the_custom_loop_and_checkpoints(workdir):
  # One-worker TF_CONFIG: MultiWorkerMirroredStrategy without Keras fit (keras#20585).
  out = workdir / "mw"
  env = dict(os.environ, TF_CONFIG=json.dumps(
      {"cluster": {"worker": ["localhost:23917"]}, "task": {"type": "worker", "index": 0}}))
  cmd = [sys.executable, "-m", "twotower.model.pretrain",
         *_pretrain_args(workdir, out, "--tasks", "ict", "--steps", "10", "--no_export",
                         "--strategy", "multi_worker")]
  done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "epoch 2/2 step 10" in done.stderr
  assert tf.train.latest_checkpoint(str(out / "checkpoints")).endswith("ckpt-10")
