"""Does a model read the car ahead? Waypoint error on a data set's test samples with the
car-ahead report as recorded and hidden (unknown), and the plans' 5 s reach when the lead's
speed is raised by 5 m/s (samples with a car within 80 m).

    python scripts/lead_sensitivity.py MODEL DATA N   # e.g. models/blockplan-tiny BASE 200
"""

import dataclasses
import sys

import numpy as np
import torch

from blockplan.config import default_params_path, load_config
from blockplan.planner.planner import Planner
from blockplan.sim.dataset import load_shard, sample_observation
from blockplan.train.examples import read_manifest

torch.set_num_threads(1)
model, data, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
planner = Planner.from_folder(model, load_config(default_params_path()))
entries = [e for e in read_manifest(data)["episodes"] if e["split"] == "test"]
refs = [(e, i) for e in entries for i in range(e["num_samples"])]
keep = np.unique(np.linspace(0, len(refs) - 1, n).round().astype(int))
err = {
    "as recorded": [],
    "hidden": [],
    "lead +5 m/s": [],
    "cars: as recorded": [],
    "cars: hidden": [],
}
reach = {"as recorded": [], "lead +5 m/s": []}
cars = 0
shard_cache = {}
for k in keep:
    e, i = refs[k]
    shard = shard_cache.setdefault(e["shard"], load_shard(f"{data}/{e['shard']}"))
    obs = sample_observation(shard, i)
    gt = shard["future_xy"][i][3::4]
    variants = {"as recorded": obs, "hidden": dataclasses.replace(obs, lead=None)}
    if obs.lead is not None and np.isfinite(obs.lead[0]) and obs.lead[0] < 80:
        cars += 1
        variants["lead +5 m/s"] = dataclasses.replace(obs, lead=(obs.lead[0], obs.lead[1] + 5))
    for name, o in variants.items():
        planner.previous_answer = None
        w = planner.decode(o, "scaffold_spec").plan.answer.waypoints
        e_ = float(np.linalg.norm(w - gt, axis=-1).mean())
        err[name].append(e_)
        if "lead +5 m/s" in variants and name != "lead +5 m/s":
            err["cars: " + name].append(e_)
        if "lead +5 m/s" in variants and name in reach:
            reach[name].append(float(w[-1, 0]))
print(f"{len(keep)} samples, {cars} with a car within 80 m")
for name, v in reach.items():
    print(f"{name:12s} mean 5 s reach with a car within 80 m {np.mean(v):.2f} m")
for name, v in err.items():
    print(f"{name:12s} mean waypoint error {np.mean(v):.3f} m over {len(v)}")
