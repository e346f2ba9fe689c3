"""Tick outputs as the node publishes them, built with the rosbags typestore (no rclpy)."""

import json

import numpy as np

from blockplan.bags import TypestoreMessages, default_typestore, diagnostics_from_msg
from blockplan.config import PlannerConfig, config_from_params, config_to_params
from blockplan.messages.tick import (
    REASONING,
    ROLLOUTS,
    TRAJECTORY,
    TickMessages,
    model_status,
)
from blockplan.runtime import (
    ConstantVelocityPlanner,
    PlannerRuntime,
    VirtualClock,
    VirtualWorker,
    plan_postprocess,
)
from blockplan.types import CameraFrame, EgoState, seconds_to_ns

MSGTYPES = {
    TRAJECTORY: "nav_msgs/msg/Path",
    ROLLOUTS: "visualization_msgs/msg/MarkerArray",
    REASONING: "std_msgs/msg/String",
}


def _config() -> PlannerConfig:
    params = config_to_params(PlannerConfig())
    params["cameras"] = {"names": ["front"]}
    return config_from_params(params)


def _run(num_ticks: int):
    """Drive the runtime as the node does (frames + odometry in, a tick per period)."""
    config = _config()
    clock = VirtualClock(seconds_to_ns(100.0))
    runtime = PlannerRuntime(
        config, VirtualWorker(ConstantVelocityPlanner(), "ideal", plan_postprocess(config)), clock
    )
    messages = TickMessages(TypestoreMessages(), config)
    period = seconds_to_ns(1.0 / config.control.rate_hz)
    image = np.zeros((8, 12, 3), np.uint8)
    published = []
    for _ in range(num_ticks):
        now = clock.now_ns()
        runtime.on_frame(CameraFrame("front", now, image))
        runtime.on_odometry(EgoState(now, x=5.0 * now / 1e9, y=0.0, yaw=0.0, v_x=5.0))
        published.append(messages.tick(runtime.tick()))
        clock.advance(period)
    return config, runtime, messages, published


def test_every_tick_publishes_a_path_in_base_link_and_plans_add_rollouts_and_reasoning():
    config, runtime, _, published = _run(12)
    typestore = default_typestore()
    num_plans = 0
    for tick in published:
        keys = [k for k, _ in tick]
        assert keys[0] == TRAJECTORY and keys.count(TRAJECTORY) == 1
        for key, msg in tick:
            typestore.serialize_cdr(msg, MSGTYPES[key])  # a well-formed message of its type
        path = tick[0][1]
        assert path.header.frame_id == config.frames.base_link
        assert len(path.poses) == round(config.trajectory.horizon_s / config.trajectory.dt)
        for key, msg in tick[1:]:
            if key == REASONING:
                num_plans += 1
                record = json.loads(msg.data)
                assert record["explanation"].startswith("constant velocity")
                assert record["latency_ms"] >= 0
            else:
                assert key == ROLLOUTS
                assert all(m.header.frame_id == "base_link" for m in msg.markers)
    assert num_plans == runtime.health.counts()["plans"] > 0


def test_rollouts_are_stamped_with_the_observation_time():
    _, _, _, published = _run(12)
    for tick in published:
        rollouts = [m for k, m in tick if k == ROLLOUTS]
        reasoning = [json.loads(m.data) for k, m in tick if k == REASONING]
        for markers, record in zip(rollouts, reasoning, strict=True):
            stamp = markers.markers[-1].header.stamp
            assert stamp.sec * 10**9 + stamp.nanosec == record["stamp_ns"]


def test_diagnostics_carry_the_model_and_the_runtime_statuses():
    config, runtime, messages, _ = _run(5)
    # the backend that runs (what model.backend "auto" resolved to), not the setting
    statuses = [model_status(config, 12.5, backend="onnxruntime"), *runtime.diagnostics()]
    msg = messages.diagnostics(statuses, seconds_to_ns(101.0))
    default_typestore().serialize_cdr(msg, "diagnostic_msgs/msg/DiagnosticArray")
    decoded = {s["name"]: s for s in diagnostics_from_msg(msg)}
    model = decoded["blockplan: model"]
    assert model["level"] == 0
    assert model["values"]["backend"] == "onnxruntime"
    assert " on onnxruntime " in model["message"]
    assert model["values"]["warmup_ms"] == "12.5"
    assert "blockplan: control loop" in decoded
    assert "blockplan: camera front" in decoded
