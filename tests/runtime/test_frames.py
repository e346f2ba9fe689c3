"""Ring buffers and the K×T window snapshot."""

from __future__ import annotations

import numpy as np
import pytest

from blockplan.config import FrameWindowConfig
from blockplan.runtime import CameraRingBuffer, CameraState, FrameWindow, PushResult
from blockplan.types import CameraFrame

MS = 1_000_000


def _frame(camera: str, stamp_ns: int, value: int = 0) -> CameraFrame:
    return CameraFrame(camera, stamp_ns, np.full((2, 3, 3), value, np.uint8))


def test_ring_buffer_is_bounded_and_keeps_its_span() -> None:
    buf = CameraRingBuffer("c", span_ns=1000 * MS, max_frames=8, time_jump_ns=10**9)
    for i in range(200):  # 100 Hz for 2 s
        assert buf.push(_frame("c", i * 10 * MS)) == PushResult.ACCEPTED
    stamps = [f.stamp_ns for f in buf.frames]
    assert len(stamps) == 8
    assert stamps[-1] == 1990 * MS  # newest kept
    assert stamps[0] >= 990 * MS  # nothing older than the span
    assert stamps[-1] - stamps[0] >= 900 * MS  # thinning keeps the span covered
    assert max(np.diff(stamps)) <= 250 * MS  # and spreads the frames over it


def test_ring_buffer_rejects_duplicates_out_of_order_and_flags_jumps() -> None:
    buf = CameraRingBuffer("c", span_ns=10**9, max_frames=4, time_jump_ns=10**9)
    buf.push(_frame("c", 5 * 10**9))
    assert buf.push(_frame("c", 5 * 10**9)) == PushResult.DUPLICATE
    assert buf.push(_frame("c", 5 * 10**9 - 50 * MS)) == PushResult.OUT_OF_ORDER
    assert buf.push(_frame("c", 3 * 10**9)) == PushResult.TIME_JUMP
    assert len(buf) == 1


def _window(num_frames: int = 3, policy: str = "degrade") -> FrameWindow:
    config = FrameWindowConfig(
        num_frames=num_frames,
        frame_period_s=0.5,
        max_frame_age_s=0.3,
        stale_camera_policy=policy,
    )
    return FrameWindow(("a", "b"), config)


def test_snapshot_is_view_major_with_frames_period_apart() -> None:
    window = _window(num_frames=3)
    for i in range(31):  # 10 Hz for 3 s
        t = i * 100 * MS
        window.push(_frame("a", t, 1))
        window.push(_frame("b", t + 5 * MS, 2))
    snap = window.snapshot(3050 * MS)
    assert snap.is_complete and not snap.is_padded
    frames = snap.complete_frames()
    assert [f.camera for f in frames] == ["a", "a", "a", "b", "b", "b"]
    assert [f.stamp_ns // MS for f in frames] == [2000, 2500, 3000, 2005, 2505, 3005]
    assert snap.stamp_ns == 3005 * MS


def test_stale_and_missing_cameras_and_degraded_frames() -> None:
    window = _window(num_frames=2)
    for i in range(10):
        window.push(_frame("a", i * 100 * MS, 7))
    snap = window.snapshot(900 * MS)
    status = {c.camera: c for c in snap.cameras}
    assert status["a"].state == CameraState.OK and status["b"].state == CameraState.MISSING
    assert snap.bad_cameras == ("b",)
    with pytest.raises(ValueError, match="incomplete"):
        snap.complete_frames()
    degraded = snap.degrade_frames()
    assert [f.camera for f in degraded] == ["a", "a", "b", "b"]
    assert degraded[2].image.max() == 0 and degraded[2].image.shape == (2, 3, 3)
    assert degraded[2].stamp_ns == degraded[0].stamp_ns
    stale = window.snapshot(1300 * MS)  # newest frame 0.4 s old > 0.3 s
    assert stale.cameras[0].state == CameraState.STALE
    assert stale.cameras[0].age_s == pytest.approx(0.4)
    assert stale.stamp_ns is None and stale.num_fresh == 0
    with pytest.raises(ValueError, match="no fresh camera"):
        stale.degrade_frames()


def test_padding_before_the_window_fills() -> None:
    window = _window(num_frames=3)
    window.push(_frame("a", 0))
    window.push(_frame("b", 0))
    snap = window.snapshot(10 * MS)
    assert snap.is_padded and snap.is_complete
    assert [f.stamp_ns for f in snap.complete_frames()] == [0] * 6


def test_unknown_camera_is_an_error() -> None:
    with pytest.raises(KeyError, match="unknown camera 'z'"):
        _window().push(_frame("z", 0))
