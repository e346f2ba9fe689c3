"""Every strategy's tokens on the fast paths (the decoder's fast forward, the LM head only at
the rows a picker reads) equal the reference path's: the module-by-module forward with the
LM head on every row, as the engine ran before them. Float32 and float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from blockplan.config import MODEL_STRATEGIES
from blockplan.decoding.decode import DecodeOptions, decode
from blockplan.decoding.picking import GreedyPicker
from blockplan.model.masks import causal_mask


class Reference:
    """The reference path of a decoder: module-by-module forward, logits of every row
    (then the rows asked for, so the engine reads the same values it read before)."""

    def __init__(self, model) -> None:
        self.model = model
        self.decoder_config = model.decoder_config
        self.calls_with_rows = 0

    def embed(self, input_ids):
        return self.model.embed(input_ids)

    def __call__(self, input_ids=None, *, logit_rows=None, **kwargs):
        model = self.model
        model.fast_path = False
        try:
            if logit_rows is None:
                return model(input_ids, **kwargs)
            self.calls_with_rows += 1
            return model(input_ids, **kwargs)[:, logit_rows]
        finally:
            del model.fast_path


def _decode_both(model, scaffold, embeds, mask, options):
    reference = Reference(model)
    with torch.no_grad():
        fast = decode(model, embeds, mask, scaffold, options)
        ref = decode(reference, embeds, mask, scaffold, options)
    return fast, ref, reference


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("strategy", MODEL_STRATEGIES)
def test_every_strategy_decodes_the_reference_tokens(
    decoder_factory, scaffold_factory, strategy, dtype
):
    n = 3 if strategy == "rollouts" else 1
    for seed in range(3):
        model = decoder_factory(seed, dtype=dtype)
        scaffold = scaffold_factory(seed, (4, 7, 32)[seed])
        ids = torch.randint(3, 16, (1, 9), generator=torch.Generator().manual_seed(seed))
        embeds = model.embed(ids).detach()
        options = DecodeOptions(strategy, num_rollouts=n, temperature=0.8, seed=seed)
        fast, ref, reference = _decode_both(model, scaffold, embeds, causal_mask(9), options)
        assert np.array_equal(fast.tokens, ref.tokens), f"seed {seed}"
        assert fast.num_forwards == ref.num_forwards
        if strategy in ("scaffold_spec", "rollouts"):
            assert reference.calls_with_rows > 0  # drafts and verifies asked for rows only


def test_the_shipped_model_plans_the_reference_tokens():
    """The shipped model under the schema's constraints, float32 (its dtype)."""
    from blockplan.planner.planner import Planner
    from blockplan.planner.synthetic import synthetic_observation

    planner = Planner.from_folder("models/blockplan-tiny")
    runner = planner.runner
    obs = synthetic_observation(planner.config, 3, schema=planner.schema)
    for strategy in ("scaffold_spec", "rollouts"):
        planner.previous_answer = None  # no draft from the last plan: equal forwards too
        fast = planner.decode(obs, strategy).result
        planner.runner = Reference(runner)
        planner.previous_answer = None
        try:
            ref = planner.decode(obs, strategy).result
        finally:
            planner.runner = runner
        assert np.array_equal(fast.tokens, ref.tokens), strategy
        assert fast.num_forwards == ref.num_forwards


def test_the_picker_reads_logits_rows_by_window_slot():
    logits = torch.tensor([[[0.0, 5.0, 1.0], [3.0, 0.0, 1.0]]])  # rows for slots 2 and 5
    picker = GreedyPicker()
    picker.prepare(logits, np.array([2, 5]))
    assert picker.choose(0, 2) == 1 and picker.choose(0, 5) == 0
    assert picker.choose(0, 5, np.array([False, True, True])) == 2
    for missing in (0, 3, 6):
        with pytest.raises(IndexError, match="not computed"):
            picker.choose(0, missing)
