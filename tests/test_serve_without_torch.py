"""A BM25 / hybrid service loads the JVM for Lucene, and not PyTorch: Pyserini's
`pyserini.search.lucene` imports its dense and impact encoders (PyTorch, transformers), so the
bundle's BM25 searcher reaches Anserini's classes through `pyserini.pyclass` alone
(twotower.core.lucene.Bm25Searcher). Checked in a fresh process, the way a server starts:
the app imported, a hybrid bundle loaded, every mode searched (a filtered one too).
benchmarks/filtered_search.py measures the service's memory and time to ready against the old
import."""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = r"""
import json, sys
from twotower.deploy.serving import app  # what `twotower serve` imports
from twotower.deploy.serving import Retriever
r = Retriever.load(sys.argv[1], modes=("dense", "bm25", "hybrid"))
found = [len(r.search("Who designed the tower?", k=3, mode=m)) for m in ("dense", "bm25", "hybrid")]
found.append(len(r.search("tower", k=3, mode="hybrid", filter={"fields": {"title": "Galt"}})))
maps = open("/proc/self/maps").read()
print(json.dumps({"found": found, "torch": "torch" in sys.modules,
                  "transformers": "transformers" in sys.modules,
                  "jvm": "libjvm" in maps, "libtorch": "libtorch" in maps}))
"""


def test_a_hybrid_bundle_loads_lucene_without_pytorch(serving_bundle):
  out = subprocess.run([sys.executable, "-c", CHILD, serving_bundle["bundle"]],
                       capture_output=True, text=True, timeout=600, check=True)
  report = json.loads(out.stdout.strip().splitlines()[-1])
  assert report == {"found": [3, 3, 3, 3], "torch": False, "transformers": False, "jvm": True,
                    "libtorch": False}
