"""The planner node's input callbacks: each converts one message (`blockplan.bags`) and
feeds the runtime; a message that does not convert is counted as an invalid input with its
reason, never raised into the executor."""

from __future__ import annotations

from typing import Any

from blockplan.bags import (
    ImageDecodeError,
    OdometryError,
    beside_from_msg,
    header_stamp_ns,
    image_msg_size,
    image_msg_to_frame,
    lane_pose_from_msg,
    lead_from_msg,
    odometry_to_ego,
    route_from_msg,
)
from blockplan.runtime import InvalidInput


class NodeInputs:
    """PlannerNode's subscription callbacks (a mixin of the lifecycle node)."""

    def _image_callback(self, camera: str, topic: str) -> Any:
        def on_image(msg: Any) -> None:
            runtime = self._runtime
            if runtime is None:
                return
            try:  # size and rate bounds before decoding (RuntimeLimits)
                if not runtime.admits_frame(camera, header_stamp_ns(msg), *image_msg_size(msg)):
                    return
                frame = image_msg_to_frame(msg, camera)
            except ImageDecodeError as e:
                runtime.on_invalid_input(InvalidInput.INVALID_IMAGE, f"{topic}: {e}")
                return
            runtime.on_frame(frame)

        return on_image

    def _on_odometry(self, msg: Any) -> None:
        runtime = self._runtime
        if runtime is None:
            return
        try:
            ego = odometry_to_ego(msg)
        except OdometryError as e:  # a zero quaternion: counted like any bad input
            runtime.on_invalid_input(InvalidInput.ODOMETRY_INVALID_QUATERNION, str(e))
            return
        runtime.on_odometry(ego)

    def _on_joint_state(self, msg: Any) -> None:
        runtime = self._runtime
        if runtime is None:
            return
        try:
            stamp_ns = header_stamp_ns(msg)
        except (AttributeError, ValueError) as e:
            runtime.on_invalid_input("invalid_joint_state", f"joint state header: {e}")
            return
        runtime.on_joint_state(stamp_ns, list(msg.name), list(msg.position))

    def _on_instruction(self, msg: Any) -> None:
        runtime = self._runtime
        if runtime is not None:
            runtime.on_instruction(str(msg.data))

    def _on_route_command(self, msg: Any) -> None:
        runtime = self._runtime
        if runtime is not None:
            runtime.on_route_command(str(msg.data))

    def _on_lane_pose(self, msg: Any) -> None:
        runtime = self._runtime
        if runtime is not None:
            runtime.on_lane_pose(*lane_pose_from_msg(msg))

    def _on_lead(self, msg: Any) -> None:
        runtime = self._runtime
        if runtime is not None:
            runtime.on_lead(*lead_from_msg(msg))

    def _on_beside(self, msg: Any) -> None:
        """The lanes beside carry no header: stamped on arrival with the node's clock (sim
        time under replay)."""
        runtime = self._runtime
        if runtime is None:
            return
        stamp = self.get_clock().now().nanoseconds
        try:
            beside = beside_from_msg(msg)
        except ValueError as e:
            runtime.on_invalid_input(InvalidInput.BESIDE_INVALID, str(e))
            return
        runtime.on_beside(stamp, beside)

    def _on_route(self, msg: Any) -> None:
        """The router's path, in the odometry frame (another frame is refused)."""
        runtime = self._runtime
        if runtime is None:
            return
        try:
            stamp, path = route_from_msg(msg, runtime.config.frames.odom)
        except (ValueError, AttributeError) as e:
            runtime.on_invalid_input(InvalidInput.ROUTE_INVALID, str(e))
            return
        runtime.on_route(stamp, path)
