"""Memory, recall and speed of flat, IVF-Flat, IVF-PQ and re-ranked IVF-PQ (`ivfpq_rerank`),
each searched in a fresh process so that its resident memory is its own.

  .venv/bin/python -m benchmarks.faiss_rerank [--n 1000000] [--dim 128] [--threads 1]
  .venv/bin/python -m benchmarks.faiss_rerank --embeddings DIR --query_embeddings DIR
      # real embedding shards (contracts.embedding_schema) instead of the synthetic set
  .venv/bin/python -m benchmarks.faiss_rerank --compare_codes [--train_size 0]
      # the compressed default's codes, chosen by measurement (below)

Data: benchmarks.faiss_ann's clustered set (unit vectors from an anisotropic topic mixture),
written as Parquet embedding shards, or real shards as given. Every index is built by the
product (`eval.index.run`, as `twotower index` does: streamed from the shards) and searched
through `eval.faiss_searcher.load_searcher`, the function `twotower search` and a query service
call. For each row a child process imports, loads the index, runs one batched search of all
queries, then the first --single queries one at a time, and reports:

  Recall@100 vs flat   |top-100 ∩ exact flat top-100| / 100, mean over queries
  RSS load / queries   VmRSS after loading and after all searches, minus VmRSS after imports
                       (the index's share; the imports, ~50-250 MiB, are printed apart).
                       File-backed pages of memory-mapped files count here (they are
                       resident) although the kernel can drop them again; `anon` is the part
                       it cannot (RssAnon growth)
  disk                 bytes of the index file(s) + the re-rank vectors beside them
  q/s                  one batched search of all queries, FAISS threads = --threads
  p50 / p99            latency of single-query calls (ms), same threads
and every figure as a ratio to flat's in the same run.

--compare_codes measures instead the two codes `ivfpq_rerank` could use at the same bytes a
vector (d/4: 32 at d 128), both with nprobe RERANK_NPROBE saved and the top k x DEFAULT_RERANK
re-ranked exactly from the float32 vectors memory-mapped beside the index (eval.rerank, the
path bundles take: `IndexRefineFlat` would hold every float vector in RAM inside the index):
(a) 4-bit fast-scan `PQ{d/2}x4fs` and (b) 8-bit `PQ{d/4}x8`. Each is built as `twotower index`
(and so a bundle) builds it, then searched in a fresh process through `load_searcher`:
unfiltered, and under --filters random filters per selectivity (--selectivities, a random
share of the documents each; the queries dealt round-robin to the filters), through the
filtered search path (`Searcher.search(restriction=...)`: IDSelectors, exact scoring of
filters of at most EXACT_SCORING_MAX documents; the `index path` rows turn that fallback off
to compare the codes themselves under a selective filter). Per setting: Recall@100 and
Recall@10 against the exact (filtered) top k, q/s of batched searches at k=100 (one call per
filter, its selector built in the call), p50 / p99 of --single one-query calls at k=100;
per index: build seconds and bytes on disk. The two indexes are searched in alternating
rounds (--rounds), each in a fresh process, and the best q/s and p50 / p99 of the rounds kept.
One table, (b)/(a) in its last column.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import logging
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks import faiss_ann

logger = logging.getLogger(__name__)
K = 100


@dataclasses.dataclass(frozen=True)
class Case:
  """One table row: an index built once (`build`) searched with one setting."""
  label: str                 # index column
  build: str                 # key of the built index (see `builds`)
  setting: str               # setting column
  nprobe: int | None = None
  rerank: int = 0
  mmap: bool = False


def builds(nlist: int, train_size: int) -> dict[str, dict]:
  """IndexSpec fields of each index built (key -> fields)."""
  common = {"nlist": nlist, "train_size": train_size}
  return {"flat": {"type": "flat"}, "ivf": {"type": "ivf", **common},
          "ivfpq": {"type": "ivfpq", **common},
          "ivfpq_rerank": {"type": "ivfpq_rerank", **common}}


def cases(nprobes: list[int], reranks: list[int], rerank_nprobe: int = 0) -> list[Case]:
  from twotower.eval import faiss_index, rerank  # pylint: disable=import-outside-toplevel
  saved = faiss_index.RERANK_NPROBE
  rp = rerank_nprobe or saved
  rows = [Case("Flat (exact)", "flat", "-")]
  rows += [Case("IVF-Flat", "ivf", f"nprobe={p}", nprobe=p) for p in nprobes]
  rows.append(Case("IVF-Flat --mmap", "ivf", f"nprobe={nprobes[0]}", nprobe=nprobes[0],
                   mmap=True))
  rows += [Case("IVF-PQ", "ivfpq", f"nprobe={p}", nprobe=p) for p in nprobes]
  rows.append(Case("ivfpq_rerank", "ivfpq_rerank", f"nprobe={rp} rerank=0 (codes only)",
                   nprobe=rp, rerank=0))
  for r in sorted(set(reranks) | {rerank.DEFAULT_RERANK}):
    default = r == rerank.DEFAULT_RERANK and rp == saved
    rows.append(Case("ivfpq_rerank" + (" (defaults)" if default else ""), "ivfpq_rerank",
                     f"nprobe={rp} rerank={r}", nprobe=None if default else rp, rerank=r))
  return rows


# ---------------------------------------------------------------------------------------------
# The child: one fresh process per row.
# ---------------------------------------------------------------------------------------------


def _status(key: str) -> int:
  """A /proc/self/status field in KiB."""
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(key + ":"):
        return int(line.split()[1])
  raise RuntimeError(f"no {key} in /proc/self/status")


def child(spec: dict) -> dict:
  """Loads one index, searches, measures (run in a fresh interpreter by `measure`)."""
  import faiss  # pylint: disable=import-outside-toplevel
  from twotower.eval import faiss_index  # pylint: disable=import-outside-toplevel
  from twotower.eval import faiss_searcher  # pylint: disable=import-outside-toplevel
  faiss.omp_set_num_threads(spec["threads"])
  queries = np.load(spec["queries"])
  gt = np.load(spec["gt"])
  base = {key: _status(key) for key in ("VmRSS", "RssAnon")}
  s = faiss_searcher.load_searcher(spec["paths"], mmap=spec["mmap"], rerank=spec["rerank"])
  load = {key: _status(key) for key in ("VmRSS", "RssAnon")}
  kwargs = {"nprobe": spec["nprobe"]} if spec["nprobe"] else {}
  t0 = time.perf_counter()
  _, ids = s.search(queries, K, **kwargs)
  batch_s = time.perf_counter() - t0
  lat = []
  for q in queries[:spec["single"]]:
    t0 = time.perf_counter()
    s.search(q, K, **kwargs)
    lat.append(time.perf_counter() - t0)
  after = {key: _status(key) for key in ("VmRSS", "RssAnon")}
  return {"recall": faiss_index.recall_vs_reference(ids, gt, K),
          "qps": len(queries) / batch_s,
          "p50_ms": 1e3 * float(np.percentile(lat, 50)),
          "p99_ms": 1e3 * float(np.percentile(lat, 99)),
          "base_kib": base["VmRSS"],
          "load_kib": load["VmRSS"] - base["VmRSS"],
          "after_kib": after["VmRSS"] - base["VmRSS"],
          "anon_after_kib": after["RssAnon"] - base["RssAnon"]}


def measure(spec: dict) -> dict:
  out = subprocess.run([sys.executable, "-m", "benchmarks.faiss_rerank", "--child",
                        json.dumps(spec)], check=True, capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# --compare_codes: the compressed default's codes at equal bytes, filtered and not.
# ---------------------------------------------------------------------------------------------


def code_candidates(d: int, nlist: int, train_size: int) -> dict[str, dict]:
  """IndexSpec fields of the two codes compared (label -> fields): d/4 bytes a vector each,
  nprobe and vectors as `ivfpq_rerank` saves them."""
  from twotower.eval import faiss_index  # pylint: disable=import-outside-toplevel
  common = {"type": "ivfpq", "nlist": nlist, "train_size": train_size,
            "nprobe": faiss_index.RERANK_NPROBE, "store_vectors": True}
  return {"(a) 4-bit fast scan": {**common, "pq_m": max(1, d // 2), "fast_scan": True},
          "(b) 8-bit": {**common, "pq_m": max(1, d // 4), "pq_nbits": 8}}


def compare_child(spec: dict) -> dict:
  """One index loaded once, every setting searched (run in a fresh interpreter)."""
  import faiss  # pylint: disable=import-outside-toplevel
  from twotower.core.searching import Restriction  # pylint: disable=import-outside-toplevel
  from twotower.eval import faiss_index  # pylint: disable=import-outside-toplevel
  from twotower.eval import faiss_searcher  # pylint: disable=import-outside-toplevel
  faiss.omp_set_num_threads(spec["threads"])
  queries = np.load(spec["queries"])
  s = faiss_searcher.load_searcher(spec["paths"])  # the saved nprobe, the default re-rank
  out = {}
  for setting in spec["settings"]:
    gt = np.load(setting["gt"])
    restrictions = [Restriction.including(np.load(f)) for f in setting["filters"]] or [None]
    groups = [np.arange(f, len(queries), len(restrictions)) for f in range(len(restrictions))]
    s.exact_max = 0 if setting["index_path"] else faiss_searcher.EXACT_SCORING_MAX
    ids100 = np.empty((len(queries), K), np.int64)
    ids10 = np.empty((len(queries), 10), np.int64)
    seconds = 0.0
    for restriction, group in zip(restrictions, groups):
      s._selectors.clear()  # pylint: disable=protected-access  # a filter's first call
      t0 = time.perf_counter()
      _, ids100[group] = s.search(queries[group], K, restriction=restriction)
      seconds += time.perf_counter() - t0
      _, ids10[group] = s.search(queries[group], 10, restriction=restriction)
    lat = []
    for i in range(spec["single"]):
      t0 = time.perf_counter()
      s.search(queries[i], K, restriction=restrictions[i % len(restrictions)])
      lat.append(time.perf_counter() - t0)
    out[setting["name"]] = {
        "recall100": faiss_index.recall_vs_reference(ids100, gt, K),
        "recall10": faiss_index.recall_vs_reference(ids10, gt, 10),
        "qps": len(queries) / seconds,
        "p50_ms": 1e3 * float(np.percentile(lat, 50)),
        "p99_ms": 1e3 * float(np.percentile(lat, 99))}
  return out


def _filter_settings(x: np.ndarray, q: np.ndarray, gt: np.ndarray, args, tmp: str
                     ) -> list[dict]:
  """The settings searched: unfiltered, then per selectivity --filters random filters (their
  allowed ids and the exact filtered top K of their queries written to `tmp`)."""
  import faiss  # pylint: disable=import-outside-toplevel
  from twotower.eval import faiss_searcher  # pylint: disable=import-outside-toplevel
  np.save(os.path.join(tmp, "gt-unfiltered.npy"), gt)
  settings = [{"name": "unfiltered", "filters": [], "index_path": False,
               "gt": os.path.join(tmp, "gt-unfiltered.npy")}]
  n = len(x)
  rng = np.random.default_rng(3)
  for share in args.selectivities:
    size = max(K, round(share * n))
    files, exact = [], np.empty((len(q), K), np.int64)
    for f in range(args.filters):
      rows = np.sort(rng.choice(n, size, replace=False))  # row = id (write_shards)
      files.append(os.path.join(tmp, f"filter-{share}-{f}.npy"))
      np.save(files[-1], rows)
      group = np.arange(f, len(q), args.filters)
      _, found = faiss.knn(q[group], x[rows], K, metric=faiss.METRIC_INNER_PRODUCT)
      exact[group] = rows[found]
    gt_path = os.path.join(tmp, f"gt-{share}.npy")
    np.save(gt_path, exact)
    name = f"filter {100 * share:g} %"
    settings.append({"name": name, "filters": files, "index_path": False, "gt": gt_path})
    if size <= faiss_searcher.EXACT_SCORING_MAX:  # the default path scores these exactly
      settings.append({"name": f"{name}, index path", "filters": files, "index_path": True,
                       "gt": gt_path})
  return settings


def compare_codes(args, x: np.ndarray, q: np.ndarray, gt: np.ndarray, emb_dir: str,
                  tmp: str) -> tuple[dict[str, dict], list[str]]:
  """Builds both candidates and measures each in a fresh process: (label -> figures, the
  settings searched)."""
  from twotower.eval import faiss_index  # pylint: disable=import-outside-toplevel
  from twotower.eval import index as index_lib  # pylint: disable=import-outside-toplevel
  from twotower.eval import rerank  # pylint: disable=import-outside-toplevel
  n, d = x.shape
  settings = _filter_settings(x, q, gt, args, tmp)
  np.save(os.path.join(tmp, "queries.npy"), q)
  nlist = args.nlist or faiss_index.IndexSpec().resolve(n, d).nlist
  today = faiss_index.IndexSpec("ivfpq_rerank", nlist=nlist,
                                train_size=args.train_size).resolve(n, d)
  built = {}
  for label, fields in code_candidates(d, nlist, args.train_size).items():
    config = faiss_index.IndexSpec(**fields)
    resolved = config.resolve(n, d)
    factory = resolved.factory_string()
    if (factory, resolved.nprobe, resolved.store_vectors) == (
        today.factory_string(), today.nprobe, today.store_vectors):
      label += ", the ivfpq_rerank default"
    out = os.path.join(tmp, f"codes-{len(built)}.faiss")
    t0 = time.perf_counter()
    index_lib.run(index_lib.IndexConfig(emb_dir, out, config, threads=args.threads,
                                        allow_unchecked_vectors=True))
    seconds = time.perf_counter() - t0
    logger.info("built %s `%s` in %.0f s", label, factory, seconds)
    built[label] = {"factory": factory, "build_s": seconds,
                    "code_bytes": resolved.pq_m * resolved.pq_nbits / 8,
                    "index_mib": os.path.getsize(out) / 2**20,
                    "vectors_mib": os.path.getsize(rerank.sidecar_paths(out)[0]) / 2**20,
                    "path": out}
  # Alternating rounds, best speed of each kept: on a shared machine the load changes from
  # one child to the next, and a single pair of runs would compare two different loads.
  for _ in range(args.rounds):
    for label, figures in built.items():
      m = measure({"compare": True, "paths": figures["path"],
                   "queries": os.path.join(tmp, "queries.npy"), "threads": args.threads,
                   "single": min(args.single, len(q)), "settings": settings})
      logger.info("%s: %s", label, m)
      for name, got in m.items():
        best = figures.setdefault(name, got)
        best["qps"] = max(best["qps"], got["qps"])
        for key in ("p50_ms", "p99_ms"):
          best[key] = min(best[key], got[key])
  return built, [s["name"] for s in settings]


def compare_table(built: dict[str, dict], settings: list[str]) -> list[str]:
  (a_label, a), (b_label, b) = built.items()
  lines = [f"| setting | measure | {a_label} `{a['factory']}` | {b_label} `{b['factory']}` | "
           "(b)/(a) |", "|---|---|---|---|---|"]

  def row(setting, what, va, vb, fmt):
    ratio = f"{vb / va:.3f}" if va else "-"
    lines.append(f"| {setting} | {what} | {fmt.format(va)} | {fmt.format(vb)} | {ratio} |")

  row("build", "seconds (train + add + vectors file)", a["build_s"], b["build_s"], "{:,.0f}")
  row("build", "code bytes a vector (+ 8 for the id)", a["code_bytes"], b["code_bytes"],
      "{:g}")
  row("build", "index file MiB", a["index_mib"], b["index_mib"], "{:,.1f}")
  row("build", "re-rank vectors MiB (beside it, mapped)", a["vectors_mib"], b["vectors_mib"],
      "{:,.0f}")
  for setting in settings:
    ma, mb = a[setting], b[setting]
    row(setting, "Recall@100", ma["recall100"], mb["recall100"], "{:.4f}")
    row(setting, "Recall@10", ma["recall10"], mb["recall10"], "{:.4f}")
    row(setting, "q/s (batched, k=100)", ma["qps"], mb["qps"], "{:,.0f}")
    row(setting, "p50 ms (one query, k=100)", ma["p50_ms"], mb["p50_ms"], "{:.2f}")
    row(setting, "p99 ms (one query, k=100)", ma["p99_ms"], mb["p99_ms"], "{:.2f}")
  return lines


# ---------------------------------------------------------------------------------------------
# The parent: data, builds, one child per row, the table.
# ---------------------------------------------------------------------------------------------


def _disk(path: str, with_vectors: bool) -> int:
  from twotower.eval import rerank  # pylint: disable=import-outside-toplevel
  stem = path[:-len(".faiss")]
  files = glob.glob(glob.escape(stem) + "*.faiss")
  if with_vectors:
    files += [p for f in files for p in rerank.sidecar_paths(f) if os.path.exists(p)]
  return sum(os.path.getsize(f) for f in files)


def _mib(kib: float) -> str:
  return f"{kib / 1024:,.0f}"


def table(rows: list[tuple[Case, dict]]) -> list[str]:
  flat = rows[0][1]

  def ratio(v, ref):
    return f"{v / ref:.3f}x" if ref else "-"

  lines = ["| index | setting | Recall@100 vs flat | RSS load MiB (x flat) | "
           "RSS after queries MiB (x flat) | of which anon MiB | disk MiB (x flat) | "
           "q/s (x flat) | p50 ms (x flat) | p99 ms |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for case, m in rows:
    lines.append(
        f"| {case.label} | {case.setting} | {m['recall']:.4f} | "
        f"{_mib(m['load_kib'])} ({ratio(m['load_kib'], flat['load_kib'])}) | "
        f"{_mib(m['after_kib'])} ({ratio(m['after_kib'], flat['after_kib'])}) | "
        f"{_mib(m['anon_after_kib'])} | "
        f"{m['disk'] / 2**20:,.0f} ({ratio(m['disk'], flat['disk'])}) | "
        f"{m['qps']:,.0f} ({m['qps'] / flat['qps']:.1f}x) | "
        f"{m['p50_ms']:.2f} ({m['p50_ms'] / flat['p50_ms']:.2f}x) | {m['p99_ms']:.2f} |")
  return lines


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--n", type=int, default=1_000_000, help="synthetic vectors")
  p.add_argument("--dim", type=int, default=128, help="synthetic dimension")
  p.add_argument("--queries", type=int, default=1000, help="queries (real: a seeded sample)")
  p.add_argument("--single", type=int, default=200, help="queries timed one at a time")
  p.add_argument("--threads", type=int, default=1, help="FAISS OpenMP threads in each child")
  p.add_argument("--nlist", type=int, default=0,
                 help="IVF lists (0: as `twotower index`, about 4 sqrt(n))")
  p.add_argument("--nprobes", type=faiss_ann._ints, default=[16, 32],  # pylint: disable=protected-access
                 help="nprobe values of the IVF-Flat and IVF-PQ rows")
  p.add_argument("--reranks", type=faiss_ann._ints, default=[1, 2, 8],  # pylint: disable=protected-access
                 help="re-rank factors of the ivfpq_rerank rows (the default is added)")
  p.add_argument("--train_size", type=int, default=64_000, help="IVF / PQ training sample")
  p.add_argument("--rerank_nprobe", type=int, default=0,
                 help="nprobe of the ivfpq_rerank rows (0: the one saved in the index)")
  p.add_argument("--files", type=int, default=20, help="Parquet shards of the synthetic set")
  p.add_argument("--embeddings", default=None, help="real candidate embedding shards")
  p.add_argument("--query_embeddings", default=None, help="real query embedding shards")
  p.add_argument("--tmp", default=None, help="scratch directory (indexes, vectors, shards)")
  p.add_argument("--compare_codes", action="store_true",
                 help="compare the compressed default's two candidate codes, filtered and "
                 "not (module docstring), instead of the memory table")
  p.add_argument("--filters", type=int, default=10,
                 help="--compare_codes: random filters per selectivity")
  p.add_argument("--selectivities", type=lambda t: [float(v) for v in t.split(",")],
                 default=[0.01, 0.1], help="--compare_codes: shares of the documents allowed")
  p.add_argument("--rounds", type=int, default=3,
                 help="--compare_codes: alternating measurement rounds (best speed kept)")
  p.add_argument("--child", default=None, help=argparse.SUPPRESS)
  return p


def main(argv: list[str] | None = None) -> list[tuple[Case, dict]] | dict[str, dict]:
  """The memory table's rows; with --compare_codes, each candidate's figures by label."""
  args = parser().parse_args(argv)
  if args.child:
    spec = json.loads(args.child)
    print(json.dumps(compare_child(spec) if spec.get("compare") else child(spec)))
    return []
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
  import faiss  # pylint: disable=import-outside-toplevel
  from twotower.eval import embeddings  # pylint: disable=import-outside-toplevel
  from twotower.eval import faiss_index  # pylint: disable=import-outside-toplevel
  from twotower.eval import index as index_lib  # pylint: disable=import-outside-toplevel
  # The flat reference and the builds too: on a shared machine two OpenMP threads contending
  # with other jobs were measured 4x slower than one.
  faiss.omp_set_num_threads(args.threads)
  with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
    if args.embeddings:
      x, q, what = faiss_ann.load_real(args)
      emb_dir = args.embeddings
    else:
      x = faiss_ann.clustered(args.n, args.dim, seed=1)
      q = faiss_ann.clustered(args.queries, args.dim, seed=2)
      what = f"{args.n:,} x {args.dim} clustered synthetic; {len(q):,} queries"
      emb_dir = os.path.join(tmp, "embeddings")
      os.makedirs(emb_dir)
      faiss_ann.write_shards(x, emb_dir, args.files)
    n, d = x.shape
    flat = faiss.IndexFlatIP(d)
    flat.add(x)
    _, gt = flat.search(q, K)
    if args.embeddings:  # positions -> the shards' own ids, which the built indexes return
      gt = embeddings.read_embeddings(args.embeddings)[0][gt]
    del flat
    if args.compare_codes:
      if args.embeddings:
        raise ValueError("--compare_codes runs on the synthetic set (its filters are row ids)")
      built, names = compare_codes(args, x, q, gt, emb_dir, tmp)
      print(f"\nFAISS {faiss.__version__}; {what}; k={K}; {args.threads} FAISS thread(s) "
            f"per search process; load average at end {os.getloadavg()[0]:.1f} on "
            f"{os.cpu_count()} cores")
      print("\n".join(compare_table(built, names)))
      return built
    del x
    np.save(os.path.join(tmp, "queries.npy"), q)
    np.save(os.path.join(tmp, "gt.npy"), gt)
    nlist = args.nlist or faiss_index.IndexSpec().resolve(n, d).nlist
    paths = {}
    for key, fields in builds(nlist, args.train_size).items():
      config = faiss_index.IndexSpec(**fields)
      logger.info("building %s: %s", key, config.resolve(n, d).factory_string())
      t0 = time.perf_counter()
      out = os.path.join(tmp, f"{key}.faiss")
      # Synthetic vectors (or real ones, recorded): no model to check here, only speed.
      index_lib.run(index_lib.IndexConfig(emb_dir, out, config, threads=args.threads,
                                          allow_unchecked_vectors=True))
      logger.info("built %s in %.0f s", key, time.perf_counter() - t0)
      paths[key] = (out, config.resolve(n, d).factory_string())
    rows = []
    for case in cases([min(p, nlist) for p in args.nprobes], args.reranks,
                      min(args.rerank_nprobe, nlist)):
      path, factory = paths[case.build]
      spec = {"paths": path, "queries": os.path.join(tmp, "queries.npy"),
              "gt": os.path.join(tmp, "gt.npy"), "threads": args.threads,
              "single": min(args.single, len(q)), "mmap": case.mmap, "rerank": case.rerank,
              "nprobe": case.nprobe}
      m = measure(spec)
      m["disk"] = _disk(path, with_vectors=case.rerank > 0)
      case = dataclasses.replace(case, label=f"{case.label} `{factory}`")
      logger.info("%s %s: %s", case.label, case.setting, m)
      rows.append((case, m))
  print(f"\nFAISS {faiss.__version__}; {what}; k={K}; {args.threads} FAISS thread(s) per "
        f"search process; load average at end {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores")
  print(f"RSS after imports (not in the figures): {_mib(rows[0][1]['base_kib'])} MiB")
  print("\n".join(table(rows)))
  return rows


if __name__ == "__main__":
  main()
