"""`twotower pairs` on the DirectRunner (1 and 2 workers) vs Beam's portable path (job service +
a worker pool, 2 SDK workers), on the slice and on the WikiExtractor corpus.

    .venv/bin/python -m benchmarks.portable_runner                        # slice + whole corpus
    .venv/bin/python -m benchmarks.portable_runner --corpus_docs 2000     # its first 2000 docs

Runs, each `python -m twotower.pipelines.wiki.pairs` in a child process as a user runs it:

* direct-1: DirectRunner (the local FnApiRunner), one process;
* direct-2: `--direct_running_mode=multi_processing --direct_num_workers=2`;
* portable-2: `--runner=PortableRunner` through `twotower runner`'s job service and worker
  pool on 127.0.0.1 (deploy.portable.launcher), 2 SDK workers; the services are started
  before the run (their start-up is printed apart) and stopped after it.

Measured per run: wall seconds of the command; CPU seconds of the command and every process
it started, plus, for the portable path, of the job service and the worker pool with the
workers it started (/proc: utime + stime + cutime + cstime of each, exited workers included,
before vs after, once no worker runs); peak RSS of all
those processes together, sampled from /proc every 0.2 s (pipeline_vs_floor._TreeMemory).
Ratios are against direct-1. Each run's stats.json is checked equal to direct-1's (the same
counters). The portable path's joins are Beam's GroupByKey (`--shuffle=auto` picks the disk
shuffle only on the local runner), as on a cluster.

Then, the other way work leaves one process: `embed` in one process vs 2 input shards
embedded at once (benchmarks.embed_shards, `--embed_rows`; 0 skips it).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

from benchmarks.pipeline_vs_floor import DEFAULT_CORPUS, DEFAULT_DUMP, corpus_slice, measure

CONFIGS = ("direct-1", "direct-2", "portable-2")


def _cpu_of(pid: int) -> float:
  """CPU seconds of a process and of the children it has waited for (/proc); 0 for one
  gone (a child reaped meanwhile: its CPU is in its parent's)."""
  try:
    with open(f"/proc/{pid}/stat", "rb") as f:
      fields = f.read().rsplit(b")", 1)[1].split()
  except OSError:
    return 0.0
  ticks = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
  return ticks / os.sysconf("SC_CLK_TCK")


def _descendants(pids: tuple[int, ...]) -> list[tuple[int, str]]:
  """(pid, state) of every process below `pids` (/proc), zombies included."""
  parents: dict[int, tuple[int, str]] = {}
  for entry in os.listdir("/proc"):
    if entry.isdigit():
      try:
        with open(f"/proc/{entry}/stat", "rb") as f:
          fields = f.read().rsplit(b")", 1)[1].split()
        parents[int(entry)] = (int(fields[1]), fields[0].decode())
      except (OSError, ValueError, IndexError):
        continue
  found, frontier = [], list(pids)
  while frontier:
    parent = frontier.pop()
    for pid, (ppid, state) in parents.items():
      if ppid == parent:
        found.append((pid, state))
        frontier.append(pid)
  return found


def _settled_cpu(services: tuple[int, ...], timeout_s: float = 60.0) -> float:
  """CPU seconds of the services and every process below them, once the job's SDK workers
  have exited: a worker the pool has reaped counts in the pool's cutime, one not reaped yet
  in its zombie's /proc entry (Beam's own pool never reaps them; the launcher's does)."""
  deadline = time.monotonic() + timeout_s
  while (any(state != "Z" for _, state in _descendants(services))
         and time.monotonic() < deadline):
    time.sleep(0.2)
  return sum(_cpu_of(pid) for pid in (*services, *(p for p, _ in _descendants(services))))


def run_pairs(dump: str, out: str, beam_args: list[str], services: tuple[int, ...] = ()) -> dict:
  """One pairs run in a child process: wall, CPU (its processes + `services`), peak RSS."""
  command = [sys.executable, "-m", "twotower.pipelines.wiki.pairs", "--dump", dump, "--out", out,
             "--overwrite", *beam_args]
  services_before = _settled_cpu(services)
  run = measure(command, also=services)
  # The services' own CPU (the job service, the pool and the workers it started and reaped).
  run["cpu"] += _settled_cpu(services) - services_before
  with open(os.path.join(out, "stats.json"), encoding="utf-8") as f:
    run["stats"] = json.load(f)
  return run


def run_config(config: str, dump: str, out: str, work: str) -> dict:
  if config == "direct-1":
    return run_pairs(dump, out, [])
  if config == "direct-2":
    return run_pairs(dump, out, ["--direct_running_mode=multi_processing",
                                 "--direct_num_workers=2"])
  from twotower.deploy.portable import launcher  # pylint: disable=import-outside-toplevel
  state = os.path.join(work, "runner")
  start = time.perf_counter()
  services = launcher.start(launcher.RunnerConfig(state_dir=state, job_port=0, worker_port=0,
                                                  workers=2))
  started = time.perf_counter() - start
  try:
    result = run_pairs(dump, out, list(services.beam_args()),
                       tuple(services.pids.values()))
  finally:
    launcher.stop(state)
  result["services_start_s"] = started
  return result


def table(name: str, results: dict) -> str:
  base = results["direct-1"]
  lines = [f"\n{name}", "| run | wall s | CPU s | peak RSS MB | wall x | CPU x | RSS x | "
           "same stats.json | load 1-min |", "|---|---:|---:|---:|---:|---:|---:|---|---|"]
  for config, r in results.items():
    lines.append(
        f"| {config} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['peak_mb']:.0f} | "
        f"{r['wall'] / base['wall']:.2f} | {r['cpu'] / base['cpu']:.2f} | "
        f"{r['peak_mb'] / base['peak_mb']:.2f} | "
        f"{'yes' if r['stats'] == base['stats'] else 'NO'} | "
        f"{r['load'][0]:.1f} -> {r['load'][1]:.1f} |")
  portable = results.get("portable-2")
  if portable:
    lines.append(f"(portable-2: job service + worker pool up in "
                 f"{portable['services_start_s']:.1f} s, not in its wall)")
  return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(prog="python -m benchmarks.portable_runner",
                              description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument("--dump", default=str(DEFAULT_DUMP), help="a pages-articles dump ('' = none)")
  p.add_argument("--corpus", default=str(DEFAULT_CORPUS),
                 help="a WikiExtractor text file ('' = none)")
  p.add_argument("--corpus_docs", type=int, default=0,
                 help="only the corpus' first N documents (0 = all; written to --work)")
  p.add_argument("--configs", default=",".join(CONFIGS), help="runs, of " + ", ".join(CONFIGS))
  p.add_argument("--work", default="", help="work folder (default: a temporary one)")
  p.add_argument("--embed_rows", type=int, default=20_000,
                 help="then `embed` in one process vs 2 input shards at once on this many "
                      "rows (benchmarks.embed_shards; 0 = skip)")
  args = p.parse_args(argv)
  configs = [c for c in args.configs.split(",") if c]
  if "direct-1" not in configs:
    p.error("--configs must include direct-1 (the ratios' base)")
  work = args.work or tempfile.mkdtemp(prefix="bench-portable-")
  os.makedirs(work, exist_ok=True)
  inputs = []
  if args.dump:
    inputs.append((f"slice: {pathlib.Path(args.dump).name}", args.dump))
  if args.corpus:
    corpus = args.corpus
    if args.corpus_docs:
      corpus = os.path.join(work, f"corpus-{args.corpus_docs}.txt.bz2")
      if not os.path.exists(corpus):
        corpus_slice(args.corpus, corpus, args.corpus_docs)
    docs = f"first {args.corpus_docs} documents" if args.corpus_docs else "all documents"
    inputs.append((f"corpus: {pathlib.Path(args.corpus).name}, {docs}", corpus))
  print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at start; work {work}",
        flush=True)
  for name, path in inputs:
    results = {}
    for config in configs:
      out = os.path.join(work, f"out-{len(results)}-{config}-{abs(hash(name)) % 10**6}")
      results[config] = run_config(config, path, out, work)
      print(f"  {name} {config}: {results[config]['wall']:.1f} s", flush=True)
    print(table(name, results), flush=True)
  if args.embed_rows:  # the other way work leaves one process: embedding in input shards
    from benchmarks import embed_shards  # pylint: disable=import-outside-toplevel
    embed_shards.main(["--rows", str(args.embed_rows), "--shards", "2"])


if __name__ == "__main__":
  main()
