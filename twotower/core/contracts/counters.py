"""Every Beam counter of the project, by stage: the keys of each stage's stats.json.

stats.json is flat (`{"counter_name": int, ...}`) and holds exactly the counters of
NAMESPACE, plus a few derived values (means, shares) that the stage adds. Stages increment
counters only through the names defined here, so that a reader of stats.json (a user, a
test, the experiment's tables) and the stage that writes it cannot drift apart.

Accounting that must balance (tests check it on every dump):
  pages_read = pages_kept + pages_redirect + sum(pages_skipped_<reason>)
  links_total = links_resolved + links_unresolved + links_redirect_loop
"""

from __future__ import annotations

import enum

#: The namespace of every counter the project defines.
NAMESPACE = "twotower"

# ---------------------------------------------------------------------------------------------
# twotower pairs: dump reading (pipelines.wiki.wikidump), parsing (wikitext), links, passages, pairs.
# ---------------------------------------------------------------------------------------------

DUMP_FILES_READ = "dump_files_read"
DUMP_FILES_UNREADABLE = "dump_files_unreadable"
DUMP_FILES_TRUNCATED = "dump_files_truncated"
DUMP_XML_ERRORS = "dump_xml_errors"
PAGES_READ = "pages_read"
PAGES_KEPT = "pages_kept"
PAGES_REDIRECT = "pages_redirect"
#: Hostile dumps (pipelines.wiki.wikidump): runs of whitespace between or inside tags cut to
#: text_stream.MAX_WHITESPACE_RUN characters, and runs of text between two tags longer than
#: text_stream.MAX_TEXT_RUN (the page holding one is skipped as too_large): each run counted.
DUMP_WHITESPACE_CAPPED = "dump_whitespace_capped"
DUMP_TEXT_CAPPED = "dump_text_capped"
#: Templates / links nested deeper than wikitext.MAX_NESTING, dropped whole (pipelines.wiki.wikitext).
MARKUP_TOO_DEEP = "markup_too_deep"


class PageSkip(enum.StrEnum):
  """Why a page that was read is not kept; counted as `pages_skipped_<reason>`."""
  # pipelines.wiki.wikidump: the <page> element cannot become a RawPage.
  MISSING_ID = "missing_id"
  BAD_ID = "bad_id"
  MISSING_NS = "missing_ns"
  BAD_NS = "bad_ns"
  MISSING_TITLE = "missing_title"
  NO_TEXT = "no_text"
  INVALID_UTF8 = "invalid_utf8"
  # pipelines.wiki.wikidump, pipelines.wiki.textdocs: a page id already read in the same input (a
  # repeated <id>, a repeated JSONL "id"): the first by file and position is kept.
  DUPLICATE_ID = "duplicate_id"
  # pipelines.wiki.wikidump: XML nested deeper than wikidump.MAX_XML_DEPTH inside the page.
  TOO_DEEP = "too_deep"
  # pipelines.wiki.wikitext: not an article, or nothing left after cleaning.
  NAMESPACE = "namespace"
  UNKNOWN_NAMESPACE = "unknown_namespace"
  BAD_REDIRECT = "bad_redirect"
  TOO_LARGE = "too_large"
  PARSE_ERROR = "parse_error"
  EMPTY = "empty"
  DISAMBIGUATION = "disambiguation"  # a disambiguation template, or "(disambiguation)" title
  # pipelines.wiki.links: a second page with a title already kept.
  DUPLICATE_TITLE = "duplicate_title"
  # pipelines.wiki.textdocs (extracted text: WikiExtractor output, JSONL documents): a record that
  # is not a document (a JSON line that is no object, a `<doc>` never closed), an id that is
  # no integer in [0, TEXT_ID_STRIDE), a title that is no valid page title.
  MALFORMED = "malformed"
  BAD_TITLE = "bad_title"
  # pipelines.wiki.qa_exclusion (`--exclude_qa`): a page titled as an article of the QA files
  # (or the target of a redirect from one's title), and a page under another title that
  # holds a paragraph of one.
  QA_ARTICLE = "qa_article"
  QA_PARAGRAPH = "qa_paragraph"


PAGES_SKIPPED_PREFIX = "pages_skipped_"

# pipelines.wiki.textdocs: files of extracted text (WikiExtractor output, JSONL documents).
TEXT_FILES_READ = "text_files_read"
TEXT_FILES_TRUNCATED = "text_files_truncated"
#: Text outside any `<doc>` of a WikiExtractor file (lines, not pages: no page is lost).
TEXT_STRAY_LINES = "text_stray_lines"


def pages_skipped(reason: PageSkip) -> str:
  return f"{PAGES_SKIPPED_PREFIX}{PageSkip(reason).value}"


# pipelines.wiki.qa_exclusion (`--exclude_qa`): what the QA files hold; the pages left out
# for them are `pages_skipped_qa_article` and `pages_skipped_qa_paragraph`.
QA_ARTICLES = "qa_articles"  # distinct article titles (normalised) of the QA files
QA_PARAGRAPHS = "qa_paragraphs"  # paragraphs with text, fingerprinted
QA_ARTICLES_REDIRECTED = "qa_articles_redirected"  # QA titles that are redirects in the inputs

LINKS_TOTAL = "links_total"
LINKS_RESOLVED = "links_resolved"
LINKS_UNRESOLVED = "links_unresolved"
LINKS_REDIRECT_LOOP = "links_redirect_loop"
LINKS_REDIRECT_TOO_DEEP = "links_redirect_too_deep"
LINKS_REDIRECT_DANGLING = "links_redirect_dangling"
LINKS_VIA_REDIRECT = "links_via_redirect"
LINKS_SELF = "links_self"
LINKS_DUPLICATE = "links_duplicate"
LINKS_RESOLVED_PERCENT = "links_resolved_percent"  # derived
# pipelines.wiki.title_links (`--recover_links`): links found as titles in text without links.
TITLE_LINKS_PAGES = "title_links_pages"  # pages searched
TITLE_LINKS_PAGES_WITH_LINKS = "title_links_pages_with_links"  # had links: not searched
TITLE_LINKS_FOUND = "title_links_found"  # = title_links_one_word + title_links_multi_word
TITLE_LINKS_ONE_WORD = "title_links_one_word"
TITLE_LINKS_MULTI_WORD = "title_links_multi_word"
TITLE_LINKS_VIA_ALIAS = "title_links_via_alias"  # a redirect's or a stripped qualifier's name
TITLE_LINKS_OWN_TITLE = "title_links_own_title"  # mentions of the page itself, not linked
TITLE_LINKS_HUB = "title_links_hub"  # found, left out: a target on too many pages
TITLE_LINKS_COMMON_WORDS = "title_links_common_words"  # one-word titles left out as common
TITLE_LINKS_DISAMBIGUATION = "title_links_disambiguation"  # pages that are no link target

class SectionSkip(enum.StrEnum):
  """Why a section of a kept page is not text (pipelines.wiki.nonprose), counted as
  `sections_skipped_<reason>`, its subsections with it."""
  REFERENCES = "references"      # References, Citations, Sources, Nūruodis, Atsauces ...
  NOTES = "notes"                # Notes, Footnotes, Piezīmes
  BIBLIOGRAPHY = "bibliography"  # Bibliography, Works cited, Literatura, Bibliografeja
  FURTHER_READING = "further_reading"
  EXTERNAL_LINKS = "external_links"  # External links, Teiklavītys, Ārējās saites
  SEE_ALSO = "see_also"          # See also, Verīs taipoš, Skatīt arī


def sections_skipped(reason: SectionSkip) -> str:
  return f"sections_skipped_{SectionSkip(reason).value}"


class PassageSkip(enum.StrEnum):
  """Why a packed passage is not written (pipelines.wiki.passages), `passages_skipped_<reason>`."""
  NO_SENTENCE = "no_sentence"   # under 24 words and no sentence end: a list fragment
  SHORT = "short"               # a sentence, but fewer words than min_passage_words (5)


def passages_skipped(reason: PassageSkip) -> str:
  return f"passages_skipped_{PassageSkip(reason).value}"


PASSAGES = "passages"
PASSAGES_LEAD = "passages_lead"
PASSAGES_PACKED = "passages_packed"
SENTENCES = "sentences"
PARAGRAPHS_CUT = "paragraphs_cut"
PAGES_WITHOUT_PASSAGES = "pages_without_passages"


def pairs(task: str, split: str = "") -> str:
  """Pairs of a task (`pairs_ict`), or of a task in a split other than train
  (`pairs_ict_heldout`)."""
  return f"pairs_{task}_{split}" if split else f"pairs_{task}"


def crop_skipped(reason: str) -> str:
  """Passages the crop task passed over, by reason (pipelines.wiki.pair_tasks.CropSkip):
  `crop_skipped_short`, `crop_skipped_deletion`. Counted only in runs with crop pairs."""
  return f"crop_skipped_{reason}"


def query_tokens(task: str) -> str:
  """Estimated word pieces of the queries of a task, summed (Table 1)."""
  return f"query_tokens_{task}"


def doc_tokens(task: str) -> str:
  return f"doc_tokens_{task}"


def mean_query_tokens(task: str) -> str:  # derived
  return f"mean_{query_tokens(task)}"


def mean_doc_tokens(task: str) -> str:  # derived
  return f"mean_{doc_tokens(task)}"


def per_input(index: int, name: str) -> str:
  """A counter of one input of a run over several (`twotower pairs --dump A,B`), by its
  position in the comma list: `input1_pages_read`, `input1_pairs_ict`."""
  return f"input{index}_{name}"


#: Prefix of the counters of the MediaWiki dumps of a run over several inputs, counted
#: together (dumps share one wiki's page-id space): `mediawiki_pages_kept`, `mediawiki_pairs_wlp`.
MEDIAWIKI_PREFIX = "mediawiki_"


#: Counters the pairs' stats.json always holds, 0 when nothing incremented them (Beam reports
#: only counters that were touched).
PAIRS_ALWAYS = (PAGES_READ, PAGES_KEPT, PAGES_REDIRECT, LINKS_TOTAL, LINKS_RESOLVED,
                LINKS_UNRESOLVED, LINKS_REDIRECT_LOOP, LINKS_VIA_REDIRECT, LINKS_SELF,
                PASSAGES, SENTENCES)
#: What the text cleanup (pipelines.wiki.nonprose) leaves out, always in a run that cleans.
CLEANUP_ALWAYS = (pages_skipped(PageSkip.DISAMBIGUATION),
                  *(sections_skipped(r) for r in SectionSkip),
                  *(passages_skipped(r) for r in PassageSkip))
#: What link recovery (`--recover_links`) counts, always in a run that recovers links.
TITLE_LINKS_ALWAYS = (TITLE_LINKS_PAGES, TITLE_LINKS_PAGES_WITH_LINKS, TITLE_LINKS_FOUND,
                      TITLE_LINKS_ONE_WORD, TITLE_LINKS_MULTI_WORD, TITLE_LINKS_VIA_ALIAS,
                      TITLE_LINKS_OWN_TITLE, TITLE_LINKS_HUB, TITLE_LINKS_COMMON_WORDS,
                      TITLE_LINKS_DISAMBIGUATION)
#: What the QA exclusion (`--exclude_qa`) counts, always in a run that excludes.
QA_EXCLUSION_ALWAYS = (QA_ARTICLES, QA_PARAGRAPHS, QA_ARTICLES_REDIRECTED,
                       pages_skipped(PageSkip.QA_ARTICLE), pages_skipped(PageSkip.QA_PARAGRAPH))

# ---------------------------------------------------------------------------------------------
# twotower reqa (pipelines.reqa.squad, nq, reqa).
# ---------------------------------------------------------------------------------------------

ARTICLES_SKIPPED_MISSING_FIELD = "articles_skipped_missing_field"
PARAGRAPHS_READ = "paragraphs_read"
PARAGRAPHS_USED = "paragraphs_used"
PARAGRAPHS_SKIPPED_EMPTY = "paragraphs_skipped_empty"
PARAGRAPHS_SKIPPED_MISSING_FIELD = "paragraphs_skipped_missing_field"
PARAGRAPHS_WITHOUT_QUESTIONS = "paragraphs_without_questions"
QUESTIONS = "questions"
QUESTION_GROUPS = "question_groups"
QUESTIONS_SKIPPED_MALFORMED = "questions_skipped_malformed"
QUESTIONS_SKIPPED_MISSING_FIELD = "questions_skipped_missing_field"
QUESTIONS_SKIPPED_UNANSWERABLE = "questions_skipped_unanswerable"
QUESTIONS_SKIPPED_NO_ANSWER = "questions_skipped_no_answer"
QUESTIONS_SKIPPED_NO_VALID_ANSWER = "questions_skipped_no_valid_answer"
QUESTIONS_SKIPPED_EMPTY_PASSAGE = "questions_skipped_empty_passage"
QUESTIONS_SKIPPED_DUPLICATE_ID = "questions_skipped_duplicate_id"
#: A question id shared by different questions (question texts): each text after the first
#: (by text) gets the id "<id>#<n>" (pipelines.reqa.builder), so no two questions share an id.
QUESTIONS_RENAMED_DUPLICATE_ID = "questions_renamed_duplicate_id"
ANSWERS_START_FIXED = "answers_start_fixed"
ANSWERS_BETWEEN_SENTENCES = "answers_between_sentences"
ANSWERS_SKIPPED_TEXT_NOT_FOUND = "answers_skipped_text_not_found"
ANSWERS_SKIPPED_OUTSIDE_SENTENCES = "answers_skipped_outside_sentences"
CANDIDATES = "candidates"
CANDIDATES_EXTRA = "candidates_extra"
CANDIDATES_EXTRA_SKIPPED_REQA_PASSAGE = "candidates_extra_skipped_reqa_passage"
CANDIDATES_EXTRA_SKIPPED_REQA_PAGE = "candidates_extra_skipped_reqa_page"
GOLD_CANDIDATES = "gold_candidates"
REQA_QA_INPUTS = "reqa_qa_inputs"
NQ_RECORDS_READ = "nq_records_read"
NQ_SKIPPED_MALFORMED = "nq_skipped_malformed"
NQ_SKIPPED_MALFORMED_JSON = "nq_skipped_malformed_json"
NQ_SKIPPED_MISSING_FIELD = "nq_skipped_missing_field"
NQ_SKIPPED_NO_LONG_ANSWER = "nq_skipped_no_long_answer"
NQ_SKIPPED_NOT_ONE_SHORT_ANSWER = "nq_skipped_not_one_short_answer"
NQ_SKIPPED_BAD_OFFSETS = "nq_skipped_bad_offsets"
NQ_SKIPPED_NOT_PARAGRAPH = "nq_skipped_not_paragraph"
NQ_SKIPPED_EMPTY_ANSWER = "nq_skipped_empty_answer"


def questions_in(split: str) -> str:
  """Questions written to a ReQA split (`questions_test_5`)."""
  return f"questions_{split.replace('-', '_')}"


# ---------------------------------------------------------------------------------------------
# twotower embed (pipelines.embed).
# ---------------------------------------------------------------------------------------------

EMBED_ROWS_READ = "embed_rows_read"
EMBED_ROWS_EMBEDDED = "embed_rows_embedded"
EMBED_ROWS_SKIPPED_EMPTY = "embed_rows_skipped_empty"
EMBED_ROWS_SKIPPED_BAD_ID = "embed_rows_skipped_bad_id"  # missing, or out of passage_uid range
#: Counters the embed stats.json always holds (0 when nothing incremented them).
EMBED_ALWAYS = (EMBED_ROWS_READ, EMBED_ROWS_EMBEDDED, EMBED_ROWS_SKIPPED_EMPTY,
                EMBED_ROWS_SKIPPED_BAD_ID)

# ---------------------------------------------------------------------------------------------
# twotower heldout (pipelines.reqa.heldout): its stats.json also holds QUESTIONS and CANDIDATES.
# ---------------------------------------------------------------------------------------------

HELDOUT_PAGES = "heldout_pages"

# ---------------------------------------------------------------------------------------------
# twotower hardneg (pipelines.hardneg): BM25 hard negatives of the ReQA fine-tuning pairs.
# ---------------------------------------------------------------------------------------------

HARDNEG_CANDIDATES_INDEXED = "hardneg_candidates_indexed"
HARDNEG_QUESTION_TEXTS_SEARCHED = "hardneg_question_texts_searched"  # distinct, all ratios


class HardNeg(enum.StrEnum):
  """What `twotower hardneg` counts per training split, as `hardneg_<what>_<split>`."""
  QUESTIONS = "questions"                # question records of questions-<split>.parquet
  PAIRS = "pairs"                        # fine-tuning pairs read, and written again
  PAIRS_WITHOUT_QUESTION = "pairs_without_question"  # query text not in questions-<split>
  NEGATIVES = "negatives"                # hard negatives written, summed over pairs
  QUESTIONS_SHORT = "questions_short"    # questions given fewer than k negatives (none too)
  QUESTIONS_NONE = "questions_none"      # questions given no negative at all
  # BM25 hits passed over before k negatives were found, per question:
  HITS_SKIPPED_GOLD = "hits_skipped_gold"          # a gold of the question
  HITS_SKIPPED_SIBLING = "hits_skipped_sibling"    # another sentence of a gold's passage
  HITS_SKIPPED_GOLD_SENTENCE = "hits_skipped_gold_sentence"  # its passage holds a gold's sentence


def hardneg(what: HardNeg, split: str) -> str:
  """`hardneg_questions_short_train_5`."""
  return f"hardneg_{what}_{split.replace('-', '_')}"
