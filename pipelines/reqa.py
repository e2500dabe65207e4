"""`twotower reqa`: SQuAD / Natural Questions -> the ReQA benchmark (DESIGN stage 7), a Beam job.

    twotower reqa --squad dev-v1.1.json --out reqa/squad
    twotower reqa --nq 'simplified-nq-dev.jsonl.gz' --out reqa/nq
    twotower reqa --squad dev.json --extra_passages wiki/ --extra_candidates 1000000 --out o/

Reading order:
  SQuAD JSON / NQ jsonl --Parse--> Paragraph (title, context, questions with answer offsets)
  Paragraph --SplitSentences--> sentence spans (pipelines.sentences, default `reqa`)
  --> candidates: unique (sentence, passage) pairs, int64 ids = a hash of the two texts
  --> questions: gold candidates = the sentences holding each answer's start offset
  --> splits 1/5/10/80 % train by a hash of the question id (cold start), 10 % of train
      held out for validation
  Outputs: candidates.parquet, questions-<split>.parquet, finetune/<split>-*.tfrecord (pair
  schema, train-r and validation-r), stats.json (every counter).

Counting, as ReQA's `squad_eval.py` does and as the paper does: `questions` counts question
records; `reqa_qa_inputs` counts (question, distinct answer sentence) pairs (ReQA's "QA
inputs", 11,426 on SQuAD v1.1 dev with the `reqa` splitter); `candidates` counts unique
(sentence, passage) pairs (10,250 there). Gold conventions are the evaluator's business
(eval.metrics): `gold_candidate_ids` holds the exact (sentence, passage) candidates (the
paper's); ReQA's (any candidate with the gold sentence's text, averaged over unique question
strings) is derived from them and candidates.parquet.

Candidate ids are a 63-bit hash of (sentence, passage), so every worker can name a candidate
without a global ordering; de-duplication is one GroupByKey on the id, which also proves there
was no hash collision (two texts under one id fail the job loudly). The trade-off: ids are not
dense 0..N-1 (FAISS `IndexIDMap` and Parquet do not care), and the job scales to any N. A dense
numbering would need one worker to sort all candidates: fine at ReQA's ~10k-100k, not at the
paper's 1M+ open-domain pool. At ~10k candidates Beam is not faster than a loop (DESIGN:
DirectRunner ~1.07x of plain Python); it earns its keep on NQ train (300k records) and the
open-domain sampling over a full Wikipedia `passages/`.

Bad input: malformed SQuAD JSON is a ValueError naming the file and position (one JSON
document: nothing sensible to salvage); everything else (a malformed NQ line, a missing field,
an empty passage, an answer whose `answer_start` does not match its text and is not found
nearby, NQ token offsets out of range, v2.0 unanswerable questions) is a counted skip with a
log line naming the file and the record id.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import logging
import urllib.parse
from typing import Any, Iterable, Iterator, Optional, Sequence

import apache_beam as beam

from twotower import contracts
from twotower import io as tio
from twotower import texts
from twotower.pipelines import sentences as sentences_lib
from twotower.contracts import Pair, codecs, stable_hash

logger = logging.getLogger(__name__)

SOURCES = ("squad", "nq", "wikipedia")
INT63 = (1 << 63) - 1


# ---------------------------------------------------------------------------------------------
# Records.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Answer:
  start: int  # character offset of the answer in the paragraph
  text: str


@dataclasses.dataclass(frozen=True)
class Question:
  question_id: str
  question: str
  answers: tuple[Answer, ...]


@dataclasses.dataclass(frozen=True)
class Paragraph:
  """One passage with its questions, as parsed; `where` names it in log lines."""
  title: str
  context: str
  questions: tuple[Question, ...]
  source: str  # one of SOURCES
  where: str   # "file: article 3 paragraph 2" or "file:line 17 (example_id 42)"


@dataclasses.dataclass(frozen=True)
class Skip:
  """A counted skip: `reason` is a stats.json key, `message` names the file and record."""
  reason: str
  message: str
  count: int = 1


@dataclasses.dataclass(frozen=True)
class QaRecord:
  """A question with its gold candidates (exact (sentence, passage) pairs)."""
  question_id: str
  question: str
  title: str
  passage: str
  passage_id: int
  golds: tuple[tuple[int, str], ...]  # (candidate_id, sentence), answer order, distinct
  qa_inputs: int                      # distinct answer sentence texts (ReQA's QA inputs)


@dataclasses.dataclass(frozen=True)
class ReqaConfig:
  """Flags of `twotower reqa`."""
  out: str
  squad: Optional[str] = None        # SQuAD v1.1/v2.0 JSON file(s), a glob
  nq: Optional[str] = None           # NQ simplified jsonl[.gz] file(s), a glob
  splitter: str = "reqa"             # a name of pipelines.sentences
  extra_passages: Optional[str] = None  # a `twotower pairs` output dir (its passages/)
  extra_candidates: int = 0          # sampled extra (sentence, passage) candidates
  validation_percent: float = 10.0   # of each train side
  ratios: tuple[int, ...] = contracts.REQA_RATIOS
  seed: str = "reqa"                 # salt of every split/sampling hash
  doc_text: str = texts.DEFAULT_DOC_TEXT  # layout of doc_text in the fine-tuning pairs
  num_shards: int = 1                # fine-tuning TFRecord shards per split


def stable_int63(*parts: object) -> int:
  return stable_hash(*parts) & INT63


def candidate_id(sentence: str, passage: str) -> int:
  """Deterministic int64 id of a (sentence, passage) candidate."""
  return stable_int63("candidate", sentence, passage)


def passage_id(passage: str) -> int:
  """Deterministic int64 id of a passage text (doc_page_id of the fine-tuning pairs)."""
  return stable_int63("passage", passage)


def unit_hash(seed: str, purpose: str, key: str) -> float:
  """A deterministic number in [0, 1) for `key`."""
  return (stable_hash(seed, purpose, key) % 1_000_000) / 1_000_000


# ---------------------------------------------------------------------------------------------
# Parsing: SQuAD JSON.
# ---------------------------------------------------------------------------------------------


def _parse_json(text: str, path: str) -> Any:
  try:
    return json.loads(text)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: malformed JSON at line {e.lineno} column {e.colno}: "
                     f"{e.msg}") from e


def fix_answer_start(context: str, answer: Answer) -> tuple[Optional[int], bool]:
  """(start, moved): the answer's start if its text is there, else the nearest occurrence of
  its text (moved=True), else (None, True)."""
  n = len(answer.text)
  if 0 <= answer.start and context[answer.start:answer.start + n] == answer.text:
    return answer.start, False
  best, pos = None, context.find(answer.text)
  while pos != -1:
    if best is None or abs(pos - answer.start) < abs(best - answer.start):
      best = pos
    pos = context.find(answer.text, pos + 1)
  return best, True


def _squad_question(qa: Any, where: str) -> Question | Skip:
  if not isinstance(qa, dict):
    return Skip("questions_skipped_malformed", f"{where}: question is not an object")
  qid = qa.get("id")
  name = f"{where} question {qid!r}"
  for field in ("id", "question"):
    if not isinstance(qa.get(field), str) or not qa.get(field).strip():
      return Skip("questions_skipped_missing_field", f"{name}: no {field!r} field")
  if qa.get("is_impossible"):
    return Skip("questions_skipped_unanswerable", f"{name}: unanswerable (SQuAD v2.0)")
  raw = qa.get("answers")
  if not isinstance(raw, list):
    return Skip("questions_skipped_missing_field", f"{name}: no 'answers' field")
  answers = []
  for a in raw:
    if (not isinstance(a, dict) or not isinstance(a.get("text"), str)
        or not isinstance(a.get("answer_start"), int)):
      return Skip("questions_skipped_missing_field",
                  f"{name}: an answer lacks 'text' or an integer 'answer_start'")
    answers.append(Answer(a["answer_start"], a["text"]))
  if not answers:
    return Skip("questions_skipped_no_answer", f"{name}: no answer")
  return Question(qid, qa["question"], tuple(answers))  # raw: ReQA keys metrics on it


def parse_squad(path: str) -> Iterator[Paragraph | Skip]:
  """Paragraphs of a SQuAD v1.1/v2.0 file, and Skips for what cannot be used.

  Raises:
    ValueError: the file is not JSON, or has no `data` list (names the file).
  """
  doc = _parse_json(tio.read_text(path), path)
  if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
    raise ValueError(f"{path}: not a SQuAD file (no top-level 'data' list)")
  for i, article in enumerate(doc["data"]):
    title = article.get("title") if isinstance(article, dict) else None
    if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
      yield Skip("articles_skipped_missing_field", f"{path}: article {i} ({title!r}): "
                 "no 'paragraphs' list")
      continue
    title = title if isinstance(title, str) else ""
    for j, paragraph in enumerate(article["paragraphs"]):
      where = f"{path}: article {i} ({title!r}) paragraph {j}"
      if not isinstance(paragraph, dict) or not isinstance(paragraph.get("context"), str):
        yield Skip("paragraphs_skipped_missing_field", f"{where}: no 'context' field")
        continue
      questions = []
      for qa in paragraph.get("qas") or ():
        q = _squad_question(qa, where)
        if isinstance(q, Skip):
          yield q
        else:
          questions.append(q)
      yield Paragraph(title.replace("_", " "), paragraph["context"], tuple(questions),
                      "squad", where)


# ---------------------------------------------------------------------------------------------
# Parsing: Natural Questions, simplified format, converted as ReQA's nq_to_squad.py does.
# ---------------------------------------------------------------------------------------------


def _is_html(token: str) -> bool:
  return len(token) > 1 and token.startswith("<") and token.endswith(">")


def _join_text(tokens: Sequence[str], start: int, end: int) -> str:
  """The non-HTML tokens of [start, end), one space apart (the simplified format has lost the
  original spacing; ReQA's clean_text puts one space wherever there was whitespace)."""
  return " ".join(t for t in tokens[start:end] if t and not _is_html(t))


def _nq_title(record: dict) -> str:
  if isinstance(record.get("document_title"), str):
    return record["document_title"]
  query = urllib.parse.urlparse(record.get("document_url") or "").query
  titles = urllib.parse.parse_qs(query).get("title")
  return titles[0].replace("_", " ") if titles else ""


def nq_to_paragraph(record: Any, where: str) -> Paragraph | Skip:
  """One simplified-NQ record -> a one-question Paragraph, or a Skip.

  As ReQA's `nq_to_squad`: the first annotation; exactly one short answer (multi-span short
  answers are skipped, as there); a long answer that exists and is a `<P>` paragraph; the
  passage is the long answer's text without HTML tokens, the answer starts after the text of
  the tokens before the short answer.
  """
  if not isinstance(record, dict):
    return Skip("nq_skipped_malformed", f"{where}: not a JSON object")
  rid = record.get("example_id")
  name = f"{where} (example_id {rid})"
  for field in ("example_id", "question_text", "document_text", "annotations"):
    if record.get(field) in (None, ""):
      return Skip("nq_skipped_missing_field", f"{name}: no {field!r} field")
  annotations = record["annotations"]
  if not isinstance(annotations, list) or not annotations:
    return Skip("nq_skipped_missing_field", f"{name}: no annotation")
  annotation = annotations[0]
  try:
    long_answer = annotation["long_answer"]
    short_answers = annotation["short_answers"]
    ls, le = int(long_answer["start_token"]), int(long_answer["end_token"])
    spans = [(int(s["start_token"]), int(s["end_token"])) for s in short_answers]
  except (KeyError, TypeError, ValueError) as e:
    return Skip("nq_skipped_missing_field", f"{name}: malformed annotation ({e!r})")
  if ls == -1:
    return Skip("nq_skipped_no_long_answer", f"{name}: no long answer")
  if len(spans) != 1:
    return Skip("nq_skipped_not_one_short_answer",
                f"{name}: {len(spans)} short answers (ReQA keeps exactly one)")
  tokens = record["document_text"].split(" ")
  ss, se = spans[0]
  if not (0 <= ls < le <= len(tokens) and ls <= ss < se <= le):
    return Skip("nq_skipped_bad_offsets",
                f"{name}: token offsets out of range (long [{ls}, {le}), short [{ss}, {se}), "
                f"{len(tokens)} tokens)")
  if tokens[ls] != "<P>":
    return Skip("nq_skipped_not_paragraph", f"{name}: long answer is a {tokens[ls]} block")
  context = _join_text(tokens, ls, le)
  answer = _join_text(tokens, ss, se)
  before = _join_text(tokens, ls, ss)
  if not answer:
    return Skip("nq_skipped_empty_answer", f"{name}: short answer has no text")
  start = len(before) + 1 if before else 0
  question = Question(str(rid), str(record["question_text"]).strip(), (Answer(start, answer),))
  return Paragraph(_nq_title(record), context, (question,), "nq", name)


def _open_lines(path: str) -> Iterator[str]:
  if tio.is_local(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
      yield from f
    return
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  with FileSystems.open(path) as f:  # decompresses .gz by extension
    for line in f:
      yield line.decode("utf-8")


def parse_nq(path: str) -> Iterator[Paragraph | Skip]:
  """Paragraphs of a simplified-NQ jsonl[.gz] file; a malformed line is a counted skip."""
  for n, line in enumerate(_open_lines(path), start=1):
    if not line.strip():
      continue
    where = f"{path}:{n}"
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      yield Skip("nq_skipped_malformed_json", f"{where}: malformed JSON: {e.msg}")
      continue
    yield Skip("nq_records_read", "", 1)
    yield nq_to_paragraph(record, where)


# ---------------------------------------------------------------------------------------------
# Beam transforms.
# ---------------------------------------------------------------------------------------------


def _inc(name: str, value: int = 1) -> None:
  tio.counter(name).inc(value)


class _ParseFile(beam.DoFn):
  """path -> Paragraph; Skips become counters and log lines."""

  def __init__(self, kind: str):
    self.kind = kind

  def process(self, path: str) -> Iterator[Paragraph]:
    parse = parse_squad if self.kind == "squad" else parse_nq
    for item in parse(path):
      if isinstance(item, Skip):
        _inc(item.reason, item.count)
        if item.message:
          logger.warning("skipped (%s): %s", item.reason, item.message)
        continue
      _inc("paragraphs_read")
      if not item.context.strip():
        _inc("paragraphs_skipped_empty")
        _inc("questions_skipped_empty_passage", len(item.questions))
        logger.warning("skipped (paragraphs_skipped_empty): %s: empty passage", item.where)
        continue
      if not item.questions:
        _inc("paragraphs_without_questions")  # ReQA indexes only paragraphs with questions
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


def gold_sentence(spans: Sequence[tuple[int, int]], start: int) -> tuple[Optional[int], bool]:
  """(index, exact): the sentence holding offset `start`; if it falls between sentences, the
  next one (exact=False); None past the last sentence."""
  for i, (s, e) in enumerate(spans):
    if s <= start < e:
      return i, True
    if start < s:
      return i, False
  return None, False


class _MakeRecords(beam.DoFn):
  """(Paragraph, spans) -> candidates (main output: (candidate_id, row dict)) and
  QaRecords (tagged output "questions")."""

  def process(self, element):
    paragraph, spans = element
    ctx, pid = paragraph.context, passage_id(paragraph.context)
    if not spans:
      _inc("paragraphs_skipped_empty")
      return
    sentences = [ctx[s:e] for s, e in spans]
    ids = [candidate_id(s, ctx) for s in sentences]
    questions = []
    for q in paragraph.questions:
      golds: dict[int, str] = {}
      for answer in q.answers:
        start, moved = fix_answer_start(ctx, answer)
        if start is None:
          _inc("answers_skipped_text_not_found")
          logger.warning("skipped (answers_skipped_text_not_found): %s question %r: answer "
                         "%r not in the passage", paragraph.where, q.question_id, answer.text)
          continue
        if moved:
          _inc("answers_start_fixed")
        index, exact = gold_sentence(spans, start)
        if index is None:
          _inc("answers_skipped_outside_sentences")
          continue
        if not exact:
          _inc("answers_between_sentences")
        golds.setdefault(ids[index], sentences[index])
      if not golds:
        _inc("questions_skipped_no_valid_answer")
        logger.warning("skipped (questions_skipped_no_valid_answer): %s question %r",
                       paragraph.where, q.question_id)
        continue
      questions.append(QaRecord(q.question_id, q.question, paragraph.title, ctx, pid,
                                tuple(golds.items()), len(set(golds.values()))))
    if not questions:  # ReQA indexes only paragraphs that yield a QA input
      _inc("paragraphs_without_questions")
      return
    _inc("paragraphs_used")
    for record in questions:
      yield beam.pvalue.TaggedOutput("questions", record)
    for cid, sentence in zip(ids, sentences):
      yield cid, {"candidate_id": cid, "sentence": sentence, "passage": ctx,
                  "title": paragraph.title, "source": paragraph.source}


def _dedupe_candidate(element) -> dict:
  """(candidate_id, [row, ...]) -> one row; two different texts under one id fail the job."""
  cid, rows = element
  rows = list(rows)
  texts_ = {(r["sentence"], r["passage"]) for r in rows}
  if len(texts_) > 1:
    raise RuntimeError(f"candidate id {cid} hashes {len(texts_)} different texts: "
                       f"{sorted(texts_)[:2]!r}")
  # Deterministic pick: a ReQA source over an extra Wikipedia one, then the smallest title.
  row = min(rows, key=lambda r: (r["source"] == "wikipedia", r["title"], r["source"]))
  _inc("candidates")
  if row["source"] == "wikipedia":
    _inc("candidates_extra")
  return row


class SampleExtraCandidates(beam.PTransform):
  """passages/*.parquet rows -> N sampled (candidate_id, row) candidates, deterministically.

  Every (passage, sentence index) gets a hash; the N smallest hashes win. Only a threshold (the
  N-th smallest hash: one number, a singleton side input) crosses workers, so the sample is the
  same on any runner and any sharding, and nothing corpus-sized sits in one worker beyond N
  integers in the Top combine.
  """

  def __init__(self, n: int, seed: str):
    super().__init__()
    self.n, self.seed = n, seed

  def expand(self, rows):
    seed = self.seed

    def keyed(row):
      for i, sentence in enumerate(row.get("sentences") or ()):
        if sentence and sentence.strip() and (row.get("text") or "").strip():
          yield stable_hash(seed, "extra", row["page_id"], row["passage_id"], i), (row, i)

    # (hash, (passage row, sentence index))
    hashed = rows | "HashSentences" >> beam.FlatMap(keyed)
    # the N-th smallest hash (a singleton)
    threshold = (hashed
                 | "HashesOnly" >> beam.Keys()
                 | "NSmallest" >> beam.combiners.Top.Smallest(self.n)
                 | "Threshold" >> beam.Map(lambda hs: hs[-1] if hs else -1))

    def to_candidate(element, limit):
      h, (row, i) = element
      if h > limit:
        return
      sentence, passage = row["sentences"][i].strip(), row["text"]
      cid = candidate_id(sentence, passage)
      yield cid, {"candidate_id": cid, "sentence": sentence, "passage": passage,
                  "title": row.get("title") or "", "source": "wikipedia"}

    # (candidate_id, row)
    return hashed | "KeepSampled" >> beam.FlatMap(
        to_candidate, limit=beam.pvalue.AsSingleton(threshold))


def split_names(ratios: Sequence[int]) -> list[str]:
  """`all`, then train-r, validation-r, test-r for each ratio (contracts.REQA_RATIOS)."""
  return ["all"] + [f"{side}-{r}" for r in ratios for side in ("train", "validation", "test")]


def assign_splits(question_ids: Sequence[str], config: ReqaConfig) -> list[str]:
  """The splits a group of questions with one question text goes to (beyond `all`).

  The group is assigned by a hash of its smallest question id: u in [0, 1); train side for
  ratio r when u < r/100, so train-1 ⊂ train-5 ⊂ train-10 ⊂ train-80. Because a question text
  never straddles train and test, test questions are unseen in training (cold start). A second
  hash of the same id holds out `validation_percent` % of each train side.
  """
  key = min(question_ids)
  u = unit_hash(config.seed, "split", key)
  held = unit_hash(config.seed, "validation", key) < config.validation_percent / 100
  out = []
  for r in config.ratios:
    if u < r / 100:
      out.append(f"validation-{r}" if held else f"train-{r}")
    else:
      out.append(f"test-{r}")
  return out


def question_key(question: str) -> str:
  """What makes two questions "the same" for cold start: case and spacing do not count."""
  return " ".join(question.casefold().split())


def _split_group(element, config: ReqaConfig):
  """(question_key, [QaRecord]) -> (split, QaRecord) for `all` and each ratio's side."""
  _, records = element
  by_id: dict[str, QaRecord] = {}
  for record in sorted(records, key=lambda r: r.question_id):
    if record.question_id in by_id:
      _inc("questions_skipped_duplicate_id")
      continue
    by_id[record.question_id] = record
  _inc("question_groups")  # distinct question_key: the unit of cold start
  splits = ["all"] + assign_splits(list(by_id), config)
  for record in by_id.values():
    _inc("questions")
    _inc("reqa_qa_inputs", record.qa_inputs)
    _inc("gold_candidates", len(record.golds))
    for split in splits:
      _inc(f"questions_{split.replace('-', '_')}")
      yield split, record


def question_row(record: QaRecord) -> dict:
  return {"question_id": record.question_id, "question": record.question,
          "gold_candidate_ids": [cid for cid, _ in record.golds]}


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
  """Paragraph -> {"candidates": row dict, "questions": (split, QaRecord)}."""

  def __init__(self, config: ReqaConfig):
    super().__init__()
    self.config = config

  def expand(self, paragraphs):
    config = self.config
    # (Paragraph, spans)
    split = (paragraphs
             | "Batch" >> beam.BatchElements(min_batch_size=16, max_batch_size=256)
             | "SplitSentences" >> beam.ParDo(_SplitSentences(config.splitter)))
    # main: (candidate_id, row); questions: QaRecord
    records = split | "MakeRecords" >> beam.ParDo(_MakeRecords()).with_outputs(
        "questions", main="candidates")
    keyed = records.candidates
    if config.extra_passages and config.extra_candidates > 0:
      rows = (paragraphs.pipeline
              | "ReadPassages" >> beam.io.ReadFromParquet(
                  f"{config.extra_passages.rstrip('/')}/passages/*.parquet",
                  columns=["page_id", "passage_id", "title", "text", "sentences"]))
      extra = rows | "SampleExtra" >> SampleExtraCandidates(config.extra_candidates,
                                                            config.seed)
      keyed = (keyed, extra) | "AllCandidates" >> beam.Flatten()
    # row dict, one per (sentence, passage)
    candidates = (keyed
                  | "GroupById" >> beam.GroupByKey()
                  | "Dedupe" >> beam.Map(_dedupe_candidate))
    # (split, QaRecord)
    questions = (records.questions
                 | "KeyByText" >> beam.Map(lambda r: (question_key(r.question), r))
                 | "GroupByText" >> beam.GroupByKey()
                 | "AssignSplits" >> beam.FlatMap(_split_group, config=config))
    return {"candidates": candidates, "questions": questions}


def build(pipeline: beam.Pipeline, config: ReqaConfig) -> None:
  """Adds the whole ReQA job, reads to writes, to `pipeline`."""
  out = config.out.rstrip("/")
  inputs = []
  for kind in ("squad", "nq"):
    pattern = getattr(config, kind)
    if pattern:
      inputs.append(pipeline
                    | f"List_{kind}" >> beam.Create(tio.match_files(pattern))
                    | f"Parse_{kind}" >> beam.ParDo(_ParseFile(kind)))
  # Paragraph
  paragraphs = (inputs | "Inputs" >> beam.Flatten()
                | "Spread" >> beam.Reshuffle())
  built = paragraphs | "BuildReqa" >> BuildReqa(config)
  _ = built["candidates"] | "WriteCandidates" >> beam.io.WriteToParquet(
      f"{out}/{contracts.CANDIDATES_FILE}", contracts.CANDIDATE_SCHEMA, num_shards=1,
      shard_name_template="")
  names = split_names(config.ratios)
  parts = built["questions"] | "BySplit" >> beam.Partition(
      lambda element, _: names.index(element[0]), len(names))
  for name, part in zip(names, parts):
    records = part | f"Records_{name}" >> beam.Values()
    _ = (records
         | f"Rows_{name}" >> beam.Map(question_row)
         | f"Write_{name}" >> beam.io.WriteToParquet(
             f"{out}/{contracts.questions_file(name)}", contracts.QUESTION_SCHEMA,
             num_shards=1, shard_name_template=""))
    if name.startswith(("train-", "validation-")):
      _ = (records
           | f"Pairs_{name}" >> beam.FlatMap(finetune_pairs, doc_text=config.doc_text)
           | f"WritePairs_{name}" >> beam.io.WriteToTFRecord(
               f"{out}/finetune/{name}", file_name_suffix=contracts.PAIRS_SUFFIX,
               num_shards=config.num_shards))


def run_pipeline(config: ReqaConfig, beam_args: list[str]) -> dict:
  """Runs the job, writes stats.json, returns the stats."""
  if not (config.squad or config.nq):
    raise ValueError("give --squad FILE or --nq FILE")
  tio.makedirs(config.out)
  pipeline = tio.make_pipeline(beam_args)
  build(pipeline, config)
  result = pipeline.run()
  result.wait_until_finish()
  stats = tio.beam_counters(result)
  for name in split_names(config.ratios):
    stats.setdefault(f"questions_{name.replace('-', '_')}", 0)
  stats = dict(sorted(stats.items()))
  tio.write_json(f"{config.out.rstrip('/')}/{contracts.STATS_FILE}", stats)
  return stats


def summary_table(stats: dict, config: ReqaConfig) -> str:
  skipped = {k: v for k, v in stats.items() if "skipped" in k and v}
  lines = [f"candidates {stats.get('candidates', 0)} (extra {stats.get('candidates_extra', 0)})"
           f", questions {stats.get('questions', 0)} ({stats.get('question_groups', 0)} "
           f"distinct question texts), ReQA QA inputs {stats.get('reqa_qa_inputs', 0)}"
           f"  [splitter {config.splitter}]",
           "skipped: " + (", ".join(f"{k} {v}" for k, v in skipped.items()) or "none"),
           "", f"{'ratio':>5} {'train':>7} {'valid':>7} {'test':>7}"]
  for r in config.ratios:
    lines.append(f"{r:>4}% " + " ".join(f"{stats.get(f'questions_{s}_{r}', 0):>7}"
                                        for s in ("train", "validation", "test")))
  lines.append(f"\nwritten to {config.out}")
  return "\n".join(lines)


def parse_args(argv: Iterable[str] | None) -> tuple[ReqaConfig, list[str]]:
  p = argparse.ArgumentParser(prog="twotower reqa", description=__doc__.split("\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  src = p.add_mutually_exclusive_group(required=True)
  src.add_argument("--squad", help="SQuAD v1.1/v2.0 JSON file(s) (a glob, any Beam filesystem)")
  src.add_argument("--nq", help="Natural Questions simplified jsonl[.gz] file(s) (a glob)")
  p.add_argument("--out", required=True, help="output directory")
  p.add_argument("--splitter", default="reqa",
                 help=f"sentence splitter ({', '.join(sentences_lib.SPLITTER_NAMES)}); `reqa`"
                 " reproduces ReQA's counts")
  p.add_argument("--extra_passages", help="a `twotower pairs` output dir whose passages/ "
                 "supply open-domain candidates")
  p.add_argument("--extra_candidates", type=int, default=0,
                 help="number of (sentence, passage) candidates sampled from --extra_passages")
  p.add_argument("--validation_percent", type=float, default=10.0,
                 help="percent of each train side held out for validation")
  p.add_argument("--seed", default="reqa", help="salt of the split and sampling hashes")
  p.add_argument("--doc_text", choices=texts.DOC_TEXT_MODES, default=texts.DEFAULT_DOC_TEXT,
                 help="doc_text layout of the fine-tuning pairs (twotower.texts)")
  p.add_argument("--num_shards", type=int, default=1,
                 help="TFRecord shards per fine-tuning split")
  args, beam_args = p.parse_known_args(None if argv is None else list(argv))
  if args.extra_candidates and not args.extra_passages:
    p.error("--extra_candidates needs --extra_passages")
  config = ReqaConfig(out=args.out, squad=args.squad, nq=args.nq, splitter=args.splitter,
                      extra_passages=args.extra_passages,
                      extra_candidates=args.extra_candidates,
                      validation_percent=args.validation_percent, seed=args.seed,
                      doc_text=args.doc_text, num_shards=args.num_shards)
  return config, beam_args


def run(argv: list[str] | None = None) -> None:
  config, beam_args = parse_args(argv)
  sentences_lib.get_splitter(config.splitter)  # a bad name fails before Beam starts
  tio.log_settings("reqa", dataclasses.asdict(config))
  stats = run_pipeline(config, beam_args)
  print(summary_table(stats, config))


if __name__ == "__main__":
  run()
