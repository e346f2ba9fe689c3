"""Shared test setup: `ros` and `gpu` tests skip cleanly where rclpy / CUDA are missing.

With BLOCKPLAN_REQUIRE_ROS=1 (`make test-ros`, CI) a `ros` test that skips is a failure, and
a run without an importable rclpy stops at once: CI must not pass by skipping them.
"""

from __future__ import annotations

import importlib.util
import os
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


def _require_ros() -> bool:
    return os.environ.get("BLOCKPLAN_REQUIRE_ROS", "") not in ("", "0")


def pytest_configure(config: pytest.Config) -> None:
    if _require_ros() and not _has_rclpy():
        raise pytest.UsageError(
            "BLOCKPLAN_REQUIRE_ROS is set but rclpy cannot be imported: source the ROS 2 "
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
        _require_ros()
        and report.skipped
        and item.get_closest_marker("ros")
        and not hasattr(report, "wasxfail")
    ):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"ros test skipped with BLOCKPLAN_REQUIRE_ROS set: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    outcome = yield
    report = outcome.get_result()
    if _require_ros() and report.skipped and "ros" in Path(str(collector.path)).parts:
        report.outcome = "failed"


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT
