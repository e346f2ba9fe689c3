"""`blockplan play BAG`: publish a recorded ROS 2 bag into a live graph, for machines
without rosbag2 (`ros2 bag play`).

The bag is read with `rosbags` (mcap or sqlite3, as replay reads it) and every message is
published as recorded: its CDR bytes go out unchanged through an rclpy publisher of the
recorded type, at the recorded log times (scaled by `rate`). Cameras
(`sensor_msgs/Image`, `CompressedImage`) are published best effort, `/tf_static` transient
local, everything else reliable — the QoS a ROS 2 recorder offers (`blockplan.bags.io`).

* `clock_hz`: publish `/clock` (the bag's log time) at that rate and before every message, so
  nodes with `use_sim_time` follow the bag (`ros2 bag play --clock`).
* `restamp`: shift every stamp in the messages onto the wall clock (the first message
  published now), for nodes on wall time; no `/clock` then.
* `silence`: stop publishing a topic after that many seconds of the bag (a camera that goes
  silent, odometry that stops) to try faults in a live graph.
* `wait_for`: before playing, wait until each of these topics has a subscriber (the first
  frames are not lost to discovery).
* `observer`: a `PlannerObserver` that records what the planner publishes; the player tells
  it when each camera frame went out (end-to-end latency).

Messages of a type this ROS installation does not know are skipped, with a warning.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rclpy
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rosbags.interfaces import QosDurability, QosReliability

from blockplan.bags import open_bag_reader
from blockplan.bags.io import default_qos
from blockplan.bags.restamp import Restamper, cdr_header_stamp_ns

log = logging.getLogger(__name__)

CAMERA_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")
CLOCK_TOPIC = "/clock"
CLOCK_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.BEST_EFFORT
)


@dataclass(frozen=True)
class PlayOptions:
    rate: float = 1.0
    clock_hz: float | None = None
    topics: tuple[str, ...] = ()  # only these (all when empty)
    exclude_topics: tuple[str, ...] = ()
    start_offset_s: float = 0.0
    duration_s: float | None = None
    delay_s: float = 0.0
    restamp: bool = False
    silence: dict[str, float] = field(default_factory=dict)  # topic -> bag seconds
    wait_for: tuple[str, ...] = ()
    wait_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"rate={self.rate}: must be > 0")
        if self.clock_hz is not None and not self.clock_hz > 0:
            raise ValueError(f"clock={self.clock_hz}: must be > 0 Hz")
        if self.clock_hz is not None and self.restamp:
            raise ValueError("--clock and --restamp exclude each other (restamped is wall time)")


@dataclass
class PlayResult:
    published: dict[str, int]
    skipped_types: dict[str, str]  # topic -> type this installation lacks
    bag_seconds: float
    wall_seconds: float
    interrupted: bool = False


def ros_qos(topic: str, msgtype: str) -> QoSProfile:
    """The rclpy QoS of what a recorder offers for this topic (`blockplan.bags.io`)."""
    qos = default_qos(topic, msgtype)
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=qos.depth,
        reliability=ReliabilityPolicy.BEST_EFFORT
        if qos.reliability == QosReliability.BEST_EFFORT
        else ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL
        if qos.durability == QosDurability.TRANSIENT_LOCAL
        else DurabilityPolicy.VOLATILE,
    )


def _message_class(msgtype: str) -> Any:
    from rosidl_runtime_py.utilities import get_message

    try:
        return get_message(msgtype)
    except (AttributeError, ModuleNotFoundError, ValueError):
        return None


class BagPlayer:
    """Plays one bag on `node` (see the module docstring)."""

    def __init__(
        self,
        node: Node,
        bag: str | Path,
        options: PlayOptions,
        on_camera_published: Callable[[str, int, int], None] | None = None,
    ) -> None:
        self.node, self.bag, self.options = node, Path(bag), options
        self.on_camera_published = on_camera_published  # (topic, stamp_ns, wall_ns)
        self._stop = False

    def stop(self) -> None:
        self._stop = True

    def _wanted(self, topic: str) -> bool:
        if self.options.topics and topic not in self.options.topics:
            return False
        if topic in self.options.exclude_topics:
            return False
        return not (self.options.clock_hz is not None and topic == CLOCK_TOPIC)

    def _wait_for_subscribers(self, publishers: dict[str, Any]) -> None:
        missing = [t for t in self.options.wait_for if t not in publishers]
        if missing:
            raise ValueError(f"--wait-for {missing}: not topics this bag plays")
        deadline = time.monotonic() + self.options.wait_timeout_s
        while not self._stop:
            waiting = [
                t for t in self.options.wait_for if publishers[t].get_subscription_count() < 1
            ]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no subscriber on {waiting} after {self.options.wait_timeout_s:g} s"
                )
            time.sleep(0.05)

    def play(self) -> PlayResult:
        opts = self.options
        from rosgraph_msgs.msg import Clock

        with open_bag_reader(self.bag) as reader:
            publishers: dict[str, Any] = {}
            skipped: dict[str, str] = {}
            for topic, summary in sorted(reader.topics.items()):
                if not self._wanted(topic):
                    continue
                cls = _message_class(summary.msgtype)
                if cls is None:
                    skipped[topic] = summary.msgtype
                    log.warning("skipping %s: type %s is not installed", topic, summary.msgtype)
                    continue
                publishers[topic] = self.node.create_publisher(
                    cls, topic, ros_qos(topic, summary.msgtype)
                )
            clock_pub = None
            if opts.clock_hz is not None:
                clock_pub = self.node.create_publisher(Clock, CLOCK_TOPIC, CLOCK_QOS)
            self._wait_for_subscribers(
                {**publishers, CLOCK_TOPIC: clock_pub} if clock_pub else publishers
            )
            time.sleep(opts.delay_s)

            begin = reader.start_time_ns + int(opts.start_offset_s * 1e9)
            end = None if opts.duration_s is None else begin + int(opts.duration_s * 1e9)
            silence_at = {t: reader.start_time_ns + int(s * 1e9) for t, s in opts.silence.items()}
            wall0 = time.monotonic_ns()
            epoch0 = time.time_ns()
            # Said once, so whoever drives a run knows when bag time `begin` was played.
            print(
                f"playing {self.bag} from bag time {begin} ns at wall time {epoch0} ns",
                file=sys.stderr,
                flush=True,
            )

            def bag_to_wall_epoch(stamp_ns: int) -> int:
                return epoch0 + int((stamp_ns - begin) / opts.rate)

            restamp = Restamper(reader, bag_to_wall_epoch) if opts.restamp else None
            published = {t: 0 for t in publishers}
            last_clock = [-1]

            def publish_clock(bag_ns: int) -> None:
                if clock_pub is None or bag_ns <= last_clock[0]:
                    return
                sec, nanosec = divmod(bag_ns, 1_000_000_000)
                msg = Clock()
                msg.clock.sec, msg.clock.nanosec = int(sec), int(nanosec)
                clock_pub.publish(msg)
                last_clock[0] = bag_ns

            def wait_until(bag_ns: int) -> None:
                target = wall0 + int((bag_ns - begin) / opts.rate)
                period = None if clock_pub is None else int(1e9 / opts.clock_hz)
                while not self._stop:
                    now = time.monotonic_ns()
                    if now >= target:
                        return
                    if period is None:
                        time.sleep((target - now) / 1e9)
                        continue
                    # /clock between messages, at the clock rate, never past the next one.
                    time.sleep(min(target - now, period) / 1e9)
                    now = time.monotonic_ns()
                    publish_clock(min(bag_ns, begin + int((now - wall0) * opts.rate)))

            last_bag_ns = begin
            try:
                for record in reader.records(sorted(publishers)):
                    t = record.log_time_ns
                    if t < begin:
                        continue
                    if self._stop or (end is not None and t > end):
                        break
                    wait_until(t)
                    if self._stop:
                        break
                    publish_clock(t)
                    last_bag_ns = t
                    if record.topic in silence_at and t >= silence_at[record.topic]:
                        continue
                    data = restamp(record) if restamp is not None else record.rawdata
                    publishers[record.topic].publish(data)
                    published[record.topic] += 1
                    if self.on_camera_published is not None and record.msgtype in CAMERA_TYPES:
                        self.on_camera_published(
                            record.topic, cdr_header_stamp_ns(data), time.time_ns()
                        )
            except KeyboardInterrupt:
                self._stop = True
            return PlayResult(
                published=published,
                skipped_types=skipped,
                bag_seconds=(last_bag_ns - begin) / 1e9,
                wall_seconds=(time.monotonic_ns() - wall0) / 1e9,
                interrupted=self._stop,
            )


def run_player(
    bag: str | Path,
    options: PlayOptions,
    observe_dir: str | Path | None = None,
    observe_namespace: str = "",
    linger_s: float = 1.0,
) -> PlayResult:
    """Init rclpy, play the bag (and observe the planner when `observe_dir` is given), shut
    down. Ctrl-C stops playing; what was observed is still written."""
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = Node("blockplan_player")
    observer = None
    executor = spinner = None
    player = None
    try:
        if observe_dir is not None:
            import threading

            from blockplan.ros.observer import PlannerObserver

            observer = PlannerObserver(node, namespace=observe_namespace)
            executor = SingleThreadedExecutor()
            executor.add_node(node)
            spinner = threading.Thread(target=executor.spin, daemon=True)
            spinner.start()
        player = BagPlayer(
            node,
            bag,
            options,
            on_camera_published=None if observer is None else observer.camera_published,
        )
        try:
            result = player.play()
            if observer is not None:
                time.sleep(linger_s)  # the last plans and diagnostics
        except KeyboardInterrupt:
            result = PlayResult({}, {}, 0.0, 0.0, interrupted=True)
        if observer is not None:
            observer.write(Path(observe_dir))
        return result
    finally:
        if executor is not None:
            executor.shutdown(timeout_sec=1.0)
            # The spin thread must be out of its wait before the node and the context go:
            # a thread still inside rclpy's C++ wait at exit aborts the process
            # ("terminate called without an active exception").
            spinner.join(timeout=5.0)
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
