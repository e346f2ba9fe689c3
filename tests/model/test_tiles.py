"""Tiled attention (model/tiles.py) equals dense masked attention, values and gradients, and
computes fewer scores where the mask is mostly empty."""

import pytest
import torch
import torch.nn.functional as F

from blockplan.model.masks import block_causal_mask
from blockplan.model.tiles import AttentionTiles
from blockplan.schema.layout import Block
from blockplan.train.streams import two_stream_mask


def _prompt_mask(P: int) -> torch.Tensor:
    return torch.ones(P, P, dtype=torch.bool).tril()


def _two_stream(P=20, blocks=((0, 8), (8, 16), (16, 21))) -> torch.Tensor:
    spans = [Block(start=a, end=b, section="answer") for a, b in blocks]
    return two_stream_mask(_prompt_mask(P), spans, 2)


def _dense(q, k, v, mask):
    bias = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, -torch.inf)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)


def _rebuilt(tiles: AttentionTiles) -> torch.Tensor:
    """The bool mask the tiles attend under."""
    S, L = tiles.shape
    out = torch.zeros(S, L, dtype=torch.bool)
    covered = torch.zeros(S, dtype=torch.int64)
    for t in tiles.tiles:
        a, b = t.rows
        covered[a:b] += 1
        keys = torch.cat([torch.arange(s, e) for s, e in t.runs])
        allowed = torch.ones(b - a, len(keys), dtype=torch.bool) if t.allowed is None else t.allowed
        out[a:b, keys] = allowed
    assert (covered == 1).all()  # the tiles partition the rows
    return out


MASKS = {
    "two-stream": _two_stream,
    "block-causal": lambda: block_causal_mask(_prompt_mask(30), [(0, 6), (6, 12), (12, 18)]),
    "causal": lambda: torch.ones(40, 40, dtype=torch.bool).tril(),
    "full": lambda: torch.ones(12, 12, dtype=torch.bool),
}


@pytest.mark.parametrize("name", MASKS)
@pytest.mark.parametrize("call_cost", [0, 16, 1024])
def test_tiles_attend_under_exactly_the_mask(name, call_cost):
    mask = MASKS[name]()
    tiles = AttentionTiles(mask, call_cost=call_cost)
    assert torch.equal(_rebuilt(tiles), mask)
    assert tiles.area <= mask.numel()


@pytest.mark.parametrize("name", MASKS)
def test_tiled_equals_dense_values_and_gradients(name):
    mask = MASKS[name]()
    S, L = mask.shape
    torch.manual_seed(0)
    q = torch.randn(3, 4, S, 16, dtype=torch.float64, requires_grad=True)
    k = torch.randn(3, 2, L, 16, dtype=torch.float64, requires_grad=True)
    v = torch.randn(3, 2, L, 16, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, 4, S, 16, dtype=torch.float64)
    for call_cost in (0, 16):
        tiles = AttentionTiles(mask, call_cost=call_cost)
        out = tiles.attend(q, k, v)
        ref = _dense(q, k, v, mask)
        torch.testing.assert_close(out, ref)
        for a, b in zip(
            torch.autograd.grad((out * g).sum(), (q, k, v)),
            torch.autograd.grad((ref * g).sum(), (q, k, v)),
            strict=True,
        ):
            torch.testing.assert_close(a, b)


def test_the_training_mask_computes_a_fraction_of_the_scores():
    mask = _two_stream(P=144, blocks=((0, 32), (32, 64), (64, 96), (96, 128), (128, 160)))
    tiles = AttentionTiles(mask)
    assert len(tiles.tiles) > 1
    assert tiles.area < 0.6 * mask.numel()
    # a mask with nothing to skip stays one dense call, with no mask at all
    full = AttentionTiles(torch.ones(50, 50, dtype=torch.bool))
    assert len(full.tiles) == 1 and full.tiles[0].allowed is None


def test_bad_masks_and_shapes_are_clear_errors():
    with pytest.raises(ValueError, match="2-D bool"):
        AttentionTiles(torch.ones(4, 4))
    empty_row = torch.ones(4, 4, dtype=torch.bool)
    empty_row[2] = False
    with pytest.raises(ValueError, match="at least one key"):
        AttentionTiles(empty_row)
    tiles = AttentionTiles(torch.ones(6, 6, dtype=torch.bool).tril())
    q = torch.zeros(1, 1, 5, 4)
    with pytest.raises(ValueError, match="planned for"):
        tiles.attend(q, q, q)
