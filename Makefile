# blockplan — the two commands a fresh machine needs: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= test,sim,export
STAMP := $(VENV)/.installed-$(EXTRAS)

.PHONY: venv test test-all lint format demo clean

venv: $(STAMP)

# torch is installed first and pinned, so pip takes the CPU wheel on disk rather than
# resolving `torch>=2.4` to a multi-GB CUDA build.
$(STAMP): setup.cfg setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[$(EXTRAS)]' torch==2.13.0
	touch $@

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The README's test command: lint, then the suite without the slow tests.
test: lint
	$(PY) -m pytest -q -m "not slow"

# Everything, slow tests included.
test-all: lint
	$(PY) -m pytest -q

demo: venv
	$(VENV)/bin/blockplan demo

clean:
	rm -rf $(VENV) build install log .pytest_cache .ruff_cache src/*.egg-info
