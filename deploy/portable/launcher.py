"""Beam's portable stack on this machine: a job service and an external worker pool on
127.0.0.1, for `twotower pairs|reqa|embed --runner=PortableRunner ...` (`twotower runner`).

    start(RunnerConfig) -> Services   both up and accepting connections, state file written
    status(state_dir)   -> [ServiceStatus]
    stop(state_dir)     -> [ServiceStatus] of what was stopped

The job service is the JobService API that a Flink or Spark job server also implements; it
runs each job with Beam's FnApiRunner, whose SDK workers the pool starts as processes
(`--environment_type=EXTERNAL`); `--direct_num_workers=N` in the job's flags asks for N of
them. Both services run through `twotower.deploy.portable.services` (every port on
127.0.0.1), each in a process group of its own, so that `stop` ends a service with the
workers it started and nothing else. The worker pool starts `python` from PATH: the
interpreter's folder goes first on its PATH, so the workers import this twotower.

The state file (`runner.json` in the state folder) holds the pids, ports and commands; a
process is taken for ours only while its command line is the one recorded (a pid reused by
another program after a crash is never signalled).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import time

from twotower import io as tio
from twotower import outputs

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
#: The job service's port: a Flink or Spark job server's default (8099).
DEFAULT_JOB_PORT = 8099
#: The worker pool's port: the Beam SDK container's worker pool default (50000).
DEFAULT_WORKER_PORT = 50000
#: SDK worker processes a job asks the pool for (--direct_num_workers).
DEFAULT_WORKERS = 2
STATE_FILE = "runner.json"
SERVICES = ("job_service", "worker_pool")


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
class Services:
  """What `start` started (the state file's content)."""
  state_dir: str
  job_port: int
  worker_port: int
  workers: int
  pids: dict  # service name -> pid (also its process group id)
  commands: dict  # service name -> argv

  @property
  def job_endpoint(self) -> str:
    return f"{LOOPBACK}:{self.job_port}"

  @property
  def worker_endpoint(self) -> str:
    return f"{LOOPBACK}:{self.worker_port}"

  def beam_args(self) -> tuple[str, ...]:
    """The flags a Beam stage (`twotower pairs|reqa|embed`) takes to run here."""
    return ("--runner=PortableRunner", f"--job_endpoint={self.job_endpoint}",
            "--environment_type=EXTERNAL", f"--environment_config={self.worker_endpoint}",
            f"--direct_num_workers={self.workers}")


@dataclasses.dataclass(frozen=True)
class ServiceStatus:
  name: str
  pid: int
  port: int
  running: bool    # the recorded process is alive, with its recorded command line
  accepting: bool  # its port takes connections


class RunnerError(RuntimeError):
  """A service that could not start, or a state the launcher will not touch."""


def state_path(state_dir: str) -> str:
  return os.path.join(state_dir, STATE_FILE)


def read_state(state_dir: str) -> Services | None:
  path = state_path(state_dir)
  if not os.path.exists(path):
    return None
  try:
    return Services(**tio.read_json(path))
  except (ValueError, TypeError) as e:
    raise RunnerError(f"{path}: not a runner state file ({e}); remove it by hand if no "
                      "runner is started from it") from None


def free_port() -> int:
  """A port on 127.0.0.1 that nothing listens on now."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind((LOOPBACK, 0))
    return s.getsockname()[1]


def check_port_free(port: int, flag: str) -> None:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    try:
      s.bind((LOOPBACK, port))
    except OSError as e:
      raise RunnerError(f"{LOOPBACK}:{port} is taken ({e.strerror}); give another {flag} "
                        "(0 = a free one)") from None


def accepting(port: int, timeout: float = 0.5) -> bool:
  try:
    with socket.create_connection((LOOPBACK, port), timeout=timeout):
      return True
  except OSError:
    return False


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def is_ours(pid: int, command: list[str]) -> bool:
  """Whether `pid` runs `command` now: its command line (Linux /proc) is the recorded one,
  so that a pid reused by another program is never taken for a service (a zombie has none).
  Without /proc (macOS), whether it is alive."""
  if not os.path.isdir("/proc/self"):
    return _alive(pid)
  try:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
      argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
  except OSError:
    return False
  # argv[0] may show as the interpreter symlink's target: compare the rest
  return bool(argv) and argv[1:] == list(command)[1:]


def _service_command(name: str, port: int, python: str) -> list[str]:
  port_flag = "--port" if name == "job_service" else "--service_port"
  return [python, "-m", "twotower.deploy.portable.services", name, port_flag, str(port)]


def _environment(python: str) -> dict:
  """The services' environment: the interpreter's folder first on PATH (the pool starts its
  workers as `python`)."""
  env = dict(os.environ)
  env["PATH"] = os.pathsep.join([os.path.dirname(python), env.get("PATH", "")])
  return env


def start(config: RunnerConfig = RunnerConfig()) -> Services:
  """Starts the job service and the worker pool; returns once both accept connections.

  Raises:
    RunnerError: a runner already started from `config.state_dir`, a port taken, or a
      service that exited or did not listen within `start_timeout_s` (both are then
      stopped; the message quotes the end of its log).
  """
  state_dir = os.path.abspath(config.state_dir)
  old = read_state(state_dir)
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
  env = _environment(config.python)
  pids, commands = {}, {}
  for name in SERVICES:
    command = _service_command(name, ports[name], config.python)
    with open(os.path.join(state_dir, f"{name}.log"), "wb") as log:
      # A process group of its own: stop() signals the service with the workers it started.
      process = subprocess.Popen(command, cwd=state_dir, env=env, stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    pids[name], commands[name] = process.pid, command
  services = Services(state_dir=state_dir, job_port=ports["job_service"],
                      worker_port=ports["worker_pool"], workers=config.workers, pids=pids,
                      commands=commands)
  tio.write_json(state_path(state_dir), dataclasses.asdict(services))
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
        exited = not _alive(pid)
      if exited:
        raise RunnerError(f"{name} exited at start: {_log_tail(services.state_dir, name)}")
      if accepting(port):
        del waiting[name]
    if waiting and time.monotonic() > deadline:
      names = ", ".join(f"{n} ({LOOPBACK}:{p})" for n, p in waiting.items())
      raise RunnerError(f"{names}: not accepting connections after {timeout_s:.0f} s; "
                        f"logs in {services.state_dir}")
    if waiting:
      time.sleep(0.2)


def status(state_dir: str | None = None) -> list[ServiceStatus]:
  """What the state file in `state_dir` records, and whether each still runs; [] when no
  runner was started from there."""
  services = read_state(os.path.abspath(state_dir or default_state_dir()))
  if services is None:
    return []
  ports = {"job_service": services.job_port, "worker_pool": services.worker_port}
  out = []
  for name in SERVICES:
    pid = services.pids[name]
    running = is_ours(pid, services.commands[name])
    out.append(ServiceStatus(name, pid, ports[name], running,
                             running and accepting(ports[name])))
  return out


def _signal_group(pid: int, sig: int) -> None:
  try:
    os.killpg(pid, sig)  # start_new_session: the service's pid is its group's id
  except ProcessLookupError:
    pass


def _wait_gone(pid: int, command: list[str], timeout_s: float) -> bool:
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    try:
      if os.waitpid(pid, os.WNOHANG)[0] == pid:
        return True
    except ChildProcessError:  # not our child: watch it from outside
      if not is_ours(pid, command):
        return True
    time.sleep(0.1)
  return False


def stop(state_dir: str | None = None, timeout_s: float = 10.0) -> list[ServiceStatus]:
  """Stops what `start` started from `state_dir` (each service's process group: SIGTERM,
  then SIGKILL after `timeout_s`) and removes the state file; returns the services that were
  running. Nothing recorded: []."""
  state_dir = os.path.abspath(state_dir or default_state_dir())
  services = read_state(state_dir)
  if services is None:
    return []
  stopped = []
  for current in status(state_dir):
    pid, command = current.pid, services.commands[current.name]
    if current.running:
      _signal_group(pid, signal.SIGTERM)
      if not _wait_gone(pid, command, timeout_s):
        logger.warning("%s (pid %d) still runs after SIGTERM: SIGKILL", current.name, pid)
        _signal_group(pid, signal.SIGKILL)
        _wait_gone(pid, command, timeout_s)
      stopped.append(current)
    if current.running or not _alive(pid):
      # What is left of its group (workers of a pool that died first): a group's id is
      # its leader's pid, which no other process gets while the group has a member.
      _signal_group(pid, signal.SIGKILL)
  outputs.discard(state_path(state_dir))
  return stopped


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
  """`twotower runner ACTION`: start -> Services; stop, status -> [ServiceStatus]."""
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
