"""Records that travel between stages, and the schemas of the files that hold them.

    RawPage  one `<page>` of a dump, as read            (pipelines.wiki.wikidump -> wikitext)
    Page     a cleaned article: sections, links          (pipelines.wiki.wikitext -> links, passages)
    Passage  a row of passages/*.parquet                 (pipelines.wiki.passages -> pairs, vocab, MLM,
                                                          open-domain ReQA, embed)
    Pair     a (query, document) pair, a tf.train.Example in pairs/<task>/*.tfrecord and
             REQA/finetune/*.tfrecord                    (pipelines.wiki.pairs, reqa -> model.data)
    Candidate, Question  rows of REQA/candidates.parquet and questions-<split>.parquet
                                                         (pipelines.reqa.builder, heldout -> eval)
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Optional, Sequence

import pyarrow as pa


def stable_hash(*parts: object) -> int:
  """A 64-bit hash of `parts` that is the same in every process (unlike `hash`): sampling,
  splits and candidate ids depend on it, so a re-run on any runner writes the same files."""
  key = "\x1f".join(str(p) for p in parts).encode("utf-8")
  return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")

# ---------------------------------------------------------------------------------------------
# Wikipedia pages (stage 1 -> 2).
# ---------------------------------------------------------------------------------------------

#: The main (article) namespace; every other namespace is skipped and counted.
ARTICLE_NAMESPACE = 0


@dataclasses.dataclass(frozen=True)
class SiteInfo:
  """What a dump's `<siteinfo>` says that title normalisation needs.

  Attributes:
    dbname: e.g. "enwiki".
    case: MediaWiki `<case>`: "first-letter" (titles start upper case) or "case-sensitive".
    namespaces: namespace key -> canonical local name ("" for the main namespace), e.g.
      {0: "", 14: "Category", 6: "File"}.
  """
  dbname: str = ""
  case: str = "first-letter"
  namespaces: tuple[tuple[int, str], ...] = ((0, ""),)

  def namespace_names(self) -> dict[int, str]:
    return dict(self.namespaces)


@dataclasses.dataclass(frozen=True)
class RawPage:
  """One `<page>` of a dump, as read, before any wikitext parsing.

  `redirect_title` is the `<redirect title=...>` attribute (None for articles): the tag, not
  the `#REDIRECT` text, so that `#đổi` or `#転送` redirects are recognised in any language.
  `source` names the dump file, for log lines and errors.
  """
  page_id: int
  title: str
  namespace: int
  text: str
  redirect_title: Optional[str]
  source: str
  site: SiteInfo


@dataclasses.dataclass(frozen=True)
class Section:
  """A section of a cleaned article. The lead has heading "" and level 0."""
  heading: str
  level: int
  paragraphs: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Page:
  """A cleaned article of namespace 0.

  `sections[0]` is always the lead (heading ""), possibly with no paragraphs.
  `links` are the outgoing `[[link]]` targets of the main namespace, normalised as MediaWiki
  does (see pipelines.wiki.titles), deduplicated, in first-seen order.
  """
  page_id: int
  title: str
  sections: tuple[Section, ...]
  links: tuple[str, ...]
  source: str = ""

  @property
  def lead(self) -> Section:
    return self.sections[0]


# ---------------------------------------------------------------------------------------------
# Passages and pairs (stage 5).
# ---------------------------------------------------------------------------------------------

#: Pre-training tasks of the paper, and the task name of ReQA fine-tuning pairs.
PRETRAIN_TASKS = ("ict", "bfs", "wlp")
REQA_TASK = "reqa"
#: Contriever's pre-training task (Izacard et al., TMLR 2022: two independent random crops of
#: one passage). The pair pipeline writes it only when asked (`--crop_per_page` > 0), so a run
#: without it writes, counts and records exactly what runs before it did.
CROP_TASK = "crop"
#: Every task the pair pipeline can write, i.e. every pre-training task on pairs.
PAIR_TASKS = PRETRAIN_TASKS + (CROP_TASK,)

#: Splits of the pair pipeline: `heldout` pages (by a hash of the page id) never feed training.
PAIR_SPLITS = ("train", "heldout")
TRAIN, HELDOUT = PAIR_SPLITS


def is_heldout(page_id: int, heldout_percent: float) -> bool:
  """A page is held out when a stable hash of its id falls under `heldout_percent` %."""
  return stable_hash("heldout", page_id) % 10_000 < heldout_percent * 100


def pair_split(query_page_id: int, doc_page_id: int, heldout_percent: float) -> str:
  """A pair is held out when *either* of its pages is: a WLP pair joins two pages, and a
  held-out page must never feed training, through its query or through its document."""
  if is_heldout(query_page_id, heldout_percent) or is_heldout(doc_page_id, heldout_percent):
    return HELDOUT
  return TRAIN

PASSAGE_SCHEMA = pa.schema([
    ("page_id", pa.int64()),
    ("passage_id", pa.int64()),
    ("title", pa.string()),
    ("text", pa.string()),
    ("sentences", pa.list_(pa.string())),
    ("is_lead", pa.bool_()),
    ("section", pa.string()),
])


@dataclasses.dataclass(frozen=True)
class Passage:
  """One row of `passages/*.parquet` (PASSAGE_SCHEMA): a paragraph, packed or cut to fit the
  document tower, with its sentences. `section` is the path of headings it sits under,
  joined by SECTION_SEPARATOR ("History › Early years"; "" in the lead; "" too in files
  written before the column existed)."""
  page_id: int
  passage_id: int
  title: str
  text: str
  sentences: tuple[str, ...]
  is_lead: bool
  section: str = ""

  def to_row(self) -> dict:
    return {"page_id": self.page_id, "passage_id": self.passage_id, "title": self.title,
            "text": self.text, "sentences": list(self.sentences), "is_lead": self.is_lead,
            "section": self.section}

  @classmethod
  def from_row(cls, row: dict) -> "Passage":
    return cls(int(row["page_id"]), int(row["passage_id"]), row.get("title") or "",
               row.get("text") or "", tuple(row.get("sentences") or ()),
               bool(row.get("is_lead")), row.get("section") or "")


#: Joins the headings of a section path, and a title to it where a page shows both.
SECTION_SEPARATOR = " › "


def title_with_section(title: str, section: str) -> str:
  """"Title › Section" (just the title for the lead)."""
  return f"{title}{SECTION_SEPARATOR}{section}" if section else title


#: Low bits of a passage_uid that hold the passage's index in its page (2^20 per page).
PASSAGE_ID_BITS = 20


def passage_uid(page_id: int, passage_id: int) -> int:
  """One int64 per passage, for FAISS ids and embedding rows (2^20 passages per page)."""
  if not 0 <= passage_id < (1 << PASSAGE_ID_BITS):
    raise ValueError(f"passage_id {passage_id} out of range [0, 2^20) for page {page_id}")
  return (int(page_id) << PASSAGE_ID_BITS) | int(passage_id)


def passage_uid_page(uid: int) -> int:
  """The page id a passage_uid was made from (passage_uid's inverse, for the page)."""
  return int(uid) >> PASSAGE_ID_BITS


#: tf.train.Example features of a (query, document) pair. Bytes features hold UTF-8 text.
PAIR_BYTES_FEATURES = ("query", "doc_title", "doc_text", "task")
PAIR_INT64_FEATURES = ("query_page_id", "doc_page_id", "doc_passage_id")
PAIR_FEATURES = PAIR_BYTES_FEATURES + PAIR_INT64_FEATURES
#: Optional list features of a fine-tuning pair with mined hard negatives (one entry per
#: negative document; `twotower hardneg`): title, text and candidate id.
HARD_NEGATIVE_BYTES_FEATURES = ("neg_doc_title", "neg_doc_text")
HARD_NEGATIVE_INT64_FEATURES = ("neg_doc_id",)


@dataclasses.dataclass(frozen=True)
class Pair:
  """One (query, document) pair: the fields of PAIR_FEATURES.

  ICT / BFS / WLP pairs name the document by (doc_page_id, doc_passage_id); ReQA fine-tuning
  pairs use (passage id, candidate id). Training masks in-batch "negatives" that are the same
  document. `hard_negatives` are (title, text, candidate id) of mined negative documents.
  """
  task: str
  query: str
  doc_title: str
  doc_text: str
  query_page_id: int
  doc_page_id: int
  doc_passage_id: int
  hard_negatives: tuple[tuple[str, str, int], ...] = ()


# ---------------------------------------------------------------------------------------------
# ReQA (stage 7).
# ---------------------------------------------------------------------------------------------

CANDIDATE_SCHEMA = pa.schema([
    ("candidate_id", pa.int64()),
    ("sentence", pa.string()),
    ("passage", pa.string()),
    ("title", pa.string()),
    ("source", pa.string()),
    ("section", pa.string()),
])

QUESTION_SCHEMA = pa.schema([
    ("question_id", pa.string()),
    ("question", pa.string()),
    ("gold_candidate_ids", pa.list_(pa.int64())),
])

#: ReQA splits: `all` questions, then per train ratio r: `train-r`, `validation-r`, `test-r`
#: (e.g. `questions-test-5.parquet` is the 95 % test side of the 5 %/95 % split).
REQA_RATIOS = (1, 5, 10, 80)
#: Where a candidate comes from (CANDIDATE_SCHEMA `source`).
CANDIDATE_SOURCES = ("squad", "nq", "wikipedia", "wikipedia-heldout")
SQUAD_SOURCE, NQ_SOURCE, WIKIPEDIA_SOURCE, HELDOUT_SOURCE = CANDIDATE_SOURCES


@dataclasses.dataclass(frozen=True)
class Candidate:
  """A row of candidates.parquet: a (sentence, passage) pair with its title, and for a
  Wikipedia passage its section path (Passage.section; "" otherwise)."""
  candidate_id: int
  sentence: str
  passage: str
  title: str
  source: str
  section: str = ""

  def to_row(self) -> dict:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Question:
  """A row of questions-<split>.parquet: a question and its gold (sentence, passage)
  candidates."""
  question_id: str
  question: str
  gold_candidate_ids: tuple[int, ...]

  def to_row(self) -> dict:
    return {"question_id": self.question_id, "question": self.question,
            "gold_candidate_ids": list(self.gold_candidate_ids)}

  @classmethod
  def from_row(cls, row: dict) -> "Question":
    return cls(row["question_id"], row["question"], tuple(row["gold_candidate_ids"] or ()))


#: The split of every question (no question is trained on at any ratio).
ALL_QUESTIONS = "all"
#: The "ratio" of a zero-shot evaluation: pre-trained towers with no fine-tuning, scored on
#: every question (`all`), as the paper's successors (Contriever, coCondenser) report theirs.
ZERO_SHOT_RATIO = 0


#: The sides of ratio r's split: fine-tuned on (r % of the questions), held out of the train
#: side to tune on, and scored (the other 100 - r %).
TRAIN_SIDE, VALIDATION_SIDE, TEST_SIDE = "train", "validation", "test"
SPLIT_SIDES = (TRAIN_SIDE, VALIDATION_SIDE, TEST_SIDE)


def split_name(side: str, ratio: int | str) -> str:
  """`train-5`, `validation-5`, `test-5`: one side of the r %/(100-r) % split (`ratio` an int,
  or its digits as a flag gives them)."""
  return f"{side}-{ratio}"


def train_split(ratio: int | str) -> str:
  return split_name(TRAIN_SIDE, ratio)


def validation_split(ratio: int | str) -> str:
  return split_name(VALIDATION_SIDE, ratio)


def scored_split(ratio: int) -> str:
  """The questions a table scores at `ratio`: the test side, or every question zero-shot."""
  return ALL_QUESTIONS if ratio == ZERO_SHOT_RATIO else split_name(TEST_SIDE, ratio)


def split_side(split: str) -> str:
  """The side of a ratio's split (`validation-5` -> `validation`); "" for `all` and any name
  split_name does not make."""
  side, dash, ratio = split.rpartition("-")
  return side if dash and side in SPLIT_SIDES and ratio.isdigit() else ""


def reqa_split_names(ratios: Sequence[int] = REQA_RATIOS) -> list[str]:
  """`all`, then train-r, validation-r, test-r for each ratio."""
  return [ALL_QUESTIONS] + [split_name(side, r) for r in ratios for side in SPLIT_SIDES]


# ---------------------------------------------------------------------------------------------
# Embeddings, runs, metrics (stages 9-10).
# ---------------------------------------------------------------------------------------------


def embedding_schema(dim: int, id_type: pa.DataType = pa.int64()) -> pa.Schema:
  """`id` is int64 for documents (candidate_id or passage_uid), string for question ids."""
  return pa.schema([("id", id_type), ("embedding", pa.list_(pa.float32(), dim))])


#: SavedModel signatures, all on raw strings:
#:   query_encoder(query: string[None]) -> {"embedding": float32[None, d]}
#:   doc_encoder(title: string[None], text: string[None]) -> {"embedding": float32[None, d]}
QUERY_SIGNATURE = "query_encoder"
DOC_SIGNATURE = "doc_encoder"
EMBEDDING_OUTPUT = "embedding"

#: Run files: TREC (`qid Q0 docid rank score tag`) or Parquet with this schema.
RUN_SCHEMA = pa.schema([
    ("question_id", pa.string()),
    ("candidate_ids", pa.list_(pa.int64())),
    ("scores", pa.list_(pa.float32())),
])


@dataclasses.dataclass(frozen=True)
class Ranked:
  """One question's ranked list in memory, best first: a row of RUN_SCHEMA (eval.runs reads
  and writes run files; Lucene BM25 and FAISS search return these)."""
  candidate_ids: tuple[int, ...]
  scores: tuple[float, ...]


#: A run in memory: question id -> its Ranked list.
Run = dict[str, Ranked]

DEFAULT_KS = (1, 5, 10, 50, 100)
#: A tuning objective (eval.fusion): the mean of a metrics record's Recall@k values.
MEAN_RECALL = "mean_R@k"
#: A tuning objective (eval.fusion): the worst, over R@k and MRR, of the fused run's gain over
#: the first run alone (BM25); it cannot trade one metric for another.
WORST_GAIN = "worst_gain_over_first"


def metrics_record(system: str, split: str, questions: int, candidates: int,
                   metrics: dict[str, float]) -> dict:
  """One entry of metrics.json: recalls as fractions in [0, 1], keys "R@k" and "MRR"."""
  return {"system": system, "split": split, "questions": int(questions),
          "candidates": int(candidates), "metrics": {k: float(v) for k, v in metrics.items()}}


# ---------------------------------------------------------------------------------------------
# Vocabulary.
# ---------------------------------------------------------------------------------------------

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
#: The reserved tokens a vocabulary file starts with, [PAD] first (id 0 is padding).
RESERVED_TOKENS = (PAD, UNK, CLS, SEP, MASK)
