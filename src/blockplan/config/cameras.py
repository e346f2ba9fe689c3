"""`cameras.*` and `frame_window.*`: the cameras and the sliding window of their frames."""

from __future__ import annotations

from dataclasses import dataclass

from blockplan.config.fields import _check, _check_fields, bounded, choice, signed

TRANSPORTS = ("raw", "compressed")
STREAMING_MODES = ("auto", "on", "off")
STALE_CAMERA_POLICIES = ("wait", "degrade", "fallback")
DEFAULT_CAMERA_TOPIC = "/camera/{name}/image_raw"  # .format(name=...): a camera's default topic


@dataclass(frozen=True)
class CameraConfig:
    """One camera: its name (also the frame id suffix), topic and transport."""

    name: str
    topic: str
    transport: str = choice("raw", TRANSPORTS)

    def __post_init__(self) -> None:
        _check(
            bool(self.name) and self.name.replace("_", "").isalnum(),
            "cameras.name",
            self.name,
            "must be a non-empty identifier (letters, digits, _)",
        )
        _check(
            self.topic.startswith("/"), f"cameras.{self.name}.topic", self.topic, "must be absolute"
        )
        _check_fields(self, f"cameras.{self.name}")


def _default_cameras() -> tuple[CameraConfig, ...]:
    names = ("front_left", "front", "front_right", "rear")
    return tuple(CameraConfig(name=n, topic=DEFAULT_CAMERA_TOPIC.format(name=n)) for n in names)


@dataclass(frozen=True)
class FrameWindowConfig:
    """The sliding frame window: T frames per camera, `frame_period_s` apart. With
    `reuse_tolerance` > 0 a window's older frame is, among the frames within that fraction of
    the period of its target time, one an earlier request already used (streaming reuses
    its K/V)."""

    num_frames: int = bounded(2, 1, 16)
    frame_period_s: float = signed(0.5, "> 0")
    max_frame_age_s: float = signed(0.3, "> 0")
    stale_camera_policy: str = choice("degrade", STALE_CAMERA_POLICIES)
    # Streaming prefill (DECODING.md "Streaming"): "auto" = on for models whose frames stream
    # exactly (frame-only visual attention, no frame-slot embedding), off for the others;
    # "on" also streams the others (approximate, opt-in); "off" recomputes every tick.
    streaming: str = choice("auto", STREAMING_MODES)
    # RUNTIME.md "Windows that share frames": a fraction of frame_period_s (0.25: 0.125 s at
    # 0.5 s); 0 picks the frame nearest each target time.
    reuse_tolerance: float = 0.25

    def __post_init__(self) -> None:
        _check(
            1 <= self.num_frames <= 16,
            "frame_window.num_frames",
            self.num_frames,
            "must be in [1, 16]",
        )
        _check_fields(self, "frame_window")
        _check(
            0.0 <= self.reuse_tolerance < 0.5,
            "frame_window.reuse_tolerance",
            self.reuse_tolerance,
            "must be in [0, 0.5) (a fraction of frame_period_s)",
        )
