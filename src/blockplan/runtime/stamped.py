"""A short buffer of stamped inputs that the planner reads at a window's stamp.

The lane pose (localisation) and the car ahead (a tracker or radar) arrive on their own
topics at their own rates. A request takes the newest value not after the window's stamp,
and only if it is recent enough; otherwise the planner plans without it (the model's
"unknown"). Late or re-sent values never replace a newer one; a stamp far behind the newest
is a restarted timeline and empties the buffer.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

from blockplan.types import seconds_to_ns

Value = TypeVar("Value")


class StampedInputs(Generic[Value]):
    """(stamp, value) pairs, oldest first; `maxlen` covers `max_age_s` at any sane rate."""

    def __init__(self, max_age_s: float, time_jump_s: float, maxlen: int = 256) -> None:
        self.max_age_ns = seconds_to_ns(max_age_s)
        self.time_jump_ns = seconds_to_ns(time_jump_s)
        self.items: deque[tuple[int, Value]] = deque(maxlen=maxlen)

    def push(self, stamp_ns: int, value: Value) -> bool:
        """Keep `value`; False when it is not newer than the newest kept (dropped)."""
        newest = self.items[-1][0] if self.items else None
        if newest is not None and stamp_ns < newest - self.time_jump_ns:
            self.items.clear()  # the timeline restarted
        elif newest is not None and stamp_ns <= newest:
            return False
        self.items.append((int(stamp_ns), value))
        return True

    def at(self, stamp_ns: int) -> Value | None:
        """The newest value not after `stamp_ns` and at most `max_age_s` older, or None."""
        oldest = stamp_ns - self.max_age_ns
        for stamp, value in reversed(self.items):
            if stamp <= stamp_ns:
                return value if stamp >= oldest else None
        return None

    def newest(self) -> tuple[int, Value] | None:
        """The newest (stamp, value); safe against a `clear` on another thread."""
        try:
            return self.items[-1]
        except IndexError:
            return None

    def clear(self) -> None:
        self.items.clear()

    def __len__(self) -> int:
        return len(self.items)
