"""Building a retriever bundle (`twotower bundle`): embed, index, BM25, the
hybrid's weight, the manifest. deploy/serving only serves it."""
