"""The import graph between the project's files: which file imports which, the circles
(strongly connected components of more than one file) and the arrows that run back up the
layers (tests/test_layers.py's folders; inside the ground floor, the order in CORE_ORDER).

    python tests/import_graph.py            # the whole report
    python tests/import_graph.py --cycles   # circles and upward arrows only

Read from the source, as test_layers.py reads it (imports under `if __name__ ==
"__main__":` are not dependencies). Each arrow says how the import runs:

    top     at module level: runs when the file is imported
    lazy    inside a function or method: runs when that is called (still a circle a reader
            has to untangle, and an import-order bug once someone moves it up)
    typing  under `if TYPE_CHECKING:`: never runs

An import of a submodule also runs its package's `__init__.py`; where that file imports
other files of the project (twotower/core/contracts/__init__.py does), the arrow to it is drawn too
(kind `package`, or that of the import when it is lazy or typing).

tests/test_import_graph.py fails on any circle but those closed by an arrow of ALLOWED_EDGES,
and on any arrow up the ground floor:
break circles, don't list them.
"""

from __future__ import annotations

import ast
import pathlib
import sys
from typing import Iterable, NamedTuple

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import test_layers  # noqa: E402  pylint: disable=wrong-import-position

ROOT = test_layers.ROOT

#: The ground floor's files in the order they may import each other (a file imports only
#: files of its own group or of an earlier one); the files not named here come last. The
#: filesystem helpers at the bottom, the contracts on them, ownership of outputs on both.
CORE_ORDER: tuple[tuple[str, ...], ...] = (
    ("twotower/core/files.py", "twotower/core/logs.py", "twotower/core/tower_text.py"),
    ("twotower/core/contracts/layout.py", "twotower/core/contracts/records.py",
     "twotower/core/contracts/counters.py", "twotower/core/contracts/manifests.py"),
    ("twotower/core/contracts/codecs.py", "twotower/core/contracts/__init__.py"),
)

#: Arrows that may close a circle, each with why it is harmless. Keep this short: a new
#: circle is broken by moving code down, not by listing it here.
ALLOWED_EDGES: dict[tuple[str, str], str] = {
    ("model/mlm.py", "model/pretrain.py"):
        "under TYPE_CHECKING: the type of the pretrain job, never imported at run time",
    ("pipelines/sentences/splitters.py", "pipelines/sentences/reqa_sentencizer.py"):
        "a lazy registry: the table of splitters names the ReQA one, which builds on the "
        "table's Span and SentenceSplitter; imported when that splitter is first asked for",
    ("pipelines/wiki/wikidump.py", "pipelines/wiki/inputs.py"):
        "under TYPE_CHECKING: the type of the files the dump reader takes (inputs.InputFile), "
        "never imported at run time",
}

class Arrow(NamedTuple):
  source: str  # file, relative to ROOT
  target: str
  kind: str  # top | lazy | typing | package
  line: int


def module_file(name: str) -> pathlib.Path | None:
  """The file of module `name` (`twotower.eval.bm25` -> eval/bm25.py), None when `name` is
  not a module of the project (another package, or a name inside a module)."""
  parts = name.split(".")
  if parts[0] != "twotower":
    return None
  if len(parts) > 1 and parts[1] in test_layers.FOLDERS:
    base = ROOT / test_layers.FOLDERS[parts[1]]
    rest = parts[2:]
  else:
    base = ROOT / "twotower"
    rest = parts[1:]
  path = base.joinpath(*rest)
  if path.with_suffix(".py").is_file() and rest:
    return path.with_suffix(".py")
  if (path / "__init__.py").is_file():
    return path / "__init__.py"
  return None


def rel(path: pathlib.Path) -> str:
  return path.relative_to(ROOT).as_posix()


def _kinds(tree: ast.Module) -> dict[int, str]:
  """{id(import node): kind}; nodes under `__main__` blocks are left out."""
  kinds: dict[int, str] = {}

  def visit(node: ast.AST, kind: str) -> None:
    for child in ast.iter_child_nodes(node):
      if isinstance(child, ast.If) and "__main__" in ast.unparse(child.test):
        continue
      here = kind
      if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
        here = "typing"
      elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
          and kind == "top":
        here = "lazy"
      if isinstance(child, (ast.Import, ast.ImportFrom)):
        kinds[id(child)] = kind
      visit(child, here)

  visit(tree, "top")
  return kinds


def _targets(node: ast.Import | ast.ImportFrom, path: pathlib.Path) -> Iterable[str]:
  """The module names an import statement loads (absolute)."""
  if isinstance(node, ast.Import):
    yield from (a.name for a in node.names)
    return
  module = node.module or ""
  if node.level:  # relative: resolved against the importing file's package
    package = module_name(path).split(".")
    package = package[:len(package) - node.level + (1 if path.name == "__init__.py" else 0)]
    module = ".".join(package + ([module] if module else []))
  for alias in node.names:
    sub = f"{module}.{alias.name}"
    yield sub if module_file(sub) is not None else module


def module_name(path: pathlib.Path) -> str:
  parts = list(path.relative_to(ROOT).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts.pop()
  if parts[0] != "twotower":
    parts.insert(0, "twotower")
  return ".".join(parts)


def source_files() -> list[pathlib.Path]:
  return [p for p in test_layers.source_files() if test_layers.layer_of_file(p) != "testing"]


def arrows() -> list[Arrow]:
  """Every import of one project file by another (test helpers excluded), in file order."""
  files = source_files()
  direct: dict[str, list[Arrow]] = {}
  for path in files:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    kinds = _kinds(tree)
    found = []
    for node in ast.walk(tree):
      if id(node) not in kinds:
        continue
      for name in _targets(node, path):
        target = module_file(name)
        if target is not None and target != path:
          found.append(Arrow(rel(path), rel(target), kinds[id(node)], node.lineno))
    direct[rel(path)] = found
  # A package whose __init__ imports project files runs them on any import of a submodule.
  busy = {f for f, out in direct.items() if f.endswith("__init__.py") and out}
  out: list[Arrow] = []
  for source, found in direct.items():
    seen = set()
    for arrow in found:
      for package in _packages_of(arrow.target):
        if package in busy and package not in (source, arrow.target) \
            and (package, arrow.kind) not in seen \
            and not source.startswith(package.removesuffix("__init__.py")):
          seen.add((package, arrow.kind))
          kind = "package" if arrow.kind == "top" else arrow.kind
          out.append(Arrow(source, package, kind, arrow.line))
      out.append(arrow)
  return sorted(set(out), key=lambda a: (a.source, a.line, a.target, a.kind))


def _packages_of(target: str) -> list[str]:
  """The `__init__.py` files Python runs before `target` (its enclosing packages)."""
  parts = target.split("/")[:-1]
  return [f"{'/'.join(parts[:i])}/__init__.py" for i in range(1, len(parts) + 1)
          if (ROOT / '/'.join(parts[:i]) / "__init__.py").is_file()]


def circles(edges: Iterable[Arrow]) -> list[list[str]]:
  """The strongly connected components of more than one file, each sorted, largest first
  (Tarjan's algorithm)."""
  graph: dict[str, set[str]] = {}
  for a in edges:
    graph.setdefault(a.source, set()).add(a.target)
    graph.setdefault(a.target, set())
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on_stack: set[str] = set()
  found: list[list[str]] = []

  def connect(node: str) -> None:
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for nxt in sorted(graph[node]):
      if nxt not in index:
        connect(nxt)
        low[node] = min(low[node], low[nxt])
      elif nxt in on_stack:
        low[node] = min(low[node], index[nxt])
    if low[node] == index[node]:
      component = []
      while True:
        top = stack.pop()
        on_stack.discard(top)
        component.append(top)
        if top == node:
          break
      if len(component) > 1:
        found.append(sorted(component))

  sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
  for node in sorted(graph):
    if node not in index:
      connect(node)
  return sorted(found, key=lambda c: (-len(c), c))


def rank(path: str) -> tuple[int, int]:
  """(folder layer, place inside the ground floor): an arrow must not go up either."""
  layer = test_layers.RANK[test_layers.layer_of_file(ROOT / path)]
  if layer:
    return layer, 0
  for i, group in enumerate(CORE_ORDER):
    if path in group:
      return 0, i
  return 0, len(CORE_ORDER)


def upward(edges: Iterable[Arrow]) -> list[Arrow]:
  """Arrows to a file of a higher layer (or of the same folder layer, for pipelines ->
  model), or, inside the ground floor, to a later group of CORE_ORDER; typing arrows
  excepted (they never run)."""
  out = []
  for a in edges:
    if a.kind == "typing":
      continue
    (src_layer, src_place), (dst_layer, dst_place) = rank(a.source), rank(a.target)
    src_folder = test_layers.layer_of_file(ROOT / a.source)
    dst_folder = test_layers.layer_of_file(ROOT / a.target)
    if dst_layer > src_layer or (dst_layer == src_layer and src_folder != dst_folder) or \
        (dst_layer == src_layer == 0 and dst_place > src_place):
      out.append(a)
  return out


def report(edges: list[Arrow], full: bool = True) -> str:
  lines = []
  found = circles(edges)
  kinds = ", ".join(f"{k} {sum(a.kind == k for a in edges)}"
                    for k in ("top", "lazy", "package", "typing"))
  lines.append(f"{len(source_files())} files, {len(edges)} arrows ({kinds}); "
               f"{len(found)} circles")
  for component in found:
    members = set(component)
    lines.append(f"\ncircle of {len(component)} files:")
    lines += [f"  {f}" for f in component]
    lines.append("  arrows inside it:")
    lines += [f"    {a.source}:{a.line} -> {a.target} ({a.kind})"
              + ("  [allowed]" if (a.source, a.target) in ALLOWED_EDGES else "")
              for a in edges if a.source in members and a.target in members]
  up = upward(edges)
  lines.append(f"\n{len(up)} arrows up the layers:")
  lines += [f"  {a.source}:{a.line} -> {a.target} ({a.kind})" for a in up]
  if full:
    lines.append("\nevery arrow (file: imports):")
    by_source: dict[str, list[Arrow]] = {}
    for a in edges:
      by_source.setdefault(a.source, []).append(a)
    for source in sorted(by_source):
      targets = sorted({(a.target, a.kind) for a in by_source[source]})
      lines.append(f"  {source}: " + ", ".join(
          t if k == "top" else f"{t} ({k})" for t, k in targets))
  return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
  sys.stdout.write(report(arrows(), full="--cycles" not in argv))
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
