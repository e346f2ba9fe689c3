import torch

from blockplan.model.masks import causal_mask, frame_local_mask
from blockplan.train.streams import two_stream_mask, two_stream_positions


def test_two_stream_mask_layout(recipe):
    template, scaffold = recipe.template, recipe.scaffold
    prompt = frame_local_mask(template)
    P, A = len(template), len(scaffold)
    mask = two_stream_mask(prompt, scaffold.blocks, 2)
    assert mask.shape == (P + 3 * A, P + 3 * A)
    assert torch.equal(mask[:P, :P], prompt)
    assert not mask[:P, P:].any()  # the prompt never sees the answer
    assert torch.equal(mask[P : P + A, : P + A], causal_mask(A, P))  # clean: token-causal
    assert not mask[P : P + A, P + A :].any()  # clean never sees a noisy copy
    for c in range(2):
        off = P + (1 + c) * A
        for block in scaffold.blocks:
            rows = mask[off + block.start : off + block.end]
            assert rows[:, :P].all()
            assert rows[:, P : P + block.start].all()  # clean earlier blocks
            assert not rows[:, P + block.start : P + A].any()  # never the clean block itself
            assert rows[:, off + block.start : off + block.end].all()  # own block, both ways
            own = torch.zeros(2 * A, dtype=torch.bool)
            own[c * A + block.start : c * A + block.end] = True
            assert torch.equal(rows[:, P + A :], own.expand(len(rows), -1))


def test_visual_tokens_are_frame_local_in_training(recipe):
    template = recipe.template
    mask = two_stream_mask(frame_local_mask(template), recipe.scaffold.blocks, 2)
    a, b = template.image_spans[0], template.image_spans[1]
    assert mask[a.start, : template.header_end].all()
    assert not mask[b.start, a.start : a.end].any()  # a later frame never sees an earlier one


def test_positions_share_the_answer_slots(recipe):
    P, A = len(recipe.template), len(recipe.scaffold)
    pos = two_stream_positions(P, A, 2)
    assert pos.shape == (P + 3 * A,)
    assert torch.equal(pos[P : P + A], pos[P + 2 * A :])
    assert int(pos[P]) == P
