"""The recipe runner: stages run once, reruns skip what verifies, changes rerun what they
touch, a failing stage is one error naming its log, and the shipped folder carries a card
generated from the recipe."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from blockplan.model.weights import VERIFIED, verify_folder
from blockplan.recipes import RecipeError, load_recipe, run_recipe, ship
from blockplan.recipes.runner import RECORD, identity

REPO = Path(__file__).resolve().parents[2]
MODEL = str(REPO / "models" / "blockplan-tiny")


def _recipe(tmp_path: Path, second: list[str] | None = None) -> Path:
    doc = {
        "name": "two-soups",
        "description": "Two averages of the shipped weights.",
        "ship": "soup2",
        "stages": [
            {"name": "soup", "run": "average", "args": {"models": [MODEL, MODEL]}},
            {"name": "soup2", "run": "average", "args": {"models": second or ["{soup}", MODEL]}},
        ],
        "card": {"targets": ["it loads"], "limits": ["it is the same model"]},
    }
    path = tmp_path / "two-soups.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _run(path: Path, out: Path, **kw):
    stream = io.StringIO()
    results = run_recipe(load_recipe(path), out, "full", stream=stream, **kw)
    return results, stream.getvalue()


def test_a_recipe_runs_resumes_and_ships_a_verified_folder_with_its_card(tmp_path):
    path, out = _recipe(tmp_path), tmp_path / "out"
    results, said = _run(path, out)
    assert [r.skipped for r in results] == [False, False]
    assert "[1/2] soup (average)" in said and "done in" in said
    record = json.loads((out / "stages" / "soup" / RECORD).read_text())
    assert record["argv"][-2:] == ["--out", str(out / "stages" / "soup" / "model")]

    model = ship(load_recipe(path), results, out, "full")
    assert verify_folder(model, also=["MODEL_CARD.md"]) == VERIFIED
    card = (model / "MODEL_CARD.md").read_text()
    assert "blockplan recipe run" in card and "two-soups.yaml" in card
    assert "- it loads" in card and "- it is the same model" in card
    assert "| soup2 | average |" in card
    assert str(tmp_path) not in card  # no folder of the machine that made it

    results, said = _run(path, out)  # nothing changed: both skipped
    assert [r.skipped for r in results] == [True, True]
    assert said.count("skipped") == 2

    results, _ = _run(path, out, from_stage="soup2")
    assert [r.skipped for r in results] == [True, False]


def test_a_changed_stage_reruns_with_everything_that_reads_it(tmp_path):
    out = tmp_path / "out"
    _run(_recipe(tmp_path), out)
    first = json.loads((out / "stages" / "soup2" / RECORD).read_text())
    # soup2 reads soup; changing soup's record (as a new command line would) reruns both
    record_path = out / "stages" / "soup" / RECORD
    record = json.loads(record_path.read_text())
    record["argv"] = [*record["argv"], "--stale"]
    record_path.write_text(json.dumps(record))
    results, _ = _run(_recipe(tmp_path), out)
    assert [r.skipped for r in results] == [False, False]
    again = json.loads((out / "stages" / "soup2" / RECORD).read_text())
    assert again["inputs"] != first["inputs"]  # soup's new run


def test_an_output_that_no_longer_verifies_reruns_its_stage(tmp_path):
    out = tmp_path / "out"
    _run(_recipe(tmp_path), out)
    weights = out / "stages" / "soup" / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    results, _ = _run(_recipe(tmp_path), out)
    assert not results[0].skipped


def test_a_failing_stage_names_its_log_and_records_nothing(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "bad",
                "ship": "soup",
                "stages": [
                    {"name": "soup", "run": "average", "args": {"models": [MODEL, MODEL]}},
                    {
                        "name": "ol",
                        "run": "eval",
                        "args": {"data": str(tmp_path / "no-data"), "model": "{soup}"},
                    },
                ],
            }
        )
    )
    with pytest.raises(
        RecipeError, match=r"stage 'ol': `blockplan eval` exited 2: error: .*no-data.*stage.log"
    ):
        _run(path, tmp_path / "out")
    assert not (tmp_path / "out" / "stages" / "ol" / RECORD).exists()
    assert (tmp_path / "out" / "stages" / "soup" / RECORD).exists()


def test_one_output_folder_holds_one_scale(tmp_path):
    out = tmp_path / "out"
    _run(_recipe(tmp_path), out)
    with pytest.raises(RecipeError, match="holds a full-scale run"):
        run_recipe(load_recipe(_recipe(tmp_path)), out, "smoke", stream=io.StringIO())


def test_an_unknown_from_stage_is_an_error(tmp_path):
    with pytest.raises(RecipeError, match="--from-stage 'nope': no such stage"):
        _run(_recipe(tmp_path), tmp_path / "out", from_stage="nope")


def test_jobs_run_independent_stages_at_once_and_keep_the_order_of_reads(tmp_path):
    path = _recipe(tmp_path)
    doc = yaml.safe_load(path.read_text())
    doc["stages"].append({"name": "soup3", "run": "average", "args": {"models": [MODEL, MODEL]}})
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = tmp_path / "out"
    results, said = _run(path, out, jobs=2)
    assert [r.stage.name for r in results] == ["soup", "soup2", "soup3"]  # the recipe's order
    assert not any(r.skipped for r in results) and said.count("done in") == 3
    # soup2 reads soup: it started after soup was done, and records which run made it
    assert said.index("[1/3] soup (average): done") < said.index("[2/3] soup2 (average): log")
    soup = json.loads((out / "stages" / "soup" / RECORD).read_text())
    soup2 = json.loads((out / "stages" / "soup2" / RECORD).read_text())
    assert soup2["inputs"] == {"soup": identity(soup)}
    results, said = _run(path, out, jobs=2)  # and a rerun skips them all, as with one job
    assert [r.skipped for r in results] == [True, True, True]
    with pytest.raises(RecipeError, match="--jobs 0"):
        _run(path, out, jobs=0)


def test_under_jobs_a_failing_stage_stops_what_reads_it_and_is_raised(tmp_path):
    path = _recipe(tmp_path, second=["{soup}", str(tmp_path / "missing")])
    doc = yaml.safe_load(path.read_text())
    doc["stages"].append({"name": "soup3", "run": "average", "args": {"models": ["{soup2}"]}})
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = tmp_path / "out"
    with pytest.raises(Exception, match="missing"):
        _run(path, out, jobs=2)
    assert (out / "stages" / "soup" / RECORD).is_file()
    assert not (out / "stages" / "soup2" / RECORD).exists()
    assert not (out / "stages" / "soup3").exists()  # never started: it reads soup2


def test_the_card_states_the_margin_over_the_best_blind_bar():
    from blockplan.recipes.card import _blind_margin

    doc = {
        "rollouts_n4": {"ade_5s": 1.35},
        "ego_mlp": {"ade_5s": 1.60, "ade_5s_over_seeds": [1.60, 1.50, 1.70]},
        "ego_mlp_lane_pose": {"ade_5s": 1.64},
        "constant_velocity": {"ade_5s": 1.0},  # not an MLP bar: never the one to beat
    }
    lines = _blind_margin(doc)
    assert "over 3 fit seeds: ADE@5s 1.50–1.70 m." in lines[1]
    assert "10.0 % below the best blind bar (1.50 m" in lines[2]
    doc["rollouts_n4"]["ade_5s"] = 1.65
    assert "10.0 % above" in _blind_margin(doc)[2]
    assert _blind_margin({}) == []
    # eval's own `blind_best` (every MLP row and seed, per scenario too) when it has one
    doc["blind_best"] = {"ade_5s": 1.5, "ade_5s_by_scenario": {"merge": 0.3, "highway": 0.5}}
    doc["rollouts_n4"]["ade_5s_by_scenario"] = {"highway": 0.45, "merge": 0.33}
    assert _blind_margin(doc)[3] == (
        "Per scenario: highway 10.0 % below (0.45 vs 0.50 m), merge 10.0 % above (0.33 vs 0.30 m)."
    )


def test_the_card_counts_failed_episodes_where_the_run_has_the_expert():
    from blockplan.recipes.card import _closed_loop

    common = {"lane_departure_rate": 0.1, "progress_m": 50.0, "mean_abs_jerk": 1.0}
    doc = {
        "model": {
            "episodes": 20,
            "collision_rate": 0.2,
            "no_progress_rate": 0.15,
            "failure_rate": 0.45,
            **common,
        },
        "expert": {
            "episodes": 20,
            "collision_rate": 0.3,
            "no_progress_rate": 0.0,
            "failure_rate": 0.35,
            **common,
        },
        "run": {"scenario": "roundabout", "seeds": [2000, 2019], "duration_s": 20.0},
    }
    lines = _closed_loop(doc)
    assert "| model | 20 | 4 | 2 | 3 | 9 | 50.0 | 1.00 |" in lines
    assert "| expert | 20 | 6 | 2 | 0 | 7 | 50.0 | 1.00 |" in lines
    del doc["model"]["failure_rate"], doc["model"]["no_progress_rate"]  # written before
    assert "| model | 20 | 4 | 2 | – | – | 50.0 | 1.00 |" in _closed_loop(doc)


def test_a_continued_stage_counts_its_interrupted_time_and_keeps_its_log(tmp_path, monkeypatch):
    import dataclasses
    import os

    from blockplan.recipes import runner
    from blockplan.recipes.stages import KINDS

    monkeypatch.setitem(KINDS, "average", dataclasses.replace(KINDS["average"], resumable=True))
    path, out = _recipe(tmp_path), tmp_path / "out"
    _run(path, out)
    folder = out / "stages" / "soup2"
    record = json.loads((folder / RECORD).read_text())
    # as if the first run had been stopped 600 s after it started: started, no record
    (folder / RECORD).unlink()
    expected = {k: v for k, v in record.items() if k not in ("run_id", "seconds")}
    (folder / runner.STARTED).write_text(json.dumps(expected))
    (folder / runner.LOG).write_text("the interrupted run's output\n")
    now = os.stat(folder / runner.LOG).st_mtime
    os.utime(folder / runner.STARTED, (now - 1000, now - 1000))
    os.utime(folder / runner.LOG, (now - 400, now - 400))
    results, said = _run(path, out)
    assert "soup2 (average) (continuing)" in said and "in all)" in said
    assert 600 <= results[1].seconds < 660
    assert json.loads((folder / RECORD).read_text())["seconds"] == round(results[1].seconds, 1)
    log = (folder / runner.LOG).read_text()
    assert log.startswith("the interrupted run's output\n") and "recipe average" in log


def test_the_card_writes_settings_as_the_command_line_takes_them():
    from blockplan.recipes.card import _short

    item = ("set", {"ego-tokens": 4, "ego-lead": True, "tower-data": None})
    assert _short(item, set()) == (
        "`--set ego-tokens=4` `--set ego-lead=true` `--set tower-data=null`"
    )


def test_the_generating_commands_that_keep_what_exists_continue_after_an_interruption():
    from blockplan.recipes.stages import KINDS

    # dataset, robot-demos and robot-scenes keep a written episode, bag or shard, train
    # continues from its checkpoint and select keeps a candidate's finished closed loop: an
    # interrupted stage keeps its folder
    continuing = {name for name, kind in KINDS.items() if kind.resumable}
    assert continuing == {"dataset", "robot-demos", "robot-scenes", "train", "select"}


def test_status_says_where_a_run_stands_without_touching_it(tmp_path, capsys):
    from blockplan.cli import main
    from blockplan.recipes.runner import recipe_status

    path, out = _recipe(tmp_path), tmp_path / "out"

    def states():
        return {r.name: r.state for r in recipe_status(load_recipe(path), out)}

    assert states() == {"soup": "ready", "soup2": "waiting"}
    assert not out.exists()  # read only
    _run(path, out)
    rows = recipe_status(load_recipe(path), out)
    assert [(r.state, r.minutes is not None) for r in rows] == [("done", True)] * 2
    # an interrupted stage: started, with how far it got
    (out / "stages" / "soup2" / RECORD).unlink()
    row = recipe_status(load_recipe(path), out)[1]
    assert row.state == "started" and "last write" in row.note
    _run(path, out)
    assert main(["recipe", "status", str(path), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "2 of 2 stages done" in said and "soup2" in said
    # another command line for it (the recipe file edited): runs again
    changed = _recipe(tmp_path, second=[MODEL, "{soup}"])
    assert {r.name: r.state for r in recipe_status(load_recipe(changed), out)} == {
        "soup": "done",
        "soup2": "changed",
    }
    with pytest.raises(RecipeError, match="full-scale run, not smoke"):
        recipe_status(load_recipe(path), out, "smoke")
