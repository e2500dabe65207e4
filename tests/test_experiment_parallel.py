"""Several processes on one work directory (experiment.execute's cell locks): each cell runs
once, never before its dependencies, and a process leaves a cell another one holds to it.

The cells' work is a stand-in that records when it ran (what is tested is the scheduling
around the executors, not the executors); threads stand for the processes: a lock taken with
flock on a file opened anew conflicts within one process as it does between two."""

from __future__ import annotations

import fcntl
import os
import threading
import time

import pytest

from twotower.experiment import cells, execute, grid, plan

INPUTS = plan.Inputs("dump.xml.bz2", squad="squad.json")


class Recorder:
  """An executor for every kind of cell: records (cell, thread, start, end)."""

  def __init__(self, seconds: float = 0.01):
    self.seconds, self.runs, self._lock = seconds, [], threading.Lock()

  def __call__(self, cell, ctx, out):
    start = time.monotonic()
    time.sleep(self.seconds)
    with self._lock:
      self.runs.append((cell.name, threading.current_thread().name, start, time.monotonic()))
    return {}

  def spans(self) -> dict[str, tuple[float, float]]:
    return {name: (start, end) for name, _, start, end in self.runs}


@pytest.fixture
def tiny_plan(monkeypatch):
  the_plan, _ = plan.plan(grid.load("tiny"), INPUTS)
  recorder = Recorder()
  monkeypatch.setattr(cells, "EXECUTORS", {c.kind: recorder for c in the_plan})
  monkeypatch.setattr(execute, "POLL_SECONDS", 0.01)
  return the_plan, recorder


def _assert_dependencies_first(the_plan, spans):
  for cell in the_plan:
    for dep in cell.deps.values():
      if cell.name in spans and dep in spans:
        assert spans[dep][1] <= spans[cell.name][0], f"{cell.name} ran before {dep} ended"


def test_two_processes_share_the_cells_each_runs_once(tiny_plan, tmp_path):
  the_plan, recorder = tiny_plan
  work = str(tmp_path)
  ran = {}
  workers = [threading.Thread(target=lambda n=n: ran.__setitem__(n, execute.run_cells(
      the_plan, work)), name=f"p{n}") for n in (1, 2)]
  for w in workers:
    w.start()
  for w in workers:
    w.join(timeout=120)
  names = [name for name, *_ in recorder.runs]
  assert sorted(names) == sorted(c.name for c in the_plan)  # each once, none left out
  assert sorted(ran[1] + ran[2]) == sorted(names)
  assert all(execute.state_of(work, c) == "done" for c in the_plan)
  _assert_dependencies_first(the_plan, recorder.spans())


def test_a_cell_another_process_holds_is_left_to_it_and_its_dependents_wait(tiny_plan,
                                                                           tmp_path):
  the_plan, recorder = tiny_plan
  work = str(tmp_path)
  held = the_plan["pairs/wiki"]
  downstream = {held.name}
  for cell in the_plan:  # plan order is dependency order
    if downstream & set(cell.deps.values()):
      downstream.add(cell.name)
  assert len(downstream) < len(the_plan)  # some cells do not need it
  out = execute.cell_dir(work, held)
  os.makedirs(os.path.dirname(out), exist_ok=True)
  other = os.open(out + execute.LOCK_SUFFIX, os.O_CREAT | os.O_RDWR)
  fcntl.flock(other, fcntl.LOCK_EX)  # "the other process" runs pairs/wiki
  result = []
  worker = threading.Thread(target=lambda: result.append(execute.run_cells(the_plan, work)))
  worker.start()
  deadline = time.monotonic() + 60
  while len(recorder.runs) < len(the_plan) - len(downstream) and time.monotonic() < deadline:
    time.sleep(0.01)
  time.sleep(0.1)  # it would have gone on by now, had it not waited
  assert worker.is_alive()
  assert {name for name, *_ in recorder.runs} == {c.name for c in the_plan} - downstream
  # The other process finishes its cell and ends (its lock goes with it).
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, execute.DONE_FILE), "w", encoding="utf-8") as f:
    f.write('{"cell": "pairs/wiki"}')
  os.close(other)
  worker.join(timeout=60)
  assert not worker.is_alive()
  names = [name for name, *_ in recorder.runs]
  assert held.name not in names and held.name not in result[0]
  assert sorted(names) == sorted(c.name for c in the_plan if c.name != held.name)
  _assert_dependencies_first(the_plan, recorder.spans())


def test_a_failure_in_another_process_blocks_the_cells_that_need_it(tiny_plan, tmp_path):
  the_plan, recorder = tiny_plan
  work = str(tmp_path)
  held = the_plan["pairs/wiki"]
  out = execute.cell_dir(work, held)
  os.makedirs(out)
  other = os.open(out + execute.LOCK_SUFFIX, os.O_CREAT | os.O_RDWR)
  fcntl.flock(other, fcntl.LOCK_EX)
  result = []
  worker = threading.Thread(target=lambda: result.append(execute.run_cells(the_plan, work)))
  worker.start()
  time.sleep(0.3)
  with open(os.path.join(out, execute.FAILED_FILE), "w", encoding="utf-8") as f:
    f.write('{"cell": "pairs/wiki", "error": "ValueError: no pages"}')
  os.close(other)
  worker.join(timeout=60)
  assert not worker.is_alive()
  current = execute.states(work, the_plan)
  assert current[held.name] == "failed"
  blocked = {c.name for c in the_plan if current[c.name] == "blocked"}
  assert blocked and all(execute.state_of(work, the_plan[n]) == "todo" for n in blocked)
  assert {name for name, *_ in recorder.runs} == \
      {c.name for c in the_plan} - blocked - {held.name}
