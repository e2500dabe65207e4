"""Documents as JSON lines: what `twotower bundle --docs FILE` bundles and `twotower bundle
update --add FILE` adds, one object per line.

    {"id": 17, "title": "Galt", "text": "The tower of Galt was built in 1409. ...",
     "section": "History", "page_id": 12, "wiki": "enwiki", "year": 1409, "topic": "towers"}

`id` (an integer, the id hits return) and `text` are required; `title` defaults to "";
`sentence` is a ReQA candidate's sentence (a bundle of ReQA candidates lays a document out for
its towers and BM25 with its `doc_text`, as its candidates were); `section`, `page_id`,
`source`, `wiki` and `language` fill the bundle's built-in fields (contracts.bundle_metadata),
and every other key whose value is a string, number or boolean becomes a field of its own.

Each document then has one layout for the document tower (title, text), one for Lucene
(`contents`), one row of the passage store, and its fields: the same functions for a bundle
built from documents and for documents added to one, so that an updated bundle holds what a
bundle built from scratch over the same documents holds.

`embed` runs the bundle's own SavedModel (its `doc_encoder` signature) in this process: an
update embeds only the documents it adds, with the model whose query tower the bundle serves.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Iterator, Mapping, Optional, Sequence

import numpy as np

from twotower.core import contracts
from twotower.core import tower_text as texts
from twotower.core.contracts import bundle_metadata
from twotower.deploy.serving import store as store_lib

logger = logging.getLogger(__name__)

#: The document kinds of a bundle (its manifest's documents.kind).
CANDIDATES, PASSAGES, DOCUMENTS = "candidates", "passages", "documents"
#: Keys of a document line that are not metadata fields.
RESERVED = ("id", "text", "sentence")
#: Documents embedded per doc-tower call (the embedding job's batch).
EMBED_BATCH = 256


@dataclasses.dataclass(frozen=True)
class Document:
  """One document of a JSONL file: its store row and its metadata fields."""
  row: store_lib.Document
  fields: Mapping[str, Any]

  @property
  def id(self) -> int:
    return self.row.id


def tower_inputs(document: store_lib.Document, kind: str, doc_text: str) -> tuple[str, str]:
  """(title, text) the document tower reads: a candidate's `doc_text` layout of its sentence
  and passage (pipelines.embed's), a passage's or document's title and text."""
  if kind == CANDIDATES:
    return document.title, texts.candidate_doc_text(document.sentence, document.text, doc_text)
  return document.title, document.text.strip()


def lucene_contents(document: store_lib.Document, kind: str, doc_text: str) -> str:
  """The Lucene `contents` of a document: a candidate as `twotower bm25` indexes it, a
  passage's or document's title and text."""
  if kind == CANDIDATES:
    return texts.candidate_doc_text(document.sentence, document.text, doc_text)
  return f"{document.title} {document.text}".strip()


def read_jsonl(path: str, kind: str, doc_text: str,
               writer: Optional[bundle_metadata.MetadataWriter] = None,
               strict: bool = True) -> Iterator[Document]:
  """The documents of a JSONL file, checked line by line.

  `writer` checks each document's fields (a closed writer: the fields of the bundle an update
  adds to; its types then refuse a value of another type). `strict`: a bad line is a
  ValueError naming path:line (an update writes nothing then); otherwise it is counted,
  skipped and logged once (a build from a corpus).
  """
  writer = bundle_metadata.MetadataWriter() if writer is None else writer
  skipped, first = 0, ""
  # surrogateescape: a bad byte reaches the check below, which names the line
  with open(path, encoding="utf-8", errors="surrogateescape") as lines:
    for n, line in enumerate(lines, start=1):
      if not line.strip():
        continue
      try:
        line.encode("utf-8")
        yield _document(json.loads(line), f"{path}:{n}", kind, doc_text, writer)
      except UnicodeEncodeError:
        error = f"{path}:{n}: not UTF-8"
      except json.JSONDecodeError as e:
        error = f"{path}:{n}: not JSON ({e.msg})"
      except ValueError as e:
        error = str(e)
      else:
        continue
      if strict:
        raise ValueError(error)
      skipped, first = skipped + 1, first or error
  if skipped:
    logger.warning("%s: %d bad document line(s) skipped (first: %s)", path, skipped, first)


def _document(value: Any, where: str, kind: str, doc_text: str,
              writer: bundle_metadata.MetadataWriter) -> Document:
  if not isinstance(value, dict):
    raise ValueError(f"{where}: a document is a JSON object, got {type(value).__name__}")
  doc_id = value.get("id")
  if isinstance(doc_id, str) and doc_id.strip().lstrip("-").isdigit():
    doc_id = int(doc_id)
  if isinstance(doc_id, bool) or not isinstance(doc_id, int) or not -2**63 <= doc_id < 2**63:
    raise ValueError(f"{where}: 'id' must be an integer document id, got "
                     f"{json.dumps(doc_id)[:40]}")
  for key in ("text", "title", "sentence", "section", "source"):
    if value.get(key) is not None and not isinstance(value[key], str):
      raise ValueError(f"{where}: field {key!r} must be a string, got "
                       f"{type(value[key]).__name__}")
  page = value.get("page_id")
  if page is not None and (isinstance(page, bool) or not isinstance(page, int)):
    raise ValueError(f"{where}: field 'page_id' is int, got {json.dumps(page)[:40]}")
  row = store_lib.Document(doc_id, value.get("title") or "", value.get("text") or "",
                           value.get("sentence") or "", page, value.get("source") or "",
                           value.get("section") or "")
  if not tower_inputs(row, kind, doc_text)[1]:
    raise ValueError(f"{where}: document {doc_id} has no text for the document tower")
  if kind == CANDIDATES and doc_text != "sentence" and not row.sentence:
    logger.debug("%s: a candidate without a sentence", where)
  fields = {k: v for k, v in value.items() if k not in RESERVED}
  fields.setdefault("title", row.title)
  return Document(row, writer.check(fields, where, declare=not writer.closed))


def embed(saved_model: str, documents: Sequence[store_lib.Document], kind: str,
          doc_text: str, batch: int = EMBED_BATCH) -> np.ndarray:
  """float32[len(documents), d]: the SavedModel's document tower over each document's
  `tower_inputs`, `batch` at a time (as the embedding job calls it)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from twotower.core import saved_model as saved_model_lib  # pylint: disable=import-outside-toplevel
  if not documents:
    return np.zeros((0, saved_model_lib.embedding_dim(saved_model, contracts.DOC_SIGNATURE)),
                    np.float32)
  signature = saved_model_lib.load_signature(saved_model, contracts.DOC_SIGNATURE)
  parts = []
  for start in range(0, len(documents), batch):
    titles, bodies = zip(*(tower_inputs(d, kind, doc_text)
                           for d in documents[start:start + batch]))
    out = signature(title=tf.constant(titles, dtype=tf.string),
                    text=tf.constant(bodies, dtype=tf.string))
    parts.append(out[contracts.EMBEDDING_OUTPUT].numpy())
  return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)
