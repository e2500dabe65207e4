"""End to end on tiny data through the typed jobs: `pretrain.run(PretrainConfig)` (history,
export round trip in a process that imports only TensorFlow + tensorflow_text, resume after
SIGKILL through `python -m`), `finetune.run(FinetuneConfig)` from a pre-training run, from an
MLM run and from random weights, with validation Recall@k choosing the exported checkpoint
(never reading the test split)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from twotower import cli
from twotower.core import contracts, tower_text as texts
from twotower.core.contracts import Pair, codecs
from twotower.model import config, finetune, pretrain, train
from twotower.testing import pairs as testing

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  root = tmp_path_factory.mktemp("model_train")
  testing.write_vocab(str(root / "vocab.txt"))
  for task in ("ict", "bfs"):
    testing.write_pairs(str(root), task, "train", testing.synthetic_pairs(64, task=task))
    testing.write_pairs(str(root), task, "heldout", testing.synthetic_pairs(16, seed=5, task=task))
  return root


def pretrain_job(root, out, tasks="ict", steps=10, *overrides, **fields) -> pretrain.PretrainConfig:
  cfg = config.load("tiny", [f"data.tasks={tasks}", f"trainer.steps={steps}", *overrides])
  return pretrain.PretrainConfig(training=cfg, out=str(out), vocab=str(root / "vocab.txt"),
                              pairs=str(root), progress="none", **fields)


@pytest.fixture(scope="module")
def pretrained(workdir):
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    result = pretrain.run(pretrain_job(workdir, workdir / "pre", "ict,bfs"))
  shuffle_warnings = [w for w in caught if "`shuffle=True` was passed" in str(w.message)]
  return result, shuffle_warnings


def test_pretrain_returns_its_history_and_writes_checkpoints_logs_and_export(workdir, pretrained):
  result, shuffle_warnings = pretrained
  out = workdir / "pre"
  assert result.out == str(out) and result.steps == 10 and result.seconds > 0
  assert result.history["step"] == [5.0, 10.0]  # tiny: checkpoint_every=5
  assert {"loss", "in_batch_accuracy", "val_loss", "val_in_batch_accuracy"} <= set(result.history)
  assert result.saved_model == contracts.saved_model_path(str(out))
  assert result.selected_step == 10 and result.select == ""
  assert tf.train.latest_checkpoint(contracts.checkpoint_dir(str(out))).endswith("ckpt-10")
  on_disk = pd.read_csv(contracts.history_path(str(out)))
  assert on_disk["step"].tolist() == [5, 10]
  np.testing.assert_allclose(on_disk["loss"], result.history["loss"])
  assert os.listdir(out / contracts.LOG_DIR)
  assert "tasks:\n  - ict\n  - bfs" in (out / contracts.RUN_CONFIG_FILE).read_text()
  for name in (contracts.SAVED_MODEL_DIR, contracts.KERAS_FILE, contracts.VOCAB_FILE,
               contracts.RUN_CONFIG_FILE):
    assert (out / contracts.EXPORT_DIR / name).exists(), name
  assert shuffle_warnings == []  # Keras's "shuffle=True ... will be ignored" is silenced


def test_curves_plot_a_result_and_a_run_dir(workdir, pretrained, tmp_path, capsys):
  from twotower.model import curves
  result = pretrained[0]
  png = curves.plot({"ICT+BFS": curves.Curve(result.history, 8)}, str(tmp_path / "a.png"))
  assert os.path.getsize(png) > 1000
  assert cli.main(["curves", "--run", f"ICT+BFS={result.out}", "--out",
                   str(tmp_path / "b.png")]) == 0
  assert capsys.readouterr().out.strip() == str(tmp_path / "b.png")
  assert curves.load(result.out).history["step"] == result.history["step"]
  assert cli.main(["curves", "--run", result.out, "--out", str(tmp_path / "c.png")]) == 2


def test_curves_table_gives_the_histories_numbers(tmp_path):
  """The table a page quotes is the runs' own numbers, at the steps asked for."""
  from twotower.model import curves
  runs = {"ICT": curves.Curve({"step": [100, 200, 300, 400],
                               "val_in_batch_accuracy": [0.1, 0.25, 0.3, 0.3125]}, 64),
          "BFS": curves.Curve({"step": [200, 400], "val_in_batch_accuracy": [0.05, 0.0625]}, 64)}
  assert curves.table(runs, every=200).splitlines() == [
      "| val_in_batch_accuracy at step | 200 | 400 |", "|---|---:|---:|",
      "| ICT | 0.250 | 0.312 |", "| BFS | 0.050 | 0.062 |"]
  full = curves.table(runs)
  assert "| BFS |  | 0.050 |  | 0.062 |" in full  # no checkpoint at 100 and 300: blank
  recall = {"80 %": curves.Curve({"step": [50], "val_R@100": [0.6912]}, 64)}
  assert "| 80 % | 69.1 |" in curves.table(recall)


def test_run_takes_a_job_not_argv():
  with pytest.raises(TypeError, match="takes a PretrainConfig"):
    pretrain.run(["--config", "tiny"])


def test_a_finished_job_run_again_trains_nothing_and_returns_the_whole_history(
    workdir, pretrained):
  again = pretrain.run(pretrain_job(workdir, workdir / "pre", "ict,bfs", export=False))
  assert again.steps == 10 and again.saved_model is None
  assert again.history == pretrained[0].history


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
  result = pretrained[0]
  queries = ["who wrote the cat", "w1 w2 w3", "Ünïcode PARIS?"]
  titles = ["title w1", "", "paris"]
  bodies = ["the cat sat on the mat . " * 20, "w4 w5", "river city king"]
  out = subprocess.run(
      [sys.executable, "-c", _CONSUMER, result.saved_model,
       json.dumps(queries), json.dumps(titles), json.dumps(bodies),
       str(tmp_path / "q.npy"), str(tmp_path / "d.npy")],
      capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
  assert out.returncode == 0, out.stderr[-3000:]
  q_saved, d_saved = np.load(tmp_path / "q.npy"), np.load(tmp_path / "d.npy")
  export = os.path.join(result.out, contracts.EXPORT_DIR)
  model = keras.saving.load_model(os.path.join(export, contracts.KERAS_FILE))
  tok = Tokenizer.from_file(os.path.join(export, contracts.VOCAB_FILE), 12, 24)
  q_keras = model.query_tower(tok.queries(tf.constant(queries))).numpy()
  d_keras = model.doc_tower(tok.docs(tf.constant(titles), tf.constant(bodies))).numpy()
  assert q_saved.shape == (3, 16) and d_saved.shape == (3, 16) and q_saved.dtype == np.float32
  np.testing.assert_allclose(q_saved, q_keras, atol=1e-5)
  np.testing.assert_allclose(d_saved, d_keras, atol=1e-5)
  assert np.abs(q_saved[0] - q_saved[1]).max() > 1e-4  # different inputs, different outputs


def _pretrain_argv(root, out, *extra):
  return ["--config", "tiny", "--pairs", str(root), "--vocab", str(root / "vocab.txt"),
          "--out", str(out), *extra]


@pytest.mark.slow
def test_resume_after_sigkill_continues_from_the_last_checkpoint(workdir):
  out = workdir / "resume"
  cmd = [sys.executable, "-m", "twotower.model.pretrain",
         *_pretrain_argv(workdir, out, "--tasks", "ict", "--steps", "400", "--no_export",
                         "--progress", "epoch", "--set", "trainer.checkpoint_every=10",
                         "--set", "trainer.eval_steps=0")]
  proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  ckpts = contracts.checkpoint_dir(str(out))
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
  # The second run's first checkpoint comes after the restored one, not at step 10 ...
  assert f"step {killed_at + 10}/400:" in again.stderr and "step 10/400:" not in again.stderr
  # ... and history.csv holds each checkpoint of the whole run once.
  steps = pd.read_csv(contracts.history_path(str(out)))["step"].tolist()
  assert steps[-1] == 400 and steps == sorted(set(steps)) and killed_at in steps
  assert "steps" in again.stdout and "400" in again.stdout  # the result table


class _Killed(Exception):
  """Stands for a SIGKILL at one point of a checkpoint's callbacks."""


@pytest.mark.parametrize("saved_first", [True, False], ids=["after-save", "before-save"])
def test_a_run_killed_at_a_checkpoint_resumes_with_each_checkpoints_history_row_once(
    workdir, tmp_path, monkeypatch, saved_first):
  """Killed just after the checkpoint at step 10 was saved, history.csv already has its row
  (CI once killed a run between the two and lost the row); killed just before, the row past
  the last checkpoint is dropped on resume and written again when step 10 is re-trained."""
  from twotower.model import loop
  out = tmp_path / "killed"
  real_save = loop.SaveCheckpoint.on_epoch_end

  def save_and_die(self, epoch, logs=None):
    if loop._step(self.model) == 10:
      if saved_first:
        real_save(self, epoch, logs)
      raise _Killed
    real_save(self, epoch, logs)

  monkeypatch.setattr(loop.SaveCheckpoint, "on_epoch_end", save_and_die)
  with pytest.raises(_Killed):
    pretrain.run(pretrain_job(workdir, out, "ict", 15))
  ckpts = contracts.checkpoint_dir(str(out))
  assert tf.train.latest_checkpoint(ckpts).endswith("ckpt-10" if saved_first else "ckpt-5")
  assert pd.read_csv(contracts.history_path(str(out)))["step"].tolist() == [5, 10]
  monkeypatch.undo()
  result = pretrain.run(pretrain_job(workdir, out, "ict", 15))
  assert result.history["step"] == [5.0, 10.0, 15.0]
  assert pd.read_csv(contracts.history_path(str(out)))["step"].tolist() == [5, 10, 15]


@pytest.fixture(scope="module")
def reqa_dir(workdir):
  """A tiny ReQA dir: candidates, validation questions, fine-tuning pairs (pair schema),
  and a test split that is not a Parquet file: reading it would fail."""
  root = workdir / "reqa"
  rng = np.random.default_rng(0)
  words = [f"w{i}" for i in range(200)]
  sentences = [" ".join(rng.choice(words, 8)) for _ in range(30)]
  cands = pd.DataFrame({"candidate_id": np.arange(30, dtype=np.int64), "sentence": sentences,
                        "passage": [s + " w1 w2" for s in sentences],
                        "title": [f"title w{i}" for i in range(30)], "source": "test"})
  root.mkdir()
  cands.to_parquet(contracts.candidates_path(str(root)))
  qs = pd.DataFrame({"question_id": [f"q{i}" for i in range(10)],
                     "question": [" ".join(s.split()[:4]) for s in sentences[:10]],
                     "gold_candidate_ids": [[i] for i in range(10)]})
  qs.to_parquet(contracts.questions_path(str(root), "validation-5"))
  (root / contracts.questions_file("test-5")).write_bytes(b"never read the test split")
  pairs = [Pair(task=contracts.REQA_TASK, query=" ".join(s.split()[2:6]), doc_title=t,
                doc_text=texts.candidate_doc_text(s, p), query_page_id=i, doc_page_id=i,
                doc_passage_id=i)
           for i, (s, p, t) in enumerate(zip(sentences, cands.passage, cands.title))]
  contracts.codecs.write_pairs(contracts.finetune_prefix(str(root), "train-5"), pairs)
  return root


def finetune_job(workdir, reqa_dir, out, init, *overrides, **fields) -> finetune.FinetuneConfig:
  return finetune.FinetuneConfig(training=config.load("tiny", list(overrides)), out=str(out),
                              vocab=str(workdir / "vocab.txt"), init=init, reqa=str(reqa_dir),
                              split="5", progress="none", **fields)


def test_finetune_exports_the_best_validation_checkpoint(workdir, reqa_dir, pretrained, caplog):
  import keras
  from twotower.model.two_tower import build_two_tower
  out = workdir / "ft"
  with caplog.at_level(logging.INFO):
    result = finetune.run(finetune_job(workdir, reqa_dir, out, pretrained[0].out,
                                       "trainer.finetune_steps=20", select="R@5"))
  assert "INIT: restored query_tower + doc_tower" in caplog.text
  history = result.history
  assert history["step"] == [5.0, 10.0, 15.0, 20.0]
  for k in (1, 5, 10):
    assert all(0.0 <= v <= 1.0 for v in history[f"val_R@{k}"])
  assert "val_R@50" not in history and "val_MRR" in history  # only 30 candidates
  assert all(a <= b for a, b in zip(history["val_R@1"], history["val_R@10"]))
  # The exported step is the first best of the validation curve ...
  curve = result.curve("val_R@5")
  best = max(v for _, v in curve)
  assert result.select == "val_R@5"
  assert result.selected_step == next(s for s, v in curve if v == best)
  best_dir = contracts.best_checkpoint_dir(str(out))
  assert tf.train.latest_checkpoint(best_dir).endswith(f"ckpt-{result.selected_step}")
  # ... and the export holds that checkpoint's weights.
  cfg = config.load("tiny")
  expected = build_two_tower(cfg.model, 226)
  tf.train.Checkpoint(model=expected).restore(
      tf.train.latest_checkpoint(best_dir)).assert_existing_objects_matched()
  exported = keras.saving.load_model(
      os.path.join(out, contracts.EXPORT_DIR, contracts.KERAS_FILE))
  for a, b in zip(expected.get_weights(), exported.get_weights()):
    np.testing.assert_array_equal(a, b)
  assert "selected step" in train.summary_table(result)


def test_select_needs_a_metric_that_validation_logs(workdir, reqa_dir):
  with pytest.raises(ValueError, match=r"select='R@100': validation logs R@1, R@5, R@10, MRR"):
    finetune.run(finetune_job(workdir, reqa_dir, workdir / "ft-100", "none"))


def test_without_validation_the_last_checkpoint_is_exported(workdir, reqa_dir):
  result = finetune.run(finetune_job(workdir, reqa_dir, workdir / "ft-norecall", "none",
                                     "trainer.finetune_steps=10", validation_recall=False,
                                     export=False))
  assert result.select == "" and result.selected_step == 10
  assert not any(k.startswith("val_R@") for k in result.history)


def _known_validation_curve(monkeypatch, values):
  """RecallAtK scores the questions as always (the question ids it ranks are recorded) but
  logs `values`, one per checkpoint, as val_R@5: a curve the test knows."""
  scored, known = [], iter(values)
  ranked, recall = finetune.RecallAtK.ranked, finetune.RecallAtK.recall

  def spy_ranked(self):
    run = ranked(self)
    scored.append(sorted(run))
    return run

  monkeypatch.setattr(finetune.RecallAtK, "ranked", spy_ranked)
  monkeypatch.setattr(finetune.RecallAtK, "recall",
                      lambda self: {**recall(self), "val_R@5": next(known)})
  return scored


@pytest.mark.slow  # 45-50 s here (8 checkpoints scored; two runs)
def test_finetune_length_is_the_moving_average_rule_and_stops_after_its_patience(
    workdir, reqa_dir, pretrained, monkeypatch):
  from twotower.model import selection
  # Trailing 3-checkpoint average: .9 .55 .47 .37 .5 .6 .47 .3 ...: best at the 6th (step 30).
  # The first checkpoint's spike is one point, not a window: it is not judged (it would have
  # won, and stopped the run at step 15).
  curve = [0.9, 0.2, 0.3, 0.6, 0.6, 0.6, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1]
  scored = _known_validation_curve(monkeypatch, curve)
  out = workdir / "ft-select"
  job = finetune_job(workdir, reqa_dir, out, pretrained[0].out, "trainer.finetune_steps=60",
                     select="R@5", select_window=3, patience=2, export=False)
  result = finetune.run(job)
  steps = [int(s) for s in result.history["step"]]
  assert steps == [5, 10, 15, 20, 25, 30, 35, 40]  # stopped 2 checkpoints after the best
  assert result.history["val_R@5"] == curve[:8]
  assert result.history["val_R@5_avg3"] == pytest.approx(selection.smoothed(curve[:8], 3))
  assert result.selected_step == 30 == steps[selection.best_index(curve, 3)]
  assert result.select == "val_R@5_avg3"
  best_dir = contracts.best_checkpoint_dir(str(out))
  assert tf.train.latest_checkpoint(best_dir).endswith("ckpt-30")
  # Only the validation questions were scored, at every checkpoint; the test split (a file
  # that is not Parquet) was never read.
  validation = sorted(q.question_id for q in codecs.read_questions(str(reqa_dir),
                                                                     "validation-5"))
  assert scored == [validation] * 8
  # Run again, it has stopped: nothing trains or scores, and the choice is the same.
  again = finetune.run(job)
  assert (again.steps, again.selected_step, len(scored)) == (40, 30, 8)
  # A validation split smaller than the grid's minimum is refused, not chosen on.
  with pytest.raises(ValueError, match="validation-5 has 10 questions, fewer than the 11"):
    finetune.run(finetune_job(workdir, reqa_dir, workdir / "ft-small", "none",
                              select="R@5", min_validation_questions=11))


def test_a_carried_length_stops_the_caps_schedule_at_the_chosen_step(workdir, reqa_dir):
  import yaml
  out = workdir / "ft-stop"
  result = finetune.run(finetune_job(workdir, reqa_dir, out, "none", "trainer.finetune_steps=40",
                                     validation_recall=False, stop_at=15, export=False))
  assert result.steps == 15 and result.history["step"] == [5.0, 10.0, 15.0]
  run = yaml.safe_load((out / contracts.RUN_CONFIG_FILE).read_text())["run"]
  assert (run["steps"], run["stop_at"]) == (40, 15)  # the 40-step schedule, stopped at 15


@pytest.mark.slow  # 45-50 s here (8 checkpoints scored; two runs)
def test_grid_cells_choose_a_length_and_another_seed_carries_it(workdir, reqa_dir, pretrained,
                                                                monkeypatch):
  from twotower.experiment import cells, plan as plan_lib
  from twotower.experiment.cell_id import CellId
  from twotower.experiment.params import FinetuneParams
  scored = _known_validation_curve(monkeypatch, [0.1, 0.4, 0.5, 0.3, 0.2, 0.2])
  cfg = config.load("tiny", ["trainer.finetune_steps=30"]).to_dict()
  select = {"metric": "R@5", "window": 3, "checkpoints": 6, "patience": 2, "min_questions": 5}
  dirs = {"vocab/wiki": str(workdir), "reqa/squad": str(reqa_dir),
          "pretrain/ict/base/s0": pretrained[0].out}
  records = {}

  def run_cell(seed, config, **fields):
    deps = {"vocab": "vocab/wiki", "reqa": "reqa/squad", "init": "pretrain/ict/base/s0"}
    if "carried_from" in fields:
      deps[plan_lib.FINETUNE_LENGTH] = "finetune/squad/ict/base/r5/s0"
    cell = plan_lib.Cell(CellId("finetune", "squad", "ict", "base", 5, seed),
                         FinetuneParams(system="ict", variant="base", ratio=5, seed=seed,
                                        config=config, hard_negatives=0,
                                        doc_text=texts.DEFAULT_DOC_TEXT, **fields), deps, "k")
    out = str(workdir / f"cell-s{seed}")
    dirs[cell.name] = out
    ctx = cells.Context(work=str(workdir), dirs=dirs, done=records.__getitem__, progress="none")
    records[cell.name] = cells.EXECUTORS["finetune"](cell, ctx, out)
    return records[cell.name]

  chosen = run_cell(0, cfg, select=select)["selection"]
  # Averages .1 .25 .33 .4 .33 .23: the 4th checkpoint (step 20); 2 more, then it stops.
  assert (chosen["chosen_step"], chosen["steps_trained"], chosen["cap"]) == (20, 30, 30)
  assert chosen["steps"] == [5, 10, 15, 20, 25, 30] and chosen["validation_questions"] == 10
  assert len(scored) == 6
  carried = run_cell(1, {**cfg, "trainer": {**cfg["trainer"], "finetune_steps": 0}},
                     carried_from={"ratio": 5, "seed": 0})
  assert carried["selection"] == {"carried_from": {"ratio": 5, "seed": 0}, "source_step": 20,
                                  "source_cap": 30, "cap": 30, "chosen_step": 20}
  assert carried["history"]["step"][-1] == 20 and len(scored) == 6  # no validation scored


def test_init_towers_restores_every_variable_of_the_pretrained_towers(workdir, pretrained):
  # The training checkpoint (model + optimizer) also names each trainable variable by its
  # index in model.trainable_variables (optimizer/_trainable_variables/N): the reference values,
  # independent of the model path that --init restores through. Every tower variable must
  # come back, the Transformer blocks included (a Keras-tracked list of blocks once hid them
  # from tf.train.Checkpoint, and fine-tuning silently started from random blocks).
  from twotower.model.tokenizer import Tokenizer
  from twotower.model.two_tower import build_two_tower
  out = pretrained[0].out
  cfg = config.load("tiny")
  vocab_size = Tokenizer.from_file(str(workdir / "vocab.txt"), cfg.model.query_len,
                                   cfg.model.doc_len).vocab_size
  model = build_two_tower(cfg.model, vocab_size, cfg.trainer.temperature)
  train.init_towers(model, out)
  reader = tf.train.load_checkpoint(train.resolve_checkpoint(out))
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
  result = pretrain.run(pretrain_job(workdir, mlm_out, "mlm", 5))
  assert "mlm_accuracy" in result.history and np.isfinite(result.history["loss"]).all()
  assert result.saved_model is None  # a backbone, no towers to export
  out = workdir / "ft-mlm"
  with caplog.at_level(logging.INFO):
    finetune.run(finetune_job(workdir, reqa_dir, out, str(mlm_out), "trainer.finetune_steps=5",
                              select="R@10", export=False))
  assert "INIT: restored the MLM backbone" in caplog.text
  # Both towers' backbones equal the MLM backbone right after initialisation.
  from twotower.model import mlm
  from twotower.model.two_tower import build_two_tower
  cfg = config.load("tiny")
  model = build_two_tower(cfg.model, 226)
  train.init_towers(model, str(mlm_out))
  backbone_model = mlm.build_model(cfg, None)(226)
  tf.train.Checkpoint(model=backbone_model).restore(
      tf.train.latest_checkpoint(str(mlm_out / "checkpoints"))).expect_partial()
  saved = backbone_model.backbone.token_embedding.embeddings.numpy()
  for tower in (model.query_tower, model.doc_tower):
    np.testing.assert_array_equal(tower.backbone.token_embedding.embeddings.numpy(), saved)
  assert np.abs(model.query_tower.projection.kernel.numpy()).max() > 0


def test_mlm_refuses_init(workdir):
  with pytest.raises(ValueError, match="MLM pre-training starts from random weights"):
    pretrain.run(pretrain_job(workdir, workdir / "mlm-init", "mlm", 5, init="somewhere"))


def test_cli_finetune_without_init_is_a_usage_error(workdir, reqa_dir, capsys):
  assert cli.main(["finetune", "--config", "tiny", "--reqa", str(reqa_dir), "--vocab",
                   str(workdir / "vocab.txt"), "--out", str(workdir / "x")]) == 2
  assert "--init" in capsys.readouterr().err


def test_cli_flags_become_the_job(workdir, reqa_dir):
  from twotower.commands import finetune as finetune_cmd
  from twotower.commands import pretrain as pretrain_cmd
  job = pretrain_cmd.parse(_pretrain_argv(
      workdir, workdir / "p", "--tasks", "ict,wlp", "--mixture", "pooled", "--steps", "7",
      "--batch_size", "4", "--no_deterministic", "--no_export", "--progress", "epoch",
      "--set", "trainer.seed=3", "--eval_split", "train", "-v"))
  assert isinstance(job, pretrain.PretrainConfig)
  assert job.training.data.tasks == ("ict", "wlp") and job.training.data.mixture == "pooled"
  assert (job.training.trainer.steps, job.training.data.batch_size, job.training.trainer.seed) == (7, 4, 3)
  assert job.training.trainer.deterministic is False and job.export is False
  assert (job.progress, job.eval_split, job.pairs) == ("epoch", "train", str(workdir))
  ft = finetune_cmd.parse(["--config", "tiny", "--reqa", str(reqa_dir), "--vocab", "v.txt",
                           "--out", "o", "--init", "none", "--steps", "9", "--batch_size", "2",
                           "--no_recall", "--select", "", "--split", "80"])
  assert isinstance(ft, finetune.FinetuneConfig)
  assert (ft.training.trainer.finetune_steps, ft.training.trainer.finetune_batch_size) == (9, 2)
  assert ft.validation_recall is False and ft.select == "" and ft.split == "80"
  assert ft.training.trainer.deterministic is True  # the default
  assert (ft.select_window, ft.patience, ft.stop_at) == (1, 0, 0)
  chosen = finetune_cmd.parse(["--config", "tiny", "--reqa", str(reqa_dir), "--vocab", "v.txt",
                               "--out", "o", "--init", "none", "--select_window", "3",
                               "--patience", "2", "--stop_at", "5"])
  assert (chosen.select_window, chosen.patience, chosen.stop_at) == (3, 2, 5)
  base = ["--config", "tiny", "--out", "o", "--vocab", "v", "--set", "trainer.deterministic=false"]
  assert pretrain_cmd.parse(base).training.trainer.deterministic is False  # the config's
  assert pretrain_cmd.parse(base + ["--deterministic"]).training.trainer.deterministic is True


@pytest.mark.slow
def test_multi_worker_runs_the_custom_loop_and_checkpoints(workdir):
  # One-worker TF_CONFIG: MultiWorkerMirroredStrategy without Keras fit (keras#20585).
  out = workdir / "mw"
  env = dict(os.environ, TF_CONFIG=json.dumps(
      {"cluster": {"worker": ["localhost:23917"]}, "task": {"type": "worker", "index": 0}}))
  cmd = [sys.executable, "-m", "twotower.model.pretrain",
         *_pretrain_argv(workdir, out, "--tasks", "ict", "--steps", "10", "--no_export",
                         "--strategy", "multi_worker", "--progress", "epoch")]
  done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "step 10/10: " in done.stderr
  assert tf.train.latest_checkpoint(contracts.checkpoint_dir(str(out))).endswith("ckpt-10")
  assert pd.read_csv(contracts.history_path(str(out)))["step"].tolist() == [5, 10]


def test_runs_train_exactly_the_steps_asked_for():
  from twotower.model.train import checkpoint_interval
  # (steps, checkpoint_every) -> steps between checkpoints; steps = a whole number of them.
  cases = {(640, 100): 80, (150, 100): 75, (90, 100): 90, (300, 100): 100, (1500, 100): 100,
           (40, 100): 40, (20, 5): 5, (7, 5): 5}
  for (steps, every), interval in cases.items():
    assert checkpoint_interval(steps, every) == interval, (steps, every)
  # A prime number of steps has no divisor near the interval: it rounds up, as before.
  assert checkpoint_interval(101, 100) == 100
