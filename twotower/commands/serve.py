"""`twotower serve BUNDLE`: the HTTP search service over a retriever bundle (the flags of
deploy.serving.app)."""

from __future__ import annotations

import argparse
import logging
from typing import Iterable

from twotower.commands import flags


def build_parser() -> argparse.ArgumentParser:
  from twotower.deploy.serving import app  # pylint: disable=import-outside-toplevel
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
  p.add_argument("--allow_swap", action="store_true",
                 help="enable POST /v1/admin/swap (load another bundle while serving)")
  p.add_argument("--verify", choices=("none", "size", "sha256"), default=d.verify,
                 help="how the bundle's files are checked at load")
  return p


def parse(argv: Iterable[str] | None):
  from twotower.deploy.serving import app  # pylint: disable=import-outside-toplevel
  p = build_parser()
  args = p.parse_args(None if argv is None else list(argv))
  for name in ("port", "max_batch", "max_k", "max_queries", "max_query_chars"):
    if getattr(args, name) < 1:
      p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
  flags.non_negative(p, args, ["threads", "faiss_threads", "max_wait_ms"])
  return app.ServeConfig(**{k: v for k, v in vars(args).items() if k != "verbose"})


def main(argv: Iterable[str] | None = None) -> None:
  from twotower.deploy.serving import app  # pylint: disable=import-outside-toplevel
  config = parse(argv)
  # A server's own lines (ready, one per request) are its output: shown by default.
  for name in ("twotower.serve.access", "twotower.deploy.serving"):
    logging.getLogger(name).setLevel(logging.INFO)
  app.run(config)
