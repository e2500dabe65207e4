"""`twotower index` (transitional: delegates to twotower.eval.index.run(argv) until its typed API lands)."""

from __future__ import annotations

from typing import Iterable


def main(argv: Iterable[str] | None = None) -> None:
  from twotower.eval.index import run  # pylint: disable=import-outside-toplevel
  run(None if argv is None else [a for a in argv if a not in ("-v", "--verbose")])
