"""Any model folder by its family: `load_pretrained(path)` reads `config.json` and picks the
model from `model_type` (`qwen2` → `Decoder`; `qwen2_5_vl` → `QwenVLModel`;
`blockplan_planner` → `PlannerModel`); `save_pretrained` writes one back. The folder format
itself (safetensors, manifest) is `model/weights.py`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from blockplan.model.config import DecoderConfig, ModelConfigError
from blockplan.model.decoder import Decoder
from blockplan.model.planner_model import PlannerModel
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
    model_type = raw.get("model_type")
    state = read_state_dict(folder)
    if model_type == "qwen2":
        model = decoder_from_state(DecoderConfig.from_dict(raw), state, str(folder))
    elif model_type == "qwen2_5_vl":
        model = QwenVLModel.from_config_and_state(raw, state, str(folder))
    elif model_type == "blockplan_planner":
        model = PlannerModel.from_config_and_state(raw, state, str(folder))
    else:
        raise ModelConfigError(
            f"{folder / CONFIG_NAME}: model_type={model_type!r}: expected one of "
            f"{list(MODEL_TYPES)}"
        )
    if dtype is not None:
        model = model.to(dtype)
    return model.eval()


def save_pretrained(model: nn.Module, path: str | Path) -> Path:
    """Write a folder `load_pretrained` reads back: config.json, model.safetensors,
    manifest.json (and tokenizer.json for a `PlannerModel` that carries one)."""
    if isinstance(model, Decoder):
        return save_folder(model.state_dict(), model.config.to_dict(), path)
    save = getattr(model, "save_pretrained", None)
    if save is None:
        raise TypeError(f"save_pretrained: cannot save a {type(model).__name__}")
    return save(path)
