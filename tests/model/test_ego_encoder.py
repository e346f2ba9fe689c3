"""The numeric ego encoder: the prompt's ego slots, what fills them, folders, fine-tuning.

The serving path (Planner.embed) and the training path (SASDModule.prompt_embeds) must give
the same prompt embeddings for the same sample; a folder with an encoder round-trips, and
config/tensors that disagree never load.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from blockplan.model.config import ModelConfigError
from blockplan.model.ego import EgoEncoder, EgoEncoderConfig
from blockplan.model.planner_model import PlannerModel, PlannerModelConfig
from blockplan.model.pretrained import load_pretrained
from blockplan.model.weights import WeightsError
from blockplan.schema import ego_history_array, render_prompt
from blockplan.train.recipe import Recipe
from blockplan.types import EgoState

CAMERAS = ("front", "rear")


@pytest.fixture(scope="module")
def recipes():
    digits = Recipe.build("test", CAMERAS, 2)
    ego = Recipe.build("test", CAMERAS, 2, ego_tokens=4)
    return digits, ego


class _Data:
    """The two fields the Trainer reads before a step (16 samples)."""

    future_xy = np.zeros((16, 20, 2))
    episode = np.asarray([f"e-{i}" for i in range(16)])

    def __len__(self):
        return 16


def _history(seed: int, rows: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(0, 5, (rows, 6))


def _render(recipe, history=None, command=None):
    mc = recipe.model_config
    return render_prompt(
        None,
        recipe.tokenizer,
        recipe.schema,
        mc.camera_names,
        mc.num_frames,
        mc.tokens_per_image,
        ego_history=history,
        route_command=command,
        ego_tokens=mc.ego_tokens,
    )


def test_prompt_has_slots_instead_of_digits(recipes):
    digits, ego = recipes
    d, e = _render(digits, _history(0)), _render(ego, _history(0))
    assert d.ego_span is None and d.ego_history is None and d.ego_inputs() == {}
    assert e.ego_span is not None and e.ego_span[1] - e.ego_span[0] == 4
    # the ~130 history digits are gone; the images and the header are where they were
    assert len(e) < len(d) - 100
    assert e.image_spans == d.image_spans and e.header_end == d.header_end
    null = ego.tokenizer.token_id(ego.schema.null_token)
    assert np.all(e.token_ids[e.ego_span[0] : e.ego_span[1]] == null)
    np.testing.assert_allclose(e.ego_history, _history(0), rtol=1e-6)
    # every history and command gives the template's length and slots
    other = _render(ego, _history(1), ego.schema.route_commands[-1])
    assert len(other) == len(ego.template) == len(e) and other.ego_span == e.ego_span
    # the history no longer changes the ids: only the command does
    same_command = _render(ego, _history(1))
    np.testing.assert_array_equal(same_command.token_ids, e.token_ids)


def test_observation_rows_are_the_schema_rows(recipes):
    _, ego = recipes
    from blockplan.types import Observation

    states = [
        EgoState(stamp_ns=int(k * 0.25e9), x=3.0 * k, y=0.1 * k, yaw=0.01 * k, v_x=12.0)
        for k in range(9)
    ]
    obs = Observation(stamp_ns=states[-1].stamp_ns, frames=(), ego_history=tuple(states))
    mc = ego.model_config
    layout = render_prompt(
        obs,
        ego.tokenizer,
        ego.schema,
        mc.camera_names,
        mc.num_frames,
        mc.tokens_per_image,
        ego_tokens=4,
    )
    want = ego_history_array(states, obs.stamp_ns, ego.schema)
    np.testing.assert_allclose(layout.ego_history, want, rtol=1e-6, atol=1e-6)


def test_encoder_fills_the_slots_and_reads_the_history(recipes):
    _, ego = recipes
    torch.manual_seed(0)
    model = PlannerModel(ego.model_config).eval()
    layout = _render(ego, _history(0))
    ids = torch.tensor(layout.token_ids)
    G, W = ego.model_config.tokens_per_image, model.decoder_config.hidden_size
    visual = torch.randn(len(CAMERAS) * 2, G, W)
    with torch.no_grad():
        embeds = model.embed_prompt(ids, layout.image_spans, visual, **layout.ego_inputs())
        start, end = layout.ego_span
        want = model.ego_encoder(torch.tensor(_history(0), dtype=torch.float32))
        torch.testing.assert_close(embeds[0, start:end], want)
        text = model.embed(ids[None])
        torch.testing.assert_close(embeds[0, end:], text[0, end:])
        other = model.embed_prompt(
            ids, layout.image_spans, visual, ego_span=layout.ego_span, ego_history=_history(1)
        )
    assert not torch.allclose(other[0, start:end], embeds[0, start:end])
    torch.testing.assert_close(other[0, :start], embeds[0, :start])


def test_slots_and_encoder_must_agree(recipes):
    digits, ego = recipes
    model = PlannerModel(ego.model_config).eval()
    plain = PlannerModel(digits.model_config).eval()
    e, d = _render(ego, _history(0)), _render(digits, _history(0))
    W = model.decoder_config.hidden_size
    visual = torch.zeros(len(CAMERAS) * 2, ego.model_config.tokens_per_image, W)
    with pytest.raises(ValueError, match="ego"):
        model.embed_prompt(torch.tensor(e.token_ids), e.image_spans, visual)
    with pytest.raises(ValueError, match="ego"):
        plain.embed_prompt(torch.tensor(d.token_ids), d.image_spans, visual, **e.ego_inputs())
    with pytest.raises(ValueError, match="rows"):
        model.ego_encoder(torch.zeros(4, 6))
    with pytest.raises(ModelConfigError, match="num_history"):
        dataclasses.replace(ego.model_config, ego_encoder=EgoEncoderConfig(tokens=4, rows=5))
    with pytest.raises(ModelConfigError, match="tokens"):
        EgoEncoderConfig(tokens=0)
    with pytest.raises(ModelConfigError, match="unknown"):
        EgoEncoderConfig.from_dict({"tokens": 2, "width": 3})


def test_folder_round_trip_and_mismatches(recipes, tmp_path):
    digits, ego = recipes
    torch.manual_seed(0)
    model = PlannerModel(ego.model_config).eval()
    model.save_pretrained(tmp_path / "ego", tokenizer_json=ego.tokenizer.to_str())
    raw = json.loads((tmp_path / "ego" / "config.json").read_text())
    assert raw["ego_encoder"] == {"tokens": 4, "rows": 3, "hidden": 256}
    back = load_pretrained(tmp_path / "ego")
    assert back.config == model.config and back.config.ego_tokens == 4
    for name, tensor in model.state_dict().items():
        assert torch.equal(back.state_dict()[name], tensor), name
    # digit folders write no key and read back without an encoder
    assert "ego_encoder" not in digits.model_config.to_dict()
    assert PlannerModelConfig.from_dict(digits.model_config.to_dict()).ego_encoder is None

    from blockplan.model.planner_model import PlannerModel as PM

    state = model.folder_state()
    # encoder tensors with a digit config, or a config whose encoder lacks its tensors
    with pytest.raises(ModelConfigError, match="ego_encoder"):
        PM.from_config_and_state(digits.model_config.to_dict(), dict(state), "x")
    partial = {k: v for k, v in state.items() if not k.startswith("ego_encoder.net.4")}
    with pytest.raises(WeightsError, match="missing"):
        PM.from_config_and_state(ego.model_config.to_dict(), partial, "x")


def test_training_and_serving_embed_the_same():
    """SASDModule.prompt_embeds (a batch of data set rows) equals Planner.embed (the
    Observation of the same instant) for an ego-encoder model."""
    from blockplan.config import PlannerConfig
    from blockplan.planner.planner import Planner
    from blockplan.planner.synthetic import synthetic_observation
    from blockplan.train.examples import ExampleEncoder
    from blockplan.train.objective import SASDModule

    config = PlannerConfig()
    ego = Recipe.build("test", tuple(config.camera_names), 2, ego_tokens=4)
    torch.manual_seed(0)
    model = PlannerModel(ego.model_config).eval()
    planner = Planner(model, ego.tokenizer, config, ego.schema)
    vision = ego.model_config.vision  # frames at the model's size: no resampling on either side
    size = (vision.image_height, vision.image_width)
    obs = synthetic_observation(config, seed=3, size=size, schema=ego.schema)
    served, layout = planner.embed(obs, {})
    encoder = ExampleEncoder(ego)
    history = ego_history_array(obs.ego_history, obs.stamp_ns, ego.schema)
    prompt_ids = encoder.prompt_ids(history, obs.route_command)
    np.testing.assert_array_equal(prompt_ids, layout.token_ids)
    images = np.stack([encoder.resize(f.image[None])[0] for f in obs.frames])
    module = SASDModule(model, ego).eval()
    with torch.no_grad():
        trained = module.prompt_embeds(
            torch.tensor(prompt_ids)[None],
            torch.from_numpy(images)[None],
            torch.tensor(history, dtype=torch.float32)[None],
        )
    torch.testing.assert_close(trained, served, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="ego history"):
        module.prompt_embeds(torch.tensor(prompt_ids)[None], torch.from_numpy(images)[None])


def test_fine_tuning_from_a_digit_folder_keeps_everything_but_the_encoder(recipes, tmp_path):
    from blockplan.train.trainer import TrainConfig, Trainer, TrainError

    digits, ego = recipes
    torch.manual_seed(1)
    source = PlannerModel(digits.model_config).eval()
    source.save_pretrained(tmp_path / "digits", tokenizer_json=digits.tokenizer.to_str())

    config = TrainConfig(steps=1, batch_size=4)
    trainer = Trainer(ego, _Data(), tmp_path / "run", config, progress=False)
    before = {k: v.clone() for k, v in trainer.model.ego_encoder.state_dict().items()}
    trainer.init_from(tmp_path / "digits")
    mine = trainer.model.state_dict()
    for name, tensor in source.state_dict().items():
        assert torch.equal(mine[name], tensor), name
    for name, tensor in trainer.model.ego_encoder.state_dict().items():
        assert torch.equal(before[name], tensor), name  # the encoder keeps its init
    # the encoder may read more history rows than the digits held
    from blockplan.train.recipe import reference_schema

    longer = Recipe.build(
        "test",
        CAMERAS,
        2,
        schema=dataclasses.replace(reference_schema(), num_history=5),
        ego_tokens=4,
    )
    five = Trainer(longer, _Data(), tmp_path / "run5", config, progress=False)
    five.init_from(tmp_path / "digits")
    assert five.model.ego_encoder.config.rows == 5
    assert torch.equal(
        five.model.state_dict()["decoder.model.embed_tokens.weight"],
        source.state_dict()["decoder.model.embed_tokens.weight"],
    )
    # an encoder folder widens to more rows: the old rows' weights stay, the new are zero,
    # so the widened encoder computes what the source did whatever the older rows hold
    three = Trainer(ego, _Data(), tmp_path / "run3", config, progress=False)
    three.init_from(tmp_path / "digits")
    three.model.save_pretrained(tmp_path / "three", tokenizer_json=ego.tokenizer.to_str())
    widened = Trainer(longer, _Data(), tmp_path / "run5w", config, progress=False)
    widened.init_from(tmp_path / "three")
    h = torch.randn(3, 6)
    older = torch.cat([torch.randn(2, 6), h])
    with torch.no_grad():
        torch.testing.assert_close(widened.model.ego_encoder(older), three.model.ego_encoder(h))
    # but not to fewer rows
    with pytest.raises(TrainError, match="architecture"):
        three.init_from(_save(widened.model, tmp_path / "five", ego))
    # the other way round (an encoder folder into a digit run) is refused
    PlannerModel(ego.model_config).save_pretrained(
        tmp_path / "ego", tokenizer_json=ego.tokenizer.to_str()
    )
    plain = Trainer(digits, _Data(), tmp_path / "run2", config, progress=False)
    with pytest.raises(TrainError, match="architecture"):
        plain.init_from(tmp_path / "ego")


def _save(model, path, recipe):
    model.save_pretrained(path, tokenizer_json=recipe.tokenizer.to_str())
    return path


def test_encoder_scales_inputs():
    enc = EgoEncoder(EgoEncoderConfig(tokens=2, rows=3, hidden=8), hidden_size=16)
    out = enc(torch.zeros(5, 3, 6))
    assert out.shape == (5, 2, 16)


def test_a_flow_head_run_with_an_encoder_starts_from_a_digit_token_folder(recipes, tmp_path):
    """Both new parts (flow head, ego encoder) start fresh; everything else carries over, and
    the joint loss runs with the ego history."""
    from blockplan.train.objective import SASDModule, draw_flow_noise, draw_noise
    from blockplan.train.trainer import TrainConfig, Trainer

    digits, _ = recipes
    both = Recipe.build("test", CAMERAS, 2, trajectory_head="flow", ego_tokens=4)
    torch.manual_seed(2)
    source = PlannerModel(digits.model_config).eval()
    _save(source, tmp_path / "digits", digits)

    trainer = Trainer(
        both, _Data(), tmp_path / "run", TrainConfig(steps=1, batch_size=4), progress=False
    )
    trainer.init_from(tmp_path / "digits")
    mine = trainer.model.state_dict()
    for name, tensor in source.state_dict().items():
        assert torch.equal(mine[name], tensor), name
    module = SASDModule(trainer.model, both)
    rng = np.random.default_rng(0)
    B, P = 2, len(both.template)
    prompt = torch.tensor(np.stack([both.template.token_ids] * B))
    answer = torch.randint(0, 40, (B, len(both.scaffold)))
    noisy, masks = draw_noise(module.layout, answer.numpy(), module.mask_id, rng)
    x0, tau = draw_flow_noise(B, rng)
    vision = both.model_config.vision
    images = torch.zeros(
        B, len(CAMERAS) * 2, vision.image_height, vision.image_width, 3, dtype=torch.uint8
    )
    out = module(
        prompt,
        answer,
        images,
        torch.from_numpy(noisy),
        torch.from_numpy(masks),
        future_xy=torch.zeros(B, 20, 2),
        flow_noise=torch.from_numpy(x0),
        flow_tau=torch.from_numpy(tau),
        ego_history=torch.zeros(B, 3, 6),
    )
    assert torch.isfinite(out["loss"]) and "flow" in out
    out["loss"].backward()
    assert trainer.model.ego_encoder.net[0].weight.grad is not None
    assert len(prompt[0]) == P


def test_an_encoder_with_the_lane_pose_reads_it_and_knows_when_it_is_missing(tmp_path):
    from blockplan.model.ego import LANE_INPUT_SCALE, lane_inputs

    inputs = lane_inputs(torch.tensor([[0.5, -0.03], [float("nan"), 0.1]]), (2,))
    want = [[0.5 / LANE_INPUT_SCALE[0], -0.03 / LANE_INPUT_SCALE[1], 1.0], [0.0, 0.0, 0.0]]
    torch.testing.assert_close(inputs, torch.tensor(want, dtype=torch.float64))
    torch.testing.assert_close(lane_inputs(None, (2,)), torch.zeros(2, 3))

    lane = Recipe.build("test", CAMERAS, 2, ego_tokens=4, ego_lane_pose=True)
    torch.manual_seed(0)
    model = PlannerModel(lane.model_config).eval()
    assert model.ego_encoder.net[0].in_features == 3 * 6 + 3
    model.save_pretrained(tmp_path / "lane", tokenizer_json=lane.tokenizer.to_str())
    raw = json.loads((tmp_path / "lane" / "config.json").read_text())
    assert raw["ego_encoder"] == {"tokens": 4, "rows": 3, "hidden": 256, "lane_pose": True}
    assert load_pretrained(tmp_path / "lane").config == model.config

    layout = _render(lane, _history(0))
    assert np.isnan(layout.lane_pose).all()  # no observation: unknown
    ids = torch.tensor(layout.token_ids)
    G, W = lane.model_config.tokens_per_image, model.decoder_config.hidden_size
    visual = torch.randn(len(CAMERAS) * 2, G, W)
    start, end = layout.ego_span
    with torch.no_grad():
        unknown = model.embed_prompt(ids, layout.image_spans, visual, **layout.ego_inputs())
        kw = layout.ego_inputs() | {"lane_pose": np.array([0.8, 0.05])}
        known = model.embed_prompt(ids, layout.image_spans, visual, **kw)
        none = model.embed_prompt(
            ids, layout.image_spans, visual, ego_span=layout.ego_span, ego_history=_history(0)
        )
    assert not torch.allclose(known[0, start:end], unknown[0, start:end])
    torch.testing.assert_close(none, unknown)  # None and NaN are the same: unknown
    torch.testing.assert_close(known[0, :start], unknown[0, :start])


def test_an_encoder_with_the_car_ahead_reads_gap_and_speed_and_knows_when_it_is_missing(
    tmp_path,
):
    """`lead`: the car ahead as five inputs after all the others. No car ahead (an infinite
    gap) is known; a NaN gap (no tracker) is unknown and enters as zeros, as None does."""
    from blockplan.model.ego import LEAD_INPUTS, lead_inputs

    inf, nan = float("inf"), float("nan")
    ahead = torch.tensor([[20.0, 15.0], [inf, nan], [nan, 10.0], [2.0, 5.0], [30.0, nan]])
    got = lead_inputs(ahead, (5,))
    want = [
        [1.0, 1.0, 0.5, 0.2, 1.5],  # known, present, 10 m / gap, gap / 100 m, speed / 10
        [1.0, 0.0, 0.0, 1.0, 0.0],  # none ahead: known, the road free to 100 m
        [0.0] * 5,  # unknown
        [1.0, 1.0, 5.0, 0.02, 0.5],  # 10 m / gap capped
        [0.0] * 5,  # a car without a speed: unknown as a whole
    ]
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))
    torch.testing.assert_close(lead_inputs(None, (2,)), torch.zeros(2, LEAD_INPUTS))
    with pytest.raises(ValueError, match="lead shape"):
        lead_inputs(torch.zeros(3), (2,))

    lead = Recipe.build("test", CAMERAS, 2, ego_tokens=4, ego_lane_pose=True, ego_lead=True)
    torch.manual_seed(0)
    model = PlannerModel(lead.model_config).eval()
    assert model.ego_encoder.net[0].in_features == 3 * 6 + 3 + LEAD_INPUTS
    model.save_pretrained(tmp_path / "lead", tokenizer_json=lead.tokenizer.to_str())
    raw = json.loads((tmp_path / "lead" / "config.json").read_text())
    assert raw["ego_encoder"]["lead"] is True
    assert load_pretrained(tmp_path / "lead").config == model.config
    plain = Recipe.build("test", CAMERAS, 2, ego_tokens=4)
    assert "lead" not in plain.model_config.ego_encoder.to_dict()  # old folders unchanged
    with pytest.raises(ModelConfigError, match="lead"):
        EgoEncoderConfig(lead=1)

    layout = _render(lead, _history(0))
    assert np.isnan(layout.lead).all()  # no observation: unknown
    ids = torch.tensor(layout.token_ids)
    G, W = lead.model_config.tokens_per_image, model.decoder_config.hidden_size
    visual = torch.randn(len(CAMERAS) * 2, G, W)
    start, end = layout.ego_span

    def slots(value):
        kw = layout.ego_inputs() | ({} if value is None else {"lead": np.array(value)})
        with torch.no_grad():
            return model.embed_prompt(ids, layout.image_spans, visual, **kw)[0, start:end]

    unknown, close, free = slots(None), slots([15.0, 20.0]), slots([inf, nan])
    faster = slots([15.0, 25.0])
    for a, b in ((unknown, close), (close, free), (close, faster), (unknown, free)):
        assert not torch.allclose(a, b)
    torch.testing.assert_close(slots([nan, nan]), unknown)


def test_an_encoder_with_the_lanes_beside_reads_lanes_and_cars_and_knows_what_is_missing(
    tmp_path,
):
    """`beside`: per side the lane count, then the cars ahead and behind in the line beside,
    as BESIDE_INPUTS inputs after all the others. A lane count and the cars are known or
    unknown apart (a map without a tracker, and the other way round); no car (an infinite
    gap) is known; None is all unknown."""
    from blockplan.model.ego import BESIDE_INPUTS, beside_inputs

    inf, nan = float("inf"), float("nan")
    beside = torch.tensor(
        [
            [[2.0, 20.0, 15.0, 5.0, 30.0], [0.0, inf, nan, inf, nan]],
            [[nan, 1.0, 12.0, inf, nan], [1.0, nan, nan, nan, nan]],
            [[1.0, 30.0, nan, inf, nan], [nan, nan, nan, nan, nan]],
        ]
    )
    got = beside_inputs(beside, (3,)).reshape(3, 2, 9)
    want = [
        [  # lanes known, lane there, cars known; ahead: present, 10 m / gap, speed / 10; behind
            [1.0, 1.0, 1.0, 1.0, 0.5, 1.5, 1.0, 2.0, 3.0],
            [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # no lane, no cars: all known
        ],
        [
            [0.0, 0.0, 1.0, 1.0, 5.0, 1.2, 0.0, 0.0, 0.0],  # no map, a car alongside (capped)
            [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # a map, no tracker
        ],
        [
            [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # a car without a speed: unknown
            [0.0] * 9,
        ],
    ]
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))
    torch.testing.assert_close(beside_inputs(None, (2,)), torch.zeros(2, BESIDE_INPUTS))
    with pytest.raises(ValueError, match="beside shape"):
        beside_inputs(torch.zeros(2, 4), (2,))

    recipe = Recipe.build(
        "test", CAMERAS, 2, ego_tokens=4, ego_lane_pose=True, ego_lead=True, ego_beside=True
    )
    torch.manual_seed(0)
    model = PlannerModel(recipe.model_config).eval()
    assert model.ego_encoder.net[0].in_features == 3 * 6 + 3 + 5 + BESIDE_INPUTS
    model.save_pretrained(tmp_path / "beside", tokenizer_json=recipe.tokenizer.to_str())
    raw = json.loads((tmp_path / "beside" / "config.json").read_text())
    assert raw["ego_encoder"]["beside"] is True
    assert load_pretrained(tmp_path / "beside").config == model.config
    assert (
        "beside"
        not in Recipe.build("test", CAMERAS, 2, ego_tokens=4).model_config.to_dict()["ego_encoder"]
    )  # old folders unchanged
    with pytest.raises(ModelConfigError, match="beside"):
        EgoEncoderConfig(beside="yes")
    layout = _render(recipe, _history(0))
    assert layout.beside.shape == (2, 5) and np.isnan(layout.beside).all()


def test_an_encoder_with_the_route_reads_its_direction_and_knows_when_it_is_missing(tmp_path):
    """`route`: a known flag, then each point over its distance along the route, as
    ROUTE_INPUTS inputs after all the others; a route with a NaN, or None, is unknown."""
    from blockplan.model.ego import ROUTE_INPUTS, route_inputs
    from blockplan.types import ROUTE_AHEAD_M

    d = torch.tensor(ROUTE_AHEAD_M, dtype=torch.float64)
    straight = torch.stack([d, torch.zeros_like(d)], -1)
    turn = torch.stack([d * 0.8, d * 0.6], -1)  # 37° to the left all along
    partial = straight.clone()
    partial[2, 1] = float("nan")
    got = route_inputs(torch.stack([straight, turn, partial]), (3,))
    assert got.shape == (3, ROUTE_INPUTS) == (3, 1 + 2 * len(ROUTE_AHEAD_M))
    torch.testing.assert_close(got[0], torch.tensor([1.0] + [1.0, 0.0] * len(d), dtype=got.dtype))
    torch.testing.assert_close(got[1], torch.tensor([1.0] + [0.8, 0.6] * len(d), dtype=got.dtype))
    torch.testing.assert_close(got[2], torch.zeros(ROUTE_INPUTS, dtype=got.dtype))
    torch.testing.assert_close(route_inputs(None, (2,)), torch.zeros(2, ROUTE_INPUTS))
    with pytest.raises(ValueError, match="route_ahead shape"):
        route_inputs(torch.zeros(2, 3, 2), (2,))

    recipe = Recipe.build("test", CAMERAS, 2, ego_tokens=4, ego_route=True)
    model = PlannerModel(recipe.model_config).eval()
    assert model.ego_encoder.net[0].in_features == 3 * 6 + ROUTE_INPUTS
    model.save_pretrained(tmp_path / "route", tokenizer_json=recipe.tokenizer.to_str())
    raw = json.loads((tmp_path / "route" / "config.json").read_text())
    assert raw["ego_encoder"]["route"] is True
    assert load_pretrained(tmp_path / "route").config == model.config
    plain = Recipe.build("test", CAMERAS, 2, ego_tokens=4).model_config.to_dict()
    assert "route" not in plain["ego_encoder"]  # old folders unchanged
    with pytest.raises(ModelConfigError, match="route"):
        EgoEncoderConfig(route=1)
    layout = _render(recipe, _history(0))
    assert layout.route_ahead.shape == (len(ROUTE_AHEAD_M), 2)
    assert np.isnan(layout.route_ahead).all()


KEYWORDS = {
    "lane_pose": "lane_input",
    "lead": "lead_input",
    "beside": "beside_input",
    "route_ahead": "route_input",
}
BESIDE = ((2.0, 14.0, 21.0, 9.5, 19.0), (1.0, float("inf"), float("nan"), 30.0, 22.0))
ROUTE = ((5.0, 0.1), (10.0, 0.4), (19.8, 1.9), (29.0, 5.5), (41.0, 14.0), (50.0, 28.0))


@pytest.mark.parametrize(
    "inputs",
    [
        {"lane_pose": (-0.6, 0.04)},
        {"lane_pose": (-0.6, 0.04), "lead": (23.5, 17.25)},
        {"lane_pose": (-0.6, 0.04), "lead": (23.5, 17.25), "beside": BESIDE},
        {"lane_pose": (-0.6, 0.04), "lead": (23.5, 17.25), "beside": BESIDE, "route_ahead": ROUTE},
    ],
    ids=["lane_pose", "lane_pose_and_lead", "lane_pose_lead_and_beside", "and_route"],
)
def test_training_and_serving_give_the_encoder_the_same_optional_inputs(inputs):
    """Planner.embed of an Observation with a lane pose (and a car ahead) equals
    SASDModule.prompt_embeds of the data set row with them; the embedding moves with each
    input, and a model without them does not read them."""
    from blockplan.config import PlannerConfig
    from blockplan.planner.planner import Planner
    from blockplan.planner.synthetic import synthetic_observation
    from blockplan.train.examples import ExampleEncoder
    from blockplan.train.objective import SASDModule

    config = PlannerConfig()
    names = tuple(config.camera_names)
    reads_lead, reads_beside = "lead" in inputs, "beside" in inputs
    reads_route = "route_ahead" in inputs
    recipe = Recipe.build(
        "test",
        names,
        2,
        ego_tokens=4,
        ego_lane_pose=True,
        ego_lead=reads_lead,
        ego_beside=reads_beside,
        ego_route=reads_route,
    )
    torch.manual_seed(0)
    model = PlannerModel(recipe.model_config).eval()
    torch.nn.init.normal_(model.ego_encoder.net[0].weight, std=0.5)
    planner = Planner(model, recipe.tokenizer, config, recipe.schema)
    assert planner.reads_lane_pose and planner.reads_lead == reads_lead
    assert planner.reads_beside == reads_beside and planner.reads_route == reads_route
    vision = recipe.model_config.vision
    size = (vision.image_height, vision.image_width)
    obs = synthetic_observation(config, seed=3, size=size, schema=recipe.schema)
    obs = dataclasses.replace(obs, **inputs)
    served, layout = planner.embed(obs, {})
    for name, value in inputs.items():
        np.testing.assert_array_equal(getattr(layout, name), np.asarray(value))
    encoder = ExampleEncoder(recipe)
    history = ego_history_array(obs.ego_history, obs.stamp_ns, recipe.schema)
    images = np.stack([encoder.resize(f.image[None])[0] for f in obs.frames])
    module = SASDModule(model, recipe).eval()
    with torch.no_grad():
        trained = module.prompt_embeds(
            torch.tensor(encoder.prompt_ids(history, obs.route_command))[None],
            torch.from_numpy(images)[None],
            torch.tensor(history, dtype=torch.float32)[None],
            **{KEYWORDS[name]: torch.tensor([value]) for name, value in inputs.items()},
        )
    torch.testing.assert_close(trained, served, rtol=1e-5, atol=1e-5)
    for name, value in inputs.items():
        other = np.asarray(value, dtype=np.float64).copy()
        other.reshape(-1)[1] += 7.0  # the offset, the speed ahead, the left car's gap
        moved, _ = planner.embed(dataclasses.replace(obs, **{name: other}), {})
        assert not torch.allclose(moved, served), name
    plain = Recipe.build("test", names, 2, ego_tokens=4)
    bare = Planner(PlannerModel(plain.model_config), plain.tokenizer, config)
    assert not bare.reads_lane_pose and not bare.reads_lead and not bare.reads_beside
    assert not bare.reads_route
