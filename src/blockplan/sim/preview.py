"""Example frames: a 2x2 contact sheet of the rig's cameras at one instant of a scenario.

    python -m blockplan.sim.preview --out docs/sim [--scenario highway ...] [--time 6]

writes <out>/<scenario>.png (front_left | front over front_right | rear, upscaled).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from blockplan.sim.episode import run_episode
from blockplan.sim.render import RigRenderer
from blockplan.sim.rig import load_rig
from blockplan.sim.scenarios import SCENARIOS, get_scenario


def contact_sheet(images: dict[str, np.ndarray], names: list[str], scale: int = 2) -> np.ndarray:
    """Cameras in rows of two, each labelled with its name, upscaled by `scale`."""
    tiles = []
    for name in names:
        img = Image.fromarray(images[name]).resize(
            (images[name].shape[1] * scale, images[name].shape[0] * scale), Image.NEAREST
        )
        ImageDraw.Draw(img).text((4, 2), name, fill=(255, 255, 255))
        tiles.append(np.asarray(img))
    if len(tiles) % 2:
        tiles.append(np.zeros_like(tiles[0]))
    rows = [np.concatenate(tiles[i : i + 2], axis=1) for i in range(0, len(tiles), 2)]
    return np.concatenate(rows, axis=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m blockplan.sim.preview", description=__doc__)
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--scenario", nargs="+", default=sorted(SCENARIOS), help="scenarios")
    parser.add_argument("--time", type=float, default=6.0, help="seconds into the episode (6)")
    parser.add_argument("--seed", type=int, default=1, help="episode seed (1)")
    args = parser.parse_args(argv)
    rig = load_rig()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.scenario:
        log = run_episode(get_scenario(name), args.seed, args.time + 0.1)
        images = RigRenderer(rig, log.road).render(log.snapshot(log.index_at(args.time)))
        sheet = contact_sheet(images, list(rig.names))
        Image.fromarray(sheet).save(out / f"{name}.png", optimize=True)
        print(out / f"{name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
