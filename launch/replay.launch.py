"""Replay a recorded bag into the live planner node and watch it in RViz.

Plays the bag with `--clock` so the node runs on sim time, starts the planner (auto-activated)
and RViz. Arguments: bag (required), rate (playback rate), params_file, model_dir, rviz.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, ExecuteProcess, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration

from launch import LaunchDescription


def generate_launch_description():
    share = get_package_share_directory("blockplan")
    arguments = [
        DeclareLaunchArgument("bag", description="path to the ROS 2 bag to play"),
        DeclareLaunchArgument("rate", default_value="1.0", description="playback rate"),
        DeclareLaunchArgument(
            "params_file",
            default_value=os.path.join(share, "params", "planner.yaml"),
            description="ROS 2 params YAML for the planner",
        ),
        DeclareLaunchArgument("model_dir", default_value="", description="model folder"),
        DeclareLaunchArgument("rviz", default_value="true", description="start RViz"),
    ]
    play = ExecuteProcess(
        cmd=[
            "ros2",
            "bag",
            "play",
            LaunchConfiguration("bag"),
            "--clock",
            "--rate",
            LaunchConfiguration("rate"),
        ],
        output="screen",
    )
    planner = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(share, "launch", "planner.launch.py")),
        launch_arguments={
            "params_file": LaunchConfiguration("params_file"),
            "model_dir": LaunchConfiguration("model_dir"),
            "use_sim_time": "true",
            "rviz": LaunchConfiguration("rviz"),
            "auto_activate": "true",
        }.items(),
    )
    return LaunchDescription([*arguments, planner, play])
