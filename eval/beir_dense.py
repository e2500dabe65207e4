"""A trained dense retriever (a twotower SavedModel) on a BEIR corpus, zero-shot.

    corpus.jsonl --(eval.beir, streamed)--> WORK/candidates.parquet   (CANDIDATE_SCHEMA rows:
                                            candidate_id = internal id, title, sentence =
                                            the document's text, passage "")
    queries      ----------------------->  WORK/questions-beir.parquet (QUESTION_SCHEMA)
      --pipelines.embed (Beam RunInference)-->  document and query embeddings
      --eval.index (FAISS flat inner product: exact)-->  WORK/flat.faiss
      --eval.search-->  WORK/run.parquet (top `hits`), read back with the dataset's ids

The embedding, index and search are the project's stages as they are (eval.dense does the
same over a ReQA folder); a BEIR document is written as a ReQA candidate with `doc_text`
"sentence" so that the document tower is called as `doc_encoder(title, text)` on the
document's own title and text, the towers' `[CLS] title [SEP] text [SEP]`. Only the
internal ids cross into FAISS (eval.beir). A document whose text is empty is skipped by the
embedding job (counted in its stats.json, `rows_skipped_empty`) and cannot be retrieved by
this system.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Callable, Mapping, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from twotower.core import contracts
from twotower.core import outputs
from twotower.core.contracts import Run
from twotower.eval import beir
from twotower.eval import beir_bm25
from twotower.eval import index as index_stage
from twotower.eval import runs as runs_lib
from twotower.eval import search as search_stage

logger = logging.getLogger(__name__)

#: The ReQA layout a BEIR document is written in, and the questions file's split name.
SOURCE, QUESTIONS_SPLIT = "beir", "beir"
_ROWS_PER_GROUP = 65_536


@dataclasses.dataclass(frozen=True)
class DenseRun:
  run: Run                                 # query id -> Ranked internal ids
  stats: Mapping[str, Mapping[str, int]]   # the embedding jobs' counters, per kind
  seconds: float


def write_candidates(corpus: beir.Corpus, path: str,
                     on_document: Optional[Callable[[beir.Document], None]] = None) -> int:
  """The corpus as ReQA candidates (module docstring), streamed in row groups; returns the
  number of rows. `on_document` sees each document as it is written (one corpus pass for a
  caller that needs more of it: eval.beir_finetune)."""
  n, batch = 0, []
  with pq.ParquetWriter(path, contracts.CANDIDATE_SCHEMA) as writer:
    for doc in corpus.documents():
      if on_document is not None:
        on_document(doc)
      batch.append({"candidate_id": doc.internal_id, "sentence": doc.text, "passage": "",
                    "title": doc.title, "source": SOURCE, "section": ""})
      if len(batch) == _ROWS_PER_GROUP:
        writer.write_table(pa.Table.from_pylist(batch, schema=contracts.CANDIDATE_SCHEMA))
        n, batch = n + len(batch), []
    if batch:
      writer.write_table(pa.Table.from_pylist(batch, schema=contracts.CANDIDATE_SCHEMA))
      n += len(batch)
  return n


def write_questions(queries: Mapping[str, str], path: str) -> None:
  rows = [{"question_id": q, "question": text, "gold_candidate_ids": []}
          for q, text in sorted(queries.items())]
  pq.write_table(pa.Table.from_pylist(rows, schema=contracts.QUESTION_SCHEMA), path)


def run_dense(corpus: beir.Corpus, queries: Mapping[str, str], model: str, work: str, *,
              hits: int = beir_bm25.BEIR_HITS, batch_size: int = 256,
              beam_args: Sequence[str] = (), keep: bool = False) -> DenseRun:
  """Embeds the corpus and `queries` with `model` (a SavedModel) and searches a flat index of
  the documents (internal ids: beir.Corpus.named names them). `keep`: leave the embeddings and
  the index in `work` (they are removed otherwise; the candidates file stays only with it)."""
  from twotower.pipelines import embed  # pylint: disable=import-outside-toplevel
  started = time.perf_counter()
  os.makedirs(work, exist_ok=True)
  candidates = contracts.candidates_path(work)
  questions = contracts.questions_path(work, QUESTIONS_SPLIT)
  write_candidates(corpus, candidates)
  write_questions(queries, questions)
  doc_emb = contracts.dense_candidates_dir(work)
  query_emb = contracts.dense_questions_dir(work, QUESTIONS_SPLIT)
  stats = {}
  for kind, path, out in (("candidates", candidates, doc_emb),
                          ("questions", questions, query_emb)):
    result = embed.run(embed.EmbedConfig(model=model, out=out, kind=kind, path=path,
                                         doc_text="sentence", batch_size=batch_size,
                                         beam_args=tuple(beam_args)))
    stats[kind] = dict(result.stats)
  index_path = contracts.dense_index_path(work)
  index_stage.run(index_stage.IndexConfig(embeddings=doc_emb, out=index_path))
  run_file = contracts.dense_run_path(work)
  search_stage.run(search_stage.SearchConfig(index=index_path, queries=query_emb,
                                             out=run_file, k=hits))
  run = runs_lib.read_run(run_file)
  if not keep:
    for path in (index_path, doc_emb, query_emb):
      outputs.remove(path)  # the files their manifests list
    for path in (candidates, questions):
      outputs.discard(path)
  return DenseRun(run, stats, time.perf_counter() - started)
