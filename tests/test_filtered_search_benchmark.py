"""benchmarks/filtered_search.py at a tiny size: its FAISS and BM25 sections run and their
brute-force checks come out exact where exactness is promised (flat and every exact-path
filter; BM25 ids), in the table it prints."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_benchmark_prints_exact_filtered_results():
  out = subprocess.run(
      [sys.executable, "-m", "benchmarks.filtered_search", "--n", "3000", "--dim", "16",
       "--filters", "6", "--bm25_docs", "300", "--sections", "faiss,bm25"],
      capture_output=True, text=True, timeout=900, check=True, cwd=ROOT).stdout
  lines = out.splitlines()
  faiss_rows = [line.split() for line in lines if line.split()[:1] in (
      ["flat"], ["ivf"], ["hnsw"], ["ivfpq_rerank"])]
  assert len(faiss_rows) == 16
  for row in faiss_rows:
    kind, _, exact, recall, _, exact_path = row[:6]
    if kind == "flat" or exact_path == "6/6":  # exact scoring: the brute force's answer
      assert exact == "6/6" and recall == "1.0000", row
  start = next(i for i, line in enumerate(lines) if line.startswith("2. BM25"))
  bm25_rows = [line.split() for line in lines[start + 2:start + 6]]
  assert [row[0] for row in bm25_rows] == ["0.1%", "1.0%", "10.0%", "50.0%"]
  assert all(row[1] == "6/6" for row in bm25_rows)  # BM25: the same ids as the reference
