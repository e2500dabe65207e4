"""Helpers for tests and benchmarks (as `apache_beam.testing`): tiny, deterministic inputs
written with the product's own codecs, never shipped as stand-ins inside a stage.

  pairs          a WordPiece vocabulary file and synthetic ICT-like pairs (pair TFRecords)
  embed_standin  a small real SavedModel with the export's signatures (BoW-MLP shaped)
  squad          a small SQuAD v1.1 file about made-up places
  server         `twotower serve` on a free loopback port (a thread or a subprocess)
  batch_path     a bundle's answers against the stages' own (embed, search, bm25, fuse)
"""
