"""Inputs of retriever bundle tests: a small, valid bundle manifest (contracts.bundle_manifest)
for tests that need one without building a bundle (TensorFlow, Beam and the JVM), and a pair
pipeline output's passages to bundle."""

from __future__ import annotations

from twotower.core import contracts
from twotower.core.contracts import bundle_manifest as bm

IDS = bm.IdSet(count=3, sha256="a" * 64)


def a_manifest(**hybrid) -> bm.BundleManifest:
  """Three documents, dim 8, a flat index; `hybrid` overrides the hybrid's fields."""
  return bm.BundleManifest(
      created="2026-11-27T00:00:00+00:00",
      versions={"python": "3.11.7", "twotower": "0.1.0"},
      model=bm.ModelPart(source="/models/m", fingerprint="f" * 64, signature="query_encoder",
                         embedding_dim=8, config=""),
      documents=bm.DocumentsPart(count=3, source="/data/reqa", kind="candidates",
                                 doc_text="sentence+passage", ids=IDS),
      index=bm.IndexPart(factory="Flat", vectors=3, dim=8, metric="inner_product", ids=IDS),
      bm25=bm.Bm25Part(documents=3, k1=0.9, b=0.4, ids=IDS),
      hybrid=bm.Hybrid(**{"weight": 0.5, "depth": 100, **hybrid}),
      files={"index.faiss": bm.FileDigest(bytes=3, sha256="b" * 64)})


def write_passages(tmp_path) -> str:
  """Three passages of one page (a `twotower pairs` output's passages/); returns the output."""
  import pyarrow as pa
  import pyarrow.parquet as pq
  out = tmp_path / "pairs"
  (out / "passages").mkdir(parents=True)
  rows = [{"page_id": 7, "passage_id": i, "title": "Page", "text": f"text {i}",
           "sentences": [f"text {i}"], "is_lead": i == 0} for i in range(3)]
  pq.write_table(pa.Table.from_pylist(rows, schema=contracts.PASSAGE_SCHEMA),
                 out / "passages" / "passages-00000-of-00001.parquet")
  return str(out)
