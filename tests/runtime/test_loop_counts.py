"""What the loop counts for inputs and results that are no error (issue #19): a re-sent
odometry message is a duplicate, not out of order; a re-plan of a window that has not
changed is not a discarded result."""

from __future__ import annotations

from blockplan.types import EgoState
from tests.runtime.test_loop import SPEED, _runtime


def test_duplicate_odometry_is_counted_as_such() -> None:
    runtime, drive = _runtime("ideal")
    drive.run(5)
    runtime.on_odometry(EgoState(drive.t, drive.x, 0.0, 0.0, SPEED))  # the newest, again
    runtime.on_odometry(EgoState(drive.t - 50_000_000, drive.x, 0.0, 0.0, SPEED))  # older
    counts = runtime.metrics()
    assert counts["duplicate_odometry"] == 1 and counts["out_of_order_odometry"] == 1
    assert counts["invalid_inputs"] == 0


def test_replans_of_an_unchanged_window_are_not_discarded_results() -> None:
    runtime, drive = _runtime("ideal")
    drive.run(5)
    drive.run(2, cameras=[])  # no new frame: the window is the one of the last plan
    drive.run(3)
    counts = runtime.metrics()
    assert counts["unchanged_window_replans"] == 2
    assert counts["discarded_results"] == 0
    assert counts["plans"] == 8
