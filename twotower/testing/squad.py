"""A small, deterministic SQuAD v1.1 file for tests and benchmarks: articles about made-up
places, each paragraph three sentences, one question per sentence whose answer is in it.

Words are chosen so that BM25 finds most answers (questions share the sentence's rare words)
and a dense model has something to learn; no real text is needed.
"""

from __future__ import annotations

import json
import random

PLACES = ("Arlen", "Brisk", "Corvo", "Dunmere", "Elska", "Fennick", "Galt", "Hollin",
          "Istra", "Jorvik", "Kell", "Lorne")
THINGS = ("river", "castle", "bridge", "forest", "harbour", "temple", "market", "tower")
PEOPLE = ("Ada Morrow", "Bram Stiles", "Cora Vance", "Dmitri Olen", "Esme Quill", "Farid Noor")
ADJECTIVES = ("ancient", "narrow", "golden", "silent", "crowded", "painted")


def squad_articles(n_articles: int = 8, paragraphs: int = 2, seed: int = 0) -> list[dict]:
  """SQuAD `data` entries: n_articles x paragraphs paragraphs, 3 questions each."""
  rng = random.Random(seed)
  data = []
  for a in range(n_articles):
    place = PLACES[a % len(PLACES)]
    article = {"title": place, "paragraphs": []}
    for p in range(paragraphs):
      thing = THINGS[(a + 3 * p) % len(THINGS)]
      year = str(1200 + rng.randrange(700))
      person = rng.choice(PEOPLE)
      adjective = rng.choice(ADJECTIVES)
      sentences = [f"The {thing} of {place} was built in {year}.",
                   f"It was designed by {person} after a long winter.",
                   f"Visitors describe the {thing} as {adjective} and calm."]
      context = " ".join(sentences)
      qas = []
      for s, (question, answer) in enumerate((
          (f"When was the {thing} of {place} built?", year),
          (f"Who designed the {thing} in {place}?", person),
          (f"How do visitors describe the {thing} of {place}?", adjective))):
        qas.append({"id": f"{place}-{p}-{s}", "question": question,
                    "answers": [{"text": answer, "answer_start": context.index(answer)}]})
      article["paragraphs"].append({"context": context, "qas": qas})
    data.append(article)
  return data


def write_squad(path: str, n_articles: int = 8, paragraphs: int = 2, seed: int = 0) -> str:
  """Writes the file (SQuAD v1.1 layout) and returns `path`."""
  with open(path, "w", encoding="utf-8") as f:
    json.dump({"version": "1.1", "data": squad_articles(n_articles, paragraphs, seed)}, f)
  return path
