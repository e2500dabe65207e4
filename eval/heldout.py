"""A ReQA-style benchmark from held-out Wikipedia pages, for when no QA data is at hand.

The pair pipeline holds out pages by a hash of their id (`--heldout_percent`); their ICT pairs
never feed training. Here they become a retrieval benchmark in the ReQA layout, so that BM25,
`embed` + `search` and `evaluate` run on it unchanged:

  * questions: the sentence each held-out ICT pair removed from its passage;
  * candidates: every passage of every held-out page (one candidate per passage,
    `candidate_id = contracts.passage_uid(page_id, passage_id)`); a passage that lost a query
    sentence appears without it, so nobody can match the query verbatim;
  * gold: the passage the sentence came from.

Candidates carry their text in `passage` with an empty `sentence`: use the document layout
"sentence+passage" (the default of `twotower.texts`), which then is just the passage.
"""

from __future__ import annotations

import glob
import logging
import os

import pyarrow as pa
import pyarrow.parquet as pq

from twotower import contracts
from twotower import io as tio

logger = logging.getLogger(__name__)


def _read_pairs(pattern: str) -> list[dict]:
  """tf.train.Examples of the pair schema as dicts (TensorFlow is imported here only)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  rows = []
  files = sorted(glob.glob(pattern))
  for record in tf.data.TFRecordDataset(files).as_numpy_iterator():
    ex = tf.train.Example.FromString(record).features.feature
    row = {k: ex[k].bytes_list.value[0].decode("utf-8") for k in contracts.PAIR_BYTES_FEATURES}
    row.update({k: int(ex[k].int64_list.value[0]) for k in contracts.PAIR_INT64_FEATURES})
    rows.append(row)
  return rows


def build_heldout_benchmark(pairs_out: str, out_dir: str, heldout_percent: float,
                            task: str = "ict") -> dict[str, int]:
  """Writes `candidates.parquet` and `questions-all.parquet` of the held-out pages.

  Args:
    pairs_out: a `twotower pairs --out` directory (with pairs/ and passages/).
    out_dir: where to write the benchmark (a ReQA-layout directory).
    heldout_percent: the `--heldout_percent` the pairs were made with (decides the pages).
    task: the pair task whose held-out pairs give the questions (ICT: removed sentences).

  Returns:
    Counts: questions, candidates, heldout_pages.
  """
  _, heldout = contracts.PAIR_SPLITS
  pairs = _read_pairs(f"{contracts.pairs_prefix(pairs_out, task, heldout)}-*")
  # One question per passage: the first pair by (page, passage, query), so the candidate text
  # (the passage without that sentence) is well defined and the choice is deterministic.
  pairs.sort(key=lambda r: (r["doc_page_id"], r["doc_passage_id"], r["query"]))
  by_passage: dict[int, dict] = {}
  for row in pairs:
    by_passage.setdefault(contracts.passage_uid(row["doc_page_id"], row["doc_passage_id"]), row)

  passages = pq.read_table(os.path.dirname(contracts.passages_prefix(pairs_out)),
                           columns=["page_id", "passage_id", "title", "text"]).to_pylist()
  candidates, pages = [], set()
  for p in sorted(passages, key=lambda p: (p["page_id"], p["passage_id"])):
    if not contracts.is_heldout(p["page_id"], heldout_percent):
      continue
    uid = contracts.passage_uid(p["page_id"], p["passage_id"])
    text = by_passage[uid]["doc_text"] if uid in by_passage else p["text"]
    candidates.append({"candidate_id": uid, "sentence": "", "passage": text, "title": p["title"],
                       "source": "wikipedia-heldout"})
    pages.add(p["page_id"])
  known = {c["candidate_id"] for c in candidates}
  questions = [{"question_id": f"{task}-{r['doc_page_id']}-{r['doc_passage_id']}",
                "question": r["query"], "gold_candidate_ids": [uid]}
               for uid, r in sorted(by_passage.items()) if uid in known]
  if not questions:
    raise ValueError(f"{pairs_out}: no held-out {task} pairs; re-run `twotower pairs` with a "
                     f"larger --heldout_percent (was {heldout_percent})")
  tio.makedirs(out_dir)
  pq.write_table(pa.Table.from_pylist(candidates, contracts.CANDIDATE_SCHEMA),
                 os.path.join(out_dir, contracts.CANDIDATES_FILE))
  pq.write_table(pa.Table.from_pylist(questions, contracts.QUESTION_SCHEMA),
                 os.path.join(out_dir, contracts.questions_file("all")))
  counts = {"questions": len(questions), "candidates": len(candidates),
            "heldout_pages": len(pages)}
  tio.write_json(os.path.join(out_dir, contracts.STATS_FILE), counts)
  logger.info("held-out benchmark in %s: %s", out_dir, counts)
  return counts
