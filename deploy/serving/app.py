"""`twotower serve`: the HTTP service over a retriever bundle (FastAPI + uvicorn).

    twotower serve runs/demo/bundle                  # http://127.0.0.1:8000/
    curl -s localhost:8000/v1/search -d '{"query": "who founded the city?", "k": 3}'

API, version 1 (every path under /v1 stays stable; a change of meaning gets /v2):
  GET  /v1/health    200 while the process runs
  GET  /v1/ready     200 once the towers, the index and Lucene are loaded and a warm-up query
                     ran; 503 (with the reason) before
  GET  /v1/info      the bundle's manifest, the service's limits and batching counts
  POST /v1/search    {"query": str} or {"queries": [str, ...]}, "k", "mode" (dense | bm25 |
                     hybrid), optional "nprobe" / "ef_search" for this request only
  GET  /v1/search    ?q=...&k=...&mode=...   (one query)
  POST /v1/admin/swap {"bundle": path}: load another bundle, then serve it from the next batch
                     on; no request fails (only with --allow_swap)
  GET  /             the search page (dense, BM25 and hybrid side by side); /?q=... runs
  GET  /docs         OpenAPI docs

Bad input never reaches a 500: each case is a 4xx with `{"error": "..."}` saying what was
wrong (see `check_search`). Every response carries `X-Request-ID` (the client's, or a new
one), and every request is one log line: id, method, path, status, milliseconds.

The bundle is loaded in a background thread at start-up, so /v1/health answers at once and
/v1/ready tells when search can start. Searches go through one MicroBatcher: concurrent
requests share one query-tower call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.resources
import json
import logging
import threading
import time
import uuid
from typing import Any, Optional

import fastapi
from fastapi import responses

from twotower.deploy.serving import batcher as batcher_lib
from twotower.deploy.serving import retriever as retriever_lib
from twotower.deploy.serving.retriever import MODES, Retriever, SearchRequest

logger = logging.getLogger(__name__)
access_logger = logging.getLogger("twotower.serve.access")

API_VERSION = "v1"


@dataclasses.dataclass(frozen=True)
class ServeConfig:
  """Flags of `twotower serve`."""
  bundle: str
  host: str = "127.0.0.1"            # loopback: other machines reach it only when asked
  port: int = 8000
  threads: int = 0                   # TensorFlow / Lucene threads (0: the machine's cores)
  faiss_threads: int = 1             # FAISS OpenMP threads (1: see Retriever.load)
  max_batch: int = 64                # queries per micro-batch
  max_wait_ms: float = 0.0           # how long a batch waits for more requests
  max_k: int = 1000                  # largest k a request may ask
  max_queries: int = 64              # largest batch one request may send
  max_query_chars: int = 2000        # longest query
  allow_swap: bool = False           # enable POST /v1/admin/swap
  verify: str = "size"               # bundle check at load: none | size | sha256


class ApiError(Exception):
  """A request the service refuses: `status` and a message for `{"error": ...}`."""

  def __init__(self, status: int, message: str):
    super().__init__(message)
    self.status = status
    self.message = message


# ---------------------------------------------------------------------------------------------
# Request checks: every bad input is a 4xx that says what was wrong.
# ---------------------------------------------------------------------------------------------

_BODY_FIELDS = {"query", "queries", "k", "mode", "nprobe", "ef_search"}


def _int_field(body: dict, name: str, default: Optional[int]) -> Optional[int]:
  value = body.get(name, default)
  if value is None:
    return None
  if isinstance(value, bool) or not isinstance(value, int):
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
      return int(value)
    raise ApiError(400, f"'{name}' must be an integer, got {json.dumps(value)[:40]}")
  return value


def check_search(body: Any, config: ServeConfig) -> tuple[SearchRequest, bool]:
  """A parsed JSON body (or query parameters) -> (SearchRequest, single query?)."""
  if not isinstance(body, dict):
    raise ApiError(400, "the body must be a JSON object such as {\"query\": \"...\"}")
  unknown = sorted(set(body) - _BODY_FIELDS)
  if unknown:
    raise ApiError(400, f"unknown field(s) {unknown}; expected some of {sorted(_BODY_FIELDS)}")
  if ("query" in body) == ("queries" in body):
    raise ApiError(400, "give exactly one of 'query' (a string) or 'queries' (a list)")
  single = "query" in body
  queries = [body["query"]] if single else body["queries"]
  if not isinstance(queries, list):
    raise ApiError(400, "'queries' must be a list of strings")
  if not queries:
    raise ApiError(400, "'queries' is empty")
  if len(queries) > config.max_queries:
    raise ApiError(413, f"{len(queries)} queries in one request; the limit is "
                        f"{config.max_queries}")
  for i, q in enumerate(queries):
    where = "'query'" if single else f"'queries'[{i}]"
    if not isinstance(q, str):
      raise ApiError(400, f"{where} must be a string")
    if not q.strip():
      raise ApiError(400, f"{where} is empty")
    if len(q) > config.max_query_chars:
      raise ApiError(413, f"{where} has {len(q)} characters; the limit is "
                          f"{config.max_query_chars}")
  k = _int_field(body, "k", 10)
  if k < 1 or k > config.max_k:
    raise ApiError(400, f"'k' must be between 1 and {config.max_k}, got {k}")
  mode = body.get("mode", "dense")
  if mode not in MODES:
    raise ApiError(400, f"unknown 'mode' {json.dumps(mode)[:40]}; expected one of "
                        f"{list(MODES)}")
  nprobe, ef_search = _int_field(body, "nprobe", None), _int_field(body, "ef_search", None)
  for name, value in (("nprobe", nprobe), ("ef_search", ef_search)):
    if value is not None and value < 1:
      raise ApiError(400, f"'{name}' must be >= 1, got {value}")
  return SearchRequest(tuple(queries), k, mode, nprobe, ef_search), single


async def _json_body(request: fastapi.Request) -> Any:
  raw = await request.body()
  if not raw:
    raise ApiError(400, "empty body; send a JSON object such as {\"query\": \"...\"}")
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise ApiError(400, f"the body is not UTF-8 (byte {e.start}: {raw[e.start:e.start + 1]!r})"
                   ) from e
  try:
    return json.loads(text)
  except json.JSONDecodeError as e:
    raise ApiError(400, f"the body is not JSON: {e.msg} at line {e.lineno} column {e.colno}"
                   ) from e


# ---------------------------------------------------------------------------------------------
# The service's state: the bundle, loaded in the background, behind the micro-batcher.
# ---------------------------------------------------------------------------------------------


class Service:
  """What the app serves from; lives on `app.state.service`."""

  def __init__(self, config: ServeConfig):
    self.config = config
    self.batcher: Optional[batcher_lib.MicroBatcher] = None
    self.error: Optional[str] = None
    self.started = time.perf_counter()
    self.ready_seconds: Optional[float] = None
    self._swap_lock = threading.Lock()

  @property
  def ready(self) -> bool:
    return self.batcher is not None

  def load(self) -> None:
    """Loads and warms up the bundle; runs in a thread at start-up."""
    try:
      retriever = Retriever.load(self.config.bundle, verify=self.config.verify,
                                 threads=self.config.threads,
                                 faiss_threads=self.config.faiss_threads)
      # Warmed up in the batcher's own thread: the one that will search.
      batcher = batcher_lib.MicroBatcher(retriever, self.config.max_batch,
                                         self.config.max_wait_ms, warm_up=True)
      batcher.warm.wait()
      if batcher.warm_error is not None:
        batcher.close()
        raise batcher.warm_error
    except Exception as e:  # pylint: disable=broad-except
      self.error = f"{type(e).__name__}: {e}"
      logger.error("bundle %s did not load: %s", self.config.bundle, self.error)
      return
    self.batcher = batcher
    self.ready_seconds = time.perf_counter() - self.started
    logger.info("ready in %.1f s: %s", self.ready_seconds, self.config.bundle)

  def swap(self, path: str) -> dict:
    """Loads `path` beside the serving bundle, then swaps it in between two batches."""
    if not self.ready:
      raise ApiError(503, "not ready: no bundle is served yet")
    with self._swap_lock:  # one swap at a time
      try:
        new = Retriever.load(path, verify=self.config.verify)
        new.warm_up()  # here; its first batch then finds the query tower traced
      except (ValueError, OSError) as e:
        raise ApiError(400, f"bundle {path} refused: {e}") from e
      old = self.batcher.swap(new)
      old.close()
    logger.info("swapped bundle %s -> %s", old.path, new.path)
    return {"bundle": new.path, "previous": old.path, "documents": new.size}

  def close(self) -> None:
    if self.batcher is not None:
      self.batcher.close()
      self.batcher.retriever.close()


# ---------------------------------------------------------------------------------------------
# The app.
# ---------------------------------------------------------------------------------------------


def search_page() -> str:
  return (importlib.resources.files("twotower.deploy.serving") / "static" /
          "search.html").read_text(encoding="utf-8")


def _hits_json(hits: list) -> list[dict]:
  return [h.to_dict() for h in hits]


class RequestLog:
  """Pure ASGI middleware (no per-request task, unlike `@app.middleware("http")`): a request
  id (the client's `X-Request-ID`, or a new one) on `request.state` and on the response, and
  one log line per request: id, method, path, status, milliseconds."""

  def __init__(self, app):
    self.app = app

  async def __call__(self, scope, receive, send):
    if scope["type"] != "http":
      await self.app(scope, receive, send)
      return
    given = dict(scope.get("headers") or ()).get(b"x-request-id", b"").decode("latin-1")
    request_id = given or uuid.uuid4().hex[:12]
    scope.setdefault("state", {})["request_id"] = request_id
    status, t0 = [500], time.perf_counter()

    async def send_with_id(message):
      if message["type"] == "http.response.start":
        status[0] = message["status"]
        message = {**message, "headers": [*message.get("headers", ()),
                                          (b"x-request-id", request_id.encode("latin-1"))]}
      await send(message)

    try:
      await self.app(scope, receive, send_with_id)
    finally:
      access_logger.info("%s %s %s %d %.1f ms", request_id, scope["method"], scope["path"],
                         status[0], (time.perf_counter() - t0) * 1000)


def create_app(config: ServeConfig, load_in_background: bool = True) -> fastapi.FastAPI:
  """The app over `config.bundle` (loaded at start-up: in a background thread, or before
  the app starts serving when `load_in_background` is False)."""

  @contextlib.asynccontextmanager
  async def lifespan(app: fastapi.FastAPI):
    service = Service(config)
    app.state.service = service
    if load_in_background:
      threading.Thread(target=service.load, name="bundle-loader", daemon=True).start()
    else:
      await asyncio.to_thread(service.load)
    yield
    service.close()

  app = fastapi.FastAPI(
      title="twotower retriever", version=API_VERSION, lifespan=lifespan,
      description="Dense (two-tower + FAISS), BM25 (Lucene) and hybrid search over a "
                  "retriever bundle. See docs/guide/serve.md.")

  app.add_middleware(RequestLog)

  @app.exception_handler(Exception)
  async def internal_error(request: fastapi.Request, e: Exception):
    request_id = getattr(request.state, "request_id", "")
    logger.error("request %s failed", request_id, exc_info=e)
    return responses.JSONResponse({"error": "internal error (a bug: see the server log, "
                                            f"request {request_id})"}, 500)

  @app.exception_handler(ApiError)
  async def api_error(request: fastapi.Request, e: ApiError):
    headers = {"Retry-After": "1"} if e.status == 503 else None
    return responses.JSONResponse(
        {"error": e.message, "request_id": getattr(request.state, "request_id", "")},
        e.status, headers=headers)

  @app.exception_handler(fastapi.exceptions.RequestValidationError)
  async def validation_error(request: fastapi.Request, e):
    first = e.errors()[0] if e.errors() else {}
    where = ".".join(str(x) for x in first.get("loc", ()) if x not in ("query", "body"))
    return responses.JSONResponse(
        {"error": f"{where or 'request'}: {first.get('msg', 'invalid')}",
         "request_id": getattr(request.state, "request_id", "")}, 400)

  def service_of(request: fastapi.Request) -> Service:
    service: Service = request.app.state.service
    if not service.ready:
      raise ApiError(503, f"not ready: {service.error or 'loading the bundle'}")
    return service

  v1 = fastapi.APIRouter(prefix=f"/{API_VERSION}")

  @v1.get("/health")
  async def health():
    return {"status": "ok"}

  @v1.get("/ready")
  async def ready(request: fastapi.Request):
    service: Service = request.app.state.service
    if not service.ready:
      raise ApiError(503, f"not ready: {service.error or 'loading the bundle'}")
    return {"ready": True, "seconds_to_ready": round(service.ready_seconds, 3)}

  @v1.get("/info")
  async def info(request: fastapi.Request):
    service = service_of(request)
    retriever = service.batcher.retriever
    manifest = {k: v for k, v in retriever.manifest.items() if k != "files"}
    return {"api": API_VERSION, "bundle": retriever.path, "manifest": manifest,
            "limits": {"max_k": config.max_k, "max_queries": config.max_queries,
                       "max_query_chars": config.max_query_chars},
            "batching": dataclasses.asdict(service.batcher.stats)}

  async def _search(request: fastapi.Request, body: Any) -> dict:
    service = service_of(request)
    search, single = check_search(body, config)
    try:
      service.batcher.retriever.check(search)
    except ValueError as e:
      raise ApiError(400, str(e)) from e
    t0 = time.perf_counter()
    hits = await service.batcher.submit(search)
    took = round((time.perf_counter() - t0) * 1000, 2)
    head = {"api": API_VERSION, "request_id": request.state.request_id, "mode": search.mode,
            "k": search.k, "took_ms": took}
    # A JSONResponse as it is: FastAPI's jsonable_encoder pass over plain dicts costs more
    # than the search of a small bundle.
    if single:
      return responses.JSONResponse({**head, "query": search.queries[0],
                                     "hits": _hits_json(hits[0])})
    return responses.JSONResponse({**head, "results": [{"query": q, "hits": _hits_json(h)}
                                                       for q, h in zip(search.queries, hits)]})

  _body_schema = {"requestBody": {"required": True, "content": {"application/json": {
      "schema": {"type": "object", "properties": {
          "query": {"type": "string"}, "queries": {"type": "array", "items": {"type": "string"}},
          "k": {"type": "integer", "default": 10, "minimum": 1, "maximum": config.max_k},
          "mode": {"type": "string", "enum": list(MODES), "default": "dense"},
          "nprobe": {"type": "integer", "minimum": 1},
          "ef_search": {"type": "integer", "minimum": 1}}},
      "example": {"query": "who founded the city?", "k": 10, "mode": "hybrid"}}}}}

  @v1.post("/search", openapi_extra=_body_schema)
  async def search_post(request: fastapi.Request):
    return await _search(request, await _json_body(request))

  @v1.get("/search")
  async def search_get(request: fastapi.Request, q: str = "", k: int = 10,
                       mode: str = "dense", nprobe: Optional[int] = None,
                       ef_search: Optional[int] = None):
    body = {"query": q, "k": k, "mode": mode}
    body.update({n: v for n, v in (("nprobe", nprobe), ("ef_search", ef_search)) if v})
    return await _search(request, body)

  if config.allow_swap:
    @v1.post("/admin/swap")
    async def swap(request: fastapi.Request):
      body = await _json_body(request)
      if not isinstance(body, dict) or not isinstance(body.get("bundle"), str):
        raise ApiError(400, "send {\"bundle\": \"/path/to/bundle\"}")
      return await asyncio.to_thread(request.app.state.service.swap, body["bundle"])

  app.include_router(v1)

  @app.get("/", response_class=responses.HTMLResponse, include_in_schema=False)
  async def page():
    return search_page()

  return app


def run(config: ServeConfig) -> None:
  """Serves until interrupted (uvicorn, one process)."""
  import uvicorn  # pylint: disable=import-outside-toplevel
  # Fail fast on a path that is no bundle; the parts load (and are checked) in the background.
  retriever_lib.read_manifest(config.bundle.rstrip("/"))
  retriever_lib.set_threads(config.threads, config.faiss_threads)
  logger.info("serving %s on http://%s:%d/ (docs at /docs)", config.bundle, config.host,
              config.port)
  uvicorn.run(create_app(config), host=config.host, port=config.port, log_level="warning",
              access_log=False)


if __name__ == "__main__":
  import sys
  from twotower import cli
  sys.exit(cli.run_stage("serve"))
