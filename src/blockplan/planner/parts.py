"""What a `Planner` is built from: the model, tokenizer and schema of a model folder or of a
random-weight preset, the dtype and device it runs in, and the setup error that names the
field at fault."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from blockplan.config import DTYPES, PlannerConfig
from blockplan.decoding.device import DeviceError, resolve_device
from blockplan.decoding.ngrams import DRAFTS_NAME
from blockplan.errors import UserError
from blockplan.model.planner_model import PlannerModel, PlannerModelConfig
from blockplan.model.presets import (
    preset_config,
    preset_names,
    robot_preset_config,
    robot_preset_names,
)
from blockplan.model.pretrained import load_pretrained
from blockplan.model.weights import verify_folder
from blockplan.schema import (
    DrivingSchema,
    Tokenizer,
    default_schema,
    default_tokenizer,
)
from blockplan.schema.action import ActionSchema, action_schema_from_dict, action_schema_to_dict
from blockplan.schema.tokenizer import load_tokenizer_text

if TYPE_CHECKING:
    from blockplan.model.qwen2_5_vl.planner_model import QwenPlannerModel

TOKENIZER_NAME = "tokenizer.json"
# The torch dtype of each `model.dtype` the configuration accepts (config.DTYPES).
TORCH_DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPES}


class PlannerSetupError(UserError, ValueError):
    """The model and the configuration or the observation do not fit; names the field."""


@dataclass(frozen=True)
class PlannerParts:
    """The arguments of `Planner(...)`; schema None: the one the model's config records."""

    model: PlannerModel | QwenPlannerModel
    tokenizer: Tokenizer
    config: PlannerConfig
    schema: DrivingSchema | ActionSchema | None = None
    folder: Path | None = None
    weights: str = "random-init"  # or what `verify_folder` found: sha256-verified, unverified


def device_of(config: PlannerConfig) -> torch.device:
    """`config.model.device`, checked; raises `PlannerSetupError` where it is absent."""
    try:
        return resolve_device(config.model.device)
    except DeviceError as e:
        raise PlannerSetupError(str(e)) from e


def schema_from(settings: dict, embodiment: str = "vehicle") -> DrivingSchema | ActionSchema:
    """The schema a model config records (`PlannerModelConfig.schema`), or the default: a
    driving schema, or for a robot model an action schema."""
    from blockplan.model.config import check_section

    if embodiment == "robot":
        return action_schema_from_dict(check_section(ActionSchema, settings, "schema."))
    if not settings:
        return default_schema()
    settings = check_section(DrivingSchema, settings, "schema.", unknown=True)
    return DrivingSchema(**{k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()})


def folder_parts(path: str | Path, config: PlannerConfig | None = None) -> PlannerParts:
    """A model folder (config.json, model.safetensors, tokenizer.json): ours, or a Qwen2.5-VL
    block-diffusion checkpoint (Fast-dDrive / Fast-dVLM; default config: Fast-dDrive's 3
    cameras, see planner/qwen.py)."""
    from blockplan.model.qwen2_5_vl.model import QwenVLModel
    from blockplan.planner.qwen import SETTINGS_NAME

    folder = Path(path)
    if not folder.is_dir():
        raise PlannerSetupError(f"{folder}: no such model folder")
    # Every file read below is checked against the manifest first, once.
    weights = verify_folder(folder, also=(TOKENIZER_NAME, SETTINGS_NAME, DRAFTS_NAME))
    model = load_pretrained(folder, verify=False)
    tokenizer_path = folder / TOKENIZER_NAME
    if not tokenizer_path.is_file():
        raise PlannerSetupError(f"{folder}: no {TOKENIZER_NAME}")
    tokenizer = checked_tokenizer(tokenizer_path, model.config)
    if isinstance(model, QwenVLModel):
        from blockplan.planner.qwen import (
            fastddrive_config,
            qwen_planner_model,
            read_settings,
        )

        config = config or fastddrive_config()
        seated, schema = qwen_planner_model(model, config, read_settings(folder))
        return PlannerParts(seated, tokenizer, config, schema, folder, weights)
    if not isinstance(model, PlannerModel):
        raise PlannerSetupError(f"{folder}: holds a {type(model).__name__}, not a planner")
    return PlannerParts(model, tokenizer, config or PlannerConfig(), None, folder, weights)


def checked_tokenizer(path: Path, model_config: object) -> Tokenizer:
    """A folder's tokenizer.json, checked before the tokenizers library sees it: strict
    JSON (read_json_file), the shape of a tokenizer (an object with a `model` object and a
    list of `added_tokens`), and every token id inside the model's embeddings
    (`text_config.vocab_size`). Errors name the file and the key (one line)."""
    from blockplan.model.weights import read_json_file

    doc, text = read_json_file(path, PlannerSetupError)
    if not isinstance(doc, dict):
        raise PlannerSetupError(f"{path}: a JSON {type(doc).__name__}, not a tokenizer object")
    inner = doc.get("model")
    if not isinstance(inner, dict) or not isinstance(inner.get("type"), str):
        raise PlannerSetupError(f"{path}: 'model' must be an object with a 'type'")
    added = doc.get("added_tokens", [])
    if not isinstance(added, list) or not all(
        isinstance(t, dict) and isinstance(t.get("id"), int) and isinstance(t.get("content"), str)
        for t in added
    ):
        raise PlannerSetupError(
            f"{path}: 'added_tokens' must be a list of objects with an integer 'id' and a "
            "string 'content'"
        )
    vocab = inner.get("vocab")
    ids = [t["id"] for t in added]
    if isinstance(vocab, dict):
        ids += [v for v in vocab.values() if isinstance(v, int)]
    decoder = getattr(model_config, "decoder", None) or getattr(model_config, "text", None)
    limit = getattr(decoder, "vocab_size", None)
    if ids and limit is not None and not 0 <= min(ids) <= max(ids) < limit:
        bad = max(ids) if max(ids) >= limit else min(ids)
        raise PlannerSetupError(
            f"{path}: token id {bad} lies outside the model's {limit} embeddings "
            "(config.json text_config.vocab_size)"
        )
    try:
        tokenizer = load_tokenizer_text(text)
    except ValueError as e:  # the tokenizers library's error on a corrupt file
        raise PlannerSetupError(f"{path}: {' '.join(str(e).split())}") from e
    if limit is not None and tokenizer.vocab_size > limit:
        raise PlannerSetupError(
            f"{path}: vocab_size={tokenizer.vocab_size} exceeds the model's {limit} embeddings "
            "(config.json text_config.vocab_size)"
        )
    return tokenizer


def random_parts(
    preset: str,
    config: PlannerConfig | None = None,
    seed: int = 0,
    num_layers: int | None = None,
    adjust: Callable[[PlannerModelConfig], PlannerModelConfig] | None = None,
) -> PlannerParts:
    """Random weights of a preset size with the default tokenizer and schema; a Qwen2.5-VL
    preset (`qwen2.5-vl-3b`, `qwen2.5-vl-test`) gets the Qwen-like test tokenizer, the
    Fast-dDrive schema and (without `config`) Fast-dDrive's cameras. `num_layers`: the
    preset's widths with only that many decoder layers (and, for Qwen2.5-VL, ViT blocks).
    `adjust` edits one of our presets' model configs before the weights are made (e.g. the
    visual grid of `bench --streaming --grid`)."""
    from blockplan.model.qwen2_5_vl.presets import QWEN_PRESETS

    if preset in QWEN_PRESETS:
        from blockplan.planner.qwen import fastddrive_config, qwen_random_parts

        if adjust is not None:
            raise PlannerSetupError(f"preset {preset!r}: a Qwen2.5-VL preset takes no adjust")
        config = config or fastddrive_config()
        dtype = TORCH_DTYPES[config.model.dtype]
        device = device_of(config)  # drawn there: 3.75 B values take ~100 s on a CPU core
        model, tokenizer, schema = qwen_random_parts(
            preset, config, dtype, seed, num_layers, device
        )
        return PlannerParts(model, tokenizer, config, schema)
    if preset in robot_preset_names():
        return _robot_random_parts(preset, config, seed, num_layers, adjust)
    if preset not in preset_names():
        every = sorted([*preset_names(), *robot_preset_names(), *QWEN_PRESETS])
        raise PlannerSetupError(f"preset {preset!r}: must be one of {every}")
    config = config or PlannerConfig()
    tokenizer = default_tokenizer()
    schema = default_schema()
    model_config = preset_config(
        preset,
        tokenizer.vocab_size,
        config.camera_names,
        config.frame_window.num_frames,
        schema=schema,
    )
    if num_layers is not None:
        decoder = dataclasses.replace(model_config.decoder, num_hidden_layers=num_layers)
        model_config = dataclasses.replace(model_config, decoder=decoder)
    if adjust is not None:
        model_config = adjust(model_config)
    torch.manual_seed(seed)
    return PlannerParts(PlannerModel(model_config), tokenizer, config, schema)


def _robot_random_parts(
    preset: str,
    config: PlannerConfig | None,
    seed: int,
    num_layers: int | None,
    adjust: Callable[[PlannerModelConfig], PlannerModelConfig] | None,
) -> PlannerParts:
    """A `robot-*` preset: the default action schema (8 steps x 7 dimensions, 256 bins in
    [-1, 1]) with its bins after the default tokenizer's vocabulary, block size 7, and
    (without `config`) the robot cameras, one frame each."""
    from blockplan.planner.embodiment import robot_config

    config = config or robot_config()
    tokenizer = default_tokenizer()
    schema = ActionSchema(bin_token_offset=tokenizer.vocab_size)
    model_config = robot_preset_config(
        preset,
        schema.vocab_size(tokenizer),
        config.camera_names,
        config.frame_window.num_frames,
        block_size=schema.action_dim,
        schema=action_schema_to_dict(schema),
    )
    if num_layers is not None:
        decoder = dataclasses.replace(model_config.decoder, num_hidden_layers=num_layers)
        model_config = dataclasses.replace(model_config, decoder=decoder)
    if adjust is not None:
        model_config = adjust(model_config)
    torch.manual_seed(seed)
    return PlannerParts(PlannerModel(model_config), tokenizer, config, schema)
