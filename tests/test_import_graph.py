"""No circle between the project's files but the listed harmless ones, and no arrow up the
ground floor (tests/import_graph.py draws the graph; `python tests/import_graph.py` prints it)."""

from __future__ import annotations

import ast

import import_graph


def _arrows_without_allowed() -> list[import_graph.Arrow]:
  return [a for a in import_graph.arrows()
          if (a.source, a.target) not in import_graph.ALLOWED_EDGES]


def test_no_circle_but_the_allowed_ones():
  found = import_graph.circles(_arrows_without_allowed())
  assert not found, "circles of imports (break them; see tests/import_graph.py):\n" + \
      "\n".join(" <-> ".join(c) for c in found)


def test_every_allowed_arrow_still_exists_and_closes_a_circle():
  """A stale entry is removed, so that the lists stay short and true."""
  arrows = import_graph.arrows()
  present = {(a.source, a.target) for a in arrows}
  in_circle = {(a.source, a.target) for c in import_graph.circles(arrows) for a in arrows
               if a.source in c and a.target in c}
  assert not [e for e in import_graph.ALLOWED_EDGES if e not in present or e not in in_circle]


def test_no_arrow_runs_up_the_ground_floor():
  up = import_graph.upward(import_graph.arrows())
  assert not up, "\n".join(f"{a.source}:{a.line} -> {a.target} ({a.kind})" for a in up)


def test_circles_are_the_strongly_connected_components():
  arrows = [import_graph.Arrow(s, t, "top", 1) for s, t in
            [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e"), ("e", "d"), ("f", "a")]]
  assert import_graph.circles(arrows) == [["a", "b", "c"], ["d", "e"]]


def test_how_each_import_runs_is_told_apart():
  tree = ast.parse(
      "import a\n"
      "from typing import TYPE_CHECKING\n"
      "if TYPE_CHECKING:\n  import b\n"
      "def f():\n  import c\n"
      "class K:\n  def m(self):\n    import d\n"
      "if __name__ == '__main__':\n  import e\n")
  kinds = import_graph._kinds(tree)  # pylint: disable=protected-access
  by_name = {n.names[0].name: kinds[id(n)] for n in ast.walk(tree)
             if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) in kinds}
  assert by_name == {"a": "top", "TYPE_CHECKING": "top", "b": "typing", "c": "lazy", "d": "lazy"}


def test_a_submodule_import_runs_its_busy_package_init():
  """`from twotower.core.contracts import layout` runs contracts/__init__.py, which imports
  codecs: drawn as an arrow to that __init__ (a circle through it is a real import-order hazard)."""
  arrows = import_graph.arrows()
  assert ("twotower/core/outputs.py", "twotower/core/contracts/__init__.py", "package") in \
      {(a.source, a.target, a.kind) for a in arrows}
  assert import_graph.module_file("twotower.eval.bm25") == import_graph.ROOT / "eval" / "bm25.py"
  assert import_graph.module_file("twotower.core.contracts") == \
      import_graph.ROOT / "twotower" / "core" / "contracts" / "__init__.py"
  assert import_graph.module_file("twotower.core.contracts.PAIR_SPLITS") is None
