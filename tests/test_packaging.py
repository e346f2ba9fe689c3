"""The ROS 2 package metadata and the colcon build of ros2_ws/."""

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest


def test_package_xml(repo_root):
    root = ET.parse(repo_root / "package.xml").getroot()
    assert root.get("format") == "3"
    assert root.findtext("name") == "blockplan"
    assert root.find("export/build_type").text == "ament_python"
    deps = {e.text for e in root.findall("exec_depend")}
    for dep in ("rclpy", "sensor_msgs", "nav_msgs", "visualization_msgs", "diagnostic_msgs"):
        assert dep in deps


def test_workspace_links_back(repo_root):
    link = repo_root / "ros2_ws" / "src" / "blockplan"
    assert link.is_symlink()
    assert not os.path.isabs(os.readlink(link))
    assert link.resolve() == repo_root.resolve()


def _colcon() -> str | None:
    exe = Path(sys.executable).with_name("colcon")
    return str(exe) if exe.exists() else shutil.which("colcon")


def test_colcon_build_installs_the_package(repo_root, tmp_path):
    colcon = _colcon()
    if colcon is None:
        pytest.skip("colcon is not installed (pip install colcon-core colcon-ros)")
    build, install = tmp_path / "build", tmp_path / "install"
    env = dict(os.environ, COLCON_LOG_PATH=str(tmp_path / "log"), PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [
            colcon,
            "build",
            "--base-paths",
            str(repo_root / "ros2_ws" / "src"),
            "--build-base",
            str(build),
            "--install-base",
            str(install),
            "--event-handlers",
            "console_direct-",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    pkg = install / "blockplan"
    prefix = pkg if pkg.is_dir() else install  # isolated (default) or merged install
    share = prefix / "share" / "blockplan"
    for script in ("blockplan", "planner_node"):  # `ros2 run blockplan <script>` finds these
        assert (prefix / "lib" / "blockplan" / script).is_file(), script
    assert (share / "package.xml").is_file()
    assert (
        prefix / "share" / "ament_index" / "resource_index" / "packages" / "blockplan"
    ).is_file()
    assert (share / "params" / "planner.yaml").is_file()
    assert (share / "rviz" / "blockplan.rviz").is_file()
    for launch_file in (repo_root / "launch").glob("*.py"):
        assert (share / "launch" / launch_file.name).is_file()
