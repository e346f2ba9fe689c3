"""The lanes beside the ego's as std_msgs/Float64MultiArray ↔ a (2, 5) array.

What a map (the lane count) and an object tracker (the cars) report about the lane lines
either side of the ego: per side, left then right, [lanes on that side, gap to the nearest
car ahead in the line beside (m, centre to centre along the ego's heading), that car's
speed (m/s), gap to the nearest car behind, its speed]. A gap is `.inf` when no car is
there (its speed then 0, not read); NaN marks what the sender does not know (a lane count
without a map, gaps without a tracker), so that "no car" and "no report" stay different
things. The layout's two dimensions are labelled (`side`: 2, `field`: 5), and a message with
another layout is refused, not guessed at.

The message has no header: the receiver stamps it on arrival (the node with its clock, a
replay with the bag's log time), and it is fresh for `max_beside_age_s` from then.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blockplan.bags.namespace import MessageNamespace

BESIDE_FIELDS = ("lanes", "gap_ahead_m", "speed_ahead_mps", "gap_behind_m", "speed_behind_mps")
BESIDE_DIMS = (("side", 2), ("field", len(BESIDE_FIELDS)))


def beside_to_msg(ns: MessageNamespace, beside: np.ndarray) -> Any:
    """(2, 5) lanes beside → std_msgs/Float64MultiArray with the labelled layout; a speed
    without a car (infinite gap) is written as 0."""
    values = np.array(beside, dtype=np.float64).reshape(2, 5)
    for gap, speed in ((1, 2), (3, 4)):
        values[:, speed] = np.where(np.isinf(values[:, gap]), 0.0, values[:, speed])
    dims = [
        ns.make("std_msgs/msg/MultiArrayDimension", label=label, size=size, stride=stride)
        for (label, size), stride in zip(BESIDE_DIMS, (values.size, values.shape[1]), strict=True)
    ]
    layout = ns.make("std_msgs/msg/MultiArrayLayout", dim=dims, data_offset=0)
    return ns.make("std_msgs/msg/Float64MultiArray", layout=layout, data=values.reshape(-1))


def beside_from_msg(msg: Any) -> np.ndarray:
    """std_msgs/Float64MultiArray → (2, 5) lanes beside, the values as found (the runtime
    checks them); ValueError for another layout."""
    dims = tuple((str(d.label), int(d.size)) for d in msg.layout.dim)
    data = np.asarray(msg.data, dtype=np.float64)
    if dims != BESIDE_DIMS or int(msg.layout.data_offset) != 0 or data.size != 10:
        raise ValueError(
            f"lanes beside: layout {list(dims)} with offset {int(msg.layout.data_offset)} and "
            f"{data.size} values; expected {list(BESIDE_DIMS)}, offset 0, 10 values "
            f"(per side: {', '.join(BESIDE_FIELDS)})"
        )
    return data.reshape(2, 5)
