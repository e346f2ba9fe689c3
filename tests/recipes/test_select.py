"""The recipe's `select` stage: every candidate drives the same validation seeds, the choice
follows the rule (collisions, then failed episodes, then jerk), an interrupted selection
continues, and the card shows every candidate. The closed loop itself is stubbed here; the
smoke recipe (test_smoke.py) runs the real one."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
import yaml

from blockplan.model.weights import VERIFIED, verify_folder
from blockplan.recipes import RecipeError, load_recipe, run_recipe, ship
from blockplan.recipes import select as select_mod
from blockplan.recipes.select import SELECTION, rank_key, select_model

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "blockplan-tiny"


def _doc(model, seed, episodes, duration, collision=0.0, departure=0.0, stall=0.0, jerk=1.0):
    rates = {
        "episodes": episodes,
        "collision_rate": collision,
        "lane_departure_rate": departure,
        "no_progress_rate": stall,
        "failure_rate": min(1.0, collision + departure + stall),
        "mean_abs_jerk": jerk,
        "progress_m": 100.0,
    }
    return {
        "model": rates,
        "expert": {**rates, "collision_rate": 0.0},
        "run": {
            "model": model,
            "seeds": list(range(seed, seed + episodes)),
            "skipped_seeds_expert_crashed_in_warmup": [],
            "duration_s": duration,
        },
    }


@pytest.fixture
def drives(monkeypatch):
    """Stub closed loop: each candidate folder's name picks its numbers; the calls made."""
    outcomes = {
        "crashes": {"collision": 0.5},
        "wanders": {"departure": 0.5, "jerk": 0.5},
        "smooth": {"departure": 0.5, "jerk": 0.2},
        "steady": {"stall": 0.25, "jerk": 3.0},
    }
    calls = []

    def drive(model, scenario, episodes, seed, duration, path):
        calls.append((Path(model).name, scenario))
        doc = _doc(model, seed, episodes, duration, **outcomes[Path(model).name])
        path.write_text(json.dumps(doc))

    monkeypatch.setattr(select_mod, "_drive", drive)
    return calls


def _candidates(tmp_path: Path, *names: str) -> list[str]:
    folders = []
    for name in names:
        folder = tmp_path / "candidates" / name
        folder.mkdir(parents=True)
        (folder / "weights").write_text(name)
        folders.append(str(folder))
    return folders


def test_the_rule_ranks_collisions_then_failures_then_jerk(tmp_path, drives):
    models = _candidates(tmp_path, "crashes", "wanders", "smooth", "steady")
    out = tmp_path / "out"
    chosen = select_model(models, ["highway", "merge"], 4, 913, 20.0, out, say=lambda _: None)
    # crashes collides; wanders and smooth fail 4 of 8, steady 2 of 8: steady, despite jerk
    assert chosen == 3
    assert (out / "model" / "weights").read_text() == "steady"
    doc = json.loads((out / SELECTION).read_text())
    assert doc["chosen"] == 3 and doc["seeds"] == [913, 916]
    rows = {Path(c["model"]).name: c for c in doc["candidates"]}
    assert rows["crashes"]["collisions"] == 4 and rows["crashes"]["episodes"] == 8
    assert rows["steady"]["no_progress"] == 2 and rows["steady"]["failed"] == 2
    assert rows["smooth"]["by_scenario"]["merge"]["departures"] == 2
    assert len(drives) == 8  # every candidate in every scenario
    # equal collisions and failures: the smoother one
    assert rank_key(rows["smooth"]) < rank_key(rows["wanders"])
    chosen = select_model(models[:3], ["highway"], 4, 913, 20.0, tmp_path / "o2", say=print)
    assert Path(models[chosen]).name == "smooth"


def test_an_interrupted_selection_continues_and_a_change_drives_again(tmp_path, drives):
    models = _candidates(tmp_path, "wanders", "smooth")
    out = tmp_path / "out"
    select_model(models, ["highway"], 3, 913, 20.0, out, say=lambda _: None)
    assert len(drives) == 2
    (out / SELECTION).unlink()
    shutil.rmtree(out / "model")
    select_model(models, ["highway"], 3, 913, 20.0, out, say=lambda _: None)
    assert len(drives) == 2  # both runs were finished: kept
    select_model(models, ["highway"], 3, 914, 20.0, out, say=lambda _: None)
    assert len(drives) == 4  # other seeds: driven again


def test_bad_candidate_lists_are_clear_errors(tmp_path, drives):
    models = _candidates(tmp_path, "smooth")
    with pytest.raises(RecipeError, match="listed twice"):
        select_model(models * 2, ["highway"], 3, 913, 20.0, tmp_path / "o")
    with pytest.raises(RecipeError, match="episodes"):
        select_model(models, ["highway"], 0, 913, 20.0, tmp_path / "o")
    assert drives == []


def test_a_recipe_ships_the_chosen_candidate_and_its_card_shows_every_one(tmp_path, monkeypatch):
    def drive(model, scenario, episodes, seed, duration, path):
        collision = 0.0 if Path(model).parent.name == "soup" else 1.0
        path.write_text(json.dumps(_doc(model, seed, episodes, duration, collision=collision)))

    monkeypatch.setattr(select_mod, "_drive", drive)
    doc = {
        "name": "choose",
        "description": "The shipped weights or their average, by closed loop.",
        "ship": "choice",
        "stages": [
            {"name": "soup", "run": "average", "args": {"models": [str(MODEL), str(MODEL)]}},
            {
                "name": "choice",
                "run": "select",
                "about": "the better of the two",
                "args": {
                    "models": [str(MODEL), "{soup}"],
                    "scenario": ["highway"],
                    "episodes": 2,
                    "seed": 913,
                },
            },
        ],
    }
    path = tmp_path / "choose.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = tmp_path / "out"
    results = run_recipe(load_recipe(path), out, "full", stream=io.StringIO())
    model = ship(load_recipe(path), results, out, "full")
    assert verify_folder(model, also=["MODEL_CARD.md"]) == VERIFIED
    card = (model / "MODEL_CARD.md").read_text()
    assert "### choice — the better of the two" in card
    assert "| **soup** (chosen) | 2 | 0 |" in card
    assert "| blockplan-tiny | 2 | 2 |" in card
    assert card.count("Failed: a collision, a lane departure or no progress") == 1
    assert str(tmp_path) not in card
    again = run_recipe(load_recipe(path), out, "full", stream=io.StringIO())
    assert [r.skipped for r in again] == [True, True]
