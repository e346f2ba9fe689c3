"""The ROS 2 adapter (docs/DESIGN.md §1): the only code that imports rclpy.

`blockplan.ros.node` holds the rclpy `PlannerNode`; `interfaces` holds the rclpy QoS,
descriptor and clock glue; `params` (pure Python, tested without ROS) maps the config tree to
declared parameters. Everything the node does beyond adapting lives in the core and is shared
with replay: model loading and warm-up in `blockplan.planner.loading`, tick outputs as messages
in `blockplan.messages.tick`. Importing this package does not import rclpy.
"""
