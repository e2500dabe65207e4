"""Does a bundle answer as the batch path does? The reference every mode must equal:

  dense   `twotower embed` of the candidates -> `twotower index` (flat), `twotower embed` of
          the questions -> `twotower search`
  bm25    `twotower bm25` (its own Lucene index) -> run.trec
  hybrid  `twotower fuse --weight W` of those two run files, W the bundle's weight

    runs, seconds = batch_path_runs(model, reqa_dir, "test-5", weight, work_dir)
    report = compare(Retriever.load(bundle_dir), runs, questions, k=100)

Scores of TREC run files (BM25, fused) are written to 6 decimals, so equal answers differ by
at most 5e-7 there.

`python -m benchmarks.serve_equivalence` runs it on a real bundle; tests/test_serving.py runs
the same comparison against the stages run from their own inputs. A check for tests and
benchmarks, not a step of the product: no command runs it.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Sequence

import numpy as np

from twotower.core import contracts
from twotower.eval.runs import Ranked, Run

#: Scores this close are a tie (a TREC run file keeps 6 decimals).
TIE_TOLERANCE = 1e-5


@dataclasses.dataclass(frozen=True)
class Agreement:
  """How one mode's answers compare with the batch path's."""
  mode: str
  questions: int
  same_ids: int            # questions whose top-k ids are identical, in order
  same_up_to_ties: int     # ... or with every score within TIE_TOLERANCE of the reference's
                           # at its rank, ids swapped only among such near-equal scores (a
                           # TREC run file keeps 6 decimals, so its near-ties reorder)
  max_score_diff: float    # over the questions with the same ids
  seconds_batch: float     # the batch path's time for all questions
  seconds_api: float       # the API's, one call with every question


def batch_path_runs(model: str, reqa_dir: str, split: str, weight: float, work: str,
                    doc_text: str = "sentence+passage", k: int = 100
                    ) -> tuple[dict[str, Run], dict[str, float]]:
  """The three reference runs of `split`'s questions, each made by the stages from their own
  inputs (the candidates embedded and indexed anew, Lucene indexed anew), and the seconds
  each took: `{"dense", "bm25", "hybrid"} -> Run`."""
  from twotower.eval import bm25, fusion  # pylint: disable=import-outside-toplevel
  from twotower.eval import index as index_stage  # pylint: disable=import-outside-toplevel
  from twotower.eval import search as search_stage  # pylint: disable=import-outside-toplevel
  from twotower.eval.runs import read_run  # pylint: disable=import-outside-toplevel
  from twotower.pipelines import embed  # pylint: disable=import-outside-toplevel
  path = lambda name: os.path.join(work, name)  # noqa: E731
  os.makedirs(work, exist_ok=True)
  seconds = {}
  embed.run(embed.EmbedConfig(model=model, out=path("candidates"), kind="candidates",
                              path=contracts.candidates_path(reqa_dir), doc_text=doc_text))
  index_stage.run(index_stage.IndexConfig(embeddings=path("candidates"), out=path("flat.faiss")))
  t0 = time.perf_counter()
  embed.run(embed.EmbedConfig(model=model, out=path("questions"), kind="questions",
                              path=contracts.questions_path(reqa_dir, split)))
  search_stage.run(search_stage.SearchConfig(index=path("flat.faiss"), queries=path("questions"),
                                          out=path(contracts.DENSE_RUN_FILE), k=k))
  seconds["dense"] = time.perf_counter() - t0
  t0 = time.perf_counter()
  bm25.run(bm25.Bm25Config(reqa=reqa_dir, out=path("bm25"), doc_text=doc_text,
                           splits=(split,), hits=k))
  seconds["bm25"] = time.perf_counter() - t0  # with indexing: the stage does both
  sparse_file = contracts.bm25_run_path(path("bm25"))
  t0 = time.perf_counter()
  fusion.run(fusion.FuseConfig(runs=(sparse_file, path(contracts.DENSE_RUN_FILE)),
                               out=path("fused.trec"), weight=weight, depth=k))
  seconds["hybrid"] = seconds["dense"] + seconds["bm25"] + time.perf_counter() - t0
  runs = {"dense": read_run(path(contracts.DENSE_RUN_FILE)), "bm25": read_run(sparse_file),
          "hybrid": read_run(path("fused.trec"))}
  return runs, seconds


def compare(retriever, runs: dict[str, Run], questions: Sequence[tuple[str, str]], k: int,
            seconds: dict[str, float] | None = None) -> list[Agreement]:
  """The retriever's answers (one batched call per mode) against each reference run."""
  out = []
  for mode, reference in runs.items():
    t0 = time.perf_counter()
    hits = retriever.search([q for _, q in questions], k=k, mode=mode)
    api_seconds = time.perf_counter() - t0
    same, same_ties, worst = 0, 0, 0.0
    for (qid, _), per_query in zip(questions, hits):
      ref = reference.get(qid, Ranked((), ()))
      ids = [h.id for h in per_query]
      if ids == list(ref.candidate_ids):
        same += 1
        if per_query:
          worst = max(worst, float(np.max(np.abs(np.subtract([h.score for h in per_query],
                                                             ref.scores)))))
      same_ties += same_up_to_ties(ids, [h.score for h in per_query], ref.candidate_ids,
                                      ref.scores)
    out.append(Agreement(mode, len(questions), same, same_ties, worst,
                         (seconds or {}).get(mode, 0.0), api_seconds))
  return out


def same_up_to_ties(ids: Sequence[int], scores: Sequence[float], ref_ids: Sequence[int],
                    ref_scores: Sequence[float], tolerance: float = TIE_TOLERANCE) -> bool:
  """Equal rankings but for the order of near-equal scores (FAISS's tie-aware check of a
  search against its reference): the scores agree rank by rank within `tolerance`, and the
  ids above the last score's tie group are the same set."""
  if len(ids) != len(ref_ids):
    return False
  if any(abs(a - b) > tolerance for a, b in zip(scores, ref_scores)):
    return False
  if list(ids) == list(ref_ids) or not ids:
    return True
  floor = ref_scores[-1] + tolerance
  return ({i for i, s in zip(ids, scores) if s > floor} ==
          {i for i, s in zip(ref_ids, ref_scores) if s > floor})
