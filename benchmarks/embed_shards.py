"""`twotower embed` over one input in one process against the same input cut into N input
shards (`--num_input_shards N --input_shard i`) embedded by N processes at once, as N
machines would: wall time, rows/s and their ratio, CPU seconds of the processes, and a check
that the shards' union holds the unsharded run's ids.

  .venv/bin/python -m benchmarks.embed_shards [--rows 20000] [--shards 2] [--model PATH]

Inputs: the synthetic candidates of benchmarks.embed_throughput; model: its stand-in BoW-MLP
SavedModel unless --model names a real export. Each run is a fresh `python -m twotower.cli
embed` process (DirectRunner, one worker), so the times include what a machine pays per
shard: starting Python, importing TensorFlow and Beam, loading the model. Every shard reads
the whole input, digests every row of it (its input's content digest, pipelines.embed) and
keeps its own rows (pipelines.embed.row_shard), so the speed-up is below N by the reading,
digesting and start-up a shard cannot split; on one machine the N processes also share its
cores (this benchmark says how many there are and the load average). What the digests cost
is also timed on their own, in this process: microseconds a row for the whole input's digest
(every shard pays it for every row) and for the digest of the rows embedded.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time

from benchmarks import embed_throughput

logger = logging.getLogger(__name__)


def _children_cpu() -> float:
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def embed_processes(model: str, candidates: str, outs: list[str], batch_size: int
                    ) -> tuple[float, float]:
  """Runs one `twotower embed` process per folder of `outs` (input shard i of len(outs)
  into outs[i]; one folder: unsharded), all at once; (wall seconds, CPU seconds)."""
  n = len(outs)
  cpu0, t0 = _children_cpu(), time.perf_counter()
  procs = []
  for i, out in enumerate(outs):
    shard = ("--num_input_shards", str(n), "--input_shard", str(i)) if n > 1 else ()
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "twotower.cli", "embed", "--model", model, "--candidates",
         candidates, "--out", out, "--batch_size", str(batch_size), *shard],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
  for proc in procs:
    log, _ = proc.communicate()
    if proc.returncode:
      raise RuntimeError(f"embed exited {proc.returncode}: {log[-2000:]}")
  return time.perf_counter() - t0, _children_cpu() - cpu0


def union_ids(outs: list[str]) -> list[int]:
  from twotower.core import fingerprints  # pylint: disable=import-outside-toplevel
  from twotower.eval import embeddings  # pylint: disable=import-outside-toplevel
  return sorted(fingerprints.file_ids(embeddings.embedding_files(",".join(outs))).tolist())


def digest_seconds(candidates: str) -> tuple[float, float, int]:
  """(seconds for the input digest, seconds for the digest of the rows embedded, rows) of
  `candidates`, computed as the job computes them (pipelines.embed), rows already read."""
  import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
  from twotower.pipelines import embed  # pylint: disable=import-outside-toplevel
  spec = embed.input_spec("candidates", candidates)
  rows = pq.read_table(candidates, columns=list(spec.columns)).to_pylist()
  t0 = time.perf_counter()
  embed.input_digest(spec, rows)
  t1 = time.perf_counter()
  embed.example_digests(spec, rows)
  return t1 - t0, time.perf_counter() - t1, len(rows)


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--rows", type=int, default=20_000)
  p.add_argument("--shards", type=int, default=2, help="input shards, embedded at once")
  p.add_argument("--batch_size", type=int, default=256)
  p.add_argument("--model", default=None, help="a real export (default: the stand-in)")
  p.add_argument("--standin_hidden", type=int, default=256,
                 help="width of the stand-in's tanh layers (its cost per document)")
  args = p.parse_args(argv)
  logging.basicConfig(level=logging.WARNING)
  with tempfile.TemporaryDirectory() as tmp:
    model, candidates = embed_throughput.model_and_candidates(tmp, args.model,
                                                              args.standin_hidden, args.rows)
    load = os.getloadavg()[0]
    single = [os.path.join(tmp, "single")]
    sharded = [os.path.join(tmp, f"shard-{i}") for i in range(args.shards)]
    one_wall, one_cpu = embed_processes(model, candidates, single, args.batch_size)
    n_wall, n_cpu = embed_processes(model, candidates, sharded, args.batch_size)
    same = union_ids(single) == union_ids(sharded)
    input_s, examples_s, digested = digest_seconds(candidates)
  rows = args.rows
  what = (f"stand-in BoW-MLP d=128 hidden={args.standin_hidden}" if args.model is None
          else args.model)
  print(f"\n`twotower embed`, {rows:,} synthetic candidates, model {what}, batch "
        f"{args.batch_size}; {os.cpu_count()} cores, load average {load:.1f} at the start; "
        f"union of the shards' ids == the single run's: {same}")
  print("| run | processes | wall s | rows/s | CPU s (all processes) | rows/s vs 1 |")
  print("|---|---|---|---|---|---|")
  print(f"| unsharded | 1 | {one_wall:.1f} | {rows / one_wall:,.0f} | {one_cpu:.1f} | 1.00 |")
  print(f"| {args.shards} input shards at once | {args.shards} | {n_wall:.1f} | "
        f"{rows / n_wall:,.0f} | {n_cpu:.1f} | {one_wall / n_wall:.2f} |")
  per_row = lambda s: s / max(digested, 1) * 1e6  # noqa: E731
  print(f"\ndigests, in this process over {digested:,} rows: the input's {per_row(input_s):.1f} "
        f"us/row (each shard, every row), the rows embedded {per_row(examples_s):.1f} us/row "
        "(the row's layout included)")


if __name__ == "__main__":
  main()
