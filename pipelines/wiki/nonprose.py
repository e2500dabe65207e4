"""What of a page is not prose: reference-like sections, disambiguation pages, stub passages.

* Sections whose heading names references, notes, a bibliography, further reading, external
  links or "see also" (English, Latgalian as ltgwiki writes them, Latvian) are no text, with
  their subsections; `section_reason` gives the counter's reason (counters.SectionSkip).
  Headings are matched whole, case-folded, without a trailing colon: "Literature" (a prose
  section of a culture article) is kept, "Further reading" is not.
* A disambiguation page (pipelines.wiki.templates.DISAMBIGUATION, or a title ending in
  "(disambiguation)") is no article.
* A passage is a stub (`stub_reason`) when it has no sentence end (. ! ? and the like) and
  fewer than 24 words (`NO_SENTENCE_MAX_WORDS`: "Notes Bibliography", "Outline of Angola
  Index of Angola-related articles", a packed list fragment "Lviv, Ukraine (2005)
  California, United States (1997)"), or fewer than `PassageConfig.min_passage_words`
  words at all (5 by default: "Hair dryer (1.8 kW): 15 A."). A short whole sentence stays
  ("Aužguļāni — sola Daugpiļs nūvoda Leiksnys pogostā.", all of a small wiki's village
  article), and so does a longer list without a sentence end (a bibliography of novels with
  their years, a taxonomy): they answer questions.
"""

from __future__ import annotations

import re
from typing import Optional

from twotower.core.contracts import counters as C

_R = C.SectionSkip
#: Case-folded heading -> why its section is dropped. Latgalian headings measured on the
#: shared ltgwiki dump (`python -m benchmarks.passage_quality --headings`).
NON_PROSE_HEADINGS: dict[str, C.SectionSkip] = {
    # English
    "references": _R.REFERENCES, "citations": _R.REFERENCES, "sources": _R.REFERENCES,
    "reference": _R.REFERENCES, "source": _R.REFERENCES, "cited sources": _R.REFERENCES,
    "references and notes": _R.REFERENCES, "notes and references": _R.REFERENCES,
    "footnotes and references": _R.REFERENCES, "references and footnotes": _R.REFERENCES,
    "notes and citations": _R.REFERENCES, "citations and notes": _R.REFERENCES,
    "sources and references": _R.REFERENCES, "references and sources": _R.REFERENCES,
    "notes": _R.NOTES, "footnotes": _R.NOTES, "explanatory notes": _R.NOTES,
    "notes and sources": _R.NOTES, "endnotes": _R.NOTES,
    "bibliography": _R.BIBLIOGRAPHY, "works cited": _R.BIBLIOGRAPHY,
    "selected bibliography": _R.BIBLIOGRAPHY, "general bibliography": _R.BIBLIOGRAPHY,
    "further reading": _R.FURTHER_READING, "additional reading": _R.FURTHER_READING,
    "references and further reading": _R.FURTHER_READING,
    "sources and further reading": _R.FURTHER_READING,
    "external links": _R.EXTERNAL_LINKS, "external link": _R.EXTERNAL_LINKS,
    "links": _R.EXTERNAL_LINKS, "further reading and external links": _R.EXTERNAL_LINKS,
    "see also": _R.SEE_ALSO, "related articles": _R.SEE_ALSO, "related pages": _R.SEE_ALSO,
    # Latgalian (ltgwiki)
    "nūruodis": _R.REFERENCES, "nūruodis i olūti": _R.REFERENCES, "olūti": _R.REFERENCES,
    "atsaucis": _R.REFERENCES, "referencejis": _R.REFERENCES,
    "literatura": _R.BIBLIOGRAPHY, "literatūra": _R.BIBLIOGRAPHY,
    "izmantuotuo literatūra": _R.BIBLIOGRAPHY, "izmantuotuo literatura": _R.BIBLIOGRAPHY,
    "bibliografeja": _R.BIBLIOGRAPHY,
    "teiklavītys": _R.EXTERNAL_LINKS, "teiklavīta": _R.EXTERNAL_LINKS,
    "uorejuos nūruodis": _R.EXTERNAL_LINKS, "uorejuos saitis": _R.EXTERNAL_LINKS,
    "verīs taipoš": _R.SEE_ALSO,
    # Latvian (lvwiki)
    "atsauces": _R.REFERENCES, "avoti": _R.REFERENCES, "atsauces un piezīmes": _R.REFERENCES,
    "piezīmes": _R.NOTES, "izmantotā literatūra": _R.BIBLIOGRAPHY,
    "papildu literatūra": _R.FURTHER_READING, "ārējās saites": _R.EXTERNAL_LINKS,
    "skatīt arī": _R.SEE_ALSO,
}

_TRIM = re.compile(r"[\s:.]+$")


def section_reason(heading: str) -> Optional[C.SectionSkip]:
  """Why a section with this (cleaned) heading is not prose, or None when it is."""
  return NON_PROSE_HEADINGS.get(_TRIM.sub("", heading).strip().casefold())


#: Title qualifiers of disambiguation pages (English, Latgalian, Latvian).
_DISAMBIGUATION_TITLE = re.compile(
    r"\((?:disambiguation|zeimeibu škiršona|nozīmju atdalīšana)\)$", re.IGNORECASE)


def is_disambiguation_title(title: str) -> bool:
  return bool(_DISAMBIGUATION_TITLE.search(title))


#: A sentence end: . ! ? … and the CJK, Arabic and Devanagari full stops, possibly followed
#: by closing quotes or brackets.
_SENTENCE_END = re.compile(r"[.!?…。！？؟।]")


#: A passage without a sentence end is a stub under this many words.
NO_SENTENCE_MAX_WORDS = 24


def stub_reason(text: str, min_words: int) -> Optional[C.PassageSkip]:
  """Why a passage is a stub (too short; short and no sentence), or None when it is kept."""
  words = len(text.split())
  if words < NO_SENTENCE_MAX_WORDS and not _SENTENCE_END.search(text):
    return C.PassageSkip.NO_SENTENCE
  if words < min_words:
    return C.PassageSkip.SHORT
  return None
