"""BM25 on a BEIR corpus as Pyserini's BEIR regressions run it: "flat" and "multifield".

Both are defined by the regressions shipped in the Pyserini wheel (`pyserini/2cr/beir.yaml`,
and the Anserini configs `beir-v1.0.0-<dataset>.{flat,multifield}.yaml` inside its jar):

  * ``bm25-flat``: Anserini's BeirFlatCollection, one field `contents` = title + "\\n" +
    text; searched with `--bm25 --hits 1000 --remove-query` (k1 0.9, b 0.4).
  * ``bm25-multifield``: BeirMultifieldCollection, `contents` = text and `title` indexed as a
    field of its own (`-fields title`); searched across both, equally weighted,
    `--fields contents=1.0 title=1.0` (a Lucene disjunction of a BM25 clause per field and
    term, each field with its own length statistics).
  * Both: Lucene's default English analyzer (Porter, stopwords), the one Pyserini indexes
    and searches with. (`--remove-query`, which drops a hit whose doc id is the query's id,
    is the `beir` stage's, for every system: eval.beir_eval.)

The Lucene id of a document is its internal id (eval.beir), zero-padded to LUCENE_ID_DIGITS:
Anserini breaks score ties by the id field, ascending as strings, and padded internal ids sort
as the dataset's ids do (eval.beir assigns them in that order), so the top `hits` at a tie
are the ones Pyserini keeps with the dataset's own ids.

Both index with twotower.core.lucene.build_index (multifield passes its `title` field, Anserini's
`-fields title`). The flat system searches with twotower.core.lucene.search as it is (one
`contents` field); multifield's search over fields is `search_fields` here, with the same
query bound (lucene.bound_query) and batches.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Iterator, Mapping, Sequence

from tqdm import tqdm

from twotower.core import lucene
from twotower.core import pyserini_env
from twotower.core.contracts import Ranked, Run
from twotower.eval import beir

logger = logging.getLogger(__name__)

LUCENE_ID_DIGITS = 10
#: Pyserini's --hits for BEIR.
BEIR_HITS = 1000


@dataclasses.dataclass(frozen=True)
class Bm25System:
  """How one BM25 system lays a BEIR document out and searches it."""
  name: str
  fields: Mapping[str, float] = dataclasses.field(default_factory=dict)  # {} : contents

  def document(self, doc: beir.Document) -> dict:
    """A JsonCollection document: BeirFlatCollection's or BeirMultifieldCollection's."""
    if not self.fields:
      return {"id": lucene_id(doc.internal_id), "contents": f"{doc.title}\n{doc.text}"}
    return {"id": lucene_id(doc.internal_id), "contents": doc.text, "title": doc.title}

  @property
  def extra_fields(self) -> tuple[str, ...]:
    return tuple(f for f in self.fields if f != "contents")


FLAT = Bm25System("bm25-flat")
MULTIFIELD = Bm25System("bm25-multifield", {"contents": 1.0, "title": 1.0})
SYSTEMS: Mapping[str, Bm25System] = {s.name: s for s in (FLAT, MULTIFIELD)}


def lucene_id(internal_id: int) -> str:
  return f"{internal_id:0{LUCENE_ID_DIGITS}d}"


def search_fields(index_dir: str, queries: Sequence[tuple[str, str]],
                  fields: Mapping[str, float], k1: float, b: float, hits: int, threads: int,
                  batch_size: int) -> Run:
  """BM25 top-`hits` per (query id, text) across `fields` (field -> weight)."""
  LuceneSearcher = pyserini_env.import_lucene_searcher()  # pylint: disable=invalid-name
  searcher = LuceneSearcher(index_dir)
  searcher.set_bm25(k1, b)
  run: Run = {}
  weights = {f: float(w) for f, w in fields.items()}
  for start in tqdm(range(0, len(queries), batch_size), desc="bm25 search", unit="batch",
                    disable=None):
    chunk = [(q, lucene.bound_query(text)) for q, text in queries[start:start + batch_size]]
    if threads == 1:
      results = {q: searcher.search(text, k=hits, fields=weights) for q, text in chunk}
    else:
      results = searcher.batch_search([t for _, t in chunk], [q for q, _ in chunk], k=hits,
                                      threads=threads, fields=weights)
    for q, _ in chunk:
      docs = results.get(q, [])
      run[q] = Ranked(tuple(int(d.docid) for d in docs), tuple(float(d.score) for d in docs))
  searcher.close()
  return run


def _indexed(corpus: beir.Corpus, system: Bm25System) -> Iterator[dict]:
  for doc in corpus.documents():
    yield system.document(doc)


@dataclasses.dataclass(frozen=True)
class Bm25Run:
  run: Run                   # query id -> Ranked internal ids (Corpus.named names them)
  index_dir: str
  documents: int
  seconds: float


def run_system(corpus: beir.Corpus, queries: Mapping[str, str], system: Bm25System,
               index_dir: str, *, k1: float = lucene.DEFAULT_K1, b: float = lucene.DEFAULT_B,
               hits: int = BEIR_HITS, threads: int = 1, batch_size: int = 1000) -> Bm25Run:
  """Indexes the corpus at `index_dir` as `system` lays it out and searches `queries`
  (module docstring)."""
  started = time.perf_counter()
  n = lucene.build_index(_indexed(corpus, system), index_dir, threads,
                         fields=system.extra_fields)
  logger.info("%s: indexed %d documents in %.1f s", system.name, n,
              time.perf_counter() - started)
  searched = sorted(queries.items())
  if system.fields:
    ranked = search_fields(index_dir, searched, system.fields, k1, b, hits, threads,
                           batch_size)
  else:
    ranked = lucene.search(index_dir, searched, k1, b, hits, threads, batch_size)
  return Bm25Run(ranked, index_dir, n, time.perf_counter() - started)


def pyserini_figures(dataset: str) -> dict[str, dict[str, float]]:
  """Pyserini's published BEIR figures of `dataset` (its test split), per system:
  {"bm25-flat": {"nDCG@10": ..., "R@100": ..., "R@1000": ...}, ...} from the wheel's
  2cr/beir.yaml; {} for a dataset it does not list."""
  import importlib.resources  # pylint: disable=import-outside-toplevel
  import yaml  # pylint: disable=import-outside-toplevel
  text = (importlib.resources.files("pyserini") / "2cr" / "beir.yaml").read_text()
  figures: dict[str, dict[str, float]] = {}
  for condition in yaml.safe_load(text)["conditions"]:
    for entry in condition.get("datasets", []):
      if entry.get("dataset") == dataset and entry.get("scores"):
        figures[condition["name"]] = {k: float(v) for k, v in entry["scores"][0].items()}
  return figures
