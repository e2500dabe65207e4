"""The service's edges, below the routes: what a request may cost before any handler runs, and
what a response may carry.

* `Front`, a pure ASGI middleware (no per-request task, unlike `@app.middleware("http")`):
  a request id (the client's `X-Request-ID` when it is a short token, else a new one) on
  `scope["state"]` and on the response; one log line per request (id, method, path, status,
  milliseconds); the body capped while it is read (a Content-Length over the cap is refused
  before a byte of the body is read, a streamed body as soon as it passes the cap: 413, and
  the connection closed rather than drained); and a last resort for a bug: a JSON 500 sent
  here, so that the exception never reaches uvicorn, which would drop the keep-alive
  connection.
* `timed_protocol(seconds)`: uvicorn's h11 protocol with a deadline per request. uvicorn
  times out only idle keep-alive connections; a client that sends half its headers (or half
  its body, or nothing) holds a connection forever. Here a request's headers and body must
  arrive within `seconds` of its first byte (the first request of a connection: of
  connecting), else the connection is closed (with a 408 when it stopped inside the
  headers).
  Its 400 for a request that is not HTTP (a malformed header, two Content-Length headers,
  bad chunking), which uvicorn answers as text/plain, is the JSON error body too.
* `HostCheck` (in `Front`): only the Host names the server answers to (`allowed_hosts`:
  loopback names and the bound address by default), and an `Origin`, when a browser sends
  one, of those hosts only. Without it a page on any web site could read a loopback server
  through DNS rebinding (its own name re-pointed at 127.0.0.1 after the page loaded) or the
  answers of a cross-origin POST; a refused Host is never echoed (a redirect's `location`
  is built from it).
* `public_text`: a message with every absolute path cut to its last part, so that no
  message tells a client where the server keeps its files.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import time
import urllib.parse
import uuid
from typing import Iterable, Optional

logger = logging.getLogger(__name__)
access_logger = logging.getLogger("twotower.serve.access")

_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:-]{1,64}")
#: An absolute path in a message: a slash not inside a word, then path characters.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:[^\s'\"/]+/)*([^\s'\"/]*)")


def public_text(text: str) -> str:
  """`text` with each absolute path replaced by its last part (`/srv/b/store.sqlite` ->
  `store.sqlite`)."""
  return _ABSOLUTE_PATH.sub(lambda m: m.group(1) or m.group(0), text)


def json_body(payload: dict) -> bytes:
  # ASCII: whatever a message quotes, it encodes.
  return json.dumps(payload, ensure_ascii=True).encode("ascii")


#: Names every server answers to: the loopback ones.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
#: Bind addresses that mean "every interface": the machine's own names are then allowed too.
WILDCARD_HOSTS = ("", "0.0.0.0", "::")
ANY_HOST = "*"


def _host_name(value: str) -> str:
  """A Host header's or an address's name as compared: lower case, no port, no trailing dot,
  an IPv6 address without its brackets."""
  value = value.strip().lower()
  if value.startswith("["):  # [::1]:8000
    value = value[1:].split("]", 1)[0]
  elif value.count(":") == 1:  # name:port (a bare IPv6 address has several colons)
    value = value.split(":", 1)[0]
  return value.rstrip(".")


class HostCheck:
  """The Host names (and browser Origins) a server answers: `bind_host` (the --host it
  listens on), the loopback names and `extra` (--allowed_hosts; "*" allows any). A server
  bound to every interface also answers to the machine's own names."""

  def __init__(self, bind_host: str, extra: Iterable[str] = ()):
    extra = tuple(extra)
    self.any = ANY_HOST in extra
    names = {*LOOPBACK_HOSTS, *(_host_name(h) for h in extra if h != ANY_HOST)}
    if _host_name(bind_host) in WILDCARD_HOSTS:
      names |= {_host_name(socket.gethostname()), _host_name(socket.getfqdn())}
    else:
      names.add(_host_name(bind_host))
    self.names = frozenset(n for n in names if n)

  def allows(self, host: str) -> bool:
    return self.any or _host_name(host) in self.names

  def refusal(self, headers: dict) -> Optional[tuple[int, str]]:
    """(status, message) for a request this server does not answer, else None. A request
    with no Host (HTTP/1.0) is answered: browsers always send one."""
    host = headers.get(b"host")
    if host is not None and not self.allows(host.decode("latin-1")):
      return 400, ("the Host header names a host this server does not answer to (it answers "
                   "to the address it is bound to and loopback names; add others with "
                   "--allowed_hosts)")
    origin = headers.get(b"origin")
    if origin is not None and not self.any:
      parsed = urllib.parse.urlsplit(origin.decode("latin-1"))
      if parsed.scheme not in ("http", "https") or not self.allows(parsed.netloc):
        return 403, ("a cross-origin request: the Origin header names a site this server "
                     "does not answer to (--allowed_hosts)")
    return None


class BodyTooLarge(Exception):
  """Raised into the app by `Front`'s receive once a body passes the cap."""

  def __init__(self, limit: int):
    super().__init__(f"the body is over the limit of {limit} bytes")
    self.limit = limit


class Front:
  """See the module docstring. `max_body_bytes`: the largest request body read; `hosts`:
  the Host names answered (None: any)."""

  def __init__(self, app, max_body_bytes: int, hosts: Optional[HostCheck] = None):
    self.app = app
    self.max_body_bytes = max_body_bytes
    self.hosts = hosts

  async def __call__(self, scope, receive, send):
    if scope["type"] != "http":
      await self.app(scope, receive, send)
      return
    headers = dict(scope.get("headers") or ())
    given = headers.get(b"x-request-id", b"")
    request_id = (given.decode("ascii") if _REQUEST_ID.fullmatch(given)
                  else uuid.uuid4().hex[:12])
    scope.setdefault("state", {})["request_id"] = request_id
    state = {"status": 0, "close": False}
    t0 = time.perf_counter()

    async def send_with_id(message):
      if message["type"] == "http.response.start":
        state["status"] = message["status"]
        extra = [(b"x-request-id", request_id.encode("ascii"))]
        if state["close"]:  # an unread body: close rather than read the rest of it
          extra.append((b"connection", b"close"))
        message = {**message, "headers": [*message.get("headers", ()), *extra]}
      await send(message)

    received = 0

    async def capped_receive():
      nonlocal received
      message = await receive()
      if message["type"] == "http.request":
        received += len(message.get("body", b""))
        if received > self.max_body_bytes:
          state["close"] = True
          raise BodyTooLarge(self.max_body_bytes)
      return message

    refused = self.hosts.refusal(headers) if self.hosts is not None else None
    try:
      length = _content_length(headers)
      if refused is not None:
        state["close"] = True
        await self._error(send_with_id, *refused, request_id)
      elif length is not None and length > self.max_body_bytes:
        state["close"] = True
        await self._error(send_with_id, 413, f"the body has {length} bytes; the limit is "
                                             f"{self.max_body_bytes}", request_id)
      else:
        await self.app(scope, capped_receive, send_with_id)
    except BadRequest as e:
      state["close"] = True
      await self._error(send_with_id, 400, str(e), request_id)
    except BodyTooLarge as e:
      if state["status"]:
        raise
      await self._error(send_with_id, 413, f"the body is over the limit of {e.limit} bytes",
                        request_id)
    except Exception as e:  # pylint: disable=broad-except
      if state["status"]:  # the response has started: nothing more can be said
        raise
      if _disconnected(e):
        logger.info("request %s: the client went away", request_id)
      else:
        logger.error("request %s failed", request_id, exc_info=e)
        await self._error(send_with_id, 500, "internal error (a bug: see the server log, "
                                             f"request {request_id})", request_id)
    finally:
      access_logger.info("%s %s %s %d %.1f ms", request_id, scope["method"], scope["path"],
                         state["status"] or 499, (time.perf_counter() - t0) * 1000)

  @staticmethod
  async def _error(send, status: int, message: str, request_id: str) -> None:
    body = json_body({"error": message, "request_id": request_id})
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode("ascii"))]})
    await send({"type": "http.response.body", "body": body})


class BadRequest(Exception):
  """A request the front refuses before the app sees it."""


def _content_length(headers: dict) -> Optional[int]:
  value = headers.get(b"content-length")
  if value is None:
    return None
  if not value.isdigit() or len(value) > 18:
    raise BadRequest("the Content-Length header is not a byte count")
  return int(value)


def _disconnected(e: Exception) -> bool:
  from starlette.requests import ClientDisconnect  # pylint: disable=import-outside-toplevel
  return isinstance(e, (ClientDisconnect, ConnectionError))


# ---------------------------------------------------------------------------------------------
# uvicorn's h11 protocol with a per-request deadline.
# ---------------------------------------------------------------------------------------------


def timed_protocol(seconds: float) -> type:
  """An h11 protocol class for uvicorn.Config(http=...) that closes a connection whose
  request (headers and body) is not whole `seconds` after its first byte."""
  import h11  # pylint: disable=import-outside-toplevel
  from uvicorn.protocols.http.h11_impl import H11Protocol  # pylint: disable=import-outside-toplevel

  timeout_body = json_body({"error": f"the request did not arrive within {seconds:g} s",
                            "request_id": ""})
  invalid_body = json_body({"error": "the request is not valid HTTP/1.1 (a malformed request "
                                     "line or header, two Content-Length headers, or a body "
                                     "whose chunked encoding is broken)", "request_id": ""})

  class TimedH11Protocol(H11Protocol):
    _deadline: Optional[asyncio.TimerHandle] = None

    def connection_made(self, transport):
      super().connection_made(transport)
      self._arm()  # a connection that never sends a byte is held no longer

    def data_received(self, data: bytes) -> None:
      super().data_received(data)
      if self._receiving():
        if self._deadline is None:
          self._arm()  # from the request's first byte; later bytes do not extend it
      else:
        self._disarm()

    def connection_lost(self, exc):
      self._disarm()
      super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
      """uvicorn's answer to bytes h11 cannot parse, with the service's JSON error body
      (uvicorn's own is text/plain)."""
      del msg  # uvicorn's "Invalid HTTP request received."
      self.transport.write(_raw_response(400, "Bad Request", invalid_body))
      self.transport.close()

    def _receiving(self) -> bool:
      """A request has begun and is not whole yet."""
      their = self.conn.their_state
      return their is h11.SEND_BODY or (their is h11.IDLE and bool(self.conn.trailing_data[0]))

    def _arm(self) -> None:
      self._disarm()
      self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
      if self._deadline is not None:
        self._deadline.cancel()
        self._deadline = None

    def _expired(self) -> None:
      self._deadline = None
      if self.transport.is_closing():
        return
      started = self.cycle is not None and self.cycle.response_started
      if self.conn.their_state is h11.IDLE and self.conn.trailing_data[0] and not started:
        # Half a request line or headers: no app saw it; answer here.
        self.transport.write(_raw_response(408, "Request Timeout", timeout_body))
      logger.info("closed a connection whose request did not arrive within %g s", seconds)
      self.transport.close()

  return TimedH11Protocol


def _raw_response(status: int, reason: str, body: bytes) -> bytes:
  """A whole JSON error response written straight to a connection that is then closed: for
  the protocol's own errors, which no app sees."""
  return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
          f"connection: close\r\ncontent-length: {len(body)}\r\n\r\n").encode("ascii") + body
