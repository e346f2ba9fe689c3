"""One closed-loop episode: a policy drives the ego of a highway-env scenario.

Planner policies run the same `PlannerRuntime` as the live node and replay (virtual clock,
ideal timing): camera frames rendered from the world state and odometry go in through
`on_frame` / `on_odometry`, the route command through `on_route_command`, and every
`replan_period_s` a tick builds the Observation (K cameras × T frames view-major with the
config's frame window, ego history, route command), plans, JMT-upsamples / averages the
rollouts, gates, stitches (or falls back) and publishes a trajectory. Between ticks the
tracking controller follows the newest published trajectory at `control_hz`.

Only the frames a tick's window will pick are rendered (the newest one and those
`frame_period_s` apart before it); the window's nearest-frame choice then yields exactly the
Observation a 10 Hz camera stream would give.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockplan.closedloop.controller import ControllerConfig, TrackingController
from blockplan.closedloop.metrics import EpisodeResult, Trace
from blockplan.closedloop.route import route_command
from blockplan.closedloop.world import DT, ClosedLoopWorld
from blockplan.config import PlannerConfig
from blockplan.runtime import Planner, PlannerRuntime, VirtualClock
from blockplan.sim.rig import Rig
from blockplan.sim.roadmap import road_map_from_network
from blockplan.sim.scenarios import SIM_HZ, Scenario
from blockplan.trajectory import Pose2D
from blockplan.types import CameraFrame

EXPERT = "expert"
FEED_MARGIN_S = 0.5
FrameSink = Callable[[float, dict[str, np.ndarray]], None]


class WarmupCrash(RuntimeError):
    """The expert crashed during the shared warm-up: the seed cannot be evaluated."""


@dataclass(frozen=True)
class EpisodeSpec:
    """duration_s: simulated time after the warm-up. control_hz: controller rate.
    replan_period_s: how often the runtime ticks (plans and publishes)."""

    scenario: Scenario
    seed: int
    duration_s: float = 20.0
    control_hz: float = 10.0
    replan_period_s: float = 0.5

    def __post_init__(self) -> None:
        for name in ("duration_s", "control_hz", "replan_period_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"EpisodeSpec.{name}={getattr(self, name)!r}: must be > 0")
        for name, period in (("control_hz", 1.0 / self.control_hz),
                             ("replan_period_s", self.replan_period_s)):  # fmt: skip
            steps = period * SIM_HZ
            if abs(steps - round(steps)) > 1e-6 or round(steps) < 1:
                raise ValueError(
                    f"EpisodeSpec.{name}={getattr(self, name)!r}: the period must be a whole "
                    f"number of {SIM_HZ} Hz simulation steps"
                )


def _steps(seconds: float) -> int:
    return int(round(seconds * SIM_HZ))


def _frame_steps(spec: EpisodeSpec, config: PlannerConfig, first_step: int) -> set[int]:
    """Simulation steps whose camera frames some tick's window will use."""
    fw = config.frame_window
    ticks = range(0, _steps(spec.duration_s) + 1, _steps(spec.replan_period_s))
    period = _steps(fw.frame_period_s)
    return {
        s for tick in ticks for k in range(fw.num_frames) if (s := tick - k * period) >= first_step
    }


def _yaw_rate(world: ClosedLoopWorld, prev_yaw: float | None) -> float:
    yaw = world.ego_pose().yaw
    if prev_yaw is None:
        return 0.0
    return math.remainder(yaw - prev_yaw, 2 * math.pi) / DT


Hook = Callable[[Any], None]  # called with the highway-env env


def run_expert_episode(
    spec: EpisodeSpec, on_reset: Hook | None = None, on_start: Hook | None = None
) -> EpisodeResult:
    """The IDM/MOBIL expert keeps driving the ego, as in `blockplan.sim`."""
    return _run(spec, None, None, None, (on_reset, on_start), None)


def run_planner_episode(
    spec: EpisodeSpec,
    name: str,
    planner: Planner,
    config: PlannerConfig,
    rig: Rig,
    controller: ControllerConfig | None = None,
    on_reset: Hook | None = None,
    on_start: Hook | None = None,
    frame_sink: FrameSink | None = None,
) -> EpisodeResult:
    """`planner` drives the ego through the runtime and the tracking controller.
    on_reset: edits the world before the warm-up; on_start: at t = 0 (tests force events)."""
    return _run(spec, (name, planner, config), rig, controller, (on_reset, on_start), frame_sink)


def _run(spec, planned, rig, controller_config, hooks, frame_sink) -> EpisodeResult:
    world = ClosedLoopWorld(spec.scenario, spec.seed)
    try:
        if hooks[0] is not None:
            hooks[0](world.env)
        return _drive(world, spec, planned, rig, controller_config, hooks[1], frame_sink)
    finally:
        world.close()


def _drive(world, spec, planned, rig, controller_config, on_start, frame_sink) -> EpisodeResult:
    runtime = renderer = controller = None
    feed_from = 0
    frame_steps: set[int] = set()
    if planned is not None:
        name, planner, config = planned
        control = dataclasses.replace(config.control, rate_hz=1.0 / spec.replan_period_s)
        config = dataclasses.replace(config, control=control)
        clock = VirtualClock(world.stamp_ns())
        runtime = PlannerRuntime(config, planner, clock, timing="ideal")
        from blockplan.sim.render import RigRenderer

        renderer = RigRenderer(rig, road_map_from_network(world.env.road.network))
        frame_steps = _frame_steps(spec, config, world.step_index)
        fw = config.frame_window
        # Inputs start shortly before the first window and ego history (the spawn
        # transients come earlier).
        span_s = max(fw.num_frames * fw.frame_period_s, runtime.input_span_s)
        feed_from = -_steps(span_s + FEED_MARGIN_S)
        controller = TrackingController(controller_config)
    else:
        name = EXPERT
    prev_yaw = None
    held = None  # (trajectory, pose at its stamp)
    trace = Trace()
    collided = departed = False
    control_every, replan_every = _steps(1.0 / spec.control_hz), _steps(spec.replan_period_s)
    last_step = _steps(spec.duration_s)
    while True:
        i = world.step_index
        if runtime is not None and i >= feed_from:
            yaw_rate = _yaw_rate(world, prev_yaw)
            runtime.on_odometry(world.ego_state(yaw_rate))
            if i in frame_steps:
                images = renderer.render(world.snapshot())
                for camera, image in images.items():
                    runtime.on_frame(CameraFrame(camera, world.stamp_ns(), image))
                if frame_sink is not None and i >= 0:
                    frame_sink(world.t, images)
        prev_yaw = world.ego_pose().yaw
        if i == 0 and on_start is not None:
            on_start(world.env)
        if i == 0 and runtime is not None:
            world.take_control(controller.config.acceleration_range,
                               controller.config.steering_range_rad)  # fmt: skip
        if i >= 0:
            pose = world.ego_pose()
            if not world.on_road():
                departed = True
            if i % control_every == 0 or departed or i == last_step:
                trace.add(world.t, pose.x, pose.y, pose.speed)
            if departed or i >= last_step:
                break
            if runtime is not None:
                if i % replan_every == 0:
                    runtime.clock.set(world.stamp_ns())
                    ego = world.env.vehicle
                    runtime.on_route_command(
                        route_command(world.env.road.network, world.route, ego.position,
                                      float(ego.speed))
                    )  # fmt: skip
                    out = runtime.tick()
                    traj_pose = Pose2D.from_ego_state(out.ego) if out.ego else Pose2D(
                        pose.x, pose.y, pose.yaw)  # fmt: skip
                    held = (out.trajectory, traj_pose)
                if i % control_every == 0:
                    cmd = controller.command(
                        held[0], held[1], Pose2D(pose.x, pose.y, pose.yaw), pose.speed,
                        world.stamp_ns(), 1.0 / spec.control_hz,
                    )  # fmt: skip
                    world.act(cmd.action)
        world.step()
        if world.crashed:
            if world.step_index <= 0:
                raise WarmupCrash(f"{spec.scenario.name} seed {spec.seed}: the expert crashed "
                                  "during the warm-up")  # fmt: skip
            collided = True
            pose = world.ego_pose()
            trace.add(world.t, pose.x, pose.y, pose.speed)
            break
    counters = {}
    if runtime is not None:
        m = runtime.metrics()
        counters = {k: int(m.get(k, 0)) for k in ("ticks", "plans", "fallbacks", "invalid_plans",
                                                  "uncomfortable_plans", "planner_errors")}  # fmt: skip
        runtime.close()
    return EpisodeResult(
        policy=name,
        scenario=spec.scenario.name,
        seed=spec.seed,
        simulated_s=max(world.t, 0.0),
        collided=collided,
        departed=departed,
        progress_m=trace.progress_m(),
        mean_abs_jerk=trace.mean_abs_jerk(),
        counters=counters,
    )
