import numpy as np

from blockplan.schema import SECTION_NAMES
from blockplan.train.noising import (
    MIN_MASK_RATIO,
    SECTION_NOISE,
    NoiseLayout,
    apply_mask,
    complementary_masks,
    sample_mask_ratios,
)


def test_ratios_follow_each_sections_beta(recipe):
    ratios = sample_mask_ratios(np.random.default_rng(0), 20000)
    assert ratios.shape == (20000, len(SECTION_NAMES))
    assert ratios.min() >= MIN_MASK_RATIO and ratios.max() <= 1.0
    for k, name in enumerate(SECTION_NAMES):
        a, b = SECTION_NOISE[name]
        assert abs(ratios[:, k].mean() - a / (a + b)) < 0.01, name


def test_min_ratio_is_applied(monkeypatch):
    class ZeroBeta:
        def beta(self, a, b, size):
            return np.zeros(size)

    assert (sample_mask_ratios(ZeroBeta(), 3) == MIN_MASK_RATIO).all()


def test_masks_are_complementary_and_skip_block_starts(recipe):
    layout = NoiseLayout.from_scaffold(recipe.scaffold)
    rng = np.random.default_rng(2)
    first, second = complementary_masks(layout, sample_mask_ratios(rng, 64), rng)
    assert not (first & second).any()
    assert ((first | second) == layout.is_maskable[None]).all()
    starts = [b.start for b in recipe.scaffold.blocks]
    assert not first[:, starts].any() and not second[:, starts].any()
    assert not (first[:, ~layout.is_editable]).any()
    ids = np.asarray(recipe.scaffold.token_ids)[None].repeat(64, 0)
    noisy = apply_mask(ids + 1, first, recipe.scaffold.mask_id)
    assert ((noisy == recipe.scaffold.mask_id) == first).all()


def test_trajectory_is_noised_more_than_critical_objects(recipe):
    layout = NoiseLayout.from_scaffold(recipe.scaffold)
    rng = np.random.default_rng(3)
    first, _ = complementary_masks(layout, sample_mask_ratios(rng, 4000), rng)
    traj = layout.is_maskable & (layout.section == SECTION_NAMES.index("trajectory"))
    crit = layout.is_maskable & (layout.section == SECTION_NAMES.index("critical_objects"))
    assert first[:, traj].mean() > 0.6 > 0.4 > first[:, crit].mean()


def test_same_seed_same_masks(recipe):
    layout = NoiseLayout.from_scaffold(recipe.scaffold)

    def draw(seed):
        rng = np.random.default_rng([seed, 5, 0])
        return complementary_masks(layout, sample_mask_ratios(rng, 8), rng)[0]

    assert (draw(0) == draw(0)).all() and not (draw(0) == draw(1)).all()
