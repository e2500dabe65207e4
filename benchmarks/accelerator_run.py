"""A prepared accelerator run (issue 64): pre-train the two towers on JAX for a fixed wall
budget, fine-tune them on a ReQA split, score its test questions, on a machine that has JAX but
no TensorFlow, no network and no twotower install (one H200 here: 790 TFLOP/s bf16).

  # here (the project's venv, a package index): the wheels a bare JAX machine lacks, the
  # pairs, the vocabulary and the ReQA folder, in one folder, and its size
  .venv/bin/python -m benchmarks.accelerator_run --pack accel --pairs runs/pairs \\
      --vocab runs/vocab.txt --reqa runs/reqa-squad
  # there, from the checkout's root (the working tree travels with `accel/`):
  KERAS_BACKEND=jax python3 benchmarks/accelerator_run.py --data accel \\
      --wheels accel/wheels --config h200-6min --budget_s 360 --work /tmp/accel --out $OUT

The run, in one process that never imports TensorFlow (model/jax_launch.py keeps it out, as
the JAX trainer's own process does):
  1. wheels    `--wheels DIR`: `pip install --no-index --no-deps --target WORK/site DIR/*.whl`
               (Keras, KerasHub and what they need that a JAX + PyTorch image lacks:
               `NEEDED_WHEELS`), put first on sys.path; twotower itself is read from the
               checkout (pyproject's package-dir mapping) where it is not installed
  2. pretrain  `pretrain.run` on JAX with the preset (`--config`, `--set`), stopped by
               `--budget_s` of training (callbacks.WallBudget: the compilation counts) or at
               trainer.steps, whichever comes first; bf16 mixed precision where JAX has an
               accelerator, float32 on CPU (`--precision auto`)
  3. finetune  `finetune.run` on JAX from it, on REQA's train-<split> pairs, the checkpoint
               chosen on validation-<split> by `--select` (the project's rule)
  4. score     test-<split> questions against every candidate, exact inner-product top-k in
               numpy (finetune.RecallAtK, the validation code: twotower.core.metrics' first
               hit under the `pair` gold rule): R@1/10/100 and MRR (over the top 100), for
               the pre-trained towers (zero-shot) and the fine-tuned ones
  5. write     OUT/metrics.json, OUT/pretrain_history.csv, OUT/finetune_history.csv,
               OUT/table.md (also printed); `--save_weights`: the fine-tuned towers as one
               float16 .npz cut into parts of at most `--weights_part_mib` MiB
               (`cat OUT/towers.npz.part-* > towers.npz`)

Throughput: pairs seen = pre-training steps x global batch. Examples/s = the pairs trained
between the first and the last checkpoint row over the wall seconds between them (held-out
batches and checkpoint writes included; the first row's compilation left out); achieved
FLOP/s = model FLOPs per training example (benchmarks.train_speed.train_flops_per_example:
3 x the forward matmuls of both towers, attention scores and in-batch logits) x examples/s,
over `--peak_tflops` (790: the H200's bf16 matrix rate).

The same script runs on CPU at a tiny budget (tests/test_accelerator_run.py: the `tiny`
preset, a few seconds, in a child process with KERAS_BACKEND=jax).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import glob
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: What the JAX trainer imports that a JAX + PyTorch image lacks (the accelerator machines'
#: image has jax, numpy, h5py, ml-dtypes, absl-py, rich, regex, tokenizers, pyarrow, pyyaml).
NEEDED_WHEELS = ("keras", "keras-hub", "namex", "optree", "google-crc32c")
#: The target machine's Python and platforms, for `pip download` of compiled wheels.
TARGET_PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64")
KS = (1, 10, 100)
MIB = 1024 * 1024

logger = logging.getLogger("accelerator_run")


# ------------------------------------------------------------------------------------------
# --pack: one folder with the wheels and the data, and its size
# ------------------------------------------------------------------------------------------


def _folder_bytes(path: str) -> int:
  return sum(os.path.getsize(p) for p in glob.glob(os.path.join(path, "**"), recursive=True)
             if os.path.isfile(p))


def working_tree_bytes() -> int | None:
  """Bytes of the checkout's tracked and untracked-not-ignored files (what travels with a
  device call beside the carried folder); None without git."""
  try:
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
  except (OSError, subprocess.CalledProcessError):
    return None
  return sum(os.path.getsize(ROOT / n.decode()) for n in names
             if n and os.path.isfile(ROOT / n.decode()))


def download_wheels(dest: str, python_version: str) -> list[str]:
  """NEEDED_WHEELS at the versions installed here, for `python_version` on x86-64 Linux,
  without their dependencies (`pip download --no-deps --only-binary=:all:`)."""
  os.makedirs(dest, exist_ok=True)
  pins = [f"{name}=={importlib.metadata.version(name)}" for name in NEEDED_WHEELS]
  platforms = [a for p in PLATFORMS for a in ("--platform", p)]
  subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                  "--python-version", python_version, "--implementation", "cp", *platforms,
                  "-d", dest, *pins], check=True)
  return pins


def pack(out: str, pairs: str, vocab: str, reqa: str, *, wheels: bool, python_version: str,
         max_mib: float) -> int:
  """Writes OUT/{wheels/, pairs/, vocab.txt, reqa/}; prints each part's size, the total
  and the working tree's. Exit status 1 when pack + tree pass `max_mib`."""
  if os.path.exists(out):
    raise SystemExit(f"--pack {out}: already exists; give a new folder")
  os.makedirs(out)
  shutil.copytree(pairs, os.path.join(out, "pairs"))
  shutil.copyfile(vocab, os.path.join(out, "vocab.txt"))
  shutil.copytree(reqa, os.path.join(out, "reqa"))
  if wheels:
    download_wheels(os.path.join(out, "wheels"), python_version)
  sizes = {name: _folder_bytes(os.path.join(out, name)) if os.path.isdir(os.path.join(out, name))
           else os.path.getsize(os.path.join(out, name)) for name in sorted(os.listdir(out))}
  tree = working_tree_bytes()
  total = sum(sizes.values()) + (tree or 0)
  print(f"\n| {out} | MiB |\n|---|---:|")
  for name, size in sizes.items():
    print(f"| {name} | {size / MIB:.2f} |")
  print(f"| pack total | {sum(sizes.values()) / MIB:.2f} |")
  if tree is not None:
    print(f"| working tree (travels too) | {tree / MIB:.2f} |")
  print(f"| together | {total / MIB:.2f} (limit {max_mib:g}) |")
  if total > max_mib * MIB:
    print(f"over {max_mib:g} MiB: pack fewer pair shards", file=sys.stderr)
    return 1
  return 0


# ------------------------------------------------------------------------------------------
# The run's set-up: wheels, twotower from the checkout, TensorFlow kept out
# ------------------------------------------------------------------------------------------


def install_wheels(wheels: str, site: str) -> None:
  """Installs every wheel of `wheels` into `site` (no index, no dependencies) and puts it
  first on sys.path, before anything imports Keras."""
  found = sorted(glob.glob(os.path.join(wheels, "*.whl")))
  if not found:
    raise SystemExit(f"--wheels {wheels}: no .whl files there")
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                  "--no-compile", "--disable-pip-version-check", "--upgrade", "--target", site,
                  *found], check=True)
  sys.path.insert(0, site)
  importlib.invalidate_caches()
  logger.info("installed %d wheels into %s", len(found), site)


def import_checkout() -> None:
  """Makes `twotower.*` importable from this checkout where twotower is not installed (a
  bare accelerator machine): pyproject.toml maps twotower.model to model/ and so on
  (setuptools' package-dir), which plain sys.path entries cannot say."""
  if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
  try:
    importlib.import_module("twotower.model")
    return
  except ImportError:
    pass
  import tomllib  # pylint: disable=import-outside-toplevel
  with open(ROOT / "pyproject.toml", "rb") as f:
    package_dirs = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
  for name, folder in sorted(package_dirs.items(), key=lambda kv: kv[0].count(".")):
    if name == "twotower":
      continue
    spec = importlib.util.spec_from_file_location(
        name, ROOT / folder / "__init__.py", submodule_search_locations=[str(ROOT / folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    parent, _, child = name.rpartition(".")
    setattr(sys.modules[parent], child, module)
  logger.info("twotower read from the checkout %s", ROOT)


# ------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------


def _history_rows(path: str) -> list[dict]:
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8", newline="") as f:
    return [{k: float(v) if v not in ("", None) else None for k, v in row.items()}
            for row in csv.DictReader(f)]


def throughput(rows: list[dict], batch: int) -> float | None:
  """Examples/s between the first and the last history row (their `wall_seconds`): the
  first row's compilation left out; None with fewer than two rows."""
  timed = [r for r in rows if r.get("wall_seconds") is not None]
  if len(timed) < 2:
    return None
  first, last = timed[0], timed[-1]
  seconds = last["wall_seconds"] - first["wall_seconds"]
  return (last["step"] - first["step"]) * batch / seconds if seconds > 0 else None


def score(cfg, vocab: str, reqa: str, split: str, weights: tuple[str, str]):
  """(R@k / MRR of test-<split> over every candidate, the model) for the towers of `weights`
  (run dir, a JAX checkpoint of it): exact inner-product top-k (finetune.RecallAtK, which
  embeds with jax_train.JaxEncoders on JAX)."""
  # pylint: disable=import-outside-toplevel
  from twotower.core import contracts
  from twotower.model import finetune, h5_checkpoints
  from twotower.model.np_tokenizer import NumpyTokenizer
  from twotower.model.two_tower import build_two_tower
  m = cfg.model
  tokenizer = NumpyTokenizer.from_file(vocab, m.query_len, m.doc_len)
  model = build_two_tower(m, m.vocab_size or tokenizer.vocab_size, cfg.trainer.temperature)
  h5_checkpoints.init_towers_from_weights(model, *weights)
  questions = contracts.codecs.read_questions(reqa, f"{contracts.TEST_SIDE}-{split}")
  candidates = contracts.codecs.read_candidates(reqa)
  scorer = finetune.RecallAtK(tokenizer, questions, candidates, ks=KS)
  # R@k past the number of candidates is 1 by definition (every gold is ranked): kept, so
  # that a table always has its three columns.
  scorer.ks = KS
  scorer.set_model(model)
  result = {k.removeprefix("val_"): v for k, v in scorer.recall().items()}
  return {**result, "questions": len(questions), "candidates": len(candidates)}, model


def save_weights(model, out: str, part_mib: float) -> list[str]:
  """The towers' weights (by variable path) as float16 in one .npz, cut into parts of at
  most `part_mib` MiB: OUT/towers.npz.part-000, ... (`cat` them back together)."""
  import io  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  towers = model.towers_only()
  arrays = {w.path: np.asarray(w.numpy(), np.float16) for w in towers.weights}
  buffer = io.BytesIO()
  np.savez(buffer, **arrays)
  data = buffer.getvalue()
  size = max(1, int(part_mib * MIB))
  paths = []
  for i, start in enumerate(range(0, len(data), size)):
    path = os.path.join(out, f"towers.npz.part-{i:03d}")
    with open(path, "wb") as f:
      f.write(data[start:start + size])
    paths.append(path)
  return paths


def run(args) -> dict:
  # pylint: disable=import-outside-toplevel
  import jax
  from benchmarks.train_speed import train_flops_per_example
  from twotower.core import contracts
  from twotower.model import config as config_lib
  from twotower.model import finetune, h5_checkpoints, jax_launch, pretrain

  devices = jax.local_devices()
  accelerator = jax.default_backend() != "cpu"
  precision = args.precision if args.precision != "auto" else ("bf16" if accelerator else "f32")
  overrides = list(args.set) + [f"trainer.mixed_precision={precision == 'bf16'}",
                                "runtime.backend=jax"]
  cfg = config_lib.load(args.config, overrides)
  pairs, vocab, reqa = (args.pairs or os.path.join(args.data, "pairs"),
                        args.vocab or os.path.join(args.data, "vocab.txt"),
                        args.reqa or os.path.join(args.data, "reqa"))
  os.makedirs(args.out, exist_ok=True)
  pre_dir, ft_dir = os.path.join(args.work, "pretrain"), os.path.join(args.work, "finetune")
  for run_dir in (pre_dir, ft_dir):  # a fresh run: a finished one would resume as done
    if os.path.exists(run_dir):
      raise SystemExit(f"{run_dir} exists (an earlier run): give a fresh --work")
  progress = "epoch"
  logger.info("%d %s device(s) (%s), %s, preset %s", len(devices), jax.default_backend(),
              devices[0].device_kind, precision, args.config)

  started = time.perf_counter()
  pre = pretrain.run(pretrain.PretrainConfig(
      training=cfg, out=pre_dir, vocab=vocab, pairs=pairs, export=False, progress=progress,
      wall_budget_s=args.budget_s))
  pre_seconds = time.perf_counter() - started
  pre_rows = _history_rows(contracts.history_path(pre_dir))
  batch = cfg.data.batch_size
  flops = train_flops_per_example(cfg.model, batch)
  steady = throughput(pre_rows, batch)
  overall = pre.steps * batch / pre_rows[-1]["wall_seconds"] if pre_rows else None
  rate = steady or overall
  achieved = flops * rate if rate else None

  ft_steps = cfg.trainer.finetune_steps
  ft_cfg = config_lib.replace(cfg, trainer={
      "checkpoint_every": args.finetune_checkpoint_every or max(1, ft_steps // 8)})
  started = time.perf_counter()
  ft = finetune.run(finetune.FinetuneConfig(
      training=ft_cfg, out=ft_dir, vocab=vocab, init=pre_dir, reqa=reqa, split=args.split,
      select=args.select, export=False, progress=progress))
  ft_seconds = time.perf_counter() - started
  best = h5_checkpoints.weights_path(contracts.best_checkpoint_dir(ft_dir), ft.selected_step,
                                     "best")
  ft_weights = best if ft.select and os.path.exists(best) else h5_checkpoints.latest(
      contracts.checkpoint_dir(ft_dir))

  zero_shot, pre_model = score(cfg, vocab, reqa, args.split,
                               (pre_dir, h5_checkpoints.latest(contracts.checkpoint_dir(pre_dir))))
  finetuned, ft_model = score(ft_cfg, vocab, reqa, args.split, (ft_dir, ft_weights))
  del pre_model
  for name, run_dir in (("pretrain", pre_dir), ("finetune", ft_dir)):
    if os.path.exists(contracts.history_path(run_dir)):
      shutil.copyfile(contracts.history_path(run_dir),
                      os.path.join(args.out, f"{name}_history.csv"))
  weight_files = (save_weights(ft_model, args.out, args.weights_part_mib)
                  if args.save_weights else [])

  metrics = {
      "device": {"platform": jax.default_backend(), "kind": devices[0].device_kind,
                 "count": len(devices)},
      "config": args.config, "overrides": list(args.set), "precision": precision,
      "model": dataclasses.asdict(cfg.model), "parameters": int(ft_model.towers_only().count_params()),
      "budget_s": args.budget_s,
      "pretrain": {
          "steps": pre.steps, "schedule_steps": cfg.trainer.steps, "batch": batch,
          "stopped_by": "budget" if pre.steps < cfg.trainer.steps else "steps",
          "pairs_seen": pre.steps * batch, "seconds": round(pre_seconds, 2),
          "training_seconds": pre_rows[-1]["wall_seconds"] if pre_rows else None,
          "examples_per_s": steady, "examples_per_s_with_compile": overall,
          "flops_per_example": flops, "achieved_tflops": achieved / 1e12 if achieved else None,
          "peak_tflops": args.peak_tflops,
          "fraction_of_peak": achieved / (args.peak_tflops * 1e12) if achieved else None,
          "history": pre_rows},
      "finetune": {"split": args.split, "steps": ft.steps, "batch": ft_cfg.trainer.finetune_batch_size,
                   "pairs_seen": ft.steps * ft_cfg.trainer.finetune_batch_size,
                   "selected_step": ft.selected_step, "select": ft.select,
                   "seconds": round(ft_seconds, 2),
                   "history": _history_rows(contracts.history_path(ft_dir))},
      "test": {"split": f"{contracts.TEST_SIDE}-{args.split}",
               "questions": zero_shot.pop("questions"), "candidates": zero_shot.pop("candidates"),
               "zero_shot": zero_shot,
               "finetuned": {k: v for k, v in finetuned.items()
                             if k not in ("questions", "candidates")}},
      "weights": [os.path.basename(p) for p in weight_files],
      "formulas": {
          "pairs_seen": "pre-training steps x global batch",
          "examples_per_s": "pairs trained between the first and the last history row / "
                            "their wall_seconds apart (held-out batches, checkpoints in)",
          "achieved_flops": "train_flops_per_example (3 x forward: both towers' matmuls, "
                            "attention scores, in-batch logits) x examples_per_s"},
      "tensorflow_modules": jax_launch.loaded_tensorflow(),
  }
  with open(os.path.join(args.out, "metrics.json"), "w", encoding="utf-8") as f:
    json.dump(metrics, f, indent=1)
  table = format_table(metrics)
  with open(os.path.join(args.out, "table.md"), "w", encoding="utf-8") as f:
    f.write(table + "\n")
  print(table)
  return metrics


def _num(v, fmt: str) -> str:
  return "-" if v is None else format(v, fmt)


def format_table(m: dict) -> str:
  p, t = m["pretrain"], m["test"]
  lines = [
      f"device: {m['device']['count']} x {m['device']['kind']} ({m['device']['platform']}), "
      f"{m['precision']}; preset {m['config']} ({m['parameters'] / 1e6:.2f}M parameters)", "",
      "| pre-training | value |", "|---|---:|",
      f"| steps (schedule {p['schedule_steps']}, stopped by {p['stopped_by']}) | {p['steps']} |",
      f"| pairs seen | {p['pairs_seen']:,} |",
      f"| training seconds (budget {m['budget_s']:g}) | {_num(p['training_seconds'], '.1f')} |",
      f"| examples/s (between checkpoints) | {_num(p['examples_per_s'], ',.1f')} |",
      f"| examples/s (compilation included) | {_num(p['examples_per_s_with_compile'], ',.1f')} |",
      f"| GFLOP per example | {p['flops_per_example'] / 1e9:.3f} |",
      f"| achieved TFLOP/s | {_num(p['achieved_tflops'], '.4g')} |",
      f"| fraction of {p['peak_tflops']:g} TFLOP/s | "
      f"{_num(p['fraction_of_peak'] and 100 * p['fraction_of_peak'], '.3g')} % |",
      "", f"{t['split']}: {t['questions']} questions, {t['candidates']} candidates "
      "(exact top-k over all)", "",
      "| towers | " + " | ".join(f"R@{k}" for k in KS) + " | MRR |",
      "|---|" + "---:|" * (len(KS) + 1)]
  for name in ("zero_shot", "finetuned"):
    r = t[name]
    lines.append(f"| {name.replace('_', '-')} | " + " | ".join(
        f"{r[f'R@{k}']:.4f}" for k in KS) + f" | {r['MRR']:.4f} |")
  return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="accelerator_run", description=__doc__.split("\n\n")[0])
  p.add_argument("--pack", metavar="OUT",
                 help="write the wheels and the data into OUT, print its size, and stop")
  p.add_argument("--no_wheels", action="store_true",
                 help="--pack without downloading the wheels (data only)")
  p.add_argument("--python_version", default=TARGET_PYTHON,
                 help="--pack: the target machine's Python, for compiled wheels")
  p.add_argument("--max_mib", type=float, default=64.0,
                 help="--pack: fail when pack + working tree pass this many MiB")
  p.add_argument("--data", default="", help="a --pack folder (pairs/, vocab.txt, reqa/)")
  p.add_argument("--pairs", default="", help="pair pipeline output (default DATA/pairs)")
  p.add_argument("--vocab", default="", help="vocabulary (default DATA/vocab.txt)")
  p.add_argument("--reqa", default="", help="`twotower reqa` folder (default DATA/reqa)")
  p.add_argument("--split", default="80", help="the ReQA train ratio fine-tuned and scored")
  p.add_argument("--wheels", default="", help="install these wheels first (no index)")
  p.add_argument("--config", default="h200-6min", help="preset name or YAML file")
  p.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                 help="override one config field (repeatable)")
  p.add_argument("--budget_s", type=float, default=360.0,
                 help="wall seconds of pre-training (compilation included)")
  p.add_argument("--precision", choices=("auto", "bf16", "f32"), default="auto",
                 help="auto: bf16 mixed precision on an accelerator, float32 on CPU")
  p.add_argument("--select", default="R@100",
                 help="validation metric choosing the fine-tuned checkpoint (R@k or MRR)")
  p.add_argument("--finetune_checkpoint_every", type=int, default=0,
                 help="fine-tuning steps between validations (0: finetune_steps / 8)")
  p.add_argument("--peak_tflops", type=float, default=790.0,
                 help="the device's peak (H200 bf16: 790) for the fraction achieved")
  p.add_argument("--save_weights", action="store_true",
                 help="write the fine-tuned towers (float16 .npz in parts) to OUT")
  p.add_argument("--weights_part_mib", type=float, default=16.0,
                 help="largest weights part, MiB")
  p.add_argument("--work", default="/tmp/accelerator_run",
                 help="run folders and checkpoints (large; not OUT)")
  p.add_argument("--out", default="accelerator_run_out",
                 help="metrics.json, histories, table.md, weights")
  args = p.parse_args(argv)
  if not args.pack and not (args.data or (args.pairs and args.vocab and args.reqa)):
    p.error("give --data (a --pack folder) or --pairs, --vocab and --reqa")
  if args.pack and not (args.pairs and args.vocab and args.reqa):
    p.error("--pack needs --pairs, --vocab and --reqa")
  if args.budget_s <= 0:
    p.error("--budget_s must be > 0")
  return args


def main(argv: list[str] | None = None) -> int:
  args = parse(argv)
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
  if args.pack:
    return pack(args.pack, args.pairs, args.vocab, args.reqa, wheels=not args.no_wheels,
                python_version=args.python_version, max_mib=args.max_mib)
  if os.environ.setdefault("KERAS_BACKEND", "jax") != "jax":
    raise SystemExit(f"KERAS_BACKEND={os.environ['KERAS_BACKEND']}: this run trains on JAX")
  if args.wheels:
    install_wheels(args.wheels, os.path.join(args.work, "site"))
  import_checkout()
  from twotower.model import jax_launch  # pylint: disable=import-outside-toplevel
  jax_launch.keep_tensorflow_out()  # before Keras: KerasHub imports TensorFlow when it can
  run(args)
  return 0


if __name__ == "__main__":
  sys.exit(main())
