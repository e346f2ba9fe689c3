"""Model folders: config.json + safetensors (single or sharded) + manifest.json of sha256.

`load_pretrained(path)` is the one entry point: it reads `config.json`, picks the model
family from `model_type` (`qwen2` → `Decoder`; `qwen2_5_vl` → `QwenVLModel`;
`blockplan_planner` → `PlannerModel`), checks `manifest.json` when present, and loads the
weights with safetensors (never pickle). A folder without a manifest (a checkpoint as
published on the Hugging Face hub) loads *unverified*: a warning says so (docs/CHECKPOINTS.md),
and the planner records `weights: "unverified"` where its runs are reported.

A manifest is all or nothing: it must be `{"sha256": {file: hex digest}}`, list every file the
loader reads (config.json, model.safetensors or the index and every shard it names, and
whatever else the caller reads: tokenizer.json, blockplan.json) and match each of them. An
empty, partial or malformed manifest is a `WeightsError` naming the file at fault, never a
pass.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from blockplan.errors import UserError
from blockplan.model.config import DecoderConfig, ModelConfigError

WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
MANIFEST_NAME = "manifest.json"
CONFIG_NAME = "config.json"
MODEL_TYPES = ("qwen2", "qwen2_5_vl", "blockplan_planner")
# What a loaded folder's weights are, as runs report it (metrics.json, report, /diagnostics).
VERIFIED, UNVERIFIED = "sha256-verified", "unverified"

log = logging.getLogger("blockplan.model")


class WeightsError(UserError, ValueError):
    """A model folder's weights are missing, mismatched or fail their manifest check."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder: str | Path, subdirs: Iterable[str] = ()) -> dict[str, str]:
    """Record the sha256 of every file in `folder` (except the manifest) in manifest.json;
    with `subdirs` (e.g. "onnx"), also every file in those folders, as "onnx/NAME"."""
    folder = Path(folder)
    files = {
        p.name: sha256_file(p)
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name != MANIFEST_NAME
    }
    for sub in subdirs:
        for p in sorted((folder / sub).iterdir()):
            if p.is_file():
                files[f"{sub}/{p.name}"] = sha256_file(p)
    (folder / MANIFEST_NAME).write_text(json.dumps({"sha256": files}, indent=2) + "\n")
    return files


def read_manifest(folder: str | Path) -> dict[str, str] | None:
    """The `{file: sha256}` of `folder`'s manifest.json, checked for shape; None without one."""
    path = Path(folder) / MANIFEST_NAME
    if not path.is_file():
        return None
    shape = 'expected {"sha256": {"file name": "64 hex digits", ...}}'
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WeightsError(f"{path}: cannot read it ({e}); {shape}") from e
    listed = doc.get("sha256") if isinstance(doc, dict) else None
    if not isinstance(listed, dict) or not listed:
        raise WeightsError(f"{path}: no file digests; {shape}")
    for name, digest in listed.items():
        if not (isinstance(digest, str) and len(digest) == 64 and _is_hex(digest)):
            raise WeightsError(f"{path}: {name!r}: {digest!r} is not a sha256 digest; {shape}")
        if not _inside(name):
            raise WeightsError(f"{path}: {name!r}: names a file outside the folder")
    return listed


def _inside(name: str) -> bool:
    """Whether a manifest entry names a file in the folder: a file name, or one level of
    subfolder ("onnx/decoder_dynamic.onnx"), never an absolute path or ".."."""
    parts = name.split("/")
    return len(parts) <= 2 and all(p and p not in (".", "..") and Path(p).name == p for p in parts)


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def weight_files(folder: str | Path) -> list[str]:
    """The files `read_state_dict` reads: model.safetensors, or the index and its shards."""
    folder = Path(folder)
    if (folder / WEIGHTS_NAME).is_file():
        return [WEIGHTS_NAME]
    index = folder / INDEX_NAME
    if not index.is_file():
        raise WeightsError(f"{folder}: neither {WEIGHTS_NAME} nor {INDEX_NAME}")
    return [INDEX_NAME, *_shards(index)]


def _shards(index: Path) -> list[str]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        return sorted(set(weight_map.values()))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise WeightsError(f"{index}: no 'weight_map' of tensor -> shard file: {e!r}") from e


def verify_manifest(folder: str | Path, required: Iterable[str] | None = None) -> bool:
    """Check manifest.json against the folder; False when there is no manifest.

    `required`: the files the caller reads (default: config.json and the weights); each must
    be listed. Every listed file must exist and match its digest. Raises WeightsError naming
    the file otherwise."""
    folder = Path(folder)
    path = folder / MANIFEST_NAME
    listed = read_manifest(folder)
    if listed is None:
        return False
    if required is None:
        required = [CONFIG_NAME, *weight_files(folder)]
    for name in required:
        if name not in listed:
            raise WeightsError(
                f"{path}: does not list {name!r}, which the loader reads (a manifest must "
                "cover every file loaded; regenerate it with blockplan.model.write_manifest "
                "from a trusted copy)"
            )
    for name, expected in listed.items():
        file = folder / name
        if not file.is_file():
            raise WeightsError(f"{path}: lists {name!r}, which is missing")
        actual = sha256_file(file)
        if actual != expected:
            raise WeightsError(f"{file}: sha256 {actual} does not match the manifest {expected}")
    return True


def read_config(folder: str | Path) -> dict[str, Any]:
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelConfigError(f"{folder}: no such model folder")
    path = folder / CONFIG_NAME
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelConfigError(f"cannot read {path}: {e}") from e
    if not isinstance(raw, dict):
        raise ModelConfigError(f"{path}: expected a JSON object, not {type(raw).__name__}")
    return raw


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of one safetensors file; a missing, truncated or corrupt file is a
    WeightsError naming it (safetensors' own error is no ValueError)."""
    from safetensors import SafetensorError

    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError) as e:
        raise WeightsError(f"{path}: cannot load the weights: {e}") from e


def read_state_dict(folder: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of `model.safetensors`, or of the shards its index lists."""
    folder = Path(folder)
    if (folder / WEIGHTS_NAME).is_file():
        return _load_safetensors(folder / WEIGHTS_NAME)
    index = folder / INDEX_NAME
    if not index.is_file():
        raise WeightsError(f"{folder}: neither {WEIGHTS_NAME} nor {INDEX_NAME}")
    shards = _shards(index)
    weight_map = json.loads(index.read_text())["weight_map"]
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        state.update(_load_safetensors(folder / shard))
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


def verify_folder(folder: str | Path, also: Iterable[str] = ()) -> str:
    """Verify a model folder before loading it: "sha256-verified" when its manifest covers
    config.json, the weights and the `also` files that exist (and all match), "unverified"
    (with a warning) when it has no manifest; raises WeightsError otherwise."""
    folder = Path(folder)
    required = [CONFIG_NAME, *weight_files(folder)]
    required += [name for name in also if (folder / name).is_file()]
    if verify_manifest(folder, required):
        return VERIFIED
    log.warning("%s: no %s; weights loaded unverified", folder, MANIFEST_NAME)
    return UNVERIFIED


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
    if "quantization" in raw:  # model/quantized_folder.py: codes and scales, checked
        from blockplan.model.quantized_folder import load_quantized

        model = load_quantized(raw, state, str(folder))
    elif model_type == "qwen2":
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
