"""A local BEIR folder (Thakur et al. 2021), as the `beir` package writes one, read streaming.

    DIR/corpus.jsonl         {"_id": str, "title": str, "text": str} a line
    DIR/queries.jsonl        {"_id": str, "text": str} a line
    DIR/qrels/<split>.tsv    `query-id<TAB>corpus-id<TAB>score`: a header line, then one
                             judged pair a line, the score an integer grade (0: judged not
                             relevant; graded datasets use 1, 2, 3 ...)

    data = beir.read("beir/scifact", "test")
    data.queries                 # {query id: text}, the queries the split's qrels judge
    data.qrels                   # {query id: {doc id: grade}}, the dataset's own ids
    for doc in data.corpus.documents():   # streamed: one pass over corpus.jsonl
      doc.internal_id, doc.doc_id, doc.title, doc.text

Ids. The dataset's string ids are kept end to end: qrels, runs and per-query values name
them, and TREC runs are written with them. Only FAISS and the embedding job need integers, so
each document gets an internal int64 id here and nowhere else (`Corpus`): its position among
the corpus's ids *sorted* (code point order, which is also UTF-8 byte order, trec_eval's
strcmp). Sorted, not in file order, so that every tie broken by internal id (Lucene's by its
id field, eval.fusion's by candidate id) is broken as by the dataset's id, and the mapping
is the same whatever order the corpus lines come in. `write_doc_ids` stores the mapping
beside an output (`doc_ids.parquet`: internal_id, doc_id).

Memory. The texts are never held: `read_corpus` makes one pass keeping the ids (an Arrow
string array, a few bytes an id), the line of each document and its internal id (numpy);
`Corpus.documents()` is a second pass. On a corpus of millions of documents that is tens of
MB, not the corpus. Queries and qrels (thousands to a few hundred thousand lines) are read
into dicts.

Bad input (`Problems`: each kind counted, the first lines named `file:line`):
  * refused in one line, nothing read on: a duplicate `_id` in the corpus or the queries
    (which text would the qrels mean?), a qrels file without its header line, a qrels line
    that is not three tab-separated fields or whose grade is not an integer, a missing file;
  * counted, named and skipped: a corpus or queries line that is not UTF-8, not JSON, not an
    object, or has no usable `_id` (absent, empty, not a string or integer, or holding
    whitespace, which a TREC run file cannot carry), or a `title` / `text` that is not a
    string;
  * counted, named and kept: a qrels doc id that is not in the corpus (a relevant document no
    system can retrieve still counts against recall, as in BEIR and trec_eval), a pair judged
    twice (the last grade is kept, as BEIR's loader keeps it), a query with empty text;
  * counted, named and dropped: a qrels query id that is not in queries.jsonl (it has no text
    to search).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import os
from typing import Any, Iterator, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm import tqdm

from twotower.core import files as tio
from twotower.core.contracts import Run

logger = logging.getLogger(__name__)

CORPUS_FILE = "corpus.jsonl"
QUERIES_FILE = "queries.jsonl"
QRELS_DIR = "qrels"
QRELS_SUFFIX = ".tsv"
QRELS_HEADER = ("query-id", "corpus-id", "score")
#: The mapping of internal ids to the dataset's, stored beside an output.
DOC_IDS_FILE = "doc_ids.parquet"
DOC_IDS_SCHEMA = pa.schema([("internal_id", pa.int64()), ("doc_id", pa.string())])
#: Lines named per kind of problem (all are counted).
NAMED_PER_KIND = 5

# Kinds of problem (Problems.counts keys).
NOT_UTF8, NOT_JSON, NOT_OBJECT, BAD_ID = "not UTF-8", "not JSON", "not a JSON object", "bad _id"
BAD_FIELD, EMPTY_QUERY = "title or text not a string", "query with empty text"
UNKNOWN_DOC, UNKNOWN_QUERY = "qrels doc id not in the corpus", "qrels query id not in queries"
JUDGED_TWICE = "pair judged twice"


class BeirFormatError(ValueError):
  """Input the reader refuses (one line: the file, the line, what is wrong)."""


@dataclasses.dataclass
class Problems:
  """What was wrong with the input: a count per kind and the first lines of each, named
  `file:line` (NAMED_PER_KIND of them)."""
  counts: dict[str, int] = dataclasses.field(default_factory=dict)
  where: dict[str, list[str]] = dataclasses.field(default_factory=dict)

  def add(self, kind: str, path: str, line: int, detail: str = "") -> None:
    self.counts[kind] = self.counts.get(kind, 0) + 1
    named = self.where.setdefault(kind, [])
    if len(named) < NAMED_PER_KIND:
      named.append(f"{path}:{line}" + (f" ({detail})" if detail else ""))

  def merge(self, other: "Problems") -> "Problems":
    for kind, n in other.counts.items():
      self.counts[kind] = self.counts.get(kind, 0) + n
      named = self.where.setdefault(kind, [])
      named.extend(other.where.get(kind, [])[:max(0, NAMED_PER_KIND - len(named))])
    return self

  def as_dict(self) -> dict[str, Any]:
    return {kind: {"count": n, "first": self.where.get(kind, [])}
            for kind, n in sorted(self.counts.items())}

  def log(self) -> None:
    for kind, n in sorted(self.counts.items()):
      logger.warning("%s: %d (%s%s)", kind, n, ", ".join(self.where.get(kind, [])),
                     ", ..." if n > len(self.where.get(kind, [])) else "")


# ------------------------------------------------------------------------------------------
# Lines of a JSONL file.
# ------------------------------------------------------------------------------------------


def _open(path: str):
  return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _find(folder: str, name: str) -> str:
  """`folder/name`, or `folder/name.gz` where only that is there."""
  path = os.path.join(folder, name)
  if not os.path.exists(path) and os.path.exists(path + ".gz"):
    return path + ".gz"
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path}: no such file (a BEIR folder holds {CORPUS_FILE}, "
                            f"{QUERIES_FILE} and {QRELS_DIR}/<split>{QRELS_SUFFIX})")
  return path


def _id_of(value: Any) -> Optional[str]:
  """A usable `_id` as a string (BEIR writes strings; an integer is its digits), else None."""
  if isinstance(value, bool):
    return None
  if isinstance(value, int):
    value = str(value)
  if not isinstance(value, str) or not value or any(c.isspace() for c in value):
    return None
  return value


def _text_field(obj: dict, name: str) -> Optional[str]:
  """A `title` / `text` field: a string, "" where absent or null, None where another type."""
  value = obj.get(name)
  if value is None:
    return ""
  return value if isinstance(value, str) else None


def _records(path: str, problems: Problems, fields: Sequence[str], *, progress: bool = False,
             desc: str = "") -> Iterator[tuple[int, str, tuple[str, ...]]]:
  """(line number, id, fields...) of each usable line of a JSONL file; the others counted in
  `problems` (module docstring) and skipped. Blank lines are nothing."""
  size = None if path.endswith(".gz") else os.path.getsize(path)  # bytes read, decompressed
  bar = tqdm(total=size, unit="B", unit_scale=True, desc=desc,
             disable=None if progress else True)
  with _open(path) as f, bar:
    for n, raw in enumerate(f, start=1):
      bar.update(len(raw))
      record = _record(path, n, raw, problems, fields)
      if record is not None:
        yield record


def _record(path: str, n: int, raw: bytes, problems: Problems,
            fields: Sequence[str]) -> Optional[tuple[int, str, tuple[str, ...]]]:
  try:
    line = raw.decode("utf-8")
  except UnicodeDecodeError as e:
    problems.add(NOT_UTF8, path, n, f"byte {e.start}")
    return None
  if n == 1:
    line = line.lstrip("\ufeff")
  if not line.strip():
    return None
  try:
    obj = json.loads(line)
  except json.JSONDecodeError as e:
    problems.add(NOT_JSON, path, n, e.msg)
    return None
  if not isinstance(obj, dict):
    problems.add(NOT_OBJECT, path, n)
    return None
  uid = _id_of(obj.get("_id"))
  if uid is None:
    problems.add(BAD_ID, path, n, f"_id {obj.get('_id')!r}"[:80])
    return None
  values = tuple(_text_field(obj, name) for name in fields)
  if any(v is None for v in values):
    problems.add(BAD_FIELD, path, n, f"_id {uid}")
    return None
  return n, uid, values  # type: ignore[return-value]


def _refuse_duplicates(path: str, ids: pa.Array, lines: np.ndarray,
                       order: np.ndarray) -> None:
  """A BeirFormatError naming the first id that two lines share (`order` sorts `ids`)."""
  if len(ids) < 2:
    return
  sorted_ids = ids.take(pa.array(order))
  same = pc.equal(sorted_ids.slice(1), sorted_ids.slice(0, len(ids) - 1))
  duplicates = np.flatnonzero(same.to_numpy(zero_copy_only=False))
  if duplicates.size:
    i = int(duplicates[0])
    first, second = sorted(int(lines[order[i]]) for i in (i, i + 1))
    raise BeirFormatError(
        f"{path}:{second}: duplicate _id {sorted_ids[i].as_py()!r} (first at line {first}; "
        f"{duplicates.size} duplicate ids in all): which text do the qrels mean? Make the "
        "ids unique")


# ------------------------------------------------------------------------------------------
# The corpus.
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Document:
  internal_id: int
  doc_id: str
  title: str
  text: str


@dataclasses.dataclass(frozen=True)
class Corpus:
  """The corpus's ids and where each document is, not its texts (module docstring).

  `ids[i]` is the dataset id of internal id i (sorted); `lines[j]` the line of the j-th
  usable line of the file and `internal[j]` its internal id."""
  path: str
  ids: pa.Array              # string, sorted: internal id -> dataset id
  lines: np.ndarray          # int64 [documents], file order
  internal: np.ndarray       # int64 [documents], file order
  problems: Problems

  def __len__(self) -> int:
    return len(self.ids)

  def doc_id(self, internal_id: int) -> str:
    return self.ids[internal_id].as_py()

  def doc_ids(self, internal_ids: Sequence[int]) -> list[str]:
    """The dataset ids of internal ids, in their order."""
    return self.ids.take(pa.array(internal_ids, type=pa.int64())).to_pylist()

  def named(self, run: Run) -> dict[str, list[tuple[str, float]]]:
    """A run of internal ids as (dataset doc id, score) lists, in their order."""
    return {q: list(zip(self.doc_ids(r.candidate_ids), r.scores)) for q, r in run.items()}

  def internal_ids(self, doc_ids: Sequence[str]) -> np.ndarray:
    """int64 [len(doc_ids)]: the internal id of each dataset id, -1 where the corpus has
    none (the ids are sorted, so an id's index among them is its internal id)."""
    found = pc.index_in(pa.array(doc_ids, type=pa.string()), value_set=self.ids)
    return found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)

  def contains(self, doc_ids: Sequence[str]) -> np.ndarray:
    """bool [len(doc_ids)]: which of the ids are documents of the corpus."""
    return pc.is_in(pa.array(doc_ids, type=pa.string()), value_set=self.ids).to_numpy(
        zero_copy_only=False)

  def documents(self, progress: bool = True) -> Iterator[Document]:
    """Every document, in file order, streamed from the file (a second pass)."""
    ignored = Problems()  # counted by read_corpus already
    j = 0
    for n, uid, (title, text) in _records(self.path, ignored, ("title", "text"),
                                          progress=progress, desc="corpus"):
      if j >= len(self.lines) or n != self.lines[j]:
        raise RuntimeError(f"{self.path}:{n}: the file changed since its ids were read")
      yield Document(int(self.internal[j]), uid, title, text)
      j += 1
    if j != len(self.lines):
      raise RuntimeError(f"{self.path}: the file changed since its ids were read")


def read_corpus(path: str, progress: bool = True) -> Corpus:
  """One pass over corpus.jsonl: the ids, sorted into internal ids; bad lines counted.

  Raises:
    BeirFormatError: a duplicate `_id`, or no usable document at all.
  """
  problems = Problems()
  chunks: list[pa.Array] = []
  lines: list[int] = []
  batch: list[str] = []
  for n, uid, _ in _records(path, problems, ("title", "text"), progress=progress,
                            desc="corpus ids"):
    batch.append(uid)
    lines.append(n)
    if len(batch) == 65_536:  # an Arrow chunk: a few bytes an id, not a Python str each
      chunks.append(pa.array(batch, type=pa.string()))
      batch = []
  chunks.append(pa.array(batch, type=pa.string()))
  ids = pa.concat_arrays(chunks)
  if not len(ids):
    raise BeirFormatError(f"{path}: no usable document ({_summary(problems)})")
  line_array = np.asarray(lines, dtype=np.int64)
  del lines
  order = pc.sort_indices(ids).to_numpy()  # code point order: trec_eval's strcmp
  _refuse_duplicates(path, ids, line_array, order)
  internal = np.empty(len(order), dtype=np.int64)
  internal[order] = np.arange(len(order), dtype=np.int64)
  return Corpus(path, ids.take(pa.array(order)), line_array, internal, problems)


def write_doc_ids(corpus: Corpus, path: str) -> None:
  """The mapping internal id -> dataset id (DOC_IDS_SCHEMA), one row a document."""
  table = pa.Table.from_arrays([pa.array(np.arange(len(corpus), dtype=np.int64)), corpus.ids],
                               schema=DOC_IDS_SCHEMA)
  tio.write_parquet(path, table)


def read_doc_ids(path: str) -> list[str]:
  """The dataset id of each internal id, as write_doc_ids stored them."""
  table = tio.open_parquet(path).read()
  ids = table.column("internal_id").to_numpy()
  if not np.array_equal(ids, np.arange(len(ids))):
    raise ValueError(f"{path}: internal ids are not 0..{len(ids) - 1} in order")
  return table.column("doc_id").to_pylist()


# ------------------------------------------------------------------------------------------
# Queries and qrels.
# ------------------------------------------------------------------------------------------


def read_queries(path: str) -> tuple[dict[str, str], Problems]:
  """{query id: text} of queries.jsonl, and what was wrong with it.

  Raises:
    BeirFormatError: a duplicate `_id`.
  """
  problems = Problems()
  queries: dict[str, str] = {}
  first_line: dict[str, int] = {}
  for n, uid, (text,) in _records(path, problems, ("text",)):
    if uid in queries:
      raise BeirFormatError(f"{path}:{n}: duplicate _id {uid!r} (first at line "
                            f"{first_line[uid]}): which text do the qrels mean? Make the ids "
                            "unique")
    if not text.strip():
      problems.add(EMPTY_QUERY, path, n, f"_id {uid}")
    queries[uid] = text
    first_line[uid] = n
  return queries, problems


Qrels = dict[str, dict[str, int]]


@dataclasses.dataclass(frozen=True)
class QrelsRows:
  """The judged pairs of one qrels file, one entry a line, in file order."""
  path: str
  query_ids: list[str]
  doc_ids: list[str]
  grades: list[int]
  lines: list[int]


def read_qrels(path: str) -> QrelsRows:
  """The judged pairs of one qrels file.

  Raises:
    BeirFormatError: no header line, a line of other than three tab-separated fields, a
      grade that is not an integer (the count of such lines and the first one named).
  """
  rows = QrelsRows(path, [], [], [], [])
  bad: list[str] = []
  with _open(path) as f:
    for n, raw in enumerate(f, start=1):
      line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
      if n == 1:
        line = line.lstrip("\ufeff")
      if not line.strip():
        continue
      fields = line.split("\t")
      if n == 1:
        if len(fields) == 3 and _grade(fields[2]) is not None:
          raise BeirFormatError(
              f"{path}:1: no header line (BEIR's qrels begin with "
              f"`{chr(9).join(QRELS_HEADER)}`); this line is a judged pair, which a BEIR "
              "reader would drop as the header: add the header")
        continue
      if len(fields) != 3:
        bad.append(f"{path}:{n}: {len(fields)} tab-separated fields, expected 3 "
                   f"(query-id, corpus-id, score)")
        continue
      query_id, doc_id, grade_text = (x.strip() for x in fields)
      grade = _grade(grade_text)
      if grade is None or not query_id or not doc_id:
        bad.append(f"{path}:{n}: grade {grade_text!r} is not an integer" if grade is None
                   else f"{path}:{n}: empty query or doc id")
        continue
      rows.query_ids.append(query_id)
      rows.doc_ids.append(doc_id)
      rows.grades.append(grade)
      rows.lines.append(n)
  if bad:
    raise BeirFormatError(f"{bad[0]} ({len(bad)} such lines): fix the qrels file")
  return rows


def _grade(text: str) -> Optional[int]:
  try:
    return int(text.strip())
  except ValueError:
    return None


def qrels_path(folder: str, split: str) -> str:
  return os.path.join(folder, QRELS_DIR, f"{split}{QRELS_SUFFIX}")


def splits(folder: str) -> list[str]:
  """The splits a BEIR folder has qrels for (`qrels/<split>.tsv`), sorted."""
  qrels = os.path.join(folder, QRELS_DIR)
  if not os.path.isdir(qrels):
    return []
  return sorted(name[:-len(QRELS_SUFFIX)] for name in os.listdir(qrels)
                if name.endswith(QRELS_SUFFIX))


# ------------------------------------------------------------------------------------------
# A dataset split.
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Split:
  """One split's judged queries: those of its qrels that queries.jsonl has."""
  name: str
  queries: dict[str, str]        # {query id: text}
  qrels: Qrels                   # {query id: {doc id: grade}}, the same query ids
  problems: Problems

  @property
  def pairs(self) -> int:
    return sum(len(judged) for judged in self.qrels.values())

  def only(self, query_ids: Sequence[str], name: str) -> "Split":
    """The part of this split that `query_ids` name (a part held out of fine-tuning,
    eval.beir_finetune), called `name`.

    Raises:
      ValueError: an id that is not a judged query of this split (named, with the count).
    """
    missing = [q for q in query_ids if q not in self.qrels]
    if missing:
      raise ValueError(f"{name}: {len(missing)} of its {len(query_ids)} queries are not "
                       f"judged in split {self.name!r} (first: {missing[0]!r})")
    wanted = sorted(set(query_ids))
    return Split(name, {q: self.queries[q] for q in wanted},
                 {q: self.qrels[q] for q in wanted}, self.problems)


@dataclasses.dataclass(frozen=True)
class BeirData:
  folder: str
  corpus: Corpus
  queries: dict[str, str]        # every query of queries.jsonl
  problems: Problems             # corpus and queries files

  @property
  def name(self) -> str:
    return os.path.basename(os.path.normpath(self.folder))

  def split(self, name: str) -> Split:
    """The split's qrels, checked against the corpus and the queries (module docstring)."""
    path = qrels_path(self.folder, name)
    if not os.path.exists(path):
      raise FileNotFoundError(f"{path}: no qrels for split {name!r} (this folder has: "
                              f"{', '.join(splits(self.folder)) or 'none'})")
    rows = read_qrels(path)
    problems = Problems()
    in_corpus = (self.corpus.contains(rows.doc_ids) if rows.doc_ids
                 else np.zeros(0, dtype=bool))
    qrels: Qrels = {}
    for query_id, doc_id, grade, n, known in zip(rows.query_ids, rows.doc_ids, rows.grades,
                                                 rows.lines, in_corpus):
      if query_id not in self.queries:
        problems.add(UNKNOWN_QUERY, path, n, query_id)
        continue
      if not known:
        problems.add(UNKNOWN_DOC, path, n, f"{query_id} {doc_id}")
      judged = qrels.setdefault(query_id, {})
      if doc_id in judged:
        problems.add(JUDGED_TWICE, path, n, f"{query_id} {doc_id}")
      judged[doc_id] = grade
    return Split(name, {q: self.queries[q] for q in qrels}, qrels, problems)


def read(folder: str, progress: bool = True) -> BeirData:
  """The corpus (ids only, module docstring) and queries of a BEIR folder; splits on demand
  (`BeirData.split`)."""
  corpus = read_corpus(_find(folder, CORPUS_FILE), progress=progress)
  queries, problems = read_queries(_find(folder, QUERIES_FILE))
  if not queries:
    raise BeirFormatError(f"{_find(folder, QUERIES_FILE)}: no usable query "
                          f"({_summary(problems)})")
  return BeirData(folder, corpus, queries, Problems().merge(corpus.problems).merge(problems))


def _summary(problems: Problems) -> str:
  if not problems.counts:
    return "the file is empty"
  kind, n = max(problems.counts.items(), key=lambda kv: kv[1])
  return f"{n} lines {kind}, first {problems.where[kind][0]}"


def summary(data: BeirData, split: Split) -> Mapping[str, Any]:
  """What was read, for an output's record: documents, queries, judged pairs, problems."""
  return {"dataset": data.name, "split": split.name, "documents": len(data.corpus),
          "queries": len(split.queries), "judged_pairs": split.pairs,
          "relevant_pairs": sum(1 for j in split.qrels.values() for g in j.values() if g > 0),
          "problems": Problems().merge(data.problems).merge(split.problems).as_dict()}
