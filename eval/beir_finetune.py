"""`twotower beir-to-reqa`: a split of a BEIR folder as the fine-tuning data `twotower
finetune` reads, in the layout `twotower reqa` writes, so fine-tuning runs as it is.

    twotower beir-to-reqa --data beir/fiqa --split train --out ft/fiqa
    twotower finetune --config cpu-small --init runs/ict --vocab vocab.txt \\
        --reqa ft/fiqa --split beir --out runs/ict-fiqa
    twotower beir --data beir/fiqa --split test --model runs/ict \\
        --finetuned_model runs/ict-fiqa --systems bm25-flat,dense,dense-finetuned --out o/

A dataset whose only judged split is the one fine-tuned on (SciFact's train queries, here)
holds a share of its queries out for scoring: `--scored_percent 30`, and `twotower beir
--heldout ft/scifact` scores those alone.

Parts. Each judged query of the split goes to one part, with ReQA's split policy
(pipelines.reqa.question_splits, at ratio 100 - scored_percent): queries whose text is the
same up to case and spacing go together (cold start), by a hash of `seed` and the group's
smallest query id (stable: the same parts whatever the file order, on any machine):

    test        scored_percent % of the queries: never fine-tuned on, never selected on;
                what `twotower beir --heldout OUT` scores
    validation  validation_percent % of the others (the paper holds out 10 % of its
                training set): fine-tuning's checkpoint selection (validation R@100 over
                every candidate, model.finetune), and `beir --heldout`'s hybrid weight
    train       the rest: the fine-tuning pairs

Pairs. A document is relevant when its grade is > 0 (trec_eval's and BEIR's level); a
higher grade is not weighed (the in-batch softmax has no weights). A query with several
relevant documents gives one pair per document, as ReQA gives one per gold sentence and as
BEIR's and sentence-transformers' training loaders do: each is a positive of its own. The
pairs are written in a seeded random order (a hash of seed, query id and doc id), so that
one query's pairs are spread over the file rather than meeting in one batch, where each is a
negative of the others (training masks a repeated *document*, not a repeated query).

Ids. Candidate ids are eval.beir's internal ids (the dataset's doc ids sorted: the one place
string ids become integers), stored as doc_ids.parquet; question ids are the query ids.

OUT (a staged output, twotower.core.outputs):

    candidates.parquet       every document: candidate_id = internal id, title, sentence =
                             its text, passage "" (so every doc_text layout gives the text,
                             which is what `twotower beir`'s dense system embeds), source beir
    questions-<part>-beir.parquet   train, validation and (scored_percent > 0) test: the
                             query id, its text, its relevant documents' candidate ids (test:
                             every query of the part, one with no relevant document too, as
                             BEIR scores it)
    finetune/<part>-beir-00000-of-00001.tfrecord   train and validation pairs (pair schema,
                             task "reqa"; query_page_id = doc_page_id = doc_passage_id = the
                             document's internal id, what accidental-hit masking compares)
    doc_ids.parquet          internal id -> the dataset's doc id (eval.beir)
    stats.json               the counters (COUNTERS)
    data.json                what was read (eval.beir.summary) and the problems found

Memory: the texts of the relevant documents of the train and validation parts, no more (at
most the judged pairs, never the corpus: one streamed pass writes the candidates and keeps
those). Fine-tuning's validation embeds every candidate at each checkpoint: on a corpus of
millions that, not the conversion, is the cost to plan for.

The reading side: `read_parts` (the parts of an output, checked against the corpus) and
`finetuned_on` / `check_not_trained_on` (which conversion a `twotower finetune` run was
fine-tuned on, and that no scored query is one of its train or validation queries).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from typing import Mapping, Optional, Sequence

import pyarrow as pa

from twotower.core import contracts
from twotower.core import files as tio
from twotower.core import outputs
from twotower.core.contracts import Pair, Question, codecs, manifests
from twotower.eval import beir
from twotower.eval import beir_dense
from twotower.pipelines.reqa import question_splits

logger = logging.getLogger(__name__)

STAGE = "beir-to-reqa"
#: The "ratio" of the fine-tuning files, what `twotower finetune --split` takes.
FINETUNE_SPLIT = "beir"
TRAIN, VALIDATION, TEST = contracts.SPLIT_SIDES
DATA_FILE = "data.json"

# stats.json's counters.
DOCUMENTS, QUERIES_JUDGED = "documents", "queries_judged"
PAIRS_SKIPPED_EMPTY_TEXT = "pairs_skipped_empty_document_text"
QUERIES_SKIPPED_NO_RELEVANT = "queries_skipped_no_relevant_document"
QUERIES_SKIPPED_EMPTY_TEXT = "queries_skipped_empty_text"
RELEVANT_NOT_IN_CORPUS = "relevant_not_in_corpus"


def queries_in(part: str) -> str:
  return f"queries_{part}"


def pairs_in(part: str) -> str:
  return f"pairs_{part}"


def part_split(part: str) -> str:
  """`train-beir`: the ReQA split name of a part (questions-<it>.parquet, finetune/<it>-*)."""
  return contracts.split_name(part, FINETUNE_SPLIT)


@dataclasses.dataclass(frozen=True)
class BeirToReqaConfig:
  """Flags of `twotower beir-to-reqa`."""
  data: str = dataclasses.field(metadata={"help": "a BEIR folder (corpus.jsonl, "
                                                  "queries.jsonl, qrels/<split>.tsv)"})
  out: str = dataclasses.field(metadata={
      "help": "output folder, what `twotower finetune --reqa` reads (with --split "
              f"{FINETUNE_SPLIT})"})
  split: str = dataclasses.field(default="train", metadata={
      "help": "the qrels split fine-tuned on (qrels/<split>.tsv)"})
  scored_percent: int = dataclasses.field(default=0, metadata={
      "help": "percent of the split's queries held out of fine-tuning for scoring (`twotower "
              "beir --heldout OUT`): for a dataset without another judged split; 0: none"})
  validation_percent: float = dataclasses.field(default=10.0, metadata={
      "help": "percent of the other queries held out for checkpoint selection"})
  seed: str = dataclasses.field(default="beir", metadata={
      "help": "salt of the hashes that assign queries to parts and order the pairs"})
  overwrite: bool = False

  def __post_init__(self):
    if not 0 <= self.scored_percent < 100:
      raise ValueError(f"--scored_percent {self.scored_percent}: expected 0 to 99 (the rest "
                       "is fine-tuned on)")
    if not 0 <= self.validation_percent < 100:
      raise ValueError(f"--validation_percent {self.validation_percent}: expected [0, 100)")


@dataclasses.dataclass(frozen=True)
class BeirToReqaResult:
  out: str
  stats: dict
  files: tuple[str, ...]


def assign_parts(queries: Mapping[str, str], config: BeirToReqaConfig) -> dict[str, str]:
  """{query id: part} of every query (module docstring: ReQA's policy, grouped by text)."""
  policy = question_splits.SplitPolicy((100 - config.scored_percent,),
                                       config.validation_percent, config.seed)
  groups: dict[str, list[str]] = {}
  for query_id, text in queries.items():
    groups.setdefault(question_splits.question_key(text), []).append(query_id)
  parts = {}
  for ids in groups.values():
    (split,) = question_splits.assign_splits(ids, policy)
    for query_id in ids:
      parts[query_id] = contracts.split_side(split)
  return parts


def _order(seed: str, query_id: str, doc_id: str) -> int:
  return contracts.stable_hash(seed, "pair-order", query_id, doc_id)


def run(config: BeirToReqaConfig) -> BeirToReqaResult:
  """Reads the folder's split, assigns its queries to parts, writes OUT (module docstring)."""
  tio.log_settings(STAGE, dataclasses.asdict(config))
  data = beir.read(config.data)
  split = data.split(config.split)
  data.problems.log()
  split.problems.log()
  parts = assign_parts(split.queries, config)
  stats = {DOCUMENTS: len(data.corpus), QUERIES_JUDGED: len(split.qrels),
           RELEVANT_NOT_IN_CORPUS: 0, QUERIES_SKIPPED_NO_RELEVANT: 0,
           QUERIES_SKIPPED_EMPTY_TEXT: 0, PAIRS_SKIPPED_EMPTY_TEXT: 0}
  # The relevant documents of each query (grade > 0), as internal ids, in the corpus.
  relevant: dict[str, list[int]] = {}
  for query_id in sorted(split.qrels):
    doc_ids = sorted(d for d, grade in split.qrels[query_id].items() if grade > 0)
    internal = data.corpus.internal_ids(doc_ids) if doc_ids else []
    stats[RELEVANT_NOT_IN_CORPUS] += int(sum(1 for i in internal if i < 0))
    relevant[query_id] = [int(i) for i in internal if i >= 0]
  trained = {q for q, part in parts.items() if part != TEST}
  for query_id in sorted(trained):
    if not relevant[query_id]:
      stats[QUERIES_SKIPPED_NO_RELEVANT] += 1
      trained.discard(query_id)
    elif not split.queries[query_id].strip():
      stats[QUERIES_SKIPPED_EMPTY_TEXT] += 1
      trained.discard(query_id)
  wanted = {i for q in trained for i in relevant[q]}
  texts: dict[int, tuple[str, str]] = {}

  def keep(doc: beir.Document) -> None:
    if doc.internal_id in wanted:
      texts[doc.internal_id] = (doc.title, doc.text)

  settings = outputs.settings_of(config)
  with outputs.staged(config.out.rstrip("/"), STAGE, settings, inputs=[config.data],
                      overwrite=config.overwrite) as work:
    beir_dense.write_candidates(data.corpus, contracts.candidates_path(work), on_document=keep)
    beir.write_doc_ids(data.corpus, os.path.join(work, beir.DOC_IDS_FILE))
    for part in (TRAIN, VALIDATION, TEST):
      if part == TEST and not config.scored_percent:
        continue
      members = sorted(q for q, p in parts.items() if p == part and
                       (part == TEST or q in trained))
      stats[queries_in(part)] = len(members)
      questions = [Question(q, split.queries[q], tuple(relevant[q])) for q in members]
      tio.write_parquet(contracts.questions_path(work, part_split(part)),
                        pa.Table.from_pylist([x.to_row() for x in questions],
                                             schema=contracts.QUESTION_SCHEMA))
      if part == TEST:
        continue
      pairs = []
      for q in members:
        for internal_id in relevant[q]:
          title, text = texts[internal_id]
          if not text.strip():  # the embedding job skips such a document too
            stats[PAIRS_SKIPPED_EMPTY_TEXT] += 1
            continue
          pairs.append((_order(config.seed, q, data.corpus.doc_id(internal_id)),
                        Pair(contracts.REQA_TASK, split.queries[q], title, text.strip(),
                             internal_id, internal_id, internal_id)))
      pairs.sort(key=lambda p: p[0])
      stats[pairs_in(part)] = len(pairs)
      codecs.write_pairs(contracts.finetune_prefix(work, part_split(part)),
                         [p for _, p in pairs])
    tio.write_json(contracts.stats_path(work), dict(sorted(stats.items())))
    tio.write_json(os.path.join(work, DATA_FILE), dict(beir.summary(data, split)))
  if not stats[pairs_in(TRAIN)]:
    logger.warning("%s: no training pair (%d queries judged)", config.out,
                   stats[QUERIES_JUDGED])
  return BeirToReqaResult(config.out, stats, outputs.files_of(config.out))


# ------------------------------------------------------------------------------------------
# Reading an output back.
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Parts:
  """The parts of a `beir-to-reqa` output: query ids of each (train and validation: those
  with pairs; test: every query held out)."""
  folder: str
  split: str                          # the BEIR split it was made of
  train: tuple[str, ...]
  validation: tuple[str, ...]
  test: tuple[str, ...]

  @property
  def finetuned(self) -> frozenset[str]:
    """The queries fine-tuning saw: its pairs (train) and its selection (validation)."""
    return frozenset(self.train) | frozenset(self.validation)


def _query_ids(folder: str, part: str) -> tuple[str, ...]:
  path = contracts.questions_path(folder, part_split(part))
  if not os.path.exists(path):
    return ()
  return tuple(q.question_id for q in codecs.read_questions(folder, part_split(part)))


def is_conversion(folder: str) -> bool:
  """Whether `folder` is a `twotower beir-to-reqa` output (its manifest says so)."""
  manifest = manifests.read_manifest(folder) if os.path.isdir(folder) else None
  return bool(manifest) and manifest.get("stage") == STAGE


def same_corpus(folder: str, corpus: beir.Corpus) -> bool:
  """Whether the conversion at `folder` was made from `corpus` (the same doc ids, so the
  same internal ids)."""
  path = os.path.join(folder, beir.DOC_IDS_FILE)
  if not os.path.exists(path):
    return False
  stored = tio.open_parquet(path).read().column("doc_id").combine_chunks()
  return stored.equals(corpus.ids)


def read_parts(folder: str, corpus: Optional[beir.Corpus] = None) -> Parts:
  """The parts of a `beir-to-reqa` output; with `corpus`, checked to be of that corpus.

  Raises:
    ValueError: not such an output, or made from another corpus.
  """
  if not is_conversion(folder):
    raise ValueError(f"{folder}: not a `twotower {STAGE}` output (no manifest of that stage)")
  if corpus is not None and not same_corpus(folder, corpus):
    raise ValueError(f"{folder}: converted from another corpus than {corpus.path} (its "
                     f"{beir.DOC_IDS_FILE} differs)")
  settings = manifests.read_manifest(folder).get("settings", {})
  return Parts(folder, str(settings.get("split", "")), _query_ids(folder, TRAIN),
               _query_ids(folder, VALIDATION), _query_ids(folder, TEST))


def finetuned_on(model: str) -> Optional[str]:
  """The `--reqa` folder a `twotower finetune` run was fine-tuned on (its config.yaml's
  `run: reqa:`), for a run dir or its export/saved_model; None for anything else (a
  pre-training run, a bare SavedModel)."""
  import yaml  # pylint: disable=import-outside-toplevel
  path = os.path.normpath(model)
  run_dirs = [path]
  if (os.path.basename(path) == contracts.SAVED_MODEL_DIR
      and os.path.basename(os.path.dirname(path)) == contracts.EXPORT_DIR):
    run_dirs.append(os.path.dirname(os.path.dirname(path)))
  for run_dir in run_dirs:
    config = contracts.run_config_path(run_dir)
    if os.path.isfile(config):
      found = ((yaml.safe_load(tio.read_text(config)) or {}).get("run") or {}).get("reqa")
      if found:
        return str(found)
  return None


def check_not_trained_on(model: str, corpus: beir.Corpus, scored: Sequence[str],
                         flag: str) -> Optional[Parts]:
  """The parts `model` was fine-tuned on when they are a conversion of `corpus` (None
  otherwise: a model fine-tuned elsewhere, or not at all).

  Raises:
    ValueError: a scored query is one `model` was fine-tuned or selected on.
  """
  folder = finetuned_on(model)
  if not folder or not is_conversion(folder) or not same_corpus(folder, corpus):
    return None
  parts = read_parts(folder)
  seen = sorted(parts.finetuned.intersection(scored))
  if seen:
    raise ValueError(
        f"{flag} {model} was fine-tuned on {folder} (split {parts.split}), whose train and "
        f"validation parts hold {len(seen)} of the {len(scored)} scored queries (first: "
        f"{seen[0]!r}): score the part it held out (--heldout {folder}) or another split")
  return parts


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage(STAGE))
