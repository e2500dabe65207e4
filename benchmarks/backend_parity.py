"""TensorFlow against JAX, the same two-tower model on CPU (issue 64's parity):

  1. one batch: the same initial weights (a .weights.h5 written here) and the same batch give
     the loss on each backend and the gradient of every weight; printed: |loss difference|
     and the largest |gradient difference|. Dropout is off for this part (each backend draws
     its own masks: the same distribution, not the same numbers).
  2. devices: one JAX train step on the global batch over 1 and over 2 devices
     (XLA_FLAGS=--xla_force_host_platform_device_count=2, keras.distribution.DataParallel):
     the loss and the updated weights agree, and differ from the loss of two half batches,
     each with only its own in-batch negatives: the negatives are the global batch's.
  3. curves (`--curve_steps N`, 0 to skip): `twotower pretrain` of the same preset for N
     steps on each backend, each with its own input pipeline (the same shards, another
     seeded order), the training and held-out loss at each checkpoint side by side, beside
     TensorFlow's own run at another seed (`--noise_seed`): the spread that "the same curve
     within noise" is judged against.

  .venv/bin/python -m benchmarks.backend_parity [--config cpu-small] [--pairs DIR --vocab FILE]
      [--curve_steps 300] [--checkpoint_every 50] [--batch 32] [--noise_seed 1]

Without --pairs it writes synthetic ICT-like pairs to a temp dir. Each JAX part runs in a
child process (`python -m benchmarks.backend_parity --child ...`, KERAS_BACKEND=jax, TensorFlow
kept out); tests/test_jax_parity.py runs parts 1 and 2 on the tiny preset.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
logger = logging.getLogger(__name__)


def _flatten(batch: dict, prefix: str = "") -> dict[str, np.ndarray]:
  out = {}
  for key, value in batch.items():
    if isinstance(value, dict):
      out.update(_flatten(value, f"{prefix}{key}/"))
    else:
      out[f"{prefix}{key}"] = np.asarray(value)
  return out


def _nest(flat) -> dict:
  out: dict = {}
  for key in flat:
    node = out
    *parents, leaf = key.split("/")
    for part in parents:
      node = node.setdefault(part, {})
    node[leaf] = np.asarray(flat[key])
  return out


def write_case(case: str, config_dict: dict, vocab: str, pairs_root: str, task: str = "ict",
               seed: int = 0) -> None:
  """A parity case in folder `case`: config.json, vocab, batch.npz (the first batch of the
  pairs in file order, tokenized by np_tokenizer) and initial.weights.h5 (the model's
  initial weights, made in this process's backend)."""
  import keras  # pylint: disable=import-outside-toplevel
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  from twotower.model import np_input, pair_files  # pylint: disable=import-outside-toplevel
  from twotower.model.np_tokenizer import NumpyTokenizer  # pylint: disable=import-outside-toplevel
  from twotower.model.two_tower import build_two_tower  # pylint: disable=import-outside-toplevel
  os.makedirs(case, exist_ok=True)
  cfg = config_lib.from_dict(config_dict)
  m = cfg.model
  tok = NumpyTokenizer.from_file(vocab, m.query_len, m.doc_len)
  files = {task: pair_files.pair_files(pairs_root, task, "train")}
  batches = np_input.pair_batches(files, tok, cfg.data.batch_size, shuffle=False, repeat=False)
  (batch,) = np_input.first_batches(batches, 1)
  np.savez(os.path.join(case, "batch.npz"), **_flatten(batch))
  keras.utils.set_random_seed(seed)
  model = build_two_tower(m, tok.vocab_size, cfg.trainer.temperature)
  model.save_weights(os.path.join(case, "initial.weights.h5"))
  with open(os.path.join(case, "config.json"), "w", encoding="utf-8") as f:
    json.dump({"config": config_dict, "vocab_size": tok.vocab_size}, f)


def _case_config(case: str):
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  with open(os.path.join(case, "config.json"), encoding="utf-8") as f:
    spec = json.load(f)
  return config_lib.from_dict(spec["config"]), spec["vocab_size"]


def _load_case(case: str):
  from twotower.model.two_tower import build_two_tower  # pylint: disable=import-outside-toplevel
  cfg, vocab_size = _case_config(case)
  model = build_two_tower(cfg.model, vocab_size, cfg.trainer.temperature)
  model.load_weights(os.path.join(case, "initial.weights.h5"))
  with np.load(os.path.join(case, "batch.npz")) as batch:
    return cfg, model, _nest(batch)


def loss_and_gradients(case: str) -> dict[str, np.ndarray]:
  """{"loss": [], "<weight path>": gradient} of the case's batch at its initial weights, on
  this process's backend: a GradientTape on TensorFlow, jax.value_and_grad of the
  stateless forward pass and `compute_loss` (what Keras's JAX train step differentiates) on
  JAX."""
  import keras  # pylint: disable=import-outside-toplevel
  _, model, batch = _load_case(case)
  names = [v.path for v in model.trainable_variables]
  if keras.backend.backend() == "jax":
    import jax  # pylint: disable=import-outside-toplevel

    def loss_fn(trainable, non_trainable):
      y_pred, _ = model.stateless_call(trainable, non_trainable, batch, training=True)
      return model.compute_loss(x=batch, y_pred=y_pred)
    loss, grads = jax.value_and_grad(loss_fn)(
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables])
  else:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    with tf.GradientTape() as tape:
      loss, _, _ = model.compute_retrieval_loss(batch, training=True)
    grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, model.trainable_variables)]
  out = {"loss": np.asarray(loss, np.float64)}
  out.update({name: np.asarray(g, np.float64) for name, g in zip(names, grads)})
  return out


def one_step(case: str) -> dict[str, np.ndarray]:
  """One Keras `fit` step on the case's batch over every local device (JAX: DataParallel
  where there are several): {"loss", "devices", "<weight path>": weight after the step},
  and "half_losses": the loss of each half of the batch on its own negatives."""
  import jax  # pylint: disable=import-outside-toplevel
  from twotower.model import jax_train  # pylint: disable=import-outside-toplevel
  from twotower.model.optimizer import make_optimizer  # pylint: disable=import-outside-toplevel
  cfg, _ = _case_config(case)
  devices = jax_train.set_distribution(cfg.data.batch_size)
  _, model, batch = _load_case(case)  # built under the distribution
  half = cfg.data.batch_size // 2

  def part(tree, rows):
    return {k: part(v, rows) if isinstance(v, dict) else v[rows] for k, v in tree.items()}
  halves = [float(model.compute_loss(x=b, y_pred=model(b, training=False)))
            for b in (part(batch, slice(0, half)), part(batch, slice(half, None)))]
  model.compile(optimizer=make_optimizer(1e-3, 10, 0.0, 0.0), jit_compile=True)
  history = model.fit((b for b in [(batch,)]), steps_per_epoch=1, epochs=1, verbose=0,
                      shuffle=False)
  out = {"loss": np.asarray(history.history["loss"][0]), "devices": np.asarray(devices),
         "half_losses": np.asarray(halves), "jax_devices": np.asarray(len(jax.devices()))}
  out.update({v.path: np.asarray(v.numpy()) for v in model.trainable_variables})
  return out


def run_child(mode: str, case: str, out: str, devices: int = 1) -> dict[str, np.ndarray]:
  """`mode` ("grads" or "step") of `case` in a JAX process with `devices` CPU devices."""
  env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(REPO)}
  env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
  done = subprocess.run([sys.executable, "-m", "benchmarks.backend_parity", "--child", mode,
                         case, out], env=env, cwd=str(REPO), capture_output=True, text=True,
                        check=False)
  if done.returncode:
    raise RuntimeError(f"the JAX {mode} child failed:\n{done.stderr[-4000:]}")
  with np.load(out) as f:
    values = {k: f[k] for k in f.files}
  if int(values.pop("tensorflow_modules")):
    raise RuntimeError(f"the JAX {mode} child imported TensorFlow")
  return values


def compare_gradients(tf_side: dict, jax_side: dict) -> dict:
  """|loss difference| and the largest |gradient difference| over every weight (paths must
  match one to one)."""
  if set(tf_side) != set(jax_side):
    raise ValueError(f"the backends name other weights: {sorted(set(tf_side) ^ set(jax_side))}")
  grads = [k for k in tf_side if k != "loss"]
  worst = max(grads, key=lambda k: float(np.max(np.abs(tf_side[k] - jax_side[k]))))
  return {"loss_tf": float(tf_side["loss"]), "loss_jax": float(jax_side["loss"]),
          "loss_diff": abs(float(tf_side["loss"]) - float(jax_side["loss"])),
          "max_grad_diff": float(np.max(np.abs(tf_side[worst] - jax_side[worst]))),
          "worst_weight": worst, "weights": len(grads),
          "max_grad": max(float(np.max(np.abs(tf_side[k]))) for k in grads)}


def _pretrain(backend: str, preset: str, overrides: list[str], pairs: str, vocab: str,
              out: str) -> dict:
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  from twotower.model import pretrain  # pylint: disable=import-outside-toplevel
  cfg = config_lib.load(preset, overrides + [f"runtime.backend={backend}"])
  result = pretrain.run(pretrain.PretrainConfig(training=cfg, out=out, vocab=vocab, pairs=pairs,
                                                export=False, progress="none"))
  return {"history": result.history, "seconds": result.seconds}


def _child_main(mode: str, case: str, out: str) -> None:
  from twotower.model import jax_launch  # pylint: disable=import-outside-toplevel
  jax_launch.keep_tensorflow_out()
  values = loss_and_gradients(case) if mode == "grads" else one_step(case)
  values["tensorflow_modules"] = np.asarray(len(jax_launch.loaded_tensorflow()))
  np.savez(out, **values)


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--config", default="cpu-small", help="preset of every part")
  p.add_argument("--pairs", default=None, help="pair pipeline output dir (default: synthetic)")
  p.add_argument("--vocab", default=None, help="vocabulary (default: the synthetic one)")
  p.add_argument("--batch", type=int, default=32, help="batch of parts 1 and 2")
  p.add_argument("--curve_steps", type=int, default=300, help="steps of part 3 (0: skip)")
  p.add_argument("--checkpoint_every", type=int, default=50, help="part 3's curve points")
  p.add_argument("--noise_seed", type=int, default=1,
                 help="part 3 also trains TensorFlow with this seed: the seed-to-seed spread "
                      "the backends' difference is judged against (-1: none)")
  p.add_argument("--child", nargs=3, metavar=("MODE", "CASE", "OUT"), help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.noise_seed is not None and args.noise_seed < 0:
    args.noise_seed = None
  if args.child:
    _child_main(*args.child)
    return 0
  logging.basicConfig(level=logging.WARNING)
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  from twotower.testing import pairs as testing  # pylint: disable=import-outside-toplevel
  tmp = tempfile.mkdtemp(prefix="backend_parity-")
  try:
    pairs, vocab = args.pairs, args.vocab
    if pairs is None:
      vocab = testing.write_vocab(os.path.join(tmp, "vocab.txt"))
      testing.write_pairs(tmp, "ict", "train", testing.synthetic_pairs(2000, doc_words=250,
                                                                        query_words=25))
      testing.write_pairs(tmp, "ict", "heldout", testing.synthetic_pairs(200, seed=7))
      pairs = tmp
    if vocab is None:
      raise SystemExit("--vocab is required with --pairs")
    base = config_lib.load(args.config)
    case = os.path.join(tmp, "case")
    no_dropout = config_lib.replace(base, model={"dropout": 0.0},
                                    data={"batch_size": args.batch})
    write_case(case, no_dropout.to_dict(), vocab, pairs)
    tf_side = loss_and_gradients(case)
    jax_side = run_child("grads", case, os.path.join(tmp, "jax.npz"))
    g = compare_gradients(tf_side, jax_side)
    one = run_child("step", case, os.path.join(tmp, "one.npz"), devices=1)
    two = run_child("step", case, os.path.join(tmp, "two.npz"), devices=2)
    weights = [k for k in one if "/" in k]
    step_diff = max(float(np.max(np.abs(one[k] - two[k]))) for k in weights)
    print(f"\n{args.config}, batch {args.batch}, dropout off, data: "
          f"{'synthetic' if pairs == tmp else pairs}")
    print(f"{'one batch':<34} {'TensorFlow':>12} {'JAX':>12} {'|difference|':>13}")
    print(f"{'loss':<34} {g['loss_tf']:>12.7f} {g['loss_jax']:>12.7f} {g['loss_diff']:>13.2e}")
    print(f"{'gradients (' + str(g['weights']) + ' weights), max':<34} {'':>12} {'':>12} "
          f"{g['max_grad_diff']:>13.2e}  (largest gradient {g['max_grad']:.3g}; worst at "
          f"{g['worst_weight']})")
    print(f"\n{'one JAX step, global batch':<34} {'1 device':>12} {'2 devices':>12} "
          f"{'|difference|':>13}")
    print(f"{'loss':<34} {float(one['loss']):>12.7f} {float(two['loss']):>12.7f} "
          f"{abs(float(one['loss']) - float(two['loss'])):>13.2e}")
    print(f"{'weights after the step, max':<34} {'':>12} {'':>12} {step_diff:>13.2e}")
    print(f"{'two half batches, own negatives':<34} {float(np.mean(one['half_losses'])):>12.7f}"
          f"  (the loss if each device saw only its own documents)")
    if args.curve_steps:
      overrides = [f"trainer.steps={args.curve_steps}",
                   f"trainer.checkpoint_every={args.checkpoint_every}"]
      runs = {"TF": ("tensorflow", 0), "JAX": ("jax", 0)}
      if args.noise_seed is not None:  # the noise: TensorFlow against itself, another seed
        runs[f"TF s{args.noise_seed}"] = ("tensorflow", args.noise_seed)
      curves = {name: _pretrain(backend, args.config,
                                overrides + [f"trainer.seed={seed}"], pairs, vocab,
                                os.path.join(tmp, name.replace(" ", "-")))
                for name, (backend, seed) in runs.items()}
      print(f"\n{args.config} pre-training, {args.curve_steps} steps, each backend its own "
            "input order (same shards, seed 0 unless named); loss: the mean over the steps "
            "since the last checkpoint")
      for metric, label, width in (("loss", "loss", 9), ("val_loss", "held-out loss", 9),
                                   ("in_batch_accuracy", "accuracy", 9)):
        print(f"{label:<14}" + "".join(f"{name:>{width}}" for name in curves)
              + (f"{'|TF-JAX|':>10}{'|TF-TF s' + str(args.noise_seed) + '|':>13}"
                 if args.noise_seed is not None else ""))
        h = {name: c["history"] for name, c in curves.items()}
        for i, step in enumerate(h["TF"]["step"]):
          values = [h[name].get(metric, [np.nan] * len(h["TF"]["step"]))[i] for name in curves]
          line = f"  step {int(step):<7}" + "".join(f"{v:>{width}.4f}" for v in values)
          if args.noise_seed is not None:
            line += f"{abs(values[0] - values[1]):>10.4f}{abs(values[0] - values[2]):>13.4f}"
          print(line)
      print("seconds: " + ", ".join(f"{name} {c['seconds']:.0f}" for name, c in curves.items())
            + " (including start-up and compilation)")
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
