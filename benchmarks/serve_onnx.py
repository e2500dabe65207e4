"""`twotower serve` with the SavedModel query tower (TensorFlow) against the ONNX one
(onnxruntime, `twotower bundle --onnx`), on the same bundle, in one run.

  .venv/bin/python -m benchmarks.serve_onnx --bundle BUNDLE [--seconds 8] [--warmup 2] \
      [--concurrency 1,8]

BUNDLE must carry `query_onnx/`. Three servers, one after another, each in its own process
on a free loopback port:
  * tensorflow   `--encoder tensorflow` (every mode: today's service);
  * onnx         `--encoder onnx` (every mode: Lucene and its JVM still load for BM25);
  * onnx-dense   `--encoder onnx --modes dense` (no TensorFlow, PyTorch or JVM in the process).
For each: cold start (process start to /v1/ready), VmRSS after ready and after the load,
then dense queries at each concurrency for `--warmup` s (discarded) and `--seconds` s:
p50 latency and queries/s, non-2xx count (benchmarks.serve_load's client). Queries are the
bundle's ReQA questions. Client and server share this machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time

import httpx

from twotower.core import contracts
from twotower.core import logs
from twotower.testing import server as server_lib
from benchmarks import serve_load

SERVERS = (("tensorflow", ["--encoder", "tensorflow"]),
           ("onnx", ["--encoder", "onnx"]),
           ("onnx-dense", ["--encoder", "onnx", "--modes", "dense"]))


def _loaded_libraries(pid: int) -> str:
  """Which heavy runtimes the server process has mapped (its /proc maps)."""
  with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
    maps = f.read()
  found = [name for name, marker in (("TensorFlow", "libtensorflow"), ("PyTorch", "libtorch"),
                                     ("JVM", "libjvm"), ("onnxruntime", "onnxruntime"))
           if marker in maps]
  return ", ".join(found) or "none"


def bench(bundle: str, name: str, extra: list[str], args, queries: list[str]) -> dict:
  log = os.path.join(tempfile.gettempdir(), f"serve-onnx-{name}-{os.getpid()}.log")
  serve_args = ["--threads", str(args.threads), *extra]
  t0 = time.perf_counter()
  with server_lib.serve_subprocess(bundle, serve_args, log=log) as (base, process):
    cold = time.perf_counter() - t0
    rss_ready = serve_load._rss_mib(process.pid)  # pylint: disable=protected-access
    libraries = _loaded_libraries(process.pid)
    rows = [asyncio.run(serve_load._load(base, "dense", c, queries, args.warmup,  # pylint: disable=protected-access
                                         args.seconds, args.k))
            for c in args.concurrency]
    rss_loaded = serve_load._rss_mib(process.pid)  # pylint: disable=protected-access
    bm25 = httpx.post(f"{base}/v1/search", json={"query": queries[0], "mode": "bm25"}).status_code
  return {"name": name, "cold": cold, "rss_ready": rss_ready, "rss_loaded": rss_loaded,
          "rows": rows, "libraries": libraries, "bm25_status": bm25}


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--bundle", required=True)
  p.add_argument("--seconds", type=float, default=8.0)
  p.add_argument("--warmup", type=float, default=2.0)
  p.add_argument("--concurrency", type=lambda s: [int(c) for c in s.split(",")], default=[1, 8])
  p.add_argument("--threads", type=int, default=2)
  p.add_argument("--k", type=int, default=10)
  args = p.parse_args()
  logs.setup(verbose=False)
  bundle = args.bundle.rstrip("/")
  if not os.path.isdir(os.path.join(bundle, "query_onnx")):
    raise SystemExit(f"{bundle}: no query_onnx/ (build it with `twotower bundle ... --onnx`)")
  manifest = json.load(open(contracts.bundle_path(bundle, contracts.BUNDLE_MANIFEST_FILE)))
  queries = [q for _, q in serve_load._questions(manifest, 2000)]  # pylint: disable=protected-access
  results = [bench(bundle, name, extra, args, queries) for name, extra in SERVERS]
  head = " | ".join(f"dense p50 c{c} (ms) | q/s c{c}" for c in args.concurrency)
  print(f"\n{bundle}: {manifest['documents']['count']} documents; dense mode, k {args.k}, "
        f"{args.seconds:g} s per row, --threads {args.threads}\n")
  print(f"| server | cold start to ready (s) | RSS after ready (MiB) | RSS after load (MiB) | "
        f"{head} | non-2xx | runtimes mapped | bm25 request |")
  print("|---|---:|---:|---:|" + "---:|---:|" * len(args.concurrency) + "---:|---|---|")
  for r in results:
    cells = " | ".join(f"{row['p50']:.1f} | {row['qps']:.0f}" for row in r["rows"])
    bad = sum(row["non_2xx"] for row in r["rows"])
    print(f"| {r['name']} | {r['cold']:.1f} | {r['rss_ready']:.0f} | {r['rss_loaded']:.0f} | "
          f"{cells} | {bad} | {r['libraries']} | HTTP {r['bm25_status']} |")


if __name__ == "__main__":
  main()
