"""Any model folder by its family: `load_pretrained(path)` reads `config.json` and picks the
model from `model_type` (`qwen2` → `Decoder`; `qwen2_5_vl` → `QwenVLModel`;
`blockplan_planner` → `PlannerModel`); `save_pretrained` writes one back. The folder format
itself (safetensors, manifest) is `model/weights.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from blockplan.errors import UserError
from blockplan.model.config import DecoderConfig, ModelConfigError, shown
from blockplan.model.decoder import Decoder
from blockplan.model.planner_model import PlannerModel, PlannerModelConfig
from blockplan.model.qwen2_5_vl.model import QwenVLModel
from blockplan.model.weights import (
    CONFIG_NAME,
    decoder_from_state,
    read_config,
    read_state_dict,
    save_folder,
    verify_folder,
)

MODEL_TYPES = ("qwen2", "qwen2_5_vl", "blockplan_planner")


def load_pretrained(
    path: str | Path, dtype: torch.dtype | None = None, verify: bool = True
) -> nn.Module:
    """Load a model folder; the family comes from config.json's `model_type`.

    Returns a `Decoder` for Qwen2 / Qwen2.5 folders, a `QwenVLModel` for Qwen2.5-VL folders
    (Fast-dVLM, Fast-dDrive) and a `PlannerModel` for blockplan planner folders, in eval mode
    (cast to `dtype` when given). `verify`: check the manifest first (`verify_folder`); a
    caller that verified the folder itself (with the other files it reads) passes False.
    """
    folder = Path(path)
    if verify:
        verify_folder(folder)
    raw = read_config(folder)
    try:
        model = _load_model(folder, raw)
    except (ModelConfigError, TypeError, KeyError, IndexError, AttributeError) as e:
        # config.json's fault: every message names the file (a TypeError & co. are a shape
        # of config.json the checks did not foresee: a one-line error, not a traceback)
        config = folder / CONFIG_NAME
        text = " ".join(str(e).split()) if isinstance(e, UserError) else f"{type(e).__name__}: {e}"
        if str(config) in text:
            raise
        raise ModelConfigError(f"{config}: {text}") from e
    if dtype is not None:
        model = model.to(dtype)
    return model.eval()


def _load_model(folder: Path, raw: dict[str, Any]) -> nn.Module:
    model_type = raw.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ModelConfigError(
            f"{folder / CONFIG_NAME}: model_type={shown(model_type)}: expected one of "
            f"{list(MODEL_TYPES)}"
        )
    if "quantization" in raw:  # model/quantized_folder.py: codes and scales, checked
        from blockplan.model.quantized_folder import load_quantized

        return load_quantized(raw, read_state_dict(folder), str(folder))
    if model_type == "blockplan_planner":
        config = PlannerModelConfig.from_dict(raw)  # checked before the weights are read
        return PlannerModel.from_config_and_state(config, read_state_dict(folder), str(folder))
    if model_type == "qwen2":
        config = DecoderConfig.from_dict(raw)
        return decoder_from_state(config, read_state_dict(folder), str(folder))
    return QwenVLModel.from_config_and_state(raw, read_state_dict(folder), str(folder))


def save_pretrained(model: nn.Module, path: str | Path) -> Path:
    """Write a folder `load_pretrained` reads back: config.json, model.safetensors,
    manifest.json (and tokenizer.json for a `PlannerModel` that carries one)."""
    if isinstance(model, Decoder):
        return save_folder(model.state_dict(), model.config.to_dict(), path)
    save = getattr(model, "save_pretrained", None)
    if save is None:
        raise TypeError(f"save_pretrained: cannot save a {type(model).__name__}")
    return save(path)
