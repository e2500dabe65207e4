"""Every benchmark by name: list them, run one, or run all of them at a quick setting.

  .venv/bin/python -m benchmarks --list           # name, what it compares, its quick setting
  .venv/bin/python -m benchmarks                  # all, each at its quick setting (`make bench`)
  .venv/bin/python -m benchmarks NAME [ARGS...]   # one, with its own defaults or ARGS
                                                  # (= python -m benchmarks.NAME ARGS...)

Each benchmark runs as `python -m benchmarks.NAME` in a child process, one after another, so
its memory and its timings are its own. The quick settings are small versions of the
documented runs (the figures in README.md come from the full ones in each module's
docstring): they check that every benchmark runs and prints its table, in about 10 to 15
minutes on 2 cores. A benchmark whose input is absent (../shared/data, or a bundle it must be
given) is reported as skipped with the reason; one that fails makes the exit status 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import subprocess
import sys
import time

SHARED_DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
SLICE = SHARED_DATA / "wiki" / "enwiki-slice-pages-articles.xml.bz2"
SQUAD = SHARED_DATA / "squad" / "train-subset-v1.1.json"


@dataclasses.dataclass(frozen=True)
class Benchmark:
  compares: str
  #: Arguments of the quick run (`python -m benchmarks` with no name).
  quick: tuple[str, ...] = ()
  #: A file the default run reads, and the flag that replaces it (given: no check).
  needs: pathlib.Path | None = None
  needs_flag: str = ""
  #: Flags without a default: the quick run is skipped, a named run needs them.
  required: str = ""


BENCHMARKS = {
    "parse_floor": Benchmark(
        "our wikitext cleaning vs mwparserfromhell parse + strip_code",
        needs=SLICE, needs_flag="--dump"),
    "pipeline_vs_floor": Benchmark(
        "the whole `pairs` pipeline vs stream + parse + strip_code; peak memory",
        needs=SLICE, needs_flag="--dump"),
    "portable_runner": Benchmark(
        "`pairs` on DirectRunner (1, 2 workers) vs PortableRunner + a 2-worker pool: wall, "
        "CPU, peak RSS; then `embed` in 1 process vs 2 input shards: rows/s",
        quick=("--corpus_docs", "500", "--embed_rows", "2000"), needs=SLICE,
        needs_flag="--dump"),
    "hostile_dump": Benchmark(
        "`pairs` peak memory on a whitespace-bomb dump vs on the slice",
        quick=("--whitespace_gb", "0.2"), needs=SLICE, needs_flag="--dump"),
    "link_recovery": Benchmark(
        "links recovered from titles in text vs the real links; precision/recall vs naive",
        needs=SLICE, needs_flag="--dumps"),
    "bm25_speed": Benchmark(
        "Pyserini search one query at a time vs batched multi-threaded",
        quick=("--queries", "300", "--repeats", "1"), needs=SQUAD, needs_flag="--squad"),
    "train_speed": Benchmark(
        "training examples/s, real input pipeline vs cached batches; FLOP/s vs roofline",
        quick=("--only", "cpu-small", "--steps", "4", "--rounds", "1")),
    "tokenizer_packing": Benchmark(
        "the tokenizer's packing as one gather vs tensorflow-text's trimmer + combiner + "
        "padder: graph ops, trace seconds, rows/s, equal ids",
        quick=("--batches", "4", "--rounds", "1")),
    "grad_cache": Benchmark(
        "gradient-cached train step vs direct: peak RSS and examples/s",
        quick=("--batches", "64,128", "--direct_batches", "64", "--ratio_batches", "64",
               "--steps", "2")),
    "embed_throughput": Benchmark(
        "Beam embedding job vs a direct SavedModel loop",
        quick=("--rows", "2000", "--settings", "in_memory:1:256")),
    "embed_shards": Benchmark(
        "`embed` in one process vs 2 input shards embedded at once: rows/s, wall, ratio",
        quick=("--rows", "2000", "--shards", "2")),
    "faiss_ann": Benchmark(
        "IVF / HNSW / IVF-PQ Recall@100 and queries/s vs flat",
        quick=("--n", "20000", "--sets", "clustered", "--queries", "200", "--nlist", "128",
               "--hnsw_n", "5000",
               "--ef_search", "64")),
    "faiss_rerank": Benchmark(
        "memory, recall and speed of flat, IVF-Flat, IVF-PQ and re-ranked IVF-PQ",
        quick=("--n", "20000", "--queries", "200", "--single", "50", "--train_size", "20000",
               "--files", "4")),
    "serve_load": Benchmark(
        "`twotower serve` under load over loopback vs the in-process API and the batch path",
        required="--bundle DIR (a `twotower bundle` output, e.g. runs/demo/bundle)"),
    "serve_equivalence": Benchmark(
        "a bundle's answers vs the batch path (embed + search, bm25, fuse)",
        required="--bundle DIR --model RUN --reqa DIR"),
    "export_equality": Benchmark(
        "`twotower export-hf` vs the SavedModel: token ids, embeddings, Recall@k",
        required="--run RUN (a trained run; --reqa DIR adds Recall@k)"),
    "serve_onnx": Benchmark(
        "`twotower serve` with the ONNX query tower vs TensorFlow: cold start, RSS, p50, q/s",
        required="--bundle DIR (a `twotower bundle ... --onnx` output)"),
    "filtered_search": Benchmark(
        "filtered vs unfiltered search (FAISS flat / IVF / HNSW / IVF-PQ, BM25, hybrid) against "
        "brute force by selectivity; `bundle update` vs a rebuild; the hybrid service's RSS "
        "and time to ready with and without Pyserini's PyTorch import",
        quick=("--n", "20000", "--filters", "100", "--bm25_docs", "2000", "--update_docs",
               "2000", "--service_repeats", "1")),
    "bundle_verify": Benchmark(
        "a bundle's load-time check: --verify size vs sha256, next to importing TensorFlow "
        "(BUNDLE ...) or to reading an index and store of N documents (--synthetic N)",
        quick=("--synthetic", "20000", "--repeats", "2")),
    "beir_stage": Benchmark(
        "`twotower beir --systems bm25-flat` on a generated BEIR corpus: the reader's peak RSS "
        "vs the corpus bytes; seconds per document at N/10 vs N",
        quick=("--docs", "20000", "--queries", "200")),
    "accelerator_run": Benchmark(
        "pre-training on JAX for a wall budget, fine-tuning, test R@1/10/100 zero-shot and "
        "fine-tuned; examples/s, achieved FLOP/s against a peak (the prepared H200 run; "
        "--pack OUT collects its wheels and data)",
        required="--data DIR (an `accelerator_run --pack` folder) or --pairs DIR --vocab FILE "
                 "--reqa DIR"),
    "moco_spread": Benchmark(
        "MoCo queues vs in-batch negatives from random weights: embedding spread, accuracy",
        required="--pairs DIR (crop pairs, e.g. a grid's pairs/wiki+crop-*) --vocab FILE"),
}


def skip_reason(name: str, args: list[str]) -> str:
  """Why NAME cannot run with ARGS here ('' when it can)."""
  b = BENCHMARKS[name]
  if b.required and not args:
    return f"needs {b.required}"
  if b.needs is not None and b.needs_flag not in args and not b.needs.exists():
    return f"{b.needs} is absent (pass {b.needs_flag} FILE)"
  return ""


def run_one(name: str, args: list[str]) -> tuple[str, float]:
  """Runs NAME in a child process: ('ok' | 'failed (exit N)' | 'skipped: why', seconds)."""
  reason = skip_reason(name, args)
  if reason:
    print(f"== {name}: skipped, {reason}", flush=True)
    return f"skipped: {reason}", 0.0
  cmd = [sys.executable, "-m", f"benchmarks.{name}", *args]
  print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
  start = time.monotonic()
  rc = subprocess.call(cmd, cwd=pathlib.Path(__file__).resolve().parents[1])
  return ("ok" if rc == 0 else f"failed (exit {rc})"), time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  p = argparse.ArgumentParser(
      prog="python -m benchmarks", description=__doc__.split("\n\n")[0],
      epilog="benchmarks: " + ", ".join(BENCHMARKS) + ". `python -m benchmarks NAME --help` "
      "gives one benchmark's flags.")
  p.add_argument("--list", action="store_true", help="list the benchmarks and stop")
  p.add_argument("name", nargs="?", choices=list(BENCHMARKS), metavar="NAME",
                 help="run this benchmark only; later arguments go to it")
  # Everything after NAME is the benchmark's own (its --help included).
  head = next((i for i, a in enumerate(argv) if not a.startswith("-")), len(argv))
  args = p.parse_args(argv[:head + 1])
  rest = argv[head + 1:]
  if args.list:
    width = max(map(len, BENCHMARKS))
    for name, b in BENCHMARKS.items():
      quick = " ".join(b.quick) or ("(its defaults)" if not b.required else "-")
      print(f"{name:<{width}}  {b.compares}\n{'':<{width}}  quick: {quick}")
      reason = skip_reason(name, [])
      if reason:
        print(f"{'':<{width}}  skipped unless given: {reason}")
    return 0
  if args.name:
    status, _ = run_one(args.name, rest)
    return 0 if not status.startswith("failed") else 1
  results = {name: run_one(name, list(b.quick)) for name, b in BENCHMARKS.items()}
  print("\n| benchmark | quick run | seconds |\n|---|---|---:|")
  for name, (status, seconds) in results.items():
    print(f"| {name} | {status} | {seconds:.0f} |")
  return 1 if any(s.startswith("failed") for s, _ in results.values()) else 0


if __name__ == "__main__":
  sys.exit(main())
