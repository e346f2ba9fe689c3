"""manifest.json is all or nothing: it lists every file the loader reads and matches each, or
loading is a WeightsError naming the file; a folder without one loads `unverified`, and says
so. Model folders are saved here and damaged in the test."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from blockplan.config import PlannerConfig
from blockplan.model.weights import (
    UNVERIFIED,
    VERIFIED,
    WeightsError,
    verify_folder,
    write_manifest,
)
from blockplan.planner.planner import Planner

CONFIG = PlannerConfig()


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    planner = Planner.random_init("test", CONFIG)
    folder = tmp_path_factory.mktemp("model") / "m"
    planner.model.save_pretrained(folder, tokenizer_json=planner.tokenizer.to_str())
    return folder


def _copy(saved: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "copy"
    shutil.copytree(saved, folder)
    return folder


def _flip_a_weight_byte(folder: Path) -> None:
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[len(data) - 100] ^= 0x01  # in the tensor data: safetensors still parses it
    path.write_bytes(bytes(data))


def _edit_manifest(folder: Path, edit) -> None:
    path = folder / "manifest.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(edit(doc)))


def test_a_complete_manifest_verifies(saved: Path) -> None:
    assert verify_folder(saved, also=("tokenizer.json",)) == VERIFIED
    assert Planner.from_folder(saved, CONFIG).weights == VERIFIED


@pytest.mark.parametrize(
    "edit,match",
    [
        (lambda doc: {"sha256": {}}, "no file digests"),
        (lambda doc: {"sha256": []}, "no file digests"),  # was an AttributeError
        (lambda doc: [], "no file digests"),
        (lambda doc: {"sha256": {"model.safetensors": "x" * 64}}, "not a sha256 digest"),
        (
            lambda doc: {
                "sha256": {k: v for k, v in doc["sha256"].items() if k != "model.safetensors"}
            },
            "does not list 'model.safetensors'",
        ),
        (
            lambda doc: {
                "sha256": {k: v for k, v in doc["sha256"].items() if k != "tokenizer.json"}
            },
            "does not list 'tokenizer.json'",
        ),
        (
            lambda doc: {"sha256": {k: v for k, v in doc["sha256"].items() if k != "config.json"}},
            "does not list 'config.json'",
        ),
    ],
    ids=["empty", "list", "not_a_mapping", "bad_digest", "no_weights", "no_tokenizer", "no_config"],
)
def test_an_empty_partial_or_malformed_manifest_is_an_error(saved, tmp_path, edit, match) -> None:
    folder = _copy(saved, tmp_path)
    _flip_a_weight_byte(folder)  # these manifests must not let a damaged folder through
    _edit_manifest(folder, edit)
    with pytest.raises(WeightsError, match=match) as info:
        Planner.from_folder(folder, CONFIG)
    assert "manifest.json" in str(info.value)


def test_a_manifest_that_is_not_json_names_it(saved, tmp_path) -> None:
    folder = _copy(saved, tmp_path)
    (folder / "manifest.json").write_text("{not json")
    with pytest.raises(WeightsError, match=r"manifest\.json: cannot read it"):
        Planner.from_folder(folder, CONFIG)


def test_a_flipped_byte_fails_a_complete_manifest(saved, tmp_path) -> None:
    folder = _copy(saved, tmp_path)
    _flip_a_weight_byte(folder)
    with pytest.raises(WeightsError, match=r"model\.safetensors: sha256 .* does not match"):
        Planner.from_folder(folder, CONFIG)


def test_without_a_manifest_the_weights_are_unverified(saved, tmp_path, caplog) -> None:
    folder = _copy(saved, tmp_path)
    (folder / "manifest.json").unlink()
    planner = Planner.from_folder(folder, CONFIG)
    assert planner.weights == UNVERIFIED and "unverified" in caplog.text
    assert Planner.random_init("test", CONFIG).weights == "random-init"


def test_every_shard_must_be_listed(saved, tmp_path) -> None:
    from safetensors.torch import load_file, save_file

    folder = _copy(saved, tmp_path)
    state = load_file(folder / "model.safetensors")
    names = sorted(state)
    half = len(names) // 2
    shards = {"model-1.safetensors": names[:half], "model-2.safetensors": names[half:]}
    for shard, keys in shards.items():
        save_file({k: state[k] for k in keys}, folder / shard, metadata={"format": "pt"})
    index = {"weight_map": {k: shard for shard, keys in shards.items() for k in keys}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "model.safetensors").unlink()
    write_manifest(folder)
    assert Planner.from_folder(folder, CONFIG).weights == VERIFIED
    _edit_manifest(
        folder,
        lambda doc: {
            "sha256": {k: v for k, v in doc["sha256"].items() if k != "model-2.safetensors"}
        },
    )
    with pytest.raises(WeightsError, match="does not list 'model-2.safetensors'"):
        Planner.from_folder(folder, CONFIG)
