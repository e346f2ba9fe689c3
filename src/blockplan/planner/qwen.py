"""Planner setup for Qwen2.5-VL block-diffusion checkpoints (Fast-dVLM, Fast-dDrive).

A published folder holds the Hugging Face files only (config.json, safetensors,
tokenizer.json): no cameras, frame count or answer format. They come from here:

* cameras and frames: the planner configuration; `fastddrive_config` gives Fast-dDrive's
  three front cameras and one frame per camera (any other set is a params file away);
* the answer format: `fastddrive_schema()` (192-token explanation, `|<MASK>|`, BPE-aligned
  numbers), the image size the frames are resized to (448 x 448: 256 tokens per image) and
  the block size (`DEFAULT_BLOCK_SIZE`, 32, unless config.json records `bd_size`), each
  overridable by an optional `blockplan.json` in the folder:
  `{"schema": {...DrivingSchema fields...}, "image_size": [h, w], "block_size": 32}`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

from blockplan.config import DEFAULT_CAMERA_TOPIC, CameraConfig, PlannerConfig
from blockplan.model.config import ModelConfigError
from blockplan.model.qwen2_5_vl.model import QwenVLModel
from blockplan.model.qwen2_5_vl.planner_model import (
    DEFAULT_IMAGE_SIZE,
    QwenPlannerConfig,
    QwenPlannerModel,
)
from blockplan.model.qwen2_5_vl.presets import QWEN_PRESETS, random_qwen_model, with_depth
from blockplan.model.weights import read_config
from blockplan.schema import (
    DEFAULT_BLOCK_SIZE,
    DrivingSchema,
    fastddrive_schema,
    schema_to_dict,
)
from blockplan.schema.qwen_tokens import build_qwen_like_tokenizer
from blockplan.schema.tokenizer import JsonTokenizer

FASTDDRIVE_CAMERAS = ("front_left", "front", "front_right")
SETTINGS_NAME = "blockplan.json"
SETTINGS_KEYS = ("schema", "image_size", "block_size")


def fastddrive_config(base: PlannerConfig | None = None) -> PlannerConfig:
    """`base` (default: the defaults) with Fast-dDrive's 3 cameras and 1 frame each."""
    base = base or PlannerConfig()
    cameras = tuple(
        CameraConfig(name=n, topic=DEFAULT_CAMERA_TOPIC.format(name=n)) for n in FASTDDRIVE_CAMERAS
    )
    window = dataclasses.replace(base.frame_window, num_frames=1)
    return dataclasses.replace(base, cameras=cameras, frame_window=window)


def read_settings(folder: Path) -> dict[str, Any]:
    """The optional `blockplan.json` of a Qwen2.5-VL folder; the block size defaults to
    config.json's `bd_size` (Fast-dLLM's name for it) when the checkpoint records one."""
    path = folder / SETTINGS_NAME
    settings: dict[str, Any] = {}
    if path.is_file():
        try:
            settings = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ModelConfigError(f"{path}: not JSON: {e}") from e
    block_size = read_config(folder).get("bd_size")
    if block_size is not None and "block_size" not in settings:
        settings["block_size"] = int(block_size)
    unknown = sorted(set(settings) - set(SETTINGS_KEYS))
    if unknown:
        raise ModelConfigError(f"{path}: unknown key {unknown[0]!r} (known: {SETTINGS_KEYS})")
    return settings


def qwen_planner_model(
    net: QwenVLModel, config: PlannerConfig, settings: dict[str, Any] | None = None
) -> tuple[QwenPlannerModel, DrivingSchema]:
    """Seat `net` in a planner with `config`'s cameras and frames and the folder settings."""
    settings = settings or {}
    schema = fastddrive_schema(**settings.get("schema", {}))
    model_config = QwenPlannerConfig(
        decoder=net.config.decoder,
        camera_names=config.camera_names,
        num_frames=config.frame_window.num_frames,
        image_size=tuple(settings.get("image_size", DEFAULT_IMAGE_SIZE)),
        block_size=int(settings.get("block_size", DEFAULT_BLOCK_SIZE)),
        schema=schema_to_dict(schema),
    )
    return QwenPlannerModel(net, model_config), schema


def qwen_random_parts(
    preset: str,
    config: PlannerConfig,
    dtype: torch.dtype,
    seed: int,
    num_layers: int | None = None,
    device: torch.device | str = "cpu",
) -> tuple[QwenPlannerModel, JsonTokenizer, DrivingSchema]:
    """A random-weight Qwen2.5-VL planner model of `preset` (in `dtype` on `device` from the
    start), the Qwen-like test tokenizer and the Fast-dDrive schema; `num_layers`: only that
    many decoder layers and ViT blocks (`presets.with_depth`)."""
    make_config, image_size = QWEN_PRESETS[preset]
    tokenizer = build_qwen_like_tokenizer()
    net_config = make_config(tokenizer.vocab_size)
    if num_layers is not None:
        net_config = with_depth(net_config, num_layers)
    ids = {
        name: tokenizer.token_id(token)
        for name, token in (
            ("image_token_id", "<|image_pad|>"),
            ("video_token_id", "<|video_pad|>"),
            ("vision_start_token_id", "<|vision_start|>"),
            ("vision_end_token_id", "<|vision_end|>"),
        )
    }
    net = random_qwen_model(dataclasses.replace(net_config, **ids), dtype, seed, device)
    model, schema = qwen_planner_model(net, config, {"image_size": list(image_size)})
    return model, tokenizer, schema
