"""`twotower serve` (deploy.serving.app): the HTTP API against a running app on a bundle the
tests build. Every bad input is a 4xx with a JSON error; searches equal the Python API;
concurrent requests share one retriever call; a bundle swap under load fails no request; the
search page renders in a real headless browser."""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse

import httpx
import pytest
from fastapi.testclient import TestClient

from twotower.deploy.serving import Retriever, SearchRequest
from twotower.deploy.serving import app as app_lib
from twotower.deploy.serving import batcher as batcher_lib
from twotower.testing import server as server_lib

QUESTION = "Who designed the tower in Galt?"
#: A Host the service answers (TestClient's default, "testserver", is refused: guard.HostCheck).
LOCAL = "http://127.0.0.1"


@pytest.fixture(scope="module")
def client(serving_bundle):
  app = app_lib.create_app(app_lib.ServeConfig(bundle=serving_bundle["bundle"]),
                           load_in_background=False)
  with TestClient(app, base_url=LOCAL) as c:
    yield c


@pytest.fixture(scope="module")
def retriever(serving_bundle):
  r = Retriever.load(serving_bundle["bundle"])
  yield r
  r.close()


# ---------------------------------------------------------------------------------------------
# Every bad input: a 4xx whose JSON error says what was wrong, on a real server (uvicorn), and
# the same keep-alive connection then serves a good request.
# ---------------------------------------------------------------------------------------------

TOKEN = "test-admin-token-0123456789"
AUTH = {"authorization": f"Bearer {TOKEN}"}
CJK = "".join(chr(0x4E00 + i) for i in range(1500))  # 1,500 distinct terms for Lucene

BAD_INPUTS = [
    # (case, method, body (bytes: raw) or query parameters, status, message)
    ("empty query", "POST", {"query": ""}, 400, "'query' is empty"),
    ("whitespace query", "POST", {"query": " \t\n"}, 400, "'query' is empty"),
    ("query over the size limit", "POST", {"query": "x" * 2001}, 413,
     "'query' has 2001 characters; the limit is 2000"),
    ("body not UTF-8", "POST", b'{"query": "caf\xe9"}', 400, "the body is not UTF-8"),
    ("body not JSON", "POST", b'{"query": "x"', 400, "the body is not JSON"),
    ("empty body", "POST", b"", 400, "empty body"),
    ("body not an object", "POST", b'["x"]', 400, "the body must be a JSON object"),
    ("k = 0", "POST", {"query": "x", "k": 0}, 400, "'k' must be between 1 and 1000, got 0"),
    ("k < 0", "POST", {"query": "x", "k": -5}, 400, "'k' must be between 1 and 1000, got -5"),
    ("k over the maximum", "POST", {"query": "x", "k": 1001}, 400,
     "'k' must be between 1 and 1000, got 1001"),
    ("k not an integer", "POST", {"query": "x", "k": "ten"}, 400,
     "'k' must be an integer, got \"ten\""),
    ("k null", "POST", {"query": "x", "k": None}, 400, "'k' must be an integer, got null"),
    ("k '--5'", "POST", {"query": "x", "k": "--5"}, 400, "'k' must be an integer, got \"--5\""),
    ("k '²'", "POST", {"query": "x", "k": "²"}, 400, "'k' must be an integer, got \"²\""),
    ("k true", "POST", {"query": "x", "k": True}, 400, "'k' must be an integer, got true"),
    ("k 2.5", "POST", {"query": "x", "k": 2.5}, 400, "'k' must be an integer, got 2.5"),
    ("nprobe '³'", "POST", {"query": "x", "nprobe": "³"}, 400,
     "'nprobe' must be an integer, got \"³\""),
    ("nprobe 2**40", "POST", {"query": "x", "nprobe": 2 ** 40}, 400,
     "'nprobe' must be between 1 and 65536, got 1099511627776"),
    ("nprobe 2**63", "POST", b'{"query": "x", "nprobe": 9223372036854775808}', 400,
     "a number in the body has more than 18 digits"),
    ("a 5,000-digit integer", "POST", b'{"query": "x", "k": ' + b"7" * 5000 + b"}", 400,
     "a number in the body has more than 18 digits"),
    ("JSON nested 100,000 deep", "POST", b"[" * 100_000 + b"]" * 100_000, 400,
     "the body nests deeper than 32 levels"),
    ("JSON nested 40 deep", "POST", b'{"query": "x", "k": ' + b"[" * 40 + b"]" * 40 + b"}",
     400, "the body nests deeper than 32 levels"),
    ("a lone surrogate", "POST", b'{"query": "\\ud800"}', 400,
     "a lone surrogate such as \\ud800 is not text"),
    ("NaN", "POST", b'{"query": "x", "k": NaN}', 400, "the body is not JSON"),
    ("query only \\u0000", "POST", {"query": "\u0000"}, 400,
     "'query' has no searchable text (only whitespace, control or format characters)"),
    ("query only controls and zero-width", "POST", {"query": "\u0001\u200b\u2028\x7f"}, 400,
     "'query' has no searchable text"),
    ("unknown mode", "POST", {"query": "x", "mode": "sparse"}, 400,
     "unknown 'mode' \"sparse\"; expected one of ['dense', 'bm25', 'hybrid']"),
    ("batch over its limit", "POST", {"queries": ["x"] * 65}, 413,
     "65 queries in one request; the limit is 64"),
    ("empty batch", "POST", {"queries": []}, 400, "'queries' is empty"),
    ("empty query in a batch", "POST", {"queries": ["x", ""]}, 400, "'queries'[1] is empty"),
    ("\\u0000 in a batch", "POST", {"queries": ["x", "\u0000 "]}, 400,
     "'queries'[1] has no searchable text"),
    ("non-string query in a batch", "POST", {"queries": ["x", 3]}, 400,
     "'queries'[1] must be a string"),
    ("query and queries", "POST", {"query": "x", "queries": ["y"]}, 400,
     "give exactly one of 'query' (a string) or 'queries' (a list)"),
    ("no query", "POST", {"k": 3}, 400, "give exactly one of 'query'"),
    ("unknown field", "POST", {"query": "x", "topk": 3}, 400, "unknown field(s) ['topk']"),
    ("nprobe on a flat index", "POST", {"query": "x", "nprobe": 8}, 400,
     "nprobe is for IVF indexes; this is IndexFlat"),
    ("nprobe = 0", "POST", {"query": "x", "nprobe": 0}, 400,
     "'nprobe' must be between 1 and 65536, got 0"),
    ("GET without q", "GET", [], 400, "give the query as ?q=..."),
    ("GET k not a number", "GET", [("q", "x"), ("k", "abc")], 400,
     "'k' must be an integer, got \"abc\""),
    ("GET k = 0", "GET", [("q", "x"), ("k", "0")], 400, "'k' must be between 1 and 1000, got 0"),
    ("GET nprobe = 0 (POST refuses it)", "GET", [("q", "x"), ("nprobe", "0")], 400,
     "'nprobe' must be between 1 and 65536, got 0"),
    ("GET unknown parameter (POST refuses it)", "GET", [("q", "x"), ("topk", "3")], 400,
     "unknown field(s) ['topk']; expected some of ['ef_search', 'filter', 'k', 'mode', 'nprobe', 'q']"),
    ("GET q twice", "GET", [("q", "x"), ("q", "y")], 400, "parameter \"q\" is given more than once"),
    ("GET k '²'", "GET", [("q", "x"), ("k", "²")], 400, "'k' must be an integer, got \"²\""),
    ("GET q only \\u0000", "GET", [("q", "\u0000")], 400, "'query' has no searchable text"),
]


def on_one_connection(base: str, method: str, path: str, body: bytes | None = None,
                      headers: dict | None = None) -> tuple[int, dict, dict]:
  """(status, JSON body, headers) of one request, after which a good search on the same
  keep-alive connection must succeed (asserted here)."""
  url = urllib.parse.urlsplit(base)
  conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
  try:
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data, got = response.read(), {k.lower(): v for k, v in response.getheaders()}
    sock = conn.sock
    assert sock is not None, f"the server closed the connection after {response.status}"
    conn.request("GET", "/v1/search?q=bridge&k=2")
    good = conn.getresponse()
    assert (good.status, len(json.loads(good.read())["hits"])) == (200, 2)
    assert conn.sock is sock  # the same connection served both
    return response.status, json.loads(data), got
  finally:
    conn.close()


def _send(base: str, method: str, body, headers: dict | None = None):
  if method == "GET":
    return on_one_connection(base, "GET", "/v1/search?" + urllib.parse.urlencode(body),
                             headers=headers)
  raw = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
  return on_one_connection(base, "POST", "/v1/search", raw,
                           {"content-type": "application/json", **(headers or {})})


@pytest.mark.parametrize("case,method,body,status,message", BAD_INPUTS,
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_a_4xx_with_a_json_error_and_the_connection_stays(live, case, method,
                                                                       body, status, message):
  del case
  got_status, got, headers = _send(live["base"], method, body)
  assert (got_status, set(got)) == (status, {"error", "request_id"})
  assert message in got["error"]
  assert headers["x-request-id"] == got["request_id"]
  assert "connection" not in headers  # kept alive (asserted by its next request too)


def test_unknown_path_is_404_and_wrong_method_405(client):
  assert client.get("/v2/search").status_code == 404
  assert client.put("/v1/search", json={"query": "x"}).status_code == 405


# ---------------------------------------------------------------------------------------------
# Searches.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_search_equals_the_python_api(client, retriever, mode):
  response = client.post("/v1/search", json={"query": QUESTION, "k": 5, "mode": mode})
  assert response.status_code == 200
  body = response.json()
  assert (body["api"], body["mode"], body["k"], body["query"]) == ("v1", mode, 5, QUESTION)
  assert body["hits"] == [h.to_dict() for h in retriever.search(QUESTION, k=5, mode=mode)]
  got = client.get("/v1/search", params={"q": QUESTION, "k": 5, "mode": mode}).json()
  assert got["hits"] == body["hits"]


def test_a_batch_request_equals_single_requests(client):
  queries = [QUESTION, "When was the river of Arlen built?", "the of"]
  batch = client.post("/v1/search", json={"queries": queries, "k": 4, "mode": "hybrid"})
  results = batch.json()["results"]
  assert [r["query"] for r in results] == queries
  for q, r in zip(queries, results):
    single = client.post("/v1/search", json={"query": q, "k": 4, "mode": "hybrid"}).json()
    assert [h["id"] for h in single["hits"]] == [h["id"] for h in r["hits"]]


def test_k_beyond_the_index_returns_fewer_hits_never_minus_one(client):
  hits = client.post("/v1/search", json={"query": "bridge", "k": 1000}).json()["hits"]
  assert len(hits) == 48 and min(h["id"] for h in hits) >= 0


def test_client_request_id_is_echoed(client):
  response = client.get("/v1/health", headers={"X-Request-ID": "abc-123"})
  assert response.json() == {"status": "ok"} and response.headers["x-request-id"] == "abc-123"


def test_info_ready_openapi_and_page(client):
  info = client.get("/v1/info").json()
  assert info["manifest"]["documents"]["count"] == 48 and "files" not in info["manifest"]
  assert info["limits"] == {"max_k": 1000, "max_queries": 64, "max_query_chars": 2000,
                            "max_body_bytes": 2 * 1024 * 1024}
  assert client.get("/v1/ready").json()["ready"] is True
  paths = client.get("/openapi.json").json()["paths"]
  assert {"/v1/search", "/v1/health", "/v1/ready", "/v1/info"} <= set(paths)
  assert "query" in str(paths["/v1/search"]["post"]["requestBody"])
  page = client.get("/")
  assert page.status_code == 200 and "<title>twotower search</title>" in page.text


def test_not_ready_until_the_bundle_loads_and_the_reason_when_it_cannot(serving_bundle,
                                                                        tmp_path):
  broken = str(tmp_path / "b")
  shutil.copytree(serving_bundle["bundle"], broken)
  os.remove(os.path.join(broken, "index.faiss"))
  app = app_lib.create_app(app_lib.ServeConfig(bundle=broken))  # loads in the background
  with TestClient(app, base_url=LOCAL) as c:
    assert c.get("/v1/health").status_code == 200
    deadline = time.monotonic() + 60
    while app.state.service.error is None and time.monotonic() < deadline:
      time.sleep(0.05)
    ready = c.get("/v1/ready")
    assert ready.status_code == 503 and ready.headers["retry-after"] == "1"
    assert "part 'index.faiss' is missing" in ready.json()["error"]
    assert c.post("/v1/search", json={"query": "x"}).status_code == 503


# ---------------------------------------------------------------------------------------------
# Micro-batching.
# ---------------------------------------------------------------------------------------------


def test_concurrent_requests_share_one_retriever_call(retriever):
  batcher = batcher_lib.MicroBatcher(retriever)
  requests = [SearchRequest((f"{QUESTION} {i}",), k=3, mode=("dense", "bm25", "hybrid")[i % 3])
              for i in range(16)]

  async def submit_all():
    # The worker is held busy while the 16 requests queue: they then form at most two
    # batches (whatever it took before the hold, and the rest).
    batcher._busy.acquire()  # pylint: disable=protected-access
    tasks = [asyncio.ensure_future(batcher.submit(r)) for r in requests]
    await asyncio.sleep(0.2)
    batcher._busy.release()  # pylint: disable=protected-access
    return await asyncio.gather(*tasks)

  try:
    results = asyncio.run(submit_all())
  finally:
    batcher.close()
  assert batcher.stats.requests == 16 and batcher.stats.batches <= 2
  assert batcher.stats.largest_batch >= 15
  for request, result in zip(requests, results):
    expected = retriever.search(request.queries[0], k=3, mode=request.mode)
    assert [h.id for h in result[0]] == [h.id for h in expected]


def test_a_failing_request_fails_alone(retriever):
  batcher = batcher_lib.MicroBatcher(retriever)
  good = SearchRequest(("bridge",), k=2)
  bad = SearchRequest(("bridge",), k=2, nprobe=3)  # a flat index: refused at search time

  async def both():
    batcher._busy.acquire()  # pylint: disable=protected-access
    tasks = [asyncio.ensure_future(batcher.submit(r)) for r in (good, bad)]
    await asyncio.sleep(0.1)
    batcher._busy.release()  # pylint: disable=protected-access
    return await asyncio.gather(*tasks, return_exceptions=True)

  try:
    ok, failed = asyncio.run(both())
  finally:
    batcher.close()
  assert len(ok[0]) == 2 and isinstance(failed, ValueError)


# ---------------------------------------------------------------------------------------------
# A real server: bundle swap under load; the search page in a headless browser.
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(serving_bundle, tmp_path_factory):
  """A real server (uvicorn, loopback) over `first`, swaps allowed from its folder, a short
  read timeout."""
  root = tmp_path_factory.mktemp("live")
  first, second = str(root / "first"), str(root / "second")
  shutil.copytree(serving_bundle["bundle"], first)
  shutil.copytree(serving_bundle["bundle"], second)
  config = app_lib.ServeConfig(bundle=first, allow_swap=True, admin_token=TOKEN,
                               read_timeout=2.0)
  with server_lib.live_server(config) as base:
    yield {"base": base, "first": first, "second": second, "root": str(root)}


def _swap(base: str, bundle: str, headers: dict | None = None) -> httpx.Response:
  return httpx.post(f"{base}/v1/admin/swap", json={"bundle": bundle},
                    headers=AUTH if headers is None else headers, timeout=120)


def test_a_bundle_swap_under_load_fails_no_request(live):
  base = live["base"]
  stop = time.monotonic() + 60  # bounded in time and in count

  def client_loop(worker: int) -> list[int]:
    statuses = []
    with httpx.Client(base_url=base, timeout=30) as http:
      for i in range(60):
        if time.monotonic() > stop:
          break
        mode = ("dense", "bm25", "hybrid")[(worker + i) % 3]
        statuses.append(http.post("/v1/search", json={"query": f"{QUESTION} {i}", "k": 5,
                                                      "mode": mode}).status_code)
    return statuses

  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    futures = [pool.submit(client_loop, w) for w in range(4)]
    swaps = []
    # Relative to the swap root (the served bundle's folder), or absolute under it.
    for target in ("second", live["first"], "./second"):
      time.sleep(0.3)
      swaps.append(_swap(base, target))
    statuses = [s for f in futures for s in f.result()]
  assert [s.status_code for s in swaps] == [200, 200, 200]
  assert swaps[-1].json() == {"bundle": "second", "previous": "first", "documents": 48}
  assert len(statuses) >= 60 and set(statuses) == {200}
  assert httpx.get(f"{base}/v1/info").json()["bundle"] == "second"


def _tampered(live, name: str) -> str:
  """A copy of the served bundle under the swap root, broken as `name` says."""
  path = os.path.join(live["root"], name)
  if os.path.exists(path):
    return name
  if name == "empty":
    os.makedirs(path)
    return name
  shutil.copytree(live["first"], path)
  manifest_path = os.path.join(path, "manifest.json")
  manifest = json.load(open(manifest_path))
  if name == "manifest-list":
    json.dump([manifest], open(manifest_path, "w"))
  elif name == "manifest-without-model":
    del manifest["model"]
    json.dump(manifest, open(manifest_path, "w"))
  elif name == "garbled-store":  # same size, other bytes: passes the size check
    store = os.path.join(path, "store.sqlite")
    size = os.path.getsize(store)
    with open(store, "wb") as f:
      f.write(bytes((i * 7 + 3) % 251 for i in range(size)))
  return name


BAD_SWAPS = [
    # (case, bundle, status, message)
    ("not a bundle", "empty", 400, "bundle 'empty' refused: empty: part 'manifest.json' is "
                                   "missing"),
    ("manifest a JSON list", "manifest-list", 400, "bundle 'manifest-list' refused"),
    ("manifest without model", "manifest-without-model", 400,
     "bundle 'manifest-without-model' refused"),
    ("a same-size garbled store", "garbled-store", 400, "bundle 'garbled-store' refused"),
    ("missing, under the root", "no-such-bundle", 400,
     "bundle 'no-such-bundle' refused: no-such-bundle: no such bundle directory"),
    ("an existing folder outside the root", "/etc", 403,
     "'bundle' must be a bundle folder under the server's swap root (--swap_root)"),
    ("a missing folder outside the root", "/no/such/folder", 403,
     "'bundle' must be a bundle folder under the server's swap root (--swap_root)"),
    ("up and out of the root", "../../..", 403, "'bundle' must be a bundle folder under"),
    ("the root itself", ".", 403, "'bundle' must be a bundle folder under"),
]


@pytest.mark.parametrize("case,bundle,status,message", BAD_SWAPS, ids=[c[0] for c in BAD_SWAPS])
def test_a_refused_swap_is_a_4xx_and_the_old_bundle_serves_on(live, case, bundle, status,
                                                              message):
  del case
  if not bundle.startswith((".", "/")) and bundle != "no-such-bundle":
    bundle = _tampered(live, bundle)
  served = httpx.get(f"{live['base']}/v1/info").json()["bundle"]
  got_status, got, _ = on_one_connection(
      live["base"], "POST", "/v1/admin/swap", json.dumps({"bundle": bundle}).encode(),
      {"content-type": "application/json", **AUTH})
  assert (got_status, set(got)) == (status, {"error", "request_id"})
  assert message in got["error"]
  assert live["root"] not in got["error"] and "/etc" not in got["error"]
  assert httpx.get(f"{live['base']}/v1/info").json()["bundle"] == served
  assert httpx.get(f"{live['base']}/v1/search", params={"q": "bridge"}).status_code == 200


ADMIN_REFUSALS = [
    # (case, headers, body, status, message)
    ("no token", {"content-type": "application/json"}, b'{"bundle": "second"}', 401,
     "an admin request needs the header 'Authorization: Bearer <token>'"),
    ("a browser's text/plain POST, no token", {"content-type": "text/plain"},
     b'{"bundle": "second"}', 401, "needs the header 'Authorization: Bearer <token>'"),
    ("wrong token", {"content-type": "application/json", "authorization": "Bearer nope"},
     b'{"bundle": "second"}', 403, "wrong admin token"),
    ("token of another scheme", {"content-type": "application/json",
                                 "authorization": f"Basic {TOKEN}"},
     b'{"bundle": "second"}', 403, "wrong admin token"),
    ("text/plain with the token", {"content-type": "text/plain", **AUTH},
     b'{"bundle": "second"}', 415, "send the body as 'Content-Type: application/json'"),
    ("form with the token", {"content-type": "application/x-www-form-urlencoded", **AUTH},
     b"bundle=second", 415, "Content-Type: application/json"),
    ("unknown field", {"content-type": "application/json", **AUTH},
     b'{"bundle": "second", "force": true}', 400, "unknown field(s) ['force']"),
    ("bundle not a string", {"content-type": "application/json", **AUTH},
     b'{"bundle": 3}', 400, "'bundle' must be a bundle folder's path"),
]


@pytest.mark.parametrize("case,headers,body,status,message", ADMIN_REFUSALS,
                         ids=[c[0] for c in ADMIN_REFUSALS])
def test_admin_needs_the_token_and_json(live, case, headers, body, status, message):
  del case
  served = httpx.get(f"{live['base']}/v1/info").json()["bundle"]
  got_status, got, got_headers = on_one_connection(live["base"], "POST", "/v1/admin/swap",
                                                   body, headers)
  assert (got_status, set(got)) == (status, {"error", "request_id"})
  assert message in got["error"]
  if status == 401:
    assert got_headers["www-authenticate"] == "Bearer"
  assert httpx.get(f"{live['base']}/v1/info").json()["bundle"] == served  # nothing swapped


def test_a_bug_is_a_json_500_and_the_connection_stays(live, monkeypatch):
  def broken(hits):
    raise RuntimeError("a bug")

  url = urllib.parse.urlsplit(live["base"])
  conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
  try:
    monkeypatch.setattr(app_lib, "_hits_json", broken)  # the live server runs in this process
    conn.request("GET", "/v1/search?q=bridge")
    response = conn.getresponse()
    body, sock = json.loads(response.read()), conn.sock
    monkeypatch.undo()
    assert response.status == 500 and sock is not None
    assert body["error"] == ("internal error (a bug: see the server log, request "
                             f"{body['request_id']})")
    conn.request("GET", "/v1/search?q=bridge")
    assert conn.getresponse().status == 200 and conn.sock is sock
  finally:
    conn.close()


def test_swap_needs_a_token_to_start(serving_bundle):
  with pytest.raises(ValueError, match="--allow_swap needs an admin token"):
    app_lib.ServeConfig(bundle=serving_bundle["bundle"], allow_swap=True)
  with pytest.raises(ValueError, match="at least 16 characters"):
    app_lib.ServeConfig(bundle=serving_bundle["bundle"], allow_swap=True, admin_token="short")


def test_no_absolute_path_leaves_the_server(live):
  base = live["base"]
  texts = {path: httpx.get(f"{base}{path}").text for path in ("/v1/info", "/openapi.json",
                                                                "/docs", "/")}
  texts["swap error"] = _swap(base, "no-such-bundle").text
  texts["search error"] = httpx.post(f"{base}/v1/search", json={"query": "x", "nprobe": 3}).text
  for where, text in texts.items():
    assert live["root"] not in text and "/tmp" not in text, where
  info = json.loads(texts["/v1/info"])
  assert info["bundle"] in ("first", "second")
  assert info["manifest"]["model"]["source"] == "model"  # the source folder's name only


def test_show_paths_shows_them(serving_bundle):
  app = app_lib.create_app(app_lib.ServeConfig(bundle=serving_bundle["bundle"],
                                               show_paths=True), load_in_background=False)
  with TestClient(app, base_url=LOCAL) as c:
    info = c.get("/v1/info").json()
  assert info["bundle"] == serving_bundle["bundle"]
  assert info["manifest"]["model"]["source"] == serving_bundle["model"]


# ---------------------------------------------------------------------------------------------
# Bodies capped as they are read; requests that do not arrive in time.
# ---------------------------------------------------------------------------------------------


def _raw(base: str) -> socket.socket:
  url = urllib.parse.urlsplit(base)
  sock = socket.create_connection((url.hostname, url.port), timeout=30)
  return sock


def test_a_content_length_over_the_cap_is_refused_before_the_body_is_read(live):
  sock = _raw(live["base"])
  # 100 MB announced, none sent: the answer comes at once, and the connection is closed
  # rather than drained.
  sock.sendall(b"POST /v1/search HTTP/1.1\r\nhost: 127.0.0.1\r\n"
               b"content-type: application/json\r\ncontent-length: 104857600\r\n\r\n")
  head, _, body = server_lib.read_until_closed(sock).partition(b"\r\n\r\n")
  sock.close()
  assert head.startswith(b"HTTP/1.1 413 ") and b"connection: close" in head.lower()
  assert json.loads(body)["error"] == ("the body has 104857600 bytes; the limit is "
                                       f"{2 * 1024 * 1024}")
  assert httpx.get(f"{live['base']}/v1/search", params={"q": "bridge"}).status_code == 200


def test_a_streamed_body_over_the_cap_is_cut_while_read(live):
  sock = _raw(live["base"])
  sock.sendall(b"POST /v1/search HTTP/1.1\r\nhost: 127.0.0.1\r\n"
               b"content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
  chunk = b" " * 65536
  sent = 0
  try:
    for _ in range(64):  # up to 4 MiB, twice the cap
      sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
      sent += len(chunk)
  except (BrokenPipeError, ConnectionResetError):
    pass  # the server stopped reading
  head, _, body = server_lib.read_until_closed(sock).partition(b"\r\n\r\n")
  sock.close()
  assert head.startswith(b"HTTP/1.1 413 ") and b"connection: close" in head.lower()
  assert json.loads(body)["error"] == f"the body is over the limit of {2 * 1024 * 1024} bytes"
  assert httpx.get(f"{live['base']}/v1/search", params={"q": "bridge"}).status_code == 200


@pytest.mark.parametrize("case,sent,answer", [
    ("half the headers", b"POST /v1/search HTTP/1.1\r\nhost: 127.0.0.1\r\n",
     b"HTTP/1.1 408 "),
    ("half the body", b"POST /v1/search HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: "
                      b"application/json\r\ncontent-length: 100\r\n\r\n{\"query", b""),
    ("nothing", b"", b""),
])
def test_a_request_that_does_not_arrive_in_time_is_closed(live, case, sent, answer):
  del case
  sock = _raw(live["base"])
  t0 = time.monotonic()
  sock.sendall(sent)
  got = server_lib.read_until_closed(sock)  # returns when the server closes the connection
  waited = time.monotonic() - t0
  sock.close()
  assert got.startswith(answer) and waited < 20  # the fixture's read timeout is 2 s
  if answer:
    assert json.loads(got.partition(b"\r\n\r\n")[2]) == {
        "error": "the request did not arrive within 2 s", "request_id": ""}
  assert httpx.get(f"{live['base']}/v1/search", params={"q": "bridge"}).status_code == 200


# ---------------------------------------------------------------------------------------------
# BM25 queries bounded to what Lucene accepts.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_a_query_over_lucenes_term_limit_is_cut_and_the_answer_says_so(live, retriever, mode):
  from twotower.core import lucene
  status, got, _ = _send(live["base"], "POST", {"query": CJK, "mode": mode, "k": 5})
  assert status == 200
  assert got["warnings"] == ["'query': BM25 searched its first 1024 of 1500 characters "
                             "(Lucene takes at most 1024 distinct terms)"]
  assert lucene.bound_query(CJK) == CJK[:1024]
  if mode == "bm25":  # the same hits as the prefix Lucene takes
    assert got["hits"] == [h.to_dict() for h in retriever.search(CJK[:1024], k=5, mode=mode)]
  batch = _send(live["base"], "POST", {"queries": ["bridge", CJK], "mode": mode})[1]
  assert batch["warnings"] == ["'queries'[1]: BM25 searched its first 1024 of 1500 "
                               "characters (Lucene takes at most 1024 distinct terms)"]


def test_the_batch_bm25_path_cuts_a_query_over_the_limit_and_counts_it(serving_bundle, caplog):
  from twotower.core import lucene
  index = os.path.join(serving_bundle["bundle"], "lucene")
  words = " ".join(f"w{i}x" for i in range(1500))  # 1,500 distinct terms, 6,089 characters
  questions = [("long", words), ("cjk", CJK), ("short", QUESTION)]
  for threads in (1, 2):  # one query at a time, and batch_search (which fails whole)
    caplog.clear()
    run = lucene.search(index, questions, lucene.DEFAULT_K1, lucene.DEFAULT_B, hits=5,
                        threads=threads, batch_size=10, progress=False)
    assert set(run) == {"long", "cjk", "short"} and len(run["short"].candidate_ids) == 5
    assert "2 of 3 questions hold more than 1024 distinct terms" in caplog.text
  assert lucene.bound_query(words) == " ".join(f"w{i}x" for i in range(1024))


# ---------------------------------------------------------------------------------------------
# `twotower serve`'s own errors: one line, the documented exit codes.
# ---------------------------------------------------------------------------------------------


def _serve(args: list[str], capsys) -> tuple[int, list[str]]:
  """`twotower serve ARGS` in this process: (exit status, its stderr lines). The logging it
  sets up (a handler on this test's captured stderr) is undone after."""
  import logging
  from twotower import cli
  root, names = logging.getLogger(), ("twotower", "twotower.serve.access",
                                      "twotower.deploy.serving")
  saved = (list(root.handlers), root.level, [logging.getLogger(n).level for n in names])
  try:
    code = cli.main(["serve", *args])
  finally:
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    for name, level in zip(names, saved[2]):
      logging.getLogger(name).setLevel(level)
  return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.mark.parametrize("args,message", [
    (["--port", "70000"], "twotower serve: error: --port must be between 1 and 65535, got 70000"),
    (["--allow_swap"], "twotower serve: error: --allow_swap needs an admin token of at least "
                       "16 characters"),
    (["--host", "0.0.0.0", "--allow_swap"], "twotower serve: error: --allow_swap needs an "
                                            "admin token"),
    (["--read_timeout", "0"], "twotower serve: error: --read_timeout must be > 0, got 0.0"),
])
def test_serve_usage_errors_exit_2_with_one_line(serving_bundle, capsys, monkeypatch, args,
                                                 message):
  monkeypatch.delenv(app_lib.TOKEN_ENV, raising=False)
  code, lines = _serve([serving_bundle["bundle"], *args], capsys)
  assert code == 2 and len(lines) == 1 and lines[0].startswith(message)


def test_serve_of_a_bundle_that_does_not_load_exits_1_with_one_line(serving_bundle, tmp_path,
                                                                     capsys):
  bundle = str(tmp_path / "garbled")
  shutil.copytree(serving_bundle["bundle"], bundle)
  store = os.path.join(bundle, "store.sqlite")
  size = os.path.getsize(store)
  with open(store, "wb") as f:  # same size, other bytes
    f.write(bytes((i * 7 + 3) % 251 for i in range(size)))
  code, lines = _serve([bundle, "--port", str(server_lib.free_port())], capsys)
  # The server's own "serving ... on http://..." line, then the error: no traceback.
  assert code == 1 and len(lines) == 2 and "serving" in lines[0]
  assert lines[1].startswith("twotower serve: error: the bundle did not load: BundleError: ")
  assert "part 'store.sqlite'" in lines[1]


def test_serve_on_a_busy_port_exits_1_with_one_line(serving_bundle, capsys):
  with socket.socket() as busy:
    busy.bind((server_lib.LOOPBACK, 0))
    busy.listen()
    port = busy.getsockname()[1]
    code, lines = _serve([serving_bundle["bundle"], "--port", str(port)], capsys)
  assert code == 1 and lines == [f"twotower serve: error: cannot listen on 127.0.0.1:{port}: "
                                 "Address already in use (another server there? pick "
                                 "another --port)"]


def chromium() -> str:
  for name in ("chromium", "chromium-browser", "google-chrome"):
    path = shutil.which(name)
    if path:
      return path
  pytest.fail("no headless Chromium: `make test` installs Debian's `chromium` "
              "(apt-get install chromium)")


def test_search_page_in_a_headless_browser(live, tmp_path):
  url = f"{live['base']}/?q=When%20was%20the%20river%20of%20Arlen%20built%3F"
  done = subprocess.run(
      [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
       f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=15000",
       "--dump-dom", url], capture_output=True, text=True, timeout=120, check=False)
  dom = done.stdout
  assert done.returncode == 0, done.stderr[-2000:]
  assert 'data-state="done"' in dom, dom[-2000:]
  for mode in ("dense", "bm25", "hybrid"):
    column = dom.split(f'id="col-{mode}"', 1)[1].split("</section>", 1)[0]
    assert column.count('class="hit') == 10, mode
  # BM25 and the hybrid share their top hit here: marked in both columns.
  assert 'class="hit shared"' in dom and 'class="badge">bm25<' in dom
  assert "The river of Arlen was built in" in dom
