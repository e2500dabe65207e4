"""`twotower serve` (deploy.serving.app): the HTTP API against a running app on a bundle the
tests build. Every bad input is a 4xx with a JSON error; searches equal the Python API;
concurrent requests share one retriever call; a bundle swap under load fails no request; the
search page renders in a real headless browser."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import subprocess
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from twotower.deploy.serving import Retriever, SearchRequest
from twotower.deploy.serving import app as app_lib
from twotower.deploy.serving import batcher as batcher_lib
from twotower.testing import server as server_lib

QUESTION = "Who designed the tower in Galt?"


@pytest.fixture(scope="module")
def client(serving_bundle):
  app = app_lib.create_app(app_lib.ServeConfig(bundle=serving_bundle["bundle"]),
                           load_in_background=False)
  with TestClient(app) as c:
    yield c


@pytest.fixture(scope="module")
def retriever(serving_bundle):
  r = Retriever.load(serving_bundle["bundle"])
  yield r
  r.close()


# ---------------------------------------------------------------------------------------------
# Every bad input: a 4xx whose JSON error says what was wrong.
# ---------------------------------------------------------------------------------------------

BAD_INPUTS = [
    # (case, method, body (bytes: raw) or query params, status, message)
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
    ("unknown mode", "POST", {"query": "x", "mode": "sparse"}, 400,
     "unknown 'mode' \"sparse\"; expected one of ['dense', 'bm25', 'hybrid']"),
    ("batch over its limit", "POST", {"queries": ["x"] * 65}, 413,
     "65 queries in one request; the limit is 64"),
    ("empty batch", "POST", {"queries": []}, 400, "'queries' is empty"),
    ("empty query in a batch", "POST", {"queries": ["x", ""]}, 400, "'queries'[1] is empty"),
    ("non-string query in a batch", "POST", {"queries": ["x", 3]}, 400,
     "'queries'[1] must be a string"),
    ("query and queries", "POST", {"query": "x", "queries": ["y"]}, 400,
     "give exactly one of 'query' (a string) or 'queries' (a list)"),
    ("no query", "POST", {"k": 3}, 400, "give exactly one of 'query'"),
    ("unknown field", "POST", {"query": "x", "topk": 3}, 400, "unknown field(s) ['topk']"),
    ("nprobe on a flat index", "POST", {"query": "x", "nprobe": 8}, 400,
     "nprobe is for IVF indexes; this is IndexFlat"),
    ("nprobe = 0", "POST", {"query": "x", "nprobe": 0}, 400, "'nprobe' must be >= 1, got 0"),
    ("GET without q", "GET", {}, 400, "'query' is empty"),
    ("GET k not a number", "GET", {"q": "x", "k": "abc"}, 400, "k: Input should be a valid"),
    ("GET k = 0", "GET", {"q": "x", "k": "0"}, 400, "'k' must be between 1 and 1000, got 0"),
]


@pytest.mark.parametrize("case,method,body,status,message", BAD_INPUTS,
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_is_a_4xx_with_a_json_error(client, case, method, body, status, message):
  del case
  if method == "GET":
    response = client.get("/v1/search", params=body)
  elif isinstance(body, bytes):
    response = client.post("/v1/search", content=body,
                           headers={"content-type": "application/json"})
  else:
    response = client.post("/v1/search", json=body)
  assert response.status_code == status
  assert message in response.json()["error"]
  assert response.headers["x-request-id"] == response.json()["request_id"]


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
  assert info["limits"] == {"max_k": 1000, "max_queries": 64, "max_query_chars": 2000}
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
  with TestClient(app) as c:
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
  root = tmp_path_factory.mktemp("live")
  first, second = str(root / "first"), str(root / "second")
  shutil.copytree(serving_bundle["bundle"], first)
  shutil.copytree(serving_bundle["bundle"], second)
  with server_lib.live_server(app_lib.ServeConfig(bundle=first, allow_swap=True)) as base:
    yield {"base": base, "first": first, "second": second}


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
    for target in (live["second"], live["first"], live["second"]):
      time.sleep(0.3)
      swaps.append(httpx.post(f"{base}/v1/admin/swap", json={"bundle": target}, timeout=120))
    statuses = [s for f in futures for s in f.result()]
  assert [s.status_code for s in swaps] == [200, 200, 200]
  assert swaps[-1].json()["previous"] == live["first"]
  assert len(statuses) >= 60 and set(statuses) == {200}
  assert httpx.get(f"{base}/v1/info").json()["bundle"] == live["second"]


def test_a_swap_to_a_broken_bundle_is_refused_and_serving_goes_on(live, tmp_path):
  broken = str(tmp_path / "broken")
  os.makedirs(broken)
  response = httpx.post(f"{live['base']}/v1/admin/swap", json={"bundle": broken}, timeout=60)
  assert response.status_code == 400 and "manifest.json" in response.json()["error"]
  assert httpx.get(f"{live['base']}/v1/search", params={"q": "bridge"}).status_code == 200


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
