"""Running a plan: cells in order, each once, resumable, with one status per cell.

A finished cell writes `<dir>/done.json` atomically (its record: wall and CPU seconds, the
executor's result); a failed one writes `<dir>/failed.json` (the error). The state of a cell
is read from those files alone (`state_of`), so a README rendered in the middle of a run,
after it, or by another process says the same thing. `<work>/cells.jsonl` logs every cell
that ran, failed or was skipped.

A failed cell does not stop the grid: cells that need it are `blocked`, the others go on.

Several processes may run one work directory at once (on a machine with more cores than one
training uses): a cell runs under a lock (`<cell dir>.lock`, released when its process ends,
killed or not), so each cell runs once; a process takes the cells no other one holds and
waits for a dependency another one is running. A lock file is left in place (removing it
would race with a process about to take it).

Finished cells' records (metrics, times; no checkpoints) are also kept in the results
directory (`cells.json`, written with the tables). A later run on a new work directory
restores them (`restore`): each comes back as done, marked `restored`, with no outputs. A
restored cell runs again only when a cell still to do needs its outputs (`needed`): a lost
work directory costs the checkpoints that the missing cells need, not the whole grid.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import functools
import json
import logging
import os
import resource
import time
from typing import Callable, Iterable, Iterator, Mapping, Optional

from twotower.core import files as tio
from twotower.core import logs
from twotower.core import outputs
from twotower.experiment import cells as cells_lib
from twotower.experiment import params as params_lib
from twotower.experiment.estimate import format_seconds
from twotower.experiment.plan import RECORD_ROLES, RESULT_KINDS, Cell, Plan

logger = logging.getLogger(__name__)

DONE_FILE = "done.json"
FAILED_FILE = "failed.json"
# When a cell's current attempt began, in `<cell dir>.attempt.json` beside the cell's directory
# (which a resumable cell's stage owns: a stray file in it would make the stage refuse it). A
# killed attempt leaves it behind, so the next one can count the time the killed one spent
# (its files' last write, less its start).
ATTEMPT_SUFFIX = ".attempt.json"
EARLIER = "earlier_attempts_seconds"  # a done record's field: wall time of killed attempts
LOCK_SUFFIX = ".lock"           # `<cell dir>.lock`: held by the process running the cell
RESTORE_LOCK = ".restore"       # `<work>/.restore.lock`: held by the job restoring records
POLL_SECONDS = 10.0             # how often a process waiting for another's cells looks again
CELL_LOG = "cells.jsonl"
RECORDS_FILE = "cells.json"     # in the results directory: every finished cell's record
RESTORED = "restored"           # a done record's flag: brought back without its outputs
# A done record's field, on a restored cell that ran again for its outputs: what its new
# result differs in from the record it replaces (`remade_note`).
REMADE = "remade"
MACHINE = "machine"             # a done record's field: the CPU (and float extensions) it ran on
STATES = ("done", "failed", "blocked", "todo")


def cell_dir(work: str, cell: Cell) -> str:
  return os.path.join(work, cell.dirname)


def read_done(directory: str) -> Optional[dict]:
  path = os.path.join(directory, DONE_FILE)
  return tio.read_json(path) if os.path.exists(path) else None


def state_of(work: str, cell: Cell) -> str:
  """"done" or "failed" from the cell's files; "todo" otherwise (blocked is decided while
  running, from the states of the cell's dependencies)."""
  directory = cell_dir(work, cell)
  if os.path.exists(os.path.join(directory, DONE_FILE)):
    return "done"
  if os.path.exists(os.path.join(directory, FAILED_FILE)):
    return "failed"
  return "todo"


def states(work: str, plan: Plan) -> dict[str, str]:
  """Every cell's state, blocked included (a cell not done whose dependency failed or is
  blocked)."""
  out: dict[str, str] = {}
  for cell in plan:
    state = state_of(work, cell)
    if state == "todo" and any(out.get(d) in ("failed", "blocked") for d in cell.deps.values()):
      state = "blocked"
    out[cell.name] = state
  return out


def export_records(plan: Plan, work: str) -> dict[str, dict]:
  """{cell directory: done record} of every finished cell, without the parameters (the
  directory's hash and the record's key stand for them): what `restore` needs, small enough
  to keep beside the tables. Keyed by directory, so the records of a narrowed run's cells
  (whose hashes differ, see the guide) sit beside the whole grid's. The `restored` mark is
  left out: it says where this work directory got a record, not what the cell did, so a
  render after a restore leaves `cells.json` as it was."""
  records = {}
  for cell in plan:
    record = read_done(cell_dir(work, cell))
    if record is not None:
      records[cell.dirname] = {k: v for k, v in record.items() if k not in ("params", RESTORED)}
  return records


def restorable(plan: Plan, work: str, records: Mapping[str, dict]) -> list[str]:
  """The cells that `records` holds with the cell's key and whose directory has no
  `done.json`: what `restore` brings back (a dry run counts them without writing). A cell
  whose parameters or upstream cells changed has a new key and no record: it runs again."""
  return [cell.name for cell in plan
          if (records.get(cell.dirname) or {}).get("key") == cell.key
          and state_of(work, cell) != "done"]


def restore(plan: Plan, work: str, records: Mapping[str, dict]) -> list[str]:
  """Writes a restored `done.json` for each `restorable` cell; returns their names.

  A cell whose lock another process holds is left alone: that process (another job of
  `--jobs`) is running it again, in a folder its stage owns, where a record written now
  would make the stage refuse the folder; it writes the cell's record when it ends."""
  restored = []
  # One process restores at a time: another job's restore holds each cell's lock for a
  # moment, which would read here as that cell running; a job that skipped it so, and then
  # read it not yet done, would run it (and what it reads) again.
  with _cell_lock(os.path.join(work, RESTORE_LOCK), wait=True):
    for name in restorable(plan, work, records):
      cell = plan[name]
      out = cell_dir(work, cell)
      with _cell_lock(out) as held:
        if not held or state_of(work, cell) == "done":
          continue
        tio.makedirs(out)
        tio.write_json(os.path.join(out, DONE_FILE), {**records[cell.dirname], RESTORED: True})
        restored.append(name)
  return restored


def needed(plan: Plan, work: str, current: Optional[Mapping[str, str]] = None,
           restored: Iterable[str] = ()) -> set[str]:
  """The cells a run must execute: every cell not done, and every dependency of those that
  is not done or was restored without the outputs it is read for (recursively: a carried
  length or weight is read from the record alone, `plan.RECORD_ROLES`). `current`: the
  cells' states, when the caller has them; `restored`: cells counted as restored beyond
  those whose `done.json` says so (a dry run's `restorable`).

  A cell `current` calls done whose record is gone when read here is being made again by
  another process (`--jobs`: a stage discards the restored record before it runs): it is
  needed, so that this process waits for it instead of reading its outputs half made."""
  current = current if current is not None else states(work, plan)
  restored = set(restored)
  records = {c.name: read_done(cell_dir(work, c)) for c in plan
             if current[c.name] == "done" and c.name not in restored}
  vanished = {name for name, record in records.items() if record is None}
  restored |= {name for name, record in records.items() if record and record.get(RESTORED)}
  need = {name for name, state in current.items() if state != "done"} | vanished
  for cell in reversed(list(plan)):  # plan order is dependency order
    if cell.name in need:
      need.update(d for role, d in cell.deps.items() if current[d] != "done"
                  or d in vanished or (d in restored and role not in RECORD_ROLES))
  return need


def ran_here(work: str, cell: Cell) -> Optional[dict]:
  """The done record of a cell that ran in this work dir; None when the cell is not done or
  its record was restored (no outputs here, its time taken elsewhere)."""
  record = read_done(cell_dir(work, cell))
  return None if record is None or record.get(RESTORED) else record


def measured_seconds(plan: Plan, work: str, current: Mapping[str, str]) -> dict[str, float]:
  """{cell: wall seconds} of the finished cells that ran in this work dir."""
  records = {c.name: ran_here(work, c) for c in plan if current[c.name] == "done"}
  return {name: float(r["seconds"]) for name, r in records.items() if r and "seconds" in r}


def _now() -> str:
  return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def _cpu_seconds() -> float:
  """CPU time of this process and its finished children (Beam workers, the JVM)."""
  own = resource.getrusage(resource.RUSAGE_SELF)
  children = resource.getrusage(resource.RUSAGE_CHILDREN)
  return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _earlier_attempt_seconds(out: str) -> float:
  """Wall seconds an earlier, killed attempt of a resumable cell spent in `out`: from its
  recorded start to the last file it wrote (a lower bound: work after the last write is
  lost). 0.0 without an earlier attempt."""
  attempt = out + ATTEMPT_SUFFIX
  if not os.path.exists(attempt) or not os.path.isdir(out):
    return 0.0
  started = float(tio.read_json(attempt)["started_epoch"])
  last = max((os.path.getmtime(os.path.join(root, f))
              for root, _, files in os.walk(out) for f in files), default=started)
  return max(0.0, last - started) + float(tio.read_json(attempt).get(EARLIER, 0.0))


def _log(work: str, entry: dict) -> None:
  with open(os.path.join(work, CELL_LOG), "a", encoding="utf-8") as f:
    f.write(json.dumps({"time": _now(), **entry}, sort_keys=True) + "\n")


def ran_since(work: str, since: datetime.datetime) -> list[str]:
  """The cells that `cells.jsonl` says ran (by any process) from `since` on."""
  path = os.path.join(work, CELL_LOG)
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    entries = [json.loads(line) for line in f if line.strip()]
  return [e["cell"] for e in entries if e.get("status") == "ran"
          and datetime.datetime.fromisoformat(e["time"]) >= since]


def run_cells(plan: Plan, work: str, *, beam_args: tuple[str, ...] = (),
              keep_embeddings: bool = False, progress: str = "bar",
              on_result: Callable[[], None] = lambda: None,
              stop_on_failure: bool = False) -> list[str]:
  """Runs every cell that is not done, in plan order; returns the names of the cells that
  ran now. `on_result` is called after each result cell (tables refresh as the grid goes).
  A failed cell is recorded and the others go on, unless `stop_on_failure` (the demo): then
  its error is raised as it came. A cell that another process on `work` holds is left to it
  (see the module's docstring): this one goes on with the others and waits only where
  nothing else is left to run."""
  dirs = {cell.name: cell_dir(work, cell) for cell in plan}

  def done_record(name: str) -> dict:
    record = read_done(dirs[name])
    if record is None:
      raise RuntimeError(f"cell {name} has no {DONE_FILE}")
    return record

  ctx = cells_lib.Context(work=work, dirs=dirs, done=done_record, beam_args=beam_args,
                          keep_embeddings=keep_embeddings, progress=progress)
  current = states(work, plan)
  need = needed(plan, work, current)
  position = {cell.name: i for i, cell in enumerate(plan, start=1)}
  total = len(plan)
  for cell in plan:
    if cell.name not in need:
      _log(work, {"cell": cell.name, "dir": cell.dirname, "status": "skipped"})
  ran: list[str] = []
  pending = [cell for cell in plan if cell.name in need]
  said = 0  # the count of waiting cells last reported
  while pending:
    unresolved = {cell.name for cell in pending}
    waiting: list[Cell] = []
    for cell in pending:
      i = position[cell.name]
      blocked = [d for d in cell.deps.values() if current[d] in ("failed", "blocked")]
      if blocked:
        current[cell.name] = "blocked"
        unresolved.discard(cell.name)
        logger.warning("[%d/%d] %s: blocked by %s", i, total, cell.name, ", ".join(blocked))
        continue
      # Plan order is dependency order: a dependency still unresolved is one that another
      # process holds (alone, every lock is free and this never waits).
      if any(d in unresolved for d in cell.deps.values()):
        waiting.append(cell)
        continue
      with _cell_lock(dirs[cell.name]) as held:
        if not held:
          waiting.append(cell)
          continue
        unresolved.discard(cell.name)
        elsewhere = _finished_elsewhere(dirs[cell.name], current[cell.name])
        if elsewhere:
          current[cell.name] = elsewhere
          logs.progress("[%d/%d] %s: %s by another process", i, total, cell.name, elsewhere)
          continue
        if _run_cell(cell, ctx, dirs[cell.name], work, f"[{i}/{total}]", stop_on_failure):
          current[cell.name] = "done"
          ran.append(cell.name)
          if cell.kind in RESULT_KINDS:
            on_result()
        else:
          current[cell.name] = "failed"
    if len(waiting) == len(pending):  # nothing moved: the others' cells are still running
      if said != len(waiting):
        logs.progress("%d cell(s) left, each held or waited for by another process: %s%s",
                      len(waiting), ", ".join(c.name for c in waiting[:3]),
                      ", ..." if len(waiting) > 3 else "")
        said = len(waiting)
      time.sleep(POLL_SECONDS)
    pending = waiting
  return ran


@functools.lru_cache(maxsize=None)
def machine_name() -> str:
  """"<CPU model> (<float extensions>)": what a done record names the machine by (read from
  /proc once per process, not once per cell)."""
  m = tio.machine()
  return f"{m.get('cpu', '?')} ({m.get('isa') or 'no AVX2'})"


def remade_note(first: Mapping, result: Mapping) -> dict:
  """Where a cell's new `result` differs from its earlier record `first` (the fields both
  hold, times left out): {"first": when the first run finished, "first_machine": where (""
  where its record does not say), "differs": the differing fields as paths
  ("history.loss[18]", at most MAX_PATHS), "differing_values": how many differ,
  "max_abs_diff": the largest numeric difference (None: none numeric)}.

  A pre-training re-made in a later session has matched its record to 6-7 significant
  digits, not bit for bit (loss 1.824953556 against 1.824953794 at step 1,900). TensorFlow's
  thread count is not why (1 and 2 intra-op threads give the same history to the last
  digit); the sessions' machines differ in CPU (an AMD EPYC, an Intel Xeon with AVX-512 and
  AMX), whose float kernels do."""
  paths: list[str] = []
  largest: list[float] = []

  def walk(a, b, path: str) -> None:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
      for k in a:
        if k in b and "seconds" not in k:
          walk(a[k], b[k], f"{path}.{k}" if path else str(k))
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
      for i, (x, y) in enumerate(zip(a, b)):
        walk(x, y, f"{path}[{i}]")
    elif a != b:
      paths.append(path)
      numbers = [isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)]
      if all(numbers):
        largest.append(abs(float(a) - float(b)))

  walk({k: v for k, v in first.items() if k != REMADE}, result, "")
  return {"first": first.get("finished", ""), "first_machine": first.get(MACHINE, ""),
          "differs": paths[:MAX_PATHS],
          "differing_values": len(paths), "max_abs_diff": max(largest) if largest else None}


MAX_PATHS = 5  # differing fields a re-made record names (their count is kept whole)


@contextlib.contextmanager
def _cell_lock(out: str, wait: bool = False) -> Iterator[bool]:
  """Holds `<out>.lock` for the block (True), or yields False at once where another process
  holds it (`wait`: waits for it instead). The kernel releases it when the holder's process
  ends, killed or not."""
  tio.makedirs(os.path.dirname(out))
  fd = os.open(out + LOCK_SUFFIX, os.O_CREAT | os.O_RDWR, 0o644)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
      yield False
      return
    yield True
  finally:
    os.close(fd)


def _finished_elsewhere(out: str, state_before: str) -> Optional[str]:
  """"done" or "failed" where another process ran the cell since this one read its state
  (a record that was restored, or a failure from before, is not that: the cell runs)."""
  record = read_done(out)
  if record is not None and not record.get(RESTORED):
    return "done"
  if state_before != "failed" and os.path.exists(os.path.join(out, FAILED_FILE)):
    return "failed"
  return None


def _run_cell(cell: Cell, ctx: cells_lib.Context, out: str, work: str, where: str,
              stop_on_failure: bool) -> bool:
  """Runs one cell (its lock held) and writes its done or failed record; True when done."""
  earlier = _earlier_attempt_seconds(out)  # before clean() removes a killed attempt's files
  # A restored record this run replaces: the cells that read its outputs (elsewhere) keep
  # its numbers, so the new record says where it differs.
  first = read_done(out)
  first = first if first and first.get(RESTORED) else None
  cells_lib.clean(cell, out)
  tio.makedirs(out)
  for name in (FAILED_FILE, DONE_FILE):
    # A resumable cell's run dir is owned by its stage (twotower.core.outputs): the grid's own
    # record of an earlier try (or a restored one, in a run dir the stage never wrote)
    # would make the stage refuse the folder. The cell runs again: the record is stale,
    # and is written anew when it ends.
    outputs.discard(os.path.join(out, name))
  logs.progress("%s %s ...", where, cell.name)
  tio.write_json(out + ATTEMPT_SUFFIX,
                 {"started_epoch": time.time(), EARLIER: round(earlier, 1)})
  started, wall0, cpu0 = _now(), time.perf_counter(), _cpu_seconds()
  try:
    result = cells_lib.EXECUTORS[cell.kind](cell, ctx, out)
  except Exception as e:  # pylint: disable=broad-except  (one cell must not end the grid)
    seconds = time.perf_counter() - wall0
    tio.write_json(os.path.join(out, FAILED_FILE),
                   {"cell": cell.name, "error": f"{type(e).__name__}: {e}",
                    "finished": _now(), "seconds": round(seconds, 1)})
    _log(work, {"cell": cell.name, "dir": cell.dirname, "status": "failed",
                "seconds": round(seconds, 1), "error": str(e)})
    if stop_on_failure:
      raise
    logger.exception("%s %s failed after %.0f s", where, cell.name, seconds)
    logs.progress("%s %s FAILED: %s", where, cell.name, e)
    return False
  seconds, cpu = time.perf_counter() - wall0, _cpu_seconds() - cpu0
  remade = remade_note(first, result) if first else None
  if remade is not None:
    if remade["differs"]:
      logger.warning("%s %s ran again for its outputs and differs from its restored record "
                     "(first run finished %s) in %s (largest difference %s): the cells that "
                     "read the first run keep its numbers", where, cell.name, remade["first"],
                     ", ".join(remade["differs"]), remade["max_abs_diff"])
    else:
      logs.progress("%s %s ran again for its outputs and gave its recorded numbers", where,
                    cell.name)
  tio.write_json(os.path.join(out, DONE_FILE),
                 {"cell": cell.name, "kind": cell.kind, "key": cell.key,
                  "params": params_lib.key_params(cell.params), "deps": dict(cell.deps),
                  "started": started, "finished": _now(), "seconds": round(seconds, 1),
                  "cpu_seconds": round(cpu, 1), MACHINE: machine_name(),
                  **({EARLIER: round(earlier, 1)} if earlier else {}),
                  **({REMADE: remade} if remade is not None else {}), **result})
  outputs.discard(out + ATTEMPT_SUFFIX)  # finished: a later re-run is not a resumed attempt
  _log(work, {"cell": cell.name, "dir": cell.dirname, "status": "ran",
              "seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1)})
  logs.progress("%s %s done in %s", where, cell.name, format_seconds(seconds))
  return True
