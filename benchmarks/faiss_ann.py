"""FAISS approximate indexes against exact flat inner-product search, on 1M vectors.

  .venv/bin/python -m benchmarks.faiss_ann [--n 1000000] [--dim 128] [--sets clustered,isotropic]
      [--sharded]   # + the sharded IVF-PQ build from Parquet shards, with its peak RSS

Data (seeded; unit vectors, as two-tower embeddings compared by inner product):
  clustered: the structure of real embeddings, a mixture of anisotropic Gaussians on the sphere.
    1000 topic centres drawn with a decaying spectrum (axis j has scale (j+1)^-0.5, then a
    random rotation: a few directions carry most variance, as in trained encoders); topic
    sizes Zipf-like (weight (k+1)^-0.5); a point is its centre plus noise of the same
    anisotropic shape with norm about 0.75 of the centre's, normalised. Queries are fresh
    draws from the same mixture.
  isotropic: i.i.d. Gaussian directions, normalised: the worst case for every ANN method
    (no structure to exploit). Reported, not the target.

For each set: exact top-100 by flat IP (IndexFlatIP, batched), then IVF-Flat, IVF-PQ and HNSW
at a few settings: Recall@100 against flat (|top-100 ∩ flat top-100| / 100), queries/s of a
batched search of all queries with all FAISS threads, and the ratio to flat's queries/s. HNSW
is built on the first --hnsw_n vectors (its build is the slowest step: about 80 s per 100k
isotropic vectors on this 2-core machine) and compared with flat over the same vectors.

--sharded: the clustered set written as Parquet embedding shards (contracts.embedding_schema),
then `twotower index --type ivfpq --num_index_shards 4` run as a child process, streaming the
shards (train on a sample, add shard by shard); its peak RSS (the child's own VmHWM)
against the size of all vectors; the four index shards served as faiss.IndexShards and their
Recall@100 against flat.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import subprocess
import sys
import tempfile
import time

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from twotower import contracts
from twotower.eval import faiss_index

logger = logging.getLogger(__name__)
K = 100


def _normalise(x: np.ndarray) -> np.ndarray:
  return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def clustered(n: int, d: int, seed: int, topics: int = 1000, noise: float = 0.75,
              chunk: int = 100_000) -> np.ndarray:
  """float32[n, d] unit vectors from the anisotropic topic mixture (module docstring)."""
  structure = np.random.default_rng(1234)  # the same topics for documents and queries
  scale = (np.arange(d) + 1.0) ** -0.5
  rotation, _ = np.linalg.qr(structure.normal(size=(d, d)))
  centres = _normalise((structure.normal(size=(topics, d)) * scale) @ rotation)
  weights = (np.arange(topics) + 1.0) ** -0.5
  weights /= weights.sum()
  rng = np.random.default_rng(seed)
  out = np.empty((n, d), np.float32)
  noise_scale = noise / np.sqrt((scale ** 2).sum())
  for i in range(0, n, chunk):
    m = min(chunk, n - i)
    topic = rng.choice(topics, m, p=weights)
    z = (rng.normal(size=(m, d)) * scale * noise_scale) @ rotation
    out[i:i + m] = _normalise(centres[topic] + z)
  return out


def isotropic(n: int, d: int, seed: int, chunk: int = 200_000) -> np.ndarray:
  rng = np.random.default_rng(seed)
  out = np.empty((n, d), np.float32)
  for i in range(0, n, chunk):
    m = min(chunk, n - i)
    out[i:i + m] = _normalise(rng.normal(size=(m, d)))
  return out


@dataclasses.dataclass
class Row:
  data: str
  method: str
  setting: str
  n: int
  recall: float
  qps: float
  flat_qps: float
  build_s: float

  def line(self) -> str:
    return (f"| {self.data} | {self.method} | {self.setting} | {self.n:,} | {self.recall:.4f} | "
            f"{self.qps:,.0f} | {self.qps / self.flat_qps:.1f}x | {self.build_s:.0f} |")


def _timed_search(index, q, k=K, repeats=2):
  """Best of `repeats` batched searches of all queries: (ids, qps)."""
  best, ids = float("inf"), None
  for _ in range(repeats):
    t0 = time.perf_counter()
    _, ids = index.search(q, k)
    best = min(best, time.perf_counter() - t0)
  return ids, len(q) / best


def bench_set(name: str, x: np.ndarray, q: np.ndarray, args) -> list[Row]:
  n, d = x.shape
  rows: list[Row] = []
  flat = faiss.IndexFlatIP(d)
  flat.add(x)
  gt, flat_qps = _timed_search(flat, q, repeats=1)
  logger.info("%s: flat %.0f q/s", name, flat_qps)
  rows.append(Row(name, "Flat (exact)", "-", n, 1.0, flat_qps, flat_qps, 0.0))
  del flat

  # IVF-Flat: the coarse quantizer is trained once and reused by IVF-PQ.
  nlist = args.nlist
  rng = np.random.default_rng(0)
  sample = x[rng.choice(n, min(n, args.train_size), replace=False)]
  t0 = time.perf_counter()
  ivf = faiss.index_factory(d, f"IVF{nlist},Flat", faiss.METRIC_INNER_PRODUCT)
  assert ivf.metric_type == faiss.METRIC_INNER_PRODUCT
  faiss.extract_index_ivf(ivf).cp.niter = args.kmeans_niter
  ivf.train(sample)
  ivf.add(x)
  build = time.perf_counter() - t0
  logger.info("%s: IVF%d built in %.0f s", name, nlist, build)
  for nprobe in args.nprobes:
    ivf.nprobe = nprobe
    ids, qps = _timed_search(ivf, q)
    rows.append(Row(name, f"IVF{nlist},Flat", f"nprobe={nprobe}", n,
                    faiss_index.recall_vs_reference(ids, gt, K), qps, flat_qps, build))
  quantizer = faiss.clone_index(ivf.quantizer)
  del ivf

  for m in [m for m in args.pq_m if m]:
    t0 = time.perf_counter()
    ivfpq = faiss.IndexIVFPQ(faiss.clone_index(quantizer), d, nlist, m, 8,
                             faiss.METRIC_INNER_PRODUCT)
    ivfpq.pq.cp.niter = args.kmeans_niter
    ivfpq.train(sample[:args.pq_train_size])  # quantizer trained already: only PQ codebooks
    ivfpq.add(x)
    build = time.perf_counter() - t0
    logger.info("%s: IVF%d,PQ%d built in %.0f s", name, nlist, m, build)
    for nprobe in args.pq_nprobes:
      ivfpq.nprobe = nprobe
      ids, qps = _timed_search(ivfpq, q)
      rows.append(Row(name, f"IVF{nlist},PQ{m}x8", f"nprobe={nprobe}", n,
                      faiss_index.recall_vs_reference(ids, gt, K), qps, flat_qps, build))
    del ivfpq

  if args.hnsw_n:
    h_n = min(n, args.hnsw_n)
    xh = x[:h_n]
    flat = faiss.IndexFlatIP(d)
    flat.add(xh)
    gt_h, flat_qps_h = _timed_search(flat, q, repeats=1)
    del flat
    rows.append(Row(name, "Flat (exact)", "-", h_n, 1.0, flat_qps_h, flat_qps_h, 0.0))
    t0 = time.perf_counter()
    hnsw = faiss.IndexHNSWFlat(d, args.hnsw_m, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 40
    hnsw.add(xh)
    build = time.perf_counter() - t0
    logger.info("%s: HNSW%d over %d built in %.0f s", name, args.hnsw_m, h_n, build)
    for ef in args.ef_search:
      hnsw.hnsw.efSearch = ef
      ids, qps = _timed_search(hnsw, q)
      rows.append(Row(name, f"HNSW{args.hnsw_m},Flat", f"efSearch={ef}", h_n,
                      faiss_index.recall_vs_reference(ids, gt_h, K), qps, flat_qps_h, build))
  return rows


def write_shards(x: np.ndarray, directory: str, num_files: int) -> None:
  schema = contracts.embedding_schema(x.shape[1])
  for s, part in enumerate(np.array_split(np.arange(len(x)), num_files)):
    emb = pa.FixedSizeListArray.from_arrays(pa.array(x[part].ravel()), x.shape[1])
    pq.write_table(pa.Table.from_arrays([pa.array(part.astype(np.int64)), emb], schema=schema),
                   f"{directory}/embeddings-{s:05d}-of-{num_files:05d}.parquet")


_CHILD = """
import sys
def rss(key):
  for line in open('/proc/self/status'):
    if line.startswith(key):
      return int(line.split()[1])  # KiB
import apache_beam.io.filesystems, faiss, pyarrow.parquet
from twotower.eval import index
print('RSS baseline', rss('VmRSS:'), flush=True)
index.run(sys.argv[1:])
print('RSS peak', rss('VmHWM:'), flush=True)
"""


def sharded_demo(x: np.ndarray, q: np.ndarray, args) -> str:
  n, d = x.shape
  flat = faiss.IndexFlatIP(d)
  flat.add(x)
  _, gt = flat.search(q, K)
  del flat
  with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
    emb_dir = os.path.join(tmp, "embeddings")
    os.makedirs(emb_dir)
    write_shards(x, emb_dir, args.files)
    out = os.path.join(tmp, "index.faiss")
    cli = ["--embeddings", emb_dir, "--out", out, "--type", "ivfpq", "--nlist", str(args.nlist),
           "--pq_m", str(args.sharded_pq_m), "--num_index_shards", "4",
           "--train_size", str(args.train_size), "--kmeans_niter", str(args.kmeans_niter)]
    # The child reports its own VmHWM (peak RSS of its address space since exec; getrusage's
    # ru_maxrss would also count the parent's pages inherited at fork) and its RSS after
    # imports, before any vector is read.
    cmd = [sys.executable, "-c", _CHILD] + cli
    t0 = time.perf_counter()
    result = subprocess.run(cmd, check=True, capture_output=True, text=True)
    build = time.perf_counter() - t0
    report = dict(line.split()[1:] for line in result.stdout.splitlines()
                  if line.startswith("RSS "))
    peak, baseline = int(report["peak"]) * 1024, int(report["baseline"]) * 1024
    served = faiss_index.load_index(os.path.join(tmp, "index-*-of-00004.faiss"))
    assert isinstance(served, faiss.IndexShards) and served.ntotal == n
    lines = []
    for nprobe in args.pq_nprobes:
      faiss_index.set_search_params(served, nprobe=nprobe)
      _, ids, secs = faiss_index.search(served, q, K)
      lines.append(f"| IVF{args.nlist},PQ{args.sharded_pq_m}x8 as IndexShards(4) | "
                   f"nprobe={nprobe} | {faiss_index.recall_vs_reference(ids, gt, K):.4f} | "
                   f"{len(q) / secs:,.0f} |")
    size = sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp)
               if f.endswith(".faiss"))
  all_vectors = n * d * 4
  return "\n".join([
      f"\nSharded IVF-PQ build: {n:,} x {d} vectors in {args.files} Parquet shards -> 4 index "
      f"shards, built in {build:.0f} s by `twotower index {' '.join(cli[4:])}`",
      f"peak RSS (VmHWM) of the build process: {peak / 2**20:,.0f} MiB, of which "
      f"{baseline / 2**20:,.0f} MiB after imports (Python, FAISS, pyarrow, Beam FileSystems) "
      f"before any vector is read; all vectors as float32: "
      f"{all_vectors / 2**20:,.0f} MiB (ratio {peak / all_vectors:.2f}); index files "
      f"{size / 2**20:,.0f} MiB",
      "| index | setting | Recall@100 vs flat | q/s |", "|---|---|---|---|", *lines])


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--n", type=int, default=1_000_000)
  p.add_argument("--dim", type=int, default=128)
  p.add_argument("--queries", type=int, default=1000)
  p.add_argument("--sets", default="clustered,isotropic")
  p.add_argument("--nlist", type=int, default=4096)
  p.add_argument("--train_size", type=int, default=64_000)
  p.add_argument("--nprobes", type=lambda s: [int(v) for v in s.split(",")], default=[8, 16, 32, 64, 128])
  p.add_argument("--pq_m", type=lambda s: [int(v) for v in s.split(",")], default=[16, 32],
                 help="PQ sub-quantizers to try (0: no IVF-PQ)")
  p.add_argument("--pq_train_size", type=int, default=10_000)
  p.add_argument("--kmeans_niter", type=int, default=10)
  p.add_argument("--pq_nprobes", type=lambda s: [int(v) for v in s.split(",")], default=[16, 64])
  p.add_argument("--hnsw_n", type=int, default=100_000, help="HNSW corpus size (0: no HNSW)")
  p.add_argument("--hnsw_m", type=int, default=32)
  p.add_argument("--ef_search", type=lambda s: [int(v) for v in s.split(",")], default=[64, 128, 256])
  p.add_argument("--sharded", action="store_true", help="also the sharded IVF-PQ build")
  p.add_argument("--sharded_only", action="store_true")
  p.add_argument("--sharded_pq_m", type=int, default=32)
  p.add_argument("--files", type=int, default=20, help="Parquet shards for --sharded")
  p.add_argument("--tmp", default=None, help="scratch directory for --sharded")
  args = p.parse_args(argv)
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
  logger.info("FAISS %s, %d threads, load average %s", faiss.__version__,
              faiss.omp_get_max_threads(), os.getloadavg())
  gens = {"clustered": clustered, "isotropic": isotropic}
  rows: list[Row] = []
  text = []
  for name in args.sets.split(","):
    if args.sharded_only and name != "clustered":
      continue
    x = gens[name](args.n, args.dim, seed=1)
    q = gens[name](args.queries, args.dim, seed=2)
    if not args.sharded_only:
      rows += bench_set(name, x, q, args)
    if (args.sharded or args.sharded_only) and name == "clustered":
      text.append(sharded_demo(x, q, args))
    del x
  if rows:
    print(f"\nFAISS {faiss.__version__}, {faiss.omp_get_max_threads()} threads, d={args.dim}, "
          f"{args.queries} queries, k={K}; Recall@100 = |top-100 ∩ flat top-100| / 100; "
          f"load average at end {os.getloadavg()[0]:.1f}")
    print("| data | index | setting | n | Recall@100 vs flat | q/s | q/s vs flat | build s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
      print(r.line())
  for t in text:
    print(t)


if __name__ == "__main__":
  main()
