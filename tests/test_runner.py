"""`twotower runner start|stop|status` (deploy.portable.launcher): real services on free
loopback ports, stopped by the test that started them."""

from __future__ import annotations

import os
import socket

import pytest

from twotower import cli
from twotower.deploy.portable import launcher, runner_state

#: /proc/net/tcp{,6} spellings of 127.0.0.1 (as itself, and as an IPv4-mapped IPv6 address).
LOOPBACK_HEX = ("0100007F", "0000000000000000FFFF00000100007F")


def _listening(port: int) -> list[str]:
  """Local addresses (hex, as /proc/net shows them) listening on `port`."""
  found = []
  for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    with open(table, encoding="ascii") as f:
      for line in f.read().splitlines()[1:]:
        fields = line.split()
        address, port_hex = fields[1].rsplit(":", 1)
        if int(port_hex, 16) == port and fields[3] == "0A":  # 0A: LISTEN
          found.append(address)
  return found


def _start_time(pid: int) -> int:
  with open(f"/proc/{pid}/stat", "rb") as f:
    return int(f.read().rpartition(b")")[2].split()[19])


def _gone(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return True
  return False


def test_start_status_stop(tmp_path, capsys):
  state = str(tmp_path / "state")
  args = ["--state_dir", state, "--job_port", "0", "--worker_port", "0", "--workers", "3"]
  try:
    assert cli.main(["runner", "start", *args]) == 0
    services = runner_state.read_state(state)
    out = capsys.readouterr().out
    # What stop verifies each service by (tests/test_runner_state.py): its start time.
    assert services.start_times == {name: _start_time(pid)
                                    for name, pid in services.pids.items()}
    assert services.token and services.boot_id
    # The flags to add, exactly as a stage takes them.
    assert " ".join(services.beam_args()) in out
    assert services.beam_args() == (
        "--runner=PortableRunner", f"--job_endpoint=127.0.0.1:{services.job_port}",
        "--environment_type=EXTERNAL",
        f"--environment_config=127.0.0.1:{services.worker_port}", "--direct_num_workers=3")
    for port in (services.job_port, services.worker_port):
      assert launcher.accepting(port)
      listening = _listening(port)
      assert listening and all(a in LOOPBACK_HEX for a in listening), listening
    # A second start from the same folder is refused, and starts nothing.
    assert cli.main(["runner", "start", *args]) == 1
    assert "already started" in capsys.readouterr().err
    assert cli.main(["runner", "status", "--state_dir", state]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["job_service", "worker_pool"]
    assert all(line.endswith("running") for line in lines)
  finally:
    assert cli.main(["runner", "stop", "--state_dir", state]) == 0
  assert all(line.endswith("stopped") for line in capsys.readouterr().out.splitlines())
  assert all(_gone(pid) for pid in services.pids.values())
  assert not os.path.exists(runner_state.state_path(state))
  assert not launcher.accepting(services.job_port)
  assert cli.main(["runner", "status", "--state_dir", state]) == 0
  assert "no runner started" in capsys.readouterr().out


def test_a_taken_port_is_a_clear_error_and_starts_nothing(tmp_path, capsys):
  state = str(tmp_path / "state")
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    assert cli.main(["runner", "start", "--state_dir", state, "--job_port", str(port),
                     "--worker_port", "0"]) == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert err[-1].startswith(f"twotower runner: error: 127.0.0.1:{port} is taken")
  assert "--job_port" in err[-1]
  assert runner_state.read_state(state) is None


def test_stop_and_status_when_nothing_runs(tmp_path, capsys):
  state = str(tmp_path / "never")
  assert cli.main(["runner", "stop", "--state_dir", state]) == 0
  assert cli.main(["runner", "status", "--state_dir", state]) == 0
  out = capsys.readouterr().out
  assert "nothing to stop" in out and "no runner started" in out


def test_a_dead_service_is_reported_and_stop_cleans_up(tmp_path, capsys):
  state = str(tmp_path / "state")
  services = launcher.start(launcher.RunnerConfig(state_dir=state, job_port=0,
                                                  worker_port=0))
  try:
    os.killpg(services.pids["worker_pool"], 9)
    os.waitpid(services.pids["worker_pool"], 0)
    assert cli.main(["runner", "status", "--state_dir", state]) == 1
    assert "worker_pool" in capsys.readouterr().out
  finally:
    stopped = launcher.stop(state)
  assert [(s.name, s.outcome, s.workers) for s in stopped] == [
      ("job_service", "stopped", ()), ("worker_pool", "gone", ())]
  assert _gone(services.pids["job_service"])
  assert launcher.status(state) == []


@pytest.mark.parametrize("argv", [["runner"], ["runner", "restart"],
                                  ["runner", "start", "--job_port", "-1"],
                                  ["runner", "start", "--workers", "0"]])
def test_usage_errors_exit_2(argv, tmp_path):
  assert cli.main([*argv, "--state_dir", str(tmp_path)]) == 2
