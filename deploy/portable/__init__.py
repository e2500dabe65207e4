"""Beam's portable stack on this machine (deploy/portable/README.md).

  launcher      `twotower runner start|stop|status`: Beam's job service and an external
                worker pool on 127.0.0.1, the flags a Beam stage takes to run through them
                (PortableRunner); stop signals only what start started
  runner_state  the state file (`runner.json`): the services' pids, ports, command lines
                and start times, read back and checked field by field
  processes     which process is the runner's: /proc read against the state file (start
                time, boot, command line, the runner's token in a worker's environment)
  services      `python -m twotower.deploy.portable.services job_service|worker_pool ...`:
                Beam's own entry points with every gRPC port bound to 127.0.0.1, the job
                service starting the SDK workers a job asks for
"""
