"""Model folders: config.json + safetensors (single or sharded) + manifest.json of sha256.

`model/pretrained.py`'s `load_pretrained(path)` is the one entry point (it picks the model
family); this module reads and writes the folder: `manifest.json` is checked when present and
the weights are loaded with safetensors (never pickle). A folder without a manifest (a
checkpoint as published on the Hugging Face hub) loads *unverified*: a warning says so
(docs/CHECKPOINTS.md), and the planner records `weights: "unverified"` where its runs are
reported.

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
import os
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
# What a loaded folder's weights are, as runs report it (metrics.json, report, /diagnostics).
VERIFIED, UNVERIFIED = "sha256-verified", "unverified"

log = logging.getLogger("blockplan.model")


class WeightsError(UserError, ValueError):
    """A model folder's weights are missing, mismatched or fail their manifest check."""


# The most bytes a folder's JSON file may have, checked before it is read: the shipped
# config.json and manifest.json are a few kB, a large tokenizer.json (Qwen's) ~7 MB.
MAX_JSON_BYTES = {CONFIG_NAME: 1 << 20, MANIFEST_NAME: 1 << 20}
MAX_OTHER_JSON_BYTES = 64 << 20


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} is given twice")
        out[key] = value
    return out


def read_json_file(
    path: Path,
    error: type[UserError] = WeightsError,
    template: str = "{path}: cannot read it ({reason})",
) -> tuple[Any, str]:
    """A folder's JSON file, strictly: at most `MAX_JSON_BYTES` (checked before reading),
    UTF-8 without a byte-order mark, one JSON document whose objects repeat no key, nested
    as deep as Python's parser can go. Returns the document and its text; anything else is
    an `error` (one line: `template` with the file and the reason)."""

    def fail(reason: str) -> UserError:
        return error(template.format(path=path, reason=reason))

    try:
        size = path.stat().st_size
        limit = MAX_JSON_BYTES.get(path.name, MAX_OTHER_JSON_BYTES)
        if size > limit:
            raise fail(f"{size} bytes; at most {limit} are read")
        data = path.read_bytes()
    except OSError as e:
        raise fail(str(e.strerror or e)) from e
    if data.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")):
        raise fail("it starts with a byte-order mark; write it as UTF-8 without one")
    try:
        text = data.decode("utf-8")
        return json.loads(text, object_pairs_hook=_unique_keys), text
    except UnicodeDecodeError as e:
        raise fail(f"not UTF-8 at byte {e.start}; write it as UTF-8") from e
    except json.JSONDecodeError as e:
        raise fail(f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    except ValueError as e:  # a repeated key
        raise fail(str(e)) from e
    except RecursionError as e:
        raise fail("nested too deep") from e


def is_plain_name(name: str) -> bool:
    """A file directly in the folder: no separator, not `.`/`..`, not empty."""
    return name not in ("", ".", "..") and "/" not in name and "\\" not in name


# The one subfolder a model folder's manifest may cover: the ONNX graphs of a quantized
# folder (`onnx/decoder_step.onnx`); any other path with a separator is refused.
MANIFEST_SUBFOLDERS = ("onnx",)


def is_listed_name(name: str) -> bool:
    """A name a manifest may list: a plain file name, or one in MANIFEST_SUBFOLDERS."""
    sub, sep, rest = name.partition("/")
    if sep:
        return sub in MANIFEST_SUBFOLDERS and is_plain_name(rest)
    return is_plain_name(name)


def check_inside(folder: Path, name: str, where: Path) -> None:
    """`folder/name` is a regular file of the folder itself, not a symlink (a file the
    manifest vouches for must stay in the folder it verified)."""
    file = folder / name
    if file.is_symlink():
        raise WeightsError(
            f"{where}: {name!r} is a symlink (to {os.readlink(file)!r}); a verified folder "
            "holds its files, copy them in"
        )


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
    if not path.is_file() and not path.is_symlink():
        return None
    shape = 'expected {"sha256": {"file name": "64 hex digits", ...}}'
    check_inside(Path(folder), MANIFEST_NAME, path)
    doc, _ = read_json_file(path)
    if not isinstance(doc, dict):
        raise WeightsError(
            f"{path}: no file digests (a JSON {type(doc).__name__}, not an object); {shape}"
        )
    extra = sorted(set(doc) - {"sha256"})
    if extra:
        raise WeightsError(f"{path}: unknown key {extra[0]!r}; {shape}")
    listed = doc.get("sha256")
    if not isinstance(listed, dict) or not listed:
        raise WeightsError(f"{path}: 'sha256' holds no file digests; {shape}")
    for name, digest in listed.items():
        if not is_listed_name(name):
            raise WeightsError(f"{path}: {name!r}: names no file of the folder itself")
        if not (isinstance(digest, str) and len(digest) == 64 and _is_hex(digest)):
            raise WeightsError(
                f"{path}: {name!r}: {str(digest)[:70]!r} is not a sha256 digest; {shape}"
            )
    return listed


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
        check_inside(folder, name, path)
        if not file.is_file():
            raise WeightsError(f"{path}: lists {name!r}, which is missing")
        actual = sha256_file(file)
        if actual != expected:
            raise WeightsError(
                f"{file}: sha256 {actual} does not match the manifest {path}: {expected}"
            )
    return True


def read_config(folder: str | Path) -> dict[str, Any]:
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelConfigError(f"{folder}: no such model folder")
    path = folder / CONFIG_NAME
    raw, _ = read_json_file(path, ModelConfigError, "cannot read {path}: {reason}")
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
