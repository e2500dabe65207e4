"""`twotower query`: search a retriever bundle from the shell (one question, or a JSONL file
of queries); the table and the flags are in twotower.commands.query.

`run(QueryConfig) -> QueryResult` loads the bundle, searches (a file's queries in batches of
`BATCH`, each batch one query-tower call) and, for a file, writes one JSON line per query:
`{"id", "query", "mode", "hits": [{"rank", "id", "score", "title", "text", "sentence",
"page_id"}, ...]}`. `--filter JSON` keeps every search to the documents it matches
(deploy.serving.doc_filter); a query line's own "filter" object replaces it for that line.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Iterable, Iterator, Optional, TextIO

from twotower.core import file_outputs
from twotower.core import files as tio
from twotower.core import outputs
from twotower.deploy.serving import retriever as retriever_lib
from twotower.deploy.serving.doc_filter import DocFilter
from twotower.deploy.serving.retriever import DEFAULT_VERIFY, Hit, Retriever

BATCH = 256  # queries per retriever call for a file


@dataclasses.dataclass(frozen=True)
class QueryConfig:
  bundle: str
  question: Optional[str] = None   # one question, or
  jsonl: Optional[str] = None      # a file of queries, one per line ('-': standard input)
  out: str = "-"                   # where a file's hit lists go ('-': standard output)
  k: int = 10
  mode: str = "dense"
  nprobe: Optional[int] = None
  ef_search: Optional[int] = None
  verify: str = DEFAULT_VERIFY     # bundle check at load (the one default: serve's too)
  overwrite: bool = False          # replace an --out of other settings (file_outputs.owned_files)
  filter: Optional[str] = None     # a filter as JSON text (deploy.serving.doc_filter)

  def __post_init__(self):
    if (self.question is None) == (self.jsonl is None):
      raise ValueError("give a question or --jsonl FILE (not both)")
    if self.question is not None and not self.question.strip():
      raise ValueError("the question is empty")
    if self.k < 1:
      raise ValueError(f"k must be >= 1, got {self.k}")
    if self.filter is not None:
      DocFilter.parse(self.filter)  # its shape; the bundle checks its fields

  @property
  def doc_filter(self) -> Optional[DocFilter]:
    return None if self.filter is None else DocFilter.parse(self.filter)


@dataclasses.dataclass(frozen=True)
class QueryResult:
  hits: Optional[list[Hit]]        # the question's hits (None for a file)
  queries: int                     # queries searched
  out: Optional[str]               # the JSONL written (None for a question)


def read_queries(lines: Iterable[str], name: str
                 ) -> Iterator[tuple[str, str, Optional[DocFilter]]]:
  """(id, query, filter) of each non-blank line: a JSON object with "query" (or "question"),
  an optional "id" (or "question_id") and an optional "filter", a JSON string, or plain text;
  the id defaults to the line number, the filter to None (the command's own).

  Raises:
    ValueError: a line that starts like JSON but is not, has no query, or a bad filter
      (names file:line).
  """
  n = 0
  lines = iter(lines)
  while True:
    n += 1
    try:
      line = next(lines)
    except StopIteration:
      return
    except UnicodeDecodeError as e:  # (a stream opened strict: standard input)
      raise ValueError(f"{name}: not UTF-8 at or after line {n} ({e.reason})") from None
    try:
      line.encode("utf-8")  # a file opened with errors="surrogateescape" marks bad bytes
    except UnicodeEncodeError:
      raise ValueError(f"{name}:{n}: not UTF-8; queries are UTF-8 text, one per line") from None
    line = line.strip()
    if not line:
      continue
    query, qid, filt = line, str(n), None
    if line[0] in "{\"":
      try:
        obj = json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f"{name}:{n}: not JSON ({e.msg})") from e
      if isinstance(obj, dict):
        query = obj.get("query", obj.get("question"))
        qid = str(obj.get("id", obj.get("question_id", n)))
        if obj.get("filter") is not None:
          try:
            filt = DocFilter.from_json(obj["filter"])
          except ValueError as e:
            raise ValueError(f"{name}:{n}: {e}") from None
      else:
        query = obj
    if not isinstance(query, str) or not query.strip():
      raise ValueError(f"{name}:{n}: no query (a JSON object needs a non-empty \"query\")")
    yield qid, query, filt


def search_file(retriever: Retriever, config: QueryConfig, source: TextIO, out: TextIO) -> int:
  """Searches every query of `source`, writing a JSON line each to `out`; returns the count.
  Lines that share a filter are searched together (one call per filter and batch)."""
  n = 0
  default = config.doc_filter
  name = config.jsonl or "-"
  for batch in tio.batched(read_queries(source, name), BATCH):
    requests: dict[Optional[DocFilter], list[int]] = {}
    for i, (_, _, filt) in enumerate(batch):
      requests.setdefault(filt or default, []).append(i)
    hits_of: dict[int, list[Hit]] = {}
    for filt, rows in requests.items():
      try:
        found = retriever.search([batch[i][1] for i in rows], k=config.k, mode=config.mode,
                                 nprobe=config.nprobe, ef_search=config.ef_search,
                                 filter=filt)
      except ValueError as e:  # a filter this bundle cannot honour
        raise ValueError(f"{name}: line with query id {batch[rows[0]][0]}: {e}") from None
      hits_of.update(zip(rows, found))
    for i, (qid, query, filt) in enumerate(batch):
      line = {"id": qid, "query": query, "mode": config.mode}
      if filt or default:
        line["filter"] = (filt or default).to_json()
      line["hits"] = [h.to_dict() for h in hits_of[i]]
      out.write(json.dumps(line, ensure_ascii=False) + "\n")
      n += 1
  return n


def _output_owner(config: QueryConfig) -> dict:
  """How --out is judged (file_outputs.owned_files): never the queries it reads, nor the bundle."""
  return {"main": config.out, "stage": "query", "overwrite": config.overwrite,
          "settings": outputs.settings_of(config, skip=("question", "verify")),
          "inputs": [config.bundle, *([config.jsonl] if config.jsonl != "-" else [])]}


def run(config: QueryConfig) -> QueryResult:
  to_file = config.jsonl is not None and config.out != "-"
  if to_file:  # before the bundle loads: a refused --out costs nothing
    file_outputs.check_file(**_output_owner(config))
  retriever_lib.warn_if_unverified(config.verify)
  retriever = Retriever.load(config.bundle, verify=config.verify)
  try:
    if config.question is not None:
      hits = retriever.search(config.question, k=config.k, mode=config.mode,
                              nprobe=config.nprobe, ef_search=config.ef_search,
                              filter=config.doc_filter)
      return QueryResult(hits, 1, None)
    # surrogateescape: a bad byte reaches read_queries, which names the file and line
    source = sys.stdin if config.jsonl == "-" else open(  # noqa: SIM115
        config.jsonl, encoding="utf-8", errors="surrogateescape")
    try:
      if not to_file:
        n = search_file(retriever, config, source, sys.stdout)
      else:
        # Written beside --out and renamed over it at the end: a bad line half-way leaves
        # no partial output (and the file there before, if any, as it was).
        with file_outputs.owned_files(**_output_owner(config)) as written, \
            file_outputs.atomic_text(config.out) as out:
          n = search_file(retriever, config, source, out)
          written.append(config.out)
    finally:
      if source is not sys.stdin:
        source.close()
    return QueryResult(None, n, config.out)
  finally:
    retriever.close()


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("query"))
