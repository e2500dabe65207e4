"""The paper's three pre-training tasks, and Contriever's, as pure functions over one page's
passages.

    ICT  q = a random sentence s of a passage p;       d = title + (p without s)
    BFS  q = a random sentence of the lead section;   d = another random passage of the page
    WLP  q = a random sentence of page A's lead;       d = a passage of a page B linking to A
    crop q = a random span of a passage p;             d = title + another, independent span
         of p (Contriever, Izacard et al., TMLR 2022; off unless `crop_per_page` > 0)

Nothing here imports Beam: `pipelines.wiki.pairs` wires these into joins, tests call them directly.

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
  * crop works on a passage (Contriever crops a 256-token chunk of a document) and on its
    whitespace words (Contriever's are word pieces: nothing here has a vocabulary yet). Each
    crop's length is `int(words x ratio)`, ratio uniform in [crop_min_ratio, crop_max_ratio],
    its start uniform among the positions where it fits; then each of its words is dropped
    with probability `crop_delete_prob`. A passage whose shortest possible crop has fewer than
    `min_query_words` (or `min_doc_words`) words is skipped, and so is a pair that deletion
    leaves shorter than these (both counted by `pipelines.wiki.pairs`, see CropSkip).
"""

from __future__ import annotations

import dataclasses
import enum
import heapq
import math
import random
from typing import Iterable, MutableMapping, Sequence

from twotower.core.contracts import (CROP_TASK, PRETRAIN_TASKS, Pair, Passage, stable_hash,
                                title_with_section)

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
  """Sampling knobs of the tasks (flags of `twotower pairs`).

  The crop_* fields are Contriever's task (Izacard et al., TMLR 2022), off by default; their
  defaults are the options of Contriever's training command (its README: `--ratio_min 0.1
  --ratio_max 0.5 --augmentation delete --prob_augmentation 0.1`). While the task is off
  they are left out of the settings a run records (`settings()`), so that outputs, manifests
  and experiment keys stay those of the runs made before the task existed.
  """
  ict_per_page: int = 4        # passages per page that each give one ICT pair
  bfs_per_page: int = 2        # BFS pairs per page
  wlp_per_page: int = 2        # WLP pairs per linked-to page (one per sampled inlinking page)
  ict_keep_prob: float = 0.0   # probability that ICT keeps the query in its document
  min_query_words: int = 5     # shortest query, in whitespace words
  min_doc_words: int = 5       # shortest document text, in whitespace words
  crop_per_page: int = 0       # passages per page that each give one crop pair; 0 = task off
  crop_min_ratio: float = 0.1  # shortest crop, as a share of the passage's words
  crop_max_ratio: float = 0.5  # longest crop, as a share of the passage's words
  crop_delete_prob: float = 0.1  # probability that a crop drops each of its words
  # The document tower reads "Title › Section" as the document's title (Passage.section);
  # off by default until a grid row shows it helps, and then absent from settings().
  doc_title_section: bool = False

  def __post_init__(self):
    check_crop(self)

  @property
  def tasks(self) -> tuple[str, ...]:
    """The tasks a run with these settings writes: the paper's three, + crop when on."""
    return PRETRAIN_TASKS + ((CROP_TASK,) if self.crop_per_page > 0 else ())

  def settings(self) -> dict:
    """The fields as a run records them (config.json, manifest, experiment cell params):
    every field, but the crop_* ones only while the task is on."""
    fields = dataclasses.asdict(self)
    if self.crop_per_page <= 0:
      fields = {k: v for k, v in fields.items() if not k.startswith(CROP_PREFIX)}
    if not self.doc_title_section:
      fields.pop("doc_title_section")
    return fields

  def doc_title(self, passage: Passage) -> str:
    """The title a pair's document shows the document tower."""
    if self.doc_title_section:
      return title_with_section(passage.title, passage.section)
    return passage.title


#: PairConfig fields of the crop task, dropped from its settings while the task is off.
CROP_PREFIX = "crop_"


def check_crop(config: PairConfig) -> None:
  """Refuses crop options that cannot be sampled, naming the option and the value."""
  if config.crop_per_page < 0:
    raise ValueError(f"crop_per_page must be >= 0 (0 = no crop pairs), got "
                     f"{config.crop_per_page}")
  for name in ("crop_min_ratio", "crop_max_ratio"):
    value = getattr(config, name)
    if not 0 < value <= 1:
      raise ValueError(f"{name} must be in (0, 1] (a share of the passage's words), got "
                       f"{value}")
  if config.crop_min_ratio > config.crop_max_ratio:
    raise ValueError(f"crop_min_ratio ({config.crop_min_ratio}) must be <= crop_max_ratio "
                     f"({config.crop_max_ratio})")
  if not 0 <= config.crop_delete_prob < 1:
    raise ValueError(f"crop_delete_prob must be in [0, 1), got {config.crop_delete_prob}")


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
    pairs.append(Pair("ict", query, config.doc_title(passage), doc_text, passage.page_id,
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
    pairs.append(Pair("bfs", query, config.doc_title(doc), doc.text, doc.page_id, doc.page_id,
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
  return Pair("wlp", request.query, config.doc_title(doc), doc.text, request.query_page_id,
              doc.page_id, doc.passage_id)


class CropSkip(enum.StrEnum):
  """Why crop passes over a passage (counted as `crop_skipped_<reason>` by pipelines.wiki.pairs)."""
  SHORT = "short"        # its shortest crop would have fewer than min_query/doc_words words
  DELETION = "deletion"  # a chosen passage whose crop word deletion left too few words


def crop_span(n_words: int, config: PairConfig, rng: random.Random) -> tuple[int, int]:
  """(start, end) of one random crop of a text of `n_words` words: length int(n x ratio),
  ratio uniform in [crop_min_ratio, crop_max_ratio]; start uniform where it fits."""
  length = int(n_words * rng.uniform(config.crop_min_ratio, config.crop_max_ratio))
  start = rng.randint(0, n_words - length)
  return start, start + length


def _min_crop_words(config: PairConfig) -> int:
  return max(config.min_query_words, config.min_doc_words, 1)


def croppable(passage: Passage, config: PairConfig) -> bool:
  """Whether the passage's shortest possible crop still has the words a query and a
  document need."""
  return int(len(passage.text.split()) * config.crop_min_ratio) >= _min_crop_words(config)


def crop_pairs(passages: Sequence[Passage], config: PairConfig,
               skipped: MutableMapping[str, int] | None = None) -> list[Pair]:
  """Contriever's pairs of one page: `crop_per_page` croppable passages (random, without
  replacement), each giving two independent random crops, query and document (+ title),
  after word deletion.

  Args:
    skipped: when given, counts what was passed over, by CropSkip reason (the one effect
      of this function; pipelines.wiki.pairs turns it into counters).
  """
  if not passages or config.crop_per_page <= 0:
    return []
  passages = sorted(passages, key=lambda p: p.passage_id)
  page_id = passages[0].page_id
  eligible = [p for p in passages if croppable(p, config)]
  if skipped is not None and len(eligible) < len(passages):
    skipped[CropSkip.SHORT] = skipped.get(CropSkip.SHORT, 0) + len(passages) - len(eligible)
  chosen = rng_for("crop", page_id).sample(eligible, min(config.crop_per_page, len(eligible)))
  pairs = []
  for passage in sorted(chosen, key=lambda p: p.passage_id):
    # A passage's crops depend on it alone, not on which other passages were chosen.
    rng = rng_for("crop", page_id, passage.passage_id)
    words = passage.text.split()
    crops = []
    for _ in range(2):  # query, then document: drawn independently
      start, end = crop_span(len(words), config, rng)
      crops.append([w for w in words[start:end] if rng.random() >= config.crop_delete_prob])
    query, doc = crops
    if len(query) < config.min_query_words or len(doc) < config.min_doc_words:
      if skipped is not None:
        skipped[CropSkip.DELETION] = skipped.get(CropSkip.DELETION, 0) + 1
      continue
    pairs.append(Pair(CROP_TASK, " ".join(query), config.doc_title(passage), " ".join(doc),
                      page_id, page_id, passage.passage_id))
  return pairs
