"""`twotower reqa`: SQuAD / Natural Questions -> the ReQA benchmark, a Beam job.

    twotower reqa --squad dev-v1.1.json --out reqa/squad
    twotower reqa --nq 'simplified-nq-dev.jsonl.gz' --out reqa/nq
    twotower reqa --squad dev.json --extra_passages wiki/ --extra_candidates 1000000 --out o/
    twotower reqa --squad dev.json --extra_passages wiki/ --extra_candidates all --out o/

Reading order:
  SQuAD JSON / NQ jsonl --pipelines.reqa.squad / pipelines.reqa.nq--> Paragraph (pipelines.reqa.qa_records:
      title, context, questions with answer offsets), or a counted Skip
  Paragraph --SplitSentences--> sentence spans (pipelines.sentences.splitters, default `reqa`)
  --> candidates: unique (sentence, passage) pairs (contracts.Candidate), int64 ids = a hash
      of the two texts
  --> questions: gold candidates = the sentences holding each answer's start offset
  --> splits (pipelines.reqa.question_splits): 1/5/10/80 % train by a hash of the question id (cold
      start), 10 % of train held out for validation
  Outputs: candidates.parquet, questions-<split>.parquet (contracts.Question), finetune/
  <split>-*.tfrecord (pair schema, train-r and validation-r), stats.json (every counter).

Counting, as ReQA's `squad_eval.py` does and as the paper does: `questions` counts question
records; `reqa_qa_inputs` counts (question, distinct answer sentence) pairs (ReQA's "QA
inputs", 11,426 on SQuAD v1.1 dev with the `reqa` splitter); `candidates` counts unique
(sentence, passage) pairs (10,250 there). Gold conventions are the evaluator's business
(twotower.core.metrics): `gold_candidate_ids` holds the exact (sentence, passage) candidates (the
paper's); ReQA's (any candidate with the gold sentence's text, averaged over unique question
strings) is derived from them and candidates.parquet.

Open-domain pool (the paper's Table 6, pipelines.reqa.open_domain): `--extra_passages` (a `twotower pairs` output)
supplies extra (sentence, passage) candidates, `--extra_candidates N` of them sampled by a
hash (the same sample on any runner), or `all` of them. When the pre-training dump holds the
QA articles, the gold paragraphs would come back as "extra" copies: a page with a passage
equal to a ReQA paragraph (case and spacing aside) is a source article, and every candidate of
that page is removed and counted (`candidates_extra_skipped_reqa_passage` for the exact
matches, `candidates_extra_skipped_reqa_page` for its other passages: the same paragraphs
packed together, cut, or cleaned differently). The matches are joins on the normalised passage
text and on the page id, so nothing corpus-sized is held in one worker.

Candidate ids are a 63-bit hash of (sentence, passage), so every worker can name a candidate
without a global ordering; de-duplication is one GroupByKey on the id, which also proves there
was no hash collision (two texts under one id fail the job loudly). The trade-off: ids are not
dense 0..N-1 (FAISS `IndexIDMap` and Parquet do not care), and the job scales to any N. A dense
numbering would need one worker to sort all candidates: fine at ReQA's ~10k-100k, not at the
paper's 1M+ open-domain pool. At ~10k candidates Beam is not faster than a loop (development notes:
DirectRunner ~1.07x of plain Python); it earns its keep on NQ train (300k records) and the
open-domain pool over a full Wikipedia `passages/`.

Bad input: malformed SQuAD JSON is a ValueError naming the file and position; everything else
is a counted skip with a log line naming the file and the record id (pipelines.reqa.squad, nq).

`run(ReqaConfig)` is the typed entry point; `twotower reqa` (twotower.commands.reqa) is its
flag parser, and passes every flag it does not know as a Beam pipeline option.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sys
from typing import Iterator, Optional, Sequence

import apache_beam as beam

from twotower.core import contracts
from twotower.core import files as tio
from twotower.core import outputs
from twotower.core import tower_text as texts
from twotower.core.contracts import Candidate, Pair, codecs
from twotower.core.contracts import counters as C
from twotower.pipelines.shared import beam_jobs
from twotower.pipelines.reqa import nq as nq_lib
from twotower.pipelines.reqa import question_splits as reqa_question_splits
from twotower.pipelines.sentences import splitters as sentences_lib
from twotower.pipelines.reqa import squad as squad_lib
from twotower.pipelines.reqa.open_domain import ALL_EXTRA, DropReqaPages, SampleExtraCandidates
from twotower.pipelines.reqa.qa_records import (Paragraph, Skip, candidate_id, fix_answer_start,
                                           passage_id, passage_key)
from twotower.pipelines.reqa.question_splits import SplitPolicy, assign_splits, question_key

logger = logging.getLogger(__name__)

#: The QA formats, each with its parser: path -> Paragraph | Skip.
PARSERS = {"squad": squad_lib.parse_squad, "nq": nq_lib.parse_nq}


@dataclasses.dataclass(frozen=True)
class ReqaConfig:
  """Everything `twotower reqa` needs besides Beam's own options."""
  out: str
  squad: Optional[str] = None        # SQuAD v1.1/v2.0 JSON file(s), a glob
  nq: Optional[str] = None           # NQ simplified jsonl[.gz] file(s), a glob
  splitter: str = "reqa"             # a name of pipelines.sentences.splitters
  extra_passages: Optional[str] = None  # a `twotower pairs` output dir (or its passages/)
  extra_candidates: int = 0          # extra (sentence, passage) candidates; ALL_EXTRA: all
  validation_percent: float = 10.0   # of each train side
  ratios: tuple[int, ...] = contracts.REQA_RATIOS
  seed: str = "reqa"                 # salt of every split/sampling hash
  doc_text: str = texts.DEFAULT_DOC_TEXT  # layout of doc_text in the fine-tuning pairs
  num_shards: int = 1                # fine-tuning TFRecord shards per split
  overwrite: bool = False            # replace an --out that holds another run (outputs.claim)
  beam_args: tuple[str, ...] = ()    # Beam pipeline options (--runner, --direct_num_workers ...)

  @property
  def split_policy(self) -> SplitPolicy:
    return SplitPolicy(tuple(self.ratios), self.validation_percent, self.seed)

  @property
  def has_extra(self) -> bool:
    return bool(self.extra_passages) and self.extra_candidates != 0


@dataclasses.dataclass(frozen=True)
class QaRecord:
  """A question with its gold candidates (exact (sentence, passage) pairs), inside the job."""
  question_id: str
  question: str
  title: str
  passage: str
  passage_id: int
  golds: tuple[tuple[int, str], ...]  # (candidate_id, sentence), answer order, distinct
  qa_inputs: int                      # distinct answer sentence texts (ReQA's QA inputs)


def gold_sentence(spans: Sequence[tuple[int, int]], start: int) -> tuple[Optional[int], bool]:
  """(index, exact): the sentence holding offset `start`; if it falls between sentences, the
  next one (exact=False); None past the last sentence."""
  for i, (s, e) in enumerate(spans):
    if s <= start < e:
      return i, True
    if start < s:
      return i, False
  return None, False


# ---------------------------------------------------------------------------------------------
# Beam transforms.
# ---------------------------------------------------------------------------------------------


def _inc(name: str, value: int = 1) -> None:
  beam_jobs.counter(name).inc(value)


class _ParseFile(beam.DoFn):
  """path -> Paragraph; Skips become counters and log lines."""

  def __init__(self, kind: str):
    self.kind = kind

  def process(self, path: str) -> Iterator[Paragraph]:
    for item in PARSERS[self.kind](path):
      if isinstance(item, Skip):
        _inc(item.reason, item.count)
        if item.message:
          logger.warning("skipped (%s): %s", item.reason, item.message)
        continue
      _inc(C.PARAGRAPHS_READ)
      if not item.context.strip():
        _inc(C.PARAGRAPHS_SKIPPED_EMPTY)
        _inc(C.QUESTIONS_SKIPPED_EMPTY_PASSAGE, len(item.questions))
        logger.warning("skipped (%s): %s: empty passage", C.PARAGRAPHS_SKIPPED_EMPTY,
                       item.where)
        continue
      if not item.questions:
        _inc(C.PARAGRAPHS_WITHOUT_QUESTIONS)  # ReQA indexes only paragraphs with questions
        continue
      yield item


class _SplitSentences(beam.DoFn):
  """list[Paragraph] -> (Paragraph, spans); the splitter is built once per worker."""

  def __init__(self, splitter: str):
    self.splitter_name = splitter
    self.splitter = None

  def setup(self):
    self.splitter = sentences_lib.get_splitter(self.splitter_name)

  def process(self, batch: list[Paragraph]):
    for paragraph, spans in zip(batch, self.splitter.spans_many([p.context for p in batch])):
      yield paragraph, spans


class _MakeRecords(beam.DoFn):
  """(Paragraph, spans) -> candidates (main output: (candidate_id, Candidate)), QaRecords
  (tagged "questions") and, with `emit_passages`, the passage_key of each paragraph that
  made it into the benchmark (tagged "passages")."""

  def __init__(self, emit_passages: bool = False):
    self.emit_passages = emit_passages

  def process(self, element):
    paragraph, spans = element
    ctx, pid = paragraph.context, passage_id(paragraph.context)
    if not spans:
      _inc(C.PARAGRAPHS_SKIPPED_EMPTY)
      return
    sentences = [ctx[s:e] for s, e in spans]
    ids = [candidate_id(s, ctx) for s in sentences]
    questions = []
    for q in paragraph.questions:
      golds: dict[int, str] = {}
      for answer in q.answers:
        start, moved = fix_answer_start(ctx, answer)
        if start is None:
          _inc(C.ANSWERS_SKIPPED_TEXT_NOT_FOUND)
          logger.warning("skipped (%s): %s question %r: answer %r not in the passage",
                         C.ANSWERS_SKIPPED_TEXT_NOT_FOUND, paragraph.where, q.question_id,
                         answer.text)
          continue
        if moved:
          _inc(C.ANSWERS_START_FIXED)
        index, exact = gold_sentence(spans, start)
        if index is None:
          _inc(C.ANSWERS_SKIPPED_OUTSIDE_SENTENCES)
          continue
        if not exact:
          _inc(C.ANSWERS_BETWEEN_SENTENCES)
        golds.setdefault(ids[index], sentences[index])
      if not golds:
        _inc(C.QUESTIONS_SKIPPED_NO_VALID_ANSWER)
        logger.warning("skipped (%s): %s question %r", C.QUESTIONS_SKIPPED_NO_VALID_ANSWER,
                       paragraph.where, q.question_id)
        continue
      questions.append(QaRecord(q.question_id, q.question, paragraph.title, ctx, pid,
                                tuple(golds.items()), len(set(golds.values()))))
    if not questions:  # ReQA indexes only paragraphs that yield a QA input
      _inc(C.PARAGRAPHS_WITHOUT_QUESTIONS)
      return
    _inc(C.PARAGRAPHS_USED)
    for record in questions:
      yield beam.pvalue.TaggedOutput("questions", record)
    if self.emit_passages:
      yield beam.pvalue.TaggedOutput("passages", passage_key(ctx))
    for cid, sentence in zip(ids, sentences):
      yield cid, Candidate(cid, sentence, ctx, paragraph.title, paragraph.source)


def _dedupe_candidate(element) -> Candidate:
  """(candidate_id, [Candidate, ...]) -> one; two different texts under one id fail the job."""
  cid, candidates = element
  candidates = list(candidates)
  texts_ = {(c.sentence, c.passage) for c in candidates}
  if len(texts_) > 1:
    raise RuntimeError(f"candidate id {cid} hashes {len(texts_)} different texts: "
                       f"{sorted(texts_)[:2]!r}")
  # Deterministic pick: a ReQA source over an extra Wikipedia one, then the smallest title.
  extra = contracts.WIKIPEDIA_SOURCE
  candidate = min(candidates, key=lambda c: (c.source == extra, c.title, c.source))
  _inc(C.CANDIDATES)
  if candidate.source == extra:
    _inc(C.CANDIDATES_EXTRA)
  return candidate


#: Joins a question id shared by different questions to the number that tells them apart.
RENAMED_ID_SEPARATOR = "#"


def _rename_shared_ids(element) -> Iterator[QaRecord]:
  """(question_id, [QaRecord]) -> the records, each different question text under the id
  after the first (by question_key, then text) renamed "<id>#<n>", counted and logged; the
  records of one text keep one id (_split_group then keeps one of them, as before)."""
  qid, records = element
  records = list(records)
  by_key: dict[str, list[QaRecord]] = {}
  for record in records:
    by_key.setdefault(question_key(record.question), []).append(record)
  if len(by_key) == 1:
    yield from records
    return
  keys = sorted(by_key, key=lambda k: (k, min(r.question for r in by_key[k])))
  yield from by_key[keys[0]]
  for n, key in enumerate(keys[1:], 1):
    new_id = f"{qid}{RENAMED_ID_SEPARATOR}{n}"
    _inc(C.QUESTIONS_RENAMED_DUPLICATE_ID)
    logger.warning("question id %r is shared by different questions: %r keeps it, %r is "
                   "renamed %r", qid, by_key[keys[0]][0].question, by_key[key][0].question,
                   new_id)
    for record in by_key[key]:
      yield dataclasses.replace(record, question_id=new_id)


def _split_group(element, policy: SplitPolicy):
  """(question_key, [QaRecord]) -> (split, QaRecord) for `all` and each ratio's side."""
  _, records = element
  by_id: dict[str, QaRecord] = {}
  for record in sorted(records, key=lambda r: r.question_id):
    if record.question_id in by_id:
      _inc(C.QUESTIONS_SKIPPED_DUPLICATE_ID)
      continue
    by_id[record.question_id] = record
  _inc(C.QUESTION_GROUPS)  # distinct question_key: the unit of cold start
  splits = [contracts.ALL_QUESTIONS] + assign_splits(list(by_id), policy)
  for record in by_id.values():
    _inc(C.QUESTIONS)
    _inc(C.REQA_QA_INPUTS, record.qa_inputs)
    _inc(C.GOLD_CANDIDATES, len(record.golds))
    for split in splits:
      _inc(C.questions_in(split))
      yield split, record


def question_row(record: QaRecord) -> dict:
  return contracts.Question(record.question_id, record.question,
                            tuple(cid for cid, _ in record.golds)).to_row()


def finetune_pairs(record: QaRecord, doc_text: str) -> Iterator[bytes]:
  """One pair-schema tf.train.Example per gold candidate of a question.

  query = question; doc_title = title; doc_text = texts.candidate_doc_text(sentence, passage)
  (the same layout `twotower embed` uses for candidates); query_page_id = doc_page_id = the
  passage id; doc_passage_id = the candidate id, so training masks in-batch "negatives" that
  are in fact the same candidate (and, by doc_page_id, the same passage).
  """
  for cid, sentence in record.golds:
    yield codecs.encode_pair(Pair(
        contracts.REQA_TASK, record.question, record.title,
        texts.candidate_doc_text(sentence, record.passage, doc_text),
        record.passage_id, record.passage_id, cid))


class BuildReqa(beam.PTransform):
  """Paragraph -> {"candidates": Candidate, "questions": (split, QaRecord)}."""

  def __init__(self, config: ReqaConfig):
    super().__init__()
    self.config = config

  def expand(self, paragraphs):
    config = self.config
    # (Paragraph, spans)
    split = (paragraphs
             | "Batch" >> beam.BatchElements(min_batch_size=16, max_batch_size=256)
             | "SplitSentences" >> beam.ParDo(_SplitSentences(config.splitter)))
    # main: (candidate_id, Candidate); questions: QaRecord; passages: passage_key
    records = split | "MakeRecords" >> beam.ParDo(
        _MakeRecords(emit_passages=config.has_extra)).with_outputs(
            "questions", "passages", main="candidates")
    keyed = records.candidates
    if config.has_extra:
      passages = (paragraphs.pipeline
                  | "ReadPassages" >> beam.io.ReadFromParquet(
                      contracts.passages_pattern(config.extra_passages),
                      columns=["page_id", "passage_id", "title", "text", "sentences"])
                  | "ToPassages" >> beam.Map(contracts.Passage.from_row))
      extra = ({"extra": passages | "SampleExtra" >> SampleExtraCandidates(
                   config.extra_candidates, config.seed),
                "reqa": records.passages}
               | "DropReqaPages" >> DropReqaPages())
      keyed = (keyed, extra) | "AllCandidates" >> beam.Flatten()
    # Candidate, one per (sentence, passage)
    candidates = (keyed
                  | "GroupById" >> beam.GroupByKey()
                  | "Dedupe" >> beam.Map(_dedupe_candidate))
    # (split, QaRecord): ids made unique across texts first, then grouped by text
    questions = (records.questions
                 | "KeyByQuestionId" >> beam.Map(lambda r: (r.question_id, r))
                 | "GroupByQuestionId" >> beam.GroupByKey()
                 | "RenameSharedIds" >> beam.FlatMap(_rename_shared_ids)
                 | "KeyByText" >> beam.Map(lambda r: (question_key(r.question), r))
                 | "GroupByText" >> beam.GroupByKey()
                 | "AssignSplits" >> beam.FlatMap(_split_group, policy=config.split_policy))
    return {"candidates": candidates, "questions": questions}


def build(pipeline: beam.Pipeline, config: ReqaConfig) -> None:
  """Adds the whole ReQA job, reads to writes, to `pipeline`."""
  out = config.out
  inputs = []
  for kind in PARSERS:
    pattern = getattr(config, kind)
    if pattern:
      inputs.append(pipeline
                    | f"List_{kind}" >> beam.Create(tio.match_files(pattern))
                    | f"Parse_{kind}" >> beam.ParDo(_ParseFile(kind)))
  # Paragraph
  paragraphs = (inputs | "Inputs" >> beam.Flatten()
                | "Spread" >> beam.Reshuffle())
  built = paragraphs | "BuildReqa" >> BuildReqa(config)
  _ = (built["candidates"]
       | "CandidateRows" >> beam.Map(Candidate.to_row)
       | "WriteCandidates" >> beam.io.WriteToParquet(
           contracts.candidates_path(out), contracts.CANDIDATE_SCHEMA, num_shards=1,
           shard_name_template=""))
  names = contracts.reqa_split_names(config.ratios)
  parts = built["questions"] | "BySplit" >> beam.Partition(
      lambda element, _: names.index(element[0]), len(names))
  for name, part in zip(names, parts):
    records = part | f"Records_{name}" >> beam.Values()
    _ = (records
         | f"Rows_{name}" >> beam.Map(question_row)
         | f"Write_{name}" >> beam.io.WriteToParquet(
             contracts.questions_path(out, name), contracts.QUESTION_SCHEMA,
             num_shards=1, shard_name_template=""))
    if reqa_question_splits.is_finetune_split(name):
      _ = (records
           | f"Pairs_{name}" >> beam.FlatMap(finetune_pairs, doc_text=config.doc_text)
           | f"WritePairs_{name}" >> beam.io.WriteToTFRecord(
               contracts.finetune_prefix(out, name), file_name_suffix=contracts.PAIRS_SUFFIX,
               num_shards=config.num_shards))


def finish_stats(counters: dict[str, int], config: ReqaConfig) -> dict:
  """stats.json: every counter, a 0 for each split (and, with an open-domain pool, for its
  counters) that nothing incremented, sorted by name."""
  stats = dict(counters)
  for name in contracts.reqa_split_names(config.ratios):
    stats.setdefault(C.questions_in(name), 0)
  stats.setdefault(C.QUESTIONS_RENAMED_DUPLICATE_ID, 0)
  if config.has_extra:
    stats.setdefault(C.CANDIDATES_EXTRA, 0)
    stats.setdefault(C.CANDIDATES_EXTRA_SKIPPED_REQA_PASSAGE, 0)
    stats.setdefault(C.CANDIDATES_EXTRA_SKIPPED_REQA_PAGE, 0)
  return dict(sorted(stats.items()))


def check(config: ReqaConfig) -> None:
  """A ValueError for settings the job cannot run with (before Beam starts)."""
  if not (config.squad or config.nq):
    raise ValueError("give --squad FILE or --nq FILE")
  if config.extra_candidates < ALL_EXTRA:
    raise ValueError(f"extra_candidates must be >= 0 or {ALL_EXTRA} (all), got "
                     f"{config.extra_candidates}")
  if config.extra_candidates and not config.extra_passages:
    raise ValueError("--extra_candidates needs --extra_passages")
  sentences_lib.get_splitter(config.splitter)  # a bad name fails here
  if config.squad:
    # A SQuAD file is one JSON document (tens of MB at most): a file that is not UTF-8, not
    # JSON or not SQuAD fails here, in a second and before any output is written, not
    # inside a worker after Beam started.
    for path in tio.match_files(config.squad):
      squad_lib.load_squad(path)


def run(config: ReqaConfig) -> outputs.StageResult:
  """Runs the job; writes candidates, questions, fine-tuning pairs and stats.json."""
  check(config)
  tio.log_settings("twotower reqa", dataclasses.asdict(config))
  inputs = [path for kind in PARSERS if getattr(config, kind)
            for path in tio.match_files(getattr(config, kind))]
  if config.has_extra:
    # a clear error now
    inputs += tio.match_files(contracts.passages_pattern(config.extra_passages))
  # Written beside --out, then moved into place: never half a benchmark, never two mixed.
  with outputs.staged(config.out, "reqa", outputs.settings_of(config), inputs=inputs,
                      overwrite=config.overwrite) as out:
    # Absolute paths: the workers may run in another directory (a worker pool).
    staged = tio.with_absolute_paths(dataclasses.replace(config, out=out), "out", "squad", "nq",
                                     "extra_passages")
    stats = beam_jobs.run_beam_job(lambda pipeline: build(pipeline, staged), config.beam_args,
                                   stats_dir=out,
                                   finish=functools.partial(finish_stats, config=config))
  return outputs.StageResult.of(config.out, stats)


def summary_table(stats: dict, config: ReqaConfig) -> str:
  """The command's result: candidates (and the open-domain pool), questions, skips, and the
  questions of each split."""
  skipped = {k: v for k, v in stats.items() if "skipped" in k and v}
  extra = stats.get(C.CANDIDATES_EXTRA, 0)
  lines = [f"candidates {stats.get(C.CANDIDATES, 0)} (extra {extra}), questions "
           f"{stats.get(C.QUESTIONS, 0)} ({stats.get(C.QUESTION_GROUPS, 0)} distinct question "
           f"texts), ReQA QA inputs {stats.get(C.REQA_QA_INPUTS, 0)}  [splitter "
           f"{config.splitter}]"]
  if config.has_extra:
    asked = "all" if config.extra_candidates == ALL_EXTRA else config.extra_candidates
    lines.append(f"open-domain pool: {stats.get(C.CANDIDATES, 0) - extra} ReQA + {extra} extra "
                 f"candidates ({asked} asked from {config.extra_passages}; "
                 f"{stats.get(C.CANDIDATES_EXTRA_SKIPPED_REQA_PASSAGE, 0)} removed: their "
                 "passage is a ReQA paragraph, "
                 f"{stats.get(C.CANDIDATES_EXTRA_SKIPPED_REQA_PAGE, 0)} more of the same "
                 "source pages)")
  lines += ["skipped: " + (", ".join(f"{k} {v}" for k, v in skipped.items()) or "none"),
            "", f"{'ratio':>5} {'train':>7} {'valid':>7} {'test':>7}"]
  for r in config.ratios:
    counts = (stats.get(C.questions_in(contracts.split_name(s, r)), 0)
              for s in contracts.SPLIT_SIDES)
    lines.append(f"{r:>4}% " + " ".join(f"{n:>7}" for n in counts))
  lines.append(f"\nwritten to {config.out}")
  return "\n".join(lines)


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("reqa"))
