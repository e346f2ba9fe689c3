"""Shared test setup: `ros` and `gpu` tests skip cleanly where rclpy / CUDA are missing."""

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_ros = pytest.mark.skip(reason="needs rclpy (ROS 2), not installed here")
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    has_ros, has_gpu = _has_rclpy(), _has_gpu()
    for item in items:
        if item.get_closest_marker("ros") and not has_ros:
            item.add_marker(skip_ros)
        if item.get_closest_marker("gpu") and not has_gpu:
            item.add_marker(skip_gpu)


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT
