"""Qwen2.5-VL folders: the published config layout, checkpoint names, mRoPE maths."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from blockplan.model.config import DecoderConfig, ModelConfigError
from blockplan.model.layers import rope_cos_sin
from blockplan.model.pretrained import load_pretrained
from blockplan.model.qwen2_5_vl.config import QwenVLConfig, qwen2_5_vl_3b
from blockplan.model.qwen2_5_vl.model import QwenVLModel, canonical_names
from blockplan.model.qwen2_5_vl.preprocess import preprocess_image
from blockplan.model.qwen2_5_vl.presets import qwen_test_config, random_qwen_model
from blockplan.model.qwen2_5_vl.rope import mrope_positions
from blockplan.model.weights import WeightsError
from tests.optional import importorskip


def test_mrope_with_equal_axes_is_plain_rope():
    positions = torch.randint(0, 500, (2, 7))
    plain = rope_cos_sin(positions, 16, 1e6, torch.float32)
    multi = rope_cos_sin(positions.expand(3, 2, 7), 16, 1e6, torch.float32, (2, 3, 3))
    assert torch.equal(plain[0], multi[0]) and torch.equal(plain[1], multi[1])


def test_mrope_section_must_cover_half_the_head():
    with pytest.raises(ModelConfigError, match="mrope_section"):
        DecoderConfig(
            vocab_size=10,
            hidden_size=64,
            intermediate_size=8,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            mrope_section=(2, 3, 4),
        )


def test_published_config_layout_reads_the_3b_shape():
    """Qwen2.5-VL-3B-Instruct's published config.json (text fields at the top level)."""
    raw = qwen2_5_vl_3b().to_hf_dict()
    assert "text_config" not in raw and raw["hidden_size"] == 2048
    assert raw["rope_scaling"] == {"type": "mrope", "mrope_section": [16, 24, 24]}
    config = QwenVLConfig.from_hf_dict(json.loads(json.dumps(raw)))
    assert config == qwen2_5_vl_3b()
    assert config.decoder.tie_word_embeddings and config.vision.fullatt_block_indexes == (
        7,
        15,
        23,
        31,
    )


def test_new_checkpoint_names_are_renamed():
    state = {
        "model.language_model.layers.0.mlp.up_proj.weight": torch.zeros(1),
        "model.visual.blocks.0.norm1.weight": torch.zeros(1),
        "lm_head.weight": torch.zeros(1),
    }
    assert sorted(canonical_names(state)) == [
        "lm_head.weight",
        "model.layers.0.mlp.up_proj.weight",
        "visual.blocks.0.norm1.weight",
    ]
    with pytest.raises(WeightsError, match="two names"):
        canonical_names({**state, "model.layers.0.mlp.up_proj.weight": torch.zeros(1)})


def test_our_folder_loads_in_transformers_with_equal_logits(tmp_path):
    transformers = importorskip("transformers")
    ids_in_vocab = dict(
        image_token_id=290, video_token_id=291, vision_start_token_id=288, vision_end_token_id=289
    )
    config = dataclasses.replace(qwen_test_config(300), **ids_in_vocab)
    ours = random_qwen_model(config, torch.float32, seed=2)
    ours.save_pretrained(tmp_path / "q")
    again = load_pretrained(tmp_path / "q")  # verified: our folder has a manifest
    assert isinstance(again, QwenVLModel)
    hf = transformers.Qwen2_5_VLForConditionalGeneration.from_pretrained(tmp_path / "q").eval()
    image = torch.randint(0, 256, (56, 84, 3), dtype=torch.uint8)
    assert hf.config.image_token_id == 290
    ids = torch.tensor([[5, 6, 288] + [290] * 6 + [289, 8, 9]])
    spans, grids = [(3, 9)], [(2, 3)]
    patches = preprocess_image(image, ours.config.vision)
    with torch.no_grad():
        expected = hf(
            input_ids=ids,
            pixel_values=patches,
            image_grid_thw=torch.tensor([[1, 4, 6]]),
            mm_token_type_ids=(ids == 290).int(),
        ).logits
        embeds = again.embed(ids).clone()
        embeds[0, 3:9] = again.encode_images(patches[None], (4, 6))[0]
        positions = mrope_positions(ids.shape[1], spans, grids).positions[:, None]
        got = again(inputs_embeds=embeds, positions=positions)
    assert (got - expected).abs().max().item() <= 1e-4


def test_shape_mismatch_names_the_tensor(tmp_path):
    ours = random_qwen_model(qwen_test_config(300), torch.float32, seed=0)
    ours.save_pretrained(tmp_path / "q")
    raw = json.loads((tmp_path / "q" / "config.json").read_text())
    raw["vision_config"]["intermediate_size"] = 40
    (tmp_path / "q" / "config.json").write_text(json.dumps(raw))
    with pytest.raises(WeightsError, match=r"visual\.blocks\.0\.mlp\.\w+_proj\.\w+ has shape"):
        load_pretrained(tmp_path / "q", verify=False)
