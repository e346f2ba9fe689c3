"""On-policy (DAgger) samples: a planner drives, the expert labels the states it reached."""

import json

import numpy as np
import pytest

from tests.optional import importorskip

importorskip("highway_env")

from blockplan.cli import main
from blockplan.closedloop import EpisodeSpec
from blockplan.closedloop.dagger import policy, run_dagger_episode
from blockplan.sim.dataset import MANIFEST, iter_split, load_shard
from blockplan.sim.episode import EGO_SPEED, EGO_X, EGO_Y
from blockplan.sim.labels import HORIZON_S
from blockplan.sim.rig import load_rig
from blockplan.sim.scenarios import get_scenario


@pytest.fixture(scope="module")
def rig():
    return load_rig()


@pytest.fixture(scope="module")
def cv():
    return policy("constant-velocity")


def _episode(cv, rig, scenario, seed, duration_s, every_s):
    planner, config = cv
    spec = EpisodeSpec(get_scenario(scenario), seed, duration_s)
    return run_dagger_episode(spec, planner, config, rig, every_s)


def test_branching_leaves_the_planners_drive_untouched(cv, rig) -> None:
    """The expert's takeovers run in copies: the drive (and its traffic) is the same
    whether the world was copied every 0.5 s or only twice."""
    dense = _episode(cv, rig, "highway", 913, 9.0, 0.5)
    sparse = _episode(cv, rig, "highway", 913, 9.0, 3.0)
    assert len(dense.branches) > len(sparse.branches) >= 2
    by_t0 = dict(zip(dense.branch_t0, dense.branches, strict=True))
    for t0, log in zip(sparse.branch_t0, sparse.branches, strict=True):
        twin = by_t0[t0]
        i0 = log.index_at(t0) + 1
        np.testing.assert_array_equal(log.ego[:i0], twin.ego[:i0])
        np.testing.assert_array_equal(log.boxes[:i0], twin.boxes[:i0, : log.boxes.shape[1]])
        # ... and the expert's continuation from the same state is the same too.
        np.testing.assert_array_equal(log.ego[i0:], twin.ego[i0:])


def test_every_branch_is_the_past_then_5_s_of_expert_from_the_same_state(cv, rig) -> None:
    episode = _episode(cv, rig, "highway", 914, 8.0, 1.0)
    assert episode.branches and episode.planner_end["reason"] == "end"
    for log, t0 in zip(episode.branches, episode.branch_t0, strict=True):
        assert log.duration == pytest.approx(t0 + HORIZON_S)
        i0 = log.index_at(t0)
        step = np.hypot(*(log.ego[i0 + 1, [EGO_X, EGO_Y]] - log.ego[i0, [EGO_X, EGO_Y]]))
        assert step <= 1.5 * log.ego[i0, EGO_SPEED] * log.dt + 1e-6  # no jump at the takeover
    # Later branches share the earlier ones' past.
    first, last = episode.branches[0], episode.branches[-1]
    i0 = first.index_at(episode.branch_t0[0]) + 1
    np.testing.assert_array_equal(first.ego[:i0], last.ego[:i0])


def test_the_expert_steers_back_from_where_the_planner_drifted(cv, rig) -> None:
    """Constant velocity leaves its lane in a curve; the expert, handed the car, returns to
    the lane centre: the recovery the expert-only data set never shows."""
    episode = _episode(cv, rig, "roundabout", 914, 12.0, 0.5)
    assert episode.planner_end["reason"] in ("lane_departure", "collision")
    offsets = [
        (abs(log.lane_pose[log.index_at(t0), 0]), abs(log.lane_pose[-1, 0]))
        for log, t0 in zip(episode.branches, episode.branch_t0, strict=True)
    ]
    drifted = [(start, end) for start, end in offsets if start > 0.6]
    assert drifted, offsets
    assert all(end < 0.5 for _, end in drifted), drifted


def test_dataset_policy_model_writes_training_samples_and_resumes(tmp_path) -> None:
    out = tmp_path / "onpolicy"
    argv = [
        "dataset",
        "--scenario",
        "merge",
        "--episodes",
        "1",
        "--duration",
        "8",
        "--seed-base",
        "914",
        "--policy-model",
        "constant-velocity",
        "--branch-every",
        "1",
        "--val-fraction",
        "0",
        "--test-fraction",
        "0",
        "--no-export",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["options"]["policy_model"] == "constant-velocity"
    (entry,) = manifest["episodes"]
    assert entry["planner_end"]["reason"] == "lane_departure"
    shard = load_shard(out / entry["shard"])
    assert entry["num_samples"] == shard["stamp_ns"].shape[0] == entry["branches"] >= 1
    samples = list(iter_split(out, "train"))
    assert len(samples) == entry["num_samples"]
    obs, answer = samples[-1]
    assert obs.ego_history[-1].stamp_ns == obs.stamp_ns and answer.waypoints.shape == (5, 2)
    # Resuming with another policy is refused; the same command is a no-op.
    other = [a if a != "constant-velocity" else "random-init" for a in argv]
    assert main(other) == 2
    assert main(argv) == 0


def test_a_missing_policy_model_is_a_clear_error(tmp_path, capsys) -> None:
    argv = [
        "dataset",
        "--scenario",
        "merge",
        "--episodes",
        "1",
        "--duration",
        "8",
        "--policy-model",
        str(tmp_path / "nope"),
        "--no-export",
        "--out",
        str(tmp_path / "d"),
    ]
    assert main(argv) == 2
    assert "nope" in capsys.readouterr().err
    argv[argv.index(str(tmp_path / "nope"))] = "constant-velocity"
    argv.remove("--no-export")
    assert main(argv) == 2
    assert "--no-export" in capsys.readouterr().err


def test_a_branch_sample_is_what_the_runtime_showed_the_planner(rig) -> None:
    """Train/serve parity for on-policy samples: the prompt (token ids, the encoder's history
    rows), the lane pose, the car ahead (the data set rounds it to 0.01), the lanes beside
    and the camera frames of a branch's sample are those of the Observation the runtime
    built at that tick of the drive."""
    from blockplan.closedloop.dagger import branch_arrays
    from blockplan.closedloop.world import STAMP_OFFSET_S
    from blockplan.config import default_params_path, load_config
    from blockplan.replay.observations import RecordingPlanner
    from blockplan.schema import ego_history_array, render_prompt
    from blockplan.sim.dataset import DatasetOptions, sample_observation
    from blockplan.sim.labels import explanation_budget_fits
    from blockplan.train.examples import ExampleEncoder
    from blockplan.train.recipe import Recipe

    recipe = Recipe.build("reference", tuple(rig.names), 2, ego_tokens=4, ego_lane_pose=True)
    planner = RecordingPlanner(
        recipe.schema, reads_lane_pose=True, reads_lead=True, reads_beside=True
    )
    config = load_config(default_params_path())
    spec = EpisodeSpec(get_scenario("roundabout"), 914, 8.0)
    episode = run_dagger_episode(spec, planner, config, rig, 0.5, first_branch_s=0.5)
    mc, encoder = recipe.model_config, ExampleEncoder(recipe)
    compared = 0
    branches = zip(episode.branches, episode.branch_t0, episode.branch_command, strict=True)
    for log, t0, command in branches:
        stamp = round((STAMP_OFFSET_S + episode.log_start_s + t0) * 1e9)
        seen = planner.seen.get(stamp)
        if seen is None:  # a takeover between two ticks
            continue
        options = DatasetOptions(("roundabout",), 1, 8.0)  # 2 frames 0.5 s apart
        arrays = branch_arrays(log, t0, command, rig, options, explanation_budget_fits())
        sample = sample_observation(arrays, 0)
        history = ego_history_array(sample.ego_history, sample.stamp_ns, recipe.schema)
        layout = render_prompt(
            seen,
            recipe.tokenizer,
            recipe.schema,
            mc.camera_names,
            mc.num_frames,
            mc.tokens_per_image,
            ego_tokens=mc.ego_tokens,
        )
        np.testing.assert_array_equal(
            layout.token_ids, encoder.prompt_ids(history, sample.route_command)
        )
        np.testing.assert_allclose(layout.ego_history, history, atol=1e-5)
        np.testing.assert_allclose(seen.lane_pose, sample.lane_pose, atol=1e-6)
        assert seen.lead is not None and sample.lead is not None
        if np.isinf(sample.lead[0]):
            assert np.isinf(seen.lead[0])
        else:
            np.testing.assert_allclose(seen.lead, sample.lead, atol=0.006)
        assert seen.beside is not None and sample.beside is not None
        kept = np.array(sample.beside)  # no speed is kept for a car that is not there
        kept[:, [2, 4]] = np.where(np.isinf(kept[:, [1, 3]]), np.nan, kept[:, [2, 4]])
        np.testing.assert_allclose(np.array(seen.beside), kept, atol=1e-4)
        assert len(seen.frames) == len(sample.frames)
        for a, b in zip(seen.frames, sample.frames, strict=True):
            assert a.camera == b.camera
            np.testing.assert_array_equal(a.image, b.image)
        compared += 1
    assert compared >= 3


def test_the_expert_takes_over_on_the_route_wherever_the_planner_left_the_ego() -> None:
    """`expert_route`: on the route, the rest of it; on the exit beside the ring where the
    route stays on the ring, the ring; off the route with a way back, the shortest one; with
    none, no route (the expert follows the road)."""
    from blockplan.closedloop.dagger import expert_route
    from blockplan.closedloop.world import ClosedLoopWorld

    world = ClosedLoopWorld(get_scenario("roundabout"), 913)
    try:
        net, route = world.env.road.network, world.route
        assert route[0][:2] == ("ser", "ses") and route[-1][:2] == ("nx", "nxs")
        ring = route.index(("ex", "ee", None))

        def at(lane):
            return net.get_lane(lane).position(2.0, 0.0)

        assert expert_route(net, route, ("ex", "ee", 1), at(("ex", "ee", 1))) == (
            ("ex", "ee", 1),
            route[ring:],
        )
        # the east exit leaves node ex beside the ring the route takes: the ring's lane nearest
        lane, rest = expert_route(net, route, ("ex", "exs", 0), at(("ex", "exs", 0)))
        assert lane[:2] == ("ex", "ee") and rest == route[ring:]
        nearest = min(range(2), key=lambda k: net.get_lane(("ex", "ee", k)).distance(at(lane)))
        assert lane[2] == nearest
        # on the east entry: back onto the ring and out at the north exit
        assert expert_route(net, route, ("eer", "ees", 0), at(("eer", "ees", 0))) == (
            ("eer", "ees", 0),
            [("eer", "ees", 0), ("ees", "ee", None), ("ee", "nx", None), ("nx", "nxs", None)],
        )
        # out of the east exit: no way back
        assert expert_route(net, route, ("exs", "exr", 0), at(("exs", "exr", 0))) == (
            ("exs", "exr", 0),
            None,
        )
        assert expert_route(net, [], ("ex", "ee", 0), at(("ex", "ee", 0))) == (
            ("ex", "ee", 0),
            None,
        )
    finally:
        world.close()
