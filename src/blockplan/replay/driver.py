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

import logging
import math
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blockplan.bags import (
    BagError,
    BagRecord,
    BagWriter,
    ImageDecodeError,
    OdometryError,
    beside_from_msg,
    image_msg_to_frame,
    lane_pose_from_msg,
    lead_from_msg,
    odometry_to_ego,
    open_bag_reader,
    path_to_arrays,
    route_from_msg,
    time_to_ns,
)
from blockplan.config import PlannerConfig
from blockplan.messages.tick import model_status, reasoning_record
from blockplan.planner.loading import backend_of, weights_of
from blockplan.replay.metrics import replay_metrics, streaming_metrics
from blockplan.replay.publish import OutputPublisher
from blockplan.replay.record import ReplayLog
from blockplan.replay.topics import (
    InputTopics,
    ReplayInputError,
    ReplayOutputError,
    resolve_topics,
)
from blockplan.replay.truth import GroundTruthPaths, RecordedPath
from blockplan.runtime import (
    InvalidInput,
    PlannerRuntime,
    RuntimeLimits,
    RuntimePlanner,
    TickOutput,
    VirtualClock,
    VirtualWorker,
    plan_postprocess,
)
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

    @property
    def interrupted(self) -> bool:
        return bool(self.metrics.get("interrupted"))


class ReplayInterrupted(KeyboardInterrupt):
    """Ctrl-C during a replay. The bag was closed and the outputs of the ticks done were
    written, marked `"interrupted": true`: `result` (and, from `run_replay`, `outputs`)."""

    def __init__(self, result: ReplayResult, outputs: Any = None) -> None:
        super().__init__("replay interrupted")
        self.result, self.outputs = result, outputs


ROBOT_STATE_TOPIC = "/joint_states"  # what a robot bag records (sim/robot_bag.py)


def check_bag(bag: str | Path, config: PlannerConfig) -> InputTopics:
    """Open `bag` and resolve its input topics, as the replay will: the cheap checks (a
    missing, truncated or foreign bag; no configured camera) before any model is loaded.
    Raises BagError or ReplayInputError saying what is wrong."""
    with open_bag_reader(bag) as reader:
        topics = resolve_topics(config, reader.topics)
        if topics.odometry is None and ROBOT_STATE_TOPIC in reader.topics:
            raise ReplayInputError(
                f"{bag}: no odometry but {ROBOT_STATE_TOPIC}: a robot bag; replay it with "
                "--embodiment robot"
            )
        return topics


def _read_odometry_segments(reader, topic: str | None, jump_ns: int) -> list[RecordedPath]:
    """The recorded path, split wherever the stamps jump back (one segment per bag loop)."""
    segments: list[list[EgoState]] = [[]]
    if topic is None:
        return [RecordedPath([])]
    last = None
    for record in reader.records([topic]):
        try:
            ego = odometry_to_ego(reader.deserialize(record))
        except (BagError, OdometryError):
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
        weights: str,
        backend: str | None = None,
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
        self.first_stamp: int | None = None  # the inputs' header stamps seen (zero ticks)
        self.model_status = model_status(runtime.config, None, weights, backend)

    def advance(self, stamp: int, log_time: int) -> None:
        """Tick every period boundary up to `stamp` (exclusive of messages at `stamp`)."""
        if self.first_stamp is None:
            self.first_stamp = stamp
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
            args = accepted.stamp_ns, accepted.pose, accepted.trajectory.t
            truth = path.future(*args)
            why = "" if truth is not None else path.missing_reason(*args)
            if why == RecordedPath.ENDS and self.segment < len(self.paths) - 1:
                why = "its horizon crosses a time jump (the recording jumps back)"
            self.log.add_plan(accepted, reasoning_record(accepted), truth, why)
        self.log.add_tick(out)
        if len(self.log.ticks) % self.diag_every == 0:
            statuses = [self.model_status, *self.runtime.diagnostics()]
            self.publisher.diagnostics(statuses, out.now_ns, log_time)

    def why_no_ticks(self) -> str:
        """Why the replay ran no control tick (for a run that ran none)."""
        counts = self.runtime.health.counts()
        unstamped = counts.get("unstamped_image", 0) + counts.get("unstamped_odometry", 0)
        rate = self.runtime.config.control.rate_hz
        if self.first_stamp is None or self.sensor_now is None:
            if unstamped:
                return (
                    f"every camera and odometry message has header stamp 0 ({unstamped} "
                    "unstamped): replay's clock follows the header stamps, so it never started"
                )
            return "the bag has no camera or odometry messages"
        span_s = (self.sensor_now - self.first_stamp) / 1e9
        return (
            f"the inputs' header stamps span {span_s:.3f} s, less than one control period "
            f"({1.0 / rate:g} s at {rate:g} Hz); raise --rate or replay a longer bag"
        )

    def ingest(self, record: BagRecord) -> None:
        self.publisher.copy_input(record)
        if record.topic.startswith(GROUND_TRUTH_PREFIX):
            return
        try:
            msg = self.reader.deserialize(record)
        except BagError as e:
            self.runtime.on_invalid_input(InvalidInput.CORRUPT_MESSAGE, str(e))
            return
        topic = record.topic
        if topic in self.topics.cameras:
            stamp = time_to_ns(msg.header.stamp)
            if stamp <= 0:  # an unset header would drag the clock back to 1970
                self.runtime.on_invalid_input(
                    InvalidInput.UNSTAMPED_IMAGE, f"{topic}: header stamp {stamp}"
                )
                return
            self.advance(stamp, record.log_time_ns)
            try:
                frame = image_msg_to_frame(msg, self.topics.cameras[topic])
            except ImageDecodeError as e:
                self.runtime.on_invalid_input(InvalidInput.INVALID_IMAGE, f"{topic}: {e}")
                return
            self.runtime.on_frame(frame)
        elif topic == self.topics.odometry:
            try:
                ego = odometry_to_ego(msg)
            except OdometryError as e:
                self.runtime.on_invalid_input(InvalidInput.ODOMETRY_INVALID_QUATERNION, str(e))
                return
            if ego.stamp_ns <= 0:
                self.runtime.on_invalid_input(
                    InvalidInput.UNSTAMPED_ODOMETRY, f"header stamp {ego.stamp_ns}"
                )
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
        elif topic == self.topics.lane_pose:
            self.runtime.on_lane_pose(*lane_pose_from_msg(msg))
        elif topic == self.topics.lead:
            self.runtime.on_lead(*lead_from_msg(msg))
        elif topic == self.topics.beside:  # no header: stamped with the record's log time
            try:
                beside = beside_from_msg(msg)
            except ValueError as e:
                self.runtime.on_invalid_input(InvalidInput.BESIDE_INVALID, f"{topic}: {e}")
                return
            self.runtime.on_beside(record.log_time_ns, beside)
        elif topic == self.topics.route_path:
            try:
                stamp_ns, path = route_from_msg(msg, self.runtime.config.frames.odom)
            except ValueError as e:
                self.runtime.on_invalid_input(InvalidInput.ROUTE_INVALID, f"{topic}: {e}")
                return
            self.runtime.on_route(stamp_ns, path)


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
    planner: RuntimePlanner,
    config: PlannerConfig,
    timing: str = "ideal",
    rate_hz: float | None = None,
    limits: RuntimeLimits | None = None,
    progress: Callable[[int, int], None] | None = None,
    request_windows: Sequence[PlanWindow] | None = None,
) -> ReplayResult:
    """Replay `bag` into `out_dir/plans.mcap`; return the metrics and the replay log.
    `progress(done, total)` is called as input messages are consumed. Ctrl-C (a
    KeyboardInterrupt) stops the replay between messages: the bag is closed and
    `ReplayInterrupted` carries the result of the ticks done (`"interrupted": true`).
    `request_windows`: plan only these windows (a live run's requests,
    `blockplan.replay.requests`)."""
    rate_hz = config.control.rate_hz if rate_hz is None else rate_hz
    # validated: a rate of 0 is an error, not the default
    config = config.with_params({"control.timing": timing, "control.rate_hz": rate_hz})
    out_dir = Path(out_dir)
    plans_bag = prepare_output_dir(out_dir)
    limits = limits or RuntimeLimits()
    interrupted = False
    with open_bag_reader(bag) as reader:
        topics = resolve_topics(config, reader.topics)
        for missing in topics.missing_cameras:
            log.warning(
                "camera topic %s %s: that camera stays missing",
                missing,
                topics.why_missing(missing),
            )
        if topics.odometry is None:
            log.warning(
                "odometry %s %s: without odometry every tick publishes the fallback",
                config.topics.odom,
                topics.why_missing(config.topics.odom),
            )
        paths = _read_odometry_segments(reader, topics.odometry, seconds_to_ns(limits.time_jump_s))
        ground_truth = _read_ground_truth(reader)
        # Ground truth is not an input, but copied so the output bag shows it too.
        copied = tuple(t for t in reader.topics if t.startswith(GROUND_TRUTH_PREFIX))
        total = sum(reader.topics[t].num_messages for t in topics.all + copied)
        clock = VirtualClock()
        worker = VirtualWorker(planner, timing, plan_postprocess(config))
        runtime = PlannerRuntime(config, worker, clock, limits, request_windows=request_windows)
        try:
            with BagWriter(plans_bag, typestore=reader.typestore) as writer:
                publisher = OutputPublisher(writer, config)
                replayer = _Replayer(
                    reader,
                    topics,
                    runtime,
                    clock,
                    publisher,
                    paths,
                    ground_truth,
                    weights_of(planner),
                    backend_of(planner),
                )
                try:
                    for i, record in enumerate(reader.records(topics.all + copied)):
                        replayer.ingest(record)
                        if progress is not None:
                            progress(i + 1, total)
                except KeyboardInterrupt:
                    interrupted = True  # the bag closes below; metrics for the ticks done
                if not interrupted:
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
        rate_hz=config.control.rate_hz,
        bag=str(bag),
        camera_topics=sorted(topics.cameras),
        missing_camera_topics=list(topics.missing_cameras),
        odometry_topic=topics.odometry,
        lane_pose_topic=topics.lane_pose,
        lead_topic=topics.lead,
        beside_topic=topics.beside,
        route_topic=topics.route_path,
        ground_truth=GT_PATH_TOPIC if ground_truth else "recorded odometry",
        streaming=streaming_metrics(
            runtime_metrics,
            planner_streaming() if planner_streaming is not None else None,
        ),
        weights=weights_of(planner),
        **({} if request_windows is None else {"requests": _followed(request_windows, runtime)}),
    )
    if not metrics["ticks"]:
        metrics["no_ticks"] = replayer.why_no_ticks()
    if interrupted:
        metrics["interrupted"] = True
        metrics["interrupted_after_s"] = (
            round((replayer.sensor_now - replayer.first_stamp) / 1e9, 3)
            if replayer.sensor_now is not None and replayer.first_stamp is not None
            else 0.0
        )
        raise ReplayInterrupted(ReplayResult(metrics, replayer.log, topics, plans_bag))
    return ReplayResult(metrics, replayer.log, topics, plans_bag)


OUTPUT_NAMES = ("plans.mcap", "metrics.json", "report.html", "latency.png", "displacement.png")


@contextmanager
def no_empty_folders_left(*folders: Path) -> Iterator[None]:
    """If the block raises (a bad bag, a tampered model, Ctrl-C), the folders among `folders`
    and their parents that it created are removed again where they are still empty: a failed
    replay leaves no empty output folder behind, and never removes a file."""
    new: list[Path] = []
    for folder in folders:
        new += [p for p in (folder, *folder.parents) if not p.exists() and p not in new]
    try:
        yield
    except BaseException:
        for p in sorted(new, key=lambda p: len(p.parts), reverse=True):  # deepest first
            if p.is_dir() and not any(p.iterdir()):
                p.rmdir()
        raise


def prepare_output_dir(out_dir: Path) -> Path:
    """Create `out_dir` (or check it) for a replay's outputs and return its plans.mcap path.

    Refuses, with a ReplayOutputError saying what to do: a file; a folder under a file; a
    folder that cannot be created or written (read-only, no permission); a folder holding a
    plans.mcap already (an earlier replay's, never overwritten) or the staging folder of a
    replay that was killed while writing."""
    plans_bag = out_dir / "plans.mcap"
    if out_dir.exists() and not out_dir.is_dir():
        raise ReplayOutputError(f"--out {out_dir} is a file, not a folder; pass a folder")
    blocker = next((p for p in out_dir.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise ReplayOutputError(f"--out {out_dir}: cannot create it: {blocker} is a file")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir, prefix=".write-test-"):
            pass
    except OSError as e:
        raise ReplayOutputError(f"--out {out_dir}: cannot write there: {e.strerror or e}") from e
    staging = out_dir / f".{plans_bag.name}.partial"
    if staging.exists():
        raise ReplayOutputError(
            f"{staging} is left from a replay that was killed while writing (or one still "
            f"running into {out_dir}); remove it (rm -r {staging}) or pass another --out"
        )
    if plans_bag.exists():
        present = [n for n in OUTPUT_NAMES if (out_dir / n).exists()]
        raise ReplayOutputError(
            f"{out_dir} holds the outputs of an earlier replay ({', '.join(present)}; its "
            "metrics.json says whether it was complete); they are never overwritten: remove "
            f"them (rm {' '.join(str(out_dir / n) for n in present)}) or pass another --out"
        )
    return plans_bag
