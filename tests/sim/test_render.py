from __future__ import annotations

import dataclasses

import numpy as np

from blockplan.sim.render import RigRenderer
from blockplan.sim.rig import load_rig
from blockplan.sim.roadmap import ASPHALT, GRASS
from blockplan.sim.world import KIND_VEHICLE, Box


def test_every_camera_renders_its_shape(highway_log) -> None:
    rig = load_rig()
    renderer = RigRenderer(rig, highway_log.road)
    images = renderer.render(highway_log.snapshot(40))
    assert set(images) == set(rig.names)
    for cam in rig.cameras:
        img = images[cam.name]
        assert img.shape == (cam.height, cam.width, 3) and img.dtype == np.uint8
        sky, ground = img[2].mean(axis=0), img[-2].mean(axis=0)
        assert sky[2] > sky[0] + 20  # blue-ish sky at the top
        assert abs(float(ground[0]) - float(ground[2])) < 40  # grey or green ground below


def test_front_camera_sees_the_road_and_a_car_placed_ahead(highway_log) -> None:
    rig = load_rig()
    renderer = RigRenderer(rig, highway_log.road)
    snap = dataclasses.replace(highway_log.snapshot(0), boxes=())
    empty = renderer.render(snap)["front"]
    # the bottom centre of the front view is asphalt, not grass
    patch = empty[-10:, 70:90].reshape(-1, 3).mean(axis=0)
    assert np.linalg.norm(patch - ASPHALT) < np.linalg.norm(patch - GRASS)
    ego = snap.ego
    red = Box(
        99,
        KIND_VEHICLE,
        ego.x + 12.0 * np.cos(ego.yaw),
        ego.y + 12.0 * np.sin(ego.yaw),
        ego.yaw,
        0.0,
        5.0,
        2.0,
        1.5,
        (220, 20, 20),
    )
    with_car = renderer.render(dataclasses.replace(snap, boxes=(red,)))["front"]
    diff = np.abs(with_car.astype(int) - empty.astype(int)).sum(axis=2)
    rows, cols = np.nonzero(diff > 30)
    assert len(rows) > 50
    assert 60 < cols.mean() < 100  # centred horizontally, straight ahead
    centre = with_car[rows, cols].mean(axis=0)
    assert centre[0] > centre[1] + 15  # the car is drawn red-ish
    # the rear camera does not see a car that is ahead
    assert np.array_equal(
        renderer.render(dataclasses.replace(snap, boxes=(red,)))["rear"],
        renderer.render(snap)["rear"],
    )
