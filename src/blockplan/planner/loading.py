"""The node's model: load it with its checksums verified, warm it up, free it (no rclpy).

`model.dir` accepts what replay's `--model` accepts: a model folder (as given, or relative to
the package root where `models/` is installed), `random-init[:PRESET]` (random weights), or
the `constant-velocity` baseline. On the vehicle a model folder must carry `manifest.json`;
the engine checks every file's sha256 against it while loading, so a folder without one is
refused rather than loaded unchecked.

Replay resolves `--model` through the same `load_model` (without requiring a manifest); it
lives here, not in `blockplan.replay`, whose package pulls in the report and plotting stack
(matplotlib) that a vehicle does not need.
"""

from __future__ import annotations

import gc
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

from blockplan.config import PlannerConfig, package_root
from blockplan.errors import UserError
from blockplan.runtime import ConstantVelocityPlanner, RuntimePlanner
from blockplan.types import CameraFrame, EgoState, Observation, seconds_to_ns

# blockplan.model.weights' MANIFEST_NAME and VERIFIED (this module stays torch-free)
MANIFEST_NAME = "manifest.json"
VERIFIED = "sha256-verified"
# Any size works: the vision tower resizes every image to the model's input size.
WARMUP_IMAGE_SHAPE = (72, 128)
WARMUP_STAMP_NS = seconds_to_ns(1000.0)  # far from 0 so the window's history fits before it
BASELINES = {"constant-velocity": ConstantVelocityPlanner}
RANDOM_INIT = "random-init"


class ModelLoadError(UserError, RuntimeError):
    """The configured model cannot be loaded or fails its warm-up; the message says why."""


def resolve_model_dir(model: str, where: str = "model.dir") -> Path:
    """`model` as given, or relative to the package root (where models/ is installed).
    `where` names the setting in errors (`model.dir`, `--model`)."""
    for folder in (Path(model), package_root() / model):
        if folder.is_dir():
            return folder
    raise ModelLoadError(
        f"{where}={model!r}: no such model folder (nor under {package_root()}); other "
        f"choices: {sorted(BASELINES)} or {RANDOM_INIT}[:PRESET]"
    )


def load_model(
    model: str, config: PlannerConfig, where: str = "model.dir", require_manifest: bool = True
) -> RuntimePlanner:
    """The planner `model` names (a baseline, random-init[:PRESET] or a folder). A folder's
    manifest is verified while loading (sha256 of every file); with `require_manifest` a
    folder without one is refused. Raises ModelLoadError saying why it cannot load."""
    if model in BASELINES:
        return BASELINES[model]()
    folder = None
    if not (model == RANDOM_INIT or model.startswith(f"{RANDOM_INIT}:")):
        folder = resolve_model_dir(model, where)
        if require_manifest and not (folder / MANIFEST_NAME).is_file():
            raise ModelLoadError(
                f"{where}={model!r}: {folder} has no {MANIFEST_NAME}; the node only runs "
                "models whose checksums it can verify"
            )
    try:
        import torch

        from blockplan.planner.planner import Planner

        # model.num_threads is the process's torch CPU thread count (node and replay alike);
        # more threads than free cores make every forward far slower, not faster.
        torch.set_num_threads(config.model.num_threads)
        if folder is None:
            return Planner.random_init(model.partition(":")[2] or "tiny", config)
        planner = Planner.from_folder(folder, config)
    except (ImportError, ValueError, OSError) as e:  # WeightsError, PlannerSetupError, I/O
        raise ModelLoadError(f"{where}={model!r}: {type(e).__name__}: {e}") from e
    if require_manifest and planner.weights != VERIFIED:  # checked, not only present
        raise ModelLoadError(
            f"{where}={model!r}: {folder}: weights {planner.weights}; the node only runs "
            "models whose checksums it verified"
        )
    return planner


def weights_of(planner: RuntimePlanner) -> str:
    """What `planner`'s weights are, as runs report them (metrics.json, the report,
    /diagnostics): sha256-verified, unverified (a folder without manifest.json), random-init,
    or none (a baseline has no weights)."""
    return str(getattr(planner, "weights", "none (baseline)"))


def backend_of(planner: RuntimePlanner) -> str | None:
    """The backend `planner` runs on (`model.backend: auto` resolved), or None for a
    baseline."""
    runner = getattr(planner, "runner", None)
    return getattr(runner, "name", None)


def model_fingerprint(model: str) -> str | None:
    """What the folder `model` names is on disk now, as a short text: its manifest's sha256
    (the manifest holds every file's), "no manifest.json", or "no such folder"; None for a
    baseline or random-init (nothing on disk). The node takes it at configure and refuses to
    activate a folder that changed since (`check_model_unchanged`)."""
    if model in BASELINES or model == RANDOM_INIT or model.startswith(f"{RANDOM_INIT}:"):
        return None
    try:
        folder = resolve_model_dir(model)
    except ModelLoadError:
        return "no such folder"
    try:
        data = (folder / MANIFEST_NAME).read_bytes()
    except OSError:
        return f"no {MANIFEST_NAME}"
    return f"{MANIFEST_NAME} sha256 {hashlib.sha256(data).hexdigest()[:16]}"


def check_model_unchanged(model: str, configured: str | None, where: str = "model.dir") -> None:
    """Raise ModelLoadError when the folder `model` is not what it was at configure
    (`configured`, its `model_fingerprint` then)."""
    now = model_fingerprint(model)
    if now != configured:
        raise ModelLoadError(
            f"{where}={model!r}: the model folder changed on disk since configure ({configured} "
            f"-> {now}); not loading it: cleanup and configure again to take the new folder"
        )


def load_verified_planner(config: PlannerConfig) -> RuntimePlanner:
    """The node's planner: `model.dir` with its manifest required and verified."""
    return load_model(config.model.dir, config)


def warmup_observation(config: PlannerConfig, shape: tuple[int, int] = WARMUP_IMAGE_SHAPE):
    """A K cameras × T frames observation of black images with the ego at rest."""
    fw = config.frame_window
    period_ns = seconds_to_ns(fw.frame_period_s)
    stamps = [WARMUP_STAMP_NS - k * period_ns for k in range(fw.num_frames - 1, -1, -1)]
    black = np.zeros((*shape, 3), np.uint8)
    frames = tuple(CameraFrame(name, s, black) for name in config.camera_names for s in stamps)
    history = tuple(EgoState(stamp_ns=s, x=0.0, y=0.0, yaw=0.0, v_x=0.0) for s in stamps)
    return Observation(WARMUP_STAMP_NS, frames, history)


def robot_warmup_observation(config: PlannerConfig, proprio_dim: int, shape=WARMUP_IMAGE_SHAPE):
    """A robot planner's warm-up input: black frames, the state at zero, an instruction."""
    from blockplan.types import RobotObservation

    black = np.zeros((*shape, 3), np.uint8)
    frames = tuple(
        CameraFrame(name, WARMUP_STAMP_NS, black)
        for name in config.camera_names
        for _ in range(config.frame_window.num_frames)
    )
    return RobotObservation(WARMUP_STAMP_NS, frames, np.zeros(proprio_dim), "warm up")


def _warmup_for(planner: RuntimePlanner, config: PlannerConfig):
    if config.model.embodiment == "robot":
        return robot_warmup_observation(config, int(planner.schema.proprio_dim))
    return warmup_observation(config)


def warm_up(planner: RuntimePlanner, config: PlannerConfig) -> float:
    """Run the planner once on `warmup_observation` (allocations, kernel selection, caches) so
    the first real request is not the slow one. Returns its latency (ms); raises ModelLoadError
    when it fails."""
    start = time.perf_counter()
    try:
        planner.plan(_warmup_for(planner, config))
    except (ValueError, RuntimeError) as e:  # a parse failure, a shape mismatch, out of memory
        raise ModelLoadError(
            f"warm-up of {config.model.dir!r} failed: {type(e).__name__}: {e}"
        ) from e
    # The warm-up frames are no part of the stream: the first real plan starts it afresh.
    planner.reset()
    return (time.perf_counter() - start) * 1e3


def release_accelerator_memory() -> None:
    """Return cached accelerator memory after the planner's last reference is dropped (the
    caller drops it first). Does nothing without torch or CUDA."""
    gc.collect()
    torch = sys.modules.get("torch")  # only a planner that imported torch can hold its memory
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()
