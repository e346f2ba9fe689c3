"""The conversions with rclpy's generated message classes (runs only where ROS 2 is)."""

from __future__ import annotations

import numpy as np
import pytest

from blockplan.bags import (
    ModuleMessages,
    decode_image,
    diagnostics_from_msg,
    diagnostics_to_msg,
    ego_to_odometry,
    encode_compressed_image,
    encode_image,
    odometry_to_ego,
    path_to_arrays,
    rollouts_to_markers,
    trajectory_to_path,
)
from blockplan.runtime import DiagnosticStatusData
from blockplan.types import EgoState, Trajectory

pytestmark = pytest.mark.ros


def test_every_conversion_builds_rclpy_messages() -> None:
    ns = ModuleMessages()
    rgb = np.random.default_rng(0).integers(0, 256, (4, 6, 3), dtype=np.uint8)
    image = encode_image(ns, rgb, 5, "cam", "bgr8", row_padding=2)
    assert type(image).__module__.startswith("sensor_msgs.msg")
    np.testing.assert_array_equal(decode_image(image), rgb)
    encode_compressed_image(ns, rgb, 5, "cam", "jpeg")
    ego = EgoState(7, 1.0, 2.0, 0.3, 4.0, yaw_rate=0.1)
    assert odometry_to_ego(ego_to_odometry(ns, ego)).x == pytest.approx(1.0)
    t = np.arange(1, 21) * 0.25
    z = np.zeros(20)
    traj = Trajectory(10**9, t, 2 * t, z, z, z, z, z)
    np.testing.assert_allclose(path_to_arrays(trajectory_to_path(ns, traj))[2][:, 0], 2 * t)
    markers = rollouts_to_markers(ns, np.zeros((2, 5, 2)), 0, previous_count=3)
    assert len(markers.markers) == 3
    status = DiagnosticStatusData("blockplan: control loop", 1, "fallback", values={"ticks": 3})
    assert diagnostics_from_msg(diagnostics_to_msg(ns, 0, [status]))[0]["level"] == 1
