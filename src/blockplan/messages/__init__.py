"""What the node publishes per control tick, as ROS messages (`tick.py`; no rclpy): the
trajectory, rollouts, reasoning and diagnostics, built with the conversions of
`blockplan.bags`."""
