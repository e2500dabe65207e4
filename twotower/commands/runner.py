"""`twotower runner start|stop|status`: Beam's job service and a worker pool on 127.0.0.1, for
running `twotower pairs|reqa|embed` through Beam's PortableRunner on this machine (the flags
of deploy.portable.launcher)."""

from __future__ import annotations

import argparse
import sys
from typing import Iterable

from twotower.commands import flags


def build_parser() -> argparse.ArgumentParser:
  from twotower.deploy.portable import launcher  # pylint: disable=import-outside-toplevel
  d = launcher.RunnerConfig()
  p = flags.parser("runner", __doc__)
  p.add_argument("action", choices=launcher.ACTIONS,
                 help="start: both services, then print the flags to add to a Beam stage; "
                      "stop: what start started; status: what runs")
  p.add_argument("--state_dir", default=d.state_dir,
                 help="folder of the state file (pids, ports) and the services' logs")
  p.add_argument("--job_port", type=int, default=d.job_port,
                 help="the job service's port on 127.0.0.1 (a Flink/Spark job server's "
                      "default; 0 = a free port)")
  p.add_argument("--worker_port", type=int, default=d.worker_port,
                 help="the worker pool's port on 127.0.0.1 (0 = a free port)")
  p.add_argument("--workers", type=int, default=d.workers,
                 help="SDK worker processes a job asks the pool for (the printed "
                      "--direct_num_workers)")
  p.add_argument("--start_timeout", type=float, default=d.start_timeout_s,
                 help="seconds both services have to accept connections")
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
  if args.start_timeout <= 0:
    p.error(f"--start_timeout must be > 0, got {args.start_timeout}")
  return args.action, launcher.RunnerConfig(
      state_dir=args.state_dir, job_port=args.job_port, worker_port=args.worker_port,
      workers=args.workers, start_timeout_s=args.start_timeout)


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
