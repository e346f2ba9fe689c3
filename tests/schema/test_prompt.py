import numpy as np
import pytest

from blockplan.schema import (
    IMAGE_PLACEHOLDER,
    DrivingSchema,
    SchemaError,
    ego_history_array,
    render_prompt,
    render_prompt_text,
)
from blockplan.types import CameraFrame, EgoState, Observation, seconds_to_ns

CAMERAS = ("front_left", "front", "front_right", "rear")


def straight_history(speed: float, yaw: float = 0.0, t0: float = 100.0) -> tuple[EgoState, ...]:
    """Constant speed along heading `yaw` in odom, sampled at 10 Hz over 4 s up to t0."""
    states = []
    for t in np.arange(t0 - 4.0, t0 + 1e-9, 0.1):
        d = speed * (t - t0)
        states.append(
            EgoState(seconds_to_ns(t), 5.0 + d * np.cos(yaw), -2.0 + d * np.sin(yaw), yaw, speed)
        )
    return tuple(states)


def observation(command: str = "turn_left", speed: float = 10.0) -> Observation:
    frame = CameraFrame("front", seconds_to_ns(100.0), np.zeros((4, 4, 3), np.uint8))
    return Observation(seconds_to_ns(100.0), (frame,), straight_history(speed, 0.7), command)


def test_layout(schema, tokenizer):
    prompt = render_prompt(observation(), tokenizer, schema, CAMERAS, 2, 16)
    ids = prompt.token_ids
    pad = tokenizer.token_id("<|image_pad|>")
    assert len(prompt.image_spans) == 8
    order = [(s.camera_index, s.frame_index) for s in prompt.image_spans]
    assert order == [(c, f) for c in range(4) for f in range(2)]  # view-major
    assert prompt.header_end == prompt.image_spans[0].start - 1  # then <|vision_start|>
    for span in prompt.image_spans:
        assert span.end - span.start == 16
        assert np.all(ids[span.start : span.end] == pad)
        assert ids[span.start - 1] == tokenizer.token_id("<|vision_start|>")
        assert ids[span.end] == tokenizer.token_id("<|vision_end|>")
    assert int(np.sum(ids == pad)) == 8 * 16
    header = tokenizer.decode(list(ids[: prompt.header_end]))
    assert header.startswith("<|im_start|>system\n" + schema.system_text + "<|im_end|>")
    assert header.endswith(
        "<|im_start|>user\nCameras, 2 frames each, oldest first: "
        "front_left, front, front_right, rear.\n"
    )
    assert tokenizer.decode(list(ids[-3:])).endswith("<|im_start|>assistant\n")


def test_length_is_constant(schema, tokenizer):
    template = render_prompt(None, tokenizer, schema, CAMERAS, 2, 16)
    rng = np.random.default_rng(0)
    for command in schema.route_commands:
        history = rng.normal(0.0, 300.0, size=(7, 6))
        history[0, 0] = -5000.0  # clamped, still fixed width
        prompt = render_prompt(None, tokenizer, schema, CAMERAS, 2, 16, history, command)
        assert len(prompt) == len(template)
        assert prompt.header_end == template.header_end
        assert prompt.image_spans == template.image_spans
    for speed in (0.0, 3.3, 33.0):
        assert len(
            render_prompt(observation(speed=speed), tokenizer, schema, CAMERAS, 2, 16)
        ) == len(template)


def test_text_form_matches_the_tokens(schema, tokenizer):
    obs = observation()
    prompt = render_prompt(obs, tokenizer, schema, CAMERAS, 2, 4)
    text = render_prompt_text(obs, schema, CAMERAS, 2)
    assert text.num_images == 8 and text.user.count(IMAGE_PLACEHOLDER) == 8
    image = "<|vision_start|>" + "<|image_pad|>" * 4 + "<|vision_end|>"
    expected = text.chat(schema).replace(IMAGE_PLACEHOLDER, image)
    decoded = tokenizer.decode(list(prompt.token_ids)).replace("<|NULL|>", "")
    assert decoded == expected
    assert "Navigation command: turn_left\n" in text.user
    assert "+0.0: [+000.00, +000.00, +010.00, +000.00, +000.00, +000.00]" in text.user
    assert "-3.0: [-030.00, +000.00, +010.00" in text.user


def test_ego_history_in_the_ego_frame(schema):
    for yaw in (0.0, 0.7, -2.5, 3.1):
        history = ego_history_array(straight_history(10.0, yaw), seconds_to_ns(100.0), schema)
        assert history.shape == (7, 6)
        t = np.arange(-3.0, 0.01, 0.5)
        np.testing.assert_allclose(history[:, 0], 10.0 * t, atol=1e-9)
        np.testing.assert_allclose(history[:, 1], 0.0, atol=1e-9)
        np.testing.assert_allclose(history[:, 2], 10.0, atol=1e-9)
        np.testing.assert_allclose(history[:, 3:], 0.0, atol=1e-9)


def test_ego_history_turning_vehicle(schema):
    """A vehicle on a circle (radius 20 m, 5 m/s): past positions lie behind and to the
    right of a left turn, past velocities rotate by the heading change."""
    r, v, t0 = 20.0, 5.0, 10.0
    states = []
    for t in np.arange(0.0, t0 + 1e-9, 0.05):
        yaw = v * t / r
        states.append(EgoState(seconds_to_ns(t), r * np.sin(yaw), r - r * np.cos(yaw), yaw, v))
    history = ego_history_array(states, seconds_to_ns(t0), schema)
    dyaw = -v * 3.0 / r  # heading 3 s ago relative to now
    np.testing.assert_allclose(history[0, 0], -r * np.sin(-dyaw), atol=1e-2)
    np.testing.assert_allclose(history[0, 1], r * (1 - np.cos(dyaw)), atol=1e-2)
    np.testing.assert_allclose(history[0, 2:4], [v * np.cos(dyaw), v * np.sin(dyaw)], atol=1e-6)
    np.testing.assert_allclose(history[-1], [0, 0, v, 0, 0, 0], atol=1e-9)


def test_short_history_goes_back_along_the_oldest_velocity(schema):
    """Rows before the oldest state (a node that just started) continue it backwards at its
    velocity: the straight 10 m/s history as if it had been recorded all along."""
    full = ego_history_array(straight_history(10.0), seconds_to_ns(100.0), schema)
    states = straight_history(10.0)[-11:]  # 1 s of history
    history = ego_history_array(states, seconds_to_ns(100.0), schema)
    np.testing.assert_allclose(history[:, 0], [-30.0, -25.0, -20.0, -15.0, -10.0, -5.0, 0.0])
    np.testing.assert_allclose(history, full, atol=1e-9)
    # a turning vehicle: back along its heading at the oldest state, speed held
    turning = [
        EgoState(
            stamp_ns=seconds_to_ns(99.0 + 0.1 * k),
            x=k * 1.0,
            y=k * 1.0,
            yaw=np.pi / 4,
            v_x=np.sqrt(200.0),
        )
        for k in range(11)
    ]
    h = ego_history_array(turning, seconds_to_ns(100.0), schema)  # ego frame: x along 45°
    np.testing.assert_allclose(h[:, 0], -np.sqrt(200.0) * np.arange(3.0, -0.1, -0.5), atol=1e-9)
    np.testing.assert_allclose(h[:, 1], 0.0, atol=1e-9)
    np.testing.assert_allclose(h[:, 2], np.sqrt(200.0), atol=1e-9)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"route_command": "fly"}, "route_command='fly'"),
        ({"ego_history": np.zeros((6, 6))}, "ego_history shape"),
        ({"ego_history": np.full((7, 6), np.nan)}, "non-finite"),
        ({"camera_names": ()}, "camera"),
        ({"tokens_per_image": 0}, "tokens_per_image"),
    ],
)
def test_prompt_errors(schema, tokenizer, kwargs, match):
    args = {"camera_names": CAMERAS, "num_frames": 2, "tokens_per_image": 4, **kwargs}
    with pytest.raises(SchemaError, match=match):
        render_prompt(None, tokenizer, schema, **args)


def test_ego_history_errors(schema):
    with pytest.raises(SchemaError, match="empty"):
        ego_history_array((), 0, schema)
    states = straight_history(1.0)
    with pytest.raises(SchemaError, match="oldest"):
        ego_history_array(states[::-1], seconds_to_ns(100.0), schema)


def test_other_history_settings(tokenizer):
    schema = DrivingSchema(num_history=4, history_period_s=1.0)
    text = render_prompt_text(None, schema, ("front",), 1)
    assert "-3.0: [" in text.user and "-2.5" not in text.user
    prompt = render_prompt(None, tokenizer, schema, ("front",), 1, 2)
    assert len(prompt) < len(render_prompt(None, tokenizer, DrivingSchema(), ("front",), 1, 2))


def test_tokenizer_without_image_tokens(schema):
    from blockplan.schema import train_tokenizer

    plain = train_tokenizer(["lane_follow 0 1 2"] * 10, 300, special_tokens=("<|NULL|>",))
    with pytest.raises(SchemaError, match="vision_start"):
        render_prompt(None, plain, schema, ("front",), 1, 4)
