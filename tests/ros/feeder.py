"""A live input source with fault knobs for the fault-matrix tests (tests/ros/test_live_fault_matrix.py).

`Feeder` publishes, from a thread of the test process, what a vehicle's drivers would: the
four cameras (a `blockplan simulate` bag's frames, 10 Hz), the lane pose, the car ahead and
the lanes beside (the bag's, 20 Hz), the route command and the router's path (10 Hz),
odometry (20 Hz) and
`/clock` (100 Hz) for a node on `use_sim_time`. The bag loops without a seam: its messages
are restamped onto a sim timeline that keeps running across loops, and the odometry is
synthesized on that timeline (straight ahead at a constant speed), so a loop of the bag is no
fault; only `jump_back` moves the timeline (and /clock) back, as a looping `ros2 bag play`
does.

Faults are switched from the test thread while it plays: `silence(topic)` / `resume(topic)`,
`garble(topic, fn)` (fn(msg, n) → the message to publish instead, n counting the garbled
ones) / `heal(topic)`, `jump_back(seconds)`. `sim_ns()` is the timeline's now.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from blockplan.bags import ModuleMessages, ego_to_odometry, open_bag_reader
from blockplan.ros.player import CLOCK_QOS, CLOCK_TOPIC, ros_qos
from blockplan.types import EgoState
from tests.ros.live import CAMERA_TOPICS

ODOM_TOPIC = "/odom"
LANE_POSE_TOPIC = "/localization/lane_pose"
LEAD_TOPIC = "/perception/lead_vehicle"
BESIDE_TOPIC = "/perception/lanes_beside"
ROUTE_TOPIC = "/planning/route_command"
PATH_TOPIC = "/planning/route"  # the router's path (nav_msgs/Path in odom)
BAG_TOPICS = (*CAMERA_TOPICS, LANE_POSE_TOPIC, LEAD_TOPIC, BESIDE_TOPIC, ROUTE_TOPIC, PATH_TOPIC)
ODOM_PERIOD_NS = 50_000_000
CLOCK_PERIOD_NS = 10_000_000
CLOCK_LEAP_NS = 60_000_000
SPEED_MPS = 22.5  # about the simulated highway's
LANE_Y_M = -4.0

Garble = Callable[[Any, int], Any]


class Feeder:
    """Publishes on `node` (any rclpy node; the test's watch node) from its own thread."""

    def __init__(self, node: Any, bag: Path) -> None:
        from rclpy.serialization import deserialize_message
        from rosgraph_msgs.msg import Clock

        self.ns = ModuleMessages()
        self._clock_msg = Clock
        self._lock = threading.Lock()
        self._publishers: dict[str, Any] = {}
        # (bag time − bag start, topic, message) in time order, deserialized once.
        self._items: list[tuple[int, str, Any]] = []
        with open_bag_reader(bag) as reader:
            start = reader.start_time_ns
            for record in reader.records(BAG_TOPICS):
                cls = self.ns.message_class(record.msgtype)
                if record.topic not in self._publishers:
                    qos = ros_qos(record.topic, record.msgtype)
                    self._publishers[record.topic] = node.create_publisher(cls, record.topic, qos)
                msg = deserialize_message(record.rawdata, cls)
                self._items.append((record.log_time_ns - start, record.topic, msg))
            span = reader.end_time_ns - start
        odometry = self.ns.message_class("nav_msgs/msg/Odometry")
        self._publishers[ODOM_TOPIC] = node.create_publisher(
            odometry, ODOM_TOPIC, ros_qos(ODOM_TOPIC, "nav_msgs/msg/Odometry")
        )
        self._clock_pub = node.create_publisher(Clock, CLOCK_TOPIC, CLOCK_QOS)
        self._offsets = [t for t, _, _ in self._items]
        self.loop_ns = span + ODOM_PERIOD_NS  # one bag loop on the timeline
        self.start_ns = start  # the timeline starts at the bag's start
        self._base_ns = start  # timeline now = base + monotonic − mono0
        self._mono0 = time.monotonic_ns()
        self._loop, self._index = 0, 0
        self._next_odom_ns = start
        self._silenced: set[str] = set()
        self._garbled: dict[str, tuple[Garble, list[int]]] = {}
        self.published: dict[str, int] = dict.fromkeys(self._publishers, 0)
        self.jumps: list[tuple[int, int, int]] = []  # (wall ns, timeline from, timeline to)
        # /clock steps forward longer than CLOCK_LEAP_NS (this thread was stalled): a node
        # timer skips the periods inside one, which is no fault of the node.
        self.leaps: list[tuple[int, int]] = []
        self._last_clock: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)

    # ------------------------------------------------------------------ control

    def start(self) -> None:
        with self._lock:
            self._mono0 = time.monotonic_ns()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def sim_ns(self) -> int:
        with self._lock:
            return self._now()

    def silence(self, topic: str) -> int:
        """Stop publishing `topic`; the timeline's now."""
        with self._lock:
            self._silenced.add(topic)
            return self._now()

    def resume(self, topic: str) -> int:
        with self._lock:
            self._silenced.discard(topic)
            return self._now()

    def garble(self, topic: str, fn: Garble) -> int:
        """Publish fn(msg, n) instead of each message of `topic` (n: 0, 1, …)."""
        with self._lock:
            self._garbled[topic] = (fn, [0])
            return self._now()

    def heal(self, topic: str) -> int:
        with self._lock:
            self._garbled.pop(topic, None)
            return self._now()

    def jump_back(self, seconds: float) -> tuple[int, int]:
        """The timeline (and /clock) goes back `seconds` at once, as a looping bag does; the
        bag plays on from there. (from, to) on the timeline."""
        with self._lock:
            before = self._now()
            self._base_ns -= int(seconds * 1e9)
            after = self._now()
            rel = after - self.start_ns
            self._loop = rel // self.loop_ns
            self._index = bisect.bisect_left(self._offsets, rel % self.loop_ns)
            self._next_odom_ns = after - (after - self.start_ns) % ODOM_PERIOD_NS
            self.jumps.append((time.time_ns(), before, after))
        self._last_clock = None  # the jump itself is no leap
        self._publish_clock(after)
        return before, after

    # ------------------------------------------------------------------ playing

    def _now(self) -> int:
        return self._base_ns + time.monotonic_ns() - self._mono0

    def _run(self) -> None:
        next_clock = 0
        while not self._stop.is_set():
            with self._lock:
                now = self._now()
                due = self._due(now)
            for topic, msg in due:
                self._publishers[topic].publish(msg)
                self.published[topic] += 1
            if now >= next_clock or due:
                self._publish_clock(now)
                next_clock = now + CLOCK_PERIOD_NS
            with self._lock:
                wake = min(self._next_item_ns(), self._next_odom_ns, next_clock)
                wait = (wake - self._now()) / 1e9
            if wait > 0:
                time.sleep(min(wait, 0.01))

    def _next_item_ns(self) -> int:
        return self.start_ns + self._loop * self.loop_ns + self._offsets[self._index]

    def _due(self, now: int) -> list[tuple[str, Any]]:
        """The messages due by `now` (restamped, garbled or left out as switched)."""
        out = []
        while self._next_item_ns() <= now:
            at = self._next_item_ns()
            _, topic, msg = self._items[self._index]
            self._index += 1
            if self._index == len(self._items):
                self._index, self._loop = 0, self._loop + 1
            if hasattr(msg, "header"):
                msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(at, 1_000_000_000)
            out.append((topic, msg))
        while self._next_odom_ns <= now:
            out.append((ODOM_TOPIC, self._odometry(self._next_odom_ns)))
            self._next_odom_ns += ODOM_PERIOD_NS
        kept = []
        for topic, msg in out:
            if topic in self._silenced:
                continue
            if topic in self._garbled:
                fn, count = self._garbled[topic]
                msg = fn(msg, count[0])
                count[0] += 1
            kept.append((topic, msg))
        return kept

    def _odometry(self, stamp_ns: int) -> Any:
        x = SPEED_MPS * (stamp_ns - self.start_ns) / 1e9
        ego = EgoState(stamp_ns=stamp_ns, x=x, y=LANE_Y_M, yaw=0.0, v_x=SPEED_MPS)
        return ego_to_odometry(self.ns, ego)

    def _publish_clock(self, now: int) -> None:
        last, self._last_clock = self._last_clock, now
        if last is not None and now - last > CLOCK_LEAP_NS:
            self.leaps.append((last, now))
        msg = self._clock_msg()
        msg.clock.sec, msg.clock.nanosec = divmod(now, 1_000_000_000)
        self._clock_pub.publish(msg)
