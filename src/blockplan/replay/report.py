"""report.html: one self-contained page with a time slider over the replay's ticks (camera
frames, bird's-eye plot of plan, rollouts, recorded future and published trajectory, the
reasoning, latency over time) and the PNG summary plots embedded."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image as PILImage

from blockplan.replay.record import ReplayLog, TickRecord
from blockplan.replay.report_page import PAGE

MAX_REPORT_TICKS = 300  # longer replays are subsampled evenly (keeps the page a few MB)
THUMBNAIL_WIDTH = 160


def _points(xy: np.ndarray) -> list[list[float]]:
    return np.round(np.asarray(xy, dtype=np.float64), 2).tolist()


def _data_uri(png_or_jpeg: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(png_or_jpeg).decode('ascii')}"


def _thumbnail(image: np.ndarray) -> str:
    img = PILImage.fromarray(image)
    if img.width > THUMBNAIL_WIDTH:
        img = img.resize((THUMBNAIL_WIDTH, max(1, round(img.height * THUMBNAIL_WIDTH / img.width))))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=65)
    return _data_uri(buf.getvalue(), "image/jpeg")


def _published_in_plan_frame(tick: TickRecord, plan_pose, tick_pose) -> np.ndarray:
    """The published trajectory (ego frame at now) drawn in the plan's frame at t0."""
    if plan_pose is None or tick_pose is None:
        return tick.xy
    return plan_pose.inverse().compose(tick_pose).transform_points(tick.xy)


def report_data(
    log: ReplayLog,
    metrics: dict[str, Any],
    cameras: tuple[str, ...],
    plots: list[tuple[str, bytes]],
) -> dict[str, Any]:
    t_origin = log.ticks[0].now_ns if log.ticks else 0
    plan_index = {p.stamp_ns: i for i, p in enumerate(log.plans)}
    stride = max(1, -(-len(log.ticks) // MAX_REPORT_TICKS))
    images: dict[str, str] = {}
    ticks = []
    for tick in log.ticks[::stride]:
        keys: list[str | None] = []
        by_camera = {f.camera: f for f in tick.newest_frames}
        for cam in cameras:
            frame = by_camera.get(cam)
            if frame is None:
                keys.append(None)
                continue
            key = f"{cam}@{frame.stamp_ns}"
            if key not in images:
                images[key] = _thumbnail(frame.image)
            keys.append(key)
        src = plan_index.get(tick.source_stamp_ns, -1) if tick.source_stamp_ns else -1
        plan_pose = log.plans[src].pose if src >= 0 else None
        ticks.append(
            {
                "t": (tick.now_ns - t_origin) / 1e9,
                "fb": tick.is_fallback,
                "reason": tick.reason,
                "src": src,
                "frames": keys,
                "pub": _points(_published_in_plan_frame(tick, plan_pose, tick.pose)),
            }
        )
    plans = [
        {
            "t": (p.stamp_ns - t_origin) / 1e9,
            "xy": _points(p.xy),
            "rollouts": [_points(r) for r in p.rollouts],
            "truth": None if p.truth is None else _points(p.truth),
            "reasoning": p.reasoning,
        }
        for p in log.plans
    ]
    return {
        "meta": {
            "bag": metrics.get("bag", ""),
            "timing": metrics.get("timing", ""),
            "rate_hz": metrics.get("rate_hz", 0),
            "model": metrics.get("model", ""),
            "weights": metrics.get("weights", ""),
            "interrupted": bool(metrics.get("interrupted")),
            "no_ticks": metrics.get("no_ticks", ""),
        },
        # The page opens on the first tick that published a plan, not a start-up fallback.
        "start": next((i for i, t in enumerate(ticks) if not t["fb"]), 0),
        "metrics": metrics,
        "cameras": list(cameras),
        "images": images,
        "ticks": ticks,
        "plans": plans,
        "latency": [[(p.stamp_ns - t_origin) / 1e9, round(p.latency_ms, 3)] for p in log.plans],
        "fallback_times": [(t.now_ns - t_origin) / 1e9 for t in log.ticks if t.is_fallback],
        "plots": [{"name": name, "src": _data_uri(png, "image/png")} for name, png in plots],
    }


def write_report(
    path: Path,
    log: ReplayLog,
    metrics: dict[str, Any],
    cameras: tuple[str, ...],
    plots: list[tuple[str, bytes]],
) -> Path:
    data = json.dumps(report_data(log, metrics, cameras, plots), separators=(",", ":"))
    # Inside <script> a literal "</" would end the element early.
    html = PAGE.replace("__DATA__", data.replace("</", "<\\/"))
    write_atomic(path, html.encode("utf-8"))
    return path


def write_atomic(path: Path, data: bytes) -> None:
    """Write `path` whole or not at all (a full disk leaves no truncated file behind)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
