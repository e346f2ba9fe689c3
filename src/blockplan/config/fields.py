"""Field metadata and the checks every settings class runs: a `choice` of strings, a
`bounded` number (the node's parameter range), a `signed` number; errors name the field.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import field
from typing import Any

from blockplan.errors import ConfigError

# Plausibility bounds of settings that size what the runtime allocates or starts: a value
# beyond one is a typo or a corrupt file, never a configuration that could run.
MAX_THREADS = 1024  # torch / onnxruntime CPU threads (each one is started)
MAX_DENOISE_STEPS = 65536
MAX_RATE_HZ = 1000.0  # the control loop's timer; faster is no control rate a node keeps
MAX_TRAJECTORY_POINTS = 10_000  # horizon_s / dt: the points of every published trajectory
MAX_SHOWN = 80  # characters of a bad value an error shows


def shown(value: Any) -> str:
    """`repr(value)`, cut to MAX_SHOWN characters (a huge list must not make a huge
    message). A container is summarised before its repr is built."""
    if isinstance(value, (list, tuple, dict)) and len(value) > 8:
        return f"<{type(value).__name__} of {len(value)} items>"
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else f"{text[: MAX_SHOWN - 3]}..."


def _check(ok: bool, where: str, value: Any, why: str) -> None:
    if not ok:
        raise ConfigError(f"{where}={shown(value)}: {why}")


def _one_of(where: str, value: str, allowed: tuple[str, ...]) -> None:
    _check(value in allowed, where, value, f"must be one of {list(allowed)}")


# Field metadata, read by the validation here and by the node's parameters (ros/params.py):
# the values a field allows, the ROS range of a bounded one and the sign of a signed one come
# from the field itself.
CHOICES_KEY, RANGE_KEY, NODE_KEY, SIGN_KEY = "choices", "range", "node_parameter", "sign"
SIGNS = {"> 0": lambda v: v > 0, ">= 0": lambda v: v >= 0, "< 0": lambda v: v < 0}


def choice(default: str, choices: tuple[str, ...], node_parameter: bool = True) -> Any:
    """A string field that must be one of `choices` (`_check_choices`; the node's parameter
    lists them). `node_parameter=False`: a setting of the params file that the node neither
    declares nor uses (replay's `control.timing`)."""
    metadata = {CHOICES_KEY: choices, NODE_KEY: node_parameter}
    return field(default=default, metadata=metadata)


def bounded(default: float, low: float, high: float) -> Any:
    """A number within [low, high]: the node's parameter range (ROS ranges are inclusive). The
    class's `__post_init__` checks the exact bounds (an open end, e.g. a threshold > 0)."""
    return field(default=default, metadata={RANGE_KEY: (low, high)})


def signed(default: float, sign: str) -> Any:
    """A finite number with `sign` (a key of `SIGNS`, e.g. "> 0"): `_check_fields` checks it
    and the node's parameter states it (`ros2 param describe`)."""
    if sign not in SIGNS:
        raise ValueError(f"sign {sign!r}: one of {list(SIGNS)}")
    return field(default=default, metadata={SIGN_KEY: sign})


def _check_fields(obj: Any, where: str) -> None:
    """Every `choice` field of the dataclass `obj` holds one of its choices and every `signed`
    field a finite number of its sign (errors name `where.field`)."""
    for f in dataclasses.fields(obj):
        name, value = f"{where}.{f.name}", getattr(obj, f.name)
        if CHOICES_KEY in f.metadata:
            _one_of(name, value, f.metadata[CHOICES_KEY])
        if SIGN_KEY in f.metadata:
            sign = f.metadata[SIGN_KEY]
            ok = math.isfinite(value) and SIGNS[sign](value)
            _check(ok, name, value, f"must be a finite number {sign}")
