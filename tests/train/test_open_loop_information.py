"""scripts/open_loop_information.py: the inputs each MLP variant reads, and its table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from blockplan.sim.scenarios import SCENARIOS, expert_target_speed
from blockplan.train.examples import load_shards

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "open_loop_information.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("open_loop_information", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_variant_reads_what_it_says(script, dataset_dir, recipe) -> None:
    data = load_shards(dataset_dir, "train", recipe, with_images=False)
    n, rows = len(data), recipe.schema.num_history
    num_commands = len(recipe.schema.route_commands)
    common = num_commands + 3  # route command one-hot, lane pose and its known flag
    history = script.features(data, "history", num_commands)
    now = script.features(data, "now", num_commands)
    assert history.shape == (n, rows * 6 + common) and now.shape == (n, 2 + common)
    speed = data.ego_history[:, -1, 2].astype(np.float64)
    np.testing.assert_allclose(now[:, 0], speed)  # the current velocity, no past motion
    set_speed = script.features(data, "now+set_speed", num_commands)[:, -2:]
    _, seeds = script.episode_parts(data)
    target = [expert_target_speed(SCENARIOS["highway"], s) for s in seeds]
    np.testing.assert_allclose(set_speed[:, 0], target)
    np.testing.assert_allclose(set_speed[:, 1], set_speed[:, 0] - speed)
    lead = script.features(data, "now+lead", num_commands)[:, -3:]
    none = ~np.isfinite(data.lead[:, 0])  # the fixture's first sample per episode
    assert none.any() and (~none).any()
    np.testing.assert_array_equal(lead[none], [[script.NO_LEAD_GAP_M, 0.0, 1.0]] * none.sum())
    np.testing.assert_allclose(lead[~none, 0], data.lead[~none, 0])
    np.testing.assert_allclose(lead[~none, 1], data.lead[~none, 1] - speed[~none])
    with pytest.raises(ValueError, match="unknown input"):
        script.features(data, "now+radar", num_commands)


def test_the_table_has_a_row_per_variant(script, dataset_dir, recipe) -> None:
    train = load_shards(dataset_dir, "train", recipe, with_images=False)
    test = load_shards(dataset_dir, "test", recipe, with_images=False)
    lines: list[str] = []
    variants = ["history", "now+lead"]
    num_commands = len(recipe.schema.route_commands)
    table = script.information_table(train, test, num_commands, variants, 5, lines.append)
    assert list(table) == variants and len(lines) == 3
    for row in table.values():
        assert row["ade_5s"] >= 0 and set(row["by_scenario"]) == {"highway"}
