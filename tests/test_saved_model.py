"""Loading an exported SavedModel (twotower.core.saved_model) without Beam: the query tower of a
bundle, served, loads no `apache_beam` (it came with pipelines.embed before), and the eval and
serving modules import none."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from twotower.core import contracts
from twotower.core import saved_model

#: Run in a fresh interpreter: import every eval and serving module, load a bundle's
#: TensorFlow query tower and search, then say which of Beam and TensorFlow got loaded.
PROBE = """
import importlib, json, pkgutil, sys
import twotower.eval
for module in pkgutil.iter_modules(twotower.eval.__path__):
  importlib.import_module(f"twotower.eval.{module.name}")
from twotower.deploy.serving import app, query, retriever
after_imports = "apache_beam" in sys.modules
r = retriever.Retriever.load(sys.argv[1], verify="size", encoder="tensorflow", modes=("dense",))
hits = r.search("Who designed the tower in Galt?", k=3)
print(json.dumps({"beam_after_imports": after_imports, "beam": "apache_beam" in sys.modules,
                  "tensorflow": "tensorflow" in sys.modules, "ids": [h.id for h in hits]}))
"""


def test_serving_a_tensorflow_query_tower_loads_no_beam(serving_bundle):
  done = subprocess.run([sys.executable, "-c", PROBE, serving_bundle["bundle"]],
                        capture_output=True, text=True, timeout=300, check=True)
  seen = json.loads(done.stdout.strip().splitlines()[-1])
  assert seen["tensorflow"] and len(seen["ids"]) == 3  # the SavedModel did load and answer
  assert not seen["beam_after_imports"] and not seen["beam"]
  from twotower.deploy.serving import Retriever
  here = Retriever.load(serving_bundle["bundle"], verify="size", encoder="tensorflow",
                        modes=("dense",))
  try:  # the same tower, the same answer as in this (Beam-importing) process
    assert [h.id for h in here.search("Who designed the tower in Galt?", k=3)] == seen["ids"]
  finally:
    here.close()


def test_a_signature_loads_with_its_dimension(serving_bundle):
  import tensorflow as tf
  model = serving_bundle["model"]
  assert saved_model.embedding_dim(model, contracts.QUERY_SIGNATURE) == 64
  fn = saved_model.load_signature(model, contracts.QUERY_SIGNATURE)
  out = fn(query=tf.constant(["a question", "another"]))[contracts.EMBEDDING_OUTPUT]
  assert out.shape == (2, 64) and out.dtype == tf.float32
  with pytest.raises(ValueError, match=f"{model}: no signature 'nope'; it has "
                                       r"\['doc_encoder', 'query_encoder'\]"):
    saved_model.load_signature(model, "nope")
