"""`twotower search --index FILE --queries DIR --out RUN`: query embeddings against a FAISS
index -> run file (the flags of eval.search)."""

from __future__ import annotations

import argparse
from typing import Iterable

from twotower.commands import dataclass_flags, flags
from twotower.eval import search

#: Each flag's help; name, type and default come from SearchConfig (commands.dataclass_flags).
HELP = {
    "index": "index file, or a glob / comma list of index shards (IndexShards)",
    "queries": ("query embeddings (string ids): folder(s), files or globs, comma-separated, "
                "as index --embeddings"),
    "out": "run file: *.parquet (RUN_SCHEMA) or TREC",
    "k": "candidates per question",
    "nprobe": "IVF lists visited per query",
    "ef_search": "HNSW search beam width",
    "batch_size": "queries per FAISS call",
    "threads": "FAISS OpenMP threads (0: all)",
    "mmap": "memory-map the index file(s) (flat, HNSW storage, IVF lists); a type FAISS cannot "
            "map (fast-scan IVF) is refused",
    "rerank": "re-rank the top k*R candidates exactly from the vectors stored beside the index "
              "(default: 4 when they exist, else off; 0: off)",
    "tag": "TREC run tag",
    "reference": "document embeddings the index was built from: report Recall@k against exact "
                 "flat inner-product search and queries/s",
    "report": "where to write that report (default: OUT + '.report.json')",
    "allow_unchecked_vectors": "take an index, queries or reference whose model no record "
                               "names (no vectors.json, no bundle manifest), with a warning, "
                               "instead of refusing them",
}


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("search", search.__doc__)
  dataclass_flags.add_fields(p, search.SearchConfig, HELP, exclude=("overwrite",),
                             kwargs={"k": {"type": flags.positive_int},
                                     "batch_size": {"type": flags.positive_int}})
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> search.SearchConfig:
  args = build_parser().parse_args(None if argv is None else list(argv))
  return dataclass_flags.config_from(args, search.SearchConfig)


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
