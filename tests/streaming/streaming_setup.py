"""Planner configs and the one-thread fixture the streaming tests share."""

import pytest
import torch

from blockplan.config import CameraConfig, FrameWindowConfig, PlannerConfig

SMALL = PlannerConfig(
    cameras=(CameraConfig("front", "/cam/front"), CameraConfig("rear", "/cam/rear")),
    frame_window=FrameWindowConfig(num_frames=3),
)
FULL_SIZE = PlannerConfig(frame_window=FrameWindowConfig(num_frames=4))  # K = 4, T = 4


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
