"""`twotower serve` under load over loopback, against the in-process API and the batch path.

  .venv/bin/python -m benchmarks.serve_load --bundle runs/demo/bundle \
      --bundle runs/squad-bundle [--seconds 8] [--warmup 2] [--concurrency 1,2,4,8]

For each bundle: `twotower serve BUNDLE --threads T` starts in its own process on a free
loopback port (cold start: seconds to /v1/ready, then the first request against the steady
p50); an httpx client (asyncio, C connections, each sending its next request when the last
answered) runs each mode at each concurrency for `--warmup` seconds (discarded) and then
`--seconds` seconds: p50 / p95 / p99 latency, queries/s, non-2xx count. Then, in the same run:
  * the in-process API (`Retriever.search`, one query per call) p50 per mode: HTTP p50 / API
    p50 is what the service adds;
  * queries/s at the highest concurrency / at 1: what micro-batching buys;
  * the batch path's cost per query over the same questions (`twotower embed` + `search`
    for dense, `twotower bm25`'s batch search for BM25, both + `fuse` for the hybrid),
    against the service's per-query time at the highest concurrency;
  * resident memory of the server (VmRSS after load) against the bundle's parts on disk;
  * a bundle swap under load (--swap: two swaps during a hybrid run at concurrency 4): its
    non-2xx count must be 0.
Queries are the questions of the bundle's ReQA directory (`questions-all.parquet`, when the
bundle was built from one) or the passages' first sentences, cycled. The client runs on the
same cores as the server: the numbers are for this machine with both on it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import statistics
import tempfile
import time

import httpx
import numpy as np

from twotower.core import contracts
from twotower.core import logs
from twotower.testing import server as server_lib

MODES = ("dense", "bm25", "hybrid")


def _questions(manifest: dict, n: int) -> list[tuple[str, str]]:
  from twotower.core.contracts import codecs  # pylint: disable=import-outside-toplevel
  source = manifest["documents"]["source"]
  if manifest["documents"]["kind"] == "candidates":
    qs = codecs.read_questions(source, contracts.ALL_QUESTIONS)
    return [(q.question_id, q.question) for q in qs[:n]]
  out = []
  for p in codecs.read_passages(contracts.passages_pattern(source)):
    if p.sentences:
      out.append((f"{p.page_id}-{p.passage_id}", p.sentences[0][:300]))
    if len(out) == n:
      break
  return out


def _percentiles(latencies: list[float]) -> tuple[float, float, float]:
  a = np.asarray(latencies) * 1000
  return tuple(float(np.percentile(a, q)) for q in (50, 95, 99))  # type: ignore[return-value]


async def _load(base: str, mode: str, concurrency: int, queries: list[str], warmup: float,
                seconds: float, k: int, during=None) -> dict:
  """C clients, each looping until the deadline; latencies after `warmup` are kept."""
  latencies: list[float] = []
  bad = 0
  start = time.perf_counter()
  measure_from, stop = start + warmup, start + warmup + seconds
  counter = iter(range(10**9))

  async def client(http: httpx.AsyncClient):
    nonlocal bad
    while True:
      t0 = time.perf_counter()
      if t0 >= stop:
        return
      q = queries[next(counter) % len(queries)]
      response = await http.post("/v1/search", json={"query": q, "k": k, "mode": mode})
      t1 = time.perf_counter()
      if t0 >= measure_from:
        latencies.append(t1 - t0)
        bad += response.status_code // 100 != 2

  limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
  async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as http:
    tasks = [asyncio.create_task(client(http)) for _ in range(concurrency)]
    if during is not None:
      await during(http)
    await asyncio.gather(*tasks)
  p50, p95, p99 = _percentiles(latencies)
  return {"mode": mode, "c": concurrency, "n": len(latencies), "qps": len(latencies) / seconds,
          "p50": p50, "p95": p95, "p99": p99, "non_2xx": bad}


def _rss_mib(pid: int) -> float:
  with open(f"/proc/{pid}/status", encoding="ascii") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) / 1024
  return float("nan")


def _part_sizes(manifest: dict) -> dict[str, float]:
  sizes: dict[str, float] = {}
  for rel, meta in manifest["files"].items():
    part = rel.split(os.sep, 1)[0]
    sizes[part] = sizes.get(part, 0.0) + meta["bytes"] / 2**20
  return sizes


def _in_process_p50(bundle: str, queries: list[str], k: int, n: int) -> dict[str, float]:
  from twotower.deploy.serving import Retriever  # pylint: disable=import-outside-toplevel
  retriever = Retriever.load(bundle)
  try:
    retriever.warm_up()
    out = {}
    for mode in MODES:
      times = []
      for q in queries[:n]:
        t0 = time.perf_counter()
        retriever.search(q, k=k, mode=mode)
        times.append(time.perf_counter() - t0)
      out[mode] = statistics.median(times) * 1000
    return out
  finally:
    retriever.close()


def _batch_path_per_query(bundle: str, manifest: dict, n: int, k: int) -> dict[str, float]:
  """Milliseconds per query of the batch stages over `n` questions of the bundle's ReQA dir
  (embed questions with Beam + FAISS search; BM25 batch search; fusion)."""
  from twotower.core import lucene  # pylint: disable=import-outside-toplevel
  from twotower.eval import fusion  # pylint: disable=import-outside-toplevel
  from twotower.eval import search as search_stage  # pylint: disable=import-outside-toplevel
  from twotower.eval.runs import read_run  # pylint: disable=import-outside-toplevel
  from twotower.pipelines import embed  # pylint: disable=import-outside-toplevel
  import pyarrow as pa  # pylint: disable=import-outside-toplevel
  import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
  questions = _questions(manifest, n)
  with tempfile.TemporaryDirectory() as tmp:
    qfile = os.path.join(tmp, "questions.parquet")
    pq.write_table(pa.Table.from_pylist(
        [{"question_id": i, "question": q, "gold_candidate_ids": []} for i, q in questions],
        schema=contracts.QUESTION_SCHEMA), qfile)
    model = contracts.bundle_path(bundle, contracts.BUNDLE_QUERY_ENCODER_DIR)
    t0 = time.perf_counter()
    embed.run(embed.EmbedConfig(model=model, out=os.path.join(tmp, "q"), kind="questions",
                                path=qfile))
    search_stage.run(search_stage.SearchConfig(
        index=contracts.bundle_path(bundle, contracts.BUNDLE_INDEX_FILE),
        queries=os.path.join(tmp, "q"), out=os.path.join(tmp, "dense.parquet"), k=k))
    dense_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    sparse = lucene.search(contracts.bundle_path(bundle, contracts.BUNDLE_LUCENE_DIR),
                           questions, manifest["bm25"]["k1"], manifest["bm25"]["b"], k,
                           os.cpu_count() or 1, 1000, progress=False)
    bm25_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fusion.interpolate(sparse, read_run(os.path.join(tmp, "dense.parquet")),
                       manifest["hybrid"]["weight"], k)
    fuse_s = time.perf_counter() - t0
  per = lambda s: s / len(questions) * 1000  # noqa: E731
  return {"dense": per(dense_s), "bm25": per(bm25_s), "hybrid": per(dense_s + bm25_s + fuse_s),
          "questions": len(questions)}


def bench_bundle(bundle: str, args: argparse.Namespace) -> None:
  manifest = json.load(open(contracts.bundle_path(bundle, contracts.BUNDLE_MANIFEST_FILE)))
  queries = [q for _, q in _questions(manifest, 2000)]
  concurrency = [int(c) for c in args.concurrency.split(",")]
  swap_copy = None
  # Swaps: a token for this run, and any folder as the swap root (the copy is a temp dir).
  token = secrets.token_urlsafe(32)
  os.environ["TWOTOWER_ADMIN_TOKEN"] = token  # read by the server subprocess
  serve_args = ["--threads", str(args.threads)] + (
      ["--allow_swap", "--swap_root", "/", "--show_paths"] if args.swap else [])
  log = os.path.join(tempfile.gettempdir(), f"serve-load-{os.getpid()}.log")
  t0 = time.perf_counter()
  with server_lib.serve_subprocess(bundle, serve_args, log=log) as (base, process):
    cold = time.perf_counter() - t0
    with httpx.Client(base_url=base, timeout=60) as http:  # made before: its set-up is not
      t1 = time.perf_counter()                            # the server's first request
      first = http.post("/v1/search", json={"query": queries[0], "k": args.k, "mode": "hybrid"})
      first_ms = (time.perf_counter() - t1) * 1000
    assert first.status_code == 200, first.text
    rss_ready = _rss_mib(process.pid)
    rows = [asyncio.run(_load(base, m, c, queries, args.warmup, args.seconds, args.k))
            for m in MODES for c in concurrency]
    rss_loaded = _rss_mib(process.pid)
    swap_row = None
    if args.swap:
      swap_copy = tempfile.mkdtemp(prefix="swap-bundle-")
      shutil.copytree(bundle, os.path.join(swap_copy, "b"))

      async def swap_twice(http: httpx.AsyncClient):
        for target in (os.path.join(swap_copy, "b"), bundle):
          await asyncio.sleep(args.seconds / 3)
          r = await http.post("/v1/admin/swap", json={"bundle": target}, timeout=300,
                              headers={"authorization": f"Bearer {token}"})
          assert r.status_code == 200, r.text

      swap_row = asyncio.run(_load(base, "hybrid", 4, queries, args.warmup, args.seconds,
                                   args.k, during=swap_twice))
    info = httpx.get(f"{base}/v1/info").json()
  if swap_copy:
    shutil.rmtree(swap_copy, ignore_errors=True)
  api = _in_process_p50(bundle, queries, args.k, args.api_queries)
  batch = _batch_path_per_query(bundle, manifest, args.batch_queries, args.k)

  print(f"\n## {bundle}: {manifest['documents']['count']} documents, dim "
        f"{manifest['model']['embedding_dim']}, {manifest['index']['factory']}, top {args.k}, "
        f"server --threads {args.threads}, {os.cpu_count()} cores (client on the same cores)")
  print(f"cold start: ready after {cold:.1f} s; first request {first_ms:.1f} ms")
  print(f"{'mode':<7} {'c':>2} {'requests':>8} {'q/s':>7} {'p50 ms':>7} {'p95 ms':>7} "
        f"{'p99 ms':>7} {'non-2xx':>7}")
  for r in rows:
    print(f"{r['mode']:<7} {r['c']:>2} {r['n']:>8} {r['qps']:>7.1f} {r['p50']:>7.1f} "
          f"{r['p95']:>7.1f} {r['p99']:>7.1f} {r['non_2xx']:>7}")
  hi = max(concurrency)
  print(f"{'mode':<7} {'HTTP p50 / API p50':>20} {f'q/s c{hi} / c1':>12} "
        f"{'service / batch per query':>26}")
  for m in MODES:
    one = next(r for r in rows if r["mode"] == m and r["c"] == 1)
    top = next(r for r in rows if r["mode"] == m and r["c"] == hi)
    service_per_query = 1000 / top["qps"]
    print(f"{m:<7} {one['p50']:>8.1f} / {api[m]:>5.1f} = {one['p50'] / api[m]:4.2f}x "
          f"{top['qps'] / one['qps']:>11.2f}x {service_per_query:>8.2f} / {batch[m]:>6.2f} ms "
          f"= {service_per_query / batch[m]:5.1f}x")
  steady = next(r for r in rows if r["mode"] == "hybrid" and r["c"] == 1)["p50"]
  print(f"first request after ready / steady hybrid p50: {first_ms / steady:.2f}x")
  parts = _part_sizes(manifest)
  print("server RSS: {:.0f} MiB after ready, {:.0f} MiB after load; bundle on disk {:.1f} MiB "
        "({})".format(rss_ready, rss_loaded, sum(parts.values()),
                      ", ".join(f"{k} {v:.1f}" for k, v in sorted(parts.items()))))
  print(f"batching: {info['batching']}")
  if swap_row:
    print(f"bundle swap x2 under load (hybrid, c4): {swap_row['n']} requests, "
          f"{swap_row['non_2xx']} non-2xx, p99 {swap_row['p99']:.1f} ms")
  print(f"(batch path timed over {batch['questions']} questions; in-process p50 over "
        f"{args.api_queries})")


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--bundle", action="append", required=True, help="a bundle (repeatable)")
  p.add_argument("--seconds", type=float, default=8.0, help="measured seconds per cell")
  p.add_argument("--warmup", type=float, default=2.0, help="discarded seconds per cell")
  p.add_argument("--concurrency", default="1,2,4,8")
  p.add_argument("--k", type=int, default=10)
  p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="server threads")
  p.add_argument("--api_queries", type=int, default=200)
  p.add_argument("--batch_queries", type=int, default=1000)
  p.add_argument("--swap", action="store_true", help="also swap bundles under load")
  args = p.parse_args()
  logs.setup()
  for bundle in args.bundle:
    bench_bundle(bundle.rstrip("/"), args)


if __name__ == "__main__":
  main()
