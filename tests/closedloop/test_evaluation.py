"""The evaluation loop over seeds and policies, with fake episodes (no simulator)."""

import pytest

import blockplan.closedloop.evaluation as evaluation
from blockplan.closedloop import EXPERT, EpisodeResult, EpisodeSpec, WarmupCrash, run_evaluation
from blockplan.sim.scenarios import get_scenario

POLICIES = ("model", EXPERT, "constant_velocity")


class Bar:
    def __init__(self):
        self.total = 0
        self.labels = []

    def set_postfix_str(self, s):
        self.labels.append(s)

    def update(self, n=1):
        self.total += n


def _result(policy, spec):
    return EpisodeResult(policy, spec.scenario.name, spec.seed, 1.0, False, False, 10.0, 0.5)


@pytest.fixture
def fake_episodes(monkeypatch):
    """Seed 1's expert crashes in the warm-up; every other episode drives 10 m."""
    calls = []

    def expert(spec):
        calls.append((EXPERT, spec.seed))
        if spec.seed == 1:
            raise WarmupCrash("seed 1")
        return _result(EXPERT, spec)

    def planner(spec, name, planner, config, rig, frame_sink=None):
        calls.append((name, spec.seed))
        return _result(name, spec)

    monkeypatch.setattr(evaluation, "run_expert_episode", expert)
    monkeypatch.setattr(evaluation, "run_planner_episode", planner)
    return calls


def test_a_seed_the_expert_crashes_in_the_warm_up_is_skipped_for_every_policy(fake_episodes):
    specs = [EpisodeSpec(get_scenario("highway"), seed) for seed in range(3)]
    planners = {"model": object(), "constant_velocity": object()}
    bar = Bar()
    result = run_evaluation(specs, POLICIES, planners, None, None, progress=bar)
    assert result.skipped_seeds == [1]
    assert {p: [r.seed for r in result.results[p]] for p in POLICIES} == {
        p: [0, 2] for p in POLICIES
    }
    assert ("constant_velocity", 1) not in fake_episodes  # the seed stops at the crash
    assert bar.total == len(specs) * len(POLICIES)
    assert bar.labels[0] == "seed 0 model"
    summary = result.summary()
    assert list(summary) == list(POLICIES)
    assert summary["model"]["episodes"] == 2 and summary["model"]["progress_m"] == 10.0
    assert [e["policy"] for e in result.episodes()] == [p for p in POLICIES for _ in (0, 2)]
    assert result.frames == []


def _episode(policy, seed, progress_m, collided=False, departed=False):
    return EpisodeResult(policy, "intersection", seed, 20.0, collided, departed, progress_m, 0.5)


def test_an_episode_short_of_half_the_experts_path_makes_no_progress_and_fails():
    """No progress: no collision, no departure, less than half the expert's path on that
    seed. A failure is any of the three; the expert's own failures are its collisions and
    departures. Without the expert in the run neither can be told (None)."""
    expert = [_episode(EXPERT, 0, 100.0), _episode(EXPERT, 1, 60.0, collided=True)]
    expert += [_episode(EXPERT, 2, 80.0), _episode(EXPERT, 3, 90.0)]
    model = [
        _episode("model", 0, 49.0),  # crawls: no progress
        _episode("model", 1, 31.0),  # more than half of the crashed expert's 60 m
        _episode("model", 2, 10.0, departed=True),  # a departure, not also no progress
        _episode("model", 3, 45.0),  # exactly half: progress
    ]
    run = evaluation.Evaluation(("model", EXPERT), {"model": model, EXPERT: expert})
    assert run.no_progress("model") == [True, False, False, False]
    assert run.no_progress(EXPERT) == [False] * 4
    summary = run.summary()
    assert summary["model"]["no_progress_rate"] == 0.25
    assert summary["model"]["failure_rate"] == 0.5
    assert summary[EXPERT]["no_progress_rate"] == 0.0
    assert summary[EXPERT]["failure_rate"] == 0.25
    rows = run.episodes()
    assert [r["no_progress"] for r in rows[:4]] == [True, False, False, False]

    alone = evaluation.Evaluation(("model",), {"model": model})
    assert alone.no_progress("model") is None
    assert alone.summary()["model"]["failure_rate"] is None
    assert {r["no_progress"] for r in alone.episodes()} == {None}
