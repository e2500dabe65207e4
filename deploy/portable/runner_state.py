"""The runner's state file: what `twotower runner start` started, for `status` and `stop`.

    Services                 the file's content: ports, pids, command lines, start times
    state_path(state_dir)    -> the file (`runner.json` in the state folder)
    read_state(state_dir)    -> Services, or None when there is none; RunnerError when it is
                                not what `start` writes

The file records per service the pid, the command line and the start time (field 22 of
/proc/PID/stat, clock ticks since boot), with the boot's id and a random token that `start`
puts in both services' environment (`processes.TOKEN_VARIABLE`), where the pool's SDK
workers inherit it: what `twotower.deploy.portable.processes` tells the runner's processes
from others by.

* A state file that is not what `start` writes (not JSON, not an object, a missing or
  unknown key, a pid that is not an int in 2..4194304, a port outside 1..65535, commands
  that are not lists of strings, ...) is refused with one line naming the file and the
  field; nothing is signalled and the file is kept.
* A state file of an older twotower (no start times, boot id or token) is read (its
  verification fields None), but cannot be verified: nothing in it is signalled; `stop`
  warns with each live pid and removes the file.
"""

from __future__ import annotations

import dataclasses
import os

from twotower.core import files as tio

LOOPBACK = "127.0.0.1"
STATE_FILE = "runner.json"
SERVICES = ("job_service", "worker_pool")
#: Linux's largest pid (PID_MAX_LIMIT on 64 bits): a recorded pid above it names nothing.
PID_LIMIT = 4 * 1024 * 1024


class RunnerError(RuntimeError):
  """A service that could not start, or a state the launcher will not touch."""


@dataclasses.dataclass(frozen=True)
class Services:
  """What `start` started (the state file's content)."""
  state_dir: str
  job_port: int
  worker_port: int
  workers: int
  pids: dict  # service name -> pid (also its process group's and session's id)
  commands: dict  # service name -> argv
  # Written by every start; None only in a state file of an older twotower (unverifiable).
  start_times: dict | None = None  # service name -> /proc/PID/stat starttime (ticks)
  boot_id: str | None = None  # /proc/sys/kernel/random/boot_id: start times count from it
  token: str | None = None  # processes.TOKEN_VARIABLE in the services' (and workers') env

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


def state_path(state_dir: str) -> str:
  return os.path.join(state_dir, STATE_FILE)


def read_state(state_dir: str) -> Services | None:
  """The state file in `state_dir`; None when there is none.

  Raises:
    RunnerError: one line naming the file and the field, when it is not what `start` writes
      (the file is kept: nothing it names is signalled).
  """
  path = state_path(state_dir)
  if not os.path.lexists(path):
    return None
  try:
    data = tio.read_json(path)
  except (OSError, ValueError, RecursionError) as e:  # (ValueError: bad JSON, UTF-8, ints)
    raise _refused(path, f"not readable as JSON ({_first_line(e)})") from None
  return _parse_state(path, data)


_FIELDS = ("state_dir", "job_port", "worker_port", "workers", "pids", "commands")
#: Written together by every start, all missing from an older twotower's state file.
_VERIFY_FIELDS = ("start_times", "boot_id", "token")


def _first_line(e: BaseException) -> str:
  lines = str(e).strip().splitlines()
  return lines[0][:120] if lines else type(e).__name__


def shown(value) -> str:
  """A short one-line rendering of a state file's value, for an error message."""
  if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
    return f"an int of {value.bit_length()} bits"  # (repr of a huge int may itself fail)
  try:
    text = repr(value)
  except (ValueError, RecursionError):
    return f"a {type(value).__name__}"
  return text if len(text) <= 40 else text[:37] + "..."


def _refused(path: str, why: str) -> RunnerError:
  return RunnerError(f"{path}: not a runner state file: {why}; nothing was signalled (remove "
                     "the file by hand if no runner runs from it)")


def _parse_state(path: str, data) -> Services:
  """`data` (a state file's JSON) as Services, each field's type and range checked: a pid
  handed to os.kill unchecked could be 0 or negative (a whole group), 1, or not an int."""

  def bad(field: str, value, expected: str) -> RunnerError:
    return _refused(path, f"{field} is {shown(value)}, not {expected}")

  def integer(field: str, value, low: int, high: int, expected: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
      raise bad(field, value, expected)
    return value

  def per_service(field: str, value, check) -> dict:
    if not isinstance(value, dict):
      raise bad(field, value, f"an object of {' and '.join(SERVICES)}")
    if sorted(value) != sorted(SERVICES):
      raise _refused(path, f"{field} has the keys {shown(sorted(value))}, not "
                           f"{' and '.join(SERVICES)}")
    return {name: check(f"{field}.{name}", value[name]) for name in SERVICES}

  def command(field: str, value) -> list:
    if (not isinstance(value, list) or not value
        or not all(isinstance(a, str) for a in value)):
      raise bad(field, value, "a non-empty list of strings")
    return value

  if not isinstance(data, dict):
    raise bad("its content", data, "an object")
  unknown = sorted(set(data) - set(_FIELDS) - set(_VERIFY_FIELDS))
  if unknown:
    raise _refused(path, f"unknown field {shown(unknown[0])}")
  verify = [f for f in _VERIFY_FIELDS if f in data]
  for field in (*_FIELDS, *(_VERIFY_FIELDS if verify else ())):
    if field not in data:
      raise _refused(path, f"no {field}")
  if not isinstance(data["state_dir"], str):
    raise bad("state_dir", data["state_dir"], "a string")
  ports = {f: integer(f, data[f], 1, 65535, "a port (1..65535)")
           for f in ("job_port", "worker_port")}
  workers = integer("workers", data["workers"], 1, 2**31 - 1, "an int >= 1")
  pids = per_service("pids", data["pids"], lambda f, v: integer(
      f, v, 2, PID_LIMIT, f"a pid (an int in 2..{PID_LIMIT})"))
  commands = per_service("commands", data["commands"], command)
  verified = {}
  if verify:
    verified["start_times"] = per_service("start_times", data["start_times"], lambda f, v: (
        integer(f, v, 0, 2**63 - 1, "a start time (clock ticks since boot)")))
    boot_id, token = data["boot_id"], data["token"]
    if not isinstance(boot_id, str) or not 0 < len(boot_id) <= 64:
      raise bad("boot_id", boot_id, "a boot id (a string)")
    if (not isinstance(token, str) or len(token) != 32
        or any(c not in "0123456789abcdef" for c in token)):
      raise bad("token", token, "a token (32 hex digits)")
    verified.update(boot_id=boot_id, token=token)
  return Services(state_dir=data["state_dir"], job_port=ports["job_port"],
                  worker_port=ports["worker_port"], workers=workers, pids=pids,
                  commands=commands, **verified)
