"""`twotower serve BUNDLE`: the HTTP search service over a retriever bundle (the flags of
deploy.serving.app)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Iterable, NoReturn

from twotower.commands import flags


def build_parser() -> argparse.ArgumentParser:
  from twotower.deploy.serving import app  # pylint: disable=import-outside-toplevel
  from twotower.deploy.serving import retriever  # pylint: disable=import-outside-toplevel
  d = app.ServeConfig(bundle="")
  p = flags.parser("serve", app.__doc__)
  p.add_argument("bundle", help="a retriever bundle directory (`twotower bundle --out`)")
  p.add_argument("--host", default=d.host,
                 help="address to bind (loopback by default: 0.0.0.0 exposes the service)")
  p.add_argument("--port", type=int, default=d.port, help="port to listen on")
  p.add_argument("--threads", type=int, default=d.threads,
                 help="TensorFlow and Lucene threads (0: the machine's cores)")
  p.add_argument("--faiss_threads", type=int, default=d.faiss_threads,
                 help="FAISS OpenMP threads (1: a micro-batch is small; more threads wait on "
                      "each other on a busy machine)")
  p.add_argument("--max_batch", type=int, default=d.max_batch,
                 help="queries coalesced into one query-tower call")
  p.add_argument("--max_wait_ms", type=float, default=d.max_wait_ms,
                 help="how long a batch waits for more requests (0: take what is queued)")
  p.add_argument("--max_k", type=int, default=d.max_k, help="largest k a request may ask")
  p.add_argument("--max_queries", type=int, default=d.max_queries,
                 help="largest batch of queries one request may send")
  p.add_argument("--max_query_chars", type=int, default=d.max_query_chars,
                 help="longest query accepted")
  p.add_argument("--max_body_bytes", type=int, default=d.max_body_bytes,
                 help="largest request body read (a longer one is refused with 413 before "
                      "it is read whole)")
  p.add_argument("--read_timeout", type=float, default=d.read_timeout,
                 help="seconds a request's headers and body may take to arrive; a slower "
                      "or half-sent request has its connection closed")
  p.add_argument("--allow_swap", action="store_true",
                 help="enable POST /v1/admin/swap (load another bundle while serving); needs "
                      f"an admin token (--admin_token or ${app.TOKEN_ENV})")
  p.add_argument("--admin_token", default=None,
                 help=f"the Bearer token admin requests must send (at least "
                      f"{app.MIN_TOKEN_CHARS} characters). Default: ${app.TOKEN_ENV}, which "
                      "other users cannot read from the process list as they can a flag")
  p.add_argument("--swap_root", default="",
                 help="the folder a swap may load bundles from (relative paths are under it; "
                      "anything resolving outside is refused). Default: the bundle's parent "
                      "folder")
  p.add_argument("--show_paths", action="store_true",
                 help="show absolute paths in /v1/info, swap answers and error messages "
                      "(default: only names under the swap root)")
  p.add_argument("--verify", choices=retriever.VERIFY, default=d.verify,
                 help="how the bundle's files are checked at load and at each swap: sha256 "
                      "(default: every file's content, as `twotower query` does), size "
                      "(sizes only: a same-size file of another bundle is served) or none; "
                      "an opt-out is logged at start-up")
  p.add_argument("--encoder", choices=("auto", "onnx", "tensorflow"), default=d.encoder,
                 help="the query tower's runtime: auto = ONNX when the bundle carries "
                      "query_onnx/ (`twotower bundle --onnx`), else the SavedModel")
  p.add_argument("--modes", type=flags.csv, default=",".join(d.modes),
                 help="modes served (comma list of dense, bm25, hybrid); Lucene and its JVM "
                      "load only for bm25 / hybrid: `--modes dense` with an ONNX tower needs "
                      "neither TensorFlow nor Java")
  p.add_argument("--allowed_hosts", type=flags.csv, default=",".join(d.allowed_hosts),
                 help="Host names (comma list) the service answers besides --host and the "
                      "loopback names, e.g. the name clients use for a --host 0.0.0.0 server; "
                      "a request for another Host is a 400, a browser's request from another "
                      "Origin a 403 (what stops DNS rebinding). '*' answers any")
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
    return app.ServeConfig(**{k: v for k, v in vars(args).items() if k != "verbose"})
  except ValueError as e:  # a flag combination (--allow_swap without a token)
    _usage_error(str(e))


def main(argv: Iterable[str] | None = None) -> None:
  from twotower.deploy.serving import app  # pylint: disable=import-outside-toplevel
  config = parse(argv)
  # A server's own lines (ready, one per request) are its output: shown by default.
  for name in ("twotower.serve.access", "twotower.deploy.serving"):
    logging.getLogger(name).setLevel(logging.INFO)
  app.run(config)
