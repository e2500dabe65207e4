"""Shared fixtures. Integration tests read ../shared/data when it is there and skip only when
it is absent (a user's machine does not have it)."""

from __future__ import annotations

import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = pathlib.Path(os.environ.get("TWOTOWER_SHARED_DATA", REPO.parent / "shared" / "data"))


def _shared(relative: str) -> pathlib.Path:
  path = SHARED_DATA / relative
  if not path.exists():
    pytest.skip(f"{path} is absent (shared data is only on developer and CI machines)")
  return path


@pytest.fixture
def enwiki_slice() -> pathlib.Path:
  return _shared("wiki/enwiki-slice-pages-articles.xml.bz2")


@pytest.fixture
def ltgwiki() -> pathlib.Path:
  return _shared("wiki/ltgwiki-pages-articles.xml.bz2")


@pytest.fixture
def squad_subset() -> pathlib.Path:
  return _shared("squad/train-subset-v1.1.json")


@pytest.fixture
def wikiextractor_corpus() -> pathlib.Path:
  return _shared("wiki/enwiki-2018-wikiextractor.txt.bz2")


@pytest.fixture
def scifact_train() -> pathlib.Path:
  """BEIR SciFact: the corpus, the train queries and qrels/train.tsv (see the data README)."""
  return _shared("beir/scifact-train")


@pytest.fixture(scope="session")
def serving_bundle(tmp_path_factory):
  """A retriever bundle the tests build: ReQA from a small SQuAD file (80 % ratio: a
  validation split to tune the hybrid on), a stand-in query/doc model, a flat index.

  Returns a dict of paths: squad, reqa, model, bundle, work (a scratch dir)."""
  from twotower.deploy.bundling import bundle
  from twotower.pipelines.reqa import builder as reqa
  from twotower.testing import embed_standin, squad
  root = tmp_path_factory.mktemp("serving")
  squad_file = squad.write_squad(str(root / "squad.json"))
  reqa_dir = str(root / "reqa")
  reqa.run(reqa.ReqaConfig(out=reqa_dir, squad=squad_file, ratios=(80,)))
  model = embed_standin.build_standin_savedmodel(str(root / "model"))
  out = str(root / "bundle")
  bundle.run(bundle.BundleConfig(model=model, reqa=reqa_dir, out=out,
                                 tune_split="validation-80"))
  return {"squad": squad_file, "reqa": reqa_dir, "model": model, "bundle": out,
          "work": str(root)}
