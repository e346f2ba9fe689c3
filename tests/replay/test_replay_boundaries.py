"""Replay at its boundaries: output folders, Ctrl-C, the rate, zero-tick runs,
errors that point at the right place, bags checked before the model, and what the summary,
metrics.json, the report and /diagnostics say. Bags are made here with rosbags."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import rosbags.rosbag2
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory

from blockplan.bags import BagWriter, TypestoreMessages, diagnostics_from_msg, string_msg
from blockplan.cli import main
from blockplan.config import PlannerConfig
from blockplan.replay import ReplayInterrupted, ReplayOutputError, run_replay
from blockplan.runtime import ConstantVelocityPlanner
from blockplan.types import Plan
from tests.replay.bagmaker import BagSpec, make_bag

CV = ["--model", "constant-velocity", "--no-progress"]


def _decoded(path: Path, topic: str) -> list:
    with path.open("rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        return [d for _, _, _, d in reader.iter_decoded_messages(topics=[topic])]


def _error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def bag(tmp_path_factory) -> Path:
    return make_bag(tmp_path_factory.mktemp("bag") / "in.mcap", BagSpec(duration_s=3.0))


# ---------------------------------------------------------------- output folders


def test_out_that_is_a_file_or_under_a_file(bag, tmp_path, capsys) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    assert main(["replay", str(bag), "--out", str(file), *CV]) == 1
    assert "is a file, not a folder" in _error_line(capsys.readouterr().err)
    assert main(["replay", str(bag), "--out", str(file / "sub"), *CV]) == 1
    assert f"{file} is a file" in _error_line(capsys.readouterr().err)


def test_out_on_a_read_only_file_system(bag, tmp_path, capsys, monkeypatch) -> None:
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / "out"))

    monkeypatch.setattr("blockplan.replay.driver.tempfile.TemporaryFile", read_only)
    assert main(["replay", str(bag), "--out", str(tmp_path / "out"), *CV]) == 1
    assert "cannot write there: Read-only file system" in _error_line(capsys.readouterr().err)


def test_a_full_disk_leaves_nothing_that_blocks_the_next_run(bag, tmp_path, capsys, monkeypatch):
    """ENOSPC while writing plans.mcap and again while closing it (the disk stays full): one
    line, and no `.plans.mcap.partial/` left behind; the next run in the same folder works."""
    real_write = rosbags.rosbag2.Writer.write
    calls = []

    def write(self, *args, **kwargs):
        calls.append(1)
        if len(calls) > 200:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, *args, **kwargs)

    def close(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        patch.setattr(rosbags.rosbag2.Writer, "write", write)
        patch.setattr(rosbags.rosbag2.Writer, "close", close)
        assert main(["replay", str(bag), "--out", str(out), *CV]) == 1
    line = _error_line(capsys.readouterr().err)
    assert "No space left on device" in line and "partial bag was removed" in line
    assert not out.exists()  # the folder it made, empty again, is removed too
    assert main(["replay", str(bag), "--out", str(out), *CV]) == 0


def test_a_second_run_says_how_to_clear_the_first(bag, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert main(["replay", str(bag), "--out", str(out), *CV]) == 0
    capsys.readouterr()
    assert main(["replay", str(bag), "--out", str(out), *CV]) == 1
    line = _error_line(capsys.readouterr().err)
    assert f"rm {out / 'plans.mcap'}" in line and "pass another --out" in line
    (out / "plans.mcap").unlink()
    (out / ".plans.mcap.partial").mkdir()  # what a killed (SIGKILL) run leaves
    with pytest.raises(ReplayOutputError, match=r"rm -r .*\.plans\.mcap\.partial"):
        run_replay(bag, out, ConstantVelocityPlanner(), PlannerConfig())


# ---------------------------------------------------------------- Ctrl-C

_SLOW_REPLAY = """
import sys, time
from blockplan.runtime import ConstantVelocityPlanner
plan = ConstantVelocityPlanner.plan
ConstantVelocityPlanner.plan = lambda self, obs: (time.sleep(0.03), plan(self, obs))[1]
from blockplan.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_writes_the_outputs_of_the_ticks_done(tmp_path: Path) -> None:
    bag = make_bag(tmp_path / "long.mcap", BagSpec(duration_s=20.0))
    script = tmp_path / "slow_replay.py"
    script.write_text(textwrap.dedent(_SLOW_REPLAY))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, str(script), "replay", str(bag), "--out", str(out), *CV],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while not (out / ".plans.mcap.partial").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # some ticks in
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert [line for line in stderr.splitlines() if "interrupted" in line] == [
        stderr.strip().splitlines()[-1]
    ]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["interrupted"] is True and 0 < metrics["ticks"] < 199
    assert "Interrupted (Ctrl-C)" in (out / "report.html").read_text()
    assert not (out / ".plans.mcap.partial").exists()  # closed and moved into place
    assert len(_decoded(out / "plans.mcap", "/planning/trajectory")) >= metrics["ticks"] - 1


def test_run_replay_raises_after_writing_the_partial_outputs(tmp_path: Path) -> None:
    class Stopped(ConstantVelocityPlanner):
        calls = 0

        def plan(self, observation) -> Plan:
            self.calls += 1
            if self.calls == 20:
                raise KeyboardInterrupt  # what Ctrl-C raises in the planner's thread
            return super().plan(observation)

    bag = make_bag(tmp_path / "in.mcap", BagSpec(duration_s=5.0))
    with pytest.raises(ReplayInterrupted) as info:
        run_replay(bag, tmp_path / "out", Stopped(), PlannerConfig())
    outputs = info.value.outputs
    assert outputs.metrics["interrupted"] and outputs.metrics["ticks"] >= 19
    assert json.loads(outputs.metrics_json.read_text())["interrupted"] is True
    assert outputs.report_html.is_file()


# ---------------------------------------------------------------- rate and zero ticks


def test_rate_zero_is_an_error_not_the_default(bag, tmp_path, capsys) -> None:
    for rate in ("0", "-5", "nan"):
        assert main(["replay", str(bag), "--out", str(tmp_path / rate), "--rate", rate, *CV]) == 1
        assert "--rate" in _error_line(capsys.readouterr().err)
    assert not (tmp_path / "0").exists()


def test_a_rate_too_low_for_the_bag_says_why_no_tick_ran(bag, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert main(["replay", str(bag), "--out", str(out), "--rate", "0.01", *CV]) == 1
    captured = capsys.readouterr()
    assert "less than one control period (100 s at 0.01 Hz)" in _error_line(captured.err)
    assert "null" not in captured.out and "latency n/a" in captured.out
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["ticks"] == 0 and "control period" in metrics["no_ticks"]
    assert "No control tick ran" in (out / "report.html").read_text()


def test_a_bag_without_header_stamps_says_why_no_tick_ran(tmp_path, capsys) -> None:
    bag = make_bag(tmp_path / "in.mcap", BagSpec(duration_s=2.0, unstamped_everything=True))
    assert main(["replay", str(bag), "--out", str(tmp_path / "out"), *CV]) == 1
    assert "header stamp 0" in _error_line(capsys.readouterr().err)


# ---------------------------------------------------------------- errors pointing at the cause


def test_a_bad_set_is_reported_as_set(bag, tmp_path, capsys) -> None:
    args = ["replay", str(bag), "--out", str(tmp_path / "o"), *CV]
    assert main([*args, "--set", "control.rate_hzz=5"]) == 1
    line = _error_line(capsys.readouterr().err)
    assert line.startswith("error: --set 'control.rate_hzz=5': unknown parameter")
    assert "planner.yaml" not in line


def test_a_truncated_mcap_and_a_folder_without_metadata_give_hints(bag, tmp_path, capsys):
    truncated = tmp_path / "cut.mcap"
    data = bag.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    assert main(["replay", str(truncated), "--out", str(tmp_path / "o1"), *CV]) == 1
    assert "ends early" in _error_line(capsys.readouterr().err)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "in_0.mcap").write_bytes(data)
    assert main(["replay", str(folder), "--out", str(tmp_path / "o2"), *CV]) == 1
    line = _error_line(capsys.readouterr().err)
    assert f"pass the file itself, e.g. {folder / 'in_0.mcap'}" in line
    assert main(["replay", str(folder / "in_0.mcap"), "--out", str(tmp_path / "o3"), *CV]) == 0


def test_the_bag_is_checked_before_the_model_loads(tmp_path, capsys, monkeypatch) -> None:
    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the bag was checked")

    monkeypatch.setattr("blockplan.commands.replay.load_planner", no_model)
    missing = ["replay", str(tmp_path / "nope.mcap"), "--out", str(tmp_path / "o")]
    assert main([*missing, "--model", "models/blockplan-tiny", "--no-progress"]) == 1
    assert "no such bag" in _error_line(capsys.readouterr().err)
    empty = tmp_path / "chatter.mcap"
    with BagWriter(empty) as writer:
        writer.write("/chatter", string_msg(TypestoreMessages(), "hello"), 1)
    args = ["replay", str(empty), "--out", str(tmp_path / "o"), "--model", "models/blockplan-tiny"]
    assert main([*args, "--no-progress"]) == 1
    assert "none of the configured camera topics" in _error_line(capsys.readouterr().err)


def test_a_camera_topic_of_the_wrong_type_is_named_as_such(tmp_path, capsys, caplog) -> None:
    ns = TypestoreMessages()
    bag = tmp_path / "strings.mcap"
    with BagWriter(bag) as writer:
        writer.write("/camera/front/image_raw", string_msg(ns, "not an image"), 1)
    assert main(["replay", str(bag), "--out", str(tmp_path / "o"), *CV]) == 1
    line = _error_line(capsys.readouterr().err)
    assert "/camera/front/image_raw is there but as std_msgs/msg/String" in line
    # With the other cameras present, the mistyped one stays missing, and says why.
    from blockplan.bags import TopicSummary
    from blockplan.replay.topics import resolve_topics

    image = TopicSummary("sensor_msgs/msg/Image", 10)
    present = {f"/camera/{c}/image_raw": image for c in ("front_left", "front", "front_right")}
    present["/camera/rear/image_raw"] = TopicSummary("std_msgs/msg/String", 10)
    topics = resolve_topics(PlannerConfig(), present)
    assert topics.missing_cameras == ("/camera/rear/image_raw",)
    assert "in the bag as std_msgs/msg/String" in topics.why_missing("/camera/rear/image_raw")
    assert topics.why_missing("/odom") == "is not in the bag"
    # The car ahead is read only as nav_msgs/Odometry; another type is named, not read.
    present["/perception/lead_vehicle"] = TopicSummary("geometry_msgs/msg/PoseStamped", 10)
    topics = resolve_topics(PlannerConfig(), present)
    assert topics.lead is None and "PoseStamped" in topics.why_missing("/perception/lead_vehicle")
    present["/perception/lead_vehicle"] = TopicSummary("nav_msgs/msg/Odometry", 10)
    topics = resolve_topics(PlannerConfig(), present)
    assert topics.lead == "/perception/lead_vehicle" and topics.lead in topics.all


# ---------------------------------------------------------------- what the outputs say


class GateFailing(ConstantVelocityPlanner):
    """Every other plan swerves 30 m sideways within a second: the validity gates reject it,
    while the previous plan is young enough to keep publishing (no fallback)."""

    calls = 0

    def plan(self, observation) -> Plan:
        plan = super().plan(observation)
        self.calls += 1
        if self.calls % 2:
            return plan
        swerve = plan.answer.waypoints.copy()
        swerve[:, 1] += 30.0
        answer = type(plan.answer)(**{**plan.answer.__dict__, "waypoints": swerve})
        return Plan(stamp_ns=plan.stamp_ns, answer=answer, rollouts=swerve[None])


def test_rejected_plans_are_not_called_fallbacks(tmp_path, capsys) -> None:
    from blockplan.commands.replay import print_summary

    bag = make_bag(tmp_path / "in.mcap", BagSpec(duration_s=4.0))
    outputs = run_replay(bag, tmp_path / "out", GateFailing(), PlannerConfig())
    m = outputs.metrics
    assert m["counters"]["invalid_plans"] >= 15 and m["fallbacks"] <= 1
    print_summary(outputs)
    out = capsys.readouterr().out
    assert "failed the validity gates" in out
    assert "the fallback was published" not in out
    assert "newest accepted plan while it is younger than control.max_plan_age_s" in out


def test_plans_not_scored_after_a_time_jump_are_explained(tmp_path, capsys) -> None:
    from blockplan.commands.replay import print_summary

    bag = make_bag(tmp_path / "in.mcap", BagSpec(duration_s=14.0, loop_after_s=7.0))
    outputs = run_replay(bag, tmp_path / "out", ConstantVelocityPlanner(), PlannerConfig())
    m = outputs.metrics
    unscored = m["unscored_plans"]
    assert m["evaluated_plans"] + sum(unscored.values()) == m["plans"]
    assert unscored["its horizon crosses a time jump (the recording jumps back)"] >= 15
    assert unscored["the recording ends within its horizon"] >= 15
    print_summary(outputs)
    out = capsys.readouterr().out
    assert f"({m['evaluated_plans']} of {m['plans']} plans)" in out
    assert "crosses a time jump" in out


def test_duplicate_and_zero_quaternion_odometry_are_counted(tmp_path) -> None:
    spec = BagSpec(duration_s=4.0, zero_quaternion_at={10, 11}, duplicate_odometry_at={5, 20})
    outputs = run_replay(
        make_bag(tmp_path / "in.mcap", spec),
        tmp_path / "o",
        ConstantVelocityPlanner(),
        PlannerConfig(),
    )
    counters = outputs.metrics["counters"]
    assert counters["odometry_invalid_quaternion"] == 2 and outputs.metrics["invalid_inputs"] == 2
    assert counters["duplicate_odometry"] == 2
    assert counters["out_of_order_odometry"] == 0  # every counter is reported, zeros too


def test_unverified_weights_are_recorded_everywhere(tmp_path) -> None:
    import torch

    from blockplan.planner.planner import Planner
    from blockplan.replay import load_planner

    torch.set_num_threads(1)
    config = PlannerConfig()
    folder = tmp_path / "model"
    random = Planner.random_init("test", config)
    random.model.save_pretrained(folder, tokenizer_json=random.tokenizer.to_str())
    (folder / "manifest.json").unlink()
    planner = load_planner(str(folder), config, warm_up=False)
    bag = make_bag(tmp_path / "in.mcap", BagSpec(duration_s=1.5))
    outputs = run_replay(bag, tmp_path / "out", planner, config)
    assert json.loads(outputs.metrics_json.read_text())["weights"] == "unverified"
    assert "weights are unverified" in outputs.report_html.read_text()
    model_statuses = [
        s
        for msg in _decoded(outputs.plans_bag, "/diagnostics")
        for s in diagnostics_from_msg(msg)
        if s["name"] == "blockplan: model"
    ]
    assert model_statuses and all(s["values"]["weights"] == "unverified" for s in model_statuses)
    assert model_statuses[0]["level"] == 1  # WARN


class Slow(ConstantVelocityPlanner):
    def plan(self, observation) -> Plan:
        time.sleep(0.25)  # measured timing: the first plans arrive ticks after their request
        return super().plan(observation)


def test_the_report_has_units_no_raw_json_and_opens_on_a_plan(tmp_path) -> None:
    from blockplan.replay.report import report_data

    bag = make_bag(tmp_path / "in.mcap", BagSpec(duration_s=3.0, with_ground_truth=True))
    outputs = run_replay(bag, tmp_path / "o", Slow(), PlannerConfig(), "measured")
    html = outputs.report_html.read_text()
    assert "ADE@5s (m)" in html and "L2@1s (m)" in html
    assert "JSON.stringify" not in html  # streaming reasons and timings are formatted
    assert "overflow-wrap:anywhere" in html  # long rows wrap inside their panel
    data = report_data(outputs.result.log, outputs.metrics, PlannerConfig().camera_names, [])
    assert data["ticks"][0]["fb"]  # start-up: no plan yet
    assert not data["ticks"][data["start"]]["fb"] and data["start"] > 0
    assert "slider.value = m ? m[1] : D.start" in html


def test_a_failed_replay_leaves_no_empty_output_folder(bag, tmp_path, capsys) -> None:
    """A bad requests file, a missing bag among several or a tampered model: the error, and
    no output folder made for a replay that never ran (an existing one is kept)."""
    out = tmp_path / "new" / "out"
    assert (
        main(["replay", str(bag), "--out", str(out), "--requests", str(tmp_path / "no.jsonl"), *CV])
        == 1
    )
    assert "no.jsonl" in _error_line(capsys.readouterr().err)
    assert not (tmp_path / "new").exists()
    several = ["replay", str(bag), str(tmp_path / "nope.mcap"), "--out", str(out), *CV]
    assert main(several) == 1
    assert "no such bag" in _error_line(capsys.readouterr().err)
    assert not (tmp_path / "new").exists()
    tampered = tmp_path / "tampered"
    shutil.copytree("models/blockplan-tiny", tampered)
    weights = tampered / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    kept = tmp_path / "kept"
    kept.mkdir()
    for target in (out, kept):
        args = ["replay", str(bag), "--out", str(target), "--model", str(tampered), "--no-progress"]
        assert main(args) == 1
        assert "does not match the manifest" in _error_line(capsys.readouterr().err)
    assert not (tmp_path / "new").exists() and kept.is_dir()
