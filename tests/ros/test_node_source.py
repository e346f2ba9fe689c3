"""Checks of the rclpy node that run without ROS: it parses, every blockplan name it imports
exists, the console script points at it, and only the ros/ adapter modules import rclpy."""

import ast
import configparser
import importlib
import sys

import pytest

RCLPY_MODULES = ("node.py", "interfaces.py", "player.py", "observer.py", "node_parameters.py")
ROS_PACKAGES = ("rclpy", "rcl_interfaces")  # what only a ROS 2 environment provides


def _defined(tree):
    names = set()
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.Assign):
            for target in n.targets:
                names |= {e.id for e in ast.walk(target) if isinstance(e, ast.Name)}
    return names


def _tree(repo_root, name):
    path = repo_root / "src" / "blockplan" / "ros" / name
    return ast.parse(path.read_text(), filename=str(path))


@pytest.mark.parametrize("name", RCLPY_MODULES)
def test_rclpy_modules_parse_and_their_blockplan_imports_resolve(repo_root, name):
    for node in ast.walk(_tree(repo_root, name)):
        if not (isinstance(node, ast.ImportFrom) and node.module.startswith("blockplan")):
            continue
        if node.module.startswith("blockplan.ros.") and f"{node.module[14:]}.py" in RCLPY_MODULES:
            names = _defined(_tree(repo_root, f"{node.module[14:]}.py"))  # needs rclpy to import
        else:
            names = set(dir(importlib.import_module(node.module)))
        for alias in node.names:
            assert alias.name in names, f"{node.module}.{alias.name}"


def test_console_script_points_at_main(repo_root):
    cfg = configparser.ConfigParser()
    cfg.read(repo_root / "setup.cfg")
    scripts = dict(
        line.split(" = ")
        for line in cfg["options.entry_points"]["console_scripts"].strip().splitlines()
    )
    assert scripts["planner_node"] == "blockplan.ros.node:main"
    functions = {n.name for n in _tree(repo_root, "node.py").body if isinstance(n, ast.FunctionDef)}
    assert "main" in functions


def test_only_the_node_modules_import_rclpy(repo_root):
    for path in sorted((repo_root / "src" / "blockplan").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        imported = {
            alias.name.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.Import)
            for alias in n.names
        } | {
            n.module.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.module
        }
        is_node_module = path.parent.name == "ros" and path.name in RCLPY_MODULES
        assert bool(imported & set(ROS_PACKAGES)) == is_node_module, path


def test_the_pure_ros_helpers_import_without_rclpy():
    for name in ("blockplan.ros", "blockplan.ros.params"):
        importlib.import_module(name)
    importlib.import_module("blockplan.messages.tick")
    if importlib.util.find_spec("rclpy") is None:
        assert "rclpy" not in sys.modules


def test_the_node_subclasses_the_lifecycle_node_and_overrides_every_transition(repo_root):
    tree = _tree(repo_root, "node.py")
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "PlannerNode")
    bases = [ast.unparse(b) for b in cls.bases]  # the node's mixins, then the lifecycle node
    assert bases[-1] == "Node" and set(bases[:-1]) <= {"NodeParameters", "NodeInputs"}
    imports = {
        alias.name: n.module
        for n in tree.body
        if isinstance(n, ast.ImportFrom)
        for alias in n.names
    }
    assert imports["Node"] == "rclpy.lifecycle"
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    for transition in ("configure", "activate", "deactivate", "cleanup", "shutdown", "error"):
        assert f"on_{transition}" in methods


def test_the_runtime_warnings_go_through_the_nodes_logger(capsys):
    """`ros.logs`: the package's Python warnings reach the node's ROS logger (severity,
    stamp, /rosout), once, and a dead ROS logger falls back to stderr."""
    import logging

    from blockplan.ros.logs import route_package_logging, unroute_package_logging

    class RosLogger:
        def __init__(self) -> None:
            self.lines: list[tuple[str, str]] = []

        def info(self, m):
            self.lines.append(("info", m))

        def warning(self, m):
            self.lines.append(("warning", m))

        def error(self, m):
            raise RuntimeError("the context is shut down")

    ros = RosLogger()
    handler = route_package_logging(ros)
    try:
        logging.getLogger("blockplan.runtime.core").warning("time jump, runtime reset: %s", "x")
        logging.getLogger("blockplan.runtime.core").info("applied")
        logging.getLogger("blockplan.runtime.core").debug("not shown")
        logging.getLogger("blockplan.runtime.core").error("late")
    finally:
        unroute_package_logging(handler)
    assert ros.lines == [("warning", "time jump, runtime reset: x"), ("info", "applied")]
    assert "[ERROR] blockplan.runtime.core: late" in capsys.readouterr().err
    package = logging.getLogger("blockplan")  # back to normal once the node is gone
    assert package.propagate and package.level == logging.NOTSET
