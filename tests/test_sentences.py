"""Named sentence splitters shared by the Wikipedia pipeline and the ReQA builder."""

from __future__ import annotations

import pytest

from twotower.pipelines import sentences

TEXT = "Mr. Smith went to Washington.  He liked it! Did he?"


def test_spacy_default_splits_and_keeps_abbreviations():
  splitter = sentences.get_splitter("spacy")
  assert splitter.split(TEXT) == ["Mr. Smith went to Washington.", "He liked it!", "Did he?"]


def test_spans_point_into_the_text():
  splitter = sentences.get_splitter("spacy")
  (spans,) = list(splitter.spans_many([TEXT]))
  assert [TEXT[s:e] for s, e in spans] == splitter.split(TEXT)


def test_batched_split_matches_one_by_one():
  splitter = sentences.get_splitter("spacy-xx")
  texts = [TEXT, "", "One. Two.", "   "]
  assert list(splitter.split_many(texts)) == [splitter.split(t) for t in texts]
  assert list(splitter.split_many(texts))[1] == []


def test_unknown_splitter_names_the_choices():
  with pytest.raises(ValueError, match="unknown sentence splitter 'nope'.*spacy"):
    sentences.get_splitter("nope")
