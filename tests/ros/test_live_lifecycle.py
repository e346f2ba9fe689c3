"""The node in a real graph, started by `ros2 launch blockplan planner.launch.py`: lifecycle
through the launch file and by hand (`ros2 lifecycle set`), parameters through `ros2 param`,
the namespace argument, and Ctrl-C. Every test has its own ROS domain (tests/ros/live.py)."""

from __future__ import annotations

import time

import pytest

from tests.ros.conftest import write_params
from tests.ros.live import STARTUP_TIMEOUT_S, assert_clean_exit, wait_until, watch

pytestmark = pytest.mark.ros


def test_launch_activates_the_node_under_its_namespace_and_ctrl_c_ends_it(graph):
    launch = graph.launch("namespace:=car1")
    with watch(graph.domain_id, namespace="car1") as w:
        w.wait_state("active", "/car1/blockplan_planner", STARTUP_TIMEOUT_S)
        topics = set(graph.ros2("topic", "list").stdout.split())
        moved = ("planning/trajectory", "planning/rollouts", "planning/reasoning", "odom")
        assert {f"/car1/{t}" for t in moved} <= topics, topics
        assert "/car1/camera/front/image_raw" in topics and "/diagnostics" in topics
        assert not {f"/{t}" for t in moved} & topics
        # No inputs: every tick still publishes (the fallback), diagnostics once a second.
        assert wait_until(lambda: len(w.seen.trajectory) >= 20, 10.0), len(w.seen.trajectory)
        assert wait_until(lambda: len(w.seen.diagnostics) >= 2, 5.0)
    loop = {s["name"]: s for s in w.seen.diagnostics[-1]["statuses"]}["blockplan: control loop"]
    assert loop["level"] == 1 and loop["message"].startswith("fallback: ")

    # SIGINT to ros2 launch, as a supervisor sends it. (A terminal's Ctrl-C reaches every
    # process of the group; measured 0.6-2.2 s, mostly launch_ros's own lifecycle client
    # teardown, docs/NODE.md "Running on a vehicle".)
    seconds = launch.interrupt()
    assert seconds < 2.0, f"ros2 launch took {seconds:.2f} s to end after SIGINT"
    assert launch.popen.returncode == 0, launch.output[-3000:]
    out = launch.output
    assert_clean_exit(out)
    assert "process has finished cleanly" in out, out[-3000:]


def _count_after(seen, since: float) -> int:
    return sum(r["wall_ns"] / 1e9 >= since for r in seen.trajectory)


def test_lifecycle_by_hand_and_parameters_at_run_time(graph):
    launch = graph.launch("auto_activate:=false")
    with watch(graph.domain_id) as w:
        w.wait_state("unconfigured", timeout_s=STARTUP_TIMEOUT_S)
        time.sleep(1.0)
        assert not w.seen.trajectory  # nothing is published before activate

        graph.transition("configure")
        assert w.state() == "inactive"
        described = graph.ros2(
            "param",
            "describe",
            "/blockplan_planner",
            "rollouts.num_rollouts",
            "decoding.strategy",
            "model.dir",
            "decoding.confidence_threshold",
            "control.rate_hz",
        ).stdout
        blocks = {b.split("\n")[0]: b for b in described.split("Parameter name: ")[1:]}
        assert "Min value: 1\n    Max value: 64" in blocks["rollouts.num_rollouts"], described
        assert "Min value: 0.0\n    Max value: 1.0" in blocks["decoding.confidence_threshold"]
        strategy = blocks["decoding.strategy"]
        assert "Additional constraints: one of ['ar', 'full_diffusion'," in strategy, described
        assert "Read only: true" in blocks["model.dir"], described
        assert "Type: double" in blocks["decoding.confidence_threshold"], described
        rate = blocks["control.rate_hz"]
        assert "Additional constraints: a finite number > 0" in rate, described

        graph.transition("activate")
        assert w.state() == "active"
        start = time.time()
        assert wait_until(lambda: _count_after(w.seen, start) >= 15, 10.0)

        bad = graph.ros2("param", "set", "/blockplan_planner", "trajectory.dt", "9.0").stdout
        assert "Setting parameter failed" in bad and "trajectory.dt" in bad, bad
        good = graph.ros2("param", "set", "/blockplan_planner", "trajectory.dt", "0.5").stdout
        assert "Set parameter successful" in good, good
        launch.wait_output("applied at the next configure", 10.0)

        graph.transition("deactivate")
        time.sleep(0.5)  # a tick already running may still land
        quiet_from = time.time()
        time.sleep(1.5)
        assert _count_after(w.seen, quiet_from) == 0, "published while inactive"

        graph.transition("activate")
        again = time.time()
        assert wait_until(lambda: _count_after(w.seen, again) >= 10, 10.0)
        # cleanup is a transition from inactive (ROS 2 lifecycle): deactivate first.
        graph.transition("deactivate")
        graph.transition("cleanup")
        assert w.state() == "unconfigured"
        graph.transition("shutdown")
        assert w.state() == "finalized"
    assert launch.alive()
    launch.interrupt()
    assert_clean_exit(launch.output)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("control.rate_hz", -1.0),  # the config's validation
        ("rollouts.num_rollouts", 100),  # outside the declared range
    ],
)
def test_an_invalid_parameter_fails_configure_naming_the_key(graph, repo_root, key, value):
    params = write_params(graph.tmp / "bad.yaml", repo_root, **{key: value})
    launch = graph.launch(f"params_file:={params}")
    out = launch.wait_output("configure failed", STARTUP_TIMEOUT_S)
    line = next(x for x in out.splitlines() if "configure failed" in x)
    assert key in line, line
    with watch(graph.domain_id) as w:
        assert w.state() == "unconfigured"  # the transition failed, activate never ran
    assert "active:" not in launch.output
    launch.interrupt()
    assert_clean_exit(launch.output)


def test_a_model_that_fails_to_load_is_tried_once_and_ctrl_c_still_ends_the_launch(graph):
    """A failed activate returns the node to `inactive`: the launch file activates once after
    the start's configure, not again on every return to `inactive` (it once retried without
    end, re-hashing the weights each time, and ignored SIGINT)."""
    launch = graph.launch(f"model_dir:={graph.tmp / 'no_model'}")
    launch.wait_output("activate failed", STARTUP_TIMEOUT_S)
    time.sleep(3.0)
    assert launch.output.count("activate failed") == 1, launch.output[-3000:]
    with watch(graph.domain_id) as w:
        assert w.state() == "inactive"
    seconds = launch.interrupt()
    assert seconds < 5.0, f"ros2 launch took {seconds:.2f} s to end after SIGINT"


@pytest.mark.parametrize("problem", ["missing", "misspelled node"])
def test_a_params_file_the_node_would_ignore_stops_the_launch(graph, repo_root, problem):
    path = graph.tmp / "params.yaml"
    if problem == "misspelled node":
        text = (repo_root / "params" / "planner.yaml").read_text()
        path.write_text(text.replace("blockplan_planner:", "blockplan_plannr:", 1))
    launch = graph.launch(f"params_file:={path}")
    launch.popen.wait(timeout=STARTUP_TIMEOUT_S)
    out = launch.output
    expected = "no such file" if problem == "missing" else "no section for node 'blockplan_planner'"
    assert f"params_file:={path}" in out and expected in out, out[-3000:]
    assert launch.popen.returncode != 0 and "configured:" not in out
