"""Test fixtures that ship with the package (tests and benchmarks import them): nothing here
is used by a stage.

  embed_standin  a small real SavedModel with the export's signatures (BoW-MLP shaped)
"""
