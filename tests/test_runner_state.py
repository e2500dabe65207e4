"""`twotower runner stop` ends only what the runner started (deploy.portable.launcher, its
state file in .runner_state, which process is ours in .processes): stale, foreign and
malformed state files, against real processes that these tests start (and always end)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from twotower import cli
from twotower.deploy.portable import launcher, processes, runner_state

SLEEP = "import time; time.sleep(120)"
#: The command line Beam's worker pool starts an SDK worker with (worker_pool_main).
SDK_WORKER = [
    "python", "-c",
    processes.SDK_WORKER_CODE + '"localhost:1",worker_id="1",state_cache_size=0,'
    'data_buffer_time_limit_ms=0).run()']
#: Stands in for apache_beam's sdk_worker on a fake SDK worker's PYTHONPATH: it sleeps.
FAKE_SDK_WORKER = ("import time\n\n\nclass SdkHarness:\n\n  def __init__(self, *args, **kwargs):"
                   "\n    pass\n\n  def run(self):\n    time.sleep(120)\n")
#: A fake service (`python -c FAKE_SERVICE NAME PORT`): listens on the port; a worker_pool
#: also starts a fake SDK worker as Beam's pool does (`python` from PATH, which start puts
#: the interpreter's folder first on; PYTHONPATH: the fake_services fixture's).
FAKE_SERVICE = f"""
import os, socket, subprocess, sys, time
name, port = sys.argv[1], int(sys.argv[2])
server = socket.socket()
server.bind(("127.0.0.1", port))
server.listen()
if name == "worker_pool":
  worker = subprocess.Popen({SDK_WORKER!r})
time.sleep(120)
"""


def alive(pid: int) -> bool:
  """Whether `pid` runs (a zombie, exited and unreaped, does not)."""
  try:
    with open(f"/proc/{pid}/stat", "rb") as f:
      return f.read().rpartition(b")")[2].split()[0] != b"Z"
  except OSError:
    return False


def start_time(pid: int) -> int:
  with open(f"/proc/{pid}/stat", "rb") as f:
    return int(f.read().rpartition(b")")[2].split()[19])


def cmdline(pid: int) -> list[str]:
  with open(f"/proc/{pid}/cmdline", "rb") as f:
    return f.read().decode().split("\0")[:-1]


def boot_id() -> str:
  with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
    return f.read().strip()


def wait_for(predicate, timeout_s: float = 20.0) -> bool:
  deadline = time.monotonic() + timeout_s
  while not predicate():
    if time.monotonic() > deadline:
      return False
    time.sleep(0.05)
  return True


def end(pid: int) -> None:
  with contextlib.suppress(ProcessLookupError):
    os.kill(pid, signal.SIGKILL)


def fake_beam(folder) -> str:
  """A folder to put on PYTHONPATH: apache_beam.runners.worker.sdk_worker that sleeps."""
  package = folder / "fakebeam" / "apache_beam" / "runners" / "worker"
  package.mkdir(parents=True, exist_ok=True)
  for init in (package.parent.parent, package.parent, package):
    (init / "__init__.py").write_text("")
  (package / "sdk_worker.py").write_text(FAKE_SDK_WORKER)
  return str(folder / "fakebeam")


def worker_env(pythonpath: str, token: str | None = None) -> dict:
  env = dict(os.environ, PYTHONPATH=pythonpath,
             PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
  env.pop(processes.TOKEN_VARIABLE, None)
  if token is not None:
    env[processes.TOKEN_VARIABLE] = token
  return env


def orphaned_group(pythonpath: str, token: str | None = None) -> tuple[int, int]:
  """A foreign program's session and group whose leader has exited, leaving a process that
  looks like one of Beam's SDK workers in it (another pool's orphan, or anything so named):
  -> (the dead leader's pid, the worker's pid)."""
  spawn = f"import subprocess; print(subprocess.Popen({SDK_WORKER!r}).pid, flush=True)"
  leader = subprocess.Popen([sys.executable, "-c", spawn], start_new_session=True,
                            stdout=subprocess.PIPE, env=worker_env(pythonpath, token))
  worker = int(leader.stdout.readline())
  leader.wait()
  leader.stdout.close()
  assert wait_for(lambda: cmdline(worker) == SDK_WORKER)
  return leader.pid, worker


def foreign_group() -> subprocess.Popen:
  """A foreign program leading a session and group of its own (pid == pgid == sid)."""
  process = subprocess.Popen([sys.executable, "-c", SLEEP], start_new_session=True)
  assert wait_for(lambda: cmdline(process.pid)[1:] == ["-c", SLEEP])
  return process


def write_state(state_dir, content) -> str:
  """Writes `content` (JSON-able, or bytes as they are) as the runner's state file."""
  os.makedirs(state_dir, exist_ok=True)
  path = runner_state.state_path(str(state_dir))
  with open(path, "wb") as f:
    f.write(content if isinstance(content, bytes) else json.dumps(content).encode())
  return path


def state(pids: dict, commands: dict, start_times: dict | None, **overrides) -> dict:
  """A state file as `start` writes it (start_times None: as an older twotower did)."""
  content = {"state_dir": "/nowhere", "job_port": 8099, "worker_port": 50000, "workers": 2,
             "pids": pids, "commands": commands}
  if start_times is not None:
    content.update(start_times=start_times, boot_id=boot_id(), token="ab" * 16)
  content.update(overrides)
  return content


def test_a_dead_leaders_group_that_is_not_ours_is_left_alone(tmp_path, capsys):
  """The issue's case: the recorded pool's pid is now the id of a foreign group whose leader
  is gone. The old stop SIGKILLed that group and printed 'nothing to stop'. A member with
  an SDK worker's command line, in the recorded pid's group and session, started after the
  recorded start time, is still not ours without this runner's token: left alone."""
  pythonpath = fake_beam(tmp_path)
  leaders, workers = zip(*(orphaned_group(pythonpath, token) for token in (None, "cd" * 16)))
  try:
    for leader, worker in zip(leaders, workers):
      state_dir = tmp_path / f"state-{leader}"
      path = write_state(state_dir, state(
          {"job_service": leader, "worker_pool": leader},
          {"job_service": ["python", "x"], "worker_pool": ["python", "y"]},
          {"job_service": 0, "worker_pool": start_time(worker) - 1}))
      assert cli.main(["runner", "stop", "--state_dir", str(state_dir)]) == 0
      time.sleep(0.2)
      assert alive(worker)
      captured = capsys.readouterr()
      warnings = [line for line in captured.err.splitlines() if " WARNING " in line]
      assert len(warnings) == 2 and all(
          f"pid {worker}, in the process group of the dead pid {leader}, left alone: its "
          f"environment lacks this runner's {processes.TOKEN_VARIABLE}" in w
          for w in warnings), warnings
      out = captured.out
      assert f"pid {leader}  gone" in out and "ended" not in out
      assert not os.path.exists(path)  # stale: nothing it records runs
  finally:
    for worker in workers:
      end(worker)


def test_a_live_foreign_group_leader_is_left_alone(tmp_path, capsys):
  """The recorded pid now leads a live foreign group: another start time and command."""
  foreign = foreign_group()
  try:
    state_dir = tmp_path / "state"
    write_state(state_dir, state({"job_service": foreign.pid, "worker_pool": foreign.pid},
                                 {"job_service": ["python", "x"], "worker_pool": ["python", "y"]},
                                 {"job_service": 7, "worker_pool": 7}))
    assert cli.main(["runner", "stop", "--state_dir", str(state_dir)]) == 0
    time.sleep(0.2)
    assert foreign.poll() is None
    captured = capsys.readouterr()
    assert f"pid {foreign.pid}  left alone" in captured.out
    assert f"job_service: pid {foreign.pid} left alone: started at tick" in captured.err
  finally:
    foreign.kill()
    foreign.wait()


@pytest.mark.parametrize("mismatch", ["start time", "boot", "older twotower"])
def test_a_live_process_with_the_recorded_command_but_not_ours_is_not_signalled(
    mismatch, tmp_path, capsys):
  """The pid was reused by a program with the very command line recorded (the old stop sent
  it SIGTERM): its start time differs, or the file is from another boot, or from an older
  twotower that recorded no start time (unverifiable): left alone, with a warning."""
  foreign = foreign_group()
  try:
    pid = foreign.pid
    times = {"job_service": start_time(pid), "worker_pool": start_time(pid)}
    overrides = {}
    if mismatch == "start time":
      times = {"job_service": times["job_service"] - 1, "worker_pool": times["worker_pool"] + 1}
    elif mismatch == "boot":
      overrides["boot_id"] = "00000000-0000-0000-0000-000000000000"
    else:
      times = None
    command = [sys.executable, "-c", SLEEP]
    state_dir = tmp_path / "state"
    path = write_state(state_dir, state({"job_service": pid, "worker_pool": pid},
                                        {"job_service": command, "worker_pool": command},
                                        times, **overrides))
    assert [s.running for s in launcher.status(str(state_dir))] == [False, False]
    assert cli.main(["runner", "stop", "--state_dir", str(state_dir)]) == 0
    time.sleep(0.2)
    assert foreign.poll() is None
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert len(out) == 2 and all(f"pid {pid}  left alone" in line for line in out), out
    why = {"start time": "another program reused the pid", "boot": "another boot",
           "older twotower": "without a start time"}[mismatch]
    warnings = [line for line in captured.err.splitlines() if " WARNING " in line]
    assert len(warnings) == 2 and all(
        f"pid {pid} left alone: " in w and why in w for w in warnings), warnings
    assert not os.path.exists(path)
  finally:
    foreign.kill()
    foreign.wait()


def _valid() -> dict:
  return state({"job_service": 4242, "worker_pool": 4243},
               {"job_service": ["python", "-m", "x"], "worker_pool": ["python", "-m", "y"]},
               {"job_service": 100, "worker_pool": 101})


def _with(**changes) -> dict:
  content = _valid()
  for key, value in changes.items():
    if value is KeyError:
      del content[key]
    else:
      content[key] = value
  return content


MALFORMED = {
    "string pids": (_with(pids={"job_service": "4242", "worker_pool": "4243"}),
                    "pids.job_service"),
    "bad JSON": (b'{"pids": {', "not readable as JSON"),
    "not UTF-8": (b'\xff\xfe{}', "not readable as JSON"),
    "not an object": ([1, 2], "its content"),
    "no pids": (_with(pids=KeyError), "no pids"),
    "no commands": (_with(commands=KeyError), "no commands"),
    "a service missing": (_with(pids={"job_service": 4242}), "pids has the keys ['job_service'], not"),
    "pids not an object": (_with(pids=[4242, 4243]), "pids is [4242, 4243]"),
    "zero pid": (_with(pids={"job_service": 0, "worker_pool": 4243}), "pids.job_service"),
    "negative pid": (_with(pids={"job_service": 4242, "worker_pool": -4243}),
                     "pids.worker_pool"),
    "pid 1": (_with(pids={"job_service": 1, "worker_pool": 4243}), "pids.job_service"),
    "huge pid": (_with(pids={"job_service": 4242, "worker_pool": 10**40}),
                 "pids.worker_pool is an int of"),
    "bool pid": (_with(pids={"job_service": True, "worker_pool": 4243}), "pids.job_service"),
    "float pid": (_with(pids={"job_service": 4242.0, "worker_pool": 4243}),
                  "pids.job_service"),
    "command not a list": (_with(commands={"job_service": "python -m x",
                                           "worker_pool": ["python"]}), "commands.job_service"),
    "command of ints": (_with(commands={"job_service": ["python"], "worker_pool": [1, 2]}),
                        "commands.worker_pool"),
    "empty command": (_with(commands={"job_service": [], "worker_pool": ["python"]}),
                      "commands.job_service"),
    "string port": (_with(job_port="8099"), "job_port"),
    "port too big": (_with(worker_port=70000), "worker_port"),
    "zero workers": (_with(workers=0), "workers"),
    "string start time": (_with(start_times={"job_service": "1", "worker_pool": 2}),
                          "start_times.job_service"),
    "start times without a token": (_with(token=KeyError), "no token"),
    "bad token": (_with(token="not hex"), "token"),
    "unknown field": (_with(extra=1), "unknown field 'extra'"),
    "null state_dir": (_with(state_dir=None), "state_dir"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_state_file_is_refused_in_one_line(case, tmp_path):
  content, field = MALFORMED[case]
  state_dir = tmp_path / "state"
  path = write_state(state_dir, content)
  for call in (launcher.stop, launcher.status, runner_state.read_state):
    with pytest.raises(runner_state.RunnerError) as e:
      call(str(state_dir))
    message = str(e.value)
    assert message.startswith(f"{path}: not a runner state file: ") and field in message
    assert "\n" not in message and "nothing was signalled" in message
  assert os.path.exists(path)  # refused, not removed


def test_string_pids_are_one_error_line_and_exit_1(tmp_path, capsys, monkeypatch):
  """The old stop raised TypeError (a traceback) on a state file with string pids."""
  calls = []
  monkeypatch.setattr(os, "kill", lambda *a: calls.append(a))
  monkeypatch.setattr(os, "killpg", lambda *a: calls.append(a))
  state_dir = tmp_path / "state"
  path = write_state(state_dir, MALFORMED["string pids"][0])
  assert cli.main(["runner", "stop", "--state_dir", str(state_dir)]) == 1
  captured = capsys.readouterr()
  assert captured.out == "" and "Traceback" not in captured.err
  assert captured.err.splitlines() == [
      f"twotower runner: error: {path}: not a runner state file: pids.job_service is '4242', "
      f"not a pid (an int in 2..{runner_state.PID_LIMIT}); nothing was signalled (remove the "
      "file by hand if no runner runs from it)"]
  assert calls == []
  assert cli.main(["runner", "status", "--state_dir", str(state_dir)]) == 1
  assert cli.main(["runner", "start", "--state_dir", str(state_dir), "--job_port", "0",
                   "--worker_port", "0"]) == 1
  assert all(line.startswith("twotower runner: error: ")
             for line in capsys.readouterr().err.splitlines())
  assert calls == []


@pytest.fixture
def fake_services(tmp_path, monkeypatch):
  """`start` runs fake services (FAKE_SERVICE) instead of Beam's: each listens on its port;
  the pool starts one fake SDK worker, as Beam's does for a job."""
  pythonpath = fake_beam(tmp_path)
  monkeypatch.setenv("PYTHONPATH", pythonpath)
  monkeypatch.setattr(launcher, "_service_command", lambda name, port, python: [
      python, "-c", FAKE_SERVICE, name, str(port)])
  return str(tmp_path / "state")


def _members(pgid: int) -> list[int]:
  found = []
  for entry in os.listdir("/proc"):
    if entry.isdigit() and int(entry) != pgid and alive(int(entry)):
      with contextlib.suppress(OSError, IndexError):
        with open(f"/proc/{entry}/stat", "rb") as f:
          if int(f.read().rpartition(b")")[2].split()[2]) == pgid:
            found.append(int(entry))
  return found


def _started_worker(services) -> int:
  pool = services.pids["worker_pool"]
  assert wait_for(lambda: any(cmdline(p) == SDK_WORKER for p in _members(pool)))
  return next(p for p in _members(pool) if cmdline(p) == SDK_WORKER)


@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
def test_the_workers_of_a_dead_pool_are_ended_one_by_one(reaped, fake_services, capsys,
                                                          monkeypatch):
  """The pool died first (SIGKILL to it alone; reaped, or still a zombie): its SDK worker,
  proven ours (group, session, start time, command line, token), is ended with os.kill; no
  dead leader's group is signalled."""
  services = launcher.start(launcher.RunnerConfig(state_dir=fake_services, job_port=0,
                                                  worker_port=0, start_timeout_s=30))
  pool, job = services.pids["worker_pool"], services.pids["job_service"]
  worker = None
  try:
    assert services.token and services.boot_id == boot_id()
    assert services.start_times == {n: start_time(p) for n, p in services.pids.items()}
    worker = _started_worker(services)
    os.kill(pool, signal.SIGKILL)
    if reaped:
      os.waitpid(pool, 0)
    else:
      assert wait_for(lambda: not alive(pool))
    assert alive(worker)
    killpg = []
    real_killpg = os.killpg
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: (killpg.append(pgid),
                                                         real_killpg(pgid, sig)))
    assert cli.main(["runner", "stop", "--state_dir", fake_services]) == 0
    assert killpg == [job]  # the live, verified job service's group only
    assert wait_for(lambda: not alive(worker), 5)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"job_service  127.0.0.1:{services.job_port}  pid {job}  stopped",
        f"worker_pool  127.0.0.1:{services.worker_port}  pid {pool}  gone; ended 1 SDK "
        f"worker(s) left in its group (pid {worker})"]
  finally:
    launcher.stop(fake_services)
    if worker is not None:
      end(worker)
    with contextlib.suppress(ChildProcessError):
      os.waitpid(pool, 0)


def test_start_refuses_without_proc(tmp_path, monkeypatch):
  """Without /proc (not Linux) nothing could be verified, so nothing would ever be stopped."""
  monkeypatch.setattr(processes, "boot_id", lambda: None)
  with pytest.raises(launcher.RunnerError, match="needs Linux's /proc"):
    launcher.start(launcher.RunnerConfig(state_dir=str(tmp_path), job_port=0, worker_port=0))
  assert runner_state.read_state(str(tmp_path)) is None


def test_stop_ends_a_live_pool_with_its_workers(fake_services, capsys):
  services = launcher.start(launcher.RunnerConfig(state_dir=fake_services, job_port=0,
                                                  worker_port=0, start_timeout_s=30))
  worker = None
  try:
    worker = _started_worker(services)
    assert [s.running for s in launcher.status(fake_services)] == [True, True]
  finally:
    assert cli.main(["runner", "stop", "--state_dir", fake_services]) == 0
    if worker is not None:
      assert wait_for(lambda: not alive(worker), 5)
      end(worker)
  assert all(line.endswith("stopped") for line in capsys.readouterr().out.splitlines())
  assert not any(alive(p) for p in services.pids.values())


# --- Random state files (Hypothesis) --------------------------------------------------------


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
  """Processes the runner did not start, for random state files to name: a foreign group's
  leader, a fake SDK worker left in a foreign group whose leader exited (with another
  runner's token), and a child in this test's own group."""
  pythonpath = fake_beam(tmp_path_factory.mktemp("beam"))
  leader = foreign_group()
  dead_leader, worker = orphaned_group(pythonpath, token="cd" * 16)
  child = subprocess.Popen([sys.executable, "-c", SLEEP])
  try:
    yield {"pids": [leader.pid, worker, child.pid, os.getpid()],
           "groups": [leader.pid, dead_leader, os.getpgrp()],
           "dead": [dead_leader], "token": "cd" * 16,
           "commands": [cmdline(p) for p in (leader.pid, worker, child.pid, os.getpid())]}
  finally:
    for process in (leader, child):
      process.kill()
      process.wait()
    end(worker)


def _random_state(foreign: dict):
  """Random state files: half well-formed, with the pids (and group ids) of the foreign
  processes, their start times off by a little, their command lines and another runner's
  token off by a digit among the values (or no start times, as an older twotower wrote);
  the rest such files with one field broken or missing, random JSON, or random bytes."""
  junk = (st.none() | st.booleans() | st.floats() | st.text(max_size=6)
          | st.integers() | st.lists(st.integers(), max_size=2)
          | st.sampled_from([str(p) for p in foreign["pids"]] + [0, 1, -1, -foreign["pids"][0],
                                                                 runner_state.PID_LIMIT + 1]))
  pid = (st.sampled_from(foreign["pids"]) | st.sampled_from(foreign["groups"])
         | st.sampled_from(foreign["dead"])  # (a foreign group with a fake SDK worker left)
         | st.sampled_from([os.getppid(), 2, runner_state.PID_LIMIT])
         | st.integers(2, runner_state.PID_LIMIT))
  times = [start_time(p) for p in foreign["pids"]]
  tick = (st.tuples(st.sampled_from(times), st.sampled_from([-3, -2, -1, 1, 2, 3])).map(sum)
          | st.sampled_from([0, 1]) | st.integers(0, 2**63 - 1))
  command = (st.sampled_from(foreign["commands"] + [SDK_WORKER])
             | st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3))
  token = (st.sampled_from([foreign["token"][:-1] + "e", "ab" * 16])
           | st.text("0123456789abcdef", min_size=32, max_size=32))

  def per_service(values):
    return st.fixed_dictionaries({"job_service": values, "worker_pool": values})

  current = st.fixed_dictionaries({
      "state_dir": st.text(max_size=5), "job_port": st.integers(1, 65535),
      "worker_port": st.integers(1, 65535), "workers": st.integers(1, 9),
      "pids": per_service(pid), "commands": per_service(command),
      "start_times": per_service(tick),
      "boot_id": st.sampled_from([boot_id(), boot_id(), "another-boot"]), "token": token})
  older = current.map(lambda d: {k: v for k, v in d.items()
                                 if k not in ("start_times", "boot_id", "token")})
  well_formed = _weighted((2, current), (1, older))

  def broken(content):
    keys = sorted(content)
    return st.tuples(st.sampled_from(keys), st.sampled_from(list(runner_state.SERVICES)),
                     st.integers(0, 2), junk).map(lambda t: _break(content, *t))

  anything = st.recursive(
      st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                   max_size=3), max_leaves=8)
  # Well-formed files, 3 of 4, reach the processes.
  return _weighted((9, well_formed), (1, well_formed.flatmap(broken)), (1, anything),
                   (1, st.binary(max_size=12)))


def _weighted(*choices):
  """One of the strategies, each drawn in proportion to its weight (st.one_of draws its
  branches about evenly, and takes a repeated one once)."""
  slots = [strategy for weight, strategy in choices for _ in range(weight)]
  return st.integers(0, len(slots) - 1).flatmap(lambda i: slots[i])


def _break(content: dict, key: str, service: str, how: int, junk) -> dict:
  """`content` with `key` (or its `service` entry) replaced by `junk` or removed."""
  content = json.loads(json.dumps(content))
  if how == 0:
    del content[key]
  elif how == 1 or not isinstance(content[key], dict):
    content[key] = junk
  else:
    content[key][service] = junk
  return content


def _names_a_foreign_process_exactly(content, foreign: dict) -> bool:
  """Whether a drawn file records a live foreign process exactly as it is (pid, start time,
  command line, this boot): that is a forged record, indistinguishable from a true one, not
  a stale one; the strategy never draws one, short of a chance hit."""
  try:
    return any(
        content["boot_id"] == boot_id() and content["pids"][n] in foreign["pids"]
        and content["start_times"][n] == start_time(content["pids"][n])
        and content["commands"][n][1:] == cmdline(content["pids"][n])[1:]
        for n in runner_state.SERVICES)
  except (KeyError, TypeError, IndexError, OSError):
    return False


@pytest.fixture(scope="module")
def random_state_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("random"))


@settings(max_examples=50, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_state_files_never_signal_a_process_the_runner_did_not_start(
    data, foreign, random_state_dir):
  content = data.draw(_random_state(foreign), label="state file")
  assume(not _names_a_foreign_process_exactly(content, foreign))
  path = write_state(random_state_dir, content)
  signalled = []
  real = {"kill": os.kill, "killpg": os.killpg}
  # A signal still goes to a foreign test process (so a wrong one would really end it), but
  # never to this test's own process or group, nor to anything else on the machine.
  targets = {"kill": set(foreign["pids"]) - {os.getpid()},
             "killpg": set(foreign["groups"]) - {os.getpgrp()}}

  def recorder(kind):
    def send(target, sig):
      signalled.append((kind, target, sig))
      if target in targets[kind]:
        real[kind](target, sig)
    return send

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(os, "kill", recorder("kill"))
    patch.setattr(os, "killpg", recorder("killpg"))
    try:
      outcomes = launcher.stop(random_state_dir, timeout_s=0.5)
    except runner_state.RunnerError as e:
      assert str(e).startswith(f"{path}: ") and "\n" not in str(e)
      event("refused")
    else:  # (shown by --hypothesis-show-statistics: how many got to the processes)
      event("checked: " + ", ".join(sorted({s.outcome for s in outcomes})))
      if (content.get("boot_id") == boot_id()
          and set(foreign["dead"]) & set(content["pids"].values())):
        event("checked: names the dead foreign leader, this boot")
  assert signalled == []  # the runner started none of these processes
  for pid in foreign["pids"]:
    assert alive(pid), pid
