"""Seeded fuzz of `twotower reqa` over a small SQuAD file: random truncations, byte flips and
deleted fields. Every run either succeeds with its counters accounting for every article,
paragraph and question of the file, or fails with one line naming the file; never a
traceback, and never anything half-written (no output folder, no temporary folder)."""

from __future__ import annotations

import json
import os
import random

import pytest

from twotower import cli
from twotower.core import contracts
from twotower.core.contracts import counters as C

# Three articles, several questions a paragraph, one unanswerable (v2.0) question.
DOC = {"version": "v2.0", "data": [
    {"title": "Volcano", "paragraphs": [
        {"context": "A volcano is a rupture in the crust of a planet. Lava erupts from magma "
                    "chambers. Mount Etna is an active stratovolcano in Sicily.",
         "qas": [{"id": "v1", "question": "Where is Mount Etna?",
                  "answers": [{"text": "Sicily", "answer_start": 106}]},
                 {"id": "v2", "question": "What erupts from magma chambers?",
                  "answers": [{"text": "Lava", "answer_start": 49}]},
                 {"id": "v3", "question": "Is Etna asleep?", "answers": [],
                  "is_impossible": True}]}]},
    {"title": "Bread", "paragraphs": [
        {"context": "Bread is baked from a dough of flour and water. Yeast makes the dough "
                    "rise.",
         "qas": [{"id": "b1", "question": "What makes dough rise?",
                  "answers": [{"text": "Yeast", "answer_start": 48}]}]},
        {"context": "Rye bread is dense. It keeps for a week.",
         "qas": [{"id": "b2", "question": "How long does rye bread keep?",
                  "answers": [{"text": "a week", "answer_start": 33}]}]}]},
    {"title": "River", "paragraphs": [
        {"context": "The Nile flows north. It ends in the Mediterranean Sea.",
         "qas": [{"id": "r1", "question": "Where does the Nile end?",
                  "answers": [{"text": "the Mediterranean Sea", "answer_start": 33}]},
                 {"id": "r2", "question": "Which way does the Nile flow?",
                  "answers": [{"text": "north", "answer_start": 15}]}]}]},
]}
FIELDS = ("title", "paragraphs", "context", "qas", "id", "question", "answers", "text",
          "answer_start")


def _dicts_with(node, field, found):
  if isinstance(node, dict):
    if field in node:
      found.append(node)
    for value in node.values():
      _dicts_with(value, field, found)
  elif isinstance(node, list):
    for value in node:
      _dicts_with(value, field, found)
  return found


def mutations(seed: int = 20, n: int = 20):
  """(name, bytes): n seeded mutations of DOC, a third of each kind."""
  rng = random.Random(seed)
  raw = json.dumps(DOC, indent=1).encode("utf-8")
  cases = []
  for i in range(n):
    kind = ("truncate", "flip", "delete")[i % 3]
    if kind == "truncate":
      cut = rng.randrange(1, len(raw))
      cases.append((f"truncate-{cut}", raw[:cut]))
    elif kind == "flip":
      at = rng.randrange(len(raw))
      cases.append((f"flip-{at}", raw[:at] + bytes([rng.randrange(256)]) + raw[at + 1:]))
    else:
      doc = json.loads(raw)
      field = rng.choice(FIELDS)
      holders = _dicts_with(doc, field, [])
      holder = rng.choice(holders)
      del holder[field]
      cases.append((f"delete-{field}-{i}", json.dumps(doc).encode("utf-8")))
  return cases


def expected_counts(doc) -> dict[str, int]:
  """What the counters must add up to, from the file itself: every article is read or
  skipped; every paragraph of a kept article is read or skipped; every question of a read
  paragraph is written or skipped (by one of the questions_skipped_* reasons)."""
  articles = doc["data"]
  kept = [a for a in articles if isinstance(a, dict) and isinstance(a.get("paragraphs"), list)]
  paragraphs = [p for a in kept for p in a["paragraphs"]]
  read = [p for p in paragraphs if isinstance(p, dict) and isinstance(p.get("context"), str)]
  return {"articles": len(articles), "articles_kept": len(kept),
          "paragraphs": len(paragraphs), "paragraphs_read": len(read),
          "questions": sum(len(p.get("qas") or ()) for p in read)}


@pytest.mark.slow  # about a dozen of the cases run the Beam job (~5 s each)
@pytest.mark.parametrize("name, data", mutations(), ids=[m[0] for m in mutations()])
def test_reqa_on_a_mutated_squad_file(tmp_path, capsys, name, data):
  path = tmp_path / "squad.json"
  path.write_bytes(data)
  out = tmp_path / "reqa"
  code = cli.main(["reqa", "--squad", str(path), "--out", str(out)])
  err = capsys.readouterr().err
  assert "Traceback" not in err, (name, err)
  assert sorted(os.listdir(tmp_path)) == (["reqa", "squad.json"] if code == 0
                                          else ["squad.json"]), name  # no temp folder
  if code != 0:
    assert code == 1, (name, err)
    line = err.strip().splitlines()[-1]
    assert line.startswith("twotower reqa: error: ") and str(path) in line, (name, line)
    return
  stats = json.loads((out / contracts.STATS_FILE).read_text())
  want = expected_counts(json.loads(data))
  assert want["articles"] - want["articles_kept"] == stats.get(
      C.ARTICLES_SKIPPED_MISSING_FIELD, 0), name
  assert want["paragraphs"] == (stats.get(C.PARAGRAPHS_READ, 0)
                                + stats.get(C.PARAGRAPHS_SKIPPED_MISSING_FIELD, 0)), name
  skipped = sum(v for k, v in stats.items() if k.startswith("questions_skipped_"))
  assert want["questions"] == stats[C.QUESTIONS] + skipped, (name, stats)
  assert (out / contracts.MANIFEST_FILE).exists()
