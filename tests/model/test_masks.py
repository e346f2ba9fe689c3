from __future__ import annotations

import pytest
import torch

from blockplan.model.masks import block_causal_mask, causal_mask, draft_mask, frame_local_mask
from blockplan.schema.layout import ImageSpan, PromptLayout


def test_causal_and_draft():
    m = causal_mask(3, 2)
    assert m.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert draft_mask(2, 3).all() and draft_mask(2, 3).shape == (2, 5)


def test_block_causal():
    prefix = causal_mask(2)
    m = block_causal_mask(prefix, [(0, 2), (2, 3)])
    assert m.shape == (5, 5)
    assert m[2:4, :4].all() and not m[2:4, 4].any()  # block 0: prompt + itself, not block 1
    assert m[4].all()
    assert m[:2, :2].equal(prefix) and not m[:2, 2:].any()
    with pytest.raises(ValueError, match="tile"):
        block_causal_mask(prefix, [(0, 2), (3, 4)])


def test_frame_local():
    spans = (ImageSpan(2, 4, 0, 0), ImageSpan(4, 6, 0, 1))
    layout = PromptLayout(torch.zeros(8).numpy(), header_end=2, image_spans=spans)
    m = frame_local_mask(layout)
    assert m[3].tolist() == [1, 1, 1, 1, 0, 0, 0, 0]  # header + own frame, bidirectional
    assert m[4].tolist() == [1, 1, 0, 0, 1, 1, 0, 0]  # not the previous frame
    assert m[6].tolist() == [1] * 7 + [0]  # text after the images sees everything before


def test_frame_only_drops_the_header_and_prompt_mask_picks_by_setting():
    from blockplan.model.masks import prompt_mask

    spans = (ImageSpan(2, 4, 0, 0), ImageSpan(4, 6, 0, 1))
    layout = PromptLayout(torch.zeros(8).numpy(), header_end=2, image_spans=spans)
    m = prompt_mask(layout, "frame_only")
    assert m[3].tolist() == [0, 0, 1, 1, 0, 0, 0, 0]  # own frame only
    assert m[6].tolist() == [1] * 7 + [0]  # text unchanged
    assert prompt_mask(layout, "frame_and_header").equal(frame_local_mask(layout))
    with pytest.raises(ValueError, match="visual_attention"):
        prompt_mask(layout, "everything")


def test_pipeline_mask_is_block_causal_over_the_active_window():
    from blockplan.model.masks import pipeline_mask

    assert pipeline_mask(3, [(0, 4)], [False]).equal(draft_mask(4, 3))
    assert pipeline_mask(3, [(0, 4)], [True]).equal(causal_mask(4, 3))
    m = pipeline_mask(2, [(0, 2), (2, 5)], [False, False])
    assert m[0].tolist() == [1, 1, 1, 1, 0, 0, 0]  # the cache and its own block only
    assert m[3].tolist() == [1] * 7  # the earlier active block and all of its own
    m = pipeline_mask(1, [(0, 2), (2, 4)], [True, False])  # a closing block, token-causal
    assert m[0].tolist() == [1, 1, 0, 0, 0] and m[1].tolist() == [1, 1, 1, 0, 0]
    assert m[2].tolist() == [1, 1, 1, 1, 1]
    with pytest.raises(ValueError, match="tile"):
        pipeline_mask(0, [(0, 2), (3, 4)], [False, False])
