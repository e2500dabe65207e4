"""Beam's portable stack on this machine: a job service and an external worker pool on
127.0.0.1, for `twotower pairs|reqa|embed --runner=PortableRunner ...` (`twotower runner`).

    start(RunnerConfig) -> Services   both up and accepting connections, state file written
    status(state_dir)   -> [ServiceStatus]
    stop(state_dir)     -> [Stopped]  what became of each recorded service

The job service is the JobService API that a Flink or Spark job server also implements; it
runs each job with Beam's FnApiRunner, whose SDK workers the pool starts as processes
(`--environment_type=EXTERNAL`); `--direct_num_workers=N` in the job's flags asks for N of
them. Both services run through `twotower.deploy.portable.services` (every port on
127.0.0.1), each in a session and process group of its own, so that `stop` ends a service
with the workers it started and nothing else. The worker pool starts `python` from PATH: the
interpreter's folder goes first on its PATH, so the workers import this twotower.

The launcher ends only what it started (Linux: it reads /proc; `start` refuses without it).
The state file (`runner.json`, `twotower.deploy.portable.runner_state`) records each
service's pid, command line and start time, with the boot's id and a token that the
services' environment carries to their workers; `twotower.deploy.portable.processes` tells
from those which process is ours. `stop` signals a process group (`os.killpg`) only while
its leader is verified ours, checked again just before each signal; what is left in a dead
leader's group is ended one pid at a time (`os.kill`), each only if proven ours on its own.
Anything else recorded or found there is left alone, with a warning naming the pid and why;
a malformed state file, or one of an older twotower, gets nothing signalled.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time

from twotower.core import files as tio
from twotower.core import outputs
from twotower.deploy.portable import processes, runner_state

logger = logging.getLogger(__name__)

#: The job service's port: a Flink or Spark job server's default (8099).
DEFAULT_JOB_PORT = 8099
#: The worker pool's port: the Beam SDK container's worker pool default (50000).
DEFAULT_WORKER_PORT = 50000
#: SDK worker processes a job asks the pool for (--direct_num_workers).
DEFAULT_WORKERS = 2

# Re-exported: start returns Services, and start, status and stop raise RunnerError, so the
# launcher's callers need not know that the state file's module defines them.
Services = runner_state.Services
RunnerError = runner_state.RunnerError


def default_state_dir() -> str:
  """$XDG_RUNTIME_DIR/twotower-runner when the session has one (a per-user tmpfs, gone at
  logout as the services are), else ~/.cache/twotower/runner."""
  runtime = os.environ.get("XDG_RUNTIME_DIR")
  if runtime:
    return os.path.join(runtime, "twotower-runner")
  return os.path.join(os.path.expanduser("~"), ".cache", "twotower", "runner")


@dataclasses.dataclass(frozen=True)
class RunnerConfig:
  """What `twotower runner start` starts."""
  state_dir: str = dataclasses.field(default_factory=default_state_dir)
  job_port: int = DEFAULT_JOB_PORT        # 0: a free port
  worker_port: int = DEFAULT_WORKER_PORT  # 0: a free port
  workers: int = DEFAULT_WORKERS          # SDK worker processes per job (the printed flags)
  python: str = sys.executable            # the interpreter of both services and the workers
  start_timeout_s: float = 60.0           # both must accept connections within this


@dataclasses.dataclass(frozen=True)
class ServiceStatus:
  name: str
  pid: int
  port: int
  running: bool    # the recorded process is alive and verified ours (`processes.is_ours`)
  accepting: bool  # its port takes connections


@dataclasses.dataclass(frozen=True)
class Stopped:
  """What `stop` did with one recorded service."""
  name: str
  pid: int
  port: int
  outcome: str  # "stopped" (ours, signalled), "gone" (nothing of it ran), "left alone"
  reason: str = ""  # why it was left alone (also logged as a warning)
  workers: tuple = ()  # pids left in its dead leader's group, proven ours and ended


def free_port() -> int:
  """A port on 127.0.0.1 that nothing listens on now."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind((runner_state.LOOPBACK, 0))
    return s.getsockname()[1]


def check_port_free(port: int, flag: str) -> None:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    try:
      s.bind((runner_state.LOOPBACK, port))
    except OSError as e:
      raise RunnerError(f"{runner_state.LOOPBACK}:{port} is taken ({e.strerror}); give "
                        f"another {flag} (0 = a free one)") from None


def accepting(port: int, timeout: float = 0.5) -> bool:
  try:
    with socket.create_connection((runner_state.LOOPBACK, port), timeout=timeout):
      return True
  except OSError:
    return False


def _service_command(name: str, port: int, python: str) -> list[str]:
  port_flag = "--port" if name == "job_service" else "--service_port"
  return [python, "-m", "twotower.deploy.portable.services", name, port_flag, str(port)]


def _environment(python: str, token: str) -> dict:
  """The services' environment: the interpreter's folder first on PATH (the pool starts its
  workers as `python`), and the runner's token (which the workers inherit)."""
  env = dict(os.environ)
  env["PATH"] = os.pathsep.join([os.path.dirname(python), env.get("PATH", "")])
  env[processes.TOKEN_VARIABLE] = token
  return env


def start(config: RunnerConfig = RunnerConfig()) -> Services:
  """Starts the job service and the worker pool; returns once both accept connections.

  Raises:
    RunnerError: a runner already started from `config.state_dir`, a port taken, or a
      service that exited or did not listen within `start_timeout_s` (both are then
      stopped; the message quotes the end of its log); no /proc (`stop` could not tell
      the services from programs that reuse their pids).
  """
  state_dir = os.path.abspath(config.state_dir)
  boot_id = processes.boot_id()
  if not os.path.isdir("/proc/self") or boot_id is None:
    raise RunnerError("`twotower runner` needs Linux's /proc (process start times, the boot "
                      "id) to tell the processes it starts from others; none here")
  old = runner_state.read_state(state_dir)
  if old is not None and any(s.running for s in status(state_dir)):
    raise RunnerError(f"a runner is already started from {state_dir} (job service "
                      f"{old.job_endpoint}, worker pool {old.worker_endpoint}); "
                      "`twotower runner stop` first, or give another --state_dir")
  ports = {}
  for name, port, flag in (("job_service", config.job_port, "--job_port"),
                           ("worker_pool", config.worker_port, "--worker_port")):
    if port:
      check_port_free(port, flag)
    ports[name] = port or free_port()
  if ports["job_service"] == ports["worker_pool"]:
    raise RunnerError(f"--job_port and --worker_port are both {ports['job_service']}")
  os.makedirs(state_dir, exist_ok=True)
  token = secrets.token_hex(16)
  env = _environment(config.python, token)
  pids, commands, start_times = {}, {}, {}
  for name in runner_state.SERVICES:
    command = _service_command(name, ports[name], config.python)
    with open(os.path.join(state_dir, f"{name}.log"), "wb") as log:
      # A process group of its own: stop() signals the service with the workers it started.
      process = subprocess.Popen(command, cwd=state_dir, env=env, stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    # An unreaped child: its stat is readable even if it exited already.
    proc = processes.read_proc(process.pid)
    if proc is None:
      raise RunnerError(f"{name} (pid {process.pid}): no /proc/{process.pid}/stat")
    pids[name], commands[name], start_times[name] = process.pid, command, proc.start_time
  services = Services(state_dir=state_dir, job_port=ports["job_service"],
                      worker_port=ports["worker_pool"], workers=config.workers, pids=pids,
                      commands=commands, start_times=start_times, boot_id=boot_id,
                      token=token)
  tio.write_json(runner_state.state_path(state_dir), dataclasses.asdict(services))
  try:
    _wait_until_accepting(services, config.start_timeout_s)
  except BaseException:
    stop(state_dir)
    raise
  logger.info("job service %s, worker pool %s", services.job_endpoint,
              services.worker_endpoint)
  return services


def _log_tail(state_dir: str, name: str, lines: int = 5) -> str:
  try:
    with open(os.path.join(state_dir, f"{name}.log"), encoding="utf-8",
              errors="replace") as f:
      return " | ".join(line.strip() for line in f.read().splitlines()[-lines:])
  except OSError:
    return ""


def _wait_until_accepting(services: Services, timeout_s: float) -> None:
  deadline = time.monotonic() + timeout_s
  waiting = {"job_service": services.job_port, "worker_pool": services.worker_port}
  while waiting:
    for name, port in list(waiting.items()):
      pid = services.pids[name]
      try:
        exited = os.waitpid(pid, os.WNOHANG)[0] == pid
      except ChildProcessError:  # not our child (another process started it)
        proc = processes.read_proc(pid)
        exited = proc is None or proc.state == "Z"
      if exited:
        raise RunnerError(f"{name} exited at start: {_log_tail(services.state_dir, name)}")
      if accepting(port):
        del waiting[name]
    if waiting and time.monotonic() > deadline:
      names = ", ".join(f"{n} ({runner_state.LOOPBACK}:{p})" for n, p in waiting.items())
      raise RunnerError(f"{names}: not accepting connections after {timeout_s:.0f} s; "
                        f"logs in {services.state_dir}")
    if waiting:
      time.sleep(0.2)


def status(state_dir: str | None = None) -> list[ServiceStatus]:
  """What the state file in `state_dir` records, and whether each still runs; [] when no
  runner was started from there.

  Raises:
    RunnerError: a malformed state file (`runner_state.read_state`).
  """
  services = runner_state.read_state(os.path.abspath(state_dir or default_state_dir()))
  if services is None:
    return []
  ports = {"job_service": services.job_port, "worker_pool": services.worker_port}
  out = []
  for name in runner_state.SERVICES:
    running = processes.verdict(services, name)[0] == processes.OURS
    out.append(ServiceStatus(name, services.pids[name], ports[name], running,
                             running and accepting(ports[name])))
  return out


def _signal_group(services: Services, name: str, sig: int) -> bool:
  """Signals `name`'s process group if its leader is ours, verified just before; whether it
  did. (A dead leader's group is never signalled: see `_end_leftovers`.)"""
  if processes.verdict(services, name)[0] != processes.OURS:
    return False
  try:
    os.killpg(services.pids[name], sig)  # start_new_session: the leader's pid is its id
  except ProcessLookupError:
    return False
  return True


def _wait_gone(services: Services, name: str, timeout_s: float) -> bool:
  pid = services.pids[name]
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    try:
      if os.waitpid(pid, os.WNOHANG)[0] == pid:
        return True
    except ChildProcessError:  # not our child: watch it from outside
      if processes.verdict(services, name)[0] != processes.OURS:
        return True
    time.sleep(0.1)
  return False


def _end_leftovers(services: Services, name: str, timeout_s: float) -> tuple[int, ...]:
  """Ends, one pid at a time, what is left in the group of `name`'s leader once the leader
  is dead, each only if it is proven ours (`processes.leftover_verdict`); warns of the
  others. Waits up to `timeout_s` first for members to exit by themselves (after a
  SIGTERM)."""
  leader = services.pids[name]
  deadline = time.monotonic() + timeout_s
  while processes.group_members(leader) and time.monotonic() < deadline:
    time.sleep(0.1)
  ended = []
  for proc in processes.group_members(leader):
    why = processes.leftover_verdict(proc, services, name)
    if why:
      logger.warning("%s: pid %d, in the process group of the dead pid %d, left alone: %s",
                     name, proc.pid, leader, why)
      continue
    try:
      os.kill(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
      continue
    ended.append(proc.pid)
  if ended:
    logger.info("%s: ended %d SDK workers left after pid %d: %s", name, len(ended), leader,
                ended)
  return tuple(ended)


def stop(state_dir: str | None = None, timeout_s: float = 10.0) -> list[Stopped]:
  """Stops what `start` started from `state_dir` and removes the state file; returns what
  became of each recorded service (nothing recorded: []).

  A service verified ours (`processes.is_ours`) gets SIGTERM, to its process group, then
  SIGKILL after `timeout_s`; what is left of a group whose leader is dead is ended one
  process at a time, each proven ours; a recorded process that is not ours is left alone,
  with a warning.

  Raises:
    RunnerError: a malformed state file (nothing signalled, the file kept).
  """
  state_dir = os.path.abspath(state_dir or default_state_dir())
  services = runner_state.read_state(state_dir)
  if services is None:
    return []
  ports = {"job_service": services.job_port, "worker_pool": services.worker_port}
  out = []
  for name in runner_state.SERVICES:
    pid = services.pids[name]
    kind, why = processes.verdict(services, name)
    if kind == processes.FOREIGN:
      logger.warning("%s: pid %d left alone: %s", name, pid, why)
      out.append(Stopped(name, pid, ports[name], "left alone", why))
      continue
    outcome, wait_s = "gone", 0.0
    if kind == processes.OURS and _signal_group(services, name, signal.SIGTERM):
      outcome, wait_s = "stopped", timeout_s
      if not _wait_gone(services, name, timeout_s):
        logger.warning("%s (pid %d) still runs after SIGTERM: SIGKILL", name, pid)
        _signal_group(services, name, signal.SIGKILL)
        _wait_gone(services, name, timeout_s)
    workers = ()
    if processes.unverifiable(services) is None:  # (else no token to prove any leftover ours)
      workers = _end_leftovers(services, name, wait_s)
    out.append(Stopped(name, pid, ports[name], outcome, workers=workers))
  outputs.discard(runner_state.state_path(state_dir))
  return out


def describe(services: Services) -> str:
  """The lines `twotower runner start` prints: endpoints, then the flags to add."""
  return "\n".join([
      f"job service  {services.job_endpoint}  (pid {services.pids['job_service']})",
      f"worker pool  {services.worker_endpoint}  (pid {services.pids['worker_pool']}, "
      f"{services.workers} SDK workers per job)",
      f"state and logs in {services.state_dir}", "",
      "add to `twotower pairs|reqa|embed` (absolute or relative local paths both work; the",
      "workers run on this machine):", "  " + " ".join(services.beam_args())])


ACTIONS = ("start", "stop", "status")


def run(action: str, config: RunnerConfig = RunnerConfig()):
  """`twotower runner ACTION`: start -> Services; stop -> [Stopped]; status ->
  [ServiceStatus]."""
  if action == "start":
    return start(config)
  if action == "stop":
    return stop(config.state_dir)
  if action == "status":
    return status(config.state_dir)
  raise ValueError(f"unknown action {action!r}: expected one of {', '.join(ACTIONS)}")


if __name__ == "__main__":
  from twotower import cli
  sys.exit(cli.run_stage("runner"))
