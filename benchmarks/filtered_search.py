"""Filtered search, bundle updates and the hybrid service's start, in one run (issue 66).

  .venv/bin/python -m benchmarks.filtered_search [--n 100000] [--dim 64] [--filters 1000] \
      [--bm25_docs 5000] [--update_docs 20000] [--sections faiss,bm25,update,service]

1. FAISS under a filter (eval.faiss_searcher, what every dense search goes through): --n
   clustered unit vectors (benchmarks.faiss_ann's set), ids not 0..n-1; flat, IVF (nprobe
   16), HNSW (M 32, efSearch 64) and re-ranked IVF-PQ (`ivfpq_rerank`). For each selectivity
   (0.1 %, 1 %, 10 %, 50 %), --filters random filters (a random set of that share of the
   documents), one query each: the exact filtered top 10 (brute force over the allowed
   documents' vectors) against the index's, as `exact` (the same ids in order, every score
   within 1e-4) and recall@10, beside the index's recall@10 of the same queries unfiltered
   (against the exact top 10 of the whole corpus); p50 latency and queries/s of the filtered search (the filter's
   selector built anew each time, as a new filter costs) against the same queries unfiltered,
   one query per call on one FAISS thread. `exact path`: filters small enough for exact
   scoring (EXACT_SCORING_MAX documents).
2. BM25 and the hybrid under a filter (twotower.core.lucene.Bm25Searcher: a Lucene FILTER
   clause; eval.searchers.FusedSearcher: fusion of the filtered lists): --bm25_docs synthetic
   documents, a pool of 200 queries; the reference is each query's whole unfiltered ranking
   with the filtered-out documents left out (BM25: the same ids in order; scores within 2e-4,
   Anserini rounding to 1e-4 within each list), and, for the hybrid, the interpolation of that
   reference and of the dense brute force (the same ids up to near-ties, 1e-3).
3. Updates: a `twotower bundle --docs` bundle of --update_docs documents (the stand-in tower),
   then 1 % and 10 % of the corpus added and 1 % / 10 % deleted by `twotower bundle update`,
   against `twotower bundle --docs` over the resulting documents from scratch: seconds of each,
   the parent's sha256 of every file before and after, and the answers of 50 questions in
   every mode (flat: the same ids, the largest score difference; IVF at nprobe 8: recall@10 of
   the updated and of the rebuilt index against exact search).
4. The hybrid service (`twotower serve`, every mode): seconds from the process's start to
   /v1/ready and VmRSS once ready, with the BM25 side imported as before this change
   (`pyserini.search.lucene`, which imports PyTorch through Pyserini's encoders) and as now
   (`pyserini.pyclass` only), --service_repeats times each, medians; over the section-3
   bundle (SavedModel query tower: TensorFlow in the process) and, with --onnx, over a ReQA
   bundle of a tiny Transformer run (the `tiny` preset, 10 steps) with its ONNX query tower
   (`--encoder onnx`: no TensorFlow), the service the issue measured at 702 MiB.

Every section prints its table; comparisons are ratios within the run. The machine's load
matters for the timings: say what else ran.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import faiss
import numpy as np

from benchmarks import faiss_ann
from twotower.core import fingerprints
from twotower.core import logs
from twotower.core import lucene
from twotower.core.contracts import Ranked
from twotower.core.searching import Queries, Restriction, SearchParams
from twotower.eval import faiss_index, faiss_searcher, fusion
from twotower.eval.searchers import DenseSearcher, FusedSearcher
from twotower.testing import server as server_lib
from twotower.testing.batch_path import same_up_to_ties

logger = logging.getLogger(__name__)
SELECTIVITIES = (0.001, 0.01, 0.1, 0.5)
K = 10


def _p50_ms(seconds: list[float]) -> float:
  return 1000 * statistics.median(seconds)


def _qps(seconds: list[float]) -> float:
  return len(seconds) / sum(seconds) if sum(seconds) else float("inf")


def _table(title: str, header: list[str], rows: list[list]) -> None:
  print(f"\n{title}")
  widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
  print("  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
  for row in rows:
    print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


# ---------------------------------------------------------------------------------------------
# 1. FAISS.
# ---------------------------------------------------------------------------------------------


def _faiss_index(kind: str, x: np.ndarray, ids: np.ndarray, folder: str
                 ) -> faiss_searcher.Searcher:
  from twotower.deploy.bundling import index_part  # pylint: disable=import-outside-toplevel
  spec = faiss_index.IndexSpec(type=kind, hnsw_m=32)
  path = os.path.join(folder, f"{kind}.faiss")
  index_part.build(spec, ids, x, path)
  return faiss_searcher.load_searcher(path)


def faiss_section(args, folder: str) -> None:
  x = faiss_ann.clustered(args.n, args.dim, seed=0)
  ids = np.arange(args.n, dtype=np.int64) * 3 + 1
  queries = faiss_ann.clustered(args.filters * len(SELECTIVITIES), args.dim, seed=1)
  faiss.omp_set_num_threads(1)
  rows = []
  for kind, params in (("flat", {}), ("ivf", {"nprobe": 16}),
                       ("hnsw", {"ef_search": 64}), ("ivfpq_rerank", {})):
    t0 = time.perf_counter()
    searcher = _faiss_index(kind, x, ids, folder)
    built = time.perf_counter() - t0
    rng = np.random.default_rng(2)
    for s, selectivity in enumerate(SELECTIVITIES):
      exact = hits = wanted = exact_path = plain_hits = 0
      filtered, unfiltered = [], []
      for f in range(args.filters):
        q = queries[s * args.filters + f:s * args.filters + f + 1]
        rows_allowed = np.sort(rng.choice(args.n, max(1, round(selectivity * args.n)),
                                          replace=False))
        allowed = ids[rows_allowed]
        t0 = time.perf_counter()
        scores, got = searcher.search(q, K, restriction=Restriction.including(allowed),
                                      **params)
        filtered.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        _, plain = searcher.search(q, K, **params)
        unfiltered.append(time.perf_counter() - t0)
        everything = (q @ x.T)[0]
        plain_hits += len(np.intersect1d(plain[0], ids[np.argpartition(-everything, K)[:K]]))
        exact_path += len(allowed) <= searcher.exact_max
        ref_scores = (q @ x[rows_allowed].T)[0]
        order = np.argsort(-ref_scores, kind="stable")[:K]
        ref = allowed[order]
        top = got[0, :len(ref)]
        exact += bool(top.tolist() == ref.tolist() and np.allclose(
            scores[0, :len(ref)], ref_scores[order], atol=1e-4, rtol=0))
        hits += len(np.intersect1d(top[top >= 0], ref))
        wanted += len(ref)
      rows.append([kind, f"{selectivity:.1%}", f"{exact}/{args.filters}",
                   f"{hits / wanted:.4f}", f"{plain_hits / (K * args.filters):.4f}",
                   f"{exact_path}/{args.filters}",
                   f"{_p50_ms(filtered):.3f}", f"{_p50_ms(unfiltered):.3f}",
                   f"{_p50_ms(filtered) / _p50_ms(unfiltered):.2f}x",
                   f"{_qps(filtered):.0f}", f"{_qps(unfiltered):.0f}",
                   f"{built:.1f}"])
  _table(f"1. FAISS under a filter: {args.n:,} x {args.dim} clustered, {args.filters} "
         "filters per selectivity, one query each, top 10, 1 FAISS thread",
         ["index", "selectivity", "exact", "recall@10", "unfilt recall", "exact path",
          "p50 ms filt",
          "p50 ms unfilt", "p50 ratio", "q/s filt", "q/s unfilt", "build s"], rows)


# ---------------------------------------------------------------------------------------------
# 2. BM25 and the hybrid.
# ---------------------------------------------------------------------------------------------


def _texts(n: int, seed: int, lengths: tuple[int, int]) -> list[str]:
  rng = random.Random(seed)
  words = [f"w{i}" for i in range(400)]
  weights = [1 / (i + 1) ** 0.8 for i in range(400)]
  return [" ".join(rng.choices(words, weights, k=rng.randrange(*lengths))) for _ in range(n)]


def bm25_section(args, folder: str) -> None:
  n = args.bm25_docs
  ids = np.arange(n, dtype=np.int64) * 3 + 1
  index_dir = os.path.join(folder, "lucene")
  lucene.build_index(({"id": str(i), "contents": t} for i, t in
                      zip(ids.tolist(), _texts(n, 0, (8, 15)))), index_dir, threads=1)
  bm25 = lucene.Bm25Searcher(index_dir)
  x = faiss_ann.clustered(n, 32, seed=3)
  flat = faiss_index.new_index(faiss_index.IndexSpec(), 32)
  flat.add_with_ids(x, ids)
  dense = DenseSearcher(faiss_searcher.Searcher([faiss_searcher.Part("flat", flat, None)]),
                        model_key="synthetic")
  hybrid = FusedSearcher(bm25, dense, 0.5, depth=100)
  pool = _texts(200, 1, (1, 4))
  pool_vectors = faiss_ann.clustered(200, 32, seed=4)
  deep = bm25.search(pool, n)  # each query's whole ranking (the documents it matches)
  rng = np.random.default_rng(5)
  rows = []
  for selectivity in SELECTIVITIES:
    same_bm25 = same_hybrid = ties_hybrid = 0
    worst = 0.0
    times = {"bm25": [], "bm25 unfiltered": [], "hybrid": [], "hybrid unfiltered": []}
    for f in range(args.filters):
      p = f % len(pool)
      allowed = np.sort(rng.choice(ids, max(1, round(selectivity * n)), replace=False))
      restriction = Restriction.including(allowed)
      queries = Queries((pool[p],), {"synthetic": pool_vectors[p:p + 1]})
      params = SearchParams(restriction=restriction)
      t0 = time.perf_counter()
      (got,) = bm25.search(queries, K, params)
      times["bm25"].append(time.perf_counter() - t0)
      t0 = time.perf_counter()
      bm25.search(queries, K)
      times["bm25 unfiltered"].append(time.perf_counter() - t0)
      keep = restriction.allows(np.asarray(deep[p].candidate_ids, np.int64))
      ref_ids = np.asarray(deep[p].candidate_ids)[keep]
      ref_scores = np.asarray(deep[p].scores)[keep]
      same_bm25 += list(got.candidate_ids) == ref_ids[:K].tolist()
      if got.scores:
        worst = max(worst, float(np.max(np.abs(np.subtract(got.scores, ref_scores[:K])))))
      t0 = time.perf_counter()
      (fused,) = hybrid.search(queries, K, params)
      times["hybrid"].append(time.perf_counter() - t0)
      t0 = time.perf_counter()
      hybrid.search(queries, K)
      times["hybrid unfiltered"].append(time.perf_counter() - t0)
      rows_allowed = (allowed - 1) // 3
      dense_scores = (pool_vectors[p:p + 1] @ x[rows_allowed].T)[0]
      order = np.argsort(-dense_scores, kind="stable")[:100]
      reference = fusion.interpolate(
          {"q": Ranked(tuple(ref_ids[:100].tolist()), tuple(ref_scores[:100].tolist()))},
          {"q": Ranked(tuple(allowed[order].tolist()), tuple(dense_scores[order].tolist()))},
          0.5, 100)["q"]
      same_hybrid += list(fused.candidate_ids) == list(reference.candidate_ids[:K])
      ties_hybrid += same_up_to_ties(fused.candidate_ids, fused.scores,
                                     reference.candidate_ids[:K], reference.scores[:K], 1e-3)
    rows.append([f"{selectivity:.1%}", f"{same_bm25}/{args.filters}", f"{worst:.1e}",
                 f"{same_hybrid}/{args.filters}", f"{ties_hybrid}/{args.filters}",
                 f"{_p50_ms(times['bm25']):.2f}", f"{_p50_ms(times['bm25 unfiltered']):.2f}",
                 f"{_qps(times['bm25']):.0f}", f"{_qps(times['bm25 unfiltered']):.0f}",
                 f"{_p50_ms(times['hybrid']):.2f}", f"{_p50_ms(times['hybrid unfiltered']):.2f}"])
  bm25.close()
  _table(f"2. BM25 and hybrid under a filter: {n:,} documents, {args.filters} filters per "
         "selectivity, top 10 (hybrid: weight 0.5, 100 deep, dense flat d 32)",
         ["selectivity", "bm25 same", "bm25 max |ds|", "hybrid same", "hybrid ~ties",
          "bm25 p50 ms", "unfilt p50", "bm25 q/s", "unfilt q/s", "hybrid p50 ms",
          "unfilt p50"], rows)


# ---------------------------------------------------------------------------------------------
# 3. Updates against rebuilds.
# ---------------------------------------------------------------------------------------------


def _jsonl(path: str, docs: list[dict]) -> str:
  with open(path, "w", encoding="utf-8") as f:
    f.writelines(json.dumps(d) + "\n" for d in docs)
  return path


def _digests(folder: str) -> dict[str, str]:
  return {os.path.relpath(os.path.join(r, n), folder): fingerprints.file_sha256(
      os.path.join(r, n)) for r, _, names in os.walk(folder) for n in names}


def update_section(args, folder: str) -> str:
  """Returns the flat parent bundle (section 4 serves it)."""
  from twotower.deploy.bundling import bundle, update  # pylint: disable=import-outside-toplevel
  from twotower.deploy.serving import Retriever  # pylint: disable=import-outside-toplevel
  from twotower.testing import embed_standin  # pylint: disable=import-outside-toplevel
  n = args.update_docs
  model = embed_standin.build_standin_savedmodel(os.path.join(folder, "model"))
  texts = _texts(int(n * 1.2), 6, (10, 30))
  docs = [{"id": 7 * i + 2, "title": f"Page {i % 997}", "text": t,
           "section": ["", "History", "Geography"][i % 3], "topic": f"t{i % 20}"}
          for i, t in enumerate(texts)]
  base, spare = docs[:n], docs[n:]
  questions = _texts(50, 7, (2, 5))
  rows, parent_flat = [], ""
  exact_bundles: dict[float, str] = {}  # flat, from scratch: IVF's exact reference
  for kind in ("flat", "ivf"):
    spec = faiss_index.IndexSpec(type=kind)
    parent = os.path.join(folder, f"parent-{kind}")
    bundle.run(bundle.BundleConfig(model=model, docs=_jsonl(parent + ".jsonl", base),
                                   out=parent, weight=0.5, index=spec))
    parent_flat = parent_flat or parent
    before = _digests(parent)
    for share in (0.01, 0.1):
      count = round(share * n)
      added = spare[:count]
      deleted = [d["id"] for d in base[::max(1, n // count)]][:count]
      final = [d for d in base if d["id"] not in set(deleted)] + added
      tag = f"{kind}-{share:.0%}"
      add = _jsonl(os.path.join(folder, f"add-{tag}.jsonl"), added)
      delete = os.path.join(folder, f"delete-{tag}.txt")
      with open(delete, "w", encoding="utf-8") as f:
        f.writelines(f"{i}\n" for i in deleted)
      t0 = time.perf_counter()
      updated = update.run(update.UpdateConfig(parent, os.path.join(folder, f"up-{tag}"),
                                               add=add, delete=delete)).path
      update_s = time.perf_counter() - t0
      t0 = time.perf_counter()
      scratch = bundle.run(bundle.BundleConfig(
          model=model, docs=_jsonl(os.path.join(folder, f"all-{tag}.jsonl"), final),
          out=os.path.join(folder, f"scratch-{tag}"), weight=0.5, index=spec)).path
      rebuild_s = time.perf_counter() - t0
      a, b = Retriever.load(updated), Retriever.load(scratch)
      try:
        if kind == "flat":
          exact_bundles[share] = scratch
          same, worst = 0, 0.0
          for mode in ("dense", "bm25", "hybrid"):
            for p, q in zip(a.search(questions, k=K, mode=mode),
                            b.search(questions, k=K, mode=mode)):
              same += [h.id for h in p] == [h.id for h in q]
              worst = max([worst] + [abs(h.score - g.score) for h, g in zip(p, q)])
          answers = f"{same}/{3 * len(questions)} same ids, max |ds| {worst:.1e}"
        else:
          reference = Retriever.load(exact_bundles[share], modes=("dense",))
          ref = [[h.id for h in hits] for hits in reference.search(questions, k=K)]
          reference.close()
          recall = []
          for r in (a, b):
            got = [[h.id for h in hits] for hits in r.search(questions, k=K, nprobe=8)]
            recall.append(np.mean([len(set(g) & set(e)) / K for g, e in zip(got, ref)]))
          answers = f"recall@10 updated {recall[0]:.3f}, rebuilt {recall[1]:.3f} (nprobe 8)"
      finally:
        a.close()
        b.close()
      rows.append([kind, f"+{count} -{count} ({share:.0%})", f"{count} / {len(final)}",
                   f"{update_s:.1f}",
                   f"{rebuild_s:.1f}", f"{rebuild_s / update_s:.1f}x",
                   "unchanged" if _digests(parent) == before else "CHANGED", answers])
  _table(f"3. `bundle update` vs `bundle --docs` from scratch: {n:,} documents, stand-in "
         "tower d 64 (a hashed bag of words: embedding is cheap here, unlike a Transformer's)",
         ["index", "change", "embedded upd / rebuild", "update s", "rebuild s",
          "rebuild/update",
                       "parent", "answers"], rows)
  return parent_flat


# ---------------------------------------------------------------------------------------------
# 4. The hybrid service's start.
# ---------------------------------------------------------------------------------------------

_SERVE = r"""
import sys
from twotower.core import pyserini_env
if sys.argv[1] == "before":  # what the bundle's BM25 side imported before this change
  pyserini_env.import_lucene_searcher()
from twotower import cli
sys.exit(cli.main(["serve", *sys.argv[2:]]))
"""


def _rss_mib(pid: int) -> float:
  with open(f"/proc/{pid}/status", encoding="ascii") as f:
    return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))


def _has_torch(pid: int) -> bool:
  with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
    return "libtorch" in f.read()


def service_section(args, bundle_dir: str) -> None:
  results: dict[str, list[tuple[float, float, bool]]] = {"before": [], "after": []}
  for _ in range(args.service_repeats):
    for which in ("before", "after"):
      port = server_lib.free_port()
      t0 = time.perf_counter()
      process = subprocess.Popen(
          [sys.executable, "-c", _SERVE, which, bundle_dir, "--host", server_lib.LOOPBACK,
           "--port", str(port), *args.serve_args],
          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
      try:
        server_lib.wait_ready(f"http://{server_lib.LOOPBACK}:{port}", 600, process)
        results[which].append((time.perf_counter() - t0, _rss_mib(process.pid),
                               _has_torch(process.pid)))
      finally:
        process.terminate()
        process.wait(60)
  rows = []
  for which, runs in results.items():
    ready = statistics.median(r[0] for r in runs)
    rss = statistics.median(r[1] for r in runs)
    rows.append([which, f"{ready:.1f}", f"{rss:.0f}", "yes" if runs[0][2] else "no"])
  rows.append(["after/before",
               f"{float(rows[1][1]) / float(rows[0][1]):.2f}x",
               f"{float(rows[1][2]) / float(rows[0][2]):.2f}x", ""])
  _table(f"4. `twotower serve` (dense, bm25, hybrid; {' '.join(args.serve_args) or 'defaults'})"
         f" over {os.path.basename(bundle_dir)}: median of {args.service_repeats}",
         ["BM25 import", "ready s", "RSS MiB", "PyTorch mapped"], rows)


def onnx_bundle(folder: str) -> str:
  """A bundle of the stand-in ReQA candidates over a tiny Transformer run (10 steps) with its
  query tower as ONNX (`bundle --onnx`): what a TensorFlow-free service serves."""
  from twotower.testing import pairs as testing  # pylint: disable=import-outside-toplevel
  from twotower.deploy.bundling import bundle  # pylint: disable=import-outside-toplevel
  from twotower.model import config, pretrain  # pylint: disable=import-outside-toplevel
  from twotower.pipelines.reqa import builder as reqa  # pylint: disable=import-outside-toplevel
  from twotower.testing import squad  # pylint: disable=import-outside-toplevel
  root = os.path.join(folder, "onnx")
  os.makedirs(root)
  testing.write_vocab(os.path.join(root, "vocab.txt"))
  testing.write_pairs(root, "ict", "train", testing.synthetic_pairs(64))
  testing.write_pairs(root, "ict", "heldout", testing.synthetic_pairs(16, seed=5))
  run = os.path.join(root, "run")
  pretrain.run(pretrain.PretrainConfig(training=config.load("tiny", ["trainer.steps=10"]),
                                       out=run, vocab=os.path.join(root, "vocab.txt"),
                                       pairs=root, progress="none"))
  reqa_dir = os.path.join(root, "reqa")
  reqa.run(reqa.ReqaConfig(out=reqa_dir, squad=squad.write_squad(
      os.path.join(root, "squad.json")), ratios=(80,)))
  out = os.path.join(root, "bundle")
  bundle.run(bundle.BundleConfig(model=run, reqa=reqa_dir, out=out, weight=0.5, onnx=True))
  return out


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--n", type=int, default=100_000, help="vectors of section 1")
  p.add_argument("--dim", type=int, default=64, help="their dimension")
  p.add_argument("--filters", type=int, default=1000, help="random filters per selectivity")
  p.add_argument("--bm25_docs", type=int, default=5000, help="documents of section 2")
  p.add_argument("--update_docs", type=int, default=20_000, help="documents of section 3")
  p.add_argument("--service_repeats", type=int, default=3, help="starts of each service")
  p.add_argument("--serve_args", default="--threads 1",
                 help="flags of the served `twotower serve` (section 4)")
  p.add_argument("--bundle", default="", help="serve this bundle in section 4 (e.g. one with "
                                              "an ONNX query tower) instead of section 3's")
  p.add_argument("--onnx", action="store_true",
                 help="section 4 also over a tiny run's bundle with its ONNX query tower")
  p.add_argument("--sections", default="faiss,bm25,update,service",
                 help="which sections to run (comma list)")
  args = p.parse_args()
  args.serve_args = args.serve_args.split()
  logs.setup(verbose=False)
  sections = set(args.sections.split(","))
  folder = tempfile.mkdtemp(prefix="filtered-search-")
  try:
    print(f"filtered_search: {os.cpu_count()} CPUs, faiss {faiss.__version__}, "
          f"exact scoring up to {faiss_searcher.EXACT_SCORING_MAX:,} documents")
    if "faiss" in sections:
      faiss_section(args, folder)
    if "bm25" in sections:
      bm25_section(args, folder)
    bundle_dir = args.bundle
    if "update" in sections or ("service" in sections and not bundle_dir):
      parent = update_section(args, folder)
      bundle_dir = bundle_dir or parent
    if "service" in sections:
      service_section(args, bundle_dir)
      if args.onnx:
        serve_args = args.serve_args
        args.serve_args = [*serve_args, "--encoder", "onnx"]
        service_section(args, onnx_bundle(folder))
        args.serve_args = serve_args
  finally:
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
  main()
