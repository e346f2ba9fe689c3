"""Shared test setup: `ros` and `gpu` tests skip cleanly where rclpy / CUDA are missing.

With `pytest --require-ros` (`make test-ros`, CI) a `ros` test that skips is a failure, and
a run without an importable rclpy stops at once: CI must not pass by skipping them.
`--ros-domains LOW-HIGH` gives the live-graph tests their ROS_DOMAIN_IDs (tests/ros/live.py).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _has_rclpy() -> bool:
    return importlib.util.find_spec("rclpy") is not None


def _has_gpu() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("blockplan")
    group.addoption(
        "--require-ros",
        action="store_true",
        help="a skipped ros test is a failure, and rclpy must import (make test-ros, CI)",
    )
    group.addoption(
        "--fault-matrix-json",
        metavar="FILE",
        help="write the live fault matrix's measured table (tests/ros/test_live_fault_matrix.py) to FILE",
    )
    group.addoption(
        "--ros-domains",
        default="50-79",
        metavar="LOW-HIGH",
        help="ROS_DOMAIN_IDs the live-graph tests may lock, one per graph (default 50-79)",
    )


def _require_ros(config: pytest.Config) -> bool:
    return bool(config.getoption("--require-ros"))


def pytest_configure(config: pytest.Config) -> None:
    if _require_ros(config) and not _has_rclpy():
        raise pytest.UsageError(
            "--require-ros is given but rclpy cannot be imported: source the ROS 2 "
            "environment first (`make test-ros` sources ../shared/ros2/env.sh)"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_ros = pytest.mark.skip(reason="needs rclpy (ROS 2), not installed here")
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    has_ros, has_gpu = _has_rclpy(), _has_gpu()
    for item in items:
        if item.get_closest_marker("ros") and not has_ros:
            item.add_marker(skip_ros)
        if item.get_closest_marker("gpu") and not has_gpu:
            item.add_marker(skip_gpu)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if (
        _require_ros(item.config)
        and report.skipped
        and item.get_closest_marker("ros")
        and not hasattr(report, "wasxfail")
    ):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"ros test skipped under --require-ros: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    outcome = yield
    report = outcome.get_result()
    if (
        _require_ros(collector.config)
        and report.skipped
        and "ros" in Path(str(collector.path)).parts
    ):
        report.outcome = "failed"


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT
