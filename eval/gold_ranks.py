"""A run's per-question gold ranks as a small file: what a paired comparison resamples.

    ranks = of_run("bm25/run.trec", "reqa/squad", ["test-5"])   # {question id: rank, 0: miss}
    write(ranks, "bm25/")      # bm25/ranks.gz + bm25/questions-<digest>.txt.gz
    read("bm25/ranks.gz")      # {question id: rank, None: miss}

The rank is the 1-based position of a question's first gold candidate under the tables'
`pair` convention, found by the lookup Recall@k and MRR are computed with
(twotower.core.metrics.question_ranks): the ranks give back the tables' numbers exactly. A gold the
run does not list (beyond its depth, or a question it lacks) is a miss.

Files (names in twotower.core.contracts):

    ranks.gz                   gzip: a JSON header line (format, version, gold, count, width,
                               misses, the question ids' digest), then one little-endian
                               unsigned int of `width` bytes per question, 0 for a miss
    questions-<digest>.txt.gz  gzip: the question ids, sorted, one a line: the ranks' order

Question ids live apart from the ranks: SQuAD's ids cost ~39 KB gzipped for its 11,877
questions, their ranks 1-6 KB, and every file over the same questions shares one id file.
Same ranks, same bytes (gzip with no time or file name, the header's keys sorted).
`twotower.experiment.ranks` keeps a grid's result cells' files beside its tables.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
from typing import Mapping, Optional, Sequence

import numpy as np

from twotower.core import contracts
from twotower.core import files as tio
from twotower.core import metrics
from twotower.core.contracts import codecs
from twotower.eval import runs as runs_lib

logger = logging.getLogger(__name__)

FORMAT = "twotower-ranks"
VERSION = 1
GOLD = "pair"


def scored_splits(splits: Sequence[str]) -> list[str]:
  """The splits of `splits` that tables score (test sides, `all`): validation and training
  sides are tuned or trained on, never a table's numbers (a grid's result cells record
  these)."""
  unscored = (contracts.VALIDATION_SIDE, contracts.TRAIN_SIDE)
  return [s for s in splits if contracts.split_side(s) not in unscored]


def _digest(ids_text: bytes) -> str:
  return hashlib.sha256(ids_text).hexdigest()[:16]


def _ids_text(question_ids: Sequence[str]) -> bytes:
  return "".join(f"{q}\n" for q in question_ids).encode("utf-8")


def _width(ranks: Sequence[int]) -> int:
  """Bytes per rank: 1 for runs up to depth 255 (the grid's are 100), more for deeper ones."""
  top = max(ranks, default=0)
  return 1 if top < 1 << 8 else 2 if top < 1 << 16 else 4


def encode(ranks: Mapping[str, int]) -> tuple[bytes, bytes, str]:
  """(ranks file, question-id file, digest) of {question id: rank, 0 for a miss}."""
  ids = sorted(ranks)
  bad = [q for q in ids if not q or "\n" in q]
  if bad:
    raise ValueError(f"question id {bad[0]!r}: empty or with a line break; the ranks "
                     "file's id list is one id a line")
  ids_text = _ids_text(ids)
  digest = _digest(ids_text)
  values = [ranks[q] for q in ids]
  width = _width(values)
  header = {"format": FORMAT, "version": VERSION, "gold": GOLD, "questions": digest,
            "count": len(ids), "width": width, "misses": sum(1 for r in values if r == 0)}
  payload = np.asarray(values, dtype=f"<u{width}").tobytes()
  body = json.dumps(header, sort_keys=True).encode("utf-8") + b"\n" + payload
  return tio.gzip_bytes(body), tio.gzip_bytes(ids_text), digest


def write(ranks: Mapping[str, int], directory: str, ranks_name: str = contracts.RANKS_FILE
          ) -> str:
  """Writes `ranks` ({question id: rank, 0 for a miss}) as `directory/ranks_name` and its
  question-id file beside it (unless that one is there already); returns the ranks file."""
  data, ids_data, digest = encode(ranks)
  ids_path = os.path.join(directory, contracts.ranks_questions_file(digest))
  _write_if_changed(ids_path, ids_data)
  path = os.path.join(directory, ranks_name)
  _write_if_changed(path, data)
  return path


def _write_if_changed(path: str, data: bytes) -> None:
  """An unchanged file is left as it is (no new time stamp, nothing for git to see)."""
  if os.path.exists(path):
    with open(path, "rb") as f:
      if f.read() == data:
        return
  tio.write_bytes(path, data)


def of_run(run_file: str, reqa_dir: str, splits: Sequence[str]) -> dict[str, int]:
  """{question id: rank of its gold in `run_file`, 0 for a miss} for every question of the
  `splits` of the ReQA directory `reqa_dir` (a question in several, once)."""
  questions: dict[str, contracts.Question] = {}
  for split in splits:
    for q in codecs.read_questions(reqa_dir, split):
      questions.setdefault(q.question_id, q)
  ordered = [questions[q] for q in sorted(questions)]
  run = runs_lib.ids_only(runs_lib.read_run(run_file))
  return dict(zip((q.question_id for q in ordered),
                  metrics.question_ranks(run, ordered, GOLD)))


def record(run_file: str, reqa_dir: str, splits: Sequence[str], out: str) -> dict:
  """Writes the ranks of `run_file` on the questions of `splits` (`of_run`) into the
  directory `out` (`write`); returns counts for the log (questions, misses, bytes)."""
  ranks = of_run(run_file, reqa_dir, splits)
  path = write(ranks, out)
  misses = sum(1 for r in ranks.values() if r == 0)
  logger.info("%s: ranks of %d questions (%d misses), %d bytes", path, len(ranks), misses,
              os.path.getsize(path))
  return {"questions": len(ranks), "misses": misses, "bytes": os.path.getsize(path)}


def _gunzip(path: str) -> bytes:
  with open(path, "rb") as f:
    data = f.read()
  try:
    return gzip.decompress(data)
  except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
    raise ValueError(f"{path}: not a whole gzip file ({e})") from None


def read(path: str) -> dict[str, Optional[int]]:
  """{question id: rank, None for a miss} of a ranks file and the question-id file beside it.

  Raises:
    ValueError: not a ranks file (or a damaged one), or its id file is missing, damaged or
      not the one it names.
  """
  body = _gunzip(path)
  line, _, payload = body.partition(b"\n")
  try:
    header = json.loads(line)
  except ValueError:
    header = None
  if not isinstance(header, dict) or header.get("format") != FORMAT:
    raise ValueError(f"{path}: not a {FORMAT} file (no header line)")
  if header.get("version") != VERSION:
    raise ValueError(f"{path}: {FORMAT} version {header.get('version')}, this code reads "
                     f"{VERSION}")
  count, width = header["count"], header["width"]
  if len(payload) != count * width:
    raise ValueError(f"{path}: {len(payload)} bytes of ranks for {count} questions of "
                     f"{width} bytes each: a cut file")
  ids_path = os.path.join(os.path.dirname(path), contracts.ranks_questions_file(
      header["questions"]))
  if not os.path.exists(ids_path):
    raise ValueError(f"{path}: its question ids, {ids_path}, are missing")
  ids_text = _gunzip(ids_path)
  if _digest(ids_text) != header["questions"]:
    raise ValueError(f"{ids_path}: not the question ids {path} was written over (digest)")
  ids = ids_text.decode("utf-8").split("\n")[:-1]  # (not splitlines: an id may hold a \r)
  if len(ids) != count:
    raise ValueError(f"{ids_path}: {len(ids)} question ids for {count} ranks in {path}")
  values = np.frombuffer(payload, dtype=f"<u{width}")
  return {q: (int(r) or None) for q, r in zip(ids, values)}
