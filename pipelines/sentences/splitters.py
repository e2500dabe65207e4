"""Sentence splitters by name, shared by the Wikipedia pipeline and the ReQA builder.

    splitter = get_splitter("spacy")          # spaCy's blank English pipeline + sentencizer
    for sentences in splitter.split_many(texts):
      ...

Names:
  * ``spacy`` (default): the sentences of ``spacy.blank("en")`` with the ``sentencizer``,
    computed by pipelines.sentences.spacy_sentencizer, an exact re-implementation that does not import spaCy
    (3-11x faster, and no 2 s `import spacy` per worker); nothing to download.
  * ``spacy-xx``: the same on spaCy's multi-language tokenizer (non-English wikis).
  * ``spacy:<pipeline>``: spaCy itself, with a pipeline the user has installed (package name
    or path), e.g. ``spacy:en_core_web_sm``; loaded, never downloaded. ``spacy:blank:en`` is
    the library run of what ``spacy`` computes (the tests compare the two).
  * ``reqa``: a re-implementation of the rule-based splitter of ReQA's evaluation code, so that
    ReQA counts match published ones (see pipelines.sentences.reqa_sentencizer).

A splitter is built once per worker (`DoFn.setup`) and is not pickled with the pipeline.
"""

from __future__ import annotations

import abc
from typing import Callable, Iterable, Iterator

from twotower.pipelines.sentences import spacy_sentencizer

Span = tuple[int, int]  # [start, end) character offsets into the text


class SentenceSplitter(abc.ABC):
  """Splits texts into sentences, reporting character spans so callers can map offsets."""

  name: str = ""

  @abc.abstractmethod
  def spans_many(self, texts: Iterable[str]) -> Iterator[list[Span]]:
    """Yields, per text, the [start, end) spans of its non-empty sentences, in order."""

  def split_many(self, texts: Iterable[str]) -> Iterator[list[str]]:
    texts = list(texts)
    for text, spans in zip(texts, self.spans_many(texts)):
      yield [text[s:e] for s, e in spans]

  def split(self, text: str) -> list[str]:
    return next(self.split_many([text]))


class SpacySplitter(SentenceSplitter):
  """spaCy, batched with `nlp.pipe`. Default: a blank pipeline plus the sentencizer."""

  def __init__(self, pipeline: str = "blank:en", batch_size: int = 256):
    import spacy  # heavy: imported when a worker builds its splitter
    self.name = "spacy" if pipeline == "blank:en" else f"spacy:{pipeline}"
    self.batch_size = batch_size
    if pipeline.startswith("blank:"):
      self.nlp = spacy.blank(pipeline.split(":", 1)[1])
      self.nlp.add_pipe("sentencizer")
    else:
      self.nlp = spacy.load(pipeline, exclude=["ner", "lemmatizer", "textcat"])
      if not (self.nlp.has_pipe("parser") or self.nlp.has_pipe("senter")
              or self.nlp.has_pipe("sentencizer")):
        self.nlp.add_pipe("sentencizer")
    # Wikipedia has the odd giant paragraph; spaCy's default guard is 1M characters.
    self.nlp.max_length = max(self.nlp.max_length, 5_000_000)

  def spans_many(self, texts: Iterable[str]) -> Iterator[list[Span]]:
    for doc in self.nlp.pipe(texts, batch_size=self.batch_size):
      spans = (spacy_sentencizer.strip_span(doc.text, s.start_char, s.end_char)
               for s in doc.sents)
      yield [span for span in spans if span]


class RuleSplitter(SentenceSplitter):
  """spaCy's blank pipeline + sentencizer, by pipelines.sentences.spacy_sentencizer (no spaCy import)."""

  def __init__(self, lang: str = "en"):
    self.name = "spacy" if lang == "en" else f"spacy-{lang}"
    self._sentencizer = spacy_sentencizer.sentencizer(lang)

  def spans_many(self, texts: Iterable[str]) -> Iterator[list[Span]]:
    for text in texts:
      yield self._sentencizer.spans(text)


def _reqa_splitter() -> SentenceSplitter:
  from twotower.pipelines.sentences import reqa_sentencizer  # pylint: disable=import-outside-toplevel
  return reqa_sentencizer.ReqaSplitter()


_FACTORIES: dict[str, Callable[[], SentenceSplitter]] = {
    "spacy": lambda: RuleSplitter("en"),
    "spacy-xx": lambda: RuleSplitter("xx"),
    "reqa": _reqa_splitter,
}

SPLITTER_NAMES = tuple(_FACTORIES) + ("spacy:<pipeline>",)


def get_splitter(name: str) -> SentenceSplitter:
  """Builds the splitter called `name` (see the module docstring)."""
  if name in _FACTORIES:
    return _FACTORIES[name]()
  if name.startswith("spacy:"):
    return SpacySplitter(name.split(":", 1)[1])
  raise ValueError(f"unknown sentence splitter {name!r}; choose one of {', '.join(SPLITTER_NAMES)}")
