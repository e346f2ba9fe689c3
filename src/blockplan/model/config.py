"""The decoder's architecture settings, read from / written to a HF-style `config.json`."""

from __future__ import annotations

import functools
import math
import types
import typing
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

from blockplan.errors import UserError


class ModelConfigError(UserError, ValueError):
    """A model folder's config.json is missing a field or holds a bad value; names it."""


# Plausibility bounds of a decoder's sizes (the largest open models are well inside them): a
# value beyond one is a corrupt or hostile config.json, refused before anything is allocated.
MAX_DECODER_SIZES = {
    "vocab_size": 1 << 21,
    "hidden_size": 1 << 16,
    "intermediate_size": 1 << 18,
    "num_hidden_layers": 1 << 10,
    "num_attention_heads": 1 << 10,
    "num_key_value_heads": 1 << 10,
    "max_position_embeddings": 1 << 20,
    "head_dim": 1 << 10,
}
MAX_SHOWN = 60  # characters of a bad value an error shows


def shown(value: Any) -> str:
    """`repr(value)` cut short: a huge list must not make a huge message."""
    if isinstance(value, (list, tuple, dict)) and len(value) > 8:
        return f"<{type(value).__name__} of {len(value)} items>"
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else f"{text[: MAX_SHOWN - 3]}..."


def _type_problem(value: Any, hint: Any) -> str | None:
    """What is wrong with a JSON `value` for the annotation `hint`; None: it fits."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(hint):
            return None
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        problems = [_type_problem(value, a) for a in args]
        return None if any(p is None for p in problems) else problems[0]
    if hint is bool:
        return None if isinstance(value, bool) else "must be true or false"
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else "must be an integer"
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "must be a number"
        return None if math.isfinite(value) else "must be a finite number"
    if hint is str:
        return None if isinstance(value, str) else "must be a string"
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            return "must be a list"
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            items = [(v, args[0]) for v in value]
        elif len(args) != len(value):
            return f"must be a list of {len(args)} values"
        else:
            items = list(zip(value, args, strict=True))
        for i, (v, a) in enumerate(items):
            problem = _type_problem(v, a)
            if problem is not None:
                return f"item {i}: {problem}"
        return None
    if origin is dict or hint is dict:
        return None if isinstance(value, dict) else "must be an object"
    return None  # a nested dataclass or anything else: its own from_dict checks it


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def check_section(cls: type, data: Any, where: str, unknown: bool = False) -> dict[str, Any]:
    """`data` (a config.json object) checked against the dataclass `cls`'s annotations: each
    given field has the JSON type its annotation wants (an int where an int is wanted, a
    finite number where a float is). `unknown`: keys `cls` lacks are refused (else ignored).
    Errors name `where` + the key. Returns `data` as a dict."""
    if not isinstance(data, dict):
        raise ModelConfigError(
            f"{where.rstrip('.') or '<top>'}={shown(data)}: must be a JSON object"
        )
    hints = _hints(cls)
    names = {f.name for f in fields(cls)}
    if unknown:
        extra = sorted(set(data) - names)
        if extra:
            raise ModelConfigError(f"{where}{extra[0]}: unknown key (known: {sorted(names)})")
    for name in names & set(data):
        problem = _type_problem(data[name], hints[name])
        if problem is not None:
            raise ModelConfigError(f"{where}{name}={shown(data[name])}: {problem}")
    return dict(data)


@dataclass(frozen=True)
class DecoderConfig:
    """A Qwen2-architecture decoder (field names as in HF `Qwen2Config`)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 32768
    tie_word_embeddings: bool = False
    head_dim: int | None = None
    # Multimodal RoPE (Qwen2-VL / Qwen2.5-VL): the rotary frequency pairs are cut into three
    # runs of these sizes, rotated by the temporal, height and width position respectively.
    # None: plain 1-D RoPE. Positions equal on all three axes give plain RoPE either way.
    mrope_section: tuple[int, int, int] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.mrope_section, list):  # JSON gives lists
            object.__setattr__(self, "mrope_section", tuple(self.mrope_section))
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ModelConfigError(f"{name}={shown(value)}: must be an integer >= 1")
        for name, limit in MAX_DECODER_SIZES.items():
            value = getattr(self, name)
            if value is not None and not 1 <= value <= limit:
                raise ModelConfigError(f"{name}={value}: must be in [1, {limit}]")
        for name in ("rms_norm_eps", "rope_theta"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ModelConfigError(f"{name}={shown(value)}: must be a finite number > 0")
        if not isinstance(self.tie_word_embeddings, bool):
            raise ModelConfigError(
                f"tie_word_embeddings={shown(self.tie_word_embeddings)}: must be true or false"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ModelConfigError(
                f"num_key_value_heads={self.num_key_value_heads}: must divide "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ModelConfigError(
                f"hidden_size={self.hidden_size}: must be a multiple of "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.dim_per_head % 2:
            raise ModelConfigError(f"head_dim={self.dim_per_head}: RoPE needs an even head_dim")
        if self.mrope_section is not None and (
            len(self.mrope_section) != 3
            or min(self.mrope_section) < 0
            or sum(self.mrope_section) != self.dim_per_head // 2
        ):
            raise ModelConfigError(
                f"mrope_section={list(self.mrope_section)}: must be 3 sizes summing to "
                f"head_dim / 2 = {self.dim_per_head // 2}"
            )

    def parameters_lower_bound(self) -> int:
        """At least this many weights (norms and biases left out): what a weights file
        holding this decoder must hold, known before anything is allocated."""
        d, heads, kv = self.hidden_size, self.num_attention_heads, self.num_key_value_heads
        attention = d * self.dim_per_head * (2 * heads + 2 * kv)  # q, k, v, o
        layer = attention + 3 * d * self.intermediate_size  # gate, up, down
        embeddings = self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
        return embeddings + self.num_hidden_layers * layer

    @property
    def dim_per_head(self) -> int:
        return (
            self.head_dim
            if self.head_dim is not None
            else self.hidden_size // self.num_attention_heads
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "") -> DecoderConfig:
        """From a HF `config.json` dict (Qwen2 / Qwen2.5); unknown keys are ignored. `where`:
        the object's place in config.json that errors name (`text_config.`)."""
        d = check_section(cls, d, where)
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known}
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        if not isinstance(rope, dict):
            raise ModelConfigError(f"rope_scaling={shown(rope)}: must be a JSON object")
        if "rope_theta" not in kwargs and "rope_theta" in rope:
            kwargs["rope_theta"] = rope["rope_theta"]
        if "mrope_section" in rope:
            kwargs["mrope_section"] = tuple(rope["mrope_section"])
        if d.get("use_sliding_window"):
            raise ModelConfigError(
                "use_sliding_window=true: sliding-window attention is not supported"
            )
        # Qwen2.5-VL writes {"type": "mrope", "mrope_section": ...}: default RoPE per axis.
        if rope.get("rope_type", "default") not in ("default", "mrope", None):
            raise ModelConfigError(f"rope_type={rope['rope_type']!r}: only 'default' is supported")
        missing = sorted(
            f.name for f in fields(cls) if f.name not in kwargs and f.default is MISSING
        )
        if missing:
            raise ModelConfigError(f"config.json lacks {missing[0]!r}")
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """A HF-compatible `config.json` dict (`model_type: qwen2`)."""
        d = asdict(self)
        if d["head_dim"] is None:
            del d["head_dim"]
        mrope = d.pop("mrope_section")
        if mrope is not None:
            d["rope_scaling"] = {"type": "mrope", "mrope_section": list(mrope)}
        d.update(
            model_type="qwen2",
            architectures=["Qwen2ForCausalLM"],
            hidden_act="silu",
            attention_dropout=0.0,
            use_sliding_window=False,
        )
        return d
