"""The simulator data set: episodes -> labelled samples -> one npz shard per episode.

Options, the seed split, sample rendering/labelling and reading live here; writing (with
resume and worker processes) in `dataset_writer.py`.

Layout of DIR:
    manifest.json                  options, one entry per episode (kept or dropped), counts
    <split>/<scenario>-<seed>.npz  one shard per kept episode (arrays below), split by seed
    fastddrive/...                 the Fast-dDrive JSON export (see fastddrive.py)

A sample at t0 holds K cameras x T frames (view-major, oldest first, `frame_period_s`
apart), the ego history, the label (answer, 4 Hz future) and its route command. The split
of an episode is a pure function of its seed (`split_of`), so one seed never appears in two
splits, whatever the scenario. The manifest is rewritten after every episode and shards are
written atomically, so an interrupted run resumes where it stopped; crashed episodes (the
expert collided), and those whose expert backs up in every sample's future, are recorded as
dropped and counted, and the next seed is tried; samples whose future has the expert backing
up are left out (`REVERSING_SPEED_MPS`).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from blockplan.errors import UserError
from blockplan.schema import default_schema, ego_history_array, render_answer_text
from blockplan.sim.episode import EGO_SPEED, EpisodeLog, Perturbation, perturbation_schedule
from blockplan.sim.labels import (
    HORIZON_S,
    SampleLabel,
    label_at,
    label_times,
    log_beside,
    log_route_ahead,
)
from blockplan.sim.render import RigRenderer
from blockplan.sim.rig import Rig
from blockplan.sim.scenarios import get_scenario
from blockplan.trajectory.route import ROUTE_AHEAD_M
from blockplan.types import (
    CRITICAL_OBJECT_KEYS,
    CameraFrame,
    DrivingAnswer,
    EgoState,
    Lateral,
    Longitudinal,
    Observation,
    seconds_to_ns,
)

MANIFEST = "manifest.json"
# highway-env's IDM backs up behind a stopped car (its speed goes negative; at the roundabout
# and the intersection a third of the samples). A sample whose 5 s future has the expert
# slower than this (m/s) is left out: no planner should learn to reverse there, and the
# validity gates rightly reject it. A creep of a few cm/s at a stop stays in.
REVERSING_SPEED_MPS = -0.5
SPLITS = ("train", "val", "test")
FORMAT_VERSION = 1
LONGITUDINAL_ORDER = tuple(Longitudinal)
LATERAL_ORDER = tuple(Lateral)


class DatasetError(UserError, ValueError):
    """Bad options, or an existing data set written with different options."""


@dataclass(frozen=True)
class DatasetOptions:
    scenarios: tuple[str, ...]
    episodes: int  # kept episodes per scenario
    duration_s: float  # simulated per episode, including the 5 s label look-ahead
    seed_base: int = 0
    sample_period_s: float = 0.5
    num_frames: int = 2
    frame_period_s: float = 0.5
    val_fraction: float = 0.1
    test_fraction: float = 0.1
    max_attempts_factor: int = 4  # at most factor * episodes seeds tried per scenario
    # The first sample time (s into the recording); None: a full frame window and ego history
    # behind it. An earlier start (e.g. 0, the moment a closed-loop run hands over) has the
    # history and frames before the recording continued the way the runtime does at start-up.
    start_s: float | None = None
    # Recovery samples: about every this many seconds the expert's steering is perturbed for
    # 0.4-0.8 s (`episode.perturbation_schedule`); samples whose 5 s future holds a perturbed
    # step are dropped, so every label is the expert's own driving. None: no perturbations.
    perturb_every_s: float | None = None
    # On-policy samples (closedloop/dagger.py): this model folder drives each episode in
    # closed loop and every `branch_every_s` the expert, in a copy of the world, labels the
    # state it reached. None: the expert drives (the default).
    policy_model: str | None = None
    branch_every_s: float | None = None

    def __post_init__(self) -> None:
        for name in self.scenarios:
            get_scenario(name)
        if self.episodes < 1:
            raise DatasetError(f"episodes={self.episodes}: must be >= 1")
        if self.duration_s < HORIZON_S + sample_start_s(self):
            raise DatasetError(
                f"duration={self.duration_s}: must be >= the {HORIZON_S} s label look-ahead "
                f"plus {sample_start_s(self)} s of frame window / ego history"
            )
        if not (
            self.val_fraction >= 0
            and self.test_fraction >= 0
            and self.val_fraction + self.test_fraction < 1
        ):
            raise DatasetError(
                f"val_fraction={self.val_fraction}, test_fraction={self.test_fraction}: "
                "must be >= 0 with a sum < 1"
            )
        if self.start_s is not None and not self.start_s >= 0:
            raise DatasetError(f"start={self.start_s}: must be >= 0 s")
        if self.perturb_every_s is not None and not self.perturb_every_s > 0:
            raise DatasetError(f"perturb_every={self.perturb_every_s}: must be > 0 s")
        if (self.policy_model is None) != (self.branch_every_s is None):
            raise DatasetError("policy_model and branch_every_s go together")
        if self.branch_every_s is not None and not self.branch_every_s > 0:
            raise DatasetError(f"branch_every={self.branch_every_s}: must be > 0 s")
        if self.policy_model is not None and self.perturb_every_s is not None:
            raise DatasetError("--policy-model and --perturb-every do not combine")
        if self.num_frames < 1 or self.frame_period_s <= 0 or self.sample_period_s <= 0:
            raise DatasetError("num_frames >= 1, frame_period_s > 0, sample_period_s > 0")


def sample_start_s(options: DatasetOptions) -> float:
    """The first sample time: `options.start_s`, or else the first with a full frame window
    and a full ego history behind it."""
    if options.start_s is not None:
        return options.start_s
    schema = default_schema()
    history = schema.history_period_s * (schema.num_history - 1)
    return max((options.num_frames - 1) * options.frame_period_s, history)


def split_of(seed: int, val_fraction: float, test_fraction: float) -> str:
    """The split of an episode seed: a stable hash of the seed, nothing else."""
    u = int.from_bytes(hashlib.sha256(f"blockplan-seed-{seed}".encode()).digest()[:8], "big")
    u /= 2.0**64
    if u < test_fraction:
        return "test"
    if u < test_fraction + val_fraction:
        return "val"
    return "train"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_json_atomic(path: Path, doc: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)


def _history_rows(label: SampleLabel) -> np.ndarray:
    """(S, 8) the label's ego states: stamp (s), x, y, yaw, v_x, v_y, a_x, a_y in odom."""
    return np.array(
        [[s.stamp_ns / 1e9, s.x, s.y, s.yaw, s.v_x, s.v_y, s.a_x, s.a_y] for s in label.history]
    )


def forward_times(log: EpisodeLog, times: np.ndarray) -> np.ndarray:
    """The label times whose 5 s future has the expert driving forward (see
    `REVERSING_SPEED_MPS`)."""
    speed = log.ego[:, EGO_SPEED]
    return _times_where(
        times,
        lambda t0: (
            float(np.min(speed[log.index_at(t0) : log.index_at(t0 + HORIZON_S) + 1]))
            >= REVERSING_SPEED_MPS
        ),
    )


def clean_times(log: EpisodeLog, times: np.ndarray) -> np.ndarray:
    """The label times whose 5 s future no perturbation acted on (the history may hold one:
    that is the state the expert recovers from)."""
    return _times_where(
        times, lambda t0: log.is_clean(log.index_at(t0), log.index_at(t0 + HORIZON_S))
    )


def lead_facts(facts: dict[str, float | str]) -> tuple[float, float]:
    """(gap m, speed m/s) of the nearest car ahead in the ego's lane at t0, from a label's
    facts; (inf, NaN) when there is none. A shard keeps it as `lead` (training-only: the
    lead probe's target, train/probe.py); shards written before it was recorded lack it."""
    if "lead_gap_m" not in facts:
        return (np.inf, np.nan)
    return (float(facts["lead_gap_m"]), float(facts.get("lead_speed", np.nan)))


def _times_where(times: np.ndarray, keep: Callable[[float], bool]) -> np.ndarray:
    times = np.asarray(times)
    return times[np.asarray([keep(float(t0)) for t0 in times], dtype=bool)] if len(times) else times


def episode_perturbations(options: DatasetOptions, seed: int) -> tuple[Perturbation, ...]:
    """The episode's perturbation schedule under `options` (none by default)."""
    if options.perturb_every_s is None:
        return ()
    return perturbation_schedule(seed, options.duration_s, options.perturb_every_s, HORIZON_S)


def episode_samples(
    log: EpisodeLog, rig: Rig, options: DatasetOptions, fits: Any = None
) -> tuple[dict[str, np.ndarray] | None, dict[float, dict[str, np.ndarray]]]:
    """Render and label every sample of an episode: (shard arrays, {frame time: images});
    arrays None when the expert backs up in every sample's future."""
    schema = default_schema()
    start = max(sample_start_s(options), 0.0)
    times = forward_times(log, label_times(log, options.sample_period_s, start_s=start))
    times = clean_times(log, times)
    if not len(times):
        return None, {}
    renderer = RigRenderer(rig, log.road)
    frames: dict[float, dict[str, np.ndarray]] = {}
    cols: dict[str, list[Any]] = {}

    def add(key: str, value: Any) -> None:
        cols.setdefault(key, []).append(value)

    for t0 in times:
        # Before the recording began the oldest frame stands in, as in the runtime's window.
        frame_times = [
            round(max(t0 - k * options.frame_period_s, 0.0), 6)
            for k in range(options.num_frames - 1, -1, -1)
        ]
        for ft in frame_times:
            if ft not in frames:
                frames[ft] = renderer.render(log.snapshot(log.index_at(ft)))
        images = np.stack(
            [np.stack([frames[ft][c] for ft in frame_times]) for c in rig.names]
        )  # (K, T, H, W, 3) view-major
        label = label_at(
            log,
            float(t0),
            history_period_s=schema.history_period_s,
            history_s=schema.history_period_s * (schema.num_history - 1),
            fits=fits,
        )
        a = label.answer
        add("images", images)
        add("frame_stamps_ns", [seconds_to_ns(ft) for ft in frame_times])
        add("stamp_ns", label.stamp_ns)
        add("ego_history", ego_history_array(label.history, label.stamp_ns, schema))
        add("history_states", _history_rows(label))
        add("waypoints", a.waypoints)
        add("future_xy", label.future_xy)
        add("future_yaw", label.future_yaw)
        add("future_speed", label.future_speed)
        add("critical", [a.critical_objects[k] for k in CRITICAL_OBJECT_KEYS])
        add("longitudinal", LONGITUDINAL_ORDER.index(a.longitudinal))
        add("lateral", LATERAL_ORDER.index(a.lateral))
        add("explanation", a.explanation)
        add("answer_text", render_answer_text(a, schema))
        add("route_command", label.route_command)
        if log.lane_pose is not None:
            add("lane_pose", log.lane_pose[log.index_at(float(t0))])
        add("lead", lead_facts(label.facts))
        add("lanes_beside", log.road.lanes_beside(log.ego_lane[log.index_at(float(t0))]))
        add("beside", log_beside(log, log.index_at(float(t0))))
        if log.route_path is not None:
            add("route_ahead", log_route_ahead(log, log.index_at(float(t0))))
    dtypes = {
        "images": np.uint8,
        "frame_stamps_ns": np.int64,
        "stamp_ns": np.int64,
        "critical": bool,
        "longitudinal": np.uint8,
        "lateral": np.uint8,
    }
    arrays = {k: np.asarray(v, dtype=dtypes.get(k)) for k, v in cols.items()}
    arrays = {
        k: (v.astype(np.float32) if v.dtype == np.float64 and k != "history_states" else v)
        for k, v in arrays.items()
    }
    arrays["camera_names"] = np.asarray(rig.names)
    arrays["scenario"] = np.asarray(log.scenario)
    arrays["seed"] = np.asarray(log.seed, dtype=np.int64)
    return arrays, frames


def save_shard(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write arrays as a compressed .npz, atomically and byte-reproducibly (fixed zip
    timestamps, unlike np.savez_compressed), so a re-run gives the same sha256."""
    tmp = path.with_name(path.stem + ".tmp.npz")
    with zipfile.ZipFile(tmp, "w") as zf:
        for key, value in arrays.items():
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(value), allow_pickle=False)
    os.replace(tmp, path)


def load_shard(path: str | Path) -> dict[str, np.ndarray]:
    """A shard's arrays (no pickles)."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def sample_observation(shard: dict[str, np.ndarray], i: int) -> Observation:
    """Sample i of a shard as the planner's Observation (view-major frames, ego history)."""
    names = [str(n) for n in shard["camera_names"]]
    frames = tuple(
        CameraFrame(name, int(shard["frame_stamps_ns"][i, t]), shard["images"][i, k, t])
        for k, name in enumerate(names)
        for t in range(shard["images"].shape[2])
    )
    history = tuple(
        EgoState(
            stamp_ns=int(round(r[0] * 1e9)),
            x=r[1],
            y=r[2],
            yaw=r[3],
            v_x=r[4],
            v_y=r[5],
            a_x=r[6],
            a_y=r[7],
        )
        for r in shard["history_states"][i].tolist()
    )
    lane = shard["lane_pose"][i] if "lane_pose" in shard else None
    known = lane is not None and bool(np.isfinite(lane).all())
    # The car ahead (gap, speed): an infinite gap (none ahead) is known, a NaN one is not.
    lead = shard["lead"][i] if "lead" in shard else None
    lead_known = lead is not None and not np.isnan(lead[0])
    beside = shard_beside(shard, slice(i, i + 1))[0]  # this sample's row only
    return Observation(
        int(shard["stamp_ns"][i]),
        frames,
        history,
        str(shard["route_command"][i]),
        (float(lane[0]), float(lane[1])) if known else None,
        (float(lead[0]), float(lead[1])) if lead_known else None,
        None if np.isnan(beside).all() else (tuple(beside[0].tolist()), tuple(beside[1].tolist())),
        _route_tuple(shard_route_ahead(shard, slice(i, i + 1))[0]),
    )


def _route_tuple(points: np.ndarray) -> tuple[tuple[float, float], ...] | None:
    if not np.isfinite(points).all():
        return None
    return tuple((float(x), float(y)) for x, y in points)


def shard_route_ahead(shard: dict[str, np.ndarray], rows: slice = slice(None)) -> np.ndarray:
    """(N, A, 2) float32 the route ahead of a shard's samples `rows` (default all), in the
    ego frame at t0 (`blockplan.trajectory.route`); NaN where unknown or in a shard written
    before it was recorded."""
    n = shard["stamp_ns"][rows].shape[0]
    if "route_ahead" not in shard:
        return np.full((n, len(ROUTE_AHEAD_M), 2), np.nan, np.float32)
    return np.asarray(shard["route_ahead"][rows], dtype=np.float32)


def shard_beside(shard: dict[str, np.ndarray], rows: slice = slice(None)) -> np.ndarray:
    """(N, 2, 5) float32 the lanes beside of a shard's samples `rows` (default all), per side
    (left, right): `lanes_beside` then `beside` ([lanes, gap ahead, speed, gap behind,
    speed]; the layout an encoder with `beside` reads); NaN where a shard written before
    them lacks either."""
    n = shard["stamp_ns"][rows].shape[0]
    out = np.full((n, 2, 5), np.nan, np.float32)
    if "lanes_beside" in shard:
        out[..., 0] = shard["lanes_beside"][rows]
    if "beside" in shard:
        out[..., 1:] = shard["beside"][rows]
    return out


def sample_answer(shard: dict[str, np.ndarray], i: int) -> DrivingAnswer:
    return DrivingAnswer(
        critical_objects=dict(
            zip(CRITICAL_OBJECT_KEYS, map(bool, shard["critical"][i]), strict=True)
        ),
        explanation=str(shard["explanation"][i]),
        longitudinal=LONGITUDINAL_ORDER[int(shard["longitudinal"][i])],
        lateral=LATERAL_ORDER[int(shard["lateral"][i])],
        waypoints=shard["waypoints"][i].astype(np.float64),
    )


def iter_split(root: str | Path, split: str) -> Iterator[tuple[Observation, DrivingAnswer]]:
    """Every (observation, answer) of one split, in manifest order."""
    manifest = json.loads((Path(root) / MANIFEST).read_text())
    for entry in manifest["episodes"]:
        if entry["split"] != split:
            continue
        shard = load_shard(Path(root) / entry["shard"])
        for i in range(shard["stamp_ns"].shape[0]):
            yield sample_observation(shard, i), sample_answer(shard, i)
