"""The passage store of a retriever bundle: document id -> title, text, sentence, page id,
section.

One SQLite file (`contracts.BUNDLE_STORE_FILE`), one row per document, keyed by the id that the
FAISS index and the Lucene index return. A query reads only the rows of its hits
(`SELECT ... WHERE id IN (...)`), so the corpus is never loaded into memory: SQLite keeps a
small page cache and the operating system the rest. SQLite ships with Python, reads the file
in place, and serves concurrent readers.

    store = PassageStore.open("bundle/store.sqlite")
    store.get([3, 17])   # {3: Document(...), 17: Document(...)}
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import threading
from typing import Iterable, Mapping, Optional, Sequence

_SCHEMA = ("CREATE TABLE documents (id INTEGER PRIMARY KEY, title TEXT NOT NULL, "
           "text TEXT NOT NULL, sentence TEXT NOT NULL, page_id INTEGER, source TEXT NOT NULL, "
           "section TEXT NOT NULL DEFAULT '')")
_COLUMNS = "id, title, text, sentence, page_id, source, section"
#: A store written before the section column: its rows read with section "".
_COLUMNS_WITHOUT_SECTION = "id, title, text, sentence, page_id, source, ''"
#: SQLite's default limit of host parameters per statement is 999 on old builds.
_MAX_PARAMS = 900


@dataclasses.dataclass(frozen=True)
class Document:
  """What a hit shows: `text` is the passage, `sentence` the candidate sentence of a ReQA
  (sentence, passage) candidate ('' for a passage), `page_id` the Wikipedia page when known,
  `section` its section path ("History › Early years"; "" for a lead or when unknown)."""
  id: int
  title: str
  text: str
  sentence: str = ""
  page_id: Optional[int] = None
  source: str = ""
  section: str = ""


def write_store(path: str, documents: Iterable[Document], batch: int = 10_000) -> int:
  """Writes a new store at `path` (which must not exist); returns the documents written.

  Raises:
    ValueError: a document id repeats (names the id).
  """
  if os.path.exists(path):
    raise FileExistsError(f"{path}: exists; a store is written once")
  connection = sqlite3.connect(path)
  try:
    connection.execute(_SCHEMA)
    rows, n = [], 0
    for d in documents:
      rows.append((int(d.id), d.title or "", d.text or "", d.sentence or "", d.page_id,
                   d.source or "", d.section or ""))
      if len(rows) == batch:
        n += _insert(connection, rows, path)
        rows = []
    n += _insert(connection, rows, path)
    connection.commit()
  finally:
    connection.close()
  return n


def append_store(path: str, documents: Iterable[Document], batch: int = 10_000) -> int:
  """Adds documents to an existing store (a bundle update's copy); returns how many.

  Raises:
    ValueError: a document id the store holds already (names the id).
  """
  connection = sqlite3.connect(path)
  try:
    rows, n = [], 0
    for d in documents:
      rows.append((int(d.id), d.title or "", d.text or "", d.sentence or "", d.page_id,
                   d.source or "", d.section or ""))
      if len(rows) == batch:
        n += _insert(connection, rows, path)
        rows = []
    n += _insert(connection, rows, path)
    connection.commit()
  finally:
    connection.close()
  return n


def _insert(connection: sqlite3.Connection, rows: list[tuple], path: str) -> int:
  try:
    connection.executemany(f"INSERT INTO documents ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                           rows)
  except sqlite3.IntegrityError as e:
    raise ValueError(f"{path}: a document id repeats ({e})") from e
  return len(rows)


class PassageStore:
  """Read-only access to a store file, safe to share between threads."""

  def __init__(self, path: str, connection: sqlite3.Connection):
    self.path = path
    self._connection = connection
    self._lock = threading.Lock()
    names = {row[1] for row in connection.execute("PRAGMA table_info(documents)")}
    self._columns = _COLUMNS if "section" in names else _COLUMNS_WITHOUT_SECTION

  @classmethod
  def open(cls, path: str) -> "PassageStore":
    if not os.path.isfile(path):
      raise FileNotFoundError(f"{path}: no passage store")
    # Read-only and immutable: SQLite then takes no locks and never writes beside the file.
    uri = f"file:{os.path.abspath(path)}?mode=ro&immutable=1"
    connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
    try:
      connection.execute("SELECT id FROM documents LIMIT 1").fetchall()
    except sqlite3.DatabaseError as e:
      connection.close()
      raise ValueError(f"{path}: not a passage store ({e})") from e
    return cls(path, connection)

  def __len__(self) -> int:
    with self._lock:
      return int(self._connection.execute("SELECT COUNT(*) FROM documents").fetchone()[0])

  def ids(self) -> list[int]:
    """Every document id, ascending (the primary key's own order: no sort)."""
    with self._lock:
      return [row[0] for row in self._connection.execute("SELECT id FROM documents ORDER BY id")]

  def get(self, ids: Sequence[int]) -> Mapping[int, Document]:
    """The documents of `ids` that exist, by id (a missing id is absent from the result)."""
    found: dict[int, Document] = {}
    unique = sorted({int(i) for i in ids})
    with self._lock:
      for start in range(0, len(unique), _MAX_PARAMS):
        chunk = unique[start:start + _MAX_PARAMS]
        marks = ",".join("?" * len(chunk))
        for row in self._connection.execute(
            f"SELECT {self._columns} FROM documents WHERE id IN ({marks})", chunk):
          found[row[0]] = Document(*row)
    return found

  def close(self) -> None:
    with self._lock:
      self._connection.close()

  def __enter__(self) -> "PassageStore":
    return self

  def __exit__(self, *exc) -> None:
    self.close()
