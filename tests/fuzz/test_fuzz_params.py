"""Fuzzed params files: every malformed variant of the shipped params YAML files
(tests/fuzz/generator.py) is refused by `load_config` (what `blockplan config`, replay and
the launch files read) with a one-line `ConfigError` naming the file and the key, within 1 s."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

from blockplan.cli import main
from blockplan.config import ConfigError, load_config
from tests.fuzz import generator

REPO_ROOT = Path(__file__).resolve().parents[2]
# The planner node's params files (params/rig.yaml is the simulator's camera rig, not one)
PARAMS = [REPO_ROOT / "params" / "planner.yaml", REPO_ROOT / "params" / "robot.yaml"]
CASES = [(p, v) for p in PARAMS for v in generator.params_variants(p)]
MAX_SECONDS = 1.0
MAX_PYTHON_PEAK = 32 << 20


def test_there_are_enough_variants():
    assert len(CASES) >= 100, len(CASES)


@pytest.mark.parametrize(("pristine", "variant"), CASES, ids=[f"{p.stem}-{v.id}" for p, v in CASES])
def test_a_malformed_params_file_is_refused_in_one_line_naming_file_and_key(
    pristine, variant, tmp_path
):
    variant.make(tmp_path)
    path = tmp_path / pristine.name
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ConfigError) as info:
            load_config(path)
    finally:
        elapsed = time.perf_counter() - start
        _, python_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    message = str(info.value)
    assert "\n" not in message, message
    assert str(path) in message, message
    if variant.key is not None:
        assert variant.key in message, message
    assert elapsed < MAX_SECONDS, (elapsed, message)
    assert python_peak < MAX_PYTHON_PEAK, python_peak


def test_the_config_command_prints_the_refusal_as_one_line(tmp_path, capsys):
    variant = next(
        v for v in generator.params_variants(PARAMS[0]) if v.id.startswith("params:control.rate_hz")
    )
    variant.make(tmp_path)
    assert main(["config", "--params", str(tmp_path / PARAMS[0].name)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "rate_hz" in err
