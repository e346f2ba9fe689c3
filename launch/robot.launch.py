"""Launch the blockplan planner for a robot arm: planner.launch.py with params/robot.yaml
(`model.embodiment: robot`, the cameras front and wrist, /joint_states, /instruction in; the
action as TwistStamped on /servo_node/delta_twist_cmds, the gripper on /gripper/command and
each chunk as JointTrajectory on /planning/action_chunk out, at control.rate_hz = 30 Hz).

Arguments: those of planner.launch.py (params_file defaults to the installed
params/robot.yaml; model_dir, namespace, use_sim_time, auto_activate).
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration

from launch import LaunchDescription


def generate_launch_description():
    share = get_package_share_directory("blockplan")
    names = ("params_file", "model_dir", "namespace", "use_sim_time", "auto_activate")
    defaults = {
        "params_file": os.path.join(share, "params", "robot.yaml"),
        "model_dir": "",
        "namespace": "",
        "use_sim_time": "false",
        "auto_activate": "true",
    }
    arguments = [
        DeclareLaunchArgument(
            name, default_value=defaults[name], description=f"see planner.launch.py: {name}"
        )
        for name in names
    ]
    planner = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(share, "launch", "planner.launch.py")),
        launch_arguments={name: LaunchConfiguration(name) for name in names}.items(),
    )
    return LaunchDescription([*arguments, planner])
