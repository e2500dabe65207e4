"""`twotower serve` on loopback for tests and benchmarks: a free port, bounded waits, and a
stop that always happens.

    with live_server(ServeConfig(bundle=path)) as base:       # in this process (a thread)
      httpx.get(f"{base}/v1/search", params={"q": "..."})
    with serve_subprocess(path, ["--threads", "2"]) as (base, process):   # its own process
      ...
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Iterator, Sequence

LOOPBACK = "127.0.0.1"


def free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind((LOOPBACK, 0))
    return s.getsockname()[1]


def read_until_closed(sock: socket.socket) -> bytes:
  """Every byte a raw-socket test's server sends until it closes the connection (a reset
  counts as closed)."""
  chunks = []
  while True:
    try:
      chunk = sock.recv(65536)
    except ConnectionResetError:
      break
    if not chunk:
      break
    chunks.append(chunk)
  return b"".join(chunks)


def wait_ready(base: str, timeout: float = 180.0, process: subprocess.Popen | None = None
               ) -> float:
  """Polls /v1/ready until 200; returns the seconds waited. Raises TimeoutError (or
  RuntimeError when `process` exits first)."""
  import httpx  # pylint: disable=import-outside-toplevel
  t0 = time.perf_counter()
  while time.perf_counter() - t0 < timeout:
    if process is not None and process.poll() is not None:
      raise RuntimeError(f"the server exited with status {process.returncode}")
    try:
      if httpx.get(f"{base}/v1/ready", timeout=5).status_code == 200:
        return time.perf_counter() - t0
    except httpx.TransportError:
      pass
    time.sleep(0.05)
  raise TimeoutError(f"{base} not ready after {timeout:.0f} s")


@contextlib.contextmanager
def live_server(config) -> Iterator[str]:
  """Serves `config` (a deploy.serving.app.ServeConfig; its port replaced by a free one) in a
  thread of this process; yields the base URL once ready."""
  import dataclasses  # pylint: disable=import-outside-toplevel
  import uvicorn  # pylint: disable=import-outside-toplevel
  from twotower.deploy.serving import app as app_lib  # pylint: disable=import-outside-toplevel
  config = dataclasses.replace(config, host=LOOPBACK, port=free_port())
  # The served stack as `twotower serve` runs it (its protocol with a per-request deadline).
  server = uvicorn.Server(app_lib.uvicorn_config(app_lib.create_app(config), config))
  thread = threading.Thread(target=server.run, daemon=True)
  thread.start()
  base = f"http://{LOOPBACK}:{config.port}"
  try:
    wait_ready(base)
    yield base
  finally:
    server.should_exit = True
    thread.join(30)


@contextlib.contextmanager
def serve_subprocess(bundle: str, args: Sequence[str] = (), timeout: float = 300.0,
                     log: str = os.devnull) -> Iterator[tuple[str, subprocess.Popen]]:
  """`twotower serve BUNDLE` in its own process on a free loopback port, its log lines (one
  per request) to `log`; yields (base URL, process) once ready and stops it (SIGTERM, then
  SIGKILL) on the way out."""
  port = free_port()
  with open(log, "ab") as log_file:
    process = subprocess.Popen(
        [sys.executable, "-m", "twotower.deploy.serving.app", bundle, "--host", LOOPBACK,
         "--port", str(port), *args],
        stdout=log_file, stderr=log_file, env=os.environ.copy())
  base = f"http://{LOOPBACK}:{port}"
  try:
    wait_ready(base, timeout, process)
    yield base, process
  finally:
    process.terminate()
    try:
      process.wait(30)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait(30)
