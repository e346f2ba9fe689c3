"""Helpers for the tests that run the planner in a real ROS 2 graph: a colcon build of the
package, an environment per ROS domain, processes in their own process group (always killed
in teardown), the `ros2` CLI, and an in-process observer on its own rclpy context.

Every test gets its own `ROS_DOMAIN_ID` from pytest's `--ros-domains` (default 50-79), so
tests do not see each other; an id is taken only while this process holds its lock file
(/tmp/blockplan-ros-domains/ID.lock), so two test sessions on one machine never share one.
DDS stays on loopback (`../shared/ros2/env.sh`). No `ros2` daemon is started (`--no-daemon`).
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

NODE = "/blockplan_planner"
CAMERA_TOPICS = [f"/camera/{c}/image_raw" for c in ("front_left", "front", "front_right", "rear")]
STARTUP_TIMEOUT_S = 90.0  # torch import + model load + warm-up on a loaded 2-core machine


_HELD_DOMAIN_LOCKS: list[Any] = []  # open lock files: released when the process ends


def domain_ids(span: str) -> Iterator[int]:
    """The ids of `span` ("LOW-HIGH", pytest's --ros-domains) this process could lock, in
    order."""
    low, _, high = span.partition("-")
    locks = Path(tempfile.gettempdir()) / "blockplan-ros-domains"
    locks.mkdir(exist_ok=True)
    for domain_id in range(int(low), int(high or low) + 1):
        handle = (locks / f"{domain_id}.lock").open("w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another session on this machine uses it
            handle.close()
            continue
        _HELD_DOMAIN_LOCKS.append(handle)
        yield domain_id


def colcon_build(repo_root: Path, out: Path) -> Path:
    """Build ros2_ws/ with the venv's colcon against the sourced ROS; the install prefix of
    the blockplan package."""
    colcon = Path(sys.executable).with_name("colcon")
    env = dict(os.environ, COLCON_LOG_PATH=str(out / "log"), PYTHONWARNINGS="ignore")
    cmd = [
        str(colcon),
        "build",
        "--base-paths",
        str(repo_root / "ros2_ws" / "src"),
        "--build-base",
        str(out / "build"),
        "--install-base",
        str(out / "install"),
        "--event-handlers",
        "console_direct-",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"colcon build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return out / "install" / "blockplan"


def graph_env(prefix: Path, domain_id: int, log_dir: Path) -> dict[str, str]:
    """The environment of a process in the graph: the installed package first (what
    `source install/setup.bash` does), this venv's python for `ros2` and the node."""
    env = dict(os.environ)
    site = prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    env["AMENT_PREFIX_PATH"] = f"{prefix}:{env.get('AMENT_PREFIX_PATH', '')}"
    env["PYTHONPATH"] = f"{site / 'site-packages'}:{env.get('PYTHONPATH', '')}"
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env["ROS_DOMAIN_ID"] = str(domain_id)
    env["ROS_LOG_DIR"] = str(log_dir)
    env["RCUTILS_COLORIZED_OUTPUT"] = "0"
    env["PYTHONUNBUFFERED"] = "1"
    return env


# Exec the command with SIGINT as its parent-death signal (Linux prctl PR_SET_PDEATHSIG), so
# a test process killed before its teardown (a CI timeout) still ends `ros2 launch` (which
# then ends its nodes) instead of leaving a graph running. Done in the child, not with
# Popen(preexec_fn=...), which is unsafe in a process with threads (the observer's executor).
_ORPHAN_GUARD = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGINT)\n"
    "if os.getppid() != int(sys.argv[1]): sys.exit(1)  # the parent is gone already\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


class Proc:
    """A process in its own session (process group), output to a file; it gets SIGINT if
    the test process dies first."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path) -> None:
        self.cmd, self.log = cmd, log
        self._file = log.open("w")
        guarded = [sys.executable, "-c", _ORPHAN_GUARD, str(os.getpid()), *cmd]
        self.popen = subprocess.Popen(
            guarded, env=env, stdout=self._file, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.started = time.monotonic()

    @property
    def output(self) -> str:
        self._file.flush()
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_output(self, text: str, timeout_s: float) -> str:
        """Wait until `text` is in the output; fails with the output otherwise."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out = self.output
            if text in out:
                return out
            if not self.alive():
                break
            time.sleep(0.2)
        raise AssertionError(f"{text!r} not in the output of {self.cmd[:3]}:\n{self.output}")

    def interrupt(self, timeout_s: float = 10.0, group: bool = False) -> float:
        """SIGINT to the process (`kill -INT`, what a supervisor sends), or with `group` to
        its whole process group (a terminal's Ctrl-C); seconds until it exited."""
        start = time.monotonic()
        if group:
            os.killpg(self.popen.pid, signal.SIGINT)
        else:
            self.popen.send_signal(signal.SIGINT)
        self.popen.wait(timeout=timeout_s)
        return time.monotonic() - start

    def kill(self) -> None:
        """SIGINT, then SIGKILL to the whole group; never leaves a process behind."""
        if self.alive():
            try:
                os.killpg(self.popen.pid, signal.SIGINT)
                self.popen.wait(timeout=5)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # children the launch left behind
        if self.popen.poll() is None:
            self.popen.wait(timeout=5)
        self._file.close()


class Graph:
    """The processes of one test's graph on one domain; `close()` kills them all."""

    def __init__(self, prefix: Path, domain_id: int, tmp: Path) -> None:
        self.domain_id, self.tmp = domain_id, tmp
        self.env = graph_env(prefix, domain_id, tmp / "roslog")
        self.procs: list[Proc] = []

    def start(self, name: str, cmd: list[str]) -> Proc:
        proc = Proc(cmd, self.env, self.tmp / f"{name}.log")
        self.procs.append(proc)
        return proc

    def launch(self, *args: str, name: str = "launch") -> Proc:
        return self.start(name, ["ros2", "launch", "blockplan", "planner.launch.py", *args])

    def play(self, bag: Path, *args: str, name: str = "play") -> Proc:
        return self.start(name, [sys.executable, "-m", "blockplan.cli", "play", str(bag), *args])

    def ros2(self, *args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
        """`ros2 ARGS --no-daemon` (output in .stdout, stderr merged)."""
        return subprocess.run(
            ["ros2", *args, "--no-daemon"],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def transition(self, transition: str, node: str = NODE) -> str:
        out = self.ros2("lifecycle", "set", node, transition, timeout_s=60).stdout
        assert "Transitioning successful" in out, f"{transition}: {out}"
        return out

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.kill()


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


class Watch:
    """What the test process sees of the graph: the planner's outputs (`seen`, a
    `PlannerObserver`) and lifecycle states through the node's get_state service (cheaper
    than a `ros2 lifecycle get` process)."""

    def __init__(self, node: Any, seen: Any) -> None:
        self.node, self.seen = node, seen
        self._clients: dict[str, Any] = {}

    def state(self, name: str = NODE, timeout_s: float = 10.0) -> str | None:
        from lifecycle_msgs.srv import GetState

        client = self._clients.get(name)
        if client is None:
            client = self._clients[name] = self.node.create_client(GetState, f"{name}/get_state")
        if not client.wait_for_service(timeout_sec=timeout_s):
            return None
        future = client.call_async(GetState.Request())
        deadline = time.monotonic() + timeout_s
        while not future.done() and time.monotonic() < deadline:
            time.sleep(0.02)
        return future.result().current_state.label if future.done() else None

    def _call(self, srv_type: Any, service: str, request: Any, timeout_s: float) -> Any:
        """A service call from this process (no `ros2` CLI process); None on a timeout."""
        client = self._clients.get(service)
        if client is None:
            client = self._clients[service] = self.node.create_client(srv_type, service)
        if not client.wait_for_service(timeout_sec=timeout_s):
            return None
        future = client.call_async(request)
        deadline = time.monotonic() + timeout_s
        while not future.done() and time.monotonic() < deadline:
            time.sleep(0.01)
        return future.result() if future.done() else None

    def change_state(self, transition: str, name: str = NODE, timeout_s: float = 60.0) -> bool:
        """A lifecycle transition ("configure", "activate", …) through the node's change_state
        service; whether it succeeded (False also on a timeout)."""
        from lifecycle_msgs.msg import Transition
        from lifecycle_msgs.srv import ChangeState

        request = ChangeState.Request()
        request.transition = Transition(id=getattr(Transition, f"TRANSITION_{transition.upper()}"))
        response = self._call(ChangeState, f"{name}/change_state", request, timeout_s)
        return bool(response is not None and response.success)

    def set_parameter(
        self, parameter: str, value: Any, name: str = NODE, timeout_s: float = 10.0
    ) -> tuple[bool, str]:
        """`ros2 param set` from this process: (successful, reason)."""
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        request = SetParameters.Request(
            parameters=[Parameter(parameter, value=value).to_parameter_msg()]
        )
        response = self._call(SetParameters, f"{name}/set_parameters", request, timeout_s)
        if response is None:
            return False, "timed out"
        result = response.results[0]
        return bool(result.successful), str(result.reason)

    def wait_state(self, label: str, name: str = NODE, timeout_s: float = 60.0) -> None:
        states: list[str | None] = []
        ok = wait_until(
            lambda: states.append(self.state(name)) or states[-1] == label, timeout_s, 0.2
        )
        assert ok, f"{name} not {label!r} after {timeout_s} s (last: {states[-1:]})"


@contextmanager
def watch(domain_id: int, namespace: str = "") -> Iterator[Watch]:
    """A `Watch` in this process, on its own rclpy context in `domain_id`."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    from blockplan.ros.observer import PlannerObserver

    context = Context()
    rclpy.init(context=context, domain_id=domain_id)
    node = Node("blockplan_test_observer", context=context)
    seen = PlannerObserver(node, namespace=namespace)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    # The observer times arrivals in this process, which holds the whole collected suite
    # (torch and all): a full collection of that heap stalls the executor thread for
    # ~200 ms, which read as a 0.35 s gap in the node's trajectory. Frozen, the collector
    # scans only what the watch allocates.
    gc.collect()
    gc.freeze()
    thread.start()
    try:
        yield Watch(node, seen)
    finally:
        gc.unfreeze()
        executor.shutdown(timeout_sec=2.0)
        thread.join(timeout=5.0)
        node.destroy_node()
        rclpy.shutdown(context=context)


def assert_clean_exit(output: str) -> None:
    """No Python traceback and no rcl error in a process's output."""
    assert "Traceback" not in output, output[-4000:]
    assert "Failed to publish log message" not in output, output[-4000:]
