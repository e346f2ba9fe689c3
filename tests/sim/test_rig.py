from __future__ import annotations

import numpy as np
import pytest

from blockplan.sim.rig import RigError, camera_from_dict, load_rig, rig_from_dict


def test_default_rig_has_the_four_cameras() -> None:
    rig = load_rig()
    assert rig.names == ("front_left", "front", "front_right", "rear")
    assert all((c.width, c.height) == (160, 96) for c in rig.cameras)
    assert rig.rate_hz > 0


def _cam(**kw):
    entry = {"name": "c", "width": 160, "height": 96, "hfov_deg": 90.0, "z": 1.5, **kw}
    return camera_from_dict(entry, 0)


def test_optical_axis_points_where_the_camera_looks() -> None:
    front, left = _cam(), _cam(yaw_deg=90.0)
    z_axis = np.array([0.0, 0.0, 1.0])  # optical z is the viewing direction
    assert np.allclose(front.R_base_from_optical @ z_axis, [1, 0, 0], atol=1e-9)
    assert np.allclose(left.R_base_from_optical @ z_axis, [0, 1, 0], atol=1e-9)
    down = _cam(pitch_deg=10.0).R_base_from_optical @ z_axis
    assert down[2] < 0  # positive pitch looks down
    # optical x is image-right: for the front camera that is base_link -y
    assert np.allclose(front.R_base_from_optical @ [1.0, 0, 0], [0, -1, 0], atol=1e-9)


@pytest.mark.parametrize(
    "entry, field",
    [
        ({"name": "bad name", "width": 10, "height": 10, "hfov_deg": 90}, "name"),
        ({"name": "a", "width": 4, "height": 10, "hfov_deg": 90}, "width"),
        ({"name": "a", "width": 16, "height": 16, "hfov_deg": 200}, "hfov_deg"),
        ({"name": "a", "width": 16, "height": 16, "hfov_deg": 90, "zoom": 2}, "zoom"),
    ],
)
def test_bad_camera_entries_name_the_field(entry, field) -> None:
    with pytest.raises(RigError, match=field):
        camera_from_dict(entry, 0)


def test_duplicate_names_rejected() -> None:
    cam = {"name": "a", "width": 16, "height": 16, "hfov_deg": 90}
    with pytest.raises(RigError, match="unique"):
        rig_from_dict({"rig": {"cameras": [cam, cam]}})


@pytest.mark.parametrize("rpy", [(0.0, 0.0, 0.0), (0.1, 0.2, -2.5), (-0.3, 0.05, 3.0)])
def test_rpy_from_matrix_inverts_rotation_rpy(rpy) -> None:
    from blockplan.sim.bag import rpy_from_matrix
    from blockplan.sim.rig import rotation_rpy

    R = rotation_rpy(*rpy)
    assert np.allclose(rotation_rpy(*rpy_from_matrix(R)), R, atol=1e-12)


def test_static_frames_hold_the_optical_rotation() -> None:
    from blockplan.sim.bag import camera_static_frames
    from blockplan.sim.rig import rotation_rpy

    rig = load_rig()
    frames = {f.child_frame_id: f for f in camera_static_frames(rig)}
    for cam in rig.cameras:
        optical = frames[cam.optical_frame_id]
        assert np.allclose(rotation_rpy(*optical.rpy), cam.R_base_from_optical, atol=1e-12)
        assert optical.xyz == (cam.x, cam.y, cam.z)
