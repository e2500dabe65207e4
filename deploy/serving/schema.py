"""What `twotower serve` accepts: the JSON it parses and one pydantic model per endpoint, so
that a GET and a POST of the same search are checked by the same code.

    body = schema.parse_json(raw_bytes)                       # ApiError (400) if not JSON
    params = schema.search_params(body, limits)               # ApiError (400 / 413) if bad
    params = schema.search_params(schema.get_params(request.query_params.multi_items(),
                                                    limits), limits)

Every refusal is an ApiError: a status (400, or 413 for an input over a size limit) and a
message that says what was wrong, never echoing more than a few characters of the input.
Bounds beyond the flags' limits: JSON nesting (MAX_JSON_DEPTH), integers (MAX_INT_DIGITS
digits: the number, not its text, is what a huge value would cost), nprobe / ef_search
(MAX_SEARCH_PARAM), and text must be text (no lone surrogate, at least one character that
is not whitespace, a control or a format character).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, Iterable, Literal, Optional

import pydantic
import pydantic_core

from twotower.core import tower_text as texts
from twotower.deploy.serving.doc_filter import DocFilter
from twotower.deploy.serving.retriever import MODES, SearchRequest

#: Deepest JSON accepted: a search body nests 2 levels.
MAX_JSON_DEPTH = 32
#: Largest integer accepted, in digits: enough for any count, small enough to print.
MAX_INT_DIGITS = 18
#: Largest nprobe / ef_search: FAISS caps nprobe at the index's lists, but 2**63 fails inside
#: it, and ef_search sizes a per-query heap.
MAX_SEARCH_PARAM = 65_536
#: Longest bundle path a swap may name.
MAX_PATH_CHARS = 4096

_SURROGATE = re.compile("[\ud800-\udfff]")
_INTEGER = re.compile(r"[+-]?[0-9]{1,%d}" % MAX_INT_DIGITS)
_EXAMPLE = "{\"query\": \"...\"}"


class ApiError(Exception):
  """A request the service refuses: `status` and a message for `{"error": ...}`."""

  def __init__(self, status: int, message: str):
    super().__init__(message)
    self.status = status
    self.message = message


@dataclasses.dataclass(frozen=True)
class Limits:
  """The per-request limits of `twotower serve` (its --max_* flags)."""
  max_k: int = 1000
  max_queries: int = 64
  max_query_chars: int = 2000


# ---------------------------------------------------------------------------------------------
# JSON.
# ---------------------------------------------------------------------------------------------


def parse_json(raw: bytes) -> Any:
  """The JSON value of a request body; ApiError(400) for anything else, or JSON beyond the
  bounds above (checked on the parsed value, whose depth the parser already caps at 200)."""
  if not raw.strip():
    raise ApiError(400, f"empty body; send a JSON object such as {_EXAMPLE}")
  try:
    raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise ApiError(400, f"the body is not UTF-8 (byte {e.start}: {raw[e.start:e.start + 1]!r})"
                   ) from e
  try:
    value = pydantic_core.from_json(raw, allow_inf_nan=False)
  except ValueError as e:
    message = str(e)
    if message.startswith("recursion limit exceeded"):
      raise ApiError(400, f"the body nests deeper than {MAX_JSON_DEPTH} levels") from e
    if message.startswith("number out of range"):
      raise ApiError(400, f"a number in the body has more than {MAX_INT_DIGITS} digits") from e
    if "hex escape" in message or "unicode code point" in message:
      message += " (a lone surrogate such as \\ud800 is not text)"
    raise ApiError(400, f"the body is not JSON: {message}") from e
  _check_bounds(value, 1)
  return value


def _check_bounds(value: Any, depth: int) -> None:
  if depth > MAX_JSON_DEPTH:
    raise ApiError(400, f"the body nests deeper than {MAX_JSON_DEPTH} levels")
  if isinstance(value, dict):
    for v in value.values():
      _check_bounds(v, depth + 1)
  elif isinstance(value, list):
    for v in value:
      _check_bounds(v, depth + 1)
  elif isinstance(value, bool):
    pass
  elif isinstance(value, int) and abs(value) >= 10 ** MAX_INT_DIGITS:
    raise ApiError(400, f"a number in the body has more than {MAX_INT_DIGITS} digits")
  elif isinstance(value, float) and not math.isfinite(value):
    raise ApiError(400, "a number in the body is out of range")


def shown(value: Any) -> str:
  """A short, safe rendering of a client's value for an error message."""
  text = json.dumps(value, ensure_ascii=False)
  # A lone surrogate (from a Python caller) as its escape: the message must encode.
  text = text.encode("utf-8", "backslashreplace").decode("utf-8")
  return text if len(text) <= 40 else text[:39] + "…"


# ---------------------------------------------------------------------------------------------
# The request models.
# ---------------------------------------------------------------------------------------------


def _refuse(message: str, too_large: bool = False) -> pydantic_core.PydanticCustomError:
  # The message travels in the context: a template would read its braces as placeholders.
  return pydantic_core.PydanticCustomError("too_large" if too_large else "invalid",
                                           "{message}", {"message": message})


def _limits(info: pydantic.ValidationInfo) -> Limits:
  return (info.context or {}).get("limits") or Limits()


def check_text(value: Any, where: str, max_chars: int) -> str:
  """`value` if it is a searchable text of at most `max_chars` characters."""
  if not isinstance(value, str):
    raise _refuse(f"{where} must be a string")
  if not value.strip():
    raise _refuse(f"{where} is empty")
  if len(value) > max_chars:
    raise _refuse(f"{where} has {len(value)} characters; the limit is {max_chars}",
                  too_large=True)
  surrogate = _SURROGATE.search(value)
  if surrogate:
    raise _refuse(f"{where} holds a lone surrogate (U+{ord(surrogate.group()):04X}), which "
                  "is not text")
  if not texts.searchable(value):
    raise _refuse(f"{where} has no searchable text (only whitespace, control or format "
                  "characters)")
  return value


def _integer(value: Any, name: str, low: int, high: int) -> int:
  """An integer (or its decimal text, as a query string sends it) within [low, high]."""
  if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
    value = int(value.strip())
  if isinstance(value, bool) or not isinstance(value, int):
    raise _refuse(f"'{name}' must be an integer, got {shown(value)}")
  if not low <= value <= high:
    raise _refuse(f"'{name}' must be between {low} and {high}, got {value}")
  return value


class SearchParams(pydantic.BaseModel):
  """POST /v1/search's body, and GET /v1/search's parameters (`q` for `query`)."""
  model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

  query: Optional[str] = pydantic.Field(None, description="one query")
  queries: Optional[list[str]] = pydantic.Field(None, description="a batch of queries")
  k: int = pydantic.Field(10, ge=1, description="hits per query (1..--max_k)")
  mode: Literal[MODES] = "dense"  # the retriever's modes (Literal takes the tuple's items)
  nprobe: Optional[int] = pydantic.Field(None, ge=1, le=MAX_SEARCH_PARAM,
                                         description="IVF lists to visit (IVF bundles)")
  ef_search: Optional[int] = pydantic.Field(None, ge=1, le=MAX_SEARCH_PARAM,
                                            description="HNSW beam width (HNSW bundles)")
  filter: Optional[dict] = pydantic.Field(  # noqa: A003
      None, description="only documents that match: {\"fields\": {name: value or [values]}, "
                        "\"section_prefix\": str, \"ids\": [int], \"exclude_ids\": [int]} "
                        "(deploy.serving.doc_filter); GET takes it as JSON text")

  @pydantic.field_validator("query", mode="before")
  @classmethod
  def _query(cls, value: Any, info: pydantic.ValidationInfo) -> Any:
    return None if value is None else check_text(value, "'query'",
                                                 _limits(info).max_query_chars)

  @pydantic.field_validator("queries", mode="before")
  @classmethod
  def _queries(cls, value: Any, info: pydantic.ValidationInfo) -> Any:
    if value is None:
      return None
    limits = _limits(info)
    if not isinstance(value, list):
      raise _refuse("'queries' must be a list of strings")
    if not value:
      raise _refuse("'queries' is empty")
    if len(value) > limits.max_queries:
      raise _refuse(f"{len(value)} queries in one request; the limit is {limits.max_queries}",
                    too_large=True)
    return [check_text(q, f"'queries'[{i}]", limits.max_query_chars)
            for i, q in enumerate(value)]

  @pydantic.field_validator("k", mode="before")
  @classmethod
  def _k(cls, value: Any, info: pydantic.ValidationInfo) -> int:
    return _integer(value, "k", 1, _limits(info).max_k)

  @pydantic.field_validator("mode", mode="before")
  @classmethod
  def _mode(cls, value: Any) -> str:
    if not isinstance(value, str) or value not in MODES:
      raise _refuse(f"unknown 'mode' {shown(value)}; expected one of {list(MODES)}")
    return value

  @pydantic.field_validator("nprobe", "ef_search", mode="before")
  @classmethod
  def _search_param(cls, value: Any, info: pydantic.ValidationInfo) -> Optional[int]:
    return None if value is None else _integer(value, info.field_name, 1, MAX_SEARCH_PARAM)

  @pydantic.field_validator("filter", mode="before")
  @classmethod
  def _filter(cls, value: Any) -> Optional[dict]:
    if value is None:
      return None
    try:  # GET sends it as JSON text; the shape is checked here, the fields by the bundle
      parsed = DocFilter.parse(value) if isinstance(value, str) else DocFilter.from_json(value)
    except ValueError as e:
      raise _refuse(str(e)) from None
    return parsed.to_json()

  @pydantic.model_validator(mode="after")
  def _one_of(self) -> "SearchParams":
    if (self.query is None) == (self.queries is None):
      raise _refuse("give exactly one of 'query' (a string) or 'queries' (a list)")
    return self

  @property
  def single(self) -> bool:
    return self.query is not None

  def request(self) -> SearchRequest:
    queries = (self.query,) if self.single else tuple(self.queries)
    return SearchRequest(queries, self.k, self.mode, self.nprobe, self.ef_search,
                         None if self.filter is None else DocFilter.from_json(self.filter))


class SwapParams(pydantic.BaseModel):
  """POST /v1/admin/swap's body."""
  model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

  bundle: str = pydantic.Field(description="a bundle folder under the server's --swap_root "
                                           "(relative to it, or absolute)")

  @pydantic.field_validator("bundle", mode="before")
  @classmethod
  def _bundle(cls, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
      raise _refuse("'bundle' must be a bundle folder's path, such as {\"bundle\": \"b2\"}")
    if len(value) > MAX_PATH_CHARS or "\0" in value or _SURROGATE.search(value):
      raise _refuse("'bundle' is not a path")
    return value


#: GET /v1/search's parameters: SearchParams' fields, `q` for `query`.
GET_PARAMS = {"q": "query", "k": "k", "mode": "mode", "nprobe": "nprobe",
              "ef_search": "ef_search", "filter": "filter"}


def get_params(items: Iterable[tuple[str, str]]) -> dict:
  """GET /v1/search's query string as a SearchParams body: each parameter at most once,
  none that POST would refuse (an unknown one is kept for the model to refuse)."""
  body: dict[str, str] = {}
  for name, value in items:
    field = GET_PARAMS.get(name, name)
    if field in body:
      raise ApiError(400, f"parameter {shown(name)} is given more than once")
    body[field] = value
  if "query" not in body:
    raise ApiError(400, "give the query as ?q=...")
  if "queries" in body:  # one query per GET; a batch is a POST
    raise ApiError(400, "unknown parameter(s) ['queries']; a batch of queries is a POST")
  return body


def validate(model: type[pydantic.BaseModel], body: Any, limits: Limits,
             names: Iterable[str] = ()) -> Any:
  """`model` of `body`, or the ApiError of its first problem. `names`: the fields as the
  client spells them (GET's `q`), for the message on unknown ones."""
  try:
    return model.model_validate(body, context={"limits": limits})
  except pydantic.ValidationError as e:
    raise _api_error(e, model, names) from None


def _api_error(e: pydantic.ValidationError, model: type[pydantic.BaseModel],
               names: Iterable[str]) -> ApiError:
  errors = e.errors(include_url=False, include_context=False, include_input=False)
  if any(err["type"] == "model_type" for err in errors):
    return ApiError(400, f"the body must be a JSON object such as {_EXAMPLE}")
  unknown = sorted(str(err["loc"][0]) for err in errors if err["type"] == "extra_forbidden")
  if unknown:
    expected = sorted(names or model.model_fields)
    return ApiError(400, f"unknown field(s) {[shown(u)[1:-1] for u in unknown]}; expected "
                         f"some of {expected}")
  first = errors[0]
  if first["type"] in ("invalid", "too_large"):
    return ApiError(413 if first["type"] == "too_large" else 400, first["msg"])
  where = ".".join(str(x) for x in first["loc"])  # pydantic's own check (a bug of ours if hit)
  return ApiError(400, f"'{where}': {first['msg']}")


def search_params(body: Any, limits: Limits, names: Iterable[str] = ()) -> SearchParams:
  return validate(SearchParams, body, limits, names)

