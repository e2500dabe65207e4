"""What Dataflow workers run, checked offline: the package they install is built from the
checkout exactly as the worker image builds it (deploy/dataflow/Dockerfile: `pip install .` of
the files it COPYs), holds every module and every data file the code reads, and runs a Beam
stage from a fresh virtualenv with the checkout out of reach; the images' pins agree with
pyproject.toml, and every distribution the code imports is installed by its dependencies.
(The flags the launch files pass: tests/test_dataflow_flags.py.)

Workers get the package one way only: the worker image (`--sdk_container_image`,
`--sdk_location=container`), never `--setup_file`, `--requirements_file` or
`--extra_package` (deploy/README.md, "Worker packaging").
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest

from dataflow_fixtures import DATAFLOW, FLEX, ROOT, launched_stages

WORKER_DOCKERFILE = DATAFLOW / "Dockerfile"

#: Files inside package folders that are not part of the installed package, and why. Every
#: other file there ships in the wheel (a data file the code reads must, or workers fail).
NOT_SHIPPED = {
    "*/README.md": "documentation, read in the checkout",
    "deploy/lib.sh": "shell helpers of the launch scripts, run from the checkout",
    "deploy/dataflow/*": "launch scripts and container recipes, run from the checkout",
    "deploy/tpu/*": "TPU VM launch script and guide, run from the checkout",
}

#: Distributions the package imports without declaring them: each is installed by the
#: declared dependency named here (checked below), so the worker image has it.
UNDECLARED_IMPORTS = {
    "absl-py": "tensorflow",       # twotower.core.logs quiets absl's logger
    "keras": "tensorflow",         # Keras 3, TensorFlow's and keras-hub's
    "pyjnius": "pyserini",         # jnius_config: the JVM options set before Pyserini starts it
    "starlette": "fastapi",        # the service's middleware and responses
    "pydantic-core": "pydantic",   # from_json, the request parser
    "grpcio": "apache-beam",       # the portable runner's services (deploy.portable.services)
}

#: Distributions imported only by a path an optional extra of pyproject installs (the worker
#: image needs none of them): distribution -> the extra.
EXTRA_IMPORTS = {
    "jax": "jax",                  # runtime.backend: jax (model.jax_train, model.jax_launch)
}


def _pyproject() -> dict:
  return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _canonical(name: str) -> str:
  return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> dict:
  """Canonical name -> packaging Requirement, for pyproject's [project] dependencies."""
  from packaging.requirements import Requirement
  return {_canonical(r.name): r for r in map(Requirement, _pyproject()["project"]["dependencies"])}


# ---------------------------------------------------------------------------------------------
# The wheel the worker image installs.
# ---------------------------------------------------------------------------------------------


def _build_context() -> list[str]:
  """The checkout paths the worker Dockerfile COPYs into the folder it `pip install`s."""
  sources = []
  for line in WORKER_DOCKERFILE.read_text().splitlines():
    words = line.split()
    if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
      sources += [w.rstrip("/") for w in words[1:-1]]
  return sources


@pytest.fixture(scope="module")
def worker_wheel(tmp_path_factory) -> pathlib.Path:
  """The wheel `pip install .` builds in the worker image: from a copy of the Dockerfile's
  build context (so a file the image lacks is missing here too), offline."""
  tmp = tmp_path_factory.mktemp("worker-wheel")
  context = tmp / "context"
  context.mkdir()
  for source in _build_context():
    path = ROOT / source
    if path.is_dir():  # .dockerignore leaves out the byte-code
      shutil.copytree(path, context / source,
                      ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
      shutil.copy2(path, context / source)
  dist = tmp / "dist"
  done = subprocess.run(
      [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
       "-q", "-w", str(dist), str(context)],
      capture_output=True, text=True, timeout=300, check=False,
      env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
  assert done.returncode == 0, done.stderr[-3000:]
  wheels = sorted(dist.glob("twotower-*.whl"))
  assert len(wheels) == 1, wheels
  return wheels[0]


def test_the_dockerfile_copies_what_the_build_needs_and_its_dockerignore_lets_it_in():
  sources = _build_context()
  setuptools = _pyproject()["tool"]["setuptools"]
  needed = {"pyproject.toml", _pyproject()["project"]["readme"],
            *setuptools["package-dir"].values()}
  assert needed <= set(sources), sorted(needed - set(sources))
  allowed = (DATAFLOW / "Dockerfile.dockerignore").read_text().splitlines()
  for source in sources:
    assert f"!{source}" in allowed or f"!{source}/" in allowed, source


def _package_folders() -> dict[pathlib.Path, str]:
  """Every folder of the checkout that is an installed package -> its import name."""
  folders = {}
  for package, folder in _pyproject()["tool"]["setuptools"]["package-dir"].items():
    for init in (ROOT / folder).rglob("__init__.py"):
      if "__pycache__" not in init.parts:
        sub = init.parent.relative_to(ROOT / folder).parts
        folders[init.parent] = ".".join((package, *sub))
  return folders


def test_the_wheel_holds_every_module_and_every_package_file(worker_wheel):
  shipped = set(zipfile.ZipFile(worker_wheel).namelist())
  folders = _package_folders()
  assert set(folders.values()) == set(_pyproject()["tool"]["setuptools"]["packages"]), (
      "pyproject's packages differ from the folders with an __init__.py")
  expected = {}
  for folder, package in folders.items():
    for path in folder.rglob("*"):
      if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
        continue
      owner = next(p for p in (path.parent, *path.parent.parents) if p in folders)
      if owner != folder:
        continue  # a sub-package's file: checked with that package
      relative = path.relative_to(ROOT).as_posix()
      if not any(fnmatch.fnmatch(relative, pattern) for pattern in NOT_SHIPPED):
        expected["/".join((*package.split("."), *path.relative_to(folder).parts))] = relative
  missing = sorted(f"{relative} (as {name})" for name, relative in expected.items()
                   if name not in shipped)
  assert not missing, "not in the wheel: " + ", ".join(missing)
  # Nothing else either (a stray build product, a file of a folder that is not a package).
  assert {n for n in shipped if ".dist-info/" not in n} == set(expected)
  assert len(expected) > 100, len(expected)  # the walk saw the package (146 files)
  for pattern in NOT_SHIPPED:  # no stale exception
    assert any(fnmatch.fnmatch(p.relative_to(ROOT).as_posix(), pattern)
               for folder in folders for p in folder.rglob("*") if p.is_file()), pattern


def _wheel_sources(wheel: pathlib.Path) -> dict[str, str]:
  """Module name -> source, for every .py in the wheel."""
  sources = {}
  with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
      if name.endswith(".py"):
        module = name[:-3].replace("/", ".").removesuffix(".__init__")
        sources[module] = z.read(name).decode("utf-8")
  return sources


def test_every_data_folder_the_code_opens_is_in_the_wheel(worker_wheel):
  """Resources read at run time, found in the code (`importlib.resources.files(PKG) / DIR`,
  `Path(__file__)...with_name(DIR)`): each of ours is a non-empty folder of the wheel, each of
  a dependency's a folder of that installed package. The spaCy
  sentencizer's rules (pipelines/sentences/sentencizer_rules) are what every pairs worker reads."""
  shipped = zipfile.ZipFile(worker_wheel).namelist()
  opened = set()
  for module, source in _wheel_sources(worker_wheel).items():
    for package, folder in re.findall(r'resources\.files\(\s*"([\w.]+)"\s*\)\s*/\s*"([^"]+)"',
                                      source):
      opened.add((package, folder))
    if "__file__" in source:
      package = module.rpartition(".")[0]
      for folder in re.findall(r'\.with_name\(\s*"([^"]+)"\s*\)', source):
        opened.add((package, folder))
  assert ("twotower.pipelines.sentences", "sentencizer_rules") in opened, opened
  for package, folder in sorted(opened):
    if not package.startswith("twotower"):  # a dependency's own data (pyserini's 2cr/)
      import importlib.resources
      assert (importlib.resources.files(package) / folder).is_dir(), (package, folder)
      continue
    prefix = f"{package.replace('.', '/')}/{folder}/"
    assert any(n.startswith(prefix) and not n.endswith("/") for n in shipped), (
        f"{package} opens {folder}/ at run time; the wheel has no {prefix}*")


def _third_party_imports(sources: dict[str, str]) -> dict[str, set[str]]:
  """Top-level name of every import that is neither the stdlib nor twotower -> modules."""
  found: dict[str, set[str]] = {}
  for module, source in sources.items():
    for node in ast.walk(ast.parse(source)):
      if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        names = [node.module]
      else:
        continue
      for name in names:
        top = name.split(".")[0]
        if top not in sys.stdlib_module_names and top not in ("twotower", "__future__"):
          found.setdefault(top, set()).add(module)
  return found


def test_every_distribution_the_package_imports_is_installed_by_its_dependencies(worker_wheel):
  """The image installs pyproject's dependencies and nothing else: a module the code imports
  (at the top or inside a function: workers call both) comes from a declared distribution, or
  from one of UNDECLARED_IMPORTS, which the named declared dependency requires."""
  imports = _third_party_imports(_wheel_sources(worker_wheel))
  assert {"apache_beam", "mwparserfromhell", "pyarrow", "google_crc32c"} <= set(imports)
  declared = _declared()
  providers = importlib.metadata.packages_distributions()
  undeclared = {}
  for top, modules in sorted(imports.items()):
    dists = {_canonical(d) for d in providers.get(top, [])}
    assert dists, f"{top} (imported by {sorted(modules)}) is not installed here"
    if not dists & set(declared) and not dists & set(EXTRA_IMPORTS):
      undeclared[top] = dists
  assert {d for ds in undeclared.values() for d in ds} == set(UNDECLARED_IMPORTS), (
      f"imported but not declared in pyproject.toml: {undeclared}; declare them, or (when a "
      "declared dependency installs them) list them in UNDECLARED_IMPORTS")
  from packaging.requirements import Requirement
  extras = _pyproject()["project"]["optional-dependencies"]
  for dist, extra in EXTRA_IMPORTS.items():
    assert dist in {_canonical(Requirement(r).name) for r in extras.get(extra, ())}, (
        f"the {extra!r} extra no longer installs {dist}")
  for dist, by in UNDECLARED_IMPORTS.items():
    requires = [Requirement(r) for r in importlib.metadata.requires(by) or []]
    assert any(_canonical(r.name) == dist and (r.marker is None or r.marker.evaluate(
        {"extra": ""})) for r in requires), f"{by} no longer installs {dist}: declare it"


def _fresh_venv(path: pathlib.Path) -> pathlib.Path:
  """A virtualenv without the project whose dependencies are the running environment's
  (a .pth listing its import folders, minus the checkout: no network, no pip resolve)."""
  subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                 timeout=120)
  python = path / "bin" / "python"
  probe = subprocess.run([str(python), "-I", "-c", "import json, sys, sysconfig; print(json.dumps("
                          "[sysconfig.get_paths()['purelib'], sys.path]))"],
                         capture_output=True, text=True, check=True, timeout=60)
  site_packages, own = json.loads(probe.stdout)

  def in_checkout(p: pathlib.Path) -> bool:  # the repository's own .venv is not the checkout
    return p.is_relative_to(ROOT) and not p.is_relative_to(pathlib.Path(sys.prefix).resolve())

  deps = [p for p in sys.path if p and p not in own and os.path.isdir(p)
          and not in_checkout(pathlib.Path(p).resolve())]
  assert deps, sys.path
  # Plain folder lines: the .pth files inside them (an editable install's finder for the
  # checkout) are not run, so `twotower` can only come from the wheel.
  (pathlib.Path(site_packages) / "_dependencies.pth").write_text("\n".join(deps) + "\n")
  return python


#: The worker-side run in the fresh venv: import every pipeline module and the command of
#: each stage the scripts launch, run one stage through Beam's multi-processing local runner
#: (its SDK worker is a separate `python`, the venv's, that unpickles and runs the DoFns), and
#: report where every twotower module came from.
DRIVER = """
import importlib, json, pkgutil, sys
import twotower.pipelines
from twotower import cli
result, stages, argv = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
for info in pkgutil.iter_modules(twotower.pipelines.__path__, "twotower.pipelines."):
  importlib.import_module(info.name)
for stage in stages:
  importlib.import_module(cli.command_module(stage))
status = cli.main(argv)
with open(result, "w") as f:
  json.dump({"exit": status, "executable": sys.executable, "modules": {
      name: getattr(module, "__file__", None) for name, module in list(sys.modules.items())
      if name.split(".")[0] == "twotower"}}, f)
"""


def test_the_installed_wheel_runs_the_pairs_stage_from_a_fresh_venv(worker_wheel, tmp_path):
  from wikidump_fixtures import DumpPage, article, write_dump
  python = _fresh_venv(tmp_path / "venv")
  subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                  "--no-deps", "--no-index", str(worker_wheel)], check=True, timeout=300,
                 env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
  assert (python.parent / "twotower").is_file()  # the console script
  # "Dr." and "U.S." end no sentence only because of the stored tokenizer rules (package data).
  lead = ("'''Alpha''' is a town founded by Dr. Smith of the U.S. Army in 1900, a fact most "
          "books repeat. Its name comes from the first letter of the Greek alphabet, as "
          "[[Beta]] does from the second. Mr. Jones wrote its history in a long book.")
  dump = write_dump(tmp_path / "enwiki-pages-articles1.xml.bz2",
                    [DumpPage(1, "Alpha", lead), article(2, "Beta", "[[Alpha]]")])
  work, out, result = tmp_path / "work", tmp_path / "work" / "pairs", tmp_path / "result.json"
  work.mkdir()
  (tmp_path / "driver.py").write_text(DRIVER)
  stages = launched_stages()
  assert {"pairs", "reqa", "embed"} <= set(stages), stages
  env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
  done = subprocess.run(
      [str(python), "-I", str(tmp_path / "driver.py"), str(result), ",".join(stages), "pairs",
       "--dump", dump, "--out", str(out), "--heldout_percent", "0",
       "--direct_running_mode=multi_processing", "--direct_num_workers=1"],
      cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  report = json.loads(result.read_text())
  assert report["exit"] == 0 and report["executable"] == str(python)
  venv = (tmp_path / "venv").resolve()
  modules = report["modules"]
  assert {"twotower.pipelines.wiki.pairs", "twotower.pipelines.sentences.spacy_sentencizer",
          "twotower.commands.embed"} <= set(modules)
  outside = {n: f for n, f in modules.items() if f and not pathlib.Path(f).resolve().is_relative_to(venv)}
  assert not outside, f"imported from outside the fresh venv: {outside}"
  from outputs_fixtures import read_passages
  passages = {(r["page_id"], r["passage_id"]): r for r in read_passages(str(out)).to_pylist()}
  assert passages[(1, 0)]["sentences"] == [
      "Alpha is a town founded by Dr. Smith of the U.S. Army in 1900, a fact most books repeat.",
      "Its name comes from the first letter of the Greek alphabet, as Beta does from the second.",
      "Mr. Jones wrote its history in a long book."]
  stats = json.loads((out / "stats.json").read_text())
  assert (stats["pages_kept"], stats["links_resolved"], stats["passages"]) == (2, 2, 3)


# ---------------------------------------------------------------------------------------------
# The images' pins.
# ---------------------------------------------------------------------------------------------

#: Files that pip-install the project's dependencies outside pyproject.toml.
PIN_FILES = [WORKER_DOCKERFILE, FLEX / "Dockerfile", ROOT / "Makefile",
             ROOT / "deploy" / "tpu" / "launch_tpu_vm.sh"]
#: pip flags followed by a value that is not a package.
_PIP_VALUE_FLAGS = {"--index-url", "-i", "--extra-index-url", "-r", "--requirement", "-c",
                    "--constraint", "-w", "--python", "--target", "-t"}


def _pip_installs(text: str) -> list[str]:
  """The package arguments of every `pip install` in a Dockerfile, Makefile or shell script
  (continuation lines joined; paths, variables and the project itself left out)."""
  text = re.sub(r"\\\n", " ", text)
  packages = []
  for match in re.finditer(r"pip install ([^\n&;|]*)", text):
    words = [w.strip("'\"") for w in match.group(1).split()]
    skip = False
    for word in words:
      if skip:
        skip = False
      elif word in _PIP_VALUE_FLAGS:
        skip = True
      elif not (word.startswith(("-", ".", "~", "/", "$")) or "/" in word or "$" in word):
        packages.append(word)
  return packages


def test_every_pip_install_outside_pyproject_agrees_with_its_pins():
  from packaging.requirements import Requirement
  declared = _declared()
  build_tools = {_canonical(Requirement(r).name)
                 for r in _pyproject()["build-system"]["requires"]} | {"pip"}
  seen = []
  for path in PIN_FILES:
    for word in _pip_installs(path.read_text()):
      req = Requirement(word)
      name = _canonical(req.name)
      if name in build_tools:
        continue
      assert name in declared, f"{path.relative_to(ROOT)} installs {word}, not in pyproject.toml"
      if req.specifier:
        assert req.specifier == declared[name].specifier, (
            f"{path.relative_to(ROOT)}: {word}; pyproject.toml: {declared[name]}")
      seen.append((path.name, word))
  assert ("Dockerfile", "torch==2.13.0") in seen, seen


def test_worker_and_launcher_images_run_the_python_pyproject_allows():
  from packaging.specifiers import SpecifierSet
  worker = re.search(r"^FROM apache/beam_python(\d+\.\d+)_sdk:(\S+)$",
                     WORKER_DOCKERFILE.read_text(), re.M)
  launcher = re.search(r"python(\d)(\d+)-template-launcher-base", (FLEX / "Dockerfile").read_text())
  assert worker and launcher
  version = worker.group(1)
  # The flex launcher builds the job that the workers unpickle: the same Python minor.
  assert f"{launcher.group(1)}.{launcher.group(2)}" == version
  assert version in SpecifierSet(_pyproject()["project"]["requires-python"])
  assert SpecifierSet(f"=={worker.group(2)}") == _declared()["apache-beam"].specifier
