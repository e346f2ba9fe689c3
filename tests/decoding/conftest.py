"""Hand-built scaffolds and tiny random decoders for the engine tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from blockplan.model.config import DecoderConfig
from blockplan.model.decoder import Decoder
from blockplan.schema.layout import SECTION_NAMES, Block, Scaffold, Section

MASK_ID = 1
NULL_ID = 2


def make_scaffold(
    seed: int, block_size: int, section_lengths=(20, 30, 12, 25), vocab_size: int = 16
) -> Scaffold:
    """A scaffold with random structural tokens and editable slots; each section is cut into
    blocks of at most `block_size` editable slots, never straddling sections."""
    rng = np.random.default_rng(seed)
    ids, editable, sections, blocks = [], [], [], []
    for name, length in zip(SECTION_NAMES, section_lengths, strict=True):
        start = len(ids)
        is_edit = rng.random(length) < 0.6
        is_edit[0] = False  # a key opens every section
        ids += [
            int(t) if not e else MASK_ID
            for t, e in zip(rng.integers(3, vocab_size, length), is_edit, strict=True)
        ]
        editable += is_edit.tolist()
        sections.append(Section(name, start, start + length, int(is_edit.sum())))
        block_start, count = start, 0
        for pos in range(start, start + length):
            if is_edit[pos - start]:
                if count == block_size:
                    blocks.append(Block(block_start, pos, name))
                    block_start, count = pos, 0
                count += 1
        blocks.append(Block(block_start, start + length, name))
    return Scaffold(
        token_ids=np.asarray(ids, dtype=np.int64),
        is_editable=np.asarray(editable, dtype=bool),
        sections=tuple(sections),
        blocks=tuple(blocks),
        block_size=block_size,
        mask_id=MASK_ID,
        null_id=NULL_ID,
    )


def make_decoder(seed: int, vocab_size: int = 16, dtype=torch.float64) -> Decoder:
    torch.manual_seed(seed)
    config = DecoderConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    model = Decoder(config).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
        for layer in model.model.layers:
            layer.input_layernorm.weight.fill_(1.0)
            layer.post_attention_layernorm.weight.fill_(1.0)
        model.model.norm.weight.fill_(1.0)
    return model


@pytest.fixture
def scaffold_factory():
    return make_scaffold


@pytest.fixture
def decoder_factory():
    return make_decoder


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    # Tiny models: thread hand-offs cost more than they save on a shared 2-core machine.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
