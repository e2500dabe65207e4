"""No silent wrong answer at the service's edges: every loader checks a bundle's content by
default (a same-size file of another bundle or model is refused, at start-up and at a swap),
the service answers only its own Host names and browser Origins, uvicorn's own protocol errors
are the documented JSON body, and a UTF-8 admin token works as it is sent."""

from __future__ import annotations

import json
import os
import shutil
import socket
import urllib.parse

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twotower.core.contracts import bundle_manifest
from twotower.deploy.serving import Retriever, http_front as guard
from twotower.deploy.serving import app as app_lib
from twotower.deploy.serving import query as query_lib
from twotower.deploy.serving import retriever as retriever_lib
from twotower.testing import server as server_lib

LOCAL = "http://127.0.0.1"
TOKEN = "pässwörd-ünïcødé-0123456789"  # UTF-8 on the wire, not Latin-1


def _copy(serving_bundle, tmp_path, name: str) -> str:
  path = str(tmp_path / name)
  shutil.copytree(serving_bundle["bundle"], path)
  return path


def _shuffle_vectors(bundle: str) -> None:
  """index.faiss with its vectors' rows rolled by one: the same ids, the same size, every
  document's vector now another's."""
  import faiss
  path = os.path.join(bundle, "index.faiss")
  size = os.path.getsize(path)
  index = faiss.read_index(path)
  flat = faiss.downcast_index(index.index if hasattr(index, "id_map") else index)
  codes = faiss.vector_to_array(flat.codes).reshape(index.ntotal, -1)
  faiss.copy_array_to_vector(np.roll(codes, 1, axis=0).ravel(), flat.codes)
  faiss.write_index(index, path)
  assert os.path.getsize(path) == size


# ---------------------------------------------------------------------------------------------
# One verify default, content checked, for every loader.
# ---------------------------------------------------------------------------------------------


def test_query_serve_and_retriever_share_the_content_check_by_default():
  import inspect
  from twotower.commands import query as query_cmd
  from twotower.commands import serve as serve_cmd
  default = inspect.signature(Retriever.load).parameters["verify"].default
  assert default == retriever_lib.DEFAULT_VERIFY == "sha256"
  assert app_lib.ServeConfig(bundle="b").verify == default
  assert query_lib.QueryConfig(bundle="b", question="q").verify == default
  assert serve_cmd.parse(["b"]).verify == default
  assert query_cmd.build_parser().parse_args(["b", "q"]).verify == default


def test_serve_refuses_an_index_whose_vectors_were_shuffled(serving_bundle, tmp_path):
  bundle = _copy(serving_bundle, tmp_path, "shuffled")
  _shuffle_vectors(bundle)
  app = app_lib.create_app(app_lib.ServeConfig(bundle=bundle), load_in_background=False)
  with TestClient(app, base_url=LOCAL) as client:
    ready = client.get("/v1/ready")
    search = client.get("/v1/search", params={"q": "bridge"})
  assert ready.status_code == 503 and search.status_code == 503
  assert "part 'index.faiss': index.faiss differs from its sha256 checksum" in \
      ready.json()["error"]


def test_the_size_opt_out_is_said_at_start_up_and_serves_what_it_finds(serving_bundle,
                                                                       tmp_path, caplog):
  """What the opt-out means, shown: the shuffled index serves, with other hits."""
  bundle = _copy(serving_bundle, tmp_path, "shuffled")
  _shuffle_vectors(bundle)
  retriever_lib.warn_if_unverified("size")
  assert ("--verify size: a bundle's files are checked for their size only, so a same-size "
          "file of another bundle or model is served as it is") in caplog.text
  good = Retriever.load(serving_bundle["bundle"], modes=("dense",))
  shuffled = Retriever.load(bundle, verify="size", modes=("dense",))
  try:
    question = "Who designed the tower in Galt?"
    assert [h.id for h in shuffled.search(question, k=3)] != \
        [h.id for h in good.search(question, k=3)]
  finally:
    good.close()
    shuffled.close()


@pytest.fixture(scope="module")
def corruptible(serving_bundle, tmp_path_factory):
  """A copy of the bundle a property test corrupts one file at a time (and restores)."""
  path = str(tmp_path_factory.mktemp("corruptible") / "bundle")
  shutil.copytree(serving_bundle["bundle"], path)
  return path, sorted(bundle_manifest.read(path).files)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_same_size_corruption_of_any_bundle_file_is_refused(corruptible, data):
  """Every loader goes through Retriever.load's check (query, serve's start-up, a swap):
  one byte of any file the manifest lists changed, its size kept, is refused, naming it."""
  bundle, files = corruptible
  rel = data.draw(st.sampled_from(files), label="file")
  path = os.path.join(bundle, rel)
  original = open(path, "rb").read()
  if not original:
    return  # an empty file has no byte to change (Lucene's write.lock)
  offset = data.draw(st.integers(0, len(original) - 1), label="offset")
  flip = data.draw(st.integers(1, 255), label="xor")
  changed = bytearray(original)
  changed[offset] ^= flip
  try:
    with open(path, "wb") as f:
      f.write(changed)
    with pytest.raises(bundle_manifest.BundleError, match=f"{rel} differs from its sha256"):
      Retriever.load(bundle)
  finally:
    with open(path, "wb") as f:
      f.write(original)


def test_a_swap_to_a_same_size_other_bundle_is_refused(serving_bundle, tmp_path):
  root = tmp_path / "root"
  root.mkdir()
  first = _copy(serving_bundle, root, "first")
  shuffled = _copy(serving_bundle, root, "shuffled")
  _shuffle_vectors(shuffled)
  config = app_lib.ServeConfig(bundle=first, allow_swap=True, admin_token="t" * 20,
                               modes=("dense",))
  with TestClient(app_lib.create_app(config, load_in_background=False),
                  base_url=LOCAL) as client:
    got = client.post("/v1/admin/swap", json={"bundle": "shuffled"},
                      headers={"authorization": "Bearer " + "t" * 20})
    assert got.status_code == 400
    assert "index.faiss differs from its sha256 checksum" in got.json()["error"]
    assert client.get("/v1/info").json()["bundle"] == "first"


# ---------------------------------------------------------------------------------------------
# Host and Origin.
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(serving_bundle):
  config = app_lib.ServeConfig(bundle=serving_bundle["bundle"], modes=("dense",),
                               read_timeout=5.0)
  with server_lib.live_server(config) as base:
    yield base


def _raw_request(base: str, head: bytes) -> tuple[bytes, dict, bytes]:
  """(status line, headers, body) of one request sent as these bytes; the server closes."""
  url = urllib.parse.urlsplit(base)
  with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
    sock.sendall(head)
    answer = server_lib.read_until_closed(sock)
  header_block, _, body = answer.partition(b"\r\n\r\n")
  status, *lines = header_block.split(b"\r\n")
  headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(b":") for l in lines)}
  return status, headers, body


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST.:{port}",
                                  "[::1]:{port}", "localhost"])
def test_loopback_names_are_answered(live, host):
  port = urllib.parse.urlsplit(live).port
  got = httpx.get(f"{live}/v1/search", params={"q": "bridge"},
                  headers={"host": host.format(port=port)})
  assert got.status_code == 200 and got.json()["hits"]


@pytest.mark.parametrize("path", ["/v1/search?q=bridge", "/v1/info", "/v1/search/?q=x", "/"])
def test_a_foreign_host_is_refused_and_never_echoed(live, path):
  """A DNS-rebinding page reaches the server under its own name: refused before any route,
  and the trailing-slash redirect, which builds its `location` from the Host, never runs."""
  status, headers, body = _raw_request(
      live, f"GET {path} HTTP/1.1\r\nhost: attacker.example:8000\r\n\r\n".encode())
  assert status.startswith(b"HTTP/1.1 400 ")
  assert headers[b"content-type"] == b"application/json" and b"location" not in headers
  error = json.loads(body)
  assert set(error) == {"error", "request_id"}
  assert "Host header names a host this server does not answer to" in error["error"]
  assert b"attacker" not in body and not any(b"attacker" in v for v in headers.values())


def test_the_trailing_slash_redirect_names_an_answered_host(live):
  got = httpx.get(f"{live}/v1/search/", params={"q": "x"}, follow_redirects=False)
  assert got.status_code == 307
  assert got.headers["location"].startswith(f"{live}/v1/search")


@pytest.mark.parametrize("origin,status", [
    ("http://attacker.example", 403), ("null", 403), ("file://", 403),
    ("http://127.0.0.1:{port}", 200), ("http://localhost:{port}", 200)])
def test_a_browser_request_from_another_origin_is_refused(live, origin, status):
  port = urllib.parse.urlsplit(live).port
  # text/plain: what a page may POST cross-origin without a preflight
  got = httpx.post(f"{live}/v1/search", content=b'{"query": "bridge"}',
                   headers={"content-type": "text/plain", "origin": origin.format(port=port)})
  assert got.status_code == status
  if status == 403:
    assert got.json()["error"].startswith("a cross-origin request: the Origin header")


def test_allowed_hosts_extend_the_loopback_names():
  default = guard.HostCheck("127.0.0.1")
  assert default.allows("localhost:8000") and default.allows("[::1]:1")
  assert not default.allows("example.org") and not default.allows("127.0.0.1.example.org")
  extra = guard.HostCheck("127.0.0.1", ["search.internal", "Example.ORG."])
  assert extra.allows("search.internal:8000") and extra.allows("example.org")
  assert guard.HostCheck("127.0.0.1", ["*"]).allows("anything.example")
  everywhere = guard.HostCheck("0.0.0.0")  # bound to every interface: the machine's names too
  assert everywhere.allows(socket.gethostname()) and everywhere.allows("localhost")
  bound = guard.HostCheck("10.1.2.3")
  assert bound.allows("10.1.2.3:8000") and not bound.allows("10.1.2.4")


def test_serve_takes_allowed_hosts_from_the_command_line():
  from twotower.commands import serve as serve_cmd
  config = serve_cmd.parse(["b", "--allowed_hosts", "search.internal, other.example"])
  assert config.allowed_hosts == ("search.internal", "other.example")
  assert serve_cmd.parse(["b"]).allowed_hosts == ()


# ---------------------------------------------------------------------------------------------
# uvicorn's own 400s: the documented JSON error.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case,head", [
    ("two Content-Length headers",
     b"POST /v1/search HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 5\r\n"
     b"content-length: 7\r\n\r\n{\"q\":1}"),
    ("broken chunked encoding",
     b"POST /v1/search HTTP/1.1\r\nhost: 127.0.0.1\r\ntransfer-encoding: chunked\r\n\r\n"
     b"zz\r\nnot hex\r\n"),
    ("a header line without a colon", b"GET /v1/health HTTP/1.1\r\nhost 127.0.0.1\r\n\r\n"),
    ("a request line that is no HTTP", b"HELLO\r\n\r\n"),
])
def test_protocol_errors_are_the_json_error_body(live, case, head):
  del case
  status, headers, body = _raw_request(live, head)
  assert status.startswith(b"HTTP/1.1 400 ")
  assert headers[b"content-type"] == b"application/json"
  assert int(headers[b"content-length"]) == len(body)
  error = json.loads(body)
  assert set(error) == {"error", "request_id"}
  assert error["error"].startswith("the request is not valid HTTP/1.1")
  assert httpx.get(f"{live}/v1/health").status_code == 200  # the server serves on


# ---------------------------------------------------------------------------------------------
# The admin token as UTF-8.
# ---------------------------------------------------------------------------------------------


def test_a_utf8_admin_token_is_accepted_as_sent(serving_bundle):
  """On the wire (a test client re-encodes header values as UTF-8): the token's UTF-8 bytes
  pass, its Latin-1 bytes (the only spelling that passed before) do not."""
  config = app_lib.ServeConfig(bundle=serving_bundle["bundle"], allow_swap=True,
                               admin_token=TOKEN, modes=("dense",))
  with server_lib.live_server(config) as base:
    def swap_status(token: bytes) -> tuple[int, str]:
      # no JSON content type: a request past the token check is a 415, one before a 403
      status, _, body = _raw_request(
          base, b"POST /v1/admin/swap HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n"
                b"authorization: Bearer " + token + b"\r\ncontent-length: 2\r\n\r\n{}")
      return int(status.split()[1]), json.loads(body)["error"]
    assert swap_status(TOKEN.encode("utf-8"))[0] == 415
    assert swap_status(TOKEN.encode("latin-1")) == (403, "wrong admin token")
    assert swap_status(TOKEN.encode("utf-8")[:-1]) == (403, "wrong admin token")


# ---------------------------------------------------------------------------------------------
# A full disk under `twotower bundle`: one sentence, not copytree's list of tuples.
# ---------------------------------------------------------------------------------------------


def test_a_full_disk_under_bundle_is_one_line(serving_bundle, tmp_path, capsys, monkeypatch):
  import errno
  from twotower import cli

  def full_disk(source, destination, *args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), destination)

  # the byte copy under copytree's copy2 (the disk itself cannot be filled here)
  monkeypatch.setattr(shutil, "copyfile", full_disk)
  out = str(tmp_path / "bundle")
  code = cli.main(["bundle", "--model", serving_bundle["model"], "--reqa",
                   serving_bundle["reqa"], "--out", out])
  lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("twotower bundle")]
  assert code == 1 and len(lines) == 1
  assert lines[0].startswith(f"twotower bundle: error: copying {serving_bundle['model']}/")
  assert "failed: [Errno 28] No space left on device" in lines[0]
  assert "more files)" in lines[0] and "[(" not in lines[0]
  assert not os.path.exists(out)  # nothing half-written left as the output
