"""The two-stream sequence computes exactly what decoding computes: the clean stream is the
AR forward, each noisy block is the draft forward over the cached clean prefix."""

import numpy as np
import torch

from blockplan.model.masks import block_causal_mask, frame_local_mask
from blockplan.model.planner_model import PlannerModel
from blockplan.train.objective import SASDModule, draw_noise
from blockplan.train.trainer import init_weights


def _setup(recipe, seed=0):
    torch.manual_seed(seed)
    model = PlannerModel(recipe.model_config).double()
    init_weights(model, std=0.2)
    module = SASDModule(model, recipe)
    rng = np.random.default_rng(seed)
    B, P = 2, len(recipe.template)
    prompt = torch.from_numpy(np.asarray(recipe.template.token_ids)[None].repeat(B, 0))
    answer = rng.integers(10, recipe.tokenizer.vocab_size, (B, len(recipe.scaffold)))
    v = recipe.model_config.vision
    images = torch.from_numpy(
        rng.integers(0, 255, (B, 4, v.image_height, v.image_width, 3), dtype=np.uint8)
    )
    noisy, masks = draw_noise(module.layout, answer, module.mask_id, rng)
    return module, prompt, torch.from_numpy(answer), images, torch.from_numpy(noisy), masks, P


@torch.no_grad()
def test_streams_match_ar_and_draft_forwards(recipe):
    module, prompt, answer, images, noisy, _, P = _setup(recipe)
    A = len(recipe.scaffold)
    hidden = module.hidden_states(prompt, answer, images, noisy)
    embeds = module.prompt_embeds(prompt, images)  # (B, P, W)
    model = module.model.decoder
    prompt_mask = frame_local_mask(recipe.template)
    # clean stream == one causal forward over prompt + answer
    full = torch.cat([embeds, model.embed(answer)], dim=1)
    ar_mask = block_causal_mask(prompt_mask, [(a, a + 1) for a in range(A)])
    _, ref = model(inputs_embeds=full, mask=ar_mask, num_logits=0, return_hidden=True)
    torch.testing.assert_close(hidden[:, : P + A], ref)
    # noisy block == draft: clean prefix causal, then the noisy block bidirectional
    for c in range(2):
        for block in recipe.scaffold.blocks:
            s, e = block.start, block.end
            seq = torch.cat([embeds, model.embed(answer[:, :s]), model.embed(noisy[:, c, s:e])], 1)
            spans = [(a, a + 1) for a in range(s)] + [(s, e)]
            _, ref = model(
                inputs_embeds=seq,
                mask=block_causal_mask(prompt_mask, spans),
                num_logits=0,
                return_hidden=True,
            )
            off = P + (1 + c) * A
            torch.testing.assert_close(hidden[:, off + s : off + e], ref[:, P + s :])


def test_loss_is_finite_and_falls_when_fitting_one_batch(recipe):
    module, prompt, answer, images, noisy, masks, _ = _setup(recipe)
    module = module.float()
    opt = torch.optim.AdamW(module.parameters(), lr=1e-2)
    losses = []
    for _ in range(8):
        out = module(prompt, answer, images, noisy, torch.from_numpy(masks))
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
        losses.append(float(out["loss"].detach()))
    assert np.isfinite(losses).all()
    assert losses[-1] < losses[0] - 0.5
    assert set(out) >= {"loss", "ar", "diffusion", "ar/trajectory", "diffusion/trajectory"}


def test_loss_only_reads_masked_positions_for_diffusion(recipe):
    module, prompt, answer, images, noisy, masks, _ = _setup(recipe)
    module = module.float()
    none = np.zeros_like(masks)
    out = module(prompt, answer, images, noisy, torch.from_numpy(none))
    assert float(out["diffusion"]) == 0.0  # no targets, no diffusion loss
    assert float(out["loss"].detach()) == 0.5 * float(out["ar"])


def test_training_prompt_mask_is_the_planners_for_each_visual_layout():
    """Training must prefill the prompt with the mask the planner uses for the model's
    `visual_attention` (a frame-only model trained with header attention decodes garbage)."""
    from blockplan.model.masks import prompt_mask
    from blockplan.train.recipe import Recipe

    from .conftest import CAMERAS, NUM_FRAMES

    for arch, layout in (("test", "frame_and_header"), ("test-stream", "frame_only")):
        recipe = Recipe.build(arch, CAMERAS, NUM_FRAMES)
        assert recipe.model_config.visual_attention == layout
        module = SASDModule(PlannerModel(recipe.model_config), recipe)
        P = len(recipe.template)
        expected = prompt_mask(recipe.template, layout)
        assert torch.equal(module.mask[:P, :P], expected)
        other = "frame_only" if layout == "frame_and_header" else "frame_and_header"
        assert not torch.equal(module.mask[:P, :P], prompt_mask(recipe.template, other))


def test_unknown_sections_weigh_nothing(recipe):
    """A sample whose explanation (and critical objects) are unknown, as a bag's are
    (replay/dataset.py), adds no loss on those tokens: the loss equals the loss with those
    positions' weights zeroed; all known is the loss without a mask, bit for bit."""
    from blockplan.schema import SECTION_NAMES

    module, prompt, answer, images, noisy, masks, _ = _setup(recipe)
    masks = torch.from_numpy(masks)
    with torch.no_grad():
        plain = module(prompt, answer, images, noisy, masks)
        known = torch.ones(2, len(SECTION_NAMES), dtype=torch.bool)
        same = module(prompt, answer, images, noisy, masks, known_sections=known)
        assert float(same["loss"]) == float(plain["loss"])
        # sample 0: critical objects and explanation unknown; sample 1 all known
        known[0, SECTION_NAMES.index("explanation")] = False
        known[0, SECTION_NAMES.index("critical_objects")] = False
        masked = module(prompt, answer, images, noisy, masks, known_sections=known)
        unknown = (module.section == SECTION_NAMES.index("explanation")) | (
            module.section == SECTION_NAMES.index("critical_objects")
        )
        assert bool(unknown.any())
        # the same loss by hand: those positions of sample 0 weigh 0
        weight = module.weight.expand(2, -1).clone()
        weight[0, unknown] = 0.0
        ref = _loss_with_weights(module, prompt, answer, images, noisy, masks, weight)
    assert float(masked["loss"]) != float(plain["loss"])
    torch.testing.assert_close(masked["loss"], ref)
    # the explanation's mean is sample 1's alone
    assert float(masked["ar/explanation"]) != float(plain["ar/explanation"])


def _loss_with_weights(module, prompt, answer, images, noisy, masks, weight):
    """0.5·diffusion + 0.5·AR with per-sample position weights (B, A), from the logits."""
    import torch.nn.functional as F

    P, A = module.prompt_len, module.answer_len
    hidden = module.hidden_states(prompt, answer, images, noisy)
    head = module.model.decoder.lm_head
    e = module.editable
    ce = F.cross_entropy(
        head(hidden[:, P - 1 + e]).flatten(0, 1).float(),
        answer[:, e].flatten(),
        reduction="none",
    )
    w = weight[:, e].flatten()
    ar = (ce * w).sum() / w.sum()
    num, den = 0.0, 0.0
    for c in range(noisy.shape[1]):
        start = P + (1 + c) * A
        m = masks[:, c]
        logits = head(hidden[:, start - 1 : start - 1 + A][m])
        ce = F.cross_entropy(logits.float(), answer[m], reduction="none")
        num, den = num + (ce * weight[m]).sum(), den + weight[m].sum()
    return 0.5 * num / den + 0.5 * ar


def test_tiled_attention_trains_as_the_dense_mask(recipe):
    """Under autograd the two-stream mask is attended tile by tile (model/tiles.py): the same
    losses and gradients as one dense masked call."""
    module, prompt, answer, images, noisy, masks, _ = _setup(recipe)
    assert len(module.tiles.tiles) > 1
    tiled = module(prompt, answer, images, noisy, torch.from_numpy(masks))
    tiled_grads = torch.autograd.grad(tiled["loss"], list(module.parameters()), allow_unused=True)
    module.tiles = module.mask  # a plain tensor: one dense call
    dense = module(prompt, answer, images, noisy, torch.from_numpy(masks))
    dense_grads = torch.autograd.grad(dense["loss"], list(module.parameters()), allow_unused=True)
    assert tiled.keys() == dense.keys()
    for key in tiled:
        torch.testing.assert_close(tiled[key], dense[key])
    for a, b in zip(tiled_grads, dense_grads, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b)
