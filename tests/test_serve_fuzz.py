"""A property-based fuzz of `twotower serve`'s HTTP API (Hypothesis, seeded): generated JSON
bodies, raw bodies and query strings against a real server on loopback (uvicorn, the stack
`twotower serve` runs), all over one keep-alive connection. Whatever is sent: no 5xx, every
refusal a JSON `{"error"}`, the connection still open for the next request, the server up
at the end. Bounded: a fixed number of examples per property and a time budget."""

from __future__ import annotations

import http.client
import json
import shutil
import time
import urllib.parse

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twotower.deploy.serving import app as app_lib
from twotower.testing import server as server_lib

#: Seconds each property may spend sending; past it the remaining examples send nothing.
BUDGET_S = 18.0
FUZZ = settings(max_examples=1000, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

FIELDS = ("query", "queries", "k", "mode", "nprobe", "ef_search")
GET_NAMES = ("q", "k", "mode", "nprobe", "ef_search")

# Text as clients send it: any code point (surrogates included: a Python client's), plus
# the texts that broke the service before (controls, superscript digits, signs, CJK).
_edge_texts = st.sampled_from(["", " ", "\u0000", "\u200b", "--5", "²", "³", "1e3", "0x10",
                               "10", "-1", "+7", "٣", "NaN", "dense", "bm25", "hybrid",
                               "bridge", "Who designed the tower in Galt?",
                               "".join(chr(0x4E00 + i) for i in range(1100))])
texts = st.one_of(st.text(max_size=40), _edge_texts,
                  st.text(alphabet=st.characters(codec="utf-8"), max_size=3000))
numbers = st.one_of(st.integers(), st.integers(-3, 1005), st.floats(allow_nan=False),
                    st.sampled_from([2 ** 63, 2 ** 64, -(2 ** 63), 10 ** 30, 0, 1, 65537]))
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=8), inner, max_size=5)),
    max_leaves=20)
# Bodies close to a valid search, each field a valid value or anything.
search_bodies = st.fixed_dictionaries({}, optional={
    "query": st.one_of(texts, json_values),
    "queries": st.one_of(st.lists(texts, max_size=70), json_values),
    "k": st.one_of(numbers, texts, json_values),
    "mode": st.one_of(st.sampled_from(["dense", "bm25", "hybrid"]), texts),
    "nprobe": st.one_of(numbers, texts),
    "ef_search": st.one_of(numbers, texts),
    "extra": json_values,
})


@pytest.fixture(scope="module")
def fuzz_server(serving_bundle, tmp_path_factory):
  root = tmp_path_factory.mktemp("fuzz")
  bundle = str(root / "bundle")
  shutil.copytree(serving_bundle["bundle"], bundle)
  config = app_lib.ServeConfig(bundle=bundle, allow_swap=True,
                               admin_token="fuzz-admin-token-0123456789", read_timeout=5.0)
  with server_lib.live_server(config) as base:
    url = urllib.parse.urlsplit(base)
    yield _Client(url.hostname, url.port)


class _Client:
  """One keep-alive connection; `send` asserts what every answer must be."""

  def __init__(self, host: str, port: int):
    self.conn = http.client.HTTPConnection(host, port, timeout=60)
    self.sent = 0
    self.statuses: dict[int, int] = {}
    self.deadline: dict[str, float] = {}

  def within_budget(self, name: str) -> bool:
    return time.monotonic() < self.deadline.setdefault(name, time.monotonic() + BUDGET_S)

  def send(self, method: str, path: str, body: bytes | None = None,
           headers: dict | None = None) -> int:
    sock = self.conn.sock
    self.conn.request(method, path, body=body, headers=headers or {})
    response = self.conn.getresponse()
    data = response.read()
    self.sent += 1
    self.statuses[response.status] = self.statuses.get(response.status, 0) + 1
    assert response.status < 500, (method, path, body[:300] if body else None, data[:300])
    payload = json.loads(data)
    if response.status >= 400:
      assert isinstance(payload.get("error"), str) and payload["error"], payload
    # Still open, and the same connection as before (http.client would reconnect silently).
    assert self.conn.sock is not None, (response.status, payload)
    assert sock is None or self.conn.sock is sock
    return response.status


def _post(client: _Client, path: str, raw: bytes, content_type: str = "application/json",
          headers: dict | None = None) -> int:
  return client.send("POST", path, raw, {"content-type": content_type, **(headers or {})})


def _json(value) -> bytes:
  # surrogatepass: a lone surrogate goes out as its UTF-8 bytes (invalid UTF-8), as a
  # careless client would send it; ensure_ascii=False keeps it out of \u escapes.
  return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


@FUZZ
@given(body=st.one_of(search_bodies, json_values))
def test_fuzz_search_bodies(fuzz_server, body):
  if fuzz_server.within_budget("bodies"):
    _post(fuzz_server, "/v1/search", _json(body))


@FUZZ
@given(raw=st.one_of(st.binary(max_size=200),
                     st.builds(lambda b, s: b + s, st.sampled_from(
                         [b"{", b"[", b'{"query": ', b'{"query": "x", "k": ', b'"\\ud8']),
                               st.binary(max_size=60))),
       content_type=st.sampled_from(["application/json", "text/plain", "", "application/x-www"
                                     "-form-urlencoded", "application/json; charset=latin-1"]))
def test_fuzz_raw_bodies(fuzz_server, raw, content_type):
  if fuzz_server.within_budget("raw"):
    _post(fuzz_server, "/v1/search", raw, content_type)


@FUZZ
@given(params=st.lists(st.tuples(st.one_of(st.sampled_from(GET_NAMES), st.text(max_size=8)),
                                 texts), max_size=6))
def test_fuzz_query_strings(fuzz_server, params):
  if fuzz_server.within_budget("get"):
    query = urllib.parse.urlencode(
        [(k.encode("utf-8", "surrogatepass"), v.encode("utf-8", "surrogatepass"))
         for k, v in params])
    fuzz_server.send("GET", f"/v1/search?{query}")


@FUZZ
@given(body=json_values, token=st.sampled_from(["", "Bearer wrong", "Bearer "
                                               "fuzz-admin-token-0123456789"]),
       content_type=st.sampled_from(["application/json", "text/plain"]))
def test_fuzz_admin_swap(fuzz_server, body, token, content_type):
  # Never a valid bundle under the root: a bundle name is text, and the root holds only
  # `bundle` (which a generated string matches only by chance: also fine, a 200).
  if fuzz_server.within_budget("swap"):
    headers = {"authorization": token} if token else {}
    _post(fuzz_server, "/v1/admin/swap", _json({"bundle": body} if isinstance(body, str)
                                               else body), content_type, headers)


def test_the_server_is_up_after_the_fuzz(fuzz_server):
  fuzzed = fuzz_server.sent  # by the properties above, when they ran (pytest keeps file order)
  assert fuzz_server.send("GET", "/v1/ready") == 200
  assert fuzz_server.send("GET", "/v1/search?q=bridge&mode=hybrid") == 200
  assert fuzzed == 0 or fuzzed >= 2000, fuzz_server.statuses
  assert not [s for s in fuzz_server.statuses if s >= 500]
