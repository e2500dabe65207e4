"""Beam's portable stack on this machine (deploy/portable/README.md).

  launcher   `twotower runner start|stop|status`: Beam's job service and an external worker
             pool on 127.0.0.1, their pids and ports in a state file, the flags a Beam
             stage takes to run through them (PortableRunner)
  services   `python -m twotower.deploy.portable.services job_service|worker_pool ...`:
             Beam's own entry points with every gRPC port bound to 127.0.0.1, the job
             service starting the SDK workers a job asks for
"""
