"""docs/architecture.md names files that exist: every source path it gives (a backticked
`folder/module.py`, a folder `folder/`, or a bare `module.py` after a path of its folder on
the same line) is in the tree."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
#: A backticked path of the tree: ends in .py or / (a folder), or a path with a folder.
_TICKED = re.compile(r"`([\w./-]+)`")
_TOPS = ("twotower/", "pipelines/", "model/", "eval/", "deploy/", "tests/", "benchmarks/",
         "docs/")


def named_paths(text: str) -> list[tuple[int, str]]:
  """(line number, path relative to the root) of every source path the page names."""
  found = []
  for number, line in enumerate(text.splitlines(), 1):
    folder = None
    for token in _TICKED.findall(line):
      token = token.rstrip(".,")
      if token.startswith(_TOPS):
        found.append((number, token))
        folder = token if token.endswith("/") else token.rsplit("/", 1)[0] + "/"
      elif token.endswith(".py") and "/" not in token:
        # a bare module: in the folder of the path before it, or among the tests
        base = "tests/" if token.startswith("test_") else folder
        if base:
          found.append((number, base + token))
  return found


def test_every_path_the_architecture_page_names_exists():
  paths = named_paths(DOC.read_text(encoding="utf-8"))
  assert len(paths) > 50, len(paths)  # the page's module table was read
  missing = [f"line {n}: {p}" for n, p in paths if not (ROOT / p).exists()]
  assert not missing, missing
