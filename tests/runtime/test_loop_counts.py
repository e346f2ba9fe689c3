"""What the loop counts for inputs and results that are no error: a re-sent
odometry message is a duplicate, not out of order; a re-plan of a window that has not
changed is not a discarded result."""

from __future__ import annotations

import numpy as np

from blockplan.types import CameraFrame, EgoState
from tests.runtime.test_loop import SPEED, _runtime


def test_duplicate_odometry_is_counted_as_such() -> None:
    runtime, drive = _runtime("ideal")
    drive.run(5)
    runtime.on_odometry(EgoState(drive.t, drive.x, 0.0, 0.0, SPEED))  # the newest, again
    runtime.on_odometry(EgoState(drive.t - 50_000_000, drive.x, 0.0, 0.0, SPEED))  # older
    counts = runtime.metrics()
    assert counts["duplicate_odometry"] == 1 and counts["out_of_order_odometry"] == 1
    assert counts["invalid_inputs"] == 0


def test_a_window_without_a_newer_frame_is_not_planned_again() -> None:
    """Its plan would be dropped, and live it would be a plan replay never makes (the next
    plan drafts from its answer: docs/RUNTIME.md "Live and offline")."""
    runtime, drive = _runtime("ideal")
    drive.run(5)
    outputs = drive.run(2, cameras=[])  # no new frame: the window is the one of the last plan
    assert not any(o.is_requested for o in outputs)
    assert not any(o.is_fallback for o in outputs)  # the last plan still stands
    drive.run(3)
    counts = runtime.metrics()
    assert counts["requests"] == 8 and counts["plans"] == 8
    assert counts["unchanged_window_replans"] == 0 and counts["discarded_results"] == 0


def test_a_degraded_window_is_planned_again_once_it_is_complete() -> None:
    """The only replan left: the same newest frame, the missing cameras caught up."""
    runtime, drive = _runtime("ideal")
    drive.run(3)
    cameras = list(runtime.config.camera_names)
    # one camera only, for longer than max_frame_age_s: degraded windows
    first = drive.run(4, cameras=cameras[:1])[-1]
    assert first.is_requested and runtime.metrics()["degraded_requests"] >= 1
    for cam in cameras[1:]:  # the others' frames of the same instant arrive late
        runtime.on_frame(CameraFrame(cam, drive.t, np.zeros((4, 4, 3), np.uint8)))
    again = runtime.tick()
    assert again.is_requested  # complete now
    assert not runtime.tick().is_requested  # and not a third time
    counts = runtime.metrics()
    assert counts["unchanged_window_replans"] == 1 and counts["discarded_results"] == 0
