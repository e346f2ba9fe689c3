"""Parity of our Qwen2.5-VL (vision tower, mRoPE, loader) with transformers."""

from __future__ import annotations

import json

import pytest
import torch

from blockplan.model.pretrained import load_pretrained
from blockplan.model.qwen2_5_vl.model import QwenVLModel
from blockplan.model.qwen2_5_vl.preprocess import preprocess_image
from blockplan.model.qwen2_5_vl.rope import mrope_positions
from blockplan.model.weights import write_manifest
from tests.model.qwen_fixtures import IMAGE_ID, VEND_ID, VOCAB, VSTART_ID, hf_model
from tests.optional import importorskip

transformers = importorskip("transformers")

# (height, width) in pixels: multiples of 28; 112x168 has 8x12 patches, two windows per row
IMAGE_SIZES = ((112, 168), (56, 84))


def _inputs(seed: int = 1):
    """Two images and the token ids of text, image, text, image, text."""
    g = torch.Generator().manual_seed(seed)
    images = [
        torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=g) for h, w in IMAGE_SIZES
    ]
    grids = [(h // 28, w // 28) for h, w in IMAGE_SIZES]  # merged tokens per side
    ids: list[int] = torch.randint(0, 280, (5,), generator=g).tolist()
    spans = []
    for i, (gh, gw) in enumerate(grids):
        ids.append(VSTART_ID)
        spans.append((len(ids), len(ids) + gh * gw))
        ids += [IMAGE_ID] * (gh * gw)
        ids.append(VEND_ID)
        ids += torch.randint(0, 280, (3 + i,), generator=g).tolist()
    return images, grids, torch.tensor(ids)[None], spans


def _ours_embeds(model: QwenVLModel, images, grids, ids, spans):
    embeds = model.embed(ids).clone()  # (1, L, W)
    for image, (gh, gw), (start, end) in zip(images, grids, spans, strict=True):
        patches = preprocess_image(image, model.config.vision)[None]  # (1, S, 1176)
        embeds[0, start:end] = model.encode_images(patches, (2 * gh, 2 * gw))[0]
    return embeds


def _hf_forward(hf, images, grids, ids):
    pixel_values = torch.cat([preprocess_image(im, _vision(hf)) for im in images])
    grid_thw = torch.tensor([[1, 2 * gh, 2 * gw] for gh, gw in grids])
    return hf(
        input_ids=ids,
        pixel_values=pixel_values,
        image_grid_thw=grid_thw,
        mm_token_type_ids=(ids == IMAGE_ID).int(),
    ).logits


def _vision(hf):
    from blockplan.model.qwen2_5_vl.config import QwenVisionConfig

    return QwenVisionConfig.from_dict(hf.config.vision_config.to_dict())


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("qwen") / "hf"
    hf = hf_model(transformers, folder)
    return hf, load_pretrained(folder)


def test_loads_as_qwen_vl_model(pair):
    _, ours = pair
    assert isinstance(ours, QwenVLModel)
    assert ours.config.decoder.mrope_section == (2, 3, 3)
    assert ours.config.image_token_id == IMAGE_ID


def test_vision_tower_matches(pair):
    hf, ours = pair
    images, grids, _, _ = _inputs()
    for image, (gh, gw) in zip(images, grids, strict=True):
        patches = preprocess_image(image, ours.config.vision)  # (S, 1176)
        grid_thw = torch.tensor([[1, 2 * gh, 2 * gw]])
        with torch.no_grad():
            expected = hf.model.visual(patches, grid_thw=grid_thw).pooler_output  # (G, W)
            got = ours.encode_images(patches[None], (2 * gh, 2 * gw))[0]
        assert got.shape == (gh * gw, 64)
        assert (got - expected).abs().max().item() <= 1e-5


def test_rope_index_matches(pair):
    hf, _ = pair
    images, grids, ids, spans = _inputs()
    grid_thw = torch.tensor([[1, 2 * gh, 2 * gw] for gh, gw in grids])
    expected, delta = hf.model.get_rope_index(ids, (ids == IMAGE_ID).int(), grid_thw)
    got = mrope_positions(ids.shape[1], spans, grids)
    assert torch.equal(got.positions, expected[:, 0])
    assert got.next_position == ids.shape[1] + int(delta)


def test_logits_match_transformers(pair):
    hf, ours = pair
    images, grids, ids, spans = _inputs()
    with torch.no_grad():
        expected = _hf_forward(hf, images, grids, ids)
        embeds = _ours_embeds(ours, images, grids, ids, spans)
        positions = mrope_positions(ids.shape[1], spans, grids).positions[:, None]  # (3, 1, L)
        got = ours(inputs_embeds=embeds, positions=positions)
    assert got.shape == expected.shape == (1, ids.shape[1], VOCAB)
    assert (got - expected).abs().max().item() <= 1e-4


def test_greedy_generation_matches_transformers(pair):
    hf, ours = pair
    images, grids, ids, spans = _inputs(seed=4)
    num_new = 20
    grid_thw = torch.tensor([[1, 2 * gh, 2 * gw] for gh, gw in grids])
    pixel_values = torch.cat([preprocess_image(im, ours.config.vision) for im in images])
    with torch.no_grad():
        hf_out = hf.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            pixel_values=pixel_values,
            image_grid_thw=grid_thw,
            mm_token_type_ids=(ids == IMAGE_ID).int(),
            max_new_tokens=num_new,
            min_new_tokens=num_new,
            do_sample=False,
        )[0, ids.shape[1] :].tolist()
        # ours: no cache, recompute everything each step (reference path)
        rope = mrope_positions(ids.shape[1], spans, grids)
        embeds = _ours_embeds(ours, images, grids, ids, spans)  # (1, P, W)
        generated: list[int] = []
        for _ in range(num_new):
            n = len(generated)
            text = torch.arange(rope.next_position, rope.next_position + n).expand(3, n)
            positions = torch.cat([rope.positions, text], dim=1)[:, None]  # (3, 1, P + n)
            new = ours.embed(torch.tensor([generated], dtype=torch.long))
            x = torch.cat([embeds, new], dim=1) if n else embeds
            logits = ours(inputs_embeds=x, positions=positions, num_logits=1)
            generated.append(int(logits[0, -1].argmax()))
    assert generated == hf_out


def test_sharded_folder_loads_the_same(tmp_path, pair):
    hf, ours = pair
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="100KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    again = load_pretrained(tmp_path / "sharded")
    for (name, a), (_, b) in zip(
        ours.state_dict().items(), again.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_manifest_verified_when_present(tmp_path, pair, caplog):
    hf, _ = pair
    folder = tmp_path / "m"
    hf.save_pretrained(folder)
    load_pretrained(folder)
    assert "unverified" in caplog.text
    write_manifest(folder)
    caplog.clear()
    load_pretrained(folder)
    assert "unverified" not in caplog.text
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["sha256"]["config.json"] = "0" * 64
    (folder / "manifest.json").write_text(json.dumps(manifest))
    from blockplan.model.weights import WeightsError

    with pytest.raises(WeightsError, match="sha256"):
        load_pretrained(folder)
