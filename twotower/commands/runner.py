"""`twotower runner start|stop|status`: Beam's job service and a worker pool on 127.0.0.1, for
running `twotower pairs|reqa|embed` through Beam's PortableRunner on this machine (the flags
of deploy.portable.launcher)."""

from __future__ import annotations

import argparse
import sys
from typing import Iterable

from twotower.commands import dataclass_flags, flags

#: Each flag's help; name, type and default come from launcher.RunnerConfig
#: (commands.dataclass_flags).
HELP = {
    "state_dir": "folder of the state file (pids, ports) and the services' logs",
    "job_port": "the job service's port on 127.0.0.1 (a Flink/Spark job server's default; "
                "0 = a free port)",
    "worker_port": "the worker pool's port on 127.0.0.1 (0 = a free port)",
    "workers": "SDK worker processes a job asks the pool for (the printed "
               "--direct_num_workers)",
    "start_timeout_s": "seconds both services have to accept connections",
}


def build_parser() -> argparse.ArgumentParser:
  from twotower.deploy.portable import launcher  # pylint: disable=import-outside-toplevel
  p = flags.parser("runner", __doc__)
  # What to do is no RunnerConfig field: launcher.run takes it beside the config.
  p.add_argument("action", choices=launcher.ACTIONS,
                 help="start: both services, then print the flags to add to a Beam stage; "
                      "stop: what start started; status: what runs")
  dataclass_flags.add_fields(p, launcher.RunnerConfig, HELP,
                             exclude=("python",),  # python: no flag (this interpreter)
                             flag_names={"start_timeout_s": ("--start_timeout",)})
  return p


def parse(argv: Iterable[str] | None):
  """-> (action, launcher.RunnerConfig)."""
  from twotower.deploy.portable import launcher  # pylint: disable=import-outside-toplevel
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  flags.non_negative(p, args, ("job_port", "worker_port"))
  for flag in ("job_port", "worker_port"):
    if getattr(args, flag) > 65535:
      p.error(f"--{flag} must be <= 65535, got {getattr(args, flag)}")
  if args.workers < 1:
    p.error(f"--workers must be >= 1, got {args.workers}")
  if args.start_timeout_s <= 0:
    p.error(f"--start_timeout must be > 0, got {args.start_timeout_s}")
  return args.action, dataclass_flags.config_from(args, launcher.RunnerConfig)


def _stopped_line(s) -> str:
  """One line of `runner stop`: a service that was left alone is also warned of (logged)
  with why."""
  state = {"stopped": "stopped", "gone": "gone",
           "left alone": "left alone: not a process this runner started"}[s.outcome]
  if s.workers:
    state += (f"; ended {len(s.workers)} SDK worker(s) left in its group (pid "
              f"{' '.join(map(str, s.workers))})")
  elif s.outcome == "gone":
    state += ": nothing to stop"
  return f"{s.name:<12} 127.0.0.1:{s.port}  pid {s.pid}  {state}"


def main(argv: Iterable[str] | None = None) -> None:
  from twotower.deploy.portable import launcher  # pylint: disable=import-outside-toplevel
  action, config = parse(argv)
  result = launcher.run(action, config)
  if action == "start":
    print(launcher.describe(result))
    return
  if not result:
    print(f"{'nothing to stop: ' if action == 'stop' else ''}no runner started from "
          f"{config.state_dir}")
    return
  if action == "stop":
    # Every recorded service, each with what stop did (the state file is removed).
    print("\n".join(_stopped_line(s) for s in result))
    return
  for s in result:
    state = "running" if s.accepting else "running, not accepting" if s.running else "gone"
    print(f"{s.name:<12} 127.0.0.1:{s.port}  pid {s.pid}  {state}")
  if not all(s.accepting for s in result):
    sys.exit(1)  # a service died: `twotower runner stop`, then start again
