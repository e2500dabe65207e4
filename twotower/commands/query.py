"""`twotower query BUNDLE "question"`: search a retriever bundle from the shell.

    twotower query runs/demo/bundle "who founded the city?" --mode hybrid --k 5
    twotower query runs/demo/bundle --jsonl questions.jsonl --out hits.jsonl --k 100
    twotower query runs/demo/bundle "who founded the city?" \
        --filter '{"fields": {"wiki": "enwiki"}, "section_prefix": "History"}'

One question prints a table of its top hits (rank, score, title › section, the passage cut to the
terminal's width); `--jsonl FILE` reads one query per line (a JSON object with "query" and
an optional "id", a JSON string, or plain text) and writes one JSON line per query with its
hit list (deploy.serving.query).
"""

from __future__ import annotations

import argparse
import shutil
from typing import Iterable

from twotower.commands import dataclass_flags, flags
from twotower.deploy.serving import query
from twotower.deploy.serving.retriever import MODES, VERIFY

#: Each flag's help; name, type and default come from QueryConfig (commands.dataclass_flags).
HELP = {
    "bundle": "a retriever bundle directory (`twotower bundle --out`)",
    "question": "the question to search for",
    "jsonl": "a file of queries, one per line ('-': standard input)",
    "out": "with --jsonl: where the hit lists go",
    "k": "hits per query",
    "mode": "dense, bm25 or hybrid",
    "nprobe": "IVF lists visited (IVF bundles)",
    "ef_search": "HNSW beam width (HNSW bundles)",
    "verify": "how the bundle's files are checked at load: sha256 (contents), size "
              "(cheaper, blind to a same-size file of another bundle) or none",
    "filter": "only documents that match, as JSON: {\"fields\": {NAME: VALUE or [VALUES]}, "
              "\"section_prefix\": \"History\", \"ids\": [..], \"exclude_ids\": [..]} "
              "(a --jsonl line's own \"filter\" replaces it)",
}


def build_parser() -> argparse.ArgumentParser:
  p = flags.parser("query", __doc__)
  dataclass_flags.add_fields(p, query.QueryConfig, HELP, exclude=("overwrite",),
                             positional=("bundle", "question"),
                             kwargs={"question": {"nargs": "?"}, "mode": {"choices": MODES},
                                     "verify": {"choices": VERIFY}})
  flags.add_overwrite(p)
  return p


def parse(argv: Iterable[str] | None) -> query.QueryConfig:
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  if (args.question is None) == (args.jsonl is None):
    p.error("give a question or --jsonl FILE (not both)")
  if args.question is not None and not args.question.strip():
    p.error("the question is empty")
  if args.k < 1:
    p.error(f"--k must be >= 1, got {args.k}")
  try:
    return dataclass_flags.config_from(args, query.QueryConfig)
  except ValueError as e:  # a --filter of the wrong shape
    p.error(f"--filter: {e}")


def table(question: str, hits: list, mode: str, width: int) -> str:
  """The top hits, two lines each: rank, score, title; then the passage cut to `width`."""
  lines = [f"{mode} top {len(hits)} for: {question}"]
  if not hits:
    lines.append("  (no hits)")
  for h in hits:
    where = f"{h.title} › {h.section}" if h.section else h.title  # as the search page shows it
    lines.append(f"{h.rank:>3}  {h.score:8.4f}  {where}"[:width])
    # A ReQA candidate's sentence first when it is not simply the passage.
    text = h.text if not h.sentence or h.sentence == h.text else f"{h.sentence} | {h.text}"
    text, room = " ".join(text.split()), max(20, width - 5)
    lines.append("     " + (text if len(text) <= room else text[:room - 1] + "…"))
  return "\n".join(lines)


def main(argv: Iterable[str] | None = None) -> None:
  config = parse(argv)
  result = query.run(config)
  if result.hits is not None:
    print(table(config.question, result.hits, config.mode,
                shutil.get_terminal_size((100, 20)).columns))
  elif config.out != "-":
    print(f"{result.queries} queries, {config.mode} top {config.k} -> {config.out}")
