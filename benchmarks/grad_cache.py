"""Gradient cache against the direct train step: peak memory and examples/s as the batch
grows with the chunk fixed, each measurement in a fresh process.

  .venv/bin/python -m benchmarks.grad_cache [--batches 64,512,4096] [--chunk 64]
      [--direct_batches 64,512] [--ratio_batches 512] [--steps N] [--preset cpu-small]

Each (path, batch) runs in its own subprocess, so that its peak RSS
(`resource.getrusage(RUSAGE_SELF).ru_maxrss`, TensorFlow's runtime included) belongs to that
measurement alone: the preset's towers (cpu-small: L2/H128/A2, d 128, q32/d128, shared
tower, 30,522-token vocabulary) are built, one synthetic batch of token ids is held in memory
(queries ~3/4 full, documents ~7/8 full, distinct document ids, no input pipeline), the
compiled train step runs once untimed (tracing) and then timed: `--steps` times, by default
2048 / batch steps within [2, 16] (about the same examples per row). The table gives the
peak RSS, examples/s and seconds per step of each, and the cached/direct examples/s ratio at
each batch both paths ran. The direct path at 4096 is left out by default: on cpu-small it
held 2.8 GiB more at batch 512 than at 64 (~6.4 MiB per pair), so ~26 GiB at 4096, more than
this 23 GiB machine has (run it with --direct_batches 64,512,4096 where it fits).

Rows run one after another, so on a shared machine the load changes between them: the
cached/direct ratio is measured apart, at `--ratio_batches`, in one process that traces both
train steps on one model and alternates them (3 rounds, the best time of each kept, as
benchmarks.train_speed does), so that other load hits both alike. The table prints the load
average before and after.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time

#: Rows of cpu-small's token embedding (the preset's vocabulary); no vocabulary file needed.
VOCAB_SIZE = 30_522


def synthetic_batch(batch: int, query_len: int, doc_len: int, seed: int = 0) -> dict:
  """A batch dict of random word-piece ids: [CLS] ... [SEP] then padding."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(seed)

  def side(length: int, fill: float) -> dict:
    lengths = rng.integers(int(fill * length) - 2, length + 1, size=batch)
    ids = rng.integers(5, VOCAB_SIZE, size=(batch, length)).astype("int32")
    ids[:, 0] = 2
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype("int32")
    ids[np.arange(batch), lengths - 1] = 3
    ids[mask == 0] = 0
    return {"token_ids": tf.constant(ids), "padding_mask": tf.constant(mask)}
  return {"query": side(query_len, 0.75), "doc": side(doc_len, 0.875),
          "doc_id": tf.constant(np.stack([np.arange(batch), np.zeros(batch)], 1), tf.int64)}


def worker(preset: str, batch: int, chunk: int, steps: int) -> dict:
  """One measurement, in this process: build, trace, time; returns the row."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  from twotower.model import train  # pylint: disable=import-outside-toplevel
  from twotower.model.two_tower import build_two_tower  # pylint: disable=import-outside-toplevel
  m = config_lib.load(preset).model
  tf.keras.utils.set_random_seed(0)
  model = build_two_tower(m, m.vocab_size or VOCAB_SIZE, grad_cache_chunk=chunk)
  model.compile(optimizer=train.make_optimizer(1e-4, 1000, 0.1, 0.01))
  data = synthetic_batch(batch, m.query_len, m.doc_len)
  step = tf.function(model.train_step)
  started = time.perf_counter()
  float(step(data)["loss"])  # trace + one step
  first = time.perf_counter() - started
  started = time.perf_counter()
  for _ in range(steps):
    loss = float(step(data)["loss"])
  elapsed = time.perf_counter() - started
  return {"path": "cached" if chunk else "direct", "batch": batch, "chunk": chunk,
          "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
          "ex_per_s": steps * batch / elapsed, "s_per_step": elapsed / steps,
          "first_step_s": first, "loss": loss, "params_m": model.count_params() / 1e6,
          "model": dataclasses.asdict(m)}


def alternating_ratio(preset: str, batch: int, chunk: int, steps: int, rounds: int = 3) -> dict:
  """Cached/direct examples/s at one batch, the two train steps alternating in this process."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from twotower.model import config as config_lib  # pylint: disable=import-outside-toplevel
  from twotower.model import train  # pylint: disable=import-outside-toplevel
  from twotower.model.two_tower import build_two_tower  # pylint: disable=import-outside-toplevel
  m = config_lib.load(preset).model
  tf.keras.utils.set_random_seed(0)
  model = build_two_tower(m, m.vocab_size or VOCAB_SIZE)
  model.compile(optimizer=train.make_optimizer(1e-4, 1000, 0.1, 0.01))
  data = synthetic_batch(batch, m.query_len, m.doc_len)
  steps_fn = {}
  for path, c in (("direct", 0), ("cached", chunk)):
    model.grad_cache_chunk = c  # read when the step is traced, just below
    steps_fn[path] = tf.function(model.train_step)
    float(steps_fn[path](data)["loss"])
  best = {path: float("inf") for path in steps_fn}
  for _ in range(rounds):
    for path, fn in steps_fn.items():
      started = time.perf_counter()
      for _ in range(steps):
        float(fn(data)["loss"])
      best[path] = min(best[path], (time.perf_counter() - started) / steps)
  return {"batch": batch, "chunk": chunk, "ratio": best["direct"] / best["cached"],
          "s_per_step": best}


def _subprocess(args: list[str]) -> dict:
  cmd = [sys.executable, "-m", "benchmarks.grad_cache", "--worker", *args]
  out = subprocess.run(cmd, capture_output=True, text=True, check=False)
  if out.returncode != 0:
    # An out-of-memory kill is a result too: say so in the row instead of losing the table.
    return {"error": f"exit {out.returncode}: {out.stderr.strip().splitlines()[-1:]}"}
  return json.loads(out.stdout.strip().splitlines()[-1])


def _default_steps(batch: int) -> int:
  return min(16, max(2, 2048 // batch))


def _measure(preset: str, batch: int, chunk: int, steps: int) -> dict:
  steps = steps or _default_steps(batch)
  row = _subprocess(["--preset", preset, "--batches", str(batch), "--chunk", str(chunk),
                     "--steps", str(steps)])
  return {"path": "cached" if chunk else "direct", "batch": batch, "chunk": chunk, **row}


def table(rows: list[dict], ratios: list[dict], load: tuple[float, float], args) -> str:
  model = next((r["model"] for r in rows if "model" in r), {})
  params = next((r["params_m"] for r in rows if "params_m" in r), 0.0)
  lines = [f"gradient cache vs direct, preset {args.preset} (L{model.get('num_layers')}/"
           f"H{model.get('hidden_dim')}/A{model.get('num_heads')}, d {model.get('embedding_dim')}"
           f", q{model.get('query_len')}/d{model.get('doc_len')}, {params:.1f}M parameters), "
           f"synthetic token batches, timed steps {args.steps or '2048 / batch in [2, 16]'} "
           "after 1 untimed (tracing), "
           f"{os.cpu_count()} CPUs, load average {load[0]:.2f} before / {load[1]:.2f} after",
           "", f"{'path':<7} {'batch':>6} {'chunk':>6} {'peak RSS MiB':>13} {'ex/s':>8} "
           f"{'s/step':>8} {'first step s':>13}"]
  for r in rows:
    if "error" in r:
      lines.append(f"{r['path']:<7} {r['batch']:>6} {r['chunk'] or '-':>6}  {r['error']}")
      continue
    lines.append(f"{r['path']:<7} {r['batch']:>6} {r['chunk'] or '-':>6} "
                 f"{r['peak_rss_mib']:>13.0f} {r['ex_per_s']:>8.1f} {r['s_per_step']:>8.2f} "
                 f"{r['first_step_s']:>13.1f}")
  lines.append("")
  for r in ratios:
    if "error" in r:
      lines.append(f"cached/direct examples/s: {r['error']}")
      continue
    lines.append(f"cached/direct examples/s at batch {r['batch']} (chunk {r['chunk']}), "
                 f"alternating in one process, best of 3: {r['ratio']:.2f} "
                 f"({r['s_per_step']['cached']:.2f} vs {r['s_per_step']['direct']:.2f} s/step)")
  return "\n".join(lines)


def run(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--preset", default="cpu-small", help="model preset (its towers)")
  p.add_argument("--batches", default="64,512,4096", help="batches of the cached path")
  p.add_argument("--chunk", type=int, default=64, help="grad_cache_chunk of the cached path")
  p.add_argument("--direct_batches", default="64,512",
                 help="batches of the direct path (the ratio needs one in --batches)")
  p.add_argument("--ratio_batches", default="512",
                 help="batches of the alternating cached/direct examples/s ratio")
  p.add_argument("--ratio", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--steps", type=int, default=0,
                 help="timed steps per measurement (0: 2048 / batch, within [2, 16])")
  p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  batches = [int(b) for b in args.batches.split(",") if b]
  if args.worker:
    fn = alternating_ratio if args.ratio else worker
    print(json.dumps(fn(args.preset, batches[0], args.chunk, args.steps)))
    return
  before = os.getloadavg()[0]
  rows = [_measure(args.preset, b, args.chunk, args.steps) for b in batches]
  rows += [_measure(args.preset, int(b), 0, args.steps)
           for b in args.direct_batches.split(",") if b]
  ratios = [_subprocess(["--ratio", "--preset", args.preset, "--batches", b, "--chunk",
                         str(args.chunk), "--steps",
                         str(args.steps or max(2, _default_steps(int(b)) // 2))])
            for b in args.ratio_batches.split(",") if b]
  print(table(rows, ratios, (before, os.getloadavg()[0]), args))


if __name__ == "__main__":
  run()
