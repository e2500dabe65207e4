"""`python -m twotower.deploy.portable.services job_service|worker_pool [Beam's flags]`: Beam's
job service (`apache_beam.runners.portability.local_job_service_main`) or external worker
pool (`apache_beam.runners.worker.worker_pool_main`), with these changes:

* every gRPC port they open is bound to 127.0.0.1 (`bind_loopback`);
* the job service runs a job with as many SDK workers as its `--direct_num_workers` asks
  (`honour_num_workers`): Beam 2.77's job service runs every job with one, whatever the job
  asks (its FnApiRunner reads the option in `run_pipeline`, which the job service never
  calls; it calls `run_via_runner_api`), so a worker pool of N would run one worker;
* the worker pool reaps the SDK workers that exit (`reap_exited_workers`): Beam's reaps a
  worker only when told to stop it, which the job service does not do, so each job left
  its workers as zombies until the pool stopped.

Beam 2.77 binds the worker pool to `[::]` (every interface), and the job service's runner
opens its control, data, state, logging and artifact ports on `[::]` too: anyone on the
network could then start workers or read a job's data. Here `grpc.server` is wrapped before
Beam's `main` runs, so that each `add_insecure_port(host:port)` becomes
`add_insecure_port(127.0.0.1:port)`; the addresses Beam hands out (`localhost:port`) still
reach them. The SDK workers the pool starts only connect out.
"""

from __future__ import annotations

import sys

LOOPBACK = "127.0.0.1"

#: service name -> Beam's entry point module
ENTRY_POINTS = {
    "job_service": "apache_beam.runners.portability.local_job_service_main",
    "worker_pool": "apache_beam.runners.worker.worker_pool_main",
}


def loopback_address(address: str) -> str:
  """'[::]:8099', 'localhost:0', '0.0.0.0:5' -> '127.0.0.1:<port>'."""
  return f"{LOOPBACK}:{address.rsplit(':', 1)[1]}"


def bind_loopback() -> None:
  """Makes every gRPC server made from now on in this process bind 127.0.0.1 only."""
  import grpc  # pylint: disable=import-outside-toplevel
  if getattr(grpc.server, "twotower_loopback", False):
    return
  make_server = grpc.server

  def server(*args, **kwargs):
    made = make_server(*args, **kwargs)
    add_port = made.add_insecure_port
    made.add_insecure_port = lambda address: add_port(loopback_address(address))
    return made

  server.twotower_loopback = True
  grpc.server = server


def honour_num_workers() -> None:
  """Makes the job service's FnApiRunner start `--direct_num_workers` SDK workers per job (0:
  one per core, as the DirectRunner reads it), as a job on the DirectRunner does."""
  import multiprocessing  # pylint: disable=import-outside-toplevel
  from apache_beam.options import pipeline_options  # pylint: disable=import-outside-toplevel
  from apache_beam.runners.portability.fn_api_runner import fn_runner  # pylint: disable=C0415
  run = fn_runner.FnApiRunner.run_via_runner_api
  if getattr(run, "twotower_num_workers", False):
    return

  def run_via_runner_api(self, pipeline_proto, options):
    workers = options.view_as(pipeline_options.DirectOptions).direct_num_workers
    if workers is not None:  # (a string: options travel to the job service as text)
      # pylint: disable-next=protected-access
      self._num_workers = int(workers) or multiprocessing.cpu_count()
    return run(self, pipeline_proto, options)

  run_via_runner_api.twotower_num_workers = True
  fn_runner.FnApiRunner.run_via_runner_api = run_via_runner_api


def reap_exited_workers(every_s: float = 1.0) -> None:
  """A daemon thread that reaps this process's exited children. Beam's pool keeps a Popen per
  worker; one reaped here reads as exited to it (Popen treats ECHILD as exited), and a
  stopped pool's `terminate` of it then signals nothing."""
  import os  # pylint: disable=import-outside-toplevel
  import threading  # pylint: disable=import-outside-toplevel
  import time  # pylint: disable=import-outside-toplevel

  def reap():
    while True:
      try:
        while os.waitpid(-1, os.WNOHANG)[0]:
          pass
      except ChildProcessError:  # no child at all
        pass
      time.sleep(every_s)

  threading.Thread(target=reap, name="reap_exited_workers", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
  argv = list(sys.argv[1:] if argv is None else argv)
  if not argv or argv[0] not in ENTRY_POINTS:
    sys.exit(f"usage: python -m twotower.deploy.portable.services "
             f"{{{'|'.join(ENTRY_POINTS)}}} [Beam's flags]")
  import importlib  # pylint: disable=import-outside-toplevel
  bind_loopback()
  module = importlib.import_module(ENTRY_POINTS[argv[0]])
  if argv[0] == "job_service":
    honour_num_workers()
    module.run(argv[1:])
  else:
    reap_exited_workers()
    module.main(argv[1:])


if __name__ == "__main__":
  main()
