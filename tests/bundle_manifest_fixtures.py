"""A small, valid retriever bundle manifest (contracts.bundle_manifest) for tests that need
one without building a bundle (TensorFlow, Beam and the JVM)."""

from __future__ import annotations

from twotower.contracts import bundle_manifest as bm

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
