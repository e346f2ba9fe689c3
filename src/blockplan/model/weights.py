"""Model folders: config.json + safetensors (single or sharded) + manifest.json of sha256.

`load_pretrained(path)` is the one entry point: it reads `config.json`, picks the model
family from `model_type` (`qwen2` → `Decoder`; `qwen2_5_vl` → `QwenVLModel`;
`blockplan_planner` → `PlannerModel`), checks `manifest.json` when present, and loads the
weights with safetensors (never pickle). A folder without a manifest (a checkpoint as
published on the Hugging Face hub) loads *unverified*: a warning says so (docs/CHECKPOINTS.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from blockplan.model.config import DecoderConfig, ModelConfigError

WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
MANIFEST_NAME = "manifest.json"
CONFIG_NAME = "config.json"
MODEL_TYPES = ("qwen2", "qwen2_5_vl", "blockplan_planner")

log = logging.getLogger("blockplan.model")


class WeightsError(ValueError):
    """A model folder's weights are missing, mismatched or fail their manifest check."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder: str | Path) -> dict[str, str]:
    """Record the sha256 of every file in `folder` (except the manifest) in manifest.json."""
    folder = Path(folder)
    files = {
        p.name: sha256_file(p)
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name != MANIFEST_NAME
    }
    (folder / MANIFEST_NAME).write_text(json.dumps({"sha256": files}, indent=2) + "\n")
    return files


def verify_manifest(folder: str | Path) -> bool:
    """Check every file listed in manifest.json; False when there is no manifest."""
    folder = Path(folder)
    path = folder / MANIFEST_NAME
    if not path.is_file():
        return False
    try:
        listed = json.loads(path.read_text())["sha256"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise WeightsError(f"{path}: expected {{'sha256': {{file: digest}}}}: {e}") from e
    for name, expected in listed.items():
        file = folder / name
        if not file.is_file():
            raise WeightsError(f"{path}: lists {name!r}, which is missing")
        actual = sha256_file(file)
        if actual != expected:
            raise WeightsError(f"{file}: sha256 {actual} does not match the manifest {expected}")
    return True


def read_config(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / CONFIG_NAME
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ModelConfigError(f"cannot read {path}: {e}") from e


def read_state_dict(folder: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of `model.safetensors`, or of the shards its index lists."""
    folder = Path(folder)
    if (folder / WEIGHTS_NAME).is_file():
        return load_file(folder / WEIGHTS_NAME)
    index = folder / INDEX_NAME
    if not index.is_file():
        raise WeightsError(f"{folder}: neither {WEIGHTS_NAME} nor {INDEX_NAME}")
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError) as e:
        raise WeightsError(f"{index}: no 'weight_map': {e}") from e
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        state.update(load_file(folder / shard))
    missing = sorted(set(weight_map) - set(state))
    if missing:
        raise WeightsError(f"{index}: tensor {missing[0]!r} is in no shard")
    return state


def load_state(module: nn.Module, state: dict[str, torch.Tensor], where: str) -> None:
    """Copy `state` into `module`, strictly: names and shapes must match exactly."""
    own = module.state_dict()
    for name, tensor in state.items():
        if name in own and own[name].shape != tensor.shape:
            raise WeightsError(
                f"{where}: {name} has shape {tuple(tensor.shape)}, the config wants "
                f"{tuple(own[name].shape)}"
            )
    result = module.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise WeightsError(
            f"{where}: missing tensors {result.missing_keys[:3]}, "
            f"unexpected tensors {result.unexpected_keys[:3]}"
        )


def unique_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` without tied duplicates (safetensors refuses shared storage); the first name
    of a shared tensor wins (HF order: `model.embed_tokens.weight` before `lm_head.weight`)."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in state.items():
        key = tensor.data_ptr()
        if key in seen:
            continue
        seen.add(key)
        out[name] = tensor.detach().contiguous()
    return out


def save_folder(
    tensors: dict[str, torch.Tensor],
    config: dict[str, Any],
    folder: str | Path,
    extra: dict[str, str] | None = None,
) -> Path:
    """Write config.json, model.safetensors, the `extra` text files and manifest.json."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")
    save_file(unique_tensors(tensors), folder / WEIGHTS_NAME, metadata={"format": "pt"})
    for name, text in (extra or {}).items():
        (folder / name).write_text(text)
    write_manifest(folder)
    return folder


def decoder_from_state(
    config: DecoderConfig, state: dict[str, torch.Tensor], where: str
) -> nn.Module:
    from blockplan.model.decoder import Decoder

    state = dict(state)
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    decoder = Decoder(config)
    if config.tie_word_embeddings:
        state["lm_head.weight"] = state.get("model.embed_tokens.weight")
        if state["lm_head.weight"] is None:
            raise WeightsError(f"{where}: missing tensor 'model.embed_tokens.weight'")
    load_state(decoder, state, where)
    return decoder


def load_pretrained(
    path: str | Path, dtype: torch.dtype | None = None, verify: bool = True
) -> nn.Module:
    """Load a model folder; the family comes from config.json's `model_type`.

    Returns a `Decoder` for Qwen2 / Qwen2.5 folders, a `QwenVLModel` for Qwen2.5-VL folders
    (Fast-dVLM, Fast-dDrive) and a `PlannerModel` for blockplan planner folders, in eval mode (cast to `dtype` when given).
    """
    folder = Path(path)
    if verify and not verify_manifest(folder):
        log.warning("%s: no %s; weights loaded unverified", folder, MANIFEST_NAME)
    raw = read_config(folder)
    model_type = raw.get("model_type")
    state = read_state_dict(folder)
    if model_type == "qwen2":
        model = decoder_from_state(DecoderConfig.from_dict(raw), state, str(folder))
    elif model_type == "qwen2_5_vl":
        from blockplan.model.qwen2_5_vl.model import QwenVLModel

        model = QwenVLModel.from_config_and_state(raw, state, str(folder))
    elif model_type == "blockplan_planner":
        from blockplan.model.planner_model import PlannerModel

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
    from blockplan.model.decoder import Decoder

    if isinstance(model, Decoder):
        return save_folder(model.state_dict(), model.config.to_dict(), path)
    save = getattr(model, "save_pretrained", None)
    if save is None:
        raise TypeError(f"save_pretrained: cannot save a {type(model).__name__}")
    return save(path)
