"""A grid's tables and reading again without the test questions whose article its
pre-training read, computed from the ranks the results folder keeps (no cell runs again):

    <results>/excluded-questions.json   the questions, why, and how they were found (written
                                         once: python -m twotower.experiment.leaked_questions)
    <results>/leak-free/                 every table (Markdown), summary.md, results.json and
                                         reading.md without them; reading-changes.md: the
                                         reading on every question against this one
    <results>/headline.md                the headline comparison both ways (`headline_markdown`)

experiment.render writes them whenever the results folder holds the excluded-questions file,
so `python -m twotower.experiment.rerender` needs neither the QA file nor the dumps.

Each table entry's questions are the ones it was scored on (its cell's ranks, or its split's
questions for a BM25 cell that ranks every split at once: readings.split_questions) less the
excluded ones; its metrics are computed again from the gold ranks, which give back the
recorded metrics exactly on the full question set (an entry whose ranks do not is left out,
with a warning, rather than shown wrong). The candidates stay as they were: the article's
passages are still in every pool, as distractors for the other questions.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Mapping, Optional, Sequence

import numpy as np

from twotower.core import files as tio
from twotower.experiment import bootstrap, readings
from twotower.experiment.grid import GridSpec
from twotower.experiment.readings import Comparison, RanksOf

logger = logging.getLogger(__name__)

EXCLUDED_FILE = "excluded-questions.json"
FOLDER = "leak-free"
HEADLINE_FILE = "headline.md"
#: The headline comparison: the first pair of this claim (the pooled ICT+BFS+WLP row against
#: BM25), at every ratio and on every metric the claim reads.
HEADLINE_CLAIM = "dense-over-bm25"
#: A recomputed metric further than this from the recorded one: the ranks are not the entry's.
_TOLERANCE = 1e-9


@dataclasses.dataclass(frozen=True)
class Article:
  """One QA article the pre-training read: its title, the input that holds it, its
  questions' ids."""
  title: str
  found_in: str
  questions: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Excluded:
  """The questions to leave out, by article."""
  articles: tuple[Article, ...]

  @property
  def questions(self) -> frozenset:
    return frozenset(q for a in self.articles for q in a.questions)

  def text(self) -> str:
    """"\"Anthropology\" (222 questions, a page of `enwiki-slice-....xml.bz2`)"."""
    return "; ".join(f"\"{a.title}\" ({len(a.questions)} questions, a page of `{a.found_in}`)"
                     for a in self.articles)


def read(results_dir: str) -> Optional[Excluded]:
  """The results folder's excluded questions (None: the folder has no such file)."""
  path = os.path.join(results_dir, EXCLUDED_FILE)
  if not os.path.exists(path):
    return None
  content = tio.read_json(path)
  try:
    return Excluded(tuple(Article(a["title"], a["found_in"], tuple(a["question_ids"]))
                          for a in content["articles"]))
  except (KeyError, TypeError) as e:
    raise ValueError(f"{path}: not an excluded-questions file ({e!r} missing or malformed); "
                     "write it with python -m twotower.experiment.leaked_questions") from None


def filtered(ranks_of: RanksOf, excluded: Excluded) -> RanksOf:
  """`ranks_of` without the excluded questions (the same object per cell name: the
  bootstrap's Resampler knows a run by it)."""
  cache: dict[str, Optional[Mapping[str, Optional[int]]]] = {}
  left_out = excluded.questions

  def ranks(name: str) -> Optional[Mapping[str, Optional[int]]]:
    if name not in cache:
      full = ranks_of(name)
      cache[name] = None if full is None else {
          q: r for q, r in full.items() if q not in left_out}
    return cache[name]
  return ranks


def values(results: Mapping, ranks_of: RanksOf, excluded: Excluded
           ) -> tuple[dict[tuple[str, str], dict], list[str]]:
  """({(cell, split): record} of every entry of `results` (results.json) without the
  excluded questions, [the cells left out: no ranks, no question list, or ranks that do not
  give back the recorded metrics])."""
  split_ids = readings.split_questions(results, ranks_of)
  excluded_ids = excluded.questions
  out: dict[tuple[str, str], dict] = {}
  left_out: list[str] = []
  for e in results.get("per_seed", ()):
    record = e.get("record")
    if not record:
      continue
    ranks = ranks_of(e["cell"])
    ids = None if ranks is None else (
        sorted(ranks) if record.get("questions") == len(ranks) else
        sorted(split_ids(e["split"]) or ()) or None)
    if ids is None:
      left_out.append(e["cell"])
      continue
    every = bootstrap.run_ranks(ranks, ids)
    if any(abs(_metric(every, m) - v) > _TOLERANCE for m, v in record["metrics"].items()):
      logger.warning("%s (%s): its ranks do not give back its recorded metrics; left out of "
                     "the variant without the excluded questions", e["cell"], e["split"])
      left_out.append(e["cell"])
      continue
    kept = [q for q in ids if q not in excluded_ids]
    held = bootstrap.run_ranks(ranks, kept)
    out[(e["cell"], e["split"])] = dict(
        record, questions=len(kept), excluded_questions=len(ids) - len(kept),
        metrics={m: _metric(held, m) for m in record["metrics"]})
  return out, sorted(set(left_out))


def _metric(ranks: np.ndarray, metric: str) -> float:
  """A table's metric (a fraction, as records keep it) from gold ranks."""
  return float(np.mean(bootstrap.metric_values(ranks, metric))) / 100


def note(excluded: Excluded, left_out: Sequence[str] = ()) -> str:
  """The paragraph that heads each page of the variant."""
  total = (f", {len(excluded.questions):,} questions in all" if len(excluded.articles) > 1
           else "")
  text = (f"**Without the test questions whose article the pre-training read**: "
          f"{excluded.text()}{total}, listed in `{EXCLUDED_FILE}` (how they were found: its "
          "`command`). Every number below is "
          "computed again from the committed per-question ranks without them; the candidate "
          "pools are unchanged (the article's passages stay in them as distractors).")
  if left_out:
    text += (f" {len(left_out)} result cells without usable ranks are left out: "
             + ", ".join(f"`{c}`" for c in left_out) + ".")
  return text


def headline_markdown(spec: GridSpec, full: Sequence[Comparison],
                      without: Sequence[Comparison], excluded: Excluded) -> str:
  """The headline comparison (HEADLINE_CLAIM's first pair) at every ratio and metric, on every
  question and without the excluded ones, side by side ("" where the grid has no such
  claim or no comparison of it)."""
  def first_pair(comparisons: Sequence[Comparison]) -> dict[tuple, Comparison]:
    return {(c.dataset, c.ratio, c.metric): c for c in comparisons
            if c.claim == HEADLINE_CLAIM and c.pair == 0}
  every, leak_free = first_pair(full), first_pair(without)
  if not every:
    return ""
  claim = next(c for c in spec.readings if c.id == HEADLINE_CLAIM)
  some = next(iter(every.values()))
  several = len({key[0] for key in every}) > 1
  lines = [f"# The headline: {some.a.label} against {some.b.label}, with and without the "
           "article the pre-training read", "",
           "Generated by `twotower/experiment/leak_free.py` from `reading.md` and "
           f"`{FOLDER}/reading.md`; do not edit by hand. The first pair of "
           f"[{HEADLINE_CLAIM}](reading.md#{HEADLINE_CLAIM}) (\"{claim.sentence}\", Table "
           f"{claim.table}) at every ratio: on every test question, and without the "
           f"questions of {excluded.text()}. A − B is the dense "
           "row's gain over BM25 with its seed-aware 95 % interval (seeds, then questions); "
           "Δ is what leaving the questions out moves it by.", "",
           "| ratio | metric | A, all | A, without | B, all | B, without | A − B, all | "
           "A − B, without | Δ (A − B) | verdict, all | verdict, without |",
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
  for key, c in every.items():
    d = leak_free.get(key)
    gap = c.a.mean - c.b.mean
    where = readings.where_text(c, several)
    if d is None:
      lines.append(f"| {where} | {c.metric} | {c.a.text()} | – | {c.b.text()} | – | "
                   f"{gap:+.2f} {readings.interval_text(c)} | – | – | {c.verdict} | – |")
      continue
    other = d.a.mean - d.b.mean
    lines.append(f"| {where} | {c.metric} | {c.a.text()} | {d.a.text()} | {c.b.text()} | "
                 f"{d.b.text()} | {gap:+.2f} {readings.interval_text(c)} | "
                 f"{other:+.2f} {readings.interval_text(d)} | {other - gap:+.2f} | "
                 f"{c.verdict} | {d.verdict} |")
  return "\n".join(lines) + "\n"


def write_headline(spec: GridSpec, full: Sequence[Comparison], without: Sequence[Comparison],
                   excluded: Excluded, results_dir: str) -> Optional[str]:
  """Writes `<results_dir>/headline.md`; returns its text (None: no headline claim)."""
  text = headline_markdown(spec, full, without, excluded)
  if not text:
    return None
  tio.write_text(os.path.join(results_dir, HEADLINE_FILE), text)
  return text

