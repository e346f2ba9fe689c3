"""The prompt: system text, cameras and images, navigation command, ego history.

One description renders two ways: `render_prompt` → token ids (`PromptLayout`) for our
engine, `render_prompt_text` → chat text with one `<image>` per frame for a Fast-dDrive-style
JSON export. Token layout (Qwen2.5-VL chat format):

    <|im_start|>system\\n{system}<|im_end|>\\n<|im_start|>user\\n{camera line}\\n   ← header
    [<|vision_start|> <|image_pad|> × tokens_per_image <|vision_end|>] × K cameras × T frames
    \\nNavigation command: {command}\\nEgo history ...:\\n-3.0: [x, y, vx, vy, ax, ay]\\n ...
    <|im_end|>\\n<|im_start|>assistant\\n                                            ← answer follows

The prompt length depends only on (schema, tokenizer, cameras, frames, tokens_per_image):
static text is the same for every observation, every number is fixed-width and encoded on its
own (one token per character), and the command is padded with the null token to the longest
command of the schema. Images are contiguous and view-major, right after the header, so under
frame-local attention a frame's tokens see the header and their own frame only. Each
`ImageSpan` covers a frame's `<|image_pad|>` positions; its `<|vision_start|>` sits at
start - 1 and its `<|vision_end|>` at end (they belong to the frame's attention group).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from blockplan.schema.layout import ImageSpan, PromptLayout, Tokenizer
from blockplan.schema.spec import DrivingSchema, SchemaError, format_number
from blockplan.types import ROUTE_AHEAD_M, EgoState, Observation, ns_to_seconds

IMAGE_PLACEHOLDER = "<image>"
HISTORY_COLUMNS = ("x", "y", "vx", "vy", "ax", "ay")
NUMBER_CHARS = "+-.0123456789"


@dataclass(frozen=True)
class PromptText:
    """The prompt as chat text: `system` and `user` turn contents; `user` holds one
    `<image>` per frame, view-major."""

    system: str
    user: str
    num_images: int

    def chat(self, schema: DrivingSchema) -> str:
        """The whole prompt in the chat format, ending where the assistant answer begins."""
        s, e = schema.im_start_token, schema.im_end_token
        return f"{s}system\n{self.system}{e}\n{s}user\n{self.user}{e}\n{s}assistant\n"


def ego_history_array(states: Sequence[EgoState], t0_ns: int, schema: DrivingSchema) -> np.ndarray:
    """(num_history, 6) [x, y, vx, vy, ax, ay] at t0 - (num_history-1)·period … t0, in the ego
    frame at t0 (x forward, y left). States are linearly interpolated by stamp (yaw
    unwrapped); before the oldest state the position goes back along the oldest state's
    velocity (heading, speed and acceleration held), after the newest the newest is held."""
    if not states:
        raise SchemaError("ego_history is empty: need at least the ego state at t0")
    stamps = np.array([ns_to_seconds(s.stamp_ns) for s in states])  # (S,)
    if np.any(np.diff(stamps) < 0):
        raise SchemaError("ego_history stamps must be oldest→newest")
    t0 = ns_to_seconds(t0_ns)
    times = t0 - schema.history_period_s * np.arange(schema.num_history - 1, -1, -1)  # (H,)
    fields = np.array(
        [[s.x, s.y, s.yaw, s.v_x, s.v_y, s.a_x, s.a_y] for s in states], dtype=np.float64
    )  # (S, 7)
    if not np.all(np.isfinite(fields)):
        raise SchemaError("ego_history holds a non-finite value")
    fields[:, 2] = np.unwrap(fields[:, 2])
    at = np.stack([np.interp(times, stamps, fields[:, k]) for k in range(7)], axis=-1)  # (H, 7)
    # Before the oldest state (a node that just started): the vehicle was already moving, so
    # those rows continue the oldest state backwards at its velocity rather than holding its
    # position (a frozen position with a non-zero velocity is a history no data holds).
    early = times < stamps[0]
    if np.any(early):
        _, _, yaw, vx, vy = fields[0, :5]
        velocity = np.array(
            [np.cos(yaw) * vx - np.sin(yaw) * vy, np.sin(yaw) * vx + np.cos(yaw) * vy]
        )
        at[early, :2] = fields[0, :2] + (times[early] - stamps[0])[:, None] * velocity
    ref = np.array([np.interp(t0, stamps, fields[:, k]) for k in range(3)])  # x0, y0, yaw0
    c, s = np.cos(ref[2]), np.sin(ref[2])
    world_to_ego = np.array([[c, s], [-s, c]])  # R(-yaw0)
    pos = (at[:, :2] - ref[:2]) @ world_to_ego.T  # (H, 2)
    dyaw = at[:, 2] - ref[2]  # body frame at t_k → ego frame at t0: R(yaw_k - yaw0)
    cd, sd = np.cos(dyaw), np.sin(dyaw)

    def rotate(v: np.ndarray) -> np.ndarray:  # (H, 2) → (H, 2)
        return np.stack([cd * v[:, 0] - sd * v[:, 1], sd * v[:, 0] + cd * v[:, 1]], axis=-1)

    return np.concatenate([pos, rotate(at[:, 3:5]), rotate(at[:, 5:7])], axis=-1)  # (H, 6)


@dataclass(frozen=True)
class _PromptVocab:
    """Ids the prompt needs, looked up by name once per tokenizer + schema."""

    vision_start: int
    image_pad: int
    vision_end: int
    null: int  # the placeholder of the ego slots
    char_ids: dict[str, int]  # number characters -> their single id
    commands: dict[str, tuple[int, ...]]  # route command -> ids, null-padded to one length


@functools.lru_cache(maxsize=16)
def _prompt_vocab(tokenizer: Tokenizer, schema: DrivingSchema) -> _PromptVocab:
    try:
        null_id = tokenizer.token_id(schema.null_token)
        vision = [
            tokenizer.token_id(name)
            for name in (schema.vision_start_token, schema.image_pad_token, schema.vision_end_token)
        ]
    except KeyError as e:
        raise SchemaError(f"tokenizer lacks a special token the prompt needs: {e}") from e
    char_ids = {}
    for c in NUMBER_CHARS:
        ids = tokenizer.encode(c)
        if len(ids) != 1:
            raise SchemaError(
                f"number character {c!r} must be one token, the tokenizer gives {ids}"
            )
        char_ids[c] = ids[0]
    encoded = {c: tuple(tokenizer.encode(c)) for c in schema.route_commands}
    budget = max(len(ids) for ids in encoded.values())
    commands = {c: ids + (null_id,) * (budget - len(ids)) for c, ids in encoded.items()}
    return _PromptVocab(*vision, null=null_id, char_ids=char_ids, commands=commands)


@functools.lru_cache(maxsize=1024)
def _encode_static(tokenizer: Tokenizer, text: str) -> tuple[int, ...]:
    """Text that is the same for every observation (cached)."""
    return tuple(tokenizer.encode(text))


def _history(
    observation: Observation | None, ego_history: np.ndarray | None, schema: DrivingSchema
) -> np.ndarray:
    if ego_history is None:
        if observation is None:  # a template prompt: same length as any real one
            return np.zeros((schema.num_history, len(HISTORY_COLUMNS)))
        return ego_history_array(observation.ego_history, observation.stamp_ns, schema)
    history = np.asarray(ego_history, dtype=np.float64)
    if history.shape != (schema.num_history, len(HISTORY_COLUMNS)):
        raise SchemaError(
            f"ego_history shape {history.shape}: expected ({schema.num_history}, 6) "
            f"columns {HISTORY_COLUMNS}"
        )
    if not np.all(np.isfinite(history)):
        raise SchemaError("ego_history holds a non-finite value")
    return history


def _command(
    observation: Observation | None, route_command: str | None, schema: DrivingSchema
) -> str:
    command = route_command or (
        observation.route_command if observation else schema.route_commands[0]
    )
    if command not in schema.route_commands:
        raise SchemaError(
            f"route_command={command!r}: must be one of {list(schema.route_commands)}"
        )
    return command


def _camera_line(camera_names: Sequence[str], num_frames: int) -> str:
    if not camera_names or num_frames < 1:
        raise SchemaError(
            f"need >= 1 camera and >= 1 frame, got {list(camera_names)} × {num_frames}"
        )
    return f"Cameras, {num_frames} frames each, oldest first: {', '.join(camera_names)}.\n"


def _tail_pieces(
    history: np.ndarray, command: str, schema: DrivingSchema, ego_tokens: int = 0
) -> list[tuple[str, object]]:
    """The text after the images as ("text", str) / ("command", str) / ("number", float) /
    ("ego", int) (that many ego slots, `ego_tokens` > 0: the numeric ego encoder's)."""
    pieces: list[tuple[str, object]] = [("text", "\nNavigation command: "), ("command", command)]
    if ego_tokens:
        pieces += [("text", "\nEgo state: "), ("ego", ego_tokens), ("text", "\n")]
        pieces.append(("text", "Answer in JSON."))
        return pieces
    pieces.append(
        ("text", "\nEgo history in the ego frame at t0 (t s: x y m, vx vy m/s, ax ay m/s^2):\n")
    )
    for k in range(schema.num_history):
        t = -schema.history_period_s * (schema.num_history - 1 - k) + 0.0  # no "-0.0"
        pieces.append(("text", f"{t:+.1f}: ["))
        for j in range(len(HISTORY_COLUMNS)):
            if j:
                pieces.append(("text", ", "))
            pieces.append(("number", float(history[k, j])))
        pieces.append(("text", "]\n"))
    pieces.append(("text", "Answer in JSON."))
    return pieces


def render_prompt_text(
    observation: Observation | None,
    schema: DrivingSchema,
    camera_names: Sequence[str],
    num_frames: int,
    ego_history: np.ndarray | None = None,
    route_command: str | None = None,
) -> PromptText:
    """The prompt as chat text with `<image>` placeholders (Fast-dDrive JSON export)."""
    history = _history(observation, ego_history, schema)
    command = _command(observation, route_command, schema)
    parts = [
        _camera_line(camera_names, num_frames),
        IMAGE_PLACEHOLDER * (len(camera_names) * num_frames),
    ]
    for kind, value in _tail_pieces(history, command, schema):
        parts.append(format_number(value, schema)[0] if kind == "number" else str(value))
    return PromptText(schema.system_text, "".join(parts), len(camera_names) * num_frames)


def _ego_pair(
    value: np.ndarray | None, observation: Observation | None, name: str, units: str
) -> np.ndarray:
    """A (2,) input an ego encoder may read (`name`: an Observation field), default the
    observation's, NaN when unknown; read-only."""
    if value is None and observation is not None:
        value = getattr(observation, name)
    pair = np.full(2, np.nan) if value is None else np.asarray(value, dtype=np.float64)
    if pair.shape != (2,):
        raise SchemaError(f"{name} shape {pair.shape}: expected (2,) {units}")
    pair.setflags(write=False)
    return pair


def render_prompt(
    observation: Observation | None,
    tokenizer: Tokenizer,
    schema: DrivingSchema,
    camera_names: Sequence[str],
    num_frames: int,
    tokens_per_image: int,
    ego_history: np.ndarray | None = None,
    route_command: str | None = None,
    ego_tokens: int = 0,
    lane_pose: np.ndarray | None = None,
    lead: np.ndarray | None = None,
    beside: np.ndarray | None = None,
    route_ahead: np.ndarray | None = None,
) -> PromptLayout:
    """The prompt as token ids with image placeholders, for our engine.

    ego_history: (num_history, 6) [x, y, vx, vy, ax, ay] in the ego frame at t0, oldest first;
    default: from `observation.ego_history` (see `ego_history_array`), or zeros when there is
    no observation (a template prompt of the same length). route_command: default the
    observation's, else the schema's first. History values beyond ±999.99 are clamped (a
    fixed-width prompt cannot hold them; at 0.5 s spacing over 3 s they do not occur).
    ego_tokens > 0: the history is not written as digits; the prompt holds that many ego
    slots (null-token placeholders) that the model's numeric ego encoder fills from the
    layout's `ego_history` (model/ego.py), and the layout carries the lane pose (2,) for an
    encoder that reads it: `lane_pose`, default `observation.lane_pose`, NaN when unknown;
    likewise the car ahead (2,) (gap, infinite when none; speed): `lead`, default
    `observation.lead`, NaN when unknown; likewise the lanes beside (2, 5): `beside`, default
    `observation.beside`, NaN when unknown; likewise the route ahead (A, 2): `route_ahead`,
    default `observation.route_ahead`, NaN when unknown. None of them ever changes the token
    ids.
    """
    if tokens_per_image < 1:
        raise SchemaError(f"tokens_per_image={tokens_per_image}: must be >= 1")
    if ego_tokens < 0:
        raise SchemaError(f"ego_tokens={ego_tokens}: must be >= 0")
    history = _history(observation, ego_history, schema)
    command = _command(observation, route_command, schema)
    vocab = _prompt_vocab(tokenizer, schema)
    s, e = schema.im_start_token, schema.im_end_token
    header = f"{s}system\n{schema.system_text}{e}\n{s}user\n"
    ids = list(_encode_static(tokenizer, header + _camera_line(camera_names, num_frames)))
    header_end = len(ids)
    spans = []
    for camera_index in range(len(camera_names)):
        for frame_index in range(num_frames):
            ids.append(vocab.vision_start)
            start = len(ids)
            spans.append(ImageSpan(start, start + tokens_per_image, camera_index, frame_index))
            ids += [vocab.image_pad] * tokens_per_image
            ids.append(vocab.vision_end)
    ego_span = None
    for kind, value in _tail_pieces(history, command, schema, ego_tokens):
        if kind == "ego":
            ego_span = (len(ids), len(ids) + value)
            ids += [vocab.null] * value
        elif kind == "number":  # one token per character: fixed length whatever the value
            ids += [vocab.char_ids[c] for c in format_number(value, schema)[0]]
        elif kind == "command":
            ids += vocab.commands[value]
        else:
            ids += _encode_static(tokenizer, value)
    ids += _encode_static(tokenizer, f"{e}\n{s}assistant\n")
    token_ids = np.array(ids, dtype=np.int64)
    token_ids.setflags(write=False)
    if ego_span is None:
        return PromptLayout(token_ids=token_ids, header_end=header_end, image_spans=tuple(spans))
    ego = np.asarray(history, dtype=np.float32)
    ego.setflags(write=False)
    lane = _ego_pair(lane_pose, observation, "lane_pose", "[offset m, heading rad]")
    ahead = _ego_pair(lead, observation, "lead", "[gap m, speed m/s]")
    lanes = _ego_beside(beside, observation)
    route = _ego_route(route_ahead, observation)
    return PromptLayout(
        token_ids,
        header_end,
        tuple(spans),
        ego_span=ego_span,
        ego_history=ego,
        lane_pose=lane,
        lead=ahead,
        beside=lanes,
        route_ahead=route,
    )


def _ego_route(value: np.ndarray | None, observation: Observation | None) -> np.ndarray:
    """The (A, 2) route ahead for the layout: `value`, else the observation's, NaN when
    unknown; read-only."""
    if value is None and observation is not None:
        value = observation.route_ahead
    shape = (len(ROUTE_AHEAD_M), 2)
    route = np.full(shape, np.nan) if value is None else np.asarray(value, dtype=np.float64)
    if route.shape != shape:
        raise SchemaError(
            f"route_ahead shape {route.shape}: expected {shape}, (x, y) in the ego frame at "
            f"{list(ROUTE_AHEAD_M)} m along the route"
        )
    route.setflags(write=False)
    return route


def _ego_beside(value: np.ndarray | None, observation: Observation | None) -> np.ndarray:
    """The (2, 5) lanes beside for the layout: `value`, else the observation's, NaN when
    unknown; read-only."""
    if value is None and observation is not None:
        value = observation.beside
    lanes = np.full((2, 5), np.nan) if value is None else np.asarray(value, dtype=np.float64)
    if lanes.shape != (2, 5):
        raise SchemaError(
            f"beside shape {lanes.shape}: expected (2, 5) per side [lanes, gap ahead m, "
            "speed m/s, gap behind m, speed m/s]"
        )
    lanes.setflags(write=False)
    return lanes
