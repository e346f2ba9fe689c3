#!/usr/bin/env bash
# Source ROS 2 and the blockplan workspace, then run the given command.
set -eo pipefail
# shellcheck disable=SC1090
source "/opt/ros/${ROS_DISTRO}/setup.bash"
# shellcheck disable=SC1091
source /ws/install/setup.bash
exec "$@"
