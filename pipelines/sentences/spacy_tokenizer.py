"""spaCy's tokenizer for a blank pipeline, re-implemented exactly and without importing spaCy:
the first half of pipelines.sentences.spacy_sentencizer (whose docstring tells the whole method).

spaCy splits a text into runs of whitespace and non-whitespace ("chunks"); a single " " after
a chunk is the token's trailing space, any other whitespace is a token. Each chunk is
tokenized on its own (prefix / suffix / infix regular expressions, special cases, URL match),
which is what makes a per-chunk cache exact. `Tokenizer.chunk` mirrors `Tokenizer._tokenize`
(`_split_affixes` + `_attach_tokens`, spaCy 3.8 tokenizer.pyx) line by line.

The rules (regular expressions, special cases, sentence-final characters) are data from the
installed spaCy (`rules_from_spacy`), stored in `sentencizer_rules/<lang>.json`; regenerate
them after a spaCy upgrade with `write_rules()`.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
from re import _parser  # regular-expression widths (Python 3.11+)
from typing import Callable, Iterable, Iterator, Optional

RULES_DIR = pathlib.Path(__file__).resolve().with_name("sentencizer_rules")
#: Languages with stored rules: spaCy's blank English and multi-language pipelines.
LANGUAGES = ("en", "xx")
#: Caches hold distinct chunks; a corpus has millions, so they are reset when full.
CACHE_LIMIT = 100_000
_WHITESPACE = re.compile(r"\s+")  # = str.isspace(), the test spaCy's tokenizer uses


@dataclasses.dataclass(frozen=True)
class Rules:
  """What a blank spaCy pipeline's tokenizer and sentencizer decide by."""
  lang: str
  spacy_version: str
  prefix: Optional[str]        # regular expressions, as compiled by spaCy (re.UNICODE)
  suffix: Optional[str]
  infix: Optional[str]
  url_match: Optional[str]
  token_match: Optional[str]
  special_cases: dict[str, list[str]]  # chunk -> its tokens
  matcher_keys: list[str]      # special cases also matched over several tokens
  punct_chars: list[str]       # the sentencizer's sentence-final characters

  @classmethod
  def load(cls, lang: str) -> "Rules":
    path = RULES_DIR / f"{lang}.json"
    if not path.exists():
      raise ValueError(f"no stored sentencizer rules for language {lang!r} ({path}); "
                       f"stored: {', '.join(LANGUAGES)}")
    return cls(**json.loads(path.read_text(encoding="utf-8")))


def rules_from_spacy(lang: str) -> Rules:
  """The rules of the installed spaCy's blank `lang` pipeline (imports spaCy)."""
  import spacy  # pylint: disable=import-outside-toplevel
  nlp = spacy.blank(lang)
  tokenizer = nlp.tokenizer
  sentencizer = nlp.add_pipe("sentencizer")

  def pattern(fn) -> Optional[str]:
    return None if fn is None else fn.__self__.pattern

  special_cases = {key: [token[65] for token in tokens]  # 65: spacy.attrs.ORTH
                   for key, tokens in sorted(tokenizer.rules.items())}
  # Tokenizer.add_special_case: with faster_heuristics, only keys the affix rules would cut
  # (or that hold a space) go to the special-case matcher.
  matcher_keys = [key for key in special_cases
                  if not tokenizer.faster_heuristics or tokenizer.find_prefix(key)
                  or tokenizer.find_infix(key) or tokenizer.find_suffix(key) or " " in key]
  return Rules(lang=lang, spacy_version=spacy.__version__,
               prefix=pattern(tokenizer.prefix_search), suffix=pattern(tokenizer.suffix_search),
               infix=pattern(tokenizer.infix_finditer), url_match=pattern(tokenizer.url_match),
               token_match=pattern(tokenizer.token_match), special_cases=special_cases,
               matcher_keys=matcher_keys, punct_chars=sorted(sentencizer.punct_chars))


def write_rules(langs: Iterable[str] = LANGUAGES) -> None:
  """Stores the installed spaCy's rules (run after a spaCy upgrade; review the diff)."""
  RULES_DIR.mkdir(exist_ok=True)
  for lang in langs:
    rules = dataclasses.asdict(rules_from_spacy(lang))
    (RULES_DIR / f"{lang}.json").write_text(
        json.dumps(rules, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")


def _compile(pattern: Optional[str]):
  return None if pattern is None else re.compile(pattern, re.UNICODE)


def _alternatives(pattern: str) -> list[str]:
  """The top-level `|` alternatives of a regular expression (spaCy joins its affix rules
  so)."""
  alternatives, current, depth, in_class, escaped = [], [], 0, False, False
  for c in pattern:
    if escaped:
      escaped = False
    elif c == "\\":
      escaped = True
    elif in_class:
      in_class = not (c == "]" and current[-1] != "[")
    elif c == "[":
      in_class = True
    elif c in "()":
      depth += 1 if c == "(" else -1
    elif c == "|" and depth == 0:
      alternatives.append("".join(current))
      current = []
      continue
    current.append(c)
  alternatives.append("".join(current))
  return alternatives


def _prefix_finder(pattern: Optional[str]) -> Callable[[str], int]:
  """Tokenizer.find_prefix: the length of the prefix rule's match, 0 if none. spaCy anchors
  every prefix rule with `^`, so matching at 0 equals its search."""
  if pattern is None:
    return lambda string: 0
  regex = re.compile(pattern, re.UNICODE)
  anchored = all(a.startswith("^") for a in _alternatives(pattern))
  return _match_length(regex.match if anchored else regex.search)


def _match_length(find: Callable) -> Callable[[str], int]:
  def length(string: str) -> int:
    match = find(string)
    return match.end() - match.start() if match is not None else 0
  return length


def _suffix_finder(pattern: Optional[str]) -> Callable[[str], int]:
  """Tokenizer.find_suffix: the length of the suffix rule's match, 0 if none.

  spaCy anchors every suffix rule with `$`, so the match that `search` finds is the one that
  starts leftmost. A rule of bounded width w can only start in the last w characters, so the
  bounded rules are searched from there (look-behinds still see the whole string); the few
  unbounded rules (`\\.\\.+$`) are searched in full. Same answer, without trying every start.
  """
  if pattern is None:
    return lambda string: 0
  full = re.compile(pattern, re.UNICODE)
  search_full = _match_length(full.search)
  bounded, unbounded, width = [], [], 0
  for alternative in _alternatives(pattern):
    if not alternative.endswith("$") or alternative.endswith("\\$"):
      return _match_length(full.search)  # not spaCy's shape: search in full
    low_high = _parser.parse(alternative).getwidth()
    if low_high[1] > 64:
      unbounded.append(alternative)
    else:
      bounded.append(alternative)
      width = max(width, low_high[1])
  bounded_search = re.compile("|".join(f"(?:{a})" for a in bounded), re.UNICODE).search
  unbounded_search = (re.compile("|".join(f"(?:{a})" for a in unbounded), re.UNICODE).search
                      if unbounded else None)

  def find_suffix(string: str) -> int:
    if "\n" in string:  # `$` also matches before a final newline: the plain search decides
      return search_full(string)
    n = len(string)
    match = bounded_search(string, max(0, n - width))
    start = match.start() if match is not None else n
    if unbounded_search is not None:
      other = unbounded_search(string)
      if other is not None and other.start() < start:
        start = other.start()
    return n - start
  return find_suffix


class Tokenizer:
  """spaCy's Tokenizer (tokenizer.pyx) in Python, for one blank pipeline's rules."""

  def __init__(self, rules: Rules):
    self._find_prefix = _prefix_finder(rules.prefix)
    self._find_suffix = _suffix_finder(rules.suffix)
    self.infix_finditer = getattr(_compile(rules.infix), "finditer", None)
    self.url_match = getattr(_compile(rules.url_match), "match", None)
    self.token_match = getattr(_compile(rules.token_match), "match", None)
    self.specials = {key: tuple(tokens) for key, tokens in rules.special_cases.items()}
    # Special-case matcher: token sequence (the key's affix tokenization, without special
    # cases) -> key; indexed by first token.
    self.patterns: dict[str, list[tuple[tuple[str, ...], str]]] = {}
    for key in rules.matcher_keys:
      tokens = tuple(text for _, text in self.tokens(key, with_specials=False))
      # A one-token match that the special case leaves as it is changes nothing, and can
      # only overlap one-token matches of the same text in spaCy's filtering: left out.
      if tokens and not (len(tokens) == 1 and self.specials[key] == tokens):
        self.patterns.setdefault(tokens[0], []).append((tokens, key))
    self.cache: dict[str, tuple[str, ...]] = {}

  def chunk(self, span: str, with_specials: bool = True) -> tuple[str, ...]:
    """Token texts of one chunk (Tokenizer._try_specials_and_cache + _tokenize)."""
    if with_specials:
      special = self.specials.get(span)
      if special is not None:
        return special
      cached = self.cache.get(span)
      if cached is not None:
        return cached
    tokens = self._tokenize(span, with_specials)
    if with_specials:
      if len(self.cache) >= CACHE_LIMIT:
        self.cache.clear()
      self.cache[span] = tokens
    return tokens

  def _tokenize(self, string: str, with_specials: bool) -> tuple[str, ...]:
    # _split_affixes
    specials = self.specials if with_specials else {}
    prefixes: list[str] = []
    suffixes: list[str] = []
    last_size = 0
    while string and len(string) != last_size:
      if self.token_match is not None and self.token_match(string):
        break
      if string in specials:
        break
      last_size = len(string)
      pre_len = self._find_prefix(string)
      if pre_len != 0:
        prefix = string[:pre_len]
        minus_pre = string[pre_len:]
        if minus_pre and minus_pre in specials:
          string = minus_pre
          prefixes.append(prefix)
          break
      suf_len = self._find_suffix(string[pre_len:])
      if suf_len != 0:
        suffix = string[-suf_len:]
        minus_suf = string[:-suf_len]
        if minus_suf and minus_suf in specials:
          string = minus_suf
          suffixes.append(suffix)
          break
      if pre_len and suf_len and (pre_len + suf_len) <= len(string):
        string = string[pre_len:-suf_len]
        prefixes.append(prefix)
        suffixes.append(suffix)
      elif pre_len:
        string = minus_pre
        prefixes.append(prefix)
      elif suf_len:
        string = minus_suf
        suffixes.append(suffix)
    # _attach_tokens
    tokens = prefixes
    if string:
      special = specials.get(string)
      if special is not None:
        tokens.extend(special)
      elif ((self.token_match is not None and self.token_match(string))
            or (self.url_match is not None and self.url_match(string))):
        tokens.append(string)
      else:
        matches = list(self.infix_finditer(string)) if self.infix_finditer else []
        if not matches:
          tokens.append(string)
        else:
          start = 0
          for match in matches:
            infix_start, infix_end = match.start(), match.end()
            if infix_start == 0:
              continue
            if infix_start != start:
              tokens.append(string[start:infix_start])
            if infix_start != infix_end:
              tokens.append(string[infix_start:infix_end])
            start = infix_end
          if string[start:]:
            tokens.append(string[start:])
    tokens.extend(reversed(suffixes))
    return tuple(tokens)

  def tokens(self, text: str, with_specials: bool = True) -> list[tuple[int, str]]:
    """(offset, token text) of every token of `text` (Tokenizer.__call__)."""
    out: list[tuple[int, str]] = []
    for offset, chunk in chunks(text):
      for token in self.chunk(chunk, with_specials):
        out.append((offset, token))
        offset += len(token)
    if with_specials:
      out = self._apply_special_cases(text, out)
    return out

  def matches(self, texts: list[str]) -> list[tuple[int, int]]:
    """(start, end) token ranges where a special case's token sequence occurs."""
    found = []
    for i, text in enumerate(texts):
      for pattern, _ in self.patterns.get(text, ()):
        if tuple(texts[i:i + len(pattern)]) == pattern:
          found.append((i, i + len(pattern)))
    return found

  def _apply_special_cases(self, text: str, tokens: list[tuple[int, str]]):
    """Tokenizer._apply_special_cases: matched spans whose text is a special case become
    that special case's tokens (longest spans first, then leftmost; overlaps dropped)."""
    texts = [t for _, t in tokens]
    matches = self.matches(texts)
    if not matches:
      return tokens
    # _filter_special_spans: longest first, then smallest start; every candidate marks its
    # tokens seen, kept or not.
    seen: set[int] = set()
    kept = []
    for start, end in sorted(matches, key=lambda m: (-(m[1] - m[0]), m[0])):
      if start not in seen and end - 1 not in seen:
        kept.append((start, end))
      seen.update(range(start, end))
    out, i = [], 0
    by_start = dict(kept)
    while i < len(tokens):
      end = by_start.get(i)
      if end is None:
        out.append(tokens[i])
        i += 1
        continue
      offset = tokens[i][0]
      last = tokens[end - 1]
      span_text = text[offset:last[0] + len(last[1])]
      special = self.specials.get(span_text)
      if special is None:  # the span crosses whitespace: tokens unchanged
        out.extend(tokens[i:end])
      else:
        for token in special:
          out.append((offset, token))
          offset += len(token)
      i = end
    return out


def chunks(text: str) -> Iterator[tuple[int, str]]:
  """(offset, chunk) as spaCy's Tokenizer cuts a text before tokenizing each piece: runs of
  non-whitespace, and runs of whitespace less the single " " that follows a token (its
  trailing space)."""
  start = 0
  for ws in _WHITESPACE.finditer(text):
    if start < ws.start():
      yield start, text[start:ws.start()]
    start = ws.start() + 1 if text[ws.start()] == " " and ws.start() > 0 else ws.start()
    if start < ws.end():
      yield start, text[start:ws.end()]
    start = ws.end()
  if start < len(text):
    yield start, text[start:]
