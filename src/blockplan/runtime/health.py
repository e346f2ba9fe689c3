"""Health counters and the diagnostics snapshot of the runtime.

Counters only grow; each is a member of an enum, its value the key in `counts()`,
metrics.json and /diagnostics: `Count` (the loop's), `InvalidInput` (rejected inputs, each also
added to `invalid_inputs`) and one `comfort_<check>` per comfort check that failed. Latencies keep a bounded window
of recent samples for p50 / p99: `inference` (planner call + post-processing), `tick` (one
tick without the planner) and `plan_age` (age of the published plan).

* `deadline_misses`: ticks whose own work took longer than the control period, or that fired
  more than half a period late (the timer could not keep the rate);
* `inference_overruns`: plans whose inference took longer than one control period;
* `fallbacks`: ticks that published the fallback; `plans`: plans that passed the gates;
* `invalid_plans`: plans rejected by the (hard) validity gates; `planner_errors`: planner
  exceptions; `uncomfortable_plans`: published plans beyond a comfort limit, with one
  `comfort_<check>` count per failed check (`comfort_max_abs_jerk`, …);
* `requests_without_lane_pose`: requests of a planner that reads the lane pose made with
  none (no /localization/lane_pose, or none recent enough): the planner plans without it;
* `requests_without_lead`: the same for a planner that reads the car ahead
  (/perception/lead_vehicle);
* `requests_without_beside`: the same for a planner that reads the lanes beside
  (/perception/lanes_beside);
* `requests_without_route`: the same for a planner that reads the route ahead
  (/planning/route; also when the ego is more than 10 m from the newest path);
* `waits` / `degraded_requests`: ticks where a stale camera held back / degraded a request;
* `time_jumps`: resets after a stamp or the clock went back; `discarded_results`: plans from
  before a reset (or older than the newest) that were dropped; `unchanged_window_replans`:
  plans of the same window as the newest plan, dropped as adding nothing (a window is planned
  again only when a degraded request's window has since become complete);
* `unfinished_plans`: plans still in flight when a replay ended;
* `duplicate_frames` / `out_of_order_frames`, `duplicate_odometry` / `out_of_order_odometry`:
  inputs dropped as re-sent or late (not invalid); `rate_limited_frames`: a camera's frames
  dropped as closer together than `RuntimeLimits.max_camera_rate_hz` (a flood); `odometry_restarts`: history restarts after
  too many consecutive odometry outliers;
* `window_frames_shared` / `window_frames_new`: frames of requested windows that an earlier
  request had used too / had not (streaming reuses the former's K/V).

`frame_spacing_error` (a latency window): per request whose window is not padded, the largest
distance of a window frame from its trained time (newest − k·frame_period_s).
`encode_prefill`: the planner's encode + prompt + prefill stages of every plan (when it
reports them), what the streaming window saves.
"""

from __future__ import annotations

import enum
import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# diagnostic_msgs/DiagnosticStatus levels
OK, WARN, ERROR, STALE = 0, 1, 2, 3


class Count(str, enum.Enum):
    """The runtime's counters (the module docstring says what each counts)."""

    TICKS = "ticks"
    PLANS = "plans"
    FALLBACKS = "fallbacks"
    DEADLINE_MISSES = "deadline_misses"
    INFERENCE_OVERRUNS = "inference_overruns"
    PLANNER_ERRORS = "planner_errors"
    INVALID_PLANS = "invalid_plans"
    UNCOMFORTABLE_PLANS = "uncomfortable_plans"
    GUARDED_ROLLOUTS = "guarded_rollouts"  # rollouts the lane guard dropped from accepted plans
    INVALID_INPUTS = "invalid_inputs"
    REQUESTS = "requests"
    REQUESTS_WITHOUT_LANE_POSE = "requests_without_lane_pose"
    REQUESTS_WITHOUT_LEAD = "requests_without_lead"
    REQUESTS_WITHOUT_BESIDE = "requests_without_beside"
    REQUESTS_WITHOUT_ROUTE = "requests_without_route"
    DEGRADED_REQUESTS = "degraded_requests"
    WAITS = "waits"
    PADDED_WINDOWS = "padded_windows"
    WINDOW_FRAMES_SHARED = "window_frames_shared"
    WINDOW_FRAMES_NEW = "window_frames_new"
    TIME_JUMPS = "time_jumps"
    DISCARDED_RESULTS = "discarded_results"
    UNCHANGED_WINDOW_REPLANS = "unchanged_window_replans"
    UNFINISHED_PLANS = "unfinished_plans"
    DUPLICATE_FRAMES = "duplicate_frames"
    RATE_LIMITED_FRAMES = "rate_limited_frames"
    OUT_OF_ORDER_FRAMES = "out_of_order_frames"
    DUPLICATE_ODOMETRY = "duplicate_odometry"
    OUT_OF_ORDER_ODOMETRY = "out_of_order_odometry"
    ODOMETRY_RESTARTS = "odometry_restarts"
    OUT_OF_ORDER_JOINT_STATES = "out_of_order_joint_states"  # robots: an older /joint_states


class InvalidInput(str, enum.Enum):
    """Inputs the runtime or its adapter (node, replay) could not use."""

    UNKNOWN_CAMERA = "unknown_camera"  # a frame from a camera the config does not name
    INVALID_IMAGE = "invalid_image"  # undecodable, wrong size or encoding
    OVERSIZED_IMAGE = "oversized_image"  # more pixels than RuntimeLimits.max_image_pixels
    UNSTAMPED_IMAGE = "unstamped_image"  # header stamp 0
    ODOMETRY_NONFINITE = "odometry_nonfinite"
    ODOMETRY_OUTLIER = "odometry_outlier"
    ODOMETRY_INVALID_QUATERNION = "odometry_invalid_quaternion"
    UNSTAMPED_ODOMETRY = "unstamped_odometry"
    CORRUPT_MESSAGE = "corrupt_message"  # a bag record that does not deserialise
    INVALID_JOINT_STATE = "invalid_joint_state"  # robots: joints missing, non-finite values
    INVALID_INSTRUCTION = "invalid_instruction"  # robots: an empty instruction
    LANE_POSE_NONFINITE = "lane_pose_nonfinite"  # a lane pose with a NaN or infinity
    LEAD_INVALID = "lead_invalid"  # a car-ahead report with a NaN or non-positive gap, or no speed
    # a lanes-beside report with another layout, a negative or fractional lane count, a
    # negative gap or a car without a finite speed
    BESIDE_INVALID = "beside_invalid"
    ROUTE_INVALID = "route_invalid"  # a route path of another shape, or with a NaN or infinity
    # a route command the planner's schema does not have (the previous one is kept)
    UNKNOWN_ROUTE_COMMAND = "unknown_route_command"


# What `blockplan: inputs` reports: dropped and rejected inputs (every InvalidInput too).
INPUT_COUNTS = (
    Count.DUPLICATE_FRAMES,
    Count.RATE_LIMITED_FRAMES,
    Count.OUT_OF_ORDER_FRAMES,
    Count.DUPLICATE_ODOMETRY,
    Count.OUT_OF_ORDER_ODOMETRY,
    Count.ODOMETRY_RESTARTS,
    Count.OUT_OF_ORDER_JOINT_STATES,
    Count.INVALID_INPUTS,
)
COMFORT_PREFIX = "comfort_"


@dataclass(frozen=True)
class DiagnosticStatusData:
    """One diagnostic_msgs/DiagnosticStatus, ROS-free (bags.diagnostics_to_msg converts it)."""

    name: str
    level: int
    message: str
    hardware_id: str = "blockplan"
    values: dict[str, Any] = field(default_factory=dict)


def percentiles_ms(samples_ns: list[int] | deque) -> dict[str, float | None]:
    if not samples_ns:
        return {"p50": None, "p99": None, "max": None}
    ms = np.asarray(samples_ns, dtype=np.float64) / 1e6
    return {
        "p50": round(float(np.percentile(ms, 50)), 3),
        "p99": round(float(np.percentile(ms, 99)), 3),
        "max": round(float(ms.max()), 3),
    }


class Health:
    """Thread-safe counters and latency windows."""

    def __init__(self, latency_window: int = 1000) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[Count] = Counter(dict.fromkeys(Count, 0))
        self._invalid: Counter[InvalidInput] = Counter(dict.fromkeys(InvalidInput, 0))
        self._comfort: Counter[str] = Counter()
        self._latency: dict[str, deque[int]] = {
            name: deque(maxlen=latency_window)
            for name in (
                "inference",
                "inference_cpu",
                "tick",
                "plan_age",
                "frame_spacing_error",
                "encode_prefill",
            )
        }

    def count(self, counter: Count, n: int = 1) -> None:
        counter = Count(counter)  # ValueError naming an unknown counter
        with self._lock:
            self._counts[counter] += n

    def count_invalid(self, kind: InvalidInput) -> None:
        """One rejected input of `kind` (also added to `invalid_inputs`)."""
        kind = InvalidInput(kind)
        with self._lock:
            self._invalid[kind] += 1
            self._counts[Count.INVALID_INPUTS] += 1

    def count_comfort(self, check: str) -> None:
        """One published plan beyond the comfort limit `check` (a gate check's name)."""
        with self._lock:
            self._comfort[check] += 1

    def record_latency(self, which: str, latency_ns: int) -> None:
        with self._lock:
            self._latency[which].append(int(latency_ns))

    def counts(self) -> dict[str, int]:
        """Every counter by name: `Count`s, `InvalidInput`s, then `comfort_<check>`s."""
        with self._lock:
            return {
                **{c.value: n for c, n in self._counts.items()},
                **{k.value: n for k, n in self._invalid.items()},
                **{f"{COMFORT_PREFIX}{check}": n for check, n in self._comfort.items()},
            }

    def input_counts(self) -> dict[str, int]:
        """The counters of dropped and rejected inputs (`INPUT_COUNTS`, every `InvalidInput`)."""
        with self._lock:
            counts = {c.value: self._counts[c] for c in INPUT_COUNTS}
            counts.update((k.value, n) for k, n in self._invalid.items())
            return counts

    def comfort_counts(self) -> dict[str, int]:
        """`comfort_<check>` per comfort check that failed so far, sorted by name."""
        with self._lock:
            return {f"{COMFORT_PREFIX}{c}": n for c, n in sorted(self._comfort.items())}

    def latencies_ms(self) -> dict[str, dict[str, float | None]]:
        with self._lock:
            return {name: percentiles_ms(list(s)) for name, s in self._latency.items()}
