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
