"""`twotower reqa-to-beir`: one split of a ReQA folder as a BEIR folder, both gold conventions.

    twotower reqa-to-beir --reqa reqa/squad --split test-5 --out beir/reqa-squad-test-5
    twotower beir --data beir/reqa-squad-test-5 --split test-5 --metrics Success@1,MRR ...

`run(ReqaBeirConfig)` is the typed entry point (twotower.commands.reqa_to_beir parses the
flags). OUT holds (a staged output, twotower.core.outputs):

    corpus.jsonl                    every candidate of candidates.parquet (open-domain ones
                                    too), by candidate id: `_id` the id as a string, `title`
                                    the candidate's title, `text` what the document tower
                                    reads (twotower.core.tower_text.candidate_doc_text with
                                    `doc_text`)
    queries.jsonl                   every question of the split: `_id` its question id
    qrels/<split>.tsv               the `pair` convention: grade 1 for each gold candidate
    qrels/<split>-sentence.tsv      the `sentence` convention (twotower.core.metrics): grade 1
                                    for every candidate whose sentence equals a gold's

The `sentence` convention scores unique question *strings*, each at the best rank among the
questions with that text. BEIR scores query ids, so its qrels judge one query per string: the
smallest question id holding it, with the gold sentences of all of them. That is the same
number whenever questions of one text get one ranked list (a lexical or dense retriever run on
the text; tests/test_reqa_beir.py), since the first hit of a union of golds in one list is the
best of their first hits. The other ids stay in queries.jsonl, judged only by the pair qrels.

ReQA's R@k is `Success@k` here (eval.ir_metrics), its MRR is `MRR` (recip_rank over the
whole run); both equal twotower.core.metrics' on a run scored in its own order
(ir_metrics.by_rank, `ir_run`): trec_eval sorts by score and breaks ties by doc id, where
ReQA takes the list as ranked.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from typing import Iterable, Mapping, Sequence

from twotower.core import contracts
from twotower.core import files as tio
from twotower.core import outputs
from twotower.core import tower_text as texts
from twotower.core.contracts import Question, codecs
from twotower.eval import beir
from twotower.eval import ir_metrics

logger = logging.getLogger(__name__)

#: The qrels split of the `sentence` convention: `<split>` + this.
SENTENCE_SUFFIX = "-sentence"


def sentence_split(split: str) -> str:
  """The qrels split of `split` under the `sentence` gold convention."""
  return f"{split}{SENTENCE_SUFFIX}"


@dataclasses.dataclass(frozen=True)
class ReqaBeirConfig:
  """Flags of `twotower reqa-to-beir`."""
  reqa: str = dataclasses.field(metadata={"help": "a `twotower reqa` output directory"})
  out: str = dataclasses.field(metadata={"help": "output folder (corpus.jsonl, queries.jsonl, "
                                                 "qrels/)"})
  split: str = dataclasses.field(default=contracts.scored_split(5), metadata={
      "help": "the ReQA split written (questions-<split>.parquet)"})
  doc_text: str = dataclasses.field(default=texts.DEFAULT_DOC_TEXT, metadata={
      "help": "the corpus text's layout (twotower.core.tower_text), as the towers read it"})
  overwrite: bool = False

  def __post_init__(self):
    if self.doc_text not in texts.DOC_TEXT_MODES:
      raise ValueError(f"--doc_text {self.doc_text!r}: expected one of "
                       f"{', '.join(texts.DOC_TEXT_MODES)}")


@dataclasses.dataclass(frozen=True)
class ReqaBeirResult:
  out: str
  split: str
  documents: int
  queries: int
  pair_qrels: int         # judged (query, document) pairs of qrels/<split>.tsv
  sentence_queries: int   # unique question strings: the queries the sentence qrels judge
  sentence_qrels: int
  files: tuple[str, ...]


def pair_qrels(questions: Sequence[Question]) -> dict[str, dict[str, int]]:
  """{question id: {candidate id: 1}} of each question's gold candidates."""
  return {q.question_id: {str(c): 1 for c in q.gold_candidate_ids} for q in questions}


def sentence_qrels(questions: Sequence[Question],
                   sentence_of: Mapping[int, str]) -> dict[str, dict[str, int]]:
  """One query per unique question string (its smallest question id): grade 1 for every
  candidate whose sentence equals a gold sentence of any question with that text (module
  docstring)."""
  gold_texts: dict[str, set[str]] = {}
  first_id: dict[str, str] = {}
  for q in questions:
    gold_texts.setdefault(q.question, set()).update(
        sentence_of[c] for c in q.gold_candidate_ids if c in sentence_of)
    first_id[q.question] = min(q.question_id, first_id.get(q.question, q.question_id))
  candidates_of: dict[str, list[int]] = {}
  wanted = set().union(*gold_texts.values())
  for c, sentence in sentence_of.items():
    if sentence in wanted:
      candidates_of.setdefault(sentence, []).append(c)
  return {first_id[text]: {str(c): 1 for s in golds for c in candidates_of[s]}
          for text, golds in gold_texts.items()}


def ir_run(run: Mapping[str, Sequence[int]]) -> dict[str, list[tuple[str, float]]]:
  """A ReQA run (question id -> candidate ids, best first) as eval.ir_metrics takes it: the
  ids as strings, scored in the list's own order (ir_metrics.by_rank)."""
  return {q: ir_metrics.by_rank([str(c) for c in ranked]) for q, ranked in run.items()}


def _check_ids(questions: Sequence[Question]) -> None:
  """A ValueError for what a BEIR folder cannot carry: an id with whitespace (a TREC run
  names it in one field), a question without a gold (no qrels line would judge it, so BEIR's
  means would leave out a question ReQA counts as a miss)."""
  for q in questions:
    if not q.question_id or any(c.isspace() for c in q.question_id):
      raise ValueError(f"question id {q.question_id!r} cannot be a BEIR _id (empty or "
                       "holding whitespace)")
    if not q.gold_candidate_ids:
      raise ValueError(f"question {q.question_id!r} has no gold candidate: its BEIR query "
                       "would be unjudged and left out of every mean")


def _jsonl(records: Iterable[dict]) -> str:
  return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def _tsv(qrels: Mapping[str, Mapping[str, int]]) -> str:
  lines = ["\t".join(beir.QRELS_HEADER) + "\n"]
  lines += [f"{q}\t{d}\t{g}\n" for q in sorted(qrels) for d, g in sorted(qrels[q].items())]
  return "".join(lines)


def run(config: ReqaBeirConfig) -> ReqaBeirResult:
  """Writes corpus.jsonl, queries.jsonl, qrels/<split>.tsv and qrels/<split>-sentence.tsv."""
  tio.log_settings("reqa-to-beir", dataclasses.asdict(config))
  questions = codecs.read_questions(config.reqa, config.split)  # a missing split fails here
  _check_ids(questions)
  rows = sorted(codecs.read_candidates(
      config.reqa, columns=["candidate_id", "sentence", "passage", "title"]),
                key=lambda r: r["candidate_id"])
  sentence_of = {r["candidate_id"]: r["sentence"] for r in rows}
  pair, sentence = pair_qrels(questions), sentence_qrels(questions, sentence_of)
  with outputs.staged(config.out.rstrip("/"), "reqa-to-beir", outputs.settings_of(config),
                      inputs=[config.reqa], overwrite=config.overwrite) as work:
    tio.write_text(os.path.join(work, beir.CORPUS_FILE), _jsonl(
        {"_id": str(r["candidate_id"]), "title": r["title"] or "",
         "text": texts.candidate_doc_text(r["sentence"], r["passage"], config.doc_text)}
        for r in rows))
    tio.write_text(os.path.join(work, beir.QUERIES_FILE), _jsonl(
        {"_id": q.question_id, "text": q.question} for q in questions))
    tio.makedirs(os.path.join(work, beir.QRELS_DIR))
    tio.write_text(beir.qrels_path(work, config.split), _tsv(pair))
    tio.write_text(beir.qrels_path(work, sentence_split(config.split)), _tsv(sentence))
  result = ReqaBeirResult(config.out, config.split, len(rows), len(questions),
                          sum(map(len, pair.values())), len(sentence),
                          sum(map(len, sentence.values())), outputs.files_of(config.out))
  logger.info("reqa-to-beir: %d documents, %d queries, %d pair / %d sentence judgments -> %s",
              result.documents, result.queries, result.pair_qrels, result.sentence_qrels,
              config.out)
  return result


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("reqa-to-beir"))
