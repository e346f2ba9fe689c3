"""The fuzz variants' refusal times, per folder and file kind (docs/BENCHMARKS.md "Fuzzed
model folders and params files"): `python -m tests.fuzz.measure` from the repository root
(src on the path: `PYTHONPATH=src`). Prints a markdown table: variants, the worst CPU and
wall time of a refusal, and the variant whose CPU time was the worst."""

from __future__ import annotations

import resource
import shutil
import tempfile
import time
from pathlib import Path

from blockplan.config import ConfigError, load_config, package_root
from blockplan.errors import UserError
from blockplan.planner.loading import load_model
from tests.fuzz import generator

FOLDERS = (
    ("vehicle", "models/blockplan-tiny", "planner.yaml"),
    ("robot", "models/blockplan-robot-tiny", "robot.yaml"),
)


def _timed(load, refused: type[Exception]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        load()
    except refused:
        return time.process_time() - cpu, time.perf_counter() - wall
    raise SystemExit("a malformed variant loaded")


def main() -> None:
    rows: dict[tuple[str, str], list] = {}

    def add(key: tuple[str, str], id_: str, cpu: float, wall: float) -> None:
        row = rows.setdefault(key, [0, 0.0, 0.0, ""])
        row[0] += 1
        if cpu > row[1]:
            row[1], row[3] = cpu, id_
        row[2] = max(row[2], wall)

    with tempfile.TemporaryDirectory() as tmp:
        for embodiment, folder, params in FOLDERS:
            root = Path(tmp) / embodiment
            pristine = generator.copy_folder(Path(folder), root / "pristine")
            path = package_root() / "params" / params
            config = load_config(path, overrides=("model.num_threads=1",))
            load_model(str(pristine), config)  # warm-up: imports, caches
            for i, v in enumerate(generator.folder_variants(Path(folder), embodiment == "robot")):
                built = generator.build(pristine, v, root / f"v{i}")
                cpu, wall = _timed(lambda b=built, c=config: load_model(str(b), c), UserError)
                add((embodiment, v.file), v.id, cpu, wall)
                shutil.rmtree(built)
            (root / "params").mkdir()
            for v in generator.params_variants(path):
                v.make(root / "params")
                target = root / "params" / path.name
                cpu, wall = _timed(lambda t=target: load_config(t), ConfigError)
                add((embodiment, path.name), v.id, cpu, wall)
    print("| folder | file | variants | worst CPU ms | worst wall ms | worst variant (CPU) |")
    print("|---|---|---:|---:|---:|---|")
    for (embodiment, kind), (n, cpu, wall, worst) in sorted(rows.items()):
        print(f"| {embodiment} | {kind} | {n} | {cpu * 1e3:.0f} | {wall * 1e3:.0f} | `{worst}` |")
    total = sum(r[0] for r in rows.values())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"\n{total} variants, peak RSS {peak} MB")


if __name__ == "__main__":
    main()
