"""Checks of typed configs that several stages share, so that a library caller
(`run(config)`) gets the same named error as the command line (where argparse already refuses
these values with exit 2)."""

from __future__ import annotations

from typing import Any, Iterable


def positive(config: Any, *fields: str) -> None:
  """A ValueError naming the first of `fields` of `config` that is not >= 1 (a count of 0
  would run and give an empty or failing result: FAISS asserts, Lucene throws)."""
  for name in fields:
    value = getattr(config, name)
    values: Iterable[Any] = value if isinstance(value, (tuple, list)) else (value,)
    if not values or any(not isinstance(v, int) or v < 1 for v in values):
      raise ValueError(f"{name} must be >= 1, got {value!r}")
