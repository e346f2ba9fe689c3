# blockplan — the two commands a fresh machine needs: `make demo` and `make test`
# (`make test-ros` runs the node in a real ROS 2 graph where a ROS 2 Jazzy runtime is installed).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= test,sim,export
STAMP := $(VENV)/.installed-$(EXTRAS)

# The ROS 2 runtime for test-ros: its env.sh (sources /opt/ros/jazzy, loopback-only DDS) and
# requirements.txt (what a venv needs for rclpy); ../shared/ros2 next to this checkout.
ROS2 ?= ../shared/ros2
ROS_STAMP := $(VENV)/.installed-ros

.PHONY: venv system-deps ros-venv test test-ros test-all lint format demo cli-doc clean

venv: $(STAMP)

# The Debian packages the suite uses (libosmesa6 for Meta-World, chromium for the report
# test), with apt where this machine allows it; the tests that need a missing one skip.
# SYSTEM_DEPS=0 leaves the system alone.
system-deps:
	@bash scripts/system_deps.sh

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
test: lint system-deps
	$(PY) -m pytest -q -m "not slow"

# The ros-marked tests against the ROS 2 runtime (colcon build, `ros2 launch`, a live graph);
# a ros test that skips here is a failure (pytest --require-ros).
ros-venv: $(ROS_STAMP)

$(ROS_STAMP): $(STAMP) $(ROS2)/requirements.txt
	$(PY) -m pip install -q -r $(ROS2)/requirements.txt
	touch $@

test-ros: ros-venv
	@test -f $(ROS2)/env.sh || { echo "no ROS 2 runtime: $(ROS2)/env.sh is missing (set ROS2=DIR)"; exit 1; }
	@if [ "$$(id -u)" = 0 ] || [ ! -d /opt/ros/jazzy ]; then bash $(ROS2)/install.sh >/dev/null; fi
	source $(ROS2)/env.sh && $(PY) -m pytest -q -m ros --require-ros

# Everything, slow tests included.
test-all: lint system-deps
	$(PY) -m pytest -q

demo: venv
	$(VENV)/bin/blockplan demo

# docs/CLI.md from the argparse parsers (tests/test_docs.py fails when it is stale).
cli-doc: venv
	$(PY) scripts/cli_doc.py

clean:
	rm -rf $(VENV) build install log .pytest_cache .ruff_cache src/*.egg-info
