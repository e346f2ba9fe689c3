"""One closed-loop episode: a policy drives the ego of a highway-env scenario.

Planner policies run the same `PlannerRuntime` as the live node and replay (virtual clock,
ideal timing), wrapped in a `PlannerDriver`: every simulation step it `feed`s the runtime
odometry and the camera frames rendered from the world state; every `replan_period_s` it
`replan`s — sets the route command and ticks the runtime, which builds the Observation
(K cameras × T frames view-major with the config's frame window, ego history, route
command), plans, JMT-upsamples / averages the rollouts, gates, stitches (or falls back) and
publishes a trajectory; at `control_hz` it `control`s — the tracking controller follows the
newest published trajectory. The expert episode has no driver: highway-env's IDM/MOBIL
keeps driving.

Only the frames a tick's window will pick are rendered (the newest one and those
`frame_period_s` apart before it); the window's nearest-frame choice then yields exactly the
Observation a 10 Hz camera stream would give.
"""

from __future__ import annotations

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
from blockplan.runtime import (
    PlannerRuntime,
    RuntimePlanner,
    VirtualClock,
    VirtualWorker,
    plan_postprocess,
)
from blockplan.sim.rig import Rig
from blockplan.sim.roadmap import road_map_from_network
from blockplan.sim.scenarios import SIM_HZ, Scenario
from blockplan.trajectory import Pose2D
from blockplan.types import CameraFrame, Trajectory

EXPERT = "expert"
FEED_MARGIN_S = 0.5
COUNTERS = ("ticks", "plans", "fallbacks", "invalid_plans", "uncomfortable_plans", "planner_errors")
FrameSink = Callable[[float, dict[str, np.ndarray]], None]
Hook = Callable[[Any], None]  # called with the highway-env env


class WarmupCrash(RuntimeError):
    """The expert crashed during the shared warm-up: the seed cannot be evaluated."""


# The optional perception inputs an episode can withhold from the planner (`--hide-inputs`):
# the localisation's lane pose, the tracker's car ahead, the map's and tracker's lanes beside,
# the router's route.
# A hidden input is never published, as on a vehicle without that module: the model sees it
# as unknown and plans from the cameras and the ego history.
HIDEABLE_INPUTS = ("lane-pose", "lead", "beside", "route")
PERCEPTION_INPUTS = ("lane-pose", "lead", "beside")  # what perception and localisation give


@dataclass(frozen=True)
class EpisodeSpec:
    """duration_s: simulated time after the warm-up. control_hz: controller rate.
    replan_period_s: how often the runtime ticks (plans and publishes). hidden_inputs: the
    optional inputs (`HIDEABLE_INPUTS`) the planner is not given."""

    scenario: Scenario
    seed: int
    duration_s: float = 20.0
    control_hz: float = 10.0
    replan_period_s: float = 0.5
    hidden_inputs: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.hidden_inputs) - set(HIDEABLE_INPUTS))
        if unknown:
            raise ValueError(
                f"EpisodeSpec.hidden_inputs={unknown[0]!r}: must be one of {list(HIDEABLE_INPUTS)}"
            )
        for name in ("duration_s", "control_hz", "replan_period_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"EpisodeSpec.{name}={getattr(self, name)!r}: must be > 0")
        periods = {"control_hz": 1.0 / self.control_hz, "replan_period_s": self.replan_period_s}
        for name, period in periods.items():
            steps = period * SIM_HZ
            if abs(steps - round(steps)) > 1e-6 or round(steps) < 1:
                raise ValueError(
                    f"EpisodeSpec.{name}={getattr(self, name)!r}: the period must be a whole "
                    f"number of {SIM_HZ} Hz simulation steps"
                )

    @property
    def last_step(self) -> int:
        return _steps(self.duration_s)

    @property
    def control_every(self) -> int:
        """Simulation steps between two controller commands."""
        return _steps(1.0 / self.control_hz)

    @property
    def replan_every(self) -> int:
        """Simulation steps between two runtime ticks."""
        return _steps(self.replan_period_s)


def _steps(seconds: float) -> int:
    return int(round(seconds * SIM_HZ))


def _frame_steps(spec: EpisodeSpec, config: PlannerConfig, first_step: int) -> set[int]:
    """Simulation steps whose camera frames some tick's window will use."""
    fw = config.frame_window
    ticks = range(0, spec.last_step + 1, spec.replan_every)
    period = _steps(fw.frame_period_s)
    return {
        s for tick in ticks for k in range(fw.num_frames) if (s := tick - k * period) >= first_step
    }


class PlannerDriver:
    """A planner at the wheel of `world`: the runtime (ticking every replanning period, on
    the world's virtual clock) and the tracking controller that follows its trajectory."""

    def __init__(
        self,
        world: ClosedLoopWorld,
        spec: EpisodeSpec,
        planner: RuntimePlanner,
        config: PlannerConfig,
        rig: Rig,
        controller: ControllerConfig | None = None,
        frame_sink: FrameSink | None = None,
    ) -> None:
        from blockplan.sim.render import RigRenderer

        config = config.with_params({"control.rate_hz": 1.0 / spec.replan_period_s})
        self.world = world
        self.spec = spec
        clock = VirtualClock(world.stamp_ns())
        worker = VirtualWorker(planner, "ideal", plan_postprocess(config))
        self.runtime = PlannerRuntime(config, worker, clock)
        self.renderer = RigRenderer(rig, road_map_from_network(world.env.road.network))
        self.controller = TrackingController(controller)
        self.frame_sink = frame_sink
        self.frame_steps = _frame_steps(spec, config, world.step_index)
        fw = config.frame_window
        # Inputs start shortly before the first window and ego history (the spawn
        # transients come earlier).
        span_s = max(fw.num_frames * fw.frame_period_s, self.runtime.input_span_s)
        self.feed_from = -_steps(span_s + FEED_MARGIN_S)
        self._prev_yaw: float | None = None
        self._held: tuple[Trajectory, Pose2D] | None = None  # trajectory, pose at its stamp

    def feed(self) -> None:
        """This step's inputs: odometry from `feed_from` on, and the camera frames of the
        steps some window will use (also handed to the frame sink after the warm-up)."""
        world = self.world
        i = world.step_index
        if i >= self.feed_from:
            self.runtime.on_odometry(world.ego_state(self._yaw_rate()))
            hidden = self.spec.hidden_inputs
            if "lane-pose" not in hidden:
                self.runtime.on_lane_pose(world.stamp_ns(), *world.lane_pose())
            # the tracker (only a model that reads it needs it)
            if self.runtime.reads_lead and "lead" not in hidden:
                self.runtime.on_lead(world.stamp_ns(), *world.lead())
            # the map and the tracker (the model, the lane guard)
            if self.runtime.uses_beside and "beside" not in hidden:
                self.runtime.on_beside(world.stamp_ns(), world.beside())
            if i in self.frame_steps:
                images = self.renderer.render(world.snapshot())
                for camera, image in images.items():
                    self.runtime.on_frame(CameraFrame(camera, world.stamp_ns(), image))
                if self.frame_sink is not None and i >= 0:
                    self.frame_sink(world.t, images)
        self._prev_yaw = world.ego_pose().yaw

    def _yaw_rate(self) -> float:
        if self._prev_yaw is None:
            return 0.0
        return math.remainder(self.world.ego_pose().yaw - self._prev_yaw, 2 * math.pi) / DT

    def take_control(self) -> None:
        """At t = 0: the controller replaces the expert."""
        config = self.controller.config
        self.world.take_control(config.acceleration_range, config.steering_range_rad)

    def replan(self, pose: Any) -> None:
        """Tick the runtime with the current route command; hold the trajectory it publishes
        with the ego pose at its stamp (`pose`, the ego now, when the tick has no ego state)."""
        world = self.world
        self.runtime.clock.set(world.stamp_ns())
        ego = world.env.vehicle
        command = route_command(world.env.road.network, world.route, ego.position, float(ego.speed))
        self.runtime.on_route_command(command)
        if self.runtime.reads_route and "route" not in self.spec.hidden_inputs:
            self.runtime.on_route(world.stamp_ns(), world.route_path())
        out = self.runtime.tick()
        if out.ego is not None:
            stamp_pose = Pose2D.from_ego_state(out.ego)
        else:
            stamp_pose = Pose2D(pose.x, pose.y, pose.yaw)
        self._held = (out.trajectory, stamp_pose)

    def control(self, pose: Any) -> None:
        """One controller command toward the held trajectory from the ego's `pose`."""
        assert self._held is not None, "replan before control"
        trajectory, stamp_pose = self._held
        cmd = self.controller.command(
            trajectory,
            stamp_pose,
            Pose2D(pose.x, pose.y, pose.yaw),
            pose.speed,
            self.world.stamp_ns(),
            1.0 / self.spec.control_hz,
        )
        self.world.act(cmd.action)

    def counters(self) -> dict[str, int]:
        metrics = self.runtime.metrics()
        return {name: int(metrics.get(name, 0)) for name in COUNTERS}

    def close(self) -> None:
        self.runtime.close()


def run_expert_episode(
    spec: EpisodeSpec, on_reset: Hook | None = None, on_start: Hook | None = None
) -> EpisodeResult:
    """The IDM/MOBIL expert keeps driving the ego, as in `blockplan.sim`."""
    return _run(spec, EXPERT, None, on_reset, on_start)


def run_planner_episode(
    spec: EpisodeSpec,
    name: str,
    planner: RuntimePlanner,
    config: PlannerConfig,
    rig: Rig,
    controller: ControllerConfig | None = None,
    on_reset: Hook | None = None,
    on_start: Hook | None = None,
    frame_sink: FrameSink | None = None,
) -> EpisodeResult:
    """`planner` drives the ego through the runtime and the tracking controller.
    on_reset: edits the world before the warm-up; on_start: at t = 0 (tests force events)."""

    def driver(world: ClosedLoopWorld) -> PlannerDriver:
        return PlannerDriver(world, spec, planner, config, rig, controller, frame_sink)

    return _run(spec, name, driver, on_reset, on_start)


def _run(
    spec: EpisodeSpec,
    name: str,
    make_driver: Callable[[ClosedLoopWorld], PlannerDriver] | None,
    on_reset: Hook | None,
    on_start: Hook | None,
) -> EpisodeResult:
    world = ClosedLoopWorld(spec.scenario, spec.seed)
    try:
        if on_reset is not None:
            on_reset(world.env)
        driver = make_driver(world) if make_driver is not None else None
        try:
            return _drive(world, spec, name, driver, on_start)
        finally:
            if driver is not None:
                driver.close()
    finally:
        world.close()


def _drive(
    world: ClosedLoopWorld,
    spec: EpisodeSpec,
    name: str,
    driver: PlannerDriver | None,
    on_start: Hook | None,
) -> EpisodeResult:
    """Step the world from the warm-up to the end, a collision or a lane departure."""
    trace = Trace()
    collided = departed = False
    while True:
        i = world.step_index
        if driver is not None:
            driver.feed()
        if i == 0 and on_start is not None:
            on_start(world.env)
        if i == 0 and driver is not None:
            driver.take_control()
        if i >= 0:
            pose = world.ego_pose()
            departed = not world.on_road()
            if i % spec.control_every == 0 or departed or i == spec.last_step:
                trace.add(world.t, pose.x, pose.y, pose.speed, world.lane_offset())
            if departed or i >= spec.last_step:
                break
            if driver is not None and i % spec.replan_every == 0:
                driver.replan(pose)
            if driver is not None and i % spec.control_every == 0:
                driver.control(pose)
        world.step()
        if world.crashed:
            if world.step_index <= 0:
                raise WarmupCrash(
                    f"{spec.scenario.name} seed {spec.seed}: the expert crashed during the warm-up"
                )
            collided = True
            pose = world.ego_pose()
            trace.add(world.t, pose.x, pose.y, pose.speed, world.lane_offset())
            break
    return EpisodeResult(
        policy=name,
        scenario=spec.scenario.name,
        seed=spec.seed,
        simulated_s=max(world.t, 0.0),
        collided=collided,
        departed=departed,
        progress_m=trace.progress_m(),
        mean_abs_jerk=trace.mean_abs_jerk(),
        counters=driver.counters() if driver is not None else {},
        mean_abs_lane_offset_m=trace.lane_offset_m()[0],
        max_abs_lane_offset_m=trace.lane_offset_m()[1],
    )
