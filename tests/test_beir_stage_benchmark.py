"""benchmarks/beir_stage.py's generated BEIR folder: eval.beir reads it without a problem,
every judged document is in the corpus, and each query's words are in its documents (what
lets BM25 find them). The timed run itself (`python -m benchmarks beir_stage`) starts the JVM
and is not run here."""

from __future__ import annotations

import os
import sys

# benchmarks/ is a plain folder at the repository root, not part of the installed package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import __main__ as registry  # noqa: E402
from benchmarks import beir_stage  # noqa: E402
from twotower.eval import beir  # noqa: E402


def test_generated_folder_is_read_cleanly_and_queries_match_their_documents(tmp_path):
  folder = str(tmp_path / "beir")
  size = beir_stage.write_folder(folder, docs=300, queries=20, vocab_size=2000, seed=3)
  assert size == os.path.getsize(os.path.join(folder, "corpus.jsonl"))
  data = beir.read(folder, progress=False)
  split = data.split(beir_stage.SPLIT)
  assert len(data.corpus) == 300 and len(split.qrels) == 20
  assert not data.problems.counts and not split.problems.counts
  texts = {d.doc_id: d.text.split() for d in data.corpus.documents(progress=False)}
  assert all(50 <= len(t) <= 70 for t in texts.values())
  for query_id, judged in split.qrels.items():
    assert 1 <= len(judged) <= 3
    for doc_id in judged:
      assert set(split.queries[query_id].split()) <= set(texts[doc_id])


def test_vocabulary_is_distinct_and_registered():
  words = beir_stage.vocabulary(5000)
  assert len(set(words)) == 5000 and len(words[0]) <= len(words[-1])
  assert "beir_stage" in registry.BENCHMARKS
