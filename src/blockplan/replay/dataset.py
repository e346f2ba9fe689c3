"""A training set from recorded ROS 2 bags (`blockplan dataset --from-bags`).

The same shard format as the simulator's data set (sim/dataset.py), one shard per bag, so
`blockplan train --data DIR` reads it as it reads a simulated one. Per sample:

* the camera window, the ego history, the route command and the perception and route
  inputs (lane pose, car ahead, lanes beside, route ahead, where the bag has them) are the
  `Observation` the runtime assembles while replaying the bag in ideal timing (`replay_bag` with a recording planner,
  the path `blockplan replay` and the live node take);
* the future trajectory is the bag's own odometry, interpolated at the label horizon's
  times and expressed in the ego frame at the sample time, as sim/labels.py does with the
  simulator's states;
* the meta behaviour follows from that motion by the simulator's rules
  (`sim.labels.meta_behaviour`): the speeds, the heading change and the lateral progress
  across the lanes. The lateral progress is the summed change of the lane pose's offset
  where the bag has /localization/lane_pose over the whole horizon (a lane crossing's jump
  by a lane width is bridged by the step before it); without it, how far the end of the 5 s
  path lies beside the constant-curvature arc from the start pose with the same length and
  heading change (`arc_offset`). A bag has no map: the future "crosses a junction" when the
  route command at t0 is one a navigation gives at a junction (`straight`, `turn_left`,
  `turn_right`; the simulator knows the junction itself);
* critical objects and the explanation cannot be labelled from a bag: the shard's
  `known_sections` marks them unknown (their slots hold "no" and an empty explanation) and
  the training loss skips their tokens (train/objective.py).

Samples start once the ego history lies wholly after the bag's first odometry message (the
runtime cannot derive an acceleration before it), every `sample_period_s`, and need the
horizon's odometry behind them without a gap over `MAX_ODOM_GAP_S`; a sample whose future has
the vehicle reversing is left out, as in the simulator's set. Stamps in a shard are relative
to the bag's first odometry message (`stamp_origin_ns` holds it).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockplan.bags import (
    BagError,
    OdometryError,
    lane_pose_from_msg,
    odometry_to_ego,
    open_bag_reader,
)
from blockplan.config import PlannerConfig, default_params_path, load_config
from blockplan.errors import UserError
from blockplan.replay.observations import RecordingPlanner
from blockplan.schema import SECTION_NAMES, default_schema, ego_history_array, render_answer_text
from blockplan.sim.dataset import (
    FORMAT_VERSION,
    LATERAL_ORDER,
    LONGITUDINAL_ORDER,
    MANIFEST,
    REVERSING_SPEED_MPS,
    SPLITS,
    save_shard,
)
from blockplan.sim.labels import (
    FUTURE_DT_S,
    HORIZON_S,
    LANE_CHANGE_M,
    LONGITUDINAL_WINDOW_S,
    meta_behaviour,
    to_ego_frame,
)
from blockplan.types import (
    CRITICAL_OBJECT_KEYS,
    NUM_WAYPOINTS,
    ROUTE_AHEAD_M,
    WAYPOINT_PERIOD_S,
    DrivingAnswer,
    Observation,
    seconds_to_ns,
)

CREATED_BY = "blockplan dataset --from-bags"
MAX_ODOM_GAP_S = 0.5  # a longer gap in the odometry: no label across it
# The sections a bag labels (the others are unknown): meta behaviour and trajectory.
BAG_KNOWN_SECTIONS = ("future_meta_behavior", "trajectory")
# The route commands a navigation gives at a junction: the future "crosses a junction"
JUNCTION_COMMANDS = ("straight", "turn_left", "turn_right")


class BagDatasetError(UserError, ValueError):
    """A bag that cannot be labelled, or a data set folder written with other options."""


@dataclass(frozen=True)
class BagDatasetParams:
    """How samples are cut from the bags (the planner params file decides the topics, the
    camera window and the control rate)."""

    sample_period_s: float = 0.5
    # The first sample time (s after the bag's first odometry message); None: the first
    # tick whose ego history lies wholly after it.
    start_s: float | None = None
    # Shares of the bags (by a hash of the bag's name) that go to val and test; 0: all train.
    val_fraction: float = 0.0
    test_fraction: float = 0.0
    # Store the frames at this (height, width) (the vision tower's resampling), not at the
    # cameras' own size: a vehicle's cameras make shards far larger than any model reads.
    # None: as recorded.
    image_size: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.image_size is not None and (len(self.image_size) != 2 or min(self.image_size) < 1):
            raise BagDatasetError(f"image_size={self.image_size}: must be (height, width) >= 1")
        if not self.sample_period_s > 0:
            raise BagDatasetError(f"sample_period={self.sample_period_s}: must be > 0 s")
        if self.start_s is not None and not self.start_s >= 0:
            raise BagDatasetError(f"start={self.start_s}: must be >= 0 s")
        if not (
            self.val_fraction >= 0
            and self.test_fraction >= 0
            and self.val_fraction + self.test_fraction < 1
        ):
            raise BagDatasetError(
                f"val_fraction={self.val_fraction}, test_fraction={self.test_fraction}: "
                "must be >= 0 with a sum < 1"
            )


class Odometry:
    """A bag's odometry as arrays, oldest first: stamps (ns), x, y, unwrapped yaw, v_x."""

    def __init__(self, bag: str | Path, stamps: np.ndarray, rows: np.ndarray) -> None:
        self.bag = str(bag)
        self.stamps = stamps  # (S,) int64
        self.x, self.y, self.yaw, self.speed = rows.T  # (S,) each

    @property
    def origin_ns(self) -> int:
        return int(self.stamps[0])

    def rel_s(self, stamp_ns: int | np.ndarray) -> np.ndarray:
        return (np.asarray(stamp_ns, dtype=np.int64) - self.origin_ns) / 1e9

    def covers(self, t0_ns: int) -> bool:
        """Whether the odometry holds [t0, t0 + horizon] with no gap over MAX_ODOM_GAP_S."""
        end = t0_ns + seconds_to_ns(HORIZON_S)
        if t0_ns < self.stamps[0] or end > self.stamps[-1]:
            return False
        lo = np.searchsorted(self.stamps, t0_ns, side="right") - 1
        hi = np.searchsorted(self.stamps, end, side="left")
        return not np.any(np.diff(self.stamps[lo : hi + 1]) > seconds_to_ns(MAX_ODOM_GAP_S))

    def at(self, stamp_ns: int | np.ndarray, values: np.ndarray) -> np.ndarray:
        t = self.rel_s(self.stamps)
        return np.interp(self.rel_s(stamp_ns), t, values)

    def window(self, t0_ns: int, end_ns: int, values: np.ndarray) -> np.ndarray:
        """`values` at t0, at every message strictly between, and at `end_ns`."""
        inside = (self.stamps > t0_ns) & (self.stamps < end_ns)
        ends = self.at(np.array([t0_ns, end_ns]), values)
        return np.concatenate([[ends[0]], values[inside], [ends[1]]])


def read_odometry(bag: str | Path, topic: str | None, odom_name: str) -> Odometry:
    """The bag's odometry; a bag without any is a one-line error."""
    if topic is None:
        raise BagDatasetError(
            f"{bag}: no odometry on {odom_name} (nav_msgs/msg/Odometry): a training set needs "
            "the vehicle's own motion for its future trajectory (set topics.odom in --params)"
        )
    stamps, rows = [], []
    with open_bag_reader(bag) as reader:
        for record in reader.records([topic]):
            try:
                ego = odometry_to_ego(reader.deserialize(record))
            except (BagError, OdometryError):
                continue
            if ego.stamp_ns <= 0 or not np.isfinite([ego.x, ego.y, ego.yaw, ego.v_x]).all():
                continue
            if stamps and ego.stamp_ns <= stamps[-1]:
                if ego.stamp_ns < stamps[-1] - seconds_to_ns(1.0):
                    raise BagDatasetError(
                        f"{bag}: the odometry stamps jump back at {ego.stamp_ns} ns (a looped "
                        "recording): split the bag where its clock restarts"
                    )
                continue  # a duplicate or a slightly late message
            stamps.append(ego.stamp_ns)
            rows.append([ego.x, ego.y, ego.yaw, ego.v_x])
    if len(stamps) < 2:
        raise BagDatasetError(
            f"{bag}: {len(stamps)} usable odometry message(s) on {topic}: a training set needs "
            "the vehicle's own motion for its future trajectory"
        )
    rows_arr = np.asarray(rows, dtype=np.float64)
    rows_arr[:, 2] = np.unwrap(rows_arr[:, 2])
    return Odometry(bag, np.asarray(stamps, dtype=np.int64), rows_arr)


def read_lane_offsets(bag: str | Path, topic: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(stamps ns, left-positive lane offsets m) of the bag's lane pose, oldest first."""
    stamps, offsets = [], []
    if topic is not None:
        with open_bag_reader(bag) as reader:
            for record in reader.records([topic]):
                try:
                    stamp, offset, _ = lane_pose_from_msg(reader.deserialize(record))
                except BagError:
                    continue
                if np.isfinite(offset) and stamp > 0:
                    stamps.append(stamp)
                    offsets.append(offset)
    order = np.argsort(np.asarray(stamps, dtype=np.int64), kind="stable")
    return np.asarray(stamps, dtype=np.int64)[order], np.asarray(offsets, np.float64)[order]


def lane_progress(offsets: np.ndarray) -> float:
    """Lateral progress across the lanes (m, left positive) from consecutive lane offsets: a
    step of more than half a lane is a lane crossing (the offset jumps from one lane's centre
    line to the next one's); it counts as the step before it."""
    steps = np.diff(np.asarray(offsets, dtype=np.float64))
    for k in np.flatnonzero(np.abs(steps) > LANE_CHANGE_M):
        steps[k] = steps[k - 1] if k > 0 else 0.0
    return float(np.sum(steps))


def arc_offset(xy: np.ndarray, dyaw: float) -> float:
    """How far (m, left positive) the end of a path that starts at the origin heading +x
    lies beside the constant-curvature arc of the same length turning by `dyaw`, measured
    across the end heading: ~0 following a lane, straight or curved; a lane's width after a
    lane change. `xy` (P, 2) the path's points after the origin."""
    pts = np.concatenate([[[0.0, 0.0]], np.asarray(xy, dtype=np.float64)])
    length = float(np.sum(np.hypot(*np.diff(pts, axis=0).T)))
    if abs(dyaw) < 1e-6:
        arc_end = np.array([length, 0.0])
    else:
        radius = length / dyaw
        arc_end = np.array([radius * np.sin(dyaw), radius * (1.0 - np.cos(dyaw))])
    normal = np.array([-np.sin(dyaw), np.cos(dyaw)])
    return float((pts[-1] - arc_end) @ normal)


@dataclass(frozen=True)
class BagLabel:
    future_xy: np.ndarray  # (20, 2) ego frame at t0
    future_yaw: np.ndarray  # (20,)
    future_speed: np.ndarray  # (20,)
    answer: DrivingAnswer
    lateral_from: str  # "lane_pose" or "trajectory": what the lateral progress came from


def label_from_odometry(
    odom: Odometry,
    t0_ns: int,
    route_command: str,
    lane: tuple[np.ndarray, np.ndarray] | None = None,
) -> BagLabel:
    """The trajectory and meta behaviour at t0 (which `odom.covers`) from the odometry;
    `lane`: the bag's lane offsets (stamps, offsets), used where they cover the horizon."""
    future_t = np.arange(1, int(round(HORIZON_S / FUTURE_DT_S)) + 1) * FUTURE_DT_S  # (20,)
    query = t0_ns + np.round(future_t * 1e9).astype(np.int64)
    x0, y0, yaw0 = (float(odom.at(t0_ns, v)) for v in (odom.x, odom.y, odom.yaw))
    odom_xy = np.stack([odom.at(query, odom.x), odom.at(query, odom.y)], axis=-1)
    future_xy = to_ego_frame(odom_xy, x0, y0, yaw0)
    future_yaw = odom.at(query, odom.yaw) - yaw0
    future_speed = odom.at(query, odom.speed)
    end_ns = t0_ns + seconds_to_ns(HORIZON_S)
    speeds = odom.window(t0_ns, end_ns, odom.speed)
    window_ns = t0_ns + seconds_to_ns(LONGITUDINAL_WINDOW_S)
    dv = float(odom.at(window_ns, odom.speed) - speeds[0])
    dyaw = float(odom.at(end_ns, odom.yaw) - yaw0)
    dlat, lateral_from = None, "trajectory"
    if lane is not None and len(lane[0]) >= 2:
        stamps, offsets = lane
        inside = (stamps >= t0_ns) & (stamps <= end_ns)
        covered = (
            inside.any()
            and stamps[inside][0] - t0_ns <= seconds_to_ns(MAX_ODOM_GAP_S)
            and end_ns - stamps[inside][-1] <= seconds_to_ns(MAX_ODOM_GAP_S)
            and not np.any(np.diff(stamps[inside]) > seconds_to_ns(MAX_ODOM_GAP_S))
        )
        if covered:
            dlat, lateral_from = lane_progress(offsets[inside]), "lane_pose"
    if dlat is None:
        dlat = arc_offset(future_xy, dyaw)
    longitudinal, lateral = meta_behaviour(
        speeds, dv, dyaw, dlat, route_command in JUNCTION_COMMANDS
    )
    per_wp = int(round(WAYPOINT_PERIOD_S / FUTURE_DT_S))
    answer = DrivingAnswer(
        critical_objects=dict.fromkeys(CRITICAL_OBJECT_KEYS, False),  # unknown: not trained
        explanation="",  # unknown: not trained
        longitudinal=longitudinal,
        lateral=lateral,
        waypoints=future_xy[per_wp - 1 :: per_wp][:NUM_WAYPOINTS],
    )
    return BagLabel(future_xy, future_yaw, future_speed, answer, lateral_from)


class SamplingPlanner(RecordingPlanner):
    """A `RecordingPlanner` that keeps only the sample observations: sample times from
    `first_ns` on, one every `period_ns` (each the tick within half a tick of it), kept from
    `min_ns` on where the odometry covers the horizon."""

    def __init__(
        self,
        schema: Any,
        odom: Odometry,
        first_ns: int,
        period_ns: int,
        tick_ns: int,
        min_ns: int = 0,
    ) -> None:
        super().__init__(
            schema, reads_lane_pose=True, reads_lead=True, reads_beside=True, reads_route=True
        )
        self.odom, self.period_ns, self.min_ns = odom, period_ns, min_ns
        self.due, self.slack = first_ns, tick_ns // 2

    def plan(self, observation: Observation):
        stamp = observation.stamp_ns
        if stamp >= self.due - self.slack:  # a sample time, kept where it can be labelled
            self.due = stamp + self.period_ns
            if stamp >= self.min_ns and self.odom.covers(stamp):
                self.seen[stamp] = observation
        return super(RecordingPlanner, self).plan(observation)


def _history_rows(observation: Observation, origin_ns: int) -> np.ndarray:
    return np.array(
        [
            [(s.stamp_ns - origin_ns) / 1e9, s.x, s.y, s.yaw, s.v_x, s.v_y, s.a_x, s.a_y]
            for s in observation.ego_history
        ]
    )


def bag_samples(
    bag: str | Path, config: PlannerConfig, params: BagDatasetParams
) -> tuple[dict[str, np.ndarray] | None, dict[str, Any]]:
    """The shard arrays of one bag (None when no sample qualifies) and what was counted."""
    from blockplan.replay.driver import check_bag, replay_bag
    from blockplan.train.examples import resize_images

    topics = check_bag(bag, config)
    odom = read_odometry(bag, topics.odometry, config.topics.odom)
    lane = read_lane_offsets(bag, topics.lane_pose)
    schema = default_schema()  # the longest history a shard keeps (as the simulator's)
    history_ns = seconds_to_ns(schema.history_period_s * (schema.num_history - 1))
    tick_ns = seconds_to_ns(1.0 / config.control.rate_hz)
    if params.start_s is None:  # the simulator's grid; kept once the history's oldest row
        first = odom.origin_ns + history_ns  # lies after the first message (its acceleration
        min_ns = first + 1  # is unknown to the runtime)
    else:
        first = min_ns = odom.origin_ns + seconds_to_ns(params.start_s)
    period_ns = seconds_to_ns(params.sample_period_s)
    planner = SamplingPlanner(schema, odom, first, period_ns, tick_ns, min_ns)
    with tempfile.TemporaryDirectory(prefix="blockplan-bag-dataset-") as out:
        replay_bag(bag, Path(out) / "replay", planner, config, "ideal")
    names = list(config.camera_names)
    T = config.frame_window.num_frames
    cols: dict[str, list[Any]] = {}
    counts = {"sample_times": len(planner.seen), "reversing": 0, "incomplete_window": 0}
    lateral_from = {"lane_pose": 0, "trajectory": 0}
    known = np.array([name in BAG_KNOWN_SECTIONS for name in SECTION_NAMES])
    for stamp in sorted(planner.seen):
        obs = planner.seen[stamp]
        by_camera: dict[str, list] = {}
        for frame in obs.frames:
            by_camera.setdefault(frame.camera, []).append(frame)
        if any(len(by_camera.get(c, [])) != T or by_camera[c][0].image is None for c in names):
            counts["incomplete_window"] += 1
            continue
        label = label_from_odometry(odom, stamp, obs.route_command, lane)
        if float(np.min(odom.window(stamp, stamp + seconds_to_ns(HORIZON_S), odom.speed))) < (
            REVERSING_SPEED_MPS
        ):
            counts["reversing"] += 1
            continue
        lateral_from[label.lateral_from] += 1
        rel = stamp - odom.origin_ns
        a = label.answer
        images = np.stack([np.stack([f.image for f in by_camera[c]]) for c in names])
        if params.image_size is not None:  # (K, T, H, W, 3) → each frame at image_size
            small = resize_images(images.reshape(-1, *images.shape[2:]), params.image_size)
            images = small.reshape(*images.shape[:2], *small.shape[1:])
        beside = np.full((2, 5), np.nan)
        if obs.beside is not None:
            beside = np.asarray(obs.beside, dtype=np.float64)
        put = cols.setdefault
        put("images", []).append(images)
        put("frame_stamps_ns", []).append(
            [f.stamp_ns - odom.origin_ns for f in by_camera[names[0]]]
        )
        put("stamp_ns", []).append(rel)
        put("ego_history", []).append(ego_history_array(obs.ego_history, stamp, schema))
        put("history_states", []).append(_history_rows(obs, odom.origin_ns))
        put("waypoints", []).append(a.waypoints)
        put("future_xy", []).append(label.future_xy)
        put("future_yaw", []).append(label.future_yaw)
        put("future_speed", []).append(label.future_speed)
        put("critical", []).append([a.critical_objects[k] for k in CRITICAL_OBJECT_KEYS])
        put("longitudinal", []).append(LONGITUDINAL_ORDER.index(a.longitudinal))
        put("lateral", []).append(LATERAL_ORDER.index(a.lateral))
        put("explanation", []).append(a.explanation)
        put("answer_text", []).append(render_answer_text(a, schema))
        put("route_command", []).append(obs.route_command)
        put("lane_pose", []).append(obs.lane_pose if obs.lane_pose is not None else (np.nan,) * 2)
        put("lead", []).append(obs.lead if obs.lead is not None else (np.nan, np.nan))
        put("lanes_beside", []).append(beside[:, 0])
        put("beside", []).append(beside[:, 1:])
        route = obs.route_ahead if obs.route_ahead is not None else np.nan
        put("route_ahead", []).append(np.broadcast_to(route, (len(ROUTE_AHEAD_M), 2)))
        put("known_sections", []).append(known)
    info = {**counts, "lateral_from": lateral_from}
    if not cols:
        return None, info
    dtypes = {
        "images": np.uint8,
        "frame_stamps_ns": np.int64,
        "stamp_ns": np.int64,
        "critical": bool,
        "longitudinal": np.uint8,
        "lateral": np.uint8,
        "known_sections": bool,
    }
    arrays = {k: np.asarray(v, dtype=dtypes.get(k)) for k, v in cols.items()}
    arrays = {
        k: (v.astype(np.float32) if v.dtype == np.float64 and k != "history_states" else v)
        for k, v in arrays.items()
    }
    arrays["camera_names"] = np.asarray(names)
    arrays["scenario"] = np.asarray("bag")
    arrays["seed"] = np.asarray(0, dtype=np.int64)
    arrays["bag"] = np.asarray(Path(bag).name)
    arrays["stamp_origin_ns"] = np.asarray(odom.origin_ns, dtype=np.int64)
    return arrays, info


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _verified(root: Path, entry: dict[str, Any]) -> bool:
    """Whether a manifest entry's shard (if it has one) is there with its sha256."""
    if "shard" not in entry:
        return True
    shard = root / entry["shard"]
    return shard.is_file() and _sha256(shard) == entry["sha256"]


def _write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(path)


def _bag_split(name: str, params: BagDatasetParams) -> str:
    u = int.from_bytes(hashlib.sha256(f"blockplan-bag-{name}".encode()).digest()[:8], "big")
    u /= 2.0**64
    if u < params.test_fraction:
        return "test"
    if u < params.test_fraction + params.val_fraction:
        return "val"
    return "train"


def _load_config(params_file: str | Path | PlannerConfig | None) -> PlannerConfig:
    if isinstance(params_file, PlannerConfig):
        return params_file
    return load_config(params_file or default_params_path())


def build_bag_dataset(
    bags: Sequence[str | Path],
    out: str | Path,
    params: str | Path | PlannerConfig | None = None,
    options: BagDatasetParams | None = None,
    progress: bool = False,
) -> Path:
    """Write a training set in `out` from `bags` (one shard per bag) and return `out`.
    `params`: the planner params YAML (topics, cameras, frame window, control rate; default
    the shipped planner.yaml) or a loaded config. Resumes: a bag whose shard is in the
    manifest and still has its sha256 is not read again; other options are an error."""
    from tqdm import tqdm

    if not bags:
        raise BagDatasetError("--from-bags: no bag given")
    config = _load_config(params)
    options = options or BagDatasetParams()
    from blockplan.replay.driver import check_bag

    for bag in bags:  # the cheap checks of every bag before the first is replayed
        if check_bag(bag, config).odometry is None:
            read_odometry(bag, None, config.topics.odom)  # raises the one-line error
    root = Path(out)
    doc = {
        **asdict(options),
        "image_size": None if options.image_size is None else list(options.image_size),
        "cameras": list(config.camera_names),
        "num_frames": config.frame_window.num_frames,
        "frame_period_s": config.frame_window.frame_period_s,
        "rate_hz": config.control.rate_hz,
    }
    path = root / MANIFEST
    if path.is_file():
        manifest = json.loads(path.read_text())
        if manifest.get("created_by") != CREATED_BY or manifest.get("options") != doc:
            raise BagDatasetError(
                f"{path}: written by {manifest.get('created_by')!r} with other options; use "
                "another --out or the same options to resume"
            )
    else:
        manifest = {
            "format_version": FORMAT_VERSION,
            "created_by": CREATED_BY,
            "options": doc,
            "episodes": [],
            "dropped": [],
        }
    root.mkdir(parents=True, exist_ok=True)
    done = {e["bag"]: e for e in manifest["episodes"] + manifest["dropped"]}
    manifest["episodes"], manifest["dropped"] = [], []
    for seed, bag in enumerate(tqdm(bags, desc="bags", unit="bag", disable=not progress)):
        entry = done.get(str(bag))
        if entry is not None and entry["seed"] == seed and _verified(root, entry):
            manifest["episodes" if "shard" in entry else "dropped"].append(entry)
            continue
        arrays, info = bag_samples(bag, config, options)
        name = Path(bag).name
        stem = Path(name).stem if Path(name).suffix in (".mcap", ".db3") else name
        entry = {"scenario": stem, "seed": seed, "bag": str(bag), **info}
        if arrays is None:
            manifest["dropped"].append({**entry, "no_samples": True})
        else:
            arrays["seed"] = np.asarray(seed, dtype=np.int64)
            split = _bag_split(name, options)
            shard = root / split / f"{seed:03d}-{stem}.npz"
            shard.parent.mkdir(parents=True, exist_ok=True)
            save_shard(shard, arrays)
            entry = {
                **entry,
                "split": split,
                "shard": str(shard.relative_to(root)),
                "num_samples": int(arrays["stamp_ns"].shape[0]),
                "sha256": _sha256(shard),
            }
            manifest["episodes"].append(entry)
        _write_manifest(path, manifest)  # after every bag: an interrupted run resumes here
    kept = manifest["episodes"]
    manifest["counts"] = {
        "samples": {s: sum(e["num_samples"] for e in kept if e["split"] == s) for s in SPLITS},
        "episodes": {s: sum(e["split"] == s for e in kept) for s in SPLITS},
        "dropped_bags": len(manifest["dropped"]),
    }
    _write_manifest(path, manifest)
    return root
