"""`twotower heldout --pairs DIR --out DIR`: a ReQA-style benchmark from held-out Wikipedia
pages, for when no QA data is at hand.

The pair pipeline holds out pages by a hash of their id (`--heldout_percent`); their ICT pairs
never feed training. Here they become a retrieval benchmark in the ReQA layout, so that BM25,
`embed` + `search` and `evaluate` run on it unchanged:

  * questions: the sentence each held-out ICT pair removed from its passage;
  * candidates: every passage of every held-out page (one candidate per passage,
    `candidate_id = contracts.passage_uid(page_id, passage_id)`); a passage that lost a query
    sentence appears without it, so nobody can match the query verbatim;
  * gold: the passage the sentence came from.

    PAIRS/pairs/<task>/heldout-*.tfrecord  (codecs.read_pairs, no TensorFlow)
    PAIRS/passages/*.parquet               (codecs.read_passages)
      --> OUT/candidates.parquet (contracts.Candidate), OUT/questions-all.parquet
          (contracts.Question), OUT/stats.json (questions, candidates, heldout_pages)

The held-out share is the one the pair pipeline wrote in its config.json, unless given.
Candidates carry their text in `passage` with an empty `sentence`: use the document layout
"sentence+passage" (the default of `twotower.core.tower_text`), which then is just the passage.

`run(HeldoutConfig)` is the typed entry point; `twotower heldout` (twotower.commands.heldout)
is its flag parser. One process: a held-out share of a Wikipedia is small.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from typing import Optional, Sequence

from twotower.core import contracts
from twotower.core import files as tio
from twotower.core import outputs
from twotower.core.contracts import Candidate, Pair, Question, codecs
from twotower.core.contracts import counters as C

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class HeldoutConfig:
  """Everything `twotower heldout` needs."""
  pairs: str                 # a `twotower pairs --out` directory (pairs/, passages/)
  out: str                   # the benchmark directory (ReQA layout)
  heldout_percent: Optional[float] = None  # None: the pair pipeline's, from its config.json
  task: str = "ict"          # the task whose held-out pairs give the questions
  overwrite: bool = False    # replace an --out that holds another run (outputs.staged)


def question_id(task: str, pair: Pair) -> str:
  return f"{task}-{pair.doc_page_id}-{pair.doc_passage_id}"


def benchmark(pairs: Sequence[Pair], passages: Sequence[contracts.Passage],
              heldout_percent: float, task: str = "ict"
              ) -> tuple[list[Candidate], list[Question], int]:
  """(candidates, questions, held-out pages) from the held-out pairs of `task` and all
  passages: one question per passage that lost a sentence."""
  # One question per passage: the first pair by (page, passage, query), so the candidate text
  # (the passage without that sentence) is well defined and the choice is deterministic.
  by_passage: dict[int, Pair] = {}
  for pair in sorted(pairs, key=lambda p: (p.doc_page_id, p.doc_passage_id, p.query)):
    by_passage.setdefault(contracts.passage_uid(pair.doc_page_id, pair.doc_passage_id), pair)
  candidates, pages = [], set()
  for p in sorted(passages, key=lambda p: (p.page_id, p.passage_id)):
    if not contracts.is_heldout(p.page_id, heldout_percent):
      continue
    uid = contracts.passage_uid(p.page_id, p.passage_id)
    text = by_passage[uid].doc_text if uid in by_passage else p.text
    candidates.append(Candidate(uid, "", text, p.title, contracts.HELDOUT_SOURCE, p.section))
    pages.add(p.page_id)
  known = {c.candidate_id for c in candidates}
  questions = [Question(question_id(task, pair), pair.query, (uid,))
               for uid, pair in sorted(by_passage.items()) if uid in known]
  return candidates, questions, len(pages)


def _write_parquet(rows: list[dict], schema, path: str) -> None:
  import pyarrow as pa  # pylint: disable=import-outside-toplevel
  tio.write_parquet(path, pa.Table.from_pylist(rows, schema))


def run(config: HeldoutConfig) -> outputs.StageResult:
  """Writes candidates.parquet, questions-all.parquet and stats.json of the held-out pages.

  Raises:
    ValueError: no held-out pair of `config.task` (names the share and where it came from).
  """
  tio.log_settings("twotower heldout", dataclasses.asdict(config))
  percent = config.heldout_percent
  where = "given"
  if percent is None:
    percent = codecs.read_heldout_percent(config.pairs)
    where = f"from {contracts.PAIRS_CONFIG_FILE}"
  pairs = list(codecs.read_pairs(codecs.pair_files(config.pairs, config.task,
                                                   contracts.HELDOUT)))
  passages = list(codecs.read_passages(config.pairs, columns=("title", "text")))
  candidates, questions, pages = benchmark(pairs, passages, percent, config.task)
  if not questions:
    raise ValueError(f"{config.pairs}: no held-out {config.task} pairs; re-run `twotower "
                     f"pairs` with a larger --heldout_percent (was {percent}, {where})")
  counts = {C.QUESTIONS: len(questions), C.CANDIDATES: len(candidates),
            C.HELDOUT_PAGES: pages}
  # Replaces --out whole (outputs.staged): a reader never sees two benchmarks mixed.
  with outputs.staged(config.out, "heldout", outputs.settings_of(config),
                      inputs=[config.pairs], overwrite=config.overwrite) as out:
    _write_parquet([c.to_row() for c in candidates], contracts.CANDIDATE_SCHEMA,
                   contracts.candidates_path(out))
    _write_parquet([q.to_row() for q in questions], contracts.QUESTION_SCHEMA,
                   contracts.questions_path(out, contracts.ALL_QUESTIONS))
    tio.write_json(contracts.stats_path(out), counts)
  logger.info("held-out benchmark in %s: %s", config.out, counts)
  return outputs.StageResult.of(config.out, counts)


def summary_table(counts: dict[str, int], config: HeldoutConfig) -> str:
  """The command's result line."""
  return (f"held-out benchmark: {counts.get(C.QUESTIONS, 0)} questions ({config.task} "
          f"sentences), {counts.get(C.CANDIDATES, 0)} candidates (passages of "
          f"{counts.get(C.HELDOUT_PAGES, 0)} held-out pages)\nwritten to {config.out} "
          f"({contracts.CANDIDATES_FILE}, {contracts.questions_file(contracts.ALL_QUESTIONS)}, "
          f"{contracts.STATS_FILE})")


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("heldout"))
