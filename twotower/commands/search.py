"""`twotower search --index FILE --queries DIR --out RUN`: query embeddings against a FAISS
index -> run file (the flags of eval.search)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.commands import flags
from twotower.eval import search


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("search", search.__doc__)
  p.add_argument("--index", required=True,
                 help="index file, or a glob / comma list of index shards (IndexShards)")
  p.add_argument("--queries", required=True, help="query embeddings (string ids): folder(s), "
                 "files or globs, comma-separated, as index --embeddings")
  p.add_argument("--out", required=True, help="run file: *.parquet (RUN_SCHEMA) or TREC")
  p.add_argument("--k", type=flags.positive_int, default=100, help="candidates per question")
  p.add_argument("--nprobe", type=int, default=None, help="IVF lists visited per query")
  p.add_argument("--ef_search", type=int, default=None, help="HNSW search beam width")
  p.add_argument("--batch_size", type=flags.positive_int, default=4096, help="queries per FAISS call")
  p.add_argument("--threads", type=int, default=0, help="FAISS OpenMP threads (0: all)")
  p.add_argument("--mmap", action="store_true",
                 help="memory-map the index file(s) (flat, HNSW storage, IVF lists); a type "
                      "FAISS cannot map (fast-scan IVF) is refused")
  p.add_argument("--rerank", type=int, default=None,
                 help="re-rank the top k*R candidates exactly from the vectors stored beside "
                      "the index (default: 4 when they exist, else off; 0: off)")
  p.add_argument("--tag", default="twotower", help="TREC run tag")
  p.add_argument("--reference", default=None,
                 help="document embeddings the index was built from: report Recall@k "
                      "against exact flat inner-product search and queries/s")
  p.add_argument("--report", default=None,
                 help="where to write that report (default: OUT + '.report.json')")
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> search.SearchConfig:
  args = build_parser().parse_args(None if argv is None else list(argv))
  fields = {k: v for k, v in vars(args).items() if k != "verbose"}
  return search.SearchConfig(**fields)


def main(argv: Iterable[str] | None = None) -> None:
  result = search.run(parse(argv))
  line = (f"searched {result.queries} queries in {result.seconds:.2f} s -> "
          f"{result.run_file}")
  if result.report:
    r = result.report
    recalls = "  ".join(f"{key} {v:.4f}" for key, v in r["recall_vs_flat"].items())
    line += (f"\nvs flat: {recalls}  |  {r['qps']:.0f} q/s vs flat {r['flat_qps']:.0f} "
             f"q/s ({r['qps'] / r['flat_qps']:.1f}x)")
  print(line)
