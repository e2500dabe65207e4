"""The ground floor: what every stage stands on (contracts, files on any Beam
filesystem, output ownership, fingerprints, logging) and what two stage
folders share (Recall@k, Lucene BM25, Pyserini's JVM set-up)."""
