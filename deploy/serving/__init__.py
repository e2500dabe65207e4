"""Query time: search with what you trained (docs/guide/serve.md).

  bundle     `twotower bundle`: query tower + FAISS index + passage store + Lucene index +
             the hybrid's weight + a manifest, in one directory
  store      the passage store (SQLite; id -> title, text, sentence, page id)
  retriever  `Retriever.load(bundle).search(query_or_queries, k, mode=dense|bm25|hybrid)`
  batcher    micro-batching of concurrent requests into one retriever call
  app        `twotower serve`: the FastAPI app (/v1/search, /v1/info, health, readiness,
             the search page at /)
"""

from twotower.deploy.serving.retriever import BundleError, Hit, Retriever, SearchRequest  # noqa: F401
