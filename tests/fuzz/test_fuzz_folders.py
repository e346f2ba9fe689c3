"""Fuzzed model folders: every malformed variant of the shipped driving and robot folders
(tests/fuzz/generator.py) is refused by the loading path the node and the CLI use
(`load_model` with the manifest required) with a one-line `UserError` that names the file
and the key, within 1 s of CPU time, without allocating what the variant's sizes ask for."""

from __future__ import annotations

import resource
import time
import tracemalloc
from pathlib import Path

import pytest

from blockplan.config import load_config, package_root
from blockplan.errors import UserError
from blockplan.planner.loading import load_model
from tests.fuzz import generator

REPO_ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {
    "vehicle": (REPO_ROOT / "models" / "blockplan-tiny", "planner.yaml"),
    "robot": (REPO_ROOT / "models" / "blockplan-robot-tiny", "robot.yaml"),
}
# The bound a refusal keeps, in CPU seconds of this process (the wall clock of a shared
# machine also counts other processes' time); `MAX_WALL_SECONDS` only guards against a hang.
MAX_CPU_SECONDS = 1.0
MAX_WALL_SECONDS = 10.0
MAX_PYTHON_PEAK = 32 << 20  # bytes of Python heap a refusal may take (tracemalloc)
MAX_RSS_GROWTH = 256 << 20  # growth of the process's peak RSS (torch tensors included)
CASES = [
    (e, v)
    for e, (folder, _) in FOLDERS.items()
    for v in generator.folder_variants(folder, e == "robot")
]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """Per embodiment: a copy of the shipped folder and its params, the process warmed up
    by one good load of the copy (imports: a refusal's time is its own)."""
    out = {}
    for embodiment, (folder, params) in FOLDERS.items():
        copy = generator.copy_folder(folder, tmp_path_factory.mktemp(embodiment) / "pristine")
        config = load_config(package_root() / "params" / params, overrides=("model.num_threads=1",))
        assert load_model(str(copy), config).weights == "sha256-verified"
        out[embodiment] = (copy, config)
    return out


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def test_there_are_enough_variants_of_every_file():
    kinds: dict[tuple[str, str], int] = {}
    for embodiment, v in CASES:
        kinds[embodiment, v.file] = kinds.get((embodiment, v.file), 0) + 1
    for embodiment in FOLDERS:
        assert sum(n for (e, _), n in kinds.items() if e == embodiment) >= 100, kinds
        for name in ("config.json", "tokenizer.json", "manifest.json"):
            assert kinds[embodiment, name] >= 20, kinds


@pytest.mark.parametrize(("embodiment", "variant"), CASES, ids=[f"{e}-{v.id}" for e, v in CASES])
def test_a_malformed_folder_is_refused_in_one_line_naming_file_and_key(
    embodiment, variant, pristine, tmp_path
):
    copy, config = pristine[embodiment]
    folder = generator.build(copy, variant, tmp_path / "model")
    rss_before = peak_rss_bytes()
    tracemalloc.start()
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        with pytest.raises(UserError) as info:
            load_model(str(folder), config)
    finally:
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        _, python_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    message = str(info.value)
    assert "\n" not in message, message
    assert variant.file in message, message
    if variant.key is not None:
        assert variant.key in message, message
    assert cpu < MAX_CPU_SECONDS, (cpu, message)
    assert wall < MAX_WALL_SECONDS, (wall, message)
    assert python_peak < MAX_PYTHON_PEAK, python_peak
    assert peak_rss_bytes() - rss_before < MAX_RSS_GROWTH
