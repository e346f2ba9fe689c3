"""Replay: drive the control loop over a ROS 2 bag exactly as on the vehicle.

The bag is read in log-time order. The virtual clock follows the inputs' header stamps (what
`/clock` is on a vehicle replaying this recording): camera and odometry messages move it
forward, and a tick fires at every multiple of the control period the clock passes, before
the message that passed it is handed to the runtime. A stamp far behind the clock is a time
jump (a looped bag): the runtime resets and the ticks follow the new timeline.

Every input message is copied to the output bag next to the planner's outputs, so the output
alone shows everything in RViz or Foxglove.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blockplan.bags import (
    BagError,
    BagRecord,
    BagWriter,
    ImageDecodeError,
    image_msg_to_frame,
    odometry_to_ego,
    open_bag_reader,
    path_to_arrays,
    time_to_ns,
)
from blockplan.bags.tick import reasoning_record
from blockplan.config import PlannerConfig
from blockplan.replay.metrics import replay_metrics, streaming_metrics
from blockplan.replay.publish import OutputPublisher
from blockplan.replay.record import ReplayLog
from blockplan.replay.topics import InputTopics, resolve_topics
from blockplan.replay.truth import GroundTruthPaths, RecordedPath
from blockplan.runtime import Planner, PlannerRuntime, RuntimeLimits, TickOutput, VirtualClock
from blockplan.runtime.plans import PlanWindow
from blockplan.sim.topics import GT_PATH_TOPIC
from blockplan.types import EgoState, seconds_to_ns

log = logging.getLogger(__name__)

# A forward gap in the inputs longer than this is skipped rather than ticked through.
MAX_TICKED_GAP_S = 60.0
DIAGNOSTICS_PERIOD_S = 1.0
GROUND_TRUTH_PREFIX = "/ground_truth/"


@dataclass(frozen=True)
class ReplayResult:
    metrics: dict[str, Any]
    log: ReplayLog
    topics: InputTopics
    plans_bag: Path


def _read_odometry_segments(reader, topic: str | None, jump_ns: int) -> list[RecordedPath]:
    """The recorded path, split wherever the stamps jump back (one segment per bag loop)."""
    segments: list[list[EgoState]] = [[]]
    if topic is None:
        return [RecordedPath([])]
    last = None
    for record in reader.records([topic]):
        try:
            ego = odometry_to_ego(reader.deserialize(record))
        except BagError:
            continue  # counted in the main pass
        if ego.stamp_ns <= 0:
            continue  # unstamped: counted in the main pass
        if last is not None and ego.stamp_ns < last - jump_ns:
            segments.append([])
            last = ego.stamp_ns
        segments[-1].append(ego)
        last = ego.stamp_ns if last is None else max(last, ego.stamp_ns)
    return [RecordedPath(s) for s in segments]


def _read_ground_truth(reader) -> GroundTruthPaths | None:
    """The bag's recorded future paths (ego frame at t0), when it has them."""
    summary = reader.topics.get(GT_PATH_TOPIC)
    if summary is None or summary.msgtype != "nav_msgs/msg/Path":
        return None
    paths = {}
    for record in reader.records([GT_PATH_TOPIC]):
        try:
            stamp, t, xy, _ = path_to_arrays(reader.deserialize(record))
        except BagError:
            continue
        paths[stamp] = (t, xy)
    return GroundTruthPaths(paths)


class _Replayer:
    def __init__(
        self,
        reader,
        topics: InputTopics,
        runtime: PlannerRuntime,
        clock: VirtualClock,
        publisher: OutputPublisher,
        paths: list[RecordedPath],
        ground_truth: GroundTruthPaths | None,
    ) -> None:
        self.reader, self.topics, self.runtime, self.clock = reader, topics, runtime, clock
        self.publisher, self.paths, self.ground_truth = publisher, paths, ground_truth
        self.period_ns = runtime.period_ns
        self.jump_ns = seconds_to_ns(runtime.limits.time_jump_s)
        self.gap_ns = seconds_to_ns(MAX_TICKED_GAP_S)
        self.diag_every = max(1, round(DIAGNOSTICS_PERIOD_S * runtime.config.control.rate_hz))
        self.log = ReplayLog()
        self.sensor_now: int | None = None
        self.next_tick: int | None = None
        self.segment = 0
        self.last_odom: int | None = None
        self.synthesize_tf = "/tf" not in topics.tf

    def advance(self, stamp: int, log_time: int) -> None:
        """Tick every period boundary up to `stamp` (exclusive of messages at `stamp`)."""
        if self.sensor_now is None or stamp < self.sensor_now - self.jump_ns:
            self.sensor_now, self.next_tick = stamp, stamp + self.period_ns
            return
        if stamp - self.sensor_now > self.gap_ns:
            log.warning("skipping a %.1f s gap in the inputs", (stamp - self.sensor_now) / 1e9)
            self.sensor_now, self.next_tick = stamp, stamp + self.period_ns
            return
        assert self.next_tick is not None
        while self.next_tick <= stamp:
            self.clock.set(self.next_tick)
            self.on_tick(self.runtime.tick(), log_time)
            self.next_tick += self.period_ns
        self.sensor_now = max(self.sensor_now, stamp)

    def on_tick(self, out: TickOutput, log_time: int) -> None:
        self.publisher.tick(out, log_time)
        path = self.ground_truth or self.paths[min(self.segment, len(self.paths) - 1)]
        for accepted in out.new_plans:
            truth = path.future(accepted.stamp_ns, accepted.pose, accepted.trajectory.t)
            self.log.add_plan(accepted, reasoning_record(accepted), truth)
        self.log.add_tick(out)
        if len(self.log.ticks) % self.diag_every == 0:
            self.publisher.diagnostics(self.runtime.diagnostics(), out.now_ns, log_time)

    def ingest(self, record: BagRecord) -> None:
        self.publisher.copy_input(record)
        if record.topic.startswith(GROUND_TRUTH_PREFIX):
            return
        try:
            msg = self.reader.deserialize(record)
        except BagError as e:
            self.runtime.on_invalid_input("corrupt_message", str(e))
            return
        topic = record.topic
        if topic in self.topics.cameras:
            stamp = time_to_ns(msg.header.stamp)
            if stamp <= 0:  # an unset header would drag the clock back to 1970
                self.runtime.on_invalid_input("unstamped_image", f"{topic}: header stamp {stamp}")
                return
            self.advance(stamp, record.log_time_ns)
            try:
                frame = image_msg_to_frame(msg, self.topics.cameras[topic])
            except ImageDecodeError as e:
                self.runtime.on_invalid_input("invalid_image", f"{topic}: {e}")
                return
            self.runtime.on_frame(frame)
        elif topic == self.topics.odometry:
            ego = odometry_to_ego(msg)
            if ego.stamp_ns <= 0:
                self.runtime.on_invalid_input("unstamped_odometry", f"header stamp {ego.stamp_ns}")
                return
            if self.last_odom is None or ego.stamp_ns < self.last_odom - self.jump_ns:
                if self.last_odom is not None:
                    self.segment += 1  # the same split as _read_odometry_segments
                self.last_odom = ego.stamp_ns
            self.last_odom = max(self.last_odom, ego.stamp_ns)
            self.advance(ego.stamp_ns, record.log_time_ns)
            self.runtime.on_odometry(ego)
            if self.synthesize_tf and all(map(math.isfinite, (ego.x, ego.y, ego.yaw))):
                self.publisher.tf_from_odometry(ego, record.log_time_ns)
        elif topic == self.topics.route_command:
            self.runtime.on_route_command(str(msg.data))


def _followed(windows: Sequence[PlanWindow], runtime: PlannerRuntime) -> dict[str, Any]:
    missed = runtime.pending_request_stamps
    given = len({w.stamp_ns for w in windows})
    return {
        "given": given,
        "requested": given - len(missed),
        # the bag never reached that stamp, lacked one of its frames, or the worker was busy
        "not_requested_ns": missed,
    }


def replay_bag(
    bag: str | Path,
    out_dir: str | Path,
    planner: Planner,
    config: PlannerConfig,
    timing: str = "ideal",
    rate_hz: float | None = None,
    limits: RuntimeLimits | None = None,
    progress: Callable[[int, int], None] | None = None,
    request_windows: Sequence[PlanWindow] | None = None,
) -> ReplayResult:
    """Replay `bag` into `out_dir/plans.mcap`; return the metrics and the replay log.
    `progress(done, total)` is called as input messages are consumed. `request_windows`: plan
    only these windows (a live run's requests, `blockplan.replay.requests`)."""
    control = dataclasses.replace(
        config.control, timing=timing, rate_hz=rate_hz or config.control.rate_hz
    )
    config = dataclasses.replace(config, control=control)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plans_bag = out_dir / "plans.mcap"
    limits = limits or RuntimeLimits()
    with open_bag_reader(bag) as reader:
        topics = resolve_topics(config, reader.topics)
        for missing in topics.missing_cameras:
            log.warning("camera topic %s is not in the bag: that camera stays missing", missing)
        if topics.odometry is None:
            log.warning(
                "no %s in the bag: without odometry every tick publishes the fallback",
                config.topics.odom,
            )
        paths = _read_odometry_segments(reader, topics.odometry, seconds_to_ns(limits.time_jump_s))
        ground_truth = _read_ground_truth(reader)
        # Ground truth is not an input, but copied so the output bag shows it too.
        copied = tuple(t for t in reader.topics if t.startswith(GROUND_TRUTH_PREFIX))
        total = sum(reader.topics[t].num_messages for t in topics.all + copied)
        clock = VirtualClock()
        runtime = PlannerRuntime(
            config, planner, clock, timing, limits, request_windows=request_windows
        )
        try:
            with BagWriter(plans_bag, typestore=reader.typestore) as writer:
                publisher = OutputPublisher(writer, config)
                replayer = _Replayer(reader, topics, runtime, clock, publisher, paths, ground_truth)
                for i, record in enumerate(reader.records(topics.all + copied)):
                    replayer.ingest(record)
                    if progress is not None:
                        progress(i + 1, total)
                runtime.drain()
        finally:
            runtime.close()
    # Engine planners report their streaming counters; baselines have none.
    planner_streaming = getattr(planner, "streaming_stats", None)
    runtime_metrics = runtime.metrics()
    metrics = replay_metrics(
        runtime_metrics,
        replayer.log,
        timing=timing,
        rate_hz=control.rate_hz,
        bag=str(bag),
        camera_topics=sorted(topics.cameras),
        missing_camera_topics=list(topics.missing_cameras),
        odometry_topic=topics.odometry,
        ground_truth=GT_PATH_TOPIC if ground_truth else "recorded odometry",
        streaming=streaming_metrics(
            runtime_metrics,
            planner_streaming() if planner_streaming is not None else None,
        ),
        **({} if request_windows is None else {"requests": _followed(request_windows, runtime)}),
    )
    return ReplayResult(metrics, replayer.log, topics, plans_bag)
