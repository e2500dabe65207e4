"""Small BEIR folders the BEIR tests write: string ids with odd characters (ids that sort
otherwise as numbers, non-ASCII, punctuation), graded qrels, a `dev` split to tune on."""

from __future__ import annotations

import json
import pathlib
from typing import Iterable, Mapping, Sequence

#: (id, title, text): each topic's documents share a rare word with its queries.
DOCS = (
    ("10", "Alpha particles", "Alpha decay emits helium nuclei from heavy atoms."),
    ("9", "Beta decay", "Beta decay turns a neutron into a proton and an electron."),
    ("doc/ä-1", "Gamma rays", "Gamma rays are photons of very high energy from nuclei."),
    ("Ω:2", "Neutrino", "The neutrino carries away energy in beta decay."),
    ("a,b", "Photosynthesis", "Plants turn light, water and carbon dioxide into sugar."),
    ('x"y', "Chlorophyll", "Chlorophyll absorbs red and blue light in leaves."),
    ("q-7", "Mitochondria", "Mitochondria make ATP, the energy currency of the cell."),
    ("1e3", "Ribosome", "Ribosomes translate messenger RNA into protein chains."),
    ("00", "Volcano", "Magma rises through the crust and erupts as lava."),
    ("Z", "Earthquake", "Faults slip and release seismic waves through the crust."),
    ("q3", "The query itself", "which particles does alpha decay emit"),
    ("empty-title", "", "Tectonic plates drift a few centimetres a year."),
)

#: (id, text)
QUERIES = (
    ("q1", "helium nuclei alpha decay"),
    ("q2", "neutron proton beta decay electron"),
    ("q3", "which particles does alpha decay emit"),
    ("q4", "light absorbed by leaves chlorophyll"),
    ("q5", "energy currency ATP cell"),
    ("q6", "seismic waves crust"),
    ("q7", "messenger RNA protein"),
    ("q8", "tectonic plates drift"),
    ("q9", "volcano magma lava"),
    ("q10", "gamma photons"),
)

#: split -> (query id, doc id, grade) rows (graded: 2 highly relevant, 1 relevant, 0 judged
#: not relevant). q8 of `test` has no relevant document (grade 0 only).
QRELS = {
    "test": (("q1", "10", 2), ("q1", "doc/ä-1", 1), ("q2", "9", 2), ("q2", "Ω:2", 1),
             ("q3", "10", 1), ("q3", "q3", 0), ("q4", 'x"y', 2), ("q4", "a,b", 1),
             ("q5", "q-7", 1), ("q6", "Z", 2), ("q6", "00", 1), ("q8", "Z", 0)),
    "dev": (("q7", "1e3", 1), ("q9", "00", 2), ("q10", "doc/ä-1", 1), ("q8", "empty-title", 1)),
}


def corpus_lines(docs: Iterable[tuple[str, str, str]] = DOCS) -> list[str]:
  return [json.dumps({"_id": d, "title": t, "text": x}, ensure_ascii=False) for d, t, x in docs]


def query_lines(queries: Iterable[tuple[str, str]] = QUERIES) -> list[str]:
  return [json.dumps({"_id": q, "text": t}, ensure_ascii=False) for q, t in queries]


def qrels_text(rows: Iterable[tuple[str, str, int]], header: bool = True) -> str:
  head = "query-id\tcorpus-id\tscore\n" if header else ""
  return head + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in rows)


def write_beir(folder: pathlib.Path, corpus: Sequence[str] | None = None,
               queries: Sequence[str] | None = None,
               qrels: Mapping[str, str] | None = None) -> pathlib.Path:
  """A BEIR folder: `corpus` and `queries` as JSONL lines, `qrels` {split: file text}
  (default: the module's)."""
  (folder / "qrels").mkdir(parents=True, exist_ok=True)
  (folder / "corpus.jsonl").write_text(
      "\n".join(corpus_lines() if corpus is None else corpus) + "\n", encoding="utf-8")
  (folder / "queries.jsonl").write_text(
      "\n".join(query_lines() if queries is None else queries) + "\n", encoding="utf-8")
  for split, text in (qrels or {s: qrels_text(rows) for s, rows in QRELS.items()}).items():
    (folder / "qrels" / f"{split}.tsv").write_text(text, encoding="utf-8")
  return folder
