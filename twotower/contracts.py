"""The data contracts between stages, in one place (DESIGN.md "Stages and the contracts").

Every stage imports its record schemas, feature names, counter names and file layouts from
here and never restates them. Change a format here and the stages stay in step.

Reading order, dump to report:

  dump XML  --pipelines.wikidump-->  RawPage  --pipelines.wikitext-->  Page
  Page      --pipelines.pairs----->  pairs/<task>/<split>-*.tfrecord  (PAIR_FEATURES)
                                      passages/*.parquet               (PASSAGE_SCHEMA)
                                      stats.json                       (flat counters)
  SQuAD/NQ  --pipelines.reqa------>  candidates.parquet, questions-<split>.parquet, finetune/
  SavedModel --pipelines.embed---->  embeddings/*.parquet              (embedding_schema(d))
  embeddings --eval.index--------->  FAISS index --eval.search--> run file (TREC or Parquet)
  run file  --eval.evaluate------->  metrics.json (+ .md/.csv/.png)
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import pyarrow as pa

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
  does (see pipelines.titles), deduplicated, in first-seen order.
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
# Pair pipeline outputs (stage 5).
# ---------------------------------------------------------------------------------------------

#: Pre-training tasks of the paper, and the task name of ReQA fine-tuning pairs.
PRETRAIN_TASKS = ("ict", "bfs", "wlp")
REQA_TASK = "reqa"

#: Splits of the pair pipeline: `heldout` pages (by a hash of the page id) never feed training.
PAIR_SPLITS = ("train", "heldout")

#: tf.train.Example features of a (query, document) pair. Bytes features hold UTF-8 text.
PAIR_BYTES_FEATURES = ("query", "doc_title", "doc_text", "task")
PAIR_INT64_FEATURES = ("query_page_id", "doc_page_id", "doc_passage_id")
PAIR_FEATURES = PAIR_BYTES_FEATURES + PAIR_INT64_FEATURES


def pairs_dir(out_dir: str, task: str) -> str:
  return f"{out_dir}/pairs/{task}"


def pairs_prefix(out_dir: str, task: str, split: str) -> str:
  """Shards are `<prefix>-SSSSS-of-NNNNN.tfrecord`."""
  return f"{pairs_dir(out_dir, task)}/{split}"


PAIRS_SUFFIX = ".tfrecord"

#: Candidate pool for open-domain ReQA, text for MLM and for the vocabulary.
PASSAGE_SCHEMA = pa.schema([
    ("page_id", pa.int64()),
    ("passage_id", pa.int64()),
    ("title", pa.string()),
    ("text", pa.string()),
    ("sentences", pa.list_(pa.string())),
    ("is_lead", pa.bool_()),
])


def passages_prefix(out_dir: str) -> str:
  return f"{out_dir}/passages/passages"


def passage_uid(page_id: int, passage_id: int) -> int:
  """One int64 per passage, for FAISS ids and embedding rows (2^20 passages per page)."""
  if not 0 <= passage_id < (1 << 20):
    raise ValueError(f"passage_id {passage_id} out of range [0, 2^20) for page {page_id}")
  return (int(page_id) << 20) | int(passage_id)


STATS_FILE = "stats.json"

# ---------------------------------------------------------------------------------------------
# ReQA (stage 7).
# ---------------------------------------------------------------------------------------------

CANDIDATE_SCHEMA = pa.schema([
    ("candidate_id", pa.int64()),
    ("sentence", pa.string()),
    ("passage", pa.string()),
    ("title", pa.string()),
    ("source", pa.string()),
])

QUESTION_SCHEMA = pa.schema([
    ("question_id", pa.string()),
    ("question", pa.string()),
    ("gold_candidate_ids", pa.list_(pa.int64())),
])

#: ReQA splits: `all` questions, then per train ratio r: `train-r`, `validation-r`, `test-r`
#: (e.g. `questions-test-5.parquet` is the 95 % test side of the 5 %/95 % split).
REQA_RATIOS = (1, 5, 10, 80)
CANDIDATES_FILE = "candidates.parquet"


def questions_file(split: str) -> str:
  return f"questions-{split}.parquet"


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

DEFAULT_KS = (1, 5, 10, 50, 100)
METRICS_FILE = "metrics.json"


def metrics_record(system: str, split: str, questions: int, candidates: int,
                   metrics: dict[str, float]) -> dict:
  """One entry of metrics.json: recalls as fractions in [0, 1], keys "R@k" and "MRR"."""
  return {"system": system, "split": split, "questions": int(questions),
          "candidates": int(candidates), "metrics": {k: float(v) for k, v in metrics.items()}}
