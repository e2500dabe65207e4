"""The paper's three pre-training tasks as pure functions over one page's passages.

    ICT  q = a random sentence s of a passage p;       d = title + (p without s)
    BFS  q = a random sentence of the lead section;   d = another random passage of the page
    WLP  q = a random sentence of page A's lead;       d = a passage of a page B linking to A

Nothing here imports Beam: `pipelines.pairs` wires these into joins, tests call them directly.

Determinism: every random choice comes from `rng_for(task, page_id, ...)`, a
`random.Random` seeded by a stable hash (blake2b, never Python's salted `hash`) of the task
name and the page ids, and every choice is made over inputs sorted by id. So a page yields
the same pairs on any runner, with any parallelism, in any bundle order.

Choices the paper leaves open, decided here:
  * ICT removes the query sentence (every copy of it) from the document, as the paper
    describes ICT; `ict_keep_prob` > 0 keeps it with that probability instead (ORQA's
    variant, Lee et al. 2019, which keeps it 10 % of the time; not in this paper). Passages
    with fewer than 2 sentences are skipped.
  * BFS draws the document among the page's passages *other than* the one holding the query
    sentence: a document containing its own query is the ICT-keep case, not BFS. A page with a
    single passage yields no BFS pair.
  * WLP prefers a passage of B that mentions A: A's title, or a link target title B used
    for A (the normalised `[[target]]`, e.g. a redirect's name; not the anchor text, which
    the cleaned page no longer marks), case insensitive; B's other passages are the
    fallback.
  * Queries have at least `min_query_words` whitespace words (default 5), so that headings
    and list fragments do not become queries.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
from typing import Iterable, Sequence

from twotower.contracts import Pair, Passage, stable_hash

#: Cheap word-piece estimate used before any vocabulary exists: whitespace words x 1.3
#: (English BERT-style vocabularies give 1.2-1.4 pieces per word on Wikipedia text).
WORDPIECES_PER_WORD = 1.3


def estimate_wordpieces(text: str) -> int:
  """ceil(whitespace words x 1.3): an upper-ish estimate of a text's word pieces."""
  return math.ceil(len(text.split()) * WORDPIECES_PER_WORD)


def rng_for(task: str, *ids: object) -> random.Random:
  return random.Random(stable_hash(task, *ids))


@dataclasses.dataclass(frozen=True)
class PairConfig:
  """Sampling knobs of the three tasks (flags of `twotower pairs`)."""
  ict_per_page: int = 4        # passages per page that each give one ICT pair
  bfs_per_page: int = 2        # BFS pairs per page
  wlp_per_page: int = 2        # WLP pairs per linked-to page (one per sampled inlinking page)
  ict_keep_prob: float = 0.0   # probability that ICT keeps the query in its document
  min_query_words: int = 5     # shortest query, in whitespace words
  min_doc_words: int = 5       # shortest document text, in whitespace words


def _ok_query(sentence: str, config: PairConfig) -> bool:
  return len(sentence.split()) >= config.min_query_words


def lead_sentences(passages: Sequence[Passage],
                   config: PairConfig) -> list[tuple[str, int]]:
  """(sentence, passage_id) of every usable query sentence of the lead, in page order."""
  return [(s, p.passage_id) for p in sorted(passages, key=lambda p: p.passage_id) if p.is_lead
          for s in p.sentences if _ok_query(s, config)]


def ict_pairs(passages: Sequence[Passage], config: PairConfig) -> list[Pair]:
  """ICT pairs of one page: `ict_per_page` passages (random, without replacement), one
  random query sentence each; the document is the title + the passage without the query."""
  if not passages:
    return []
  passages = sorted(passages, key=lambda p: p.passage_id)
  rng = rng_for("ict", passages[0].page_id)
  eligible = [p for p in passages
              if len(p.sentences) >= 2 and any(_ok_query(s, config) for s in p.sentences)]
  chosen = rng.sample(eligible, min(config.ict_per_page, len(eligible)))
  pairs = []
  for passage in sorted(chosen, key=lambda p: p.passage_id):
    query = rng.choice([s for s in passage.sentences if _ok_query(s, config)])
    keep = config.ict_keep_prob > 0 and rng.random() < config.ict_keep_prob
    rest = passage.sentences if keep else tuple(s for s in passage.sentences if s != query)
    doc_text = " ".join(rest)
    if len(doc_text.split()) < config.min_doc_words or (not keep and query in doc_text):
      continue  # too little left, or the query survives inside another sentence
    pairs.append(Pair("ict", query, passage.title, doc_text, passage.page_id,
                      passage.page_id, passage.passage_id))
  return pairs


def bfs_pairs(passages: Sequence[Passage], config: PairConfig) -> list[Pair]:
  """BFS pairs of one page: a random lead sentence against a random passage of the same page
  other than the one holding the sentence; up to `bfs_per_page` distinct queries."""
  if not passages:
    return []
  passages = sorted(passages, key=lambda p: p.passage_id)
  rng = rng_for("bfs", passages[0].page_id)
  queries = lead_sentences(passages, config)
  docs = [p for p in passages if len(p.text.split()) >= config.min_doc_words]
  pairs = []
  for query, query_passage in rng.sample(queries, min(config.bfs_per_page, len(queries))):
    candidates = [p for p in docs if p.passage_id != query_passage]
    if not candidates:
      continue
    doc = rng.choice(candidates)
    pairs.append(Pair("bfs", query, doc.title, doc.text, doc.page_id, doc.page_id,
                      doc.passage_id))
  return pairs


@dataclasses.dataclass(frozen=True)
class WlpRequest:
  """Half a WLP pair, decided on the query side (page A), waiting for B's passages."""
  query: str
  query_page_id: int
  query_title: str
  doc_page_id: int
  mentions: tuple[str, ...]  # A's title and the link target titles B used for A


def wlp_requests(page_id: int, title: str, lead: Sequence[tuple[str, int]],
                 inlinks: Iterable[tuple[int, Sequence[str]]],
                 config: PairConfig) -> list[WlpRequest]:
  """Page A's side of WLP: `wlp_per_page` inlinking pages B (those of smallest stable hash:
  random, without replacement), each with a random lead sentence of A as the query.

  Args:
    page_id, title: page A.
    lead: A's usable lead sentences, `lead_sentences(...)`.
    inlinks: (B's page id, the link titles B used for A), any order.
  """
  if not lead:
    return []
  # The k inlinks of smallest stable hash: a deterministic sample in O(k) memory, so that a
  # page with millions of inlinks (a hot key) is not sorted whole.
  chosen = heapq.nsmallest(config.wlp_per_page,
                           ((int(b), tuple(sorted(t))) for b, t in inlinks),
                           key=lambda bt: (stable_hash("wlp", page_id, bt[0]), bt[0]))
  rng = rng_for("wlp", page_id)
  return [WlpRequest(rng.choice(lead)[0], page_id, title, b,
                     tuple(sorted({title, *link_titles})))
          for b, link_titles in sorted(chosen)]


def wlp_pair(request: WlpRequest, passages: Sequence[Passage],
             config: PairConfig) -> Pair | None:
  """B's side of WLP: a passage of B that mentions A if any, else any passage of B."""
  docs = [p for p in sorted(passages, key=lambda p: p.passage_id)
          if len(p.text.split()) >= config.min_doc_words]
  if not docs:
    return None
  rng = rng_for("wlp", request.query_page_id, request.doc_page_id)
  mentions = [m.lower() for m in request.mentions if m]
  mentioning = [p for p in docs if any(m in p.text.lower() for m in mentions)]
  doc = rng.choice(mentioning or docs)
  return Pair("wlp", request.query, doc.title, doc.text, request.query_page_id,
              doc.page_id, doc.passage_id)
