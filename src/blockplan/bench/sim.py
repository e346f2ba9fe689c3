"""Speed of the simulator pipeline: simulation steps/s per scenario and render ms/camera.

`blockplan bench-sim [--seconds 10] [--frames 50]` prints `sim_report` as JSON. Render time (wall clock, and the thread's CPU time, which a loaded machine
distorts less) is the median over `frames` consecutive camera ticks of one
episode for all cameras, divided by the number of cameras; ground-texture rasterisations
(when the ego leaves the texture window) are included in `render_ms_per_camera_mean` and
reported on their own as `texture_rasterise_ms`.
"""

from __future__ import annotations

import time

import numpy as np

from blockplan.sim.episode import run_episode
from blockplan.sim.render import RigRenderer
from blockplan.sim.rig import load_rig
from blockplan.sim.scenarios import SIM_HZ, get_scenario


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


def sim_report(scenarios: list[str], seconds: float, num_frames: int) -> dict:
    """The rig's cameras and image size, and `bench_scenario` per scenario."""
    rig = load_rig()
    return {
        "cameras": list(rig.names),
        "image_size": [rig.cameras[0].height, rig.cameras[0].width],
        "scenarios": {s: bench_scenario(s, seconds, num_frames) for s in scenarios},
    }
