"""benchmarks/faiss_rerank.py on a tiny set: every row is measured in its own process and the
table holds each index against flat (no timing asserted)."""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("faiss")

# benchmarks/ is a plain folder at the repository root, not part of the installed package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import faiss_rerank  # noqa: E402


def test_tiny_run_measures_every_row(tmp_path, capsys):
  rows = faiss_rerank.main(["--n", "3000", "--dim", "32", "--queries", "30", "--single", "5",
                            "--nlist", "16", "--nprobes", "16", "--reranks", "2",
                            "--train_size", "3000", "--files", "2", "--tmp", str(tmp_path)])
  by_label = {(c.label.split(" `")[0], c.setting): m for c, m in rows}
  assert by_label[("Flat (exact)", "-")]["recall"] == 1.0
  assert by_label[("IVF-Flat", "nprobe=16")]["recall"] == pytest.approx(1.0)  # all 16 lists
  codes = by_label[("ivfpq_rerank", "nprobe=16 rerank=0 (codes only)")]
  reranked = by_label[("ivfpq_rerank (defaults)", "nprobe=16 rerank=4")]
  assert reranked["recall"] >= codes["recall"]
  # The re-ranked index carries its vectors on disk; its codes alone are smaller than flat.
  assert reranked["disk"] > codes["disk"]
  assert codes["disk"] < by_label[("Flat (exact)", "-")]["disk"]
  assert all(m["qps"] > 0 and m["p99_ms"] >= m["p50_ms"] > 0 for _, m in rows)
  out = capsys.readouterr().out
  assert "| ivfpq_rerank (defaults) `IVF16,PQ8x8` | nprobe=16 rerank=4 |" in out
  assert "1 FAISS thread(s) per search process" in out


def test_compare_codes_measures_both_codes_filtered_and_not(tmp_path, capsys):
  built = faiss_rerank.main(["--compare_codes", "--n", "3000", "--dim", "32", "--queries", "40",
                             "--single", "5", "--nlist", "16", "--train_size", "0",
                             "--files", "2", "--filters", "2", "--tmp", str(tmp_path)])
  (fast_label, fast), (eight_label, eight) = built.items()
  assert fast["factory"] == "IVF16,PQ16x4fs" and eight["factory"] == "IVF16,PQ8x8"
  assert fast["code_bytes"] == eight["code_bytes"] == 8  # d/4 bytes a vector, both
  # A filter of at most EXACT_SCORING_MAX documents is scored exactly from the vectors.
  for figures in (fast, eight):
    assert figures["filter 1 %"]["recall100"] == figures["filter 10 %"]["recall100"] == 1.0
    assert 0 < figures["unfiltered"]["recall100"] <= 1
    assert all(m["qps"] > 0 for key, m in figures.items() if isinstance(m, dict))
  # Exactly one of the two is what `ivfpq_rerank` builds.
  assert sum("ivfpq_rerank default" in label for label in (fast_label, eight_label)) == 1
  out = capsys.readouterr().out
  assert "| unfiltered | Recall@100 |" in out and "| filter 10 %, index path | Recall@10 |" in out
