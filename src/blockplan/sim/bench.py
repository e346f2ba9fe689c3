"""Speed of the simulator pipeline: simulation steps/s per scenario and render ms/camera.

    python -m blockplan.sim.bench [--seconds 10] [--frames 50]

prints JSON. Render time (wall clock, and the thread's CPU time, which a loaded machine
distorts less) is the median over `frames` consecutive camera ticks of one
episode for all cameras, divided by the number of cameras; ground-texture rasterisations
(when the ego leaves the texture window) are included in `render_ms_per_camera_mean` and
reported on their own as `texture_rasterise_ms`.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from blockplan.sim.episode import run_episode
from blockplan.sim.render import RigRenderer
from blockplan.sim.rig import load_rig
from blockplan.sim.scenarios import SCENARIOS, SIM_HZ, get_scenario


def bench_scenario(name: str, seconds: float, num_frames: int, seed: int = 1) -> dict[str, float]:
    scenario = get_scenario(name)
    start = time.perf_counter()
    log = run_episode(scenario, seed, seconds)
    sim_s = time.perf_counter() - start
    steps = round((seconds + scenario.warmup_s) * SIM_HZ)
    rig = load_rig()
    renderer = RigRenderer(rig, log.road)
    renderer.render(log.snapshot(0))  # first texture window
    every = round(SIM_HZ / rig.rate_hz)
    ticks = list(range(0, log.num_steps, every))[:num_frames]
    times, cpu = [], []
    for i in ticks:
        t, c = time.perf_counter(), time.thread_time()
        renderer.render(log.snapshot(i))
        times.append((time.perf_counter() - t) * 1000 / len(rig.cameras))
        cpu.append((time.thread_time() - c) * 1000 / len(rig.cameras))
    t = time.perf_counter()
    renderer.texture._rasterise()
    raster_ms = (time.perf_counter() - t) * 1000
    return {
        "sim_steps_per_s": round(steps / sim_s, 1),
        "sim_realtime_factor": round(steps / SIM_HZ / sim_s, 2),
        "render_ms_per_camera_median": round(float(np.median(times)), 2),
        "render_ms_per_camera_mean": round(float(np.mean(times)), 2),
        "render_cpu_ms_per_camera_median": round(float(np.median(cpu)), 2),
        "texture_rasterise_ms": round(raster_ms, 1),
        "num_frames": len(times),
        "crashed": log.crashed_at is not None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m blockplan.sim.bench", description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0, help="simulated seconds (10)")
    parser.add_argument("--frames", type=int, default=50, help="camera ticks rendered (50)")
    parser.add_argument("--scenario", nargs="+", default=sorted(SCENARIOS), help="scenarios")
    args = parser.parse_args(argv)
    rig = load_rig()
    report = {
        "cameras": list(rig.names),
        "image_size": [rig.cameras[0].height, rig.cameras[0].width],
        "scenarios": {s: bench_scenario(s, args.seconds, args.frames) for s in args.scenario},
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
