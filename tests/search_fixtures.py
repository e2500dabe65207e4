"""Inputs of searcher tests: a small BM25 corpus with many ties, queries over its vocabulary,
and clustered vectors with a brute-force filtered top k (the reference every restricted search
is held to)."""

from __future__ import annotations

import random

import numpy as np

WORDS = [f"w{i}" for i in range(60)]


def corpus(n: int = 600, seed: int = 0) -> list[dict]:
  """Short documents over a small vocabulary, every fifth a copy of another: many BM25 ties."""
  rng = random.Random(seed)
  docs = []
  for i in range(n):
    text = (docs[rng.randrange(len(docs))]["contents"] if docs and i % 5 == 0
            else " ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 12))))
    docs.append({"id": str(i * 3 + 1), "contents": text})
  return docs


def queries(n: int = 40, seed: int = 1) -> list[str]:
  rng = random.Random(seed)
  return [" ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 5))) for _ in range(n)]


def clustered_vectors(n: int, d: int, clusters: int = 20, seed: int = 0) -> np.ndarray:
  """float32[n, d] around `clusters` centres (what IVF and HNSW are built for)."""
  rng = np.random.default_rng(seed)
  centres = rng.standard_normal((clusters, d)).astype(np.float32) * 2
  x = centres[rng.integers(0, clusters, n)] + rng.standard_normal((n, d)).astype(np.float32)
  return np.ascontiguousarray(x, dtype=np.float32)


def brute_force(queries: np.ndarray, vectors: np.ndarray, ids: np.ndarray, allowed: np.ndarray,
                k: int) -> tuple[np.ndarray, np.ndarray]:
  """The exact top k among the allowed documents: (scores [nq, <=k], ids [nq, <=k])."""
  keep = np.isin(ids, allowed)
  scores = queries @ vectors[keep].T
  order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
  return np.take_along_axis(scores, order, 1), ids[keep][order]


def random_allowed(ids: np.ndarray, selectivity: float, rng: np.random.Generator) -> np.ndarray:
  """A random subset of `ids` of about `selectivity` of them (at least one)."""
  count = max(1, int(round(selectivity * len(ids))))
  return np.sort(rng.choice(ids, count, replace=False))


def recall(found: np.ndarray, reference: np.ndarray) -> float:
  """|found ∩ reference| / |reference| over the rows (the -1 fillers ignored)."""
  hits = sum(len(np.intersect1d(f[f >= 0], r[r >= 0])) for f, r in zip(found, reference))
  return hits / max(1, sum(int((r >= 0).sum()) for r in reference))
