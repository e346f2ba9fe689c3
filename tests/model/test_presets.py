"""Presets: sizes and the exactly streamable `*-stream` variants."""

from __future__ import annotations

import pytest

from blockplan.model.config import ModelConfigError
from blockplan.model.presets import preset_config, preset_names


def test_stream_presets_select_the_exact_layout():
    assert {"tiny", "tiny-stream", "test", "test-stream"} <= set(preset_names())
    plain = preset_config("tiny", 100, ("a", "b"), 4)
    stream = preset_config("tiny-stream", 100, ("a", "b"), 4)
    assert not plain.streams_exactly and plain.visual_attention == "frame_and_header"
    assert stream.streams_exactly and stream.decoder == plain.decoder
    with pytest.raises(ModelConfigError, match="preset"):
        preset_config("huge-stream", 100, ("a",), 1)
