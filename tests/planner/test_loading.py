"""The node's model loading (manifest required and verified), warm-up and release (no rclpy)."""

import json

import pytest

from blockplan.config import PlannerConfig, config_from_params, config_to_params
from blockplan.planner.loading import (
    ModelLoadError,
    check_model_unchanged,
    load_model,
    load_verified_planner,
    model_fingerprint,
    release_accelerator_memory,
    warm_up,
    warmup_observation,
)
from blockplan.runtime import ConstantVelocityPlanner


def _config(model_dir: str, cameras=("front",)) -> PlannerConfig:
    params = config_to_params(PlannerConfig())
    params["model"]["dir"] = model_dir
    params["cameras"] = {"names": list(cameras)}
    return config_from_params(params)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    import torch

    from blockplan.planner.planner import Planner

    torch.set_num_threads(1)  # the machine is shared; one thread is the fastest here
    config = _config("random-init:test")
    planner = Planner.random_init("test", config)
    folder = tmp_path_factory.mktemp("model") / "tiny"
    planner.model.save_pretrained(folder, tokenizer_json=planner.tokenizer.to_str())
    return folder


def test_warmup_observation_has_every_camera_and_frame():
    config = _config("constant-velocity", ("a", "b", "c"))
    obs = warmup_observation(config)
    T = config.frame_window.num_frames
    assert [f.camera for f in obs.frames] == [c for c in ("a", "b", "c") for _ in range(T)]
    assert len(obs.ego_history) == T
    assert obs.ego_history[-1].stamp_ns == obs.stamp_ns == obs.frames[-1].stamp_ns


def test_baseline_loads_and_warms_up():
    config = _config("constant-velocity")
    planner = load_verified_planner(config)
    assert isinstance(planner, ConstantVelocityPlanner)
    assert warm_up(planner, config) >= 0.0


def test_a_model_folder_with_its_manifest_loads_and_warms_up(model_folder):
    config = _config(str(model_folder))
    planner = load_verified_planner(config)
    assert warm_up(planner, config) > 0.0
    del planner
    release_accelerator_memory()


def test_a_folder_without_a_manifest_is_refused(model_folder, tmp_path):
    copy = tmp_path / "unverified"
    copy.mkdir()
    for f in model_folder.iterdir():
        if f.name != "manifest.json":
            (copy / f.name).write_bytes(f.read_bytes())
    with pytest.raises(ModelLoadError, match="manifest.json"):
        load_verified_planner(_config(str(copy)))


def test_replay_may_load_a_folder_without_a_manifest(model_folder, tmp_path):
    copy = tmp_path / "unverified"
    copy.mkdir()
    for f in model_folder.iterdir():
        if f.name != "manifest.json":
            (copy / f.name).write_bytes(f.read_bytes())
    config = _config(str(copy))
    assert hasattr(load_model(str(copy), config, "--model", require_manifest=False), "plan")
    with pytest.raises(ModelLoadError, match=r"^--model="):
        load_model(str(tmp_path / "nope"), config, "--model", require_manifest=False)


def test_a_corrupt_file_fails_its_checksum(model_folder, tmp_path):
    copy = tmp_path / "corrupt"
    copy.mkdir()
    for f in model_folder.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    config_json = json.loads((copy / "config.json").read_text())
    config_json["tampered"] = True
    (copy / "config.json").write_text(json.dumps(config_json))
    with pytest.raises(ModelLoadError, match="sha256"):
        load_verified_planner(_config(str(copy)))


def test_a_missing_folder_names_the_choices(tmp_path):
    with pytest.raises(ModelLoadError, match="constant-velocity"):
        load_verified_planner(_config(str(tmp_path / "nope")))


def test_a_model_built_for_other_cameras_is_refused(model_folder):
    with pytest.raises(ModelLoadError, match="cameras.names"):
        load_verified_planner(_config(str(model_folder), ("left", "right")))


def test_a_failing_warm_up_is_a_model_load_error():
    class Broken:
        def plan(self, observation):
            raise ValueError("cannot parse the answer")

    with pytest.raises(ModelLoadError, match="cannot parse"):
        warm_up(Broken(), _config("constant-velocity"))


@pytest.mark.parametrize("manifest", [{"sha256": {}}, {"sha256": {"MODEL_CARD.md": "0" * 64}}])
def test_the_node_verifies_the_manifest_not_only_its_presence(model_folder, tmp_path, manifest):
    """An empty or partial manifest is present but verifies nothing: the node refuses it."""
    copy = tmp_path / "partial"
    copy.mkdir()
    for f in model_folder.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelLoadError, match="manifest.json"):
        load_verified_planner(_config(str(copy)))
    planner = load_verified_planner(_config(str(model_folder)))
    assert planner.weights == "sha256-verified"


def test_a_folder_changed_since_configure_is_refused_naming_the_change(model_folder, tmp_path):
    from blockplan.model.weights import write_manifest

    copy = tmp_path / "copy"
    copy.mkdir()
    for f in model_folder.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    pinned = model_fingerprint(str(copy))
    assert pinned is not None and pinned.startswith("manifest.json sha256 ")
    check_model_unchanged(str(copy), pinned)  # unchanged: nothing said
    (copy / "NOTES.md").write_text("re-exported\n")
    write_manifest(copy)  # a consistent new version: it would verify
    with pytest.raises(ModelLoadError, match=r"changed on disk since configure \(manifest"):
        check_model_unchanged(str(copy), pinned)
    (copy / "manifest.json").unlink()
    assert model_fingerprint(str(copy)) == "no manifest.json"
    assert model_fingerprint(str(tmp_path / "nope")) == "no such folder"
    with pytest.raises(ModelLoadError, match="no such folder"):  # it vanished
        check_model_unchanged(str(tmp_path / "nope"), pinned)
    # Nothing on disk to change: baselines and random weights.
    assert model_fingerprint("constant-velocity") is None
    assert model_fingerprint("random-init:test") is None
