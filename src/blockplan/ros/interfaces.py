"""The rclpy pieces the planner node is built from: QoS profiles, parameter descriptors from
`blockplan.ros.params` specs, and the runtime's clock on the node's ROS clock."""

from __future__ import annotations

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
)
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from blockplan.ros.params import ParameterSpec

# Cameras: sensor-data QoS keeping only the newest frame.
CAMERA_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.BEST_EFFORT,
    durability=DurabilityPolicy.VOLATILE,
)
# Odometry: best effort matches reliable and best-effort publishers; every sample is used.
ODOMETRY_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=10,
    reliability=ReliabilityPolicy.BEST_EFFORT,
    durability=DurabilityPolicy.VOLATILE,
)
ROUTE_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1)
OUTPUT_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=10)

_PARAMETER_TYPES = {
    "bool": ParameterType.PARAMETER_BOOL,
    "integer": ParameterType.PARAMETER_INTEGER,
    "double": ParameterType.PARAMETER_DOUBLE,
    "string": ParameterType.PARAMETER_STRING,
    "string_array": ParameterType.PARAMETER_STRING_ARRAY,
    "integer_array": ParameterType.PARAMETER_INTEGER_ARRAY,
}


def parameter_descriptor(spec: ParameterSpec) -> ParameterDescriptor:
    descriptor = ParameterDescriptor(
        name=spec.name,
        type=_PARAMETER_TYPES[spec.type],
        description=spec.description,
        additional_constraints=spec.additional_constraints,
        read_only=spec.read_only,
    )
    if spec.value_range is not None:
        low, high = spec.value_range
        if spec.type == "double":
            descriptor.floating_point_range = [
                FloatingPointRange(from_value=float(low), to_value=float(high), step=0.0)
            ]
        else:
            descriptor.integer_range = [
                IntegerRange(from_value=int(low), to_value=int(high), step=1)
            ]
    return descriptor


class RosClock:
    """The runtime's clock: the node's ROS clock (sim time under `use_sim_time`)."""

    def __init__(self, node: Node) -> None:
        self._clock = node.get_clock()

    def now_ns(self) -> int:
        return self._clock.now().nanoseconds
