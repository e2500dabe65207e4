"""Run files: question id -> ranked candidate ids with scores, as TREC text or Parquet.

  TREC:    `qid Q0 docid rank score tag`, one line per retrieved candidate (`*.trec`, `*.txt`,
           anything not `.parquet`); docids are int64 candidate ids (`trec_rows` also reads
           them as the file's strings, for BEIR's runs: eval.ir_metrics.read_trec).
  Parquet: contracts.RUN_SCHEMA, one row per question, lists best first (`*.parquet`).

In memory a run is `contracts.Run`: `dict[question_id, contracts.Ranked]`, lists sorted best
first (the records are contracts, as RUN_SCHEMA: Lucene BM25, below eval, returns them too).
"""

from __future__ import annotations

from typing import Iterator, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from twotower.core import contracts
from twotower.core import files as tio
from twotower.core.contracts import Ranked, Run


def is_parquet(path: str) -> bool:
  return path.endswith(".parquet")


def ids_only(run: Mapping[str, Ranked]) -> dict[str, tuple[int, ...]]:
  return {qid: r.candidate_ids for qid, r in run.items()}


def write_run(path: str, run: Mapping[str, Ranked], tag: str = "twotower") -> None:
  """Writes `run` (lists best first) as Parquet or TREC by the path's suffix, atomically."""
  qids = sorted(run)
  if is_parquet(path):
    table = pa.Table.from_pydict({
        "question_id": qids,
        "candidate_ids": [list(run[q].candidate_ids) for q in qids],
        "scores": [[float(s) for s in run[q].scores] for q in qids],
    }, schema=contracts.RUN_SCHEMA)
    tio.write_parquet(path, table)
    return
  lines = []
  for q in qids:
    for rank, (cid, score) in enumerate(zip(run[q].candidate_ids, run[q].scores), start=1):
      lines.append(f"{q} Q0 {cid} {rank} {score:.6f} {tag}")
  tio.write_text(path, "\n".join(lines) + ("\n" if lines else ""))


def read_run(path: str) -> Run:
  """Reads a TREC or Parquet run.

  Raises:
    ValueError: a malformed line (names the file and line) or a Parquet file without the
      RUN_SCHEMA columns.
  """
  if is_parquet(path):
    table = pq.read_table(path)
    missing = [n for n in ("question_id", "candidate_ids") if n not in table.column_names]
    if missing:
      raise ValueError(f"{path}: not a run file (no {missing} column)")
    rows = table.to_pylist()
    return {r["question_id"]: Ranked(tuple(int(c) for c in r["candidate_ids"]),
                                     tuple(float(s) for s in (r.get("scores") or
                                                              [0.0] * len(r["candidate_ids"]))))
            for r in rows}
  entries: dict[str, list[tuple[int, int, float]]] = {}
  for qid, docid, rank, score in trec_rows(path):
    entries.setdefault(qid, []).append((rank, docid, score))
  run: Run = {}
  for qid, rows in entries.items():
    rows.sort(key=lambda r: (r[0], -r[2]))
    run[qid] = Ranked(tuple(r[1] for r in rows), tuple(r[2] for r in rows))
  return run


def trec_rows(path: str, int_ids: bool = True) -> Iterator[tuple[str, int | str, int, float]]:
  """(qid, docid, rank, score) of each line of a TREC run file, in file order (blank lines
  skipped): docids as int64 candidate ids, or with int_ids=False as the file's own strings.

  Raises:
    ValueError: a line that is not `qid Q0 docid rank score tag`, or whose rank, score or
      (int_ids) docid is not a number (names the file and line).
  """
  numeric = "docid, rank or score" if int_ids else "rank or score"
  for n, line in enumerate(tio.read_text(path).splitlines(), start=1):
    if not line.strip():
      continue
    parts = line.split()
    if len(parts) != 6:
      raise ValueError(f"{path}:{n}: expected `qid Q0 docid rank score tag`, got {line!r}")
    try:
      row = (parts[0], int(parts[2]) if int_ids else parts[2], int(parts[3]), float(parts[4]))
    except ValueError as e:
      raise ValueError(f"{path}:{n}: non-numeric {numeric} in {line!r}") from e
    yield row
