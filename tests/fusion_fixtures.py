"""Small ReQA directories and runs for the fusion tests (tests/test_fusion*.py): candidates, the
splits' questions with their gold, and BM25 / dense runs whose fused order is known by hand."""

from __future__ import annotations

from typing import Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from twotower.core import contracts
from twotower.eval.runs import Ranked


def write_reqa(directory, candidates: Sequence[int],
               splits: Mapping[str, Sequence[tuple[str, int]]]) -> str:
  """A ReQA directory: `candidates` (ids), and per split its (question id, gold id)."""
  directory.mkdir()
  cands = [{"candidate_id": i, "sentence": f"s{i}", "passage": f"p{i}", "title": "t",
            "source": "squad"} for i in candidates]
  pq.write_table(pa.Table.from_pylist(cands, schema=contracts.CANDIDATE_SCHEMA),
                 directory / contracts.CANDIDATES_FILE)
  for split, rows in splits.items():
    pq.write_table(pa.Table.from_pylist(
        [{"question_id": q, "question": q, "gold_candidate_ids": [g]} for q, g in rows],
        schema=contracts.QUESTION_SCHEMA), directory / contracts.questions_file(split))
  return str(directory)


#: BM25's list of every question of `trading_runs`: candidates 1..10 scored 10..1 (normalised
#: 1, 8/9, ..., 0), except that a "top-1" question's first two nearly tie (10, 9.99).
BM25_IDS = tuple(range(1, 11))


def trading_runs(top1: Sequence[str], rescued: Sequence[str]) -> tuple[dict, dict]:
  """(BM25, dense) runs where every dense weight trades R@1 for deeper recall.

  A `top1` question's gold is BM25's first (1), a hair above its second (2), which the dense
  run ranks alone: at any weight below 1 candidate 2 passes the gold (0.999w + (1 - w) > w),
  so R@1 falls. A `rescued` question's gold (11) is missing from BM25's list; the dense run
  ranks it alone, so at weight w it scores 1 - w and enters the top 10 (w = 0.95), the top 5
  (w < 9/14) and, below 0.5, the top 1: R@10..100 rise with every weight below 1.
  """
  bm25, dense = {}, {}
  for q in top1:
    bm25[q] = Ranked(BM25_IDS, (10.0, 9.99, *[float(s) for s in range(8, 0, -1)]))
    dense[q] = Ranked((2,), (0.7,))
  for q in rescued:
    bm25[q] = Ranked(BM25_IDS, tuple(float(s) for s in range(10, 0, -1)))
    dense[q] = Ranked((11,), (0.7,))
  return bm25, dense
