"""The ROS 2 adapter (DESIGN.md §1): the only code that imports rclpy.

`blockplan.ros.node` holds the rclpy `PlannerNode`; the other modules here are pure Python
(no rclpy) so they are tested on machines without ROS: parameter descriptors from the config
tree (`params`), model loading and warm-up (`model`), tick outputs as messages (`outputs`).
Importing this package does not import rclpy.
"""
