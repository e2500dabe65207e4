"""The paper's data tables, measured with the project's tokenizer and vocabulary:

  Table 1 (pre-training tasks): per task, word pieces in all pairs (#tokens), #pairs, mean
          query and document length in word pieces;
  Table 2 (ReQA): #query, #candidate, #tuples (question, gold (sentence, passage)) and mean
          query and document length.

Lengths are word pieces of the model's own tokenizer (model.tokenizer.Tokenizer, the
vocabulary the towers use), without [CLS]/[SEP] and before any truncation. A pair's document
is its title and text (what the document tower reads, `[CLS] title [SEP] text [SEP]`); a
ReQA candidate's is its title and `texts.candidate_doc_text` of the layout.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterable, Optional, Sequence

from twotower.core import contracts
from twotower.core import files as tio
from twotower.core import tower_text as texts
from twotower.core.contracts import codecs


@dataclasses.dataclass(frozen=True)
class Lengths:
  count: int = 0
  tokens: int = 0

  @property
  def mean(self) -> float:
    return self.tokens / self.count if self.count else 0.0


def word_piece_lengths(vocab_path: str, items: Iterable[str]) -> Lengths:
  """Word pieces of each text, summed over `items`."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from twotower.model.tokenizer import Tokenizer  # pylint: disable=import-outside-toplevel
  tokenizer = Tokenizer.from_file(vocab_path, 8, 8)
  count = tokens = 0
  for batch in tio.batched(items, 1024):
    pieces = tokenizer.word_pieces(tf.constant(batch))
    count += len(batch)
    tokens += int(tf.reduce_sum(pieces.row_lengths()))
  return Lengths(count, tokens)


#: Table 1's name of the pairs whose query page is one of the QA file's articles.
QA_ARTICLES = "qa-articles"


def source_of(page_id: int, inputs: Sequence[str] = ()) -> str:
  """Where a page comes from: for extracted text, the file name of its glob in `inputs` (the
  pair run's `--dump` comma list) or "input<k>" (k: the glob's position) without it;
  QA_ARTICLES for the QA file's articles written as a dump (pipelines.reqa.squad_dump's id
  range); "mediawiki" for the other dumps' pages."""
  from twotower.pipelines.wiki import inputs as inputs_lib  # pylint: disable=import-outside-toplevel
  from twotower.pipelines.reqa import squad_dump  # pylint: disable=import-outside-toplevel
  index = inputs_lib.input_of(page_id)
  if index is not None:
    return os.path.basename(inputs[index]) if index < len(inputs) else f"input{index}"
  return QA_ARTICLES if page_id >= squad_dump.SQUAD_PAGE_ID_BASE else "mediawiki"


def table1(pairs_dir: str, vocab_path: str, splits: Sequence[str] = contracts.PAIR_SPLITS,
           inputs: Sequence[str] = ()) -> list[dict]:
  """One row per pre-training task: pairs, word pieces, mean query / document length, and
  the pairs per input of the pair pipeline (`by_input`, by the query page's id and `inputs`,
  the pair run's `--dump` list: see `source_of`). The paper's three tasks always; crop
  (Contriever's) when the run wrote it."""
  rows = []
  written = [t for t in contracts.PAIR_TASKS if t not in contracts.PRETRAIN_TASKS
             and any(tio.match_files(contracts.pairs_pattern(pairs_dir, t, split), missing_ok=True)
                     for split in contracts.PAIR_SPLITS)]
  for task in contracts.PRETRAIN_TASKS + tuple(written):
    pairs = [p for split in splits
             for p in codecs.read_pairs(contracts.pairs_pattern(pairs_dir, task, split))]
    queries = word_piece_lengths(vocab_path, (p.query for p in pairs))
    docs = word_piece_lengths(vocab_path, (f"{p.doc_title} {p.doc_text}" for p in pairs))
    by_input: dict[str, int] = {}
    for p in pairs:
      name = source_of(p.query_page_id, inputs)
      by_input[name] = by_input.get(name, 0) + 1
    rows.append({"task": task, "pairs": len(pairs), "tokens": queries.tokens + docs.tokens,
                 "query_length": round(queries.mean, 2), "doc_length": round(docs.mean, 2),
                 "by_input": dict(sorted(by_input.items()))})
  return rows


def table2(reqa_dir: str, vocab_path: str, doc_text: str = texts.DEFAULT_DOC_TEXT) -> dict:
  """One row for a ReQA directory (its `all` split)."""
  questions = codecs.read_questions(reqa_dir, contracts.ALL_QUESTIONS)
  candidates = codecs.read_candidates(reqa_dir, ["title", "sentence", "passage"])
  query = word_piece_lengths(vocab_path, (q.question for q in questions))
  doc = word_piece_lengths(vocab_path, (
      f"{c['title']} {texts.candidate_doc_text(c['sentence'], c['passage'], doc_text)}"
      for c in candidates))
  return {"queries": len(questions), "candidates": len(candidates),
          "tuples": sum(len(q.gold_candidate_ids) for q in questions),
          "query_length": round(query.mean, 2), "doc_length": round(doc.mean, 2)}


def _composition(rows: Sequence[dict], title: str) -> list[str]:
  """Pairs per task from each input, and each input's share of the task's pairs."""
  inputs = sorted({name for r in rows for name in r.get("by_input", {})})
  lines = ["", title, "", "| task | " + " | ".join(inputs) + " |",
           "|---|" + "---:|" * len(inputs)]
  for r in rows:
    counts = [r["by_input"].get(name, 0) for name in inputs]
    cells = [f"{n:,} ({100 * n / r['pairs']:.1f} %)" if r["pairs"] else "0" for n in counts]
    lines.append(f"| {r['task'].upper()} | " + " | ".join(cells) + " |")
  return lines


def markdown(table1_rows: Sequence[dict], table2_rows: Sequence[tuple[str, dict]],
             control: Optional[Sequence[dict]] = None) -> str:
  """Both tables in the paper's columns; the pre-training text's composition by input, and
  that of the control row's text (`control`: Table 1 rows of its pairs) when there is one."""
  lines = ["### Table 1: pre-training pairs (word pieces of the grid's vocabulary)", "",
           "| task | #tokens | #pairs | query length | document length |",
           "|---|---:|---:|---:|---:|"]
  lines += [f"| {r['task'].upper()} | {r['tokens']:,} | {r['pairs']:,} | "
            f"{r['query_length']:.2f} | {r['doc_length']:.2f} |" for r in table1_rows]
  legend = (f"by the query's page; `mediawiki`: the dumps, extracted text by its file name "
            f"(`input<k>`: the k-th glob of the pairs' `--dump`, when unnamed), "
            f"`{QA_ARTICLES}`: the QA file's articles")
  inputs = {name for r in table1_rows for name in r.get("by_input", {})}
  if len(inputs) > 1 or control:  # pre-trained on several inputs (a dump and extracted text)
    lines += _composition(table1_rows, f"Pairs per input ({legend}):")
  if control:
    lines += _composition(control, "The control row's pre-training text (the grid's, with the "
                          "QA file's articles in or out, whichever the grid's is not; the same "
                          "settings), pairs per input:")
  lines += ["", "### Table 2: ReQA (word pieces of the grid's vocabulary)", "",
            "| dataset | #query | #candidate | #tuples | query length | document length |",
            "|---|---:|---:|---:|---:|---:|"]
  lines += [f"| {name} | {r['queries']:,} | {r['candidates']:,} | {r['tuples']:,} | "
            f"{r['query_length']:.2f} | {r['doc_length']:.2f} |" for name, r in table2_rows]
  return "\n".join(lines) + "\n"
