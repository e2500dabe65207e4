"""The folders import each other in one direction only: a layer imports the layers below it.

    core       twotower/core/ (contracts, files, outputs, logs, tower_text, ...): what every
               stage shares
    pipelines  Beam stages (wiki/, reqa/, sentences/, shared/; vocab, embed, hardneg)
    model      Keras towers and training
    eval       search, BM25, metrics, reports (over pipelines' and model's outputs)
    deploy     building the retriever bundle (bundling/), query and serve (serving/), over
               eval's search; serving never imports the building side
    top        twotower.cli, twotower.commands, twotower.experiment: what wires stages together

Read from the source (`import` statements), not by importing: a cycle between folders is
found before it bites as an import-order bug. Imports under `if __name__ == "__main__":` (a
module run as a script hands over to the CLI) are not dependencies of the module.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: Layer of each namespace package (twotower.<folder>), lowest first.
ORDER = ("core", "pipelines", "model", "eval", "deploy", "top")
RANK = {"core": 0, "pipelines": 1, "model": 1, "eval": 2, "deploy": 3, "top": 4}
TOP_PACKAGES = ("cli", "commands", "experiment")
FOLDERS = {"pipelines": "pipelines", "model": "model", "eval": "eval", "deploy": "deploy"}


def layer_of_module(name: str) -> str | None:
  """`twotower.eval.bm25` -> "eval"; None for other packages and the test helpers."""
  parts = name.split(".")
  if parts[0] != "twotower":
    return None
  if len(parts) == 1:
    return "core"
  if parts[1] == "testing":
    return None
  if parts[1] in TOP_PACKAGES:
    return "top"
  return FOLDERS.get(parts[1], "core")


def layer_of_file(path: pathlib.Path) -> str:
  rel = path.relative_to(ROOT).parts
  if rel[0] == "twotower":
    return layer_of_module(".".join(("twotower",) + tuple(p.removesuffix(".py")
                                                          for p in rel[1:]))) or "testing"
  return rel[0]


def source_files() -> list[pathlib.Path]:
  return sorted(p for top in ("twotower", *FOLDERS) for p in (ROOT / top).rglob("*.py"))


def imports_of(path: pathlib.Path) -> list[str]:
  tree = ast.parse(path.read_text(encoding="utf-8"))
  main = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
  skipped = {id(n) for block in main for n in ast.walk(block)}
  names = []
  for node in ast.walk(tree):
    if id(node) in skipped:
      continue
    if isinstance(node, ast.Import):
      names += [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
  return names


def edges() -> dict[tuple[str, str], list[str]]:
  """{(from layer, to layer): ["file -> module", ...]} between different layers."""
  out: dict[tuple[str, str], list[str]] = {}
  for path in source_files():
    src = layer_of_file(path)
    if src == "testing":
      continue
    for name in imports_of(path):
      dst = layer_of_module(name)
      if dst is not None and dst != src:
        out.setdefault((src, dst), []).append(f"{path.relative_to(ROOT)} -> {name}")
  return out


def test_every_import_goes_down_the_layers():
  upward = {pair: sites for pair, sites in edges().items() if RANK[pair[1]] >= RANK[pair[0]]}
  assert not upward, "\n".join(f"{a} -> {b}: {sites[:3]}" for (a, b), sites in upward.items())


def test_the_ground_floor_is_its_own_package():
  """twotower/ holds the top floor (cli, commands, experiment), the test helpers and the
  ground floor's package, core/: no module of the floors beside them."""
  stray = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "twotower").rglob("*.py")
                 if p.relative_to(ROOT / "twotower").parts[0] not in
                 ("core", "testing", *TOP_PACKAGES, "cli.py", "__init__.py"))
  assert not stray


def test_serving_only_serves():
  """deploy/serving loads and searches a bundle; building one (deploy/bundling) is another
  job, which serving never imports."""
  offenders = [f"{p.relative_to(ROOT)}: {n}" for p in (ROOT / "deploy" / "serving").rglob("*.py")
               for n in imports_of(p) if n.startswith("twotower.deploy.bundling")]
  assert not offenders


def test_no_stage_imports_the_test_helpers():
  offenders = [f"{p.relative_to(ROOT)}" for p in source_files()
               if layer_of_file(p) != "testing"
               and any(n.startswith("twotower.testing") for n in imports_of(p))]
  assert not offenders


@pytest.mark.parametrize("module, layer", [
    ("twotower.core.contracts.layout", "core"), ("twotower.eval.bm25", "eval"),
    ("twotower.commands.pairs", "top"), ("twotower.deploy.serving.app", "deploy"),
    ("numpy", None)])
def test_layer_of_module(module, layer):
  assert layer_of_module(module) == layer
