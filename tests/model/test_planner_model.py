"""PlannerModel: folder round trip, visual tokens land in their spans, identities matter."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from blockplan.model.config import DecoderConfig
from blockplan.model.planner_model import PlannerModel, PlannerModelConfig
from blockplan.model.pretrained import load_pretrained
from blockplan.model.vision import VisionConfig
from blockplan.schema.layout import ImageSpan


def _config(tie=True):
    decoder = DecoderConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=tie,
    )
    vision = VisionConfig(image_height=16, image_width=24, channels=(4, 8), grid=(2, 2))
    return PlannerModelConfig(decoder, vision, ("front", "rear"), num_frames=2, block_size=8)


def _prompt(config):
    G = config.tokens_per_image
    spans, ids = [], [5, 6, 7]  # header
    for cam in range(2):
        for frame in range(2):
            spans.append(ImageSpan(len(ids), len(ids) + G, cam, frame))
            ids += [3] * G
    ids += [8, 9]
    return torch.tensor(ids), tuple(spans)


def _images(seed=0):
    rng = np.random.default_rng(seed)
    return torch.as_tensor(rng.integers(0, 256, (4, 30, 40, 3), dtype=np.uint8))


@pytest.mark.parametrize("tie", [True, False])
def test_folder_round_trip(tmp_path, tie):
    torch.manual_seed(0)
    model = PlannerModel(_config(tie)).eval()
    model.save_pretrained(tmp_path / "m", tokenizer_json='{"fake": true}')
    files = json.loads((tmp_path / "m" / "manifest.json").read_text())["sha256"]
    assert set(files) == {"config.json", "model.safetensors", "tokenizer.json"}
    back = load_pretrained(tmp_path / "m")
    assert isinstance(back, PlannerModel)
    assert back.config == model.config
    ids, spans = _prompt(model.config)
    images = model.visual.preprocess(_images())
    with torch.no_grad():
        a = model(inputs_embeds=model.embed_prompt(ids, spans, model.visual(images)))
        b = back(inputs_embeds=back.embed_prompt(ids, spans, back.visual(images)))
    assert torch.equal(a, b)


def test_visual_tokens_fill_spans_and_identity_matters():
    torch.manual_seed(0)
    model = PlannerModel(_config()).eval()
    ids, spans = _prompt(model.config)
    images = model.visual.preprocess(_images())
    assert images.shape == (4, 3, 16, 24)
    with torch.no_grad():
        embeds = model.embed_prompt(ids, spans, model.visual(images))
        text = model.embed(ids[None])
        assert torch.equal(embeds[0, :3], text[0, :3]) and torch.equal(embeds[0, -2:], text[0, -2:])
        visual = model.visual(images)
        assert torch.equal(embeds[0, spans[2].start : spans[2].end], visual[2])
        # the same image shown by another camera / at another frame slot gives other tokens
        same = images[:1].repeat(4, 1, 1, 1)
        tokens = model.visual(same)
        for i in range(4):
            for j in range(i + 1, 4):
                assert not torch.allclose(tokens[i], tokens[j])


def test_wrong_span_size_is_an_error():
    model = PlannerModel(_config()).eval()
    ids, spans = _prompt(model.config)
    bad = (ImageSpan(spans[0].start, spans[0].end - 1, 0, 0),)
    with pytest.raises(ValueError, match="tokens per image"):
        model.embed_prompt(ids, bad, model.visual(model.visual.preprocess(_images())))


def test_streaming_settings_default_round_trip_and_old_folders(tmp_path):
    from blockplan.model.config import ModelConfigError

    config = _config()
    assert config.visual_attention == "frame_and_header" and config.frame_slot_embedding
    assert not config.streams_exactly
    old = config.to_dict()
    del old["visual_attention"], old["frame_slot_embedding"]  # a folder from before
    assert PlannerModelConfig.from_dict(old) == config
    exact = dataclasses.replace(config, visual_attention="frame_only", frame_slot_embedding=False)
    assert exact.streams_exactly
    assert PlannerModelConfig.from_dict(exact.to_dict()) == exact
    torch.manual_seed(0)
    model = PlannerModel(exact).eval()
    assert model.visual.frame_embed is None
    assert not any("frame_embed" in k for k in model.folder_state())
    model.save_pretrained(tmp_path / "m")
    assert load_pretrained(tmp_path / "m").config == exact
    with pytest.raises(ModelConfigError, match="visual_attention"):
        dataclasses.replace(config, visual_attention="all")


def test_without_frame_slot_embedding_a_frame_is_the_same_in_every_slot():
    config = dataclasses.replace(_config(), frame_slot_embedding=False)
    torch.manual_seed(0)
    model = PlannerModel(config).eval()
    images = model.visual.preprocess(_images())
    same = images[[0, 0, 2, 2]]  # camera 0's image in both its slots, likewise camera 1
    with torch.no_grad():
        tokens = model.visual(same)  # (4, G, W)
    assert torch.equal(tokens[0], tokens[1]) and torch.equal(tokens[2], tokens[3])
    assert not torch.equal(tokens[0], tokens[2])  # camera identity stays


def test_frames_of_one_size_are_preprocessed_in_one_call_as_one_by_one():
    """`preprocess_frames` resizes a batch of same-size frames in one call: the values of
    resizing them one by one, bit for bit; mixed sizes go one by one."""
    torch.manual_seed(0)
    tower = PlannerModel(_config()).visual
    rng = np.random.default_rng(0)
    for shapes in ([(90, 160, 3)] * 8, [(48, 80, 3)] * 3, [(90, 160, 3), (61, 99, 3)]):
        frames = [rng.integers(0, 256, shape, dtype=np.uint8) for shape in shapes]
        frames[0].setflags(write=False)  # frames from a bag may be read-only
        one = torch.cat([tower.preprocess(torch.tensor(f)[None]) for f in frames])
        assert torch.equal(tower.preprocess_frames(frames), one)
