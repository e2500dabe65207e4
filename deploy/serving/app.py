"""`twotower serve`: the HTTP service over a retriever bundle (FastAPI + uvicorn).

    twotower serve runs/demo/bundle                  # http://127.0.0.1:8000/
    curl -s localhost:8000/v1/search -d '{"query": "who founded the city?", "k": 3}'

API, version 1 (every path under /v1 stays stable; a change of meaning gets /v2):
  GET  /v1/health    200 while the process runs
  GET  /v1/ready     200 once the towers, the index and Lucene are loaded and a warm-up query
                     ran; 503 (with the reason) before
  GET  /v1/info      the bundle's manifest, the service's limits and batching counts
  POST /v1/search    {"query": str} or {"queries": [str, ...]}, "k", "mode" (dense | bm25 |
                     hybrid), optional "nprobe" / "ef_search" for this request only, and
                     "filter" (deploy.serving.doc_filter: fields, section_prefix, ids,
                     exclude_ids): the true top k among the documents it matches
  GET  /v1/search    ?q=...&k=...&mode=...&filter={JSON}  (one query; the same checks)
  POST /v1/admin/swap {"bundle": path under --swap_root}: load another bundle, then serve it
                     from the next batch on; no request fails (only with --allow_swap, and
                     with 'Authorization: Bearer TOKEN' and a JSON content type)
  GET  /             the search page (dense, BM25 and hybrid side by side); /?q=... runs
  GET  /docs         OpenAPI docs

Bad input never reaches a 500: each case is a 4xx with `{"error": "..."}` saying what was
wrong (deploy.serving.schema: one pydantic model per endpoint), and the connection stays
open for the next request. Bodies are capped as they are read, a request must arrive within
--read_timeout seconds, and no absolute path leaves the server without --show_paths
(deploy.serving.http_front). Every response carries `X-Request-ID` (the client's, or a new one),
and every request is one log line: id, method, path, status, milliseconds.

The bundle is loaded in a background thread at start-up, so /v1/health answers at once and
/v1/ready tells when search can start. Searches go through one MicroBatcher: concurrent
requests share one query-tower call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import importlib.resources
import ipaddress
import logging
import os
import socket
import threading
import time
from typing import Any, Callable, Optional

import fastapi
from fastapi import responses
from starlette.exceptions import HTTPException as StarletteHTTPException

from twotower.core import lucene
from twotower.core.contracts import bundle_manifest
from twotower.deploy.serving import batcher as batcher_lib
from twotower.deploy.serving import http_front as guard
from twotower.deploy.serving import retriever as retriever_lib
from twotower.deploy.serving import schema
from twotower.deploy.serving.retriever import Retriever
from twotower.deploy.serving.schema import ApiError

logger = logging.getLogger(__name__)

API_VERSION = "v1"
#: Where `twotower serve` reads the admin token when --admin_token is not given (an
#: environment variable, unlike a flag, is not shown to other users by `ps`).
TOKEN_ENV = "TWOTOWER_ADMIN_TOKEN"
MIN_TOKEN_CHARS = 16


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
  max_body_bytes: int = 2 * 1024 * 1024  # largest request body (64 queries of 2,000
                                         # characters fit, even each escaped as \uXXXX)
  read_timeout: float = 10.0         # seconds a request's headers and body may take to arrive
  allow_swap: bool = False           # enable POST /v1/admin/swap (needs admin_token)
  admin_token: str = dataclasses.field(default="", repr=False)  # Bearer token of /v1/admin
  swap_root: str = ""                # bundles a swap may load ("": the bundle's parent folder)
  show_paths: bool = False           # absolute paths in /v1/info and messages
  verify: str = retriever_lib.DEFAULT_VERIFY  # bundle check at load and at each swap: the
                                             # one default of query, serve and Retriever.load
  encoder: str = "auto"              # query tower: auto (ONNX when the bundle carries it),
                                     # onnx or tensorflow (deploy.serving.query_encoders)
  modes: tuple[str, ...] = retriever_lib.MODES  # served; Lucene (JVM) only for bm25 / hybrid
  allowed_hosts: tuple[str, ...] = ()  # Host names answered besides --host and loopback
                                       # ones ("*": any); http_front.HostCheck

  def __post_init__(self):
    if self.allow_swap and len(self.admin_token) < MIN_TOKEN_CHARS:
      raise ValueError(
          f"--allow_swap needs an admin token of at least {MIN_TOKEN_CHARS} characters "
          f"(--admin_token or the environment variable {TOKEN_ENV}; e.g. python -c "
          "'import secrets; print(secrets.token_urlsafe(32))')")

  @property
  def limits(self) -> schema.Limits:
    return schema.Limits(self.max_k, self.max_queries, self.max_query_chars)

  @property
  def swap_folder(self) -> str:
    """The folder every swapped-in bundle must be under (resolved)."""
    return os.path.realpath(self.swap_root or os.path.dirname(
        os.path.abspath(self.bundle.rstrip("/"))))


def is_loopback(host: str) -> bool:
  """Whether `host` (a name or an address) resolves only to loopback addresses."""
  try:
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
  except OSError:
    return False
  return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback
                             for i in infos)


# ---------------------------------------------------------------------------------------------
# The service's state: the bundle, loaded in the background, behind the micro-batcher.
# ---------------------------------------------------------------------------------------------


class Service:
  """What the app serves from; lives on `app.state.service`."""

  def __init__(self, config: ServeConfig,
               on_load_error: Optional[Callable[[str], None]] = None,
               manifest: Optional[bundle_manifest.BundleManifest] = None):
    self.config = config
    self.manifest = manifest  # the served bundle's, when `run` read it before listening
    self.on_load_error = on_load_error
    self.batcher: Optional[batcher_lib.MicroBatcher] = None
    self.error: Optional[str] = None
    self.started = time.perf_counter()
    self.ready_seconds: Optional[float] = None
    self._swap_lock = threading.Lock()

  @property
  def ready(self) -> bool:
    return self.batcher is not None

  def public(self, text: str) -> str:
    """`text` as a client may see it: absolute paths cut (unless --show_paths)."""
    return text if self.config.show_paths else guard.public_text(text)

  def public_path(self, path: str) -> str:
    """A bundle's path as a client sees it: relative to the swap root when under it."""
    if self.config.show_paths:
      return path
    real, root = os.path.realpath(path), self.config.swap_folder
    if os.path.commonpath([real, root]) == root and real != root:
      return os.path.relpath(real, root)
    return os.path.basename(path.rstrip("/"))

  def load(self) -> None:
    """Loads and warms up the bundle; runs in a thread at start-up."""
    try:
      retriever = Retriever.load(self.config.bundle, verify=self.config.verify,
                                 encoder=self.config.encoder, modes=self.config.modes,
                                 threads=self.config.threads,
                                 faiss_threads=self.config.faiss_threads,
                                 manifest=self.manifest)
      # Warmed up in the batcher's own thread: the one that will search.
      batcher = batcher_lib.MicroBatcher(retriever, self.config.max_batch,
                                         self.config.max_wait_ms, warm_up=True)
      batcher.warm.wait()
      if batcher.warm_error is not None:
        batcher.close()
        raise batcher.warm_error
    except Exception as e:  # pylint: disable=broad-except
      self.error = f"{type(e).__name__}: {e}"
      if self.on_load_error is not None:  # the caller reports it
        self.on_load_error(self.error)
      else:
        logger.error("bundle %s did not load: %s", self.config.bundle, self.error)
      return
    self.batcher = batcher
    self.ready_seconds = time.perf_counter() - self.started
    logger.info("ready in %.1f s: %s", self.ready_seconds, self.config.bundle)

  def resolve_swap(self, given: str) -> str:
    """The bundle folder a swap names: relative to the swap root, or absolute; refused
    (alike, whether or not it exists) when it resolves outside the root."""
    root = self.config.swap_folder
    target = os.path.realpath(os.path.join(root, given))
    if os.path.commonpath([target, root]) != root or target == root:
      raise ApiError(403, "'bundle' must be a bundle folder under the server's swap root "
                          "(--swap_root)")
    return target

  def swap(self, given: str) -> dict:
    """Loads the bundle `given` names beside the serving one, then swaps it in between two
    batches. Any failure to load it is the bundle's: a 400, and the old bundle serves on."""
    if not self.ready:
      raise ApiError(503, "not ready: no bundle is served yet")
    path = self.resolve_swap(given)
    with self._swap_lock:  # one swap at a time
      try:
        new = Retriever.load(path, verify=self.config.verify, encoder=self.config.encoder,
                             modes=self.config.modes)
      except Exception as e:  # pylint: disable=broad-except
        expected = isinstance(e, (ValueError, OSError))  # BundleError: the bundle's fault
        logger.warning("swap to %s refused: %s", path, e, exc_info=not expected)
        detail = str(e) if expected else f"it does not load ({type(e).__name__}: {e})"
        raise ApiError(400, f"bundle {self.public_path(path)!r} refused: "
                            f"{self._relative(detail)}") from e
      try:
        new.warm_up()  # here; its first batch then finds the query tower traced
      except Exception as e:  # pylint: disable=broad-except
        logger.warning("swap to %s refused: warm-up failed", path, exc_info=True)
        new.close()
        raise ApiError(400, f"bundle {self.public_path(path)!r} refused: a warm-up query "
                            f"failed ({type(e).__name__}: {self._relative(str(e))})") from e
      old = self.batcher.swap(new)
      old.close()
    logger.info("swapped bundle %s -> %s", old.path, new.path)
    return {"bundle": self.public_path(new.path), "previous": self.public_path(old.path),
            "documents": new.size}

  def _relative(self, text: str) -> str:
    """Paths under the swap root as relative ones (the rest cut by `public` later)."""
    return text if self.config.show_paths else \
        text.replace(self.config.swap_folder + os.sep, "")

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


def _redacted(value: Any) -> Any:
  """A manifest with each absolute path cut to its last part."""
  if isinstance(value, dict):
    return {k: _redacted(v) for k, v in value.items()}
  if isinstance(value, list):
    return [_redacted(v) for v in value]
  if isinstance(value, str) and os.path.isabs(value):
    return os.path.basename(value.rstrip("/")) or value
  return value


async def _bm25_warnings(search, single: bool) -> list[str]:
  """What a BM25 side could not search: a query over Lucene's term limit is cut to the
  prefix Lucene takes (lucene.bound_query, which the retriever applies too)."""
  if search.mode not in ("bm25", "hybrid"):
    return []
  warnings = []
  for i, q in enumerate(search.queries):
    if len(q) <= lucene.MAX_QUERY_TERMS:  # fewer characters than terms: always within
      continue
    bounded = await asyncio.to_thread(lucene.bound_query, q)
    if bounded != q:
      where = "'query'" if single else f"'queries'[{i}]"
      warnings.append(f"{where}: BM25 searched its first {len(bounded)} of {len(q)} "
                      f"characters (Lucene takes at most {lucene.MAX_QUERY_TERMS} distinct "
                      "terms)")
  return warnings


def _media_type(request: fastapi.Request) -> str:
  return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def create_app(config: ServeConfig, load_in_background: bool = True,
               on_load_error: Optional[Callable[[str], None]] = None,
               manifest: Optional[bundle_manifest.BundleManifest] = None,
               hosts: Optional[guard.HostCheck] = None) -> fastapi.FastAPI:
  """The app over `config.bundle` (loaded at start-up: in a background thread, or before
  the app starts serving when `load_in_background` is False; `manifest`: its manifest, when
  read already; `hosts`: the Host names answered, when worked out already, since a wildcard
  bind looks up the machine's names). A bundle that does not load leaves /v1/ready a 503 with the reason, and
  calls `on_load_error(reason)`."""

  @contextlib.asynccontextmanager
  async def lifespan(app: fastapi.FastAPI):
    service = Service(config, on_load_error, manifest)
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

  app.add_middleware(guard.Front, max_body_bytes=config.max_body_bytes,
                     hosts=hosts or guard.HostCheck(config.host, config.allowed_hosts))

  def error_response(request: fastapi.Request, status: int, message: str,
                     headers: Optional[dict] = None) -> responses.Response:
    service: Optional[Service] = getattr(request.app.state, "service", None)
    text = service.public(message) if service else guard.public_text(message)
    return responses.Response(
        guard.json_body({"error": text, "request_id": getattr(request.state, "request_id", "")}),
        status, headers=headers, media_type="application/json")

  @app.exception_handler(ApiError)
  async def api_error(request: fastapi.Request, e: ApiError):
    headers = {"Retry-After": "1"} if e.status == 503 else None
    if e.status == 401:
      headers = {"WWW-Authenticate": "Bearer"}
    return error_response(request, e.status, e.message, headers)

  @app.exception_handler(fastapi.exceptions.RequestValidationError)
  async def validation_error(request: fastapi.Request, e):
    first = e.errors()[0] if e.errors() else {}
    where = ".".join(str(x) for x in first.get("loc", ()) if x not in ("query", "body"))
    return error_response(request, 400, f"{where or 'request'}: {first.get('msg', 'invalid')}")

  @app.exception_handler(StarletteHTTPException)
  async def http_error(request: fastapi.Request, e: StarletteHTTPException):
    return error_response(request, e.status_code, str(e.detail), e.headers)

  def service_of(request: fastapi.Request) -> Service:
    service: Service = request.app.state.service
    if not service.ready:
      raise ApiError(503, f"not ready: {service.error or 'loading the bundle'}")
    return service

  async def read_json(request: fastapi.Request) -> Any:
    return schema.parse_json(await request.body())  # capped by guard.Front as it is read

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
    manifest = {k: v for k, v in retriever.manifest.to_json().items() if k != "files"}
    return {"api": API_VERSION, "bundle": service.public_path(retriever.path),
            "manifest": manifest if config.show_paths else _redacted(manifest),
            "limits": {"max_k": config.max_k, "max_queries": config.max_queries,
                       "max_query_chars": config.max_query_chars,
                       "max_body_bytes": config.max_body_bytes},
            "batching": dataclasses.asdict(service.batcher.stats)}

  async def _search(request: fastapi.Request, params: schema.SearchParams) -> dict:
    service = service_of(request)
    search, single = params.request(), params.single
    try:
      service.batcher.retriever.check(search)
    except ValueError as e:
      raise ApiError(400, str(e)) from e
    warnings = await _bm25_warnings(search, single)
    t0 = time.perf_counter()
    try:
      hits = await service.batcher.submit(search)
    except ValueError as e:  # what the retriever refuses of this request alone
      raise ApiError(400, str(e)) from e
    took = round((time.perf_counter() - t0) * 1000, 2)
    head = {"api": API_VERSION, "request_id": request.state.request_id, "mode": search.mode,
            "k": search.k, "took_ms": took}
    if search.filter is not None:
      head["filter"] = search.filter.to_json()
    if warnings:
      head["warnings"] = warnings
    # A JSONResponse as it is: FastAPI's jsonable_encoder pass over plain dicts costs more
    # than the search of a small bundle.
    if single:
      return responses.JSONResponse({**head, "query": search.queries[0],
                                     "hits": _hits_json(hits[0])})
    return responses.JSONResponse({**head, "results": [{"query": q, "hits": _hits_json(h)}
                                                       for q, h in zip(search.queries, hits)]})

  search_schema = schema.SearchParams.model_json_schema()
  _body_schema = {"requestBody": {"required": True, "content": {"application/json": {
      "schema": search_schema,
      "example": {"query": "who founded the city?", "k": 10, "mode": "hybrid"}}}}}
  _get_schema = {"parameters": [
      {"name": name, "in": "query", "required": name == "q",
       "schema": search_schema["properties"][field]}
      for name, field in schema.GET_PARAMS.items()]}

  @v1.post("/search", openapi_extra=_body_schema)
  async def search_post(request: fastapi.Request):
    params = schema.search_params(await read_json(request), config.limits)
    return await _search(request, params)

  @v1.get("/search", openapi_extra=_get_schema)
  async def search_get(request: fastapi.Request):
    body = schema.get_params(request.query_params.multi_items())
    params = schema.search_params(body, config.limits, names=schema.GET_PARAMS)
    return await _search(request, params)

  if config.allow_swap:
    # The token as bytes: a flag or environment variable the OS gave undecodable keeps its
    # bytes (surrogateescape), and a UTF-8 token is compared with the UTF-8 bytes sent.
    token = config.admin_token.encode("utf-8", "surrogateescape")

    def authorize(request: fastapi.Request) -> None:
      given = request.headers.get("authorization", "")
      if not given:
        raise ApiError(401, "an admin request needs the header 'Authorization: Bearer "
                            "<token>' (the server's --admin_token)")
      scheme, _, value = given.partition(" ")
      # Starlette decodes header bytes as Latin-1: encoding back gives the bytes on the wire
      # (a UTF-8 client's token as it sent it).
      if scheme.lower() != "bearer" or not hmac.compare_digest(
          value.strip(" \t").encode("latin-1"), token):
        raise ApiError(403, "wrong admin token")

    _swap_schema = {"requestBody": {"required": True, "content": {"application/json": {
        "schema": schema.SwapParams.model_json_schema(), "example": {"bundle": "b2"}}}}}

    @v1.post("/admin/swap", openapi_extra=_swap_schema)
    async def swap(request: fastapi.Request):
      authorize(request)
      if _media_type(request) != "application/json":
        raise ApiError(415, "send the body as 'Content-Type: application/json'")
      params = schema.validate(schema.SwapParams, await read_json(request), config.limits)
      return await asyncio.to_thread(request.app.state.service.swap, params.bundle)

  app.include_router(v1)

  @app.get("/", response_class=responses.HTMLResponse, include_in_schema=False)
  async def page():
    return search_page()

  return app


def listen(host: str, port: int) -> socket.socket:
  """A socket bound to host:port, or an OSError that says which address is taken."""
  try:
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
  except socket.gaierror as e:
    raise OSError(f"cannot listen on {host}:{port}: {e.strerror}") from e
  sock = socket.socket(family, kind, proto)
  sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  try:
    sock.bind(address)
  except OSError as e:
    sock.close()
    raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e} (another server "
                  "there? pick another --port)") from e
  return sock


def uvicorn_config(app, config: ServeConfig):
  """uvicorn's settings for `app`: its h11 protocol with a per-request deadline."""
  import uvicorn  # pylint: disable=import-outside-toplevel
  # log_config=None: uvicorn's lines go through the logging twotower set up, not handlers
  # of its own on the sys.stderr of the moment.
  return uvicorn.Config(app, host=config.host, port=config.port, log_level="warning",
                        log_config=None, access_log=False,
                        http=guard.timed_protocol(config.read_timeout), timeout_keep_alive=5)


def run(config: ServeConfig) -> None:
  """Serves until interrupted (uvicorn, one process)."""
  import uvicorn  # pylint: disable=import-outside-toplevel
  # Fail fast on a path that is no bundle. The parts load (and are checked) in the background
  # from this manifest, not read again; that load also sets the threads (Retriever.load).
  manifest = bundle_manifest.read(config.bundle.rstrip("/"))
  retriever_lib.warn_if_unverified(config.verify)
  if not is_loopback(config.host):
    logger.warning("serving on %s: other machines can reach this service", config.host)
  sock = listen(config.host, config.port)
  hosts = guard.HostCheck(config.host, config.allowed_hosts)
  logger.info("serving %s on http://%s:%d/ (docs at /docs)%s; Host %s", config.bundle,
              config.host, config.port,
              f"; swaps from {config.swap_folder}" if config.allow_swap else "",
              "any (--allowed_hosts '*')" if hosts.any else ", ".join(sorted(hosts.names)))
  failed: list[str] = []

  def stop(error: str) -> None:  # a server with nothing to serve: exit 1, with the reason
    failed.append(error)
    server.should_exit = True

  server = uvicorn.Server(uvicorn_config(create_app(config, on_load_error=stop,
                                                  manifest=manifest, hosts=hosts), config))
  server.run(sockets=[sock])
  if failed:
    raise RuntimeError(f"the bundle did not load: {failed[0]}")


if __name__ == "__main__":
  import sys
  from twotower import cli
  sys.exit(cli.run_stage("serve"))
