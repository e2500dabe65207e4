"""`twotower serve BUNDLE`: the HTTP search service over a retriever bundle (the flags of
deploy.serving.app)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Iterable, NoReturn

from twotower.commands import dataclass_flags, flags


def _help(app) -> dict[str, str]:
  """Each flag's help; name, type and default come from app.ServeConfig
  (commands.dataclass_flags). A function: the app module is imported only when serve runs."""
  return {
      "bundle": "a retriever bundle directory (`twotower bundle --out`)",
      "host": "address to bind (loopback by default: 0.0.0.0 exposes the service)",
      "port": "port to listen on",
      "threads": "TensorFlow and Lucene threads (0: the machine's cores)",
      "faiss_threads": "FAISS OpenMP threads (1: a micro-batch is small; more threads wait on "
                       "each other on a busy machine)",
      "max_batch": "queries coalesced into one query-tower call",
      "max_wait_ms": "how long a batch waits for more requests (0: take what is queued)",
      "max_k": "largest k a request may ask",
      "max_queries": "largest batch of queries one request may send",
      "max_query_chars": "longest query accepted",
      "max_body_bytes": "largest request body read (a longer one is refused with 413 before "
                        "it is read whole)",
      "read_timeout": "seconds a request's headers and body may take to arrive; a slower "
                      "or half-sent request has its connection closed",
      "allow_swap": "enable POST /v1/admin/swap (load another bundle while serving); needs "
                    f"an admin token (--admin_token or ${app.TOKEN_ENV})",
      "admin_token": f"the Bearer token admin requests must send (at least "
                     f"{app.MIN_TOKEN_CHARS} characters). Default: ${app.TOKEN_ENV}, which "
                     "other users cannot read from the process list as they can a flag",
      "swap_root": "the folder a swap may load bundles from (relative paths are under it; "
                   "anything resolving outside is refused). Default: the bundle's parent "
                   "folder",
      "show_paths": "show absolute paths in /v1/info, swap answers and error messages "
                    "(default: only names under the swap root)",
      "verify": "how the bundle's files are checked at load and at each swap: sha256 "
                "(default: every file's content, as `twotower query` does), size "
                "(sizes only: a same-size file of another bundle is served) or none; "
                "an opt-out is logged at start-up",
      "encoder": "the query tower's runtime: auto = ONNX when the bundle carries "
                 "query_onnx/ (`twotower bundle --onnx`), else the SavedModel",
      "modes": "modes served (comma list of dense, bm25, hybrid); Lucene and its JVM "
               "load only for bm25 / hybrid: `--modes dense` with an ONNX tower needs "
               "neither TensorFlow nor Java",
      "allowed_hosts": "Host names (comma list) the service answers besides --host and the "
                       "loopback names, e.g. the name clients use for a --host 0.0.0.0 "
                       "server; a request for another Host is a 400, a browser's request from "
                       "another Origin a 403 (what stops DNS rebinding). '*' answers any",
  }


def build_parser() -> argparse.ArgumentParser:
  from twotower.deploy.serving import app  # pylint: disable=import-outside-toplevel
  from twotower.deploy.serving import query_encoders  # pylint: disable=import-outside-toplevel
  from twotower.deploy.serving import retriever  # pylint: disable=import-outside-toplevel
  p = flags.parser("serve", app.__doc__)
  dataclass_flags.add_fields(
      p, app.ServeConfig, _help(app), positional=("bundle",),
      kwargs={"verify": {"choices": retriever.VERIFY},
              "encoder": {"choices": query_encoders.ENCODERS},
              # None: not given, so parse reads the token from the environment instead.
              "admin_token": {"default": None},
              "modes": {"type": flags.csv}, "allowed_hosts": {"type": flags.csv}})
  return p


def _usage_error(message: str) -> NoReturn:
  """A flag value refused: one line, exit 2 (argparse's own errors print the usage too)."""
  print(f"twotower serve: error: {message}", file=sys.stderr)
  raise SystemExit(2)


def parse(argv: Iterable[str] | None):
  from twotower.deploy.serving import app  # pylint: disable=import-outside-toplevel
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  if not 1 <= args.port <= 65535:
    _usage_error(f"--port must be between 1 and 65535, got {args.port}")
  for name in ("max_batch", "max_k", "max_queries", "max_query_chars", "max_body_bytes"):
    if getattr(args, name) < 1:
      _usage_error(f"--{name} must be >= 1, got {getattr(args, name)}")
  if not args.read_timeout > 0:
    _usage_error(f"--read_timeout must be > 0, got {args.read_timeout}")
  for name in ("threads", "faiss_threads", "max_wait_ms"):
    if getattr(args, name) < 0:
      _usage_error(f"--{name} must be >= 0, got {getattr(args, name)}")
  if args.admin_token is None:
    args.admin_token = os.environ.get(app.TOKEN_ENV, "")
  if args.swap_root and not os.path.isdir(args.swap_root):
    _usage_error(f"--swap_root {args.swap_root}: no such folder")
  unknown = [m for m in args.modes if m not in app.ServeConfig.modes]
  if not args.modes or unknown:
    _usage_error(f"--modes: expected some of {', '.join(app.ServeConfig.modes)}, got "
                 f"{','.join(args.modes) or 'none'}")
  try:
    return dataclass_flags.config_from(args, app.ServeConfig)
  except ValueError as e:  # a flag combination (--allow_swap without a token)
    _usage_error(str(e))


def main(argv: Iterable[str] | None = None) -> None:
  from twotower.deploy.serving import app  # pylint: disable=import-outside-toplevel
  config = parse(argv)
  # A server's own lines (ready, one per request) are its output: shown by default.
  for name in ("twotower.serve.access", "twotower.deploy.serving"):
    logging.getLogger(name).setLevel(logging.INFO)
  app.run(config)
