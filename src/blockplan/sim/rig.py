"""The camera rig: pinhole intrinsics and extrinsics per camera, loaded from params/rig.yaml.

Frames: `base_link` is REP-103 (x forward, y left, z up). Each camera has a body frame
`camera_<name>` (REP-103 axes, posed by x, y, z, roll, pitch, yaw relative to base_link;
positive pitch looks down) and an optical frame `camera_<name>_optical` (z forward, x right,
y down) in which the image lives and whose id the image headers carry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from blockplan.config import load_yaml, package_root
from blockplan.errors import UserError

# Rotation from the optical frame (z fwd, x right, y down) to the camera body frame (x fwd,
# y left, z up): body = R_BODY_FROM_OPTICAL @ optical.
R_BODY_FROM_OPTICAL = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


class RigError(UserError, ValueError):
    """An invalid rig file or camera entry; the message names the field."""


def rotation_rpy(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """(3, 3) R = Rz(yaw) @ Ry(pitch) @ Rx(roll) (REP-103 fixed-axis roll, pitch, yaw)."""
    cr, sr, cp, sp, cy, sy = (
        math.cos(roll),
        math.sin(roll),
        math.cos(pitch),
        math.sin(pitch),
        math.cos(yaw),
        math.sin(yaw),
    )
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    return rz @ ry @ rx


@dataclass(frozen=True)
class Camera:
    """One pinhole camera. Angles in radians; extrinsics relative to base_link."""

    name: str
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    x: float
    y: float
    z: float
    roll: float
    pitch: float
    yaw: float

    @property
    def frame_id(self) -> str:
        return f"camera_{self.name}"

    @property
    def optical_frame_id(self) -> str:
        return f"camera_{self.name}_optical"

    @property
    def K(self) -> np.ndarray:
        """(3, 3) intrinsic matrix."""
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    @property
    def R_base_from_body(self) -> np.ndarray:
        """(3, 3) camera body axes in base_link (a positive REP-103 pitch about +y (left)
        tilts x forward down)."""
        return rotation_rpy(self.roll, self.pitch, self.yaw)

    @property
    def R_base_from_optical(self) -> np.ndarray:
        return self.R_base_from_body @ R_BODY_FROM_OPTICAL

    @property
    def position(self) -> np.ndarray:
        return np.array([self.x, self.y, self.z])


@dataclass(frozen=True)
class Rig:
    cameras: tuple[Camera, ...]
    rate_hz: float

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.cameras)


def _number(entry: dict[str, Any], key: str, where: str, default: float | None = None) -> float:
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RigError(f"{where}.{key}={value!r}: must be a finite number")
    return float(value)


def camera_from_dict(entry: dict[str, Any], index: int) -> Camera:
    where = f"rig.cameras[{index}]"
    known = {"name", "width", "height", "hfov_deg", "fx", "fy", "cx", "cy", "x", "y", "z"}
    known |= {"roll_deg", "pitch_deg", "yaw_deg"}
    unknown = sorted(set(entry) - known)
    if unknown:
        raise RigError(f"unknown key '{where}.{unknown[0]}' (known: {sorted(known)})")
    name = entry.get("name")
    if not isinstance(name, str) or not name.replace("_", "").isalnum():
        raise RigError(f"{where}.name={name!r}: must be an identifier (letters, digits, _)")
    width, height = entry.get("width"), entry.get("height")
    for key, value in (("width", width), ("height", height)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 8:
            raise RigError(f"{where}.{key}={value!r}: must be an integer >= 8")
    if "hfov_deg" in entry:
        hfov = _number(entry, "hfov_deg", where)
        if not 10.0 <= hfov <= 170.0:
            raise RigError(f"{where}.hfov_deg={hfov!r}: must be in [10, 170]")
        fx = fy = (width / 2.0) / math.tan(math.radians(hfov) / 2.0)
        cx, cy = width / 2.0, height / 2.0
    else:
        fx, fy = _number(entry, "fx", where), _number(entry, "fy", where)
        cx, cy = _number(entry, "cx", where), _number(entry, "cy", where)
        if fx <= 0 or fy <= 0:
            raise RigError(f"{where}.fx/fy=({fx}, {fy}): must be > 0")
    return Camera(
        name=name,
        width=width,
        height=height,
        fx=fx,
        fy=fy,
        cx=cx,
        cy=cy,
        x=_number(entry, "x", where, 0.0),
        y=_number(entry, "y", where, 0.0),
        z=_number(entry, "z", where, 1.5),
        roll=math.radians(_number(entry, "roll_deg", where, 0.0)),
        pitch=math.radians(_number(entry, "pitch_deg", where, 0.0)),
        yaw=math.radians(_number(entry, "yaw_deg", where, 0.0)),
    )


def rig_from_dict(doc: dict[str, Any]) -> Rig:
    section = doc.get("rig") if isinstance(doc, dict) else None
    if not isinstance(section, dict):
        raise RigError("rig file: expected a top-level 'rig' mapping")
    rate = _number(section, "rate_hz", "rig", 10.0)
    if rate <= 0:
        raise RigError(f"rig.rate_hz={rate!r}: must be > 0")
    entries = section.get("cameras")
    if not isinstance(entries, list) or not entries:
        raise RigError(f"rig.cameras={entries!r}: must be a non-empty list")
    cameras = tuple(camera_from_dict(e, i) for i, e in enumerate(entries))
    names = [c.name for c in cameras]
    if len(set(names)) != len(names):
        raise RigError(f"rig.cameras names={names}: must be unique")
    return Rig(cameras=cameras, rate_hz=rate)


def default_rig_path() -> Path:
    return package_root() / "params" / "rig.yaml"


def load_rig(path: str | Path | None = None) -> Rig:
    """Load the rig YAML (default: the shipped params/rig.yaml)."""
    path = Path(path) if path is not None else default_rig_path()
    try:
        doc = load_yaml(path.read_text())  # params files' YAML: 1e3 is a number, no twin keys
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise RigError(f"cannot read rig file {path}: {e}") from e
    try:
        return rig_from_dict(doc)
    except RigError as e:
        raise RigError(f"{path}: {e}") from e
