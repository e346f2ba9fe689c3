"""Replay a robot bag through `RobotRuntime` (open loop) and report it (`blockplan replay
--embodiment robot`, `blockplan demo --embodiment robot`; docs/BENCHMARKS.md "Robots").

The bag's steps (its /joint_states) drive a virtual clock; the frames and the instruction go
into the runtime as the node's callbacks would hand them over, the runtime ticks once per
step and what it publishes is compared with the bag's recorded command (the demonstrator's,
or a policy's own run): per-channel MAE, the fraction of held (fallback) steps, and the
episode's recorded outcome (`/episode/info`: success, steps). OUT/ gets `metrics.json`,
`actions.png` (recorded vs replayed action per channel over time) and `report.html`.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from blockplan.runtime.clock import VirtualClock
from blockplan.sim.robot_bag import read_demo_bag
from blockplan.types import CameraFrame

CHANNELS = ("dx", "dy", "dz", "grip")


def replay_robot_bag(bag: str | Path, planner: Any, config: Any, timing: str = "ideal") -> dict:
    """Run the runtime over the bag; returns the per-step arrays and the metrics."""
    from blockplan.runtime.robot import RobotRuntime

    episode = read_demo_bag(bag, tuple(config.camera_names))
    clock = VirtualClock(int(episode.stamp_ns[0]))
    runtime = RobotRuntime(config, planner, clock, timing=timing)
    if episode.instruction:
        runtime.on_instruction(episode.instruction)
    names = tuple(config.robot.joint_name_list)
    replayed, held, chunks = [], [], 0
    last_frame_stamp = {c: None for c in config.camera_names}
    render = episode.info.get("render_steps") or [0, 1]
    every = max(1, render[1] - render[0]) if len(render) > 1 else 1
    try:
        for t, stamp in enumerate(episode.stamp_ns):
            clock.set(int(stamp))
            if t % every == 0:  # the camera's own rate: a new image every `every` steps
                for k, cam in enumerate(config.camera_names):
                    if last_frame_stamp[cam] != int(stamp):
                        runtime.on_frame(CameraFrame(cam, int(stamp), episode.frames[t, k]))
                        last_frame_stamp[cam] = int(stamp)
            runtime.on_joint_state(int(stamp), names, episode.joints[t])
            out = runtime.tick()
            replayed.append(out.action)
            held.append(out.is_fallback)
            chunks += len(out.new_chunks)
        metrics_runtime = runtime.metrics()
    finally:
        runtime.close()
    replayed_a = np.asarray(replayed)
    recorded = episode.actions
    used = ~np.asarray(held)
    mae = np.abs(replayed_a - recorded)
    metrics = {
        "bag": str(bag),
        "instruction": episode.instruction,
        "episode": episode.info,
        "steps": len(recorded),
        "chunks": chunks,
        "held_fraction": float(np.mean(held)),
        "action_mae": {
            c: float(mae[used, i].mean()) if used.any() else None
            for i, c in enumerate(CHANNELS[: recorded.shape[1]])
        },
        "runtime": {k: v for k, v in metrics_runtime.items() if not isinstance(v, dict)},
        "latency_ms": metrics_runtime["latency_ms"],
    }
    return {
        "recorded": recorded,
        "replayed": replayed_a,
        "held": np.asarray(held),
        "stamp_ns": episode.stamp_ns,
        "metrics": metrics,
        "frames": episode.frames,
    }


def actions_png(result: dict) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rec, rep = result["recorded"], result["replayed"]
    t = (result["stamp_ns"] - result["stamp_ns"][0]) / 1e9
    fig, axes = plt.subplots(rec.shape[1], 1, figsize=(7, 1.6 * rec.shape[1]), sharex=True)
    for i, ax in enumerate(np.atleast_1d(axes)):
        ax.plot(t, rec[:, i], label="recorded", color="black", lw=1.2)
        ax.plot(t, rep[:, i], label="policy (replay)", color="tab:orange", lw=1.0)
        held = result["held"]
        if held.any():
            ax.fill_between(
                t, -1, 1, where=held, color="tab:red", alpha=0.1, step="mid", label="hold"
            )
        ax.set_ylabel(CHANNELS[i] if i < len(CHANNELS) else f"a{i}")
        ax.set_ylim(-1.1, 1.1)
    np.atleast_1d(axes)[0].legend(loc="upper right", fontsize=7, ncol=3)
    np.atleast_1d(axes)[-1].set_xlabel("s")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def write_robot_report(result: dict, out: str | Path, extra: dict | None = None) -> dict[str, Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    metrics = {**result["metrics"], **(extra or {})}
    paths = {
        "metrics": out / "metrics.json",
        "plot": out / "actions.png",
        "report": out / "report.html",
    }
    paths["metrics"].write_text(json.dumps(metrics, indent=2) + "\n")
    png = actions_png(result)
    paths["plot"].write_bytes(png)
    frames = result["frames"]
    strip = np.concatenate(
        [
            np.concatenate(list(frames[t]), axis=0)
            for t in np.linspace(0, len(frames) - 1, 6).astype(int)
        ],
        axis=1,
    )
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(strip).save(buf, format="PNG")
    info = metrics.get("episode", {})
    rows = "".join(
        f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(json.dumps(v))}</td></tr>"
        for k, v in metrics.items()
        if k not in ("runtime",)
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>blockplan robot replay</title>
<style>body{{font-family:sans-serif;max-width:900px;margin:2em auto}}td{{padding:2px 8px;
border-bottom:1px solid #ddd;font-size:13px}}img{{max-width:100%}}</style></head><body>
<h1>Robot replay: {html.escape(str(info.get("task", "")))} seed {html.escape(str(info.get("seed", "")))}</h1>
<p>Instruction: <b>{html.escape(metrics["instruction"])}</b>. Recorded episode:
{"success" if info.get("success") else "no success"} after {html.escape(str(info.get("success_step")))}
steps. The policy replayed the bag open loop through RobotRuntime; {metrics["chunks"]} chunks,
{metrics["held_fraction"]:.0%} of the steps held position.</p>
<h2>Cameras (front above wrist)</h2><img src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">
<h2>Recorded vs replayed action</h2><img src="data:image/png;base64,{base64.b64encode(png).decode()}">
<h2>Metrics</h2><table>{rows}</table></body></html>
"""
    paths["report"].write_text(page)
    return paths
