"""Named sentence splitters shared by the Wikipedia pipeline and the ReQA builder."""

from __future__ import annotations

import random

import pytest

from twotower.pipelines.sentences import spacy_sentencizer, splitters

TEXT = "Mr. Smith went to Washington.  He liked it! Did he?"


def test_spacy_default_splits_and_keeps_abbreviations():
  splitter = splitters.get_splitter("spacy")
  assert splitter.split(TEXT) == ["Mr. Smith went to Washington.", "He liked it!", "Did he?"]


def test_spans_point_into_the_text():
  splitter = splitters.get_splitter("spacy")
  (spans,) = list(splitter.spans_many([TEXT]))
  assert [TEXT[s:e] for s, e in spans] == splitter.split(TEXT)


def test_batched_split_matches_one_by_one():
  splitter = splitters.get_splitter("spacy-xx")
  texts = [TEXT, "", "One. Two.", "   "]
  assert list(splitter.split_many(texts)) == [splitter.split(t) for t in texts]
  assert list(splitter.split_many(texts))[1] == []


def test_unknown_splitter_names_the_choices():
  with pytest.raises(ValueError, match="unknown sentence splitter 'nope'.*spacy"):
    splitters.get_splitter("nope")


# ---------------------------------------------------------------------------------------------
# The default splitter is pipelines.sentences.spacy_sentencizer: spaCy's blank pipeline + sentencizer,
# re-implemented without importing spaCy. It must give spaCy's sentences, exactly.
# ---------------------------------------------------------------------------------------------

#: Texts where spaCy's tokenizer rules decide the sentences: abbreviations (special cases),
#: a special case cut by an infix and put back by the special-case matcher ("ex-Mr."), an
#: upper-case word before a period ("IBM."), a URL, quotes after the period, an infix period
#: ("5%.Then" stays one token), non-breaking and double spaces, newlines, leading space.
TRICKY = [
    "He met ex-Mr. Smith there. Then left.",
    "It was at IBM. Then Apple.",
    "Prices rose 5%.Then fell. Later too.",
    "Visit www.example.com. Now! Or e.g. later? Yes.",
    'He said "stop." Then he went. (See p. 4.) Done.',
    "Wait...  What?\nNew line.\u00a0Non-breaking. Fine",
    "  Leading space. U.S. troops (1987): here. a.C.. b",
    "",
]


@pytest.mark.parametrize("lang", ["en", "xx"])
def test_rule_splitter_gives_spacys_sentences_on_tricky_texts(lang):
  spacy_splitter = splitters.get_splitter(f"spacy:blank:{lang}")
  rule = splitters.get_splitter("spacy" if lang == "en" else f"spacy-{lang}")
  assert list(rule.spans_many(TRICKY)) == list(spacy_splitter.spans_many(TRICKY))
  if lang == "en":  # "Mr." is an English special case only
    assert rule.split(TRICKY[0]) == ["He met ex-Mr. Smith there.", "Then left."]


def fuzz_texts(lang: str, n: int, seed: int) -> list[str]:
  """Random texts of special-case keys, punctuation, words and whitespace of every kind."""
  rules = spacy_sentencizer.Rules.load(lang)
  keys = sorted(rules.special_cases)
  atoms = ["word", "Word", "IBM", "U.S", "Mr", "3", "10km", "http://x.org/a.b", "don't", "'s",
           "-", "—", "…", "...", ".", "!", "?", "。", ",", ";", ":", "(", ")", '"', "'", "“",
           "$", "%", "°C", "+", "/", "ß", "\u0301", "\u200b", "।", "¿", "§"]
  spaces = [" "] * 10 + ["", "  ", "\n", "\t", "\u00a0", " \n ", "\u2009"]
  rng = random.Random(seed)
  texts = []
  for _ in range(n):
    parts = [(rng.choice(keys) if rng.random() < 0.35 else rng.choice(atoms)) + rng.choice(spaces)
             for _ in range(rng.randint(1, 12))]
    texts.append(("" if rng.random() < 0.8 else " ") + "".join(parts))
  return texts


@pytest.mark.parametrize("lang", ["en", "xx"])
def test_rule_tokenizer_and_splitter_match_spacy_on_fuzzed_texts(lang):
  import spacy
  texts = fuzz_texts(lang, 3000, seed=7)
  nlp = spacy.blank(lang)
  rule = spacy_sentencizer.RuleSentencizer(lang)
  token_mismatches = [t for t in texts
                      if rule.tokenizer.tokens(t) != [(x.idx, x.text) for x in nlp.make_doc(t)]]
  assert not token_mismatches, token_mismatches[:3]
  expected = list(splitters.get_splitter(f"spacy:blank:{lang}").spans_many(texts))
  assert [rule.spans(t) for t in texts] == expected


@pytest.mark.parametrize("lang", spacy_sentencizer.LANGUAGES)
def test_stored_rules_are_those_of_the_installed_spacy(lang):
  """After a spaCy upgrade this fails: run spacy_sentencizer.write_rules() and review the diff."""
  assert spacy_sentencizer.Rules.load(lang) == spacy_sentencizer.rules_from_spacy(lang)


@pytest.mark.shared_data
@pytest.mark.parametrize("dump_fixture", ["enwiki_slice", "ltgwiki"])
def test_rule_splitter_gives_spacys_sentences_on_every_paragraph_of_a_dump(dump_fixture,
                                                                           request):
  from twotower.pipelines.wiki import parse_pages, wikidump
  paragraphs = []
  for raw in wikidump.iter_dump_pages(str(request.getfixturevalue(dump_fixture))):
    kind, page = parse_pages.route_page(raw)
    if kind == "article":
      paragraphs.extend(p for section in page.sections for p in section.paragraphs)
  assert len(paragraphs) > 5000
  expected = list(splitters.get_splitter("spacy:blank:en").spans_many(paragraphs))
  assert list(splitters.get_splitter("spacy").spans_many(paragraphs)) == expected
