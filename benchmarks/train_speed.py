"""Training speed of the two towers: examples/s with the real input pipeline (TFRecords ->
tokenizer in tf.data) against the same batches cached in memory, and achieved FLOP/s
against a matmul roofline measured in the same run.

  .venv/bin/python -m benchmarks.train_speed [--pairs DIR --vocab FILE] [--steps N]
      [--determinism ordered|op|none] [--compare_determinism] [--compare_objectives]
      [--compare_backends]

Without --pairs it writes synthetic ICT-like pairs (documents of ~doc_len word pieces) to a
temp dir. A pipeline/cached ratio >= 0.9 says the input pipeline is not the bottleneck.
FLOPs are counted analytically (matmuls of both towers, attention scores, the in-batch
logits; training = 3x forward), so the FLOP/s column is a lower bound on work done.

The trainer's set-up (`train.set_up`) and the datasets' order follow `--determinism`:
`ordered` (the default, `trainer.deterministic`: seeds and ordered tf.data, which make runs
identical on CPU), `op` (plus TensorFlow op determinism, `trainer.op_determinism`, for GPUs)
or `none` (unordered parallel input). `--compare_determinism` measures cpu-small in each mode,
each in its own process (op determinism is process-wide and read when kernels are built),
alternating them, and prints the examples/s ratio of each mode to `none`.
`--compare_backends` trains each setting through Keras `fit` on TensorFlow (tf.data, the
model's train step) and on JAX (np_input on threads, Keras's JAX step, XLA), each in a
process of its own, alternating round by round: examples/s, FLOP/s against the roofline, the
JAX/TF ratio and the load average before and after (issue 64).
`--compare_objectives` measures a cpu-small train step (cached batches) with each
pre-training objective the grid's rows use, alternating them, and prints each one's time per
step against the paper's in-batch softmax: what a successor's row costs beside the paper's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from twotower.model import config as config_lib
from twotower.testing import pairs as testing

# Keras, TensorFlow and the model are imported where they are used: `--backend_child jax`
# runs in a process with KERAS_BACKEND=jax that keeps TensorFlow out (model/jax_launch.py).

logger = logging.getLogger(__name__)

#: (label, preset, overrides, batch size): cpu-small as shipped, and an L4/H256 point.
SETTINGS = (
    ("cpu-small L2/H128 q32/d128", "cpu-small", {}, 64),
    ("L4/H256 q64/d288", "cpu-small", {"num_layers": 4, "hidden_dim": 256, "num_heads": 4,
                                       "intermediate_dim": 1024, "embedding_dim": 256,
                                       "query_len": 64, "doc_len": 288}, 32),
)


def tower_flops(m: config_lib.ModelConfig, length: int) -> float:
  """Forward FLOPs of one Transformer tower on one sequence (multiply-add = 2)."""
  h, i, n = m.hidden_dim, m.intermediate_dim, length
  per_layer = 2 * n * (4 * h * h + 2 * h * i) + 2 * 2 * n * n * h
  return m.num_layers * per_layer + 2 * h * m.embedding_dim


def train_flops_per_example(m: config_lib.ModelConfig, batch: int) -> float:
  forward = tower_flops(m, m.query_len) + tower_flops(m, m.doc_len) + 2 * batch * m.embedding_dim
  return 3.0 * forward


def jax_matmul_roofline(n: int = 2048, reps: int = 10) -> float:
  """Best FLOP/s of an n x n float32 matmul through XLA:CPU (the JAX process's own)."""
  import jax  # pylint: disable=import-outside-toplevel
  a = jax.random.normal(jax.random.PRNGKey(0), (n, n))
  b = jax.random.normal(jax.random.PRNGKey(1), (n, n))
  f = jax.jit(lambda x, y: x @ y)
  f(a, b).block_until_ready()
  best = float("inf")
  for _ in range(reps):
    t = time.perf_counter()
    f(a, b).block_until_ready()
    best = min(best, time.perf_counter() - t)
  return 2 * n ** 3 / best


def matmul_roofline(n: int = 2048, reps: int = 10) -> float:
  """Best FLOP/s of an n x n float32 matmul on this machine, now (TensorFlow's kernel)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  a = tf.random.normal((n, n))
  b = tf.random.normal((n, n))
  f = tf.function(lambda x, y: tf.matmul(x, y))
  f(a, b).numpy()
  best = float("inf")
  for _ in range(reps):
    t = time.perf_counter()
    f(a, b).numpy()
    best = min(best, time.perf_counter() - t)
  return 2 * n ** 3 / best


def time_steps(model, iterator, steps: int, warmup: int) -> float:
  """Seconds for `steps` train steps, after `warmup` untimed ones (tracing, buffers)."""
  for _ in range(warmup):
    model.train_on_batch(next(iterator))
  t = time.perf_counter()
  for _ in range(steps):
    model.train_on_batch(next(iterator))
  return time.perf_counter() - t


MODES = ("ordered", "op", "none")


def measure(label, preset, overrides, batch, pairs, vocab, steps, warmup, rounds,
            determinism: str = "ordered") -> dict:
  # pylint: disable=import-outside-toplevel
  from twotower.model import data, train
  from twotower.model.tokenizer import Tokenizer
  from twotower.model.two_tower import build_two_tower
  cfg = config_lib.load(preset)
  m = dataclasses.replace(cfg.model, **overrides)
  deterministic = determinism != "none"
  train.set_up(dataclasses.replace(cfg.trainer, deterministic=deterministic,
                                   op_determinism=determinism == "op", seed=0))
  tok = Tokenizer.from_file(vocab, m.query_len, m.doc_len)
  model = build_two_tower(m, tok.vocab_size)
  model.compile(optimizer=train.make_optimizer(1e-4, 1000, 0.1, 0.01))
  real = data.pretrain_dataset(pairs, ["ict"], "train", tok, batch, deterministic=deterministic)
  cached = data.cached_batches(real, 4)
  it_cached, it_real = iter(cached), iter(real)
  for _ in range(4):  # fill the cache before timing
    next(it_cached)
  time_steps(model, it_cached, 0, warmup)  # trace the train step
  time_steps(model, it_real, 0, warmup)  # fill the shuffle buffer
  # Alternate the two, best of `rounds`: other load on the machine hits both alike.
  t_cached = t_real = float("inf")
  for _ in range(rounds):
    t_cached = min(t_cached, time_steps(model, it_cached, steps, 0))
    t_real = min(t_real, time_steps(model, it_real, steps, 0))
  ex_real, ex_cached = steps * batch / t_real, steps * batch / t_cached
  flops = train_flops_per_example(m, batch)
  return {"setting": label, "params_M": model.count_params() / 1e6, "batch": batch,
          "pipeline_ex_s": ex_real, "cached_ex_s": ex_cached, "ratio": ex_real / ex_cached,
          "gflop_s": flops * ex_real / 1e9, "determinism": determinism}


def compare_determinism(pairs: str, vocab: str, steps: int, warmup: int, rounds: int) -> dict:
  """cpu-small in every determinism mode, each in a fresh process, alternating. Per mode:
  every round's examples/s (input pipeline included, and cached), their best and median
  (on a shared machine the median resists bursts of load in either direction)."""
  runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
  with tempfile.TemporaryDirectory(prefix="train_speed-det-") as tmp:
    for r in range(rounds):
      for mode in MODES:
        out = os.path.join(tmp, f"{r}-{mode}.json")
        cmd = [sys.executable, "-m", "benchmarks.train_speed", "--pairs", pairs, "--vocab", vocab,
               "--only", SETTINGS[0][0], "--steps", str(steps), "--warmup", str(warmup),
               "--rounds", "1", "--json", out, "--determinism", mode]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode:
          raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
        with open(out, encoding="utf-8") as f:
          (row,) = json.load(f)
        logger.warning("round %d determinism=%s: %.1f ex/s (cached %.1f)", r + 1, mode,
                       row["pipeline_ex_s"], row["cached_ex_s"])
        runs[mode].append(row)
  summary = {}
  for mode in MODES:
    for key in ("pipeline_ex_s", "cached_ex_s"):
      values = [row[key] for row in runs[mode]]
      summary[mode, key, "best"] = max(values)
      summary[mode, key, "median"] = float(np.median(values))
  return summary


BACKENDS = ("tensorflow", "jax")


class StepClock:
  """A Keras callback that notes when each train step's loss is ready (reading it waits for
  the step: JAX dispatches asynchronously, so a step's end is when its result exists)."""

  def __init__(self):
    import keras  # pylint: disable=import-outside-toplevel

    class _Clock(keras.callbacks.Callback):
      def __init__(self, times):
        super().__init__()
        self.times = times

      def on_train_batch_end(self, batch, logs=None):
        float(logs["loss"])
        self.times.append(time.perf_counter())
    self.times: list[float] = []
    self.callback = _Clock(self.times)

  def steps_per_second(self, warmup: int) -> float:
    """Steps per second after the first `warmup` (tracing, compilation, buffers)."""
    t = self.times[warmup - 1:]
    return (len(t) - 1) / (t[-1] - t[0])


def measure_backend(label, preset, overrides, batch, pairs, vocab, steps, warmup, rounds) -> dict:
  """The setting trained as this process's backend trains it, through Keras `fit`:
  TensorFlow with tf.data (in-graph tokenizer) and the model's own train step (no XLA, as
  the trainer's default); JAX with np_input (numpy tokenizer on threads) and Keras's JAX
  step over `compute_loss`, XLA-compiled. Examples/s with the real input and with 4 batches
  held in memory, best of `rounds` fits of warmup + steps steps."""
  # pylint: disable=import-outside-toplevel
  import keras
  from twotower.model.optimizer import make_optimizer
  from twotower.model.two_tower import build_two_tower
  backend = keras.backend.backend()
  cfg = config_lib.load(preset)
  m = dataclasses.replace(cfg.model, **overrides)
  keras.backend.clear_session()
  keras.utils.set_random_seed(0)
  if backend == "jax":
    from twotower.model import np_input
    from twotower.model.np_tokenizer import NumpyTokenizer
    tok = NumpyTokenizer.from_file(vocab, m.query_len, m.doc_len)
    files = {"ict": data_files(pairs)}
    cached_batches = np_input.first_batches(np_input.pair_batches(files, tok, batch), 4)

    def cached():
      while True:
        for b in cached_batches:
          yield (b,)
    stream = np_input.pair_batches(files, tok, batch)

    def real():
      for b in stream:
        yield (b,)
    inputs = {"cached": cached, "pipeline": real}
  else:
    from twotower.model import data
    from twotower.model.tokenizer import Tokenizer
    tok = Tokenizer.from_file(vocab, m.query_len, m.doc_len)
    ds = data.pretrain_dataset(pairs, ["ict"], "train", tok, batch)
    inputs = {"cached": lambda: data.cached_batches(ds, 4), "pipeline": lambda: ds}
  model = build_two_tower(m, tok.vocab_size)
  model.compile(optimizer=make_optimizer(1e-4, 1000, 0.1, 0.01), jit_compile=backend == "jax")
  best = {name: 0.0 for name in inputs}
  generators = {name: make() for name, make in inputs.items()}
  for _ in range(rounds):
    for name in inputs:
      clock = StepClock()
      model.fit(generators[name], steps_per_epoch=warmup + steps, epochs=1, verbose=0,
                shuffle=False, callbacks=[clock.callback])
      best[name] = max(best[name], clock.steps_per_second(warmup) * batch)
  flops = train_flops_per_example(m, batch)
  own_roof = jax_matmul_roofline() if backend == "jax" else matmul_roofline()
  return {"setting": label, "backend": backend, "params_M": model.count_params() / 1e6,
          "own_roofline_gflop_s": own_roof / 1e9,
          "batch": batch, "pipeline_ex_s": best["pipeline"], "cached_ex_s": best["cached"],
          "gflop_s": flops * best["pipeline"] / 1e9,
          "cached_gflop_s": flops * best["cached"] / 1e9}


def data_files(pairs: str) -> list[str]:
  from twotower.model import pair_files  # pylint: disable=import-outside-toplevel
  return pair_files.pair_files(pairs, "ict", "train")


def compare_backends(pairs: str, vocab: str, settings, steps: int, warmup: int,
                     rounds: int) -> list[dict]:
  """Each setting on each backend, each measurement in a process of its own (a Keras
  backend is per process), alternating the backends round by round; per setting and
  backend the best round."""
  best: dict[tuple[str, str], dict] = {}
  with tempfile.TemporaryDirectory(prefix="train_speed-backends-") as tmp:
    for r in range(rounds):
      for label, *_ in settings:
        for backend in BACKENDS:
          out = os.path.join(tmp, f"{r}-{backend}.json")
          cmd = [sys.executable, "-m", "benchmarks.train_speed", "--pairs", pairs, "--vocab",
                 vocab, "--only", label, "--steps", str(steps), "--warmup", str(warmup),
                 "--rounds", "1", "--json", out, "--backend_child", backend]
          env = {**os.environ, "KERAS_BACKEND": backend}
          done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, env=env, check=False)
          if done.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
          with open(out, encoding="utf-8") as f:
            (row,) = json.load(f)
          logger.warning("round %d %s %s: %.1f ex/s (cached %.1f)", r + 1, label, backend,
                         row["pipeline_ex_s"], row["cached_ex_s"])
          key = (label, backend)
          if key not in best or row["pipeline_ex_s"] > best[key]["pipeline_ex_s"]:
            best[key] = {**row, "cached_ex_s": max(row["cached_ex_s"],
                                                   best.get(key, row)["cached_ex_s"])}
  return [best[label, backend] for label, *_ in settings for backend in BACKENDS]


#: (label, config overrides) of --compare_objectives: the paper's in-batch softmax first;
#: the others are the cpu-small grid's successor rows.
OBJECTIVES = (
    ("in-batch softmax (paper)", ()),
    ("MoCo queue 4096, m 0.99 (contriever)", ("objective.moco_queue=4096",
                                             "objective.moco_momentum=0.99")),
    ("Condenser head 2 blocks (cocondenser)", ("objective.condenser_head_layers=2",)),
)


def compare_objectives(pairs: str, vocab: str, steps: int, warmup: int, rounds: int) -> list[dict]:
  """Seconds per cpu-small train step (cached batches, so the input pipeline is out) of each
  objective of OBJECTIVES, built and fed as `twotower pretrain` builds and feeds them,
  alternating, best of `rounds`."""
  # pylint: disable=import-outside-toplevel
  from twotower.model import condenser, data, train
  from twotower.model.tokenizer import Tokenizer
  runs = []
  for label, overrides in OBJECTIVES:
    cfg = config_lib.load("cpu-small", list(overrides))
    train.set_up(cfg.trainer)
    tok = Tokenizer.from_file(vocab, cfg.model.query_len, cfg.model.doc_len)
    batches = data.pretrain_dataset(pairs, ["ict"], "train", tok, cfg.data.batch_size)
    if cfg.objective.condenser_head_layers:
      batches = condenser.pair_masker(cfg, tok)(batches, 0)
    model = train.two_tower_builder(cfg, None)(tok.vocab_size)
    model.compile(optimizer=train.make_optimizer(1e-4, 1000, 0.1, 0.01))
    it = iter(data.cached_batches(batches, 4).repeat())
    time_steps(model, it, 0, warmup)  # trace the train step
    runs.append({"objective": label, "model": model, "it": it, "best": float("inf")})
  for _ in range(rounds):
    for r in runs:
      r["best"] = min(r["best"], time_steps(r["model"], r["it"], steps, 0) / steps)
  return [{"objective": r["objective"], "s_per_step": r["best"],
           "vs_paper": r["best"] / runs[0]["best"]} for r in runs]


def run(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--pairs", default=None, help="pair pipeline output dir (default: synthetic)")
  p.add_argument("--vocab", default=None, help="vocabulary (default: the synthetic one)")
  p.add_argument("--steps", type=int, default=0,
                 help="timed steps per measurement (default: 24 for cpu-small, 6 for L4/H256)")
  p.add_argument("--rounds", type=int, default=3, help="alternating rounds; best is kept")
  p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
  p.add_argument("--determinism", choices=MODES, default="ordered",
                 help="ordered: seeds + ordered tf.data (trainer.deterministic, the default); "
                      "op: + TensorFlow op determinism (trainer.op_determinism); none")
  p.add_argument("--compare_determinism", action="store_true",
                 help="cpu-small in every determinism mode (separate processes)")
  p.add_argument("--compare_objectives", action="store_true",
                 help="cpu-small's train step with each pre-training objective (in-batch, MoCo, "
                      "Condenser head)")
  p.add_argument("--compare_backends", action="store_true",
                 help="each setting trained by fit on TensorFlow and on JAX (a process each, "
                      "alternating): examples/s, FLOP/s against the roofline, JAX/TF")
  p.add_argument("--backend_child", choices=BACKENDS, default=None, help=argparse.SUPPRESS)
  p.add_argument("--only", default="", help="only the settings whose label starts with this")
  p.add_argument("--json", default="", help="also write the rows to this JSON file")
  args = p.parse_args(argv)
  if args.backend_child == "jax":
    from twotower.model import jax_launch  # pylint: disable=import-outside-toplevel
    jax_launch.keep_tensorflow_out()  # before Keras is imported, as the JAX trainer does
  logging.basicConfig(level=logging.WARNING)
  tmp = None
  pairs, vocab = args.pairs, args.vocab
  if pairs is None:
    tmp = tempfile.mkdtemp(prefix="train_speed-")
    vocab = testing.write_vocab(os.path.join(tmp, "vocab.txt"))
    testing.write_pairs(tmp, "ict", "train", testing.synthetic_pairs(2000, doc_words=250,
                                                                      query_words=25))
    pairs = tmp
  if vocab is None:
    raise SystemExit("--vocab is required with --pairs")
  try:
    _report(args, pairs, vocab, synthetic=tmp is not None)
  finally:
    if tmp:
      shutil.rmtree(tmp, ignore_errors=True)


def _report(args: argparse.Namespace, pairs: str, vocab: str, synthetic: bool) -> None:
  settings = [s for s in SETTINGS if s[0].startswith(args.only)]
  if args.backend_child:
    rows = [measure_backend(*s, pairs, vocab, args.steps or 24, args.warmup, args.rounds)
            for s in settings]
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump(rows, f)
    return
  if args.compare_backends:
    load_before = os.getloadavg()
    roof = matmul_roofline()
    rows = compare_backends(pairs, vocab, settings, args.steps or 24, args.warmup, args.rounds)
    roof = max(roof, matmul_roofline())
    load_after = os.getloadavg()
    print(f"\nmatmul roofline (2048^2 float32, TensorFlow, best of 10): {roof / 1e9:.1f} GFLOP/s; "
          f"data: {'synthetic' if synthetic else pairs}; fit, best of {args.rounds} alternating "
          f"rounds of {args.steps or 24} steps after {args.warmup}; load average "
          f"{load_before[0]:.1f} before, {load_after[0]:.1f} after ({os.cpu_count()} cores)")
    print(f"{'setting':<28} {'backend':<10} {'params':>7} {'batch':>5} {'pipeline ex/s':>13} "
          f"{'cached ex/s':>11} {'GFLOP/s':>8} {'of roof':>7} {'own matmul':>10} {'JAX/TF':>7}")
    by = {(r["setting"], r["backend"]): r for r in rows}
    for r in rows:
      ratio = r["pipeline_ex_s"] / by[r["setting"], "tensorflow"]["pipeline_ex_s"]
      print(f"{r['setting']:<28} {r['backend']:<10} {r['params_M']:>6.1f}M {r['batch']:>5} "
            f"{r['pipeline_ex_s']:>13.1f} {r['cached_ex_s']:>11.1f} {r['gflop_s']:>8.1f} "
            f"{r['gflop_s'] * 1e9 / roof:>7.1%} {r['own_roofline_gflop_s']:>10.0f} "
            f"{ratio:>7.2f}")
    print("own matmul: GFLOP/s of the 2048^2 float32 matmul in that backend's process (XLA:CPU "
          "for JAX), the best of its round")
    return
  if args.compare_determinism:
    c = compare_determinism(pairs, vocab, args.steps or 24, args.warmup, args.rounds)
    print(f"\n{SETTINGS[0][0]}, data: {'synthetic' if synthetic else pairs}; {args.rounds} "
          "alternating rounds, one process each")
    print(f"{'mode':<10} {'pipeline ex/s best':>18} {'median':>7} {'cached ex/s best':>16} "
          f"{'median':>7} {'vs none (median)':>16}")
    for mode in MODES:
      ratio = c[mode, "pipeline_ex_s", "median"] / c["none", "pipeline_ex_s", "median"]
      print(f"{mode:<10} {c[mode, 'pipeline_ex_s', 'best']:>18.1f} "
            f"{c[mode, 'pipeline_ex_s', 'median']:>7.1f} {c[mode, 'cached_ex_s', 'best']:>16.1f} "
            f"{c[mode, 'cached_ex_s', 'median']:>7.1f} {ratio:>16.3f}")
    return
  if args.compare_objectives:
    rows = compare_objectives(pairs, vocab, args.steps or 24, args.warmup, args.rounds)
    print(f"\n{SETTINGS[0][0]}, batch 64, cached batches, data: "
          f"{'synthetic' if synthetic else pairs}; best of {args.rounds} alternating rounds")
    print(f"{'objective':<40} {'s/step':>7} {'vs paper':>9}")
    for r in rows:
      print(f"{r['objective']:<40} {r['s_per_step']:>7.3f} {r['vs_paper']:>9.2f}")
    return
  roof_before = matmul_roofline()
  rows = [measure(*s, pairs, vocab, args.steps or (24 if s[3] >= 64 else 6), args.warmup,
                  args.rounds, args.determinism)
          for s in SETTINGS if s[0].startswith(args.only)]
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump(rows, f)
  roof = max(roof_before, matmul_roofline())
  print(f"\nmatmul roofline (2048^2 float32, best of 10): {roof / 1e9:.1f} GFLOP/s; "
        f"data: {'synthetic' if synthetic else pairs}; best of {args.rounds} alternating rounds; "
        f"determinism: {args.determinism}")
  print(f"{'setting':<28} {'params':>8} {'batch':>5} {'pipeline ex/s':>13} {'cached ex/s':>11} "
        f"{'ratio':>6} {'GFLOP/s':>8} {'of roof':>7}")
  for r in rows:
    print(f"{r['setting']:<28} {r['params_M']:>7.1f}M {r['batch']:>5} {r['pipeline_ex_s']:>13.1f} "
          f"{r['cached_ex_s']:>11.1f} {r['ratio']:>6.2f} {r['gflop_s']:>8.1f} "
          f"{r['gflop_s'] * 1e9 / roof:>7.1%}")


if __name__ == "__main__":
  run()
