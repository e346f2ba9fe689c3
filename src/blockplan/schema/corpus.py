"""A deterministic text corpus for our tokenizer, generated from the schema and a driving
situation vocabulary, and the build of the shipped default tokenizer.

The corpus holds rendered answers (keys, yes/no, enum words, fixed-width numbers, templated
explanations) and rendered prompts (system text, cameras, commands, ego history), so the BPE
merges cover exactly the strings the planner reads and writes. Explanations from the
simulator's own templates tokenize well when they use these words; any other text still
encodes (byte-level BPE), only into more tokens.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from blockplan.schema.answer import render_answer_text
from blockplan.schema.prompt import IMAGE_PLACEHOLDER, render_prompt_text
from blockplan.schema.spec import DrivingSchema, default_schema
from blockplan.schema.tokenizer import JsonTokenizer, train_tokenizer
from blockplan.types import DrivingAnswer, Lateral, Longitudinal

DEFAULT_VOCAB_SIZE = 768
DEFAULT_NUM_ANSWERS = 2000
DEFAULT_SEED = 0

SUBJECTS = (
    "the lead vehicle",
    "the vehicle ahead",
    "a car ahead",
    "a slower car",
    "a truck ahead",
    "a bus",
    "a vehicle on the left",
    "a vehicle on the right",
    "a merging vehicle",
    "a vehicle behind",
    "a fast vehicle behind",
    "an emergency vehicle",
    "a pedestrian",
    "a cyclist",
    "traffic ahead",
    "the left lane",
    "the right lane",
    "my lane",
    "the road",
    "the junction",
    "the traffic light",
    "a stop sign",
    "construction ahead",
    "a road hazard",
    "an animal",
    "a parked car",
    "a door opening vehicle",
    "a special vehicle",
)
STATES = (
    "is slowing down",
    "is braking",
    "is stopped",
    "is far ahead",
    "is close",
    "is too close",
    "is clear",
    "is free",
    "is merging into my lane",
    "is changing lanes",
    "is crossing",
    "is faster",
    "is slower",
    "keeps its speed",
    "is accelerating",
    "is blocked",
    "is red",
    "is green",
    "is empty",
    "is dense",
    "is approaching",
    "cuts in",
    "turns",
)
DECISIONS = (
    "so I keep my speed",
    "so I slow down",
    "so I decelerate",
    "so I accelerate",
    "so I stop",
    "so I wait",
    "so I follow the lane",
    "so I keep the lane",
    "so I change to the left lane",
    "so I change to the right lane",
    "so I turn left",
    "so I turn right",
    "so I go straight",
    "so I keep a safe gap",
    "so I overtake",
    "and I follow the route",
    "and I keep a safe distance",
)
EXTRAS = (
    "",
    "",
    "",
    "The gap is large.",
    "The gap is small.",
    "Speed is low.",
    "Speed is high.",
    "The road is straight.",
    "The road curves.",
    "No other objects are relevant.",
)


def explanation(rng: np.random.Generator) -> str:
    """One templated driving explanation."""
    subject = SUBJECTS[rng.integers(len(SUBJECTS))]
    state = STATES[rng.integers(len(STATES))]
    decision = DECISIONS[rng.integers(len(DECISIONS))]
    extra = EXTRAS[rng.integers(len(EXTRAS))]
    text = f"{subject[0].upper()}{subject[1:]} {state}, {decision}."
    return f"{text} {extra}".strip()


def random_answer(rng: np.random.Generator, schema: DrivingSchema) -> DrivingAnswer:
    """A plausible answer: forward waypoints, small lateral offsets, random flags."""
    speed = rng.uniform(0.0, 35.0)
    t = np.arange(1, schema.num_waypoints + 1, dtype=np.float64)
    x = speed * t + 0.5 * rng.uniform(-3.0, 2.0) * t**2
    y = rng.normal(0.0, 1.5) * t**2 / 5.0
    return DrivingAnswer(
        critical_objects={k: bool(rng.random() < 0.3) for k in schema.critical_object_keys},
        explanation=explanation(rng),
        longitudinal=list(Longitudinal)[rng.integers(len(Longitudinal))],
        lateral=list(Lateral)[rng.integers(len(Lateral))],
        waypoints=np.stack([x, y], axis=-1),
    )


def default_corpus(
    schema: DrivingSchema | None = None,
    num_answers: int = DEFAULT_NUM_ANSWERS,
    seed: int = DEFAULT_SEED,
) -> Iterator[str]:
    """Rendered answers and prompts (one in eight); the same texts for the same arguments."""
    schema = schema or default_schema()
    rng = np.random.default_rng(seed)
    cameras = ("front_left", "front", "front_right", "rear", "left", "right", "back")
    for i in range(num_answers):
        yield render_answer_text(random_answer(rng, schema), schema)
        if i % 8 == 0:
            history = rng.normal(0.0, 5.0, size=(schema.num_history, 6))
            history[:, 0] = np.linspace(-rng.uniform(0, 90), 0, schema.num_history)
            command = schema.route_commands[rng.integers(len(schema.route_commands))]
            num_cameras = int(rng.integers(1, len(cameras) + 1))
            prompt = render_prompt_text(
                None, schema, cameras[:num_cameras], int(rng.integers(1, 5)), history, command
            )
            yield prompt.system
            yield prompt.user.replace(IMAGE_PLACEHOLDER, "")
            yield "system\nuser\nassistant\n"


def build_default_tokenizer(
    path: str | Path | None = None, vocab_size: int = DEFAULT_VOCAB_SIZE
) -> JsonTokenizer:
    """Train the default tokenizer on `default_corpus()`; deterministic. The shipped
    `default_tokenizer.json` is `build_default_tokenizer(<that path>)`."""
    return train_tokenizer(default_corpus(), vocab_size, path)
