"""Replay a recorded bag into the live planner node and watch it in RViz.

Starts the planner on sim time (auto-activated) and, once it is active, plays the bag with
`/clock`: with `ros2 bag play` where rosbag2 is installed, else with `blockplan play` (the
package's own rclpy + rosbags player, same flags). Arguments: bag (required), rate (playback
rate), player (auto | ros2bag | blockplan), params_file, model_dir, rviz.
"""

import importlib.util
import os

from ament_index_python.packages import get_package_prefix, get_package_share_directory
from launch.actions import (
    DeclareLaunchArgument,
    ExecuteProcess,
    GroupAction,
    IncludeLaunchDescription,
    LogInfo,
    OpaqueFunction,
    RegisterEventHandler,
)
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration
from launch_ros.event_handlers import OnStateTransition

from launch import LaunchDescription

PLAYERS = ("auto", "ros2bag", "blockplan")


def has_ros2_bag() -> bool:
    """Whether `ros2 bag` (rosbag2's ros2cli verb) is installed."""
    return importlib.util.find_spec("ros2bag") is not None


def _play(context, *args, **kwargs):
    bag = LaunchConfiguration("bag").perform(context)
    rate = LaunchConfiguration("rate").perform(context)
    player = LaunchConfiguration("player").perform(context)
    if player not in PLAYERS:
        raise RuntimeError(f"player:={player}: must be one of {', '.join(PLAYERS)}")
    if player == "ros2bag" and not has_ros2_bag():
        raise RuntimeError(
            "player:=ros2bag but rosbag2 (`ros2 bag`) is not installed; use player:=blockplan"
        )
    if player == "ros2bag" or (player == "auto" and has_ros2_bag()):
        return [
            ExecuteProcess(
                cmd=["ros2", "bag", "play", bag, "--clock", "--rate", rate], output="screen"
            )
        ]
    blockplan = os.path.join(get_package_prefix("blockplan"), "lib", "blockplan", "blockplan")
    note = "" if player == "blockplan" else "rosbag2 (`ros2 bag`) is not installed: "
    return [
        LogInfo(msg=f"{note}playing {bag} with `blockplan play --clock`"),
        ExecuteProcess(cmd=[blockplan, "play", bag, "--clock", "--rate", rate], output="screen"),
    ]


def generate_launch_description():
    share = get_package_share_directory("blockplan")
    arguments = [
        DeclareLaunchArgument("bag", description="path to the ROS 2 bag to play"),
        DeclareLaunchArgument("rate", default_value="1.0", description="playback rate"),
        DeclareLaunchArgument(
            "player",
            default_value="auto",
            description="ros2bag, blockplan, or auto (ros2 bag where installed)",
        ),
        DeclareLaunchArgument(
            "params_file",
            default_value=os.path.join(share, "params", "planner.yaml"),
            description="ROS 2 params YAML for the planner",
        ),
        DeclareLaunchArgument("model_dir", default_value="", description="model folder"),
        DeclareLaunchArgument("rviz", default_value="true", description="start RViz"),
    ]
    # The planner on sim time, auto-activated. A scope that forwards only these three keeps
    # the arguments replay sets itself (use_sim_time, auto_activate) out of `--show-args`.
    passed = ("params_file", "model_dir", "rviz")
    planner = GroupAction(
        [
            IncludeLaunchDescription(
                PythonLaunchDescriptionSource(os.path.join(share, "launch", "planner.launch.py")),
                launch_arguments={
                    **{name: LaunchConfiguration(name) for name in passed},
                    "use_sim_time": "true",
                    "auto_activate": "true",
                }.items(),
            )
        ],
        forwarding=False,
        launch_configurations={name: LaunchConfiguration(name) for name in passed},
    )
    # The bag starts once the planner is active, so no frame is played into a node still
    # loading its model.
    play_when_active = RegisterEventHandler(
        OnStateTransition(
            goal_state="active", entities=[OpaqueFunction(function=_play)], handle_once=True
        )
    )
    return LaunchDescription([*arguments, play_when_active, planner])
