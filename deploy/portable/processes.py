"""Which process is the runner's: Linux's /proc read against what the state file records
(`twotower.deploy.portable.runner_state`), so that `stop` signals nothing it did not start.

    is_ours(pid, command, start_time)   a recorded process, alive and the one recorded
    verdict(services, name)             (OURS | DEAD | FOREIGN, why) for a recorded service
    leftover_verdict(proc, services, name)  why a process left in a dead service's group is
                                        not proven ours ("" when it is)
    group_members(pgid)                 what is left in a process group, its leader aside

A process's identity is its pid with its start time (field 22 of /proc/PID/stat, clock ticks
since boot), which counts from the boot that /proc/sys/kernel/random/boot_id names.

* A recorded process is ours while it is alive (not a zombie), in the recorded boot, with
  the recorded start time and command line (`is_ours`): a pid that another program reused,
  even one with the same command line, has another start time.
* While a service's leader lives, its process group is the one `start` created (its id is
  the leader's pid, which no other process gets meanwhile). Once the leader is dead, the
  group's id proves nothing: the pid may have been reused by a program that made a group of
  the same id. What is left in the group (the pool's SDK workers, when the pool died first)
  is ours only if proven so one process at a time (`leftover_verdict`): in the recorded
  pid's group and session, started no earlier than the leader, running Beam's SDK worker
  command line, and carrying this runner's token (TOKEN_VARIABLE) in its environment. The
  token is the proof (a group made by another runner's or program's reuse of the pid passes
  the other checks); the rest narrow it.
* A state file of an older twotower (no start times), one from another boot, or any on a
  machine without /proc cannot be verified: nothing it records is ours (`unverifiable`).
"""

from __future__ import annotations

import dataclasses
import os

from twotower.deploy.portable import runner_state

#: Carries a runner's token into its services' environment and so into their workers': the
#: proof that a process left in a dead service's group descends from this runner.
TOKEN_VARIABLE = "TWOTOWER_RUNNER_TOKEN"
#: How Beam's worker pool (worker_pool_main's StartWorker, without --container_executable)
#: starts each SDK worker: `python -c "<this>"<control endpoint>",worker_id=...).run()"`.
SDK_WORKER_CODE = "from apache_beam.runners.worker.sdk_worker import SdkHarness; SdkHarness("


@dataclasses.dataclass(frozen=True)
class Proc:
  """A process as /proc/PID/stat shows it."""
  pid: int
  state: str  # "Z": a zombie (exited, not yet reaped)
  pgid: int
  sid: int
  start_time: int  # clock ticks since boot: with the pid, the process's identity


def read_proc(pid: int) -> Proc | None:
  """None when no process has `pid` (or its stat cannot be read)."""
  try:
    with open(f"/proc/{pid}/stat", "rb") as f:
      stat = f.read().decode("ascii", "replace")
  except OSError:
    return None
  # Field 2 (comm) is in parentheses and may itself hold spaces and ')': the fields are read
  # after the last ')', from field 3 (state) on: 5 the group, 6 the session, 22 starttime.
  fields = stat.rpartition(")")[2].split()
  try:
    return Proc(pid, fields[0], int(fields[2]), int(fields[3]), int(fields[19]))
  except (IndexError, ValueError):
    return None


def _same(proc: Proc, now: Proc | None) -> bool:
  """Whether `now` is the process `proc` was (its state may have changed, not its start)."""
  return now is not None and (now.start_time, now.pgid) == (proc.start_time, proc.pgid)


def _cmdline(pid: int) -> list[str] | None:
  try:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
      data = f.read()
  except OSError:
    return None
  if data.endswith(b"\0"):
    data = data[:-1]
  return [a.decode(errors="replace") for a in data.split(b"\0")] if data else []


def _has_token(pid: int, token: str) -> bool:
  """Whether `pid` started with this runner's token in its environment (False for another
  user's process, whose environment cannot be read)."""
  try:
    with open(f"/proc/{pid}/environ", "rb") as f:
      entries = f.read().split(b"\0")
  except OSError:
    return False
  return f"{TOKEN_VARIABLE}={token}".encode() in entries


def boot_id() -> str | None:
  try:
    with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
      return f.read().strip() or None
  except OSError:
    return None


OURS, DEAD, FOREIGN = "ours", "dead", "foreign"


def _process_verdict(pid: int, command: list[str], start_time: int) -> tuple[str, str]:
  """(OURS, ""), (DEAD, why) or (FOREIGN, why) for the process recorded as `pid`."""
  proc = read_proc(pid)
  if proc is None:
    return DEAD, "no process has its pid"
  if proc.start_time != start_time:
    return FOREIGN, (f"started at tick {proc.start_time} since boot, not at the recorded "
                     f"{start_time}: another program reused the pid")
  if proc.state == "Z":
    return DEAD, "exited (a zombie)"
  argv = _cmdline(pid)
  if not _same(proc, read_proc(pid)):  # it exited (its pid maybe reused) while being read
    return DEAD, "exited"
  # argv[0] may show as the interpreter symlink's target: compare the rest
  if not argv or argv[1:] != list(command)[1:]:
    return FOREIGN, f"runs {runner_state.shown(argv)}, not the recorded command line"
  return OURS, ""


def is_ours(pid: int, command: list[str], start_time: int | None) -> bool:
  """Whether `pid` is the process started as `command` at `start_time` (/proc/PID/stat
  starttime): alive, not a zombie, with both as recorded. None (not recorded): False."""
  if start_time is None or not os.path.isdir("/proc/self"):
    return False
  return _process_verdict(pid, command, start_time)[0] == OURS


def unverifiable(services: runner_state.Services) -> str | None:
  """Why no process of `services` can be verified at all; None when each can be."""
  if not os.path.isdir("/proc/self"):
    return "no /proc here to verify it by"
  if services.start_times is None:
    return ("recorded without a start time (by an older twotower), so it cannot be told "
            "from a program that reused the pid; end it by hand if it is the runner")
  if services.boot_id != boot_id():
    return "recorded in another boot"
  return None


def verdict(services: runner_state.Services, name: str) -> tuple[str, str]:
  """(OURS, ""), (DEAD, why) or (FOREIGN, why) for the service `name` that `services`
  records; one that cannot be verified (`unverifiable`) is never OURS."""
  pid = services.pids[name]
  why = unverifiable(services)
  if why is None:
    return _process_verdict(pid, services.commands[name], services.start_times[name])
  proc = read_proc(pid)
  if proc is None or proc.state == "Z":
    return DEAD, why
  return FOREIGN, why


def _is_sdk_worker(argv: list[str] | None) -> bool:
  return (bool(argv) and len(argv) == 3 and os.path.basename(argv[0]).startswith("python")
          and argv[1] == "-c" and argv[2].startswith(SDK_WORKER_CODE)
          and argv[2].endswith(".run()"))


def leftover_verdict(proc: Proc, services: runner_state.Services, name: str) -> str:
  """Why `proc`, found in the group of `name`'s dead leader, is not proven ours ("" when it
  is). The group's id alone proves nothing: after the group emptied, a program that got
  the pid could have made a group of that id (and started anything in it, after the
  leader's start time, in a session of that id too). Only this runner's token, inherited
  from the services' environment, tells its workers from those."""
  leader = services.pids[name]
  if proc.sid != leader:
    return f"its session is {proc.sid}, not the recorded service's {leader}"
  if proc.start_time < services.start_times[name]:
    return "it started before the recorded service"
  if not _is_sdk_worker(_cmdline(proc.pid)):
    return "not a Beam SDK worker's command line"
  if not _has_token(proc.pid, services.token):
    return f"its environment lacks this runner's {TOKEN_VARIABLE}"
  if not _same(proc, read_proc(proc.pid)):  # it exited (its pid maybe reused) meanwhile
    return "it exited while being checked"
  return ""


def group_members(pgid: int) -> list[Proc]:
  """The live processes (zombies aside) of process group `pgid`, but for its leader."""
  members = []
  for entry in os.listdir("/proc"):
    if entry.isdigit() and int(entry) != pgid:
      proc = read_proc(int(entry))
      if proc is not None and proc.pgid == pgid and proc.state != "Z":
        members.append(proc)
  return members
