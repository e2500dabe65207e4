"""FAISS approximate indexes against exact flat inner-product search, on 1M vectors and on
real embeddings.

  .venv/bin/python -m benchmarks.faiss_ann [--n 1000000] [--dim 128] [--sets clustered,isotropic]
      [--sharded]   # + the sharded IVF-PQ build from Parquet shards, with its peak RSS
  .venv/bin/python -m benchmarks.faiss_ann --sets real \
      --embeddings WORK/eval/CELL/candidates --query_embeddings WORK/eval/CELL/questions
      # real embeddings of a grid eval cell (`twotower experiment ... --keep_embeddings`)

Data (seeded; unit vectors, as two-tower embeddings compared by inner product):
  clustered: the structure of real embeddings, a mixture of anisotropic Gaussians on the sphere.
    1000 topic centres drawn with a decaying spectrum (axis j has scale (j+1)^-0.5, then a
    random rotation: a few directions carry most variance, as in trained encoders); topic
    sizes Zipf-like (weight (k+1)^-0.5); a point is its centre plus noise of the same
    anisotropic shape with norm about 0.75 of the centre's, normalised. Queries are fresh
    draws from the same mixture.
  isotropic: i.i.d. Gaussian directions, normalised: the worst case for every ANN method
    (no structure to exploit). Reported, not the target.
  real (with --embeddings and --query_embeddings): candidate and question embedding shards
    (Parquet, contracts.embedding_schema; read by eval.embeddings.read_embeddings), used as
    they are (not re-normalised), e.g. a ReQA SQuAD eval cell's ~10k candidates x 128 and ~11k
    questions, of which --queries are drawn (seeded). Settings adapt to its n unless given:
    nlist the power of two nearest 4*sqrt(n) (at most n/39, as `twotower index`), nprobes
    clipped to nlist plus nlist itself (exhaustive: recall 1.0, a check), training on all
    vectors when n < --train_size, PQ m the largest divisor of d not above each --pq_m, HNSW
    over all vectors when n <= --hnsw_n. Needs n >= 100 (Recall@100).

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

from twotower.core import contracts
from twotower.eval import embeddings
from twotower.eval import faiss_index
from twotower.eval import faiss_searcher

logger = logging.getLogger(__name__)
K = 100
SETS = ("clustered", "isotropic", "real")
#: Synthetic sets' defaults (--nlist, --nprobes, --pq_nprobes left out); real sets adapt to n.
SYNTHETIC_NLIST = 4096
SYNTHETIC_NPROBES = (8, 16, 32, 64, 128)
SYNTHETIC_PQ_NPROBES = (16, 64)


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


def load_real(args) -> tuple[np.ndarray, np.ndarray, str]:
  """(candidates float32[n, d], queries float32[nq, d], description) from embedding shards,
  through the project's reader; at most --queries queries, a seeded sample."""
  _, x = embeddings.read_embeddings(args.embeddings)
  _, q = embeddings.read_embeddings(args.query_embeddings)
  if x.shape[1] != q.shape[1]:
    raise ValueError(f"--embeddings {args.embeddings} has d={x.shape[1]} but "
                     f"--query_embeddings {args.query_embeddings} has d={q.shape[1]}")
  if len(x) < K:
    raise ValueError(f"--embeddings {args.embeddings}: {len(x)} candidates, fewer than k={K}: "
                     f"Recall@{K} against flat needs at least {K}")
  total = len(q)
  if total > args.queries:
    q = q[np.sort(np.random.default_rng(2).choice(total, args.queries, replace=False))]
  return x, np.ascontiguousarray(q), (
      f"{len(x):,} x {x.shape[1]} from {args.embeddings}; {len(q):,} of {total:,} queries "
      f"from {args.query_embeddings}")


@dataclasses.dataclass(frozen=True)
class Settings:
  """Index settings of one set: the command line's for synthetic sets, adapted to n for real
  ones (`real_settings`)."""
  nlist: int                     # IVF lists (IVF-Flat and IVF-PQ share one coarse quantizer)
  train_size: int                # IVF k-means sample (all vectors when n is smaller)
  nprobes: tuple[int, ...]       # IVF-Flat nprobe values
  pq_m: tuple[int, ...]          # PQ sub-quantizers, each dividing d (empty: no IVF-PQ)
  pq_train_size: int             # PQ codebook sample, a prefix of the IVF sample
  pq_nprobes: tuple[int, ...]    # IVF-PQ nprobe values
  kmeans_niter: int
  hnsw_n: int                    # HNSW over the first hnsw_n vectors (0: no HNSW)
  hnsw_m: int
  ef_search: tuple[int, ...]

  def describe(self) -> str:
    return (f"nlist {self.nlist}, train {self.train_size}, nprobe {list(self.nprobes)}, PQ m "
            f"{list(self.pq_m)} nprobe {list(self.pq_nprobes)}, HNSW{self.hnsw_m} over "
            f"{self.hnsw_n} efSearch {list(self.ef_search)}")


def synthetic_settings(args) -> Settings:
  """The command line as given, with the synthetic defaults (unchanged by real sets)."""
  return Settings(
      nlist=args.nlist or SYNTHETIC_NLIST, train_size=args.train_size,
      nprobes=tuple(args.nprobes or SYNTHETIC_NPROBES), pq_m=tuple(m for m in args.pq_m if m),
      pq_train_size=args.pq_train_size, pq_nprobes=tuple(args.pq_nprobes or SYNTHETIC_PQ_NPROBES),
      kmeans_niter=args.kmeans_niter, hnsw_n=args.hnsw_n, hnsw_m=args.hnsw_m,
      ef_search=tuple(args.ef_search))


def _largest_divisor(d: int, at_most: int) -> int:
  return max(m for m in range(1, min(d, at_most) + 1) if d % m == 0)


def real_settings(args, n: int, d: int) -> Settings:
  """Settings for n real vectors of dim d: nlist as `twotower index` derives it (the power of
  two nearest 4*sqrt(n), at most n/39) unless --nlist is given; nprobes clipped to nlist, and
  by default nlist itself added (an exhaustive IVF search: recall 1.0 against flat, a check);
  training on all vectors when n < --train_size; each PQ m lowered to a divisor of d; HNSW over
  all vectors when n <= --hnsw_n."""
  if n < K:
    raise ValueError(f"{n} vectors, fewer than k={K}: Recall@{K} needs at least {K}")
  nlist = args.nlist or faiss_index.IndexSpec().resolve(n, d).nlist
  train = min(n, args.train_size)
  if nlist > train:
    raise ValueError(f"--nlist {nlist} exceeds the {train} training vectors (n={n})")
  nprobes = {min(p, nlist) for p in args.nprobes or SYNTHETIC_NPROBES}
  if not args.nprobes:
    nprobes.add(nlist)
  pq_m = []
  for m in (m for m in args.pq_m if m):
    m2 = _largest_divisor(d, m)
    if m2 != m:
      logger.info("real: PQ m=%d does not divide d=%d; using m=%d", m, d, m2)
    if m2 not in pq_m:
      pq_m.append(m2)
  return Settings(
      nlist=nlist, train_size=train, nprobes=tuple(sorted(nprobes)), pq_m=tuple(pq_m),
      pq_train_size=min(args.pq_train_size, train),
      pq_nprobes=tuple(sorted({min(p, nlist) for p in args.pq_nprobes or SYNTHETIC_PQ_NPROBES})),
      kmeans_niter=args.kmeans_niter, hnsw_n=min(n, args.hnsw_n), hnsw_m=args.hnsw_m,
      ef_search=tuple(args.ef_search))


@dataclasses.dataclass
class Row:
  data: str
  method: str
  setting: str
  n: int
  d: int
  recall: float
  qps: float
  flat_qps: float
  build_s: float

  def line(self) -> str:
    return (f"| {self.data} | {self.method} | {self.setting} | {self.n:,} | {self.d} | "
            f"{self.recall:.4f} | {self.qps:,.0f} | {self.qps / self.flat_qps:.1f}x | "
            f"{self.build_s:.0f} |")


def _timed_search(index, q, k=K, repeats=2):
  """Best of `repeats` batched searches of all queries: (ids, qps)."""
  best, ids = float("inf"), None
  for _ in range(repeats):
    t0 = time.perf_counter()
    _, ids = index.search(q, k)
    best = min(best, time.perf_counter() - t0)
  return ids, len(q) / best


def bench_set(name: str, x: np.ndarray, q: np.ndarray, s: Settings) -> list[Row]:
  """Flat, then IVF-Flat, IVF-PQ and HNSW rows of one set: x float32[n, d], q float32[nq, d]."""
  n, d = x.shape
  if n < K:
    raise ValueError(f"{name}: {n} vectors, fewer than k={K}: Recall@{K} needs at least {K}")
  rows: list[Row] = []
  flat = faiss.IndexFlatIP(d)
  flat.add(x)
  gt, flat_qps = _timed_search(flat, q, repeats=1)
  logger.info("%s: flat %.0f q/s", name, flat_qps)
  rows.append(Row(name, "Flat (exact)", "-", n, d, 1.0, flat_qps, flat_qps, 0.0))
  del flat

  # IVF-Flat: the coarse quantizer is trained once and reused by IVF-PQ.
  nlist = s.nlist
  rng = np.random.default_rng(0)
  sample = x[rng.choice(n, min(n, s.train_size), replace=False)]
  t0 = time.perf_counter()
  ivf = faiss.index_factory(d, f"IVF{nlist},Flat", faiss.METRIC_INNER_PRODUCT)
  assert ivf.metric_type == faiss.METRIC_INNER_PRODUCT
  faiss.extract_index_ivf(ivf).cp.niter = s.kmeans_niter
  ivf.train(sample)
  ivf.add(x)
  build = time.perf_counter() - t0
  logger.info("%s: IVF%d built in %.0f s", name, nlist, build)
  for nprobe in s.nprobes:
    ivf.nprobe = nprobe
    ids, qps = _timed_search(ivf, q)
    rows.append(Row(name, f"IVF{nlist},Flat", f"nprobe={nprobe}", n, d,
                    faiss_index.recall_vs_reference(ids, gt, K), qps, flat_qps, build))
  quantizer = faiss.clone_index(ivf.quantizer)
  del ivf

  pq_sample = sample[:s.pq_train_size]
  if s.pq_m and len(pq_sample) < 256:
    logger.warning("%s: %d PQ training vectors, fewer than the 256 centroids of 8-bit codes: "
                   "no IVF-PQ rows", name, len(pq_sample))
  for m in s.pq_m if len(pq_sample) >= 256 else ():
    t0 = time.perf_counter()
    ivfpq = faiss.IndexIVFPQ(faiss.clone_index(quantizer), d, nlist, m, 8,
                             faiss.METRIC_INNER_PRODUCT)
    ivfpq.pq.cp.niter = s.kmeans_niter
    ivfpq.train(pq_sample)  # quantizer trained already: only PQ codebooks
    ivfpq.add(x)
    build = time.perf_counter() - t0
    logger.info("%s: IVF%d,PQ%d built in %.0f s", name, nlist, m, build)
    for nprobe in s.pq_nprobes:
      ivfpq.nprobe = nprobe
      ids, qps = _timed_search(ivfpq, q)
      rows.append(Row(name, f"IVF{nlist},PQ{m}x8", f"nprobe={nprobe}", n, d,
                      faiss_index.recall_vs_reference(ids, gt, K), qps, flat_qps, build))
    del ivfpq

  if s.hnsw_n:
    h_n = min(n, s.hnsw_n)
    xh = x[:h_n]
    if h_n == n:  # all vectors: the flat reference above holds
      gt_h, flat_qps_h = gt, flat_qps
    else:
      flat = faiss.IndexFlatIP(d)
      flat.add(xh)
      gt_h, flat_qps_h = _timed_search(flat, q, repeats=1)
      del flat
      rows.append(Row(name, "Flat (exact)", "-", h_n, d, 1.0, flat_qps_h, flat_qps_h, 0.0))
    t0 = time.perf_counter()
    hnsw = faiss.IndexHNSWFlat(d, s.hnsw_m, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 40
    hnsw.add(xh)
    build = time.perf_counter() - t0
    logger.info("%s: HNSW%d over %d built in %.0f s", name, s.hnsw_m, h_n, build)
    for ef in s.ef_search:
      hnsw.hnsw.efSearch = ef
      ids, qps = _timed_search(hnsw, q)
      rows.append(Row(name, f"HNSW{s.hnsw_m},Flat", f"efSearch={ef}", h_n, d,
                      faiss_index.recall_vs_reference(ids, gt_h, K), qps, flat_qps_h, build))
  return rows


def write_shards(x: np.ndarray, directory: str, num_files: int,
                 ids: np.ndarray | None = None) -> None:
  """x float32[n, d] as `num_files` embedding shards (contracts.embedding_schema). ids: int64
  row positions by default; string ids (question embeddings) give the string-id schema."""
  ids = np.arange(len(x), dtype=np.int64) if ids is None else np.asarray(ids)
  text_ids = ids.dtype.kind in "UO"
  schema = contracts.embedding_schema(x.shape[1], pa.string() if text_ids else pa.int64())
  for s, part in enumerate(np.array_split(np.arange(len(x)), num_files)):
    emb = pa.FixedSizeListArray.from_arrays(pa.array(x[part].ravel()), x.shape[1])
    id_array = pa.array(ids[part].tolist() if text_ids else ids[part].astype(np.int64),
                        type=schema.field("id").type)
    pq.write_table(pa.Table.from_arrays([id_array, emb], schema=schema),
                   f"{directory}/embeddings-{s:05d}-of-{num_files:05d}.parquet")


_CHILD = """
import sys
def rss(key):
  for line in open('/proc/self/status'):
    if line.startswith(key):
      return int(line.split()[1])  # KiB
import apache_beam.io.filesystems, faiss, pyarrow.parquet
from twotower.commands import index
print('RSS baseline', rss('VmRSS:'), flush=True)
index.main(sys.argv[1:])
print('RSS peak', rss('VmHWM:'), flush=True)
"""


def sharded_demo(x: np.ndarray, q: np.ndarray, args) -> str:
  n, d = x.shape
  nlist = args.nlist or SYNTHETIC_NLIST
  flat = faiss.IndexFlatIP(d)
  flat.add(x)
  _, gt = flat.search(q, K)
  del flat
  with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
    emb_dir = os.path.join(tmp, "embeddings")
    os.makedirs(emb_dir)
    write_shards(x, emb_dir, args.files)
    out = os.path.join(tmp, "index.faiss")
    cli = ["--embeddings", emb_dir, "--out", out, "--type", "ivfpq", "--nlist", str(nlist),
           "--pq_m", str(args.sharded_pq_m), "--num_index_shards", "4",
           "--train_size", str(args.train_size), "--kmeans_niter", str(args.kmeans_niter),
           "--allow_unchecked_vectors"]  # synthetic vectors: no model made them
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
    served = faiss_searcher.load_searcher(os.path.join(tmp, "index-*-of-00004.faiss"), rerank=0)
    assert len(served.parts) == 4 and served.ntotal == n
    lines = []
    for nprobe in args.pq_nprobes or SYNTHETIC_PQ_NPROBES:
      _, ids, secs = faiss_index.search(served, q, K, nprobe=nprobe)
      lines.append(f"| IVF{nlist},PQ{args.sharded_pq_m}x8 as IndexShards(4) | "
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


def _ints(text: str) -> list[int]:
  return [int(v) for v in text.split(",")]


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--n", type=int, default=1_000_000, help="vectors per synthetic set")
  p.add_argument("--dim", type=int, default=128, help="dimension of the synthetic sets")
  p.add_argument("--queries", type=int, default=1000,
                 help="queries per set (real: at most this many, a seeded sample)")
  p.add_argument("--sets", default=None,
                 help=f"comma list of {', '.join(SETS)} (default: clustered,isotropic, plus real "
                      "when --embeddings is given)")
  p.add_argument("--embeddings", default=None,
                 help="real set's candidate embedding shards: a directory of *.parquet, a glob "
                      "or a comma list (contracts.embedding_schema, e.g. a grid eval cell's "
                      "candidates/); adds the set `real`")
  p.add_argument("--query_embeddings", default=None,
                 help="real set's query embeddings, same schema (e.g. the cell's questions/)")
  p.add_argument("--nlist", type=int, default=None,
                 help=f"IVF lists (default: {SYNTHETIC_NLIST} for synthetic sets; real: the "
                      "power of two nearest 4*sqrt(n), at most n/39)")
  p.add_argument("--train_size", type=int, default=64_000,
                 help="IVF k-means sample (all vectors when a set is smaller)")
  p.add_argument("--nprobes", type=_ints, default=None,
                 help=f"IVF-Flat nprobe values (default {','.join(map(str, SYNTHETIC_NPROBES))}; "
                      "real: clipped to nlist, plus nlist itself, exhaustive)")
  p.add_argument("--pq_m", type=_ints, default=[16, 32],
                 help="PQ sub-quantizers to try (0: no IVF-PQ; real: lowered to divisors of d)")
  p.add_argument("--pq_train_size", type=int, default=10_000, help="PQ codebook sample")
  p.add_argument("--kmeans_niter", type=int, default=10, help="k-means iterations (IVF, PQ)")
  p.add_argument("--pq_nprobes", type=_ints, default=None,
                 help="IVF-PQ nprobe values (default "
                      f"{','.join(map(str, SYNTHETIC_PQ_NPROBES))}; real: clipped to nlist)")
  p.add_argument("--hnsw_n", type=int, default=100_000,
                 help="HNSW over the first hnsw_n vectors of a set (all when n <= hnsw_n; "
                      "0: no HNSW)")
  p.add_argument("--hnsw_m", type=int, default=32, help="HNSW graph degree")
  p.add_argument("--ef_search", type=_ints, default=[64, 128, 256], help="HNSW efSearch values")
  p.add_argument("--sharded", action="store_true", help="also the sharded IVF-PQ build")
  p.add_argument("--sharded_only", action="store_true",
                 help="only the sharded IVF-PQ build (clustered set)")
  p.add_argument("--sharded_pq_m", type=int, default=32)
  p.add_argument("--files", type=int, default=20, help="Parquet shards for --sharded")
  p.add_argument("--tmp", default=None, help="scratch directory for --sharded")
  return p


def main(argv: list[str] | None = None) -> list[Row]:
  """Runs the sets, prints one table (and the sharded build's), returns the table's rows."""
  p = parser()
  args = p.parse_args(argv)
  sets = args.sets.split(",") if args.sets else ["clustered", "isotropic"]
  if args.embeddings and "real" not in sets:
    sets.append("real")
  if unknown := [name for name in sets if name not in SETS]:
    p.error(f"unknown --sets {unknown}; expected {', '.join(SETS)}")
  if "real" in sets and not (args.embeddings and args.query_embeddings):
    p.error("the set `real` needs --embeddings and --query_embeddings")
  if args.query_embeddings and not args.embeddings:
    p.error("--query_embeddings needs --embeddings")
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
  logger.info("FAISS %s, %d threads, load average %s", faiss.__version__,
              faiss.omp_get_max_threads(), os.getloadavg())
  gens = {"clustered": clustered, "isotropic": isotropic}
  rows: list[Row] = []
  described = []
  text = []
  for name in sets:
    if args.sharded_only and name != "clustered":
      continue
    if name == "real":
      x, q, what = load_real(args)
      settings = real_settings(args, *x.shape)
    else:
      x = gens[name](args.n, args.dim, seed=1)
      q = gens[name](args.queries, args.dim, seed=2)
      what = f"{args.n:,} x {args.dim} synthetic; {len(q):,} queries"
      settings = synthetic_settings(args)
    described.append(f"  {name}: {what}; {settings.describe()}")
    logger.info("%s", described[-1].strip())
    if not args.sharded_only:
      rows += bench_set(name, x, q, settings)
    if (args.sharded or args.sharded_only) and name == "clustered":
      text.append(sharded_demo(x, q, args))
    del x
  if rows:
    print(f"\nFAISS {faiss.__version__}, {faiss.omp_get_max_threads()} threads, k={K}; "
          f"Recall@100 = |top-100 ∩ flat top-100| / 100; "
          f"load average at end {os.getloadavg()[0]:.1f}")
    print("\n".join(described))
    print("| data | index | setting | n | d | Recall@100 vs flat | q/s | q/s vs flat | build s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
      print(r.line())
  for t in text:
    print(t)
  return rows


if __name__ == "__main__":
  main()
