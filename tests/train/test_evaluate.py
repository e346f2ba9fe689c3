import json

import numpy as np
import pytest
import torch

from blockplan.model.planner_model import PlannerModel
from blockplan.train.evaluate import (
    BLIND_BEST,
    EXTRA,
    METHODS,
    evaluate,
    summary_lines,
    trajectory_metrics,
)
from blockplan.train.trainer import init_weights


def test_trajectory_metrics_conventions():
    gt = np.zeros((20, 2))
    pred = np.zeros((20, 2))
    pred[:, 0] = np.arange(1, 21)  # error grows by 1 m per 0.25 s
    m = trajectory_metrics(pred, gt)
    assert m["l2_1s"] == 4.0 and m["l2_stp3_1s"] == 2.5  # UniAD: at t; ST-P3: mean up to t
    assert m["ade_3s"] == pytest.approx(6.5) and m["ade_5s"] == pytest.approx(10.5)


@pytest.mark.slow
def test_eval_reports_every_method(recipe, dataset_dir, tmp_path):
    torch.set_num_threads(1)  # tiny forwards: threads only spin against each other
    torch.manual_seed(0)
    model = PlannerModel(recipe.model_config)
    init_weights(model)
    folder = model.save_pretrained(tmp_path / "model", tokenizer_json=recipe.tokenizer.to_str())
    results = evaluate(
        dataset_dir,
        folder,
        "test",
        max_samples=2,
        check_collisions=False,
        progress=False,
        mlp_steps=20,
        mlp_seeds=2,
    )
    assert set(results) == {*METHODS, *EXTRA, BLIND_BEST}
    seeds = results["ego_mlp"]["ade_5s_over_seeds"]  # seed 0 is the row's own fit
    assert len(seeds) == 2 and seeds[0] == results["ego_mlp"]["ade_5s"] and seeds[1] != seeds[0]
    # The best blind bar: the smallest of every MLP row and seed, overall and per scenario.
    best = results.pop(BLIND_BEST)
    mlps = [r for k, r in results.items() if k.startswith("ego_mlp")]
    assert best["ade_5s"] == min([r["ade_5s"] for r in mlps] + seeds)
    assert best["row"] in {*(k for k in results if k.startswith("ego_mlp")), "ego_mlp seed 1"}
    for scenario, value in best["ade_5s_by_scenario"].items():
        assert value <= min(r["ade_5s_by_scenario"][scenario] for r in mlps)
    for name, r in results.items():
        for key in (
            "ade_3s",
            "ade_5s",
            "l2_1s",
            "l2_2s",
            "l2_3s",
            "collision_rate",
            "gate_pass_rate",
            "comfort_pass_rate",
            "gate_pass_rate_by_scenario",
        ):
            assert key in r, (name, key)
        assert r["num_samples"] == 2
    assert results["constant_velocity"]["ade_5s"] < 1e-6  # the synthetic ego is constant speed
    assert results["constant_velocity"]["gate_pass_rate"] == 1.0  # no acceleration, no jerk
    assert set(results["constant_velocity"]["comfort_pass_rate_by_scenario"].values()) == {1.0}
    for name, r in results.items():  # the overall mean lies between the scenarios' means
        assert set(r["ade_5s_by_scenario"]) == set(r["gate_pass_rate_by_scenario"])
        assert max(r["ade_5s_by_scenario"].values()) >= r["ade_5s"] - 1e-9, name
        assert min(r["ade_5s_by_scenario"].values()) <= r["ade_5s"] + 1e-9, name
    assert 0.0 <= results["model"]["meta_accuracy"] <= 1.0
    json.dumps(results)  # JSON-ready
    lines = summary_lines({**results, BLIND_BEST: best})  # what `blockplan eval` prints
    assert all(k[:12] in lines[0] for k in results["model"]["ade_5s_by_scenario"])
    assert lines[-3].startswith("ego_mlp over 2 fit seeds: ADE@5s mean")
    assert lines[-2] == f"best blind bar (every ego_mlp row and seed): ADE@5s {best['ade_5s']:.2f}"
    rows = {line.split()[0]: line.split() for line in lines[2:-3]}
    assert set(rows) == set(results)
    assert rows["model"][2] == f"{results['model']['ade_5s']:.2f}"
    assert rows["constant_velocity"][-1] == "-" and rows["model"][-1] == "0"


def test_eval_overrides_reach_the_model_rows_but_not_their_strategy_or_n(recipe, tmp_path):
    from blockplan.train.evaluate import _planner

    torch.manual_seed(0)
    model = PlannerModel(recipe.model_config)
    folder = model.save_pretrained(tmp_path / "model", tokenizer_json=recipe.tokenizer.to_str())
    overrides = ["rollouts.temperature=1.0", "rollouts.num_rollouts=9", "decoding.strategy=ar"]
    planner = _planner(folder, "rollouts", 4, overrides)
    assert planner.config.rollouts.temperature == 1.0
    assert planner.config.rollouts.num_rollouts == 4  # --rollouts
    assert planner.config.decoding.strategy == "rollouts"  # the row's own


def test_the_summary_names_the_rollout_count_it_ran():
    row = {"ade_3s": 1.0, "ade_5s": 2.0, "gate_pass_rate": 1.0, "num_samples": 3}
    results = {"model": row, "rollouts_n4": {**row, "num_rollouts": 16}}
    names = [line.split()[0] for line in summary_lines(results)[2:-1]]
    assert names == ["model", "rollouts_n16"]


def test_critical_f1_counts_only_labelled_critical_objects():
    """A bag's sample has no critical-object label: it leaves the F1 alone (None when no
    sample has one) while its meta behaviour still counts."""
    import numpy as np

    from blockplan.train.evaluate import Tally
    from blockplan.types import CRITICAL_OBJECT_KEYS, DrivingAnswer, Lateral, Longitudinal

    def answer(flag: bool) -> DrivingAnswer:
        critical = {k: flag and k == "nearby_vehicle" for k in CRITICAL_OBJECT_KEYS}
        return DrivingAnswer(critical, "", Longitudinal.KEEP, Lateral.LANE_FOLLOW, np.zeros((5, 2)))

    tally = Tally()
    tally.count = 2
    tally.add_answer(answer(True), answer(False), critical_known=False)
    assert tally.result(with_answers=True)["critical_f1"] is None
    tally.add_answer(answer(True), answer(True))
    out = tally.result(with_answers=True)
    assert out["critical_f1"] == 1.0 and out["meta_accuracy"] == 1.0
