"""Per-question ranks of a result cell's run: what a paired comparison resamples.

Every result cell (bm25, eval, fuse) records, beside its run file, the 1-based rank of each
scored question's gold candidate under the tables' `pair` convention (the ranks Recall@k and
MRR are computed from: twotower.metrics.question_ranks), for the questions its table entries
are scored on: its ratio's test side, every question zero-shot. A BM25 cell scores every ratio
in one run: it records every question it scores (validation sides left out), and a consumer
pairs it with another cell by the intersection of their question ids. A gold the run does not
list (beyond its depth, or a question it lacks) is a miss: 0 on disk, None to a reader.

Files (names in twotower.contracts):

    <cell dir>/ranks.gz                     a JSON header line + one uint per question
    <cell dir>/questions-<digest>.txt.gz    the question ids the ranks are in the order of
    <results>/ranks/<kind>_<rest>-<key>.ranks.gz    the same, one per cell directory
    <results>/ranks/questions-<digest>.txt.gz       one per question set, shared
    <results>/ranks/index.json              {cell name: ranks file} of the plan last rendered

Question ids live apart from the ranks: SQuAD's 24-hex ids cost ~150 KB gzipped per cell,
the ranks ~10 KB, and every cell scored on one split shares its id list. Same run and split,
same bytes (gzip with no time or file name, the header's keys sorted).

`record` writes a cell's files (the executors call it), `export` copies them into the results
directory when the tables refresh (experiment.render), `reader` and `results_reader` give them
back as a `RanksOf`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import os
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from twotower import contracts
from twotower import io as tio
from twotower import metrics
from twotower.experiment import execute
from twotower.experiment.plan import RESULT_KINDS, Cell, Plan

logger = logging.getLogger(__name__)

#: Cell name -> {question id: 1-based gold rank, None for a miss}, or None where the cell has
#: no recorded ranks (a grid run before they were recorded). The interface experiment.readings
#: codes to.
RanksOf = Callable[[str], Optional[Mapping[str, Optional[int]]]]

FORMAT = "twotower-ranks"
VERSION = 1
GOLD = "pair"
#: In the results directory's ranks folder: which file holds each cell's ranks.
INDEX_FILE = "index.json"


def scored_splits(splits: Sequence[str]) -> list[str]:
  """The splits of `splits` that tables score (test sides, `all`): validation and training
  sides are tuned or trained on, never a table's numbers."""
  unscored = (contracts.VALIDATION_SIDE, contracts.TRAIN_SIDE)
  return [s for s in splits if contracts.split_side(s) not in unscored]


def _gzip(data: bytes) -> bytes:
  """gzip with no time stamp and no file name: the same input, the same bytes."""
  buffer = io.BytesIO()
  with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as f:
    f.write(data)
  return buffer.getvalue()


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
  bad = [q for q in ids if not q or "\n" in q or q != q.strip()]
  if bad:
    raise ValueError(f"question id {bad[0]!r}: empty, or with a line break or edge blanks; "
                     "the ranks file's id list is one id a line")
  ids_text = _ids_text(ids)
  digest = _digest(ids_text)
  values = [ranks[q] for q in ids]
  width = _width(values)
  header = {"format": FORMAT, "version": VERSION, "gold": GOLD, "questions": digest,
            "count": len(ids), "width": width, "misses": sum(1 for r in values if r == 0)}
  payload = np.asarray(values, dtype=f"<u{width}").tobytes()
  body = json.dumps(header, sort_keys=True).encode("utf-8") + b"\n" + payload
  return _gzip(body), _gzip(ids_text), digest


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
  scored ones of `splits` (`scored_splits`) of the ReQA directory `reqa_dir`."""
  from twotower.contracts import codecs  # pylint: disable=import-outside-toplevel
  from twotower.eval import runs as runs_lib  # pylint: disable=import-outside-toplevel
  questions: dict[str, contracts.Question] = {}
  for split in scored_splits(splits):
    for q in codecs.read_questions(reqa_dir, split):
      questions.setdefault(q.question_id, q)
  ordered = [questions[q] for q in sorted(questions)]
  run = runs_lib.ids_only(runs_lib.read_run(run_file))
  return dict(zip((q.question_id for q in ordered),
                  metrics.question_ranks(run, ordered, GOLD)))


def record(run_file: str, reqa_dir: str, splits: Sequence[str], out: str) -> dict:
  """Writes the ranks of `run_file` on the scored questions of `splits` into the cell
  directory `out`; returns counts for the log (questions, misses, bytes)."""
  ranks = of_run(run_file, reqa_dir, splits)
  path = write(ranks, out)
  misses = sum(1 for r in ranks.values() if r == 0)
  logger.info("%s: ranks of %d questions (%d misses), %d bytes", path, len(ranks), misses,
              os.path.getsize(path))
  return {"questions": len(ranks), "misses": misses, "bytes": os.path.getsize(path)}


def read(path: str) -> dict[str, Optional[int]]:
  """{question id: rank, None for a miss} of a ranks file and the question-id file beside it.

  Raises:
    ValueError: not a ranks file, or its id file is missing or not the one it names.
  """
  with open(path, "rb") as f:
    body = gzip.decompress(f.read())
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
  with open(ids_path, "rb") as f:
    ids_text = gzip.decompress(f.read())
  if _digest(ids_text) != header["questions"]:
    raise ValueError(f"{ids_path}: not the question ids {path} was written over (digest)")
  ids = ids_text.decode("utf-8").splitlines()
  if len(ids) != count:
    raise ValueError(f"{ids_path}: {len(ids)} question ids for {count} ranks in {path}")
  values = np.frombuffer(payload, dtype=f"<u{width}")
  return {q: (int(r) or None) for q, r in zip(ids, values)}


# ---------------------------------------------------------------------------------------------
# A grid's ranks: its cells' files, the results directory's copies, and readers of both.
# ---------------------------------------------------------------------------------------------


def results_name(cell: Cell) -> str:
  """The file name of `cell`'s ranks in the results directory's ranks folder: its directory
  (`eval/squad_ict_base_r5_s0-0123456789`) with the kind's `/` as `_` (kinds have none)."""
  return cell.dirname.replace("/", "_", 1) + contracts.RANKS_SUFFIX


def _backfill(plan: Plan, work: str, cell: Cell) -> bool:
  """Records the ranks of a cell that finished here before cells recorded them (its run file
  and ReQA directory are still here); False when they are not."""
  done = execute.ran_here(work, cell)
  run_file = (done or {}).get("run_file")
  reqa = plan[cell.deps["reqa"]] if "reqa" in cell.deps else None
  if not run_file or not os.path.exists(run_file) or reqa is None:
    return False
  reqa_dir = execute.cell_dir(work, reqa)
  if not os.path.exists(contracts.questions_path(reqa_dir, contracts.ALL_QUESTIONS)):
    return False  # a restored ReQA cell: no questions here
  record(run_file, reqa_dir, cell.params.splits, execute.cell_dir(work, cell))
  return True


def export(plan: Plan, work: str, results_dir: str) -> int:
  """Copies each finished result cell's ranks (and their question ids) into
  `<results_dir>/ranks/`, recording them first for a cell that ran before they were
  recorded; rewrites the folder's index of the plan's cells. A cell restored without its
  outputs keeps the file the results directory has. Returns the number of cells copied."""
  folder = os.path.join(results_dir, contracts.RANKS_DIR)
  index, copied = {}, 0
  for cell in plan:
    if cell.kind not in RESULT_KINDS:
      continue
    source = os.path.join(execute.cell_dir(work, cell), contracts.RANKS_FILE)
    if not os.path.exists(source) and execute.state_of(work, cell) == "done":
      _backfill(plan, work, cell)
    name = results_name(cell)
    if os.path.exists(source):
      ranks = read(source)
      write({q: r or 0 for q, r in ranks.items()}, folder, name)
      copied += 1
    if os.path.exists(os.path.join(folder, name)):
      index[cell.name] = name
  if index or os.path.exists(os.path.join(folder, INDEX_FILE)):
    tio.write_text(os.path.join(folder, INDEX_FILE),
                   json.dumps(index, indent=2, sort_keys=True) + "\n")
  return copied


def _cached(find: Callable[[str], Optional[str]]) -> RanksOf:
  """A RanksOf that reads the file `find(name)` names once (None: no ranks)."""
  cache: dict[str, Optional[Mapping[str, Optional[int]]]] = {}

  def ranks_of(name: str) -> Optional[Mapping[str, Optional[int]]]:
    if name not in cache:
      path = find(name)
      cache[name] = read(path) if path else None
    return cache[name]
  return ranks_of


def reader(plan: Plan, work: str, results_dir: str) -> RanksOf:
  """The ranks of the plan's result cells by cell name: the work directory's file, else the
  results directory's copy (a cell restored without outputs); None where neither has one,
  or for a name that is not one of the plan's result cells."""
  folder = os.path.join(results_dir, contracts.RANKS_DIR)

  def find(name: str) -> Optional[str]:
    cell = plan.cells.get(name)
    if cell is None or cell.kind not in RESULT_KINDS:
      return None
    for path in (os.path.join(execute.cell_dir(work, cell), contracts.RANKS_FILE),
                 os.path.join(folder, results_name(cell))):
      if os.path.exists(path):
        return path
    return None
  return _cached(find)


def results_reader(results_dir: str) -> RanksOf:
  """The ranks a results directory holds, by cell name, through its index (the cells of the
  plan last rendered into it): for a re-render with no plan or work directory
  (experiment.rerender). None for a cell the index lacks."""
  folder = os.path.join(results_dir, contracts.RANKS_DIR)
  index_path = os.path.join(folder, INDEX_FILE)
  index = tio.read_json(index_path) if os.path.exists(index_path) else {}

  def find(name: str) -> Optional[str]:
    return os.path.join(folder, index[name]) if name in index else None
  return _cached(find)
