# Two commands on a fresh machine (see README.md):
#   make demo   set up, fetch the embedded Wikipedia slice (via pip), run the end-to-end demo
#   make test   set up and run the test suite (what .ci/run calls)
# and, while working on the code:
#   make test-quick  the tests not marked `slow` (pytest -m "not slow")
#   make bench       every benchmark at a quick setting (python -m benchmarks; --list names them)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The embedded default: the real English Wikipedia slice shipped inside the gensim 4.4.0 wheel.
GENSIM_WHEEL_DUMP := gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2
DEFAULT_DUMP := data/enwiki-slice-pages-articles.xml.bz2

.PHONY: demo test test-quick setup setup-test browser data bench clean
# apt-get as root, else through sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

demo: setup data
	$(VENV)/bin/twotower demo --dump $(DEFAULT_DUMP) --out runs/demo

# One worker per core (at most 4: each holds TensorFlow and a JVM); a test file stays on one
# worker, so its module fixtures (a tiny grid, a trained model) are made once.
PYTEST_WORKERS := -n auto --maxprocesses 4 --dist loadfile

test: setup-test
	$(PY) -m pytest -q $(PYTEST_WORKERS) tests

# The slow tests (`@pytest.mark.slow`: training, the tiny grid, the demo, the guides) left out.
test-quick: setup-test
	$(PY) -m pytest -q $(PYTEST_WORKERS) -m "not slow" tests

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip setuptools wheel
	# torch first, pinned: the CPU build; an unpinned resolve pulls GBs of CUDA wheels.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.installed
setup-test: $(VENV)/.installed browser

# Debian's Chromium: the search page of `twotower serve` is tested in a real headless browser.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { echo "installing Debian's chromium (headless browser test of the search page)"; \
	    $(SUDO) apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }

data: $(DEFAULT_DUMP)

$(DEFAULT_DUMP):
	mkdir -p data .cache/wheels
	$(PY) -m pip download -q --no-deps gensim==4.4.0 -d .cache/wheels
	$(PY) -c "import glob, shutil, zipfile; z = zipfile.ZipFile(sorted(glob.glob('.cache/wheels/gensim-4.4.0-*.whl'))[0]); shutil.copyfileobj(z.open('$(GENSIM_WHEEL_DUMP)'), open('$@', 'wb'))"

bench: setup
	$(PY) -m benchmarks

clean:
	rm -rf runs .pytest_cache
