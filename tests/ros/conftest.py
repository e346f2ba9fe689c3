"""Fixtures of the live-graph tests: the colcon-built package, simulated bags, a ROS domain
and a process graph per test (see tests/ros/live.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.optional import importorskip
from tests.ros.live import Graph, colcon_build, domain_ids

_DOMAINS: Iterator[int] | None = None


def _next_domain(config: pytest.Config) -> int:
    global _DOMAINS
    if _DOMAINS is None:
        _DOMAINS = domain_ids(config.getoption("--ros-domains"))
    try:
        return next(_DOMAINS)
    except StopIteration:
        pytest.fail("out of ROS domain ids: widen --ros-domains")


@pytest.fixture(scope="session")
def ros_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package built with colcon (from this venv) against the sourced ROS 2."""
    importorskip("rclpy")
    if not Path(sys.executable).with_name("colcon").exists():
        pytest.skip("colcon is not installed in this venv (the test extras install it)")
    return colcon_build(REPO_ROOT, tmp_path_factory.mktemp("colcon"))


def _simulate(out: Path, duration_s: float, compressed: bool) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "blockplan.cli",
        "-q",
        "simulate",
        "--scenario",
        "highway",
        "--duration",
        str(duration_s),
        "--seed",
        "1",
        "--out",
        str(out),
    ]
    if compressed:
        cmd.append("--compressed")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def raw_bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 s of simulated highway, raw images (`blockplan simulate`)."""
    return _simulate(tmp_path_factory.mktemp("bags") / "raw", 8.0, compressed=False)


@pytest.fixture(scope="session")
def compressed_bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """5 s of simulated highway, jpeg images on .../image_raw/compressed."""
    return _simulate(tmp_path_factory.mktemp("bags") / "compressed", 5.0, compressed=True)


@pytest.fixture
def graph(ros_install: Path, tmp_path: Path, pytestconfig: pytest.Config) -> Iterator[Graph]:
    """A graph on a ROS domain of its own; every process is killed at the end."""
    g = Graph(ros_install, _next_domain(pytestconfig), tmp_path)
    try:
        yield g
    finally:
        g.close()


@pytest.fixture(scope="module")
def module_graph(
    ros_install: Path, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[Graph]:
    """One graph shared by the tests of a module (one launched node, several checks)."""
    g = Graph(ros_install, _next_domain(pytestconfig), tmp_path_factory.mktemp("graph"))
    try:
        yield g
    finally:
        g.close()


def write_params(path: Path, repo_root: Path, **changes: object) -> Path:
    """The shipped params file with dotted-key changes (`control.rate_hz=-1.0`)."""
    doc = yaml.safe_load((repo_root / "params" / "planner.yaml").read_text())
    params = doc["blockplan_planner"]["ros__parameters"]
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = params
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
