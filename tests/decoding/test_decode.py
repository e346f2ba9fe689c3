"""`decode` runs every strategy by name on the same prompt and scaffold."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from blockplan.config import MODEL_STRATEGIES, STRATEGIES, PlannerConfig, RolloutConfig
from blockplan.decoding.decode import DecodeOptions, cached_strategy, decode
from blockplan.model.masks import causal_mask


def _inputs(decoder_factory, scaffold_factory, seed=0, block_size=6):
    model = decoder_factory(seed)
    scaffold = scaffold_factory(seed, block_size)
    ids = torch.randint(3, 16, (1, 7), generator=torch.Generator().manual_seed(seed))
    return model, scaffold, model.embed(ids).detach(), causal_mask(7)


@pytest.mark.parametrize("strategy", MODEL_STRATEGIES)
def test_every_strategy_fills_the_scaffold(decoder_factory, scaffold_factory, strategy):
    model, scaffold, embeds, mask = _inputs(decoder_factory, scaffold_factory)
    result = decode(
        model,
        embeds,
        mask,
        scaffold,
        DecodeOptions(strategy, num_rollouts=3 if strategy == "rollouts" else 1),
    )
    n = 3 if strategy == "rollouts" else 1
    assert result.tokens.shape == (n, len(scaffold))
    assert not (result.tokens == scaffold.mask_id).any()
    structural = ~scaffold.is_editable
    assert (result.tokens[:, structural] == scaffold.token_ids[structural]).all()
    assert result.num_forwards >= 1
    assert all(v >= 0 for v in result.timings_ms.values())


def test_full_diffusion_respects_the_step_budget(decoder_factory, scaffold_factory):
    model, scaffold, embeds, mask = _inputs(decoder_factory, scaffold_factory)
    result = decode(
        model, embeds, mask, scaffold, DecodeOptions("full_diffusion", max_denoise_steps=3)
    )
    assert result.num_forwards <= 3


def test_ar_and_spec_agree_and_rollouts_share_the_prefix(decoder_factory, scaffold_factory):
    model, scaffold, embeds, mask = _inputs(decoder_factory, scaffold_factory, seed=4)
    ar = decode(model, embeds, mask, scaffold, DecodeOptions("ar"))
    spec = decode(model, embeds, mask, scaffold, DecodeOptions("scaffold_spec"))
    assert np.array_equal(ar.tokens, spec.tokens)
    config = PlannerConfig(rollouts=RolloutConfig(num_rollouts=4, temperature=0.0))
    options = DecodeOptions.from_config(config, "rollouts")
    assert options.num_rollouts == 4
    greedy_rollouts = decode(model, embeds, mask, scaffold, options)
    assert (greedy_rollouts.tokens == ar.tokens).all()  # temperature 0: every rollout is AR


def test_unknown_strategy_is_an_error_naming_the_valid_ones(decoder_factory, scaffold_factory):
    with pytest.raises(ValueError, match="strategy") as options_error:
        DecodeOptions("beam")
    # The dispatch itself refuses a name it does not know (it once ran rollouts for it).
    options = DecodeOptions("ar")
    object.__setattr__(options, "strategy", "beam")
    with pytest.raises(ValueError, match="strategy='beam'") as dispatch_error:
        cached_strategy(options)
    model, scaffold, embeds, mask = _inputs(decoder_factory, scaffold_factory)
    with pytest.raises(ValueError, match="strategy='beam'"):
        decode(model, embeds, mask, scaffold, options)
    for error in (options_error, dispatch_error):
        assert all(repr(name) in str(error.value) for name in STRATEGIES)


@pytest.mark.parametrize("strategy", [s for s in MODEL_STRATEGIES if s != "full_diffusion"])
def test_every_cached_strategy_has_a_decoder(strategy):
    assert callable(cached_strategy(DecodeOptions(strategy)))
