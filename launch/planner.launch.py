"""Launch the blockplan planner as a lifecycle node (auto-configured and activated).

Arguments:
  params_file   ROS 2 params YAML (default: the installed params/planner.yaml)
  model_dir     model folder; overrides `model.dir` from the params file when set
  namespace     namespace for the node and its topics (default: none)
  use_sim_time  true when replaying a bag with `ros2 bag play --clock`
  rviz          true to start RViz with rviz/blockplan.rviz
  auto_activate true to drive the lifecycle node to `active` at start (once: a later
                configure by hand is left for the operator to activate)
"""

import os

from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
from launch.actions import (
    DeclareLaunchArgument,
    EmitEvent,
    LogInfo,
    OpaqueFunction,
    RegisterEventHandler,
)
from launch.conditions import IfCondition
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration, PythonExpression
from launch_ros.actions import LifecycleNode, Node
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from lifecycle_msgs.msg import Transition

from launch import LaunchDescription


def _rviz(context, *args, **kwargs):
    """RViz when asked for and installed (a minimal ROS runtime may lack rviz2)."""
    if LaunchConfiguration("rviz").perform(context).lower() not in ("true", "1"):
        return []
    try:
        get_package_share_directory("rviz2")
    except PackageNotFoundError:
        return [LogInfo(msg="rviz:=true but rviz2 is not installed: not starting RViz")]
    share = get_package_share_directory("blockplan")
    use_sim_time = LaunchConfiguration("use_sim_time").perform(context).lower() == "true"
    return [
        Node(
            package="rviz2",
            executable="rviz2",
            arguments=["-d", os.path.join(share, "rviz", "blockplan.rviz")],
            parameters=[{"use_sim_time": use_sim_time}],
            output="screen",
        )
    ]


NODE_NAME = "blockplan_planner"


def _check_params_file(context, *args, **kwargs):
    """Refuse a params file the node could not use: missing, not YAML, or without a section
    for this node (a misspelled node name is ignored by ROS without a word)."""
    import yaml

    path = LaunchConfiguration("params_file").perform(context)
    if not os.path.isfile(path):
        raise RuntimeError(f"params_file:={path}: no such file")
    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise RuntimeError(f"params_file:={path}: cannot read it: {e}") from e
    keys = list(doc) if isinstance(doc, dict) else []
    if not any(k == "/**" or "*" in k or k.strip("/").split("/")[-1] == NODE_NAME for k in keys):
        raise RuntimeError(
            f"params_file:={path}: no section for node {NODE_NAME!r} (it has {keys}); the "
            "node would ignore the file"
        )
    return []


def generate_launch_description():
    share = get_package_share_directory("blockplan")
    params_file = LaunchConfiguration("params_file")
    model_dir = LaunchConfiguration("model_dir")
    namespace = LaunchConfiguration("namespace")
    use_sim_time = LaunchConfiguration("use_sim_time")
    auto_activate = LaunchConfiguration("auto_activate")

    arguments = [
        DeclareLaunchArgument(
            "params_file",
            default_value=os.path.join(share, "params", "planner.yaml"),
            description="ROS 2 params YAML for the planner",
        ),
        DeclareLaunchArgument(
            "model_dir", default_value="", description="model folder (overrides model.dir)"
        ),
        DeclareLaunchArgument("namespace", default_value="", description="node namespace"),
        DeclareLaunchArgument(
            "use_sim_time", default_value="false", description="use /clock (bag replay)"
        ),
        DeclareLaunchArgument("rviz", default_value="false", description="start RViz"),
        DeclareLaunchArgument(
            "auto_activate", default_value="true", description="configure + activate at start"
        ),
    ]

    overrides = {"use_sim_time": PythonExpression(["'", use_sim_time, "' == 'true'"])}
    planner = LifecycleNode(
        package="blockplan",
        executable="planner_node",
        name=NODE_NAME,
        namespace=namespace,
        parameters=[params_file, overrides, {"model_dir_override": model_dir}],
        output="screen",
        emulate_tty=True,
    )

    configure = EmitEvent(
        event=ChangeState(
            lifecycle_node_matcher=matches_action(planner),
            transition_id=Transition.TRANSITION_CONFIGURE,
        ),
        condition=IfCondition(auto_activate),
    )
    activate = EmitEvent(
        event=ChangeState(
            lifecycle_node_matcher=matches_action(planner),
            transition_id=Transition.TRANSITION_ACTIVATE,
        )
    )
    started = []  # whether the start's configure has been answered with activate

    def _activate_after_the_first_configure(context, *args, **kwargs):
        """Activate after the start's configure only: not after a configure by hand (a
        cleanup + configure to take a new model folder or parameters would be activated
        behind the operator's back, racing their own activate)."""
        if started:
            return []
        started.append(True)
        return [activate]

    # Activate right after a successful configure only: not after a failed activate (which
    # also ends in `inactive`: it would retry without end) nor after a manual deactivate.
    # (handle_once would also do, but an unregistered lifecycle handler keeps `ros2 launch`
    # from ending on SIGINT.)
    activate_when_inactive = RegisterEventHandler(
        OnStateTransition(
            target_lifecycle_node=planner,
            start_state="configuring",
            goal_state="inactive",
            entities=[OpaqueFunction(function=_activate_after_the_first_configure)],
        ),
        condition=IfCondition(auto_activate),
    )

    rviz = OpaqueFunction(function=_rviz)
    check = OpaqueFunction(function=_check_params_file)
    return LaunchDescription([*arguments, check, planner, activate_when_inactive, configure, rviz])
