"""The ROS-free runtime: frame ring buffers and window snapshots, ego history, one inference
worker, the fixed-rate control loop with stitching and fallback, health and diagnostics.
The live node and the replay drive the same `PlannerRuntime`."""

from blockplan.runtime.clock import Clock, SystemClock, VirtualClock, default_stopwatch
from blockplan.runtime.ego import EgoHistory, OdometryResult
from blockplan.runtime.frames import (
    CameraRingBuffer,
    CameraState,
    CameraStatus,
    FrameWindow,
    PushResult,
    WindowSnapshot,
)
from blockplan.runtime.health import Count, DiagnosticStatusData, Health, InvalidInput
from blockplan.runtime.limits import RuntimeLimits
from blockplan.runtime.loop import PlannerRuntime
from blockplan.runtime.output import TickOutput, choose_trajectory
from blockplan.runtime.planner import ConstantVelocityPlanner, RuntimePlanner
from blockplan.runtime.plans import AcceptedPlan, InvalidPlanError, plan_trajectory
from blockplan.runtime.worker import (
    ErrorKind,
    InferenceRequest,
    InferenceResult,
    InferenceWorker,
    ThreadWorker,
    VirtualWorker,
    plan_postprocess,
)

__all__ = [
    "AcceptedPlan",
    "CameraRingBuffer",
    "CameraState",
    "CameraStatus",
    "Clock",
    "Count",
    "ConstantVelocityPlanner",
    "DiagnosticStatusData",
    "EgoHistory",
    "FrameWindow",
    "Health",
    "ErrorKind",
    "InferenceRequest",
    "InferenceResult",
    "InferenceWorker",
    "InvalidInput",
    "InvalidPlanError",
    "OdometryResult",
    "RuntimePlanner",
    "PlannerRuntime",
    "PushResult",
    "RuntimeLimits",
    "SystemClock",
    "ThreadWorker",
    "TickOutput",
    "VirtualClock",
    "VirtualWorker",
    "WindowSnapshot",
    "choose_trajectory",
    "default_stopwatch",
    "plan_postprocess",
    "plan_trajectory",
]
