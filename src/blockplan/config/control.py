"""`control.*` and `fallback.*`: the fixed-rate loop and what it publishes without a plan."""

from __future__ import annotations

from dataclasses import dataclass

from blockplan.config.fields import MAX_RATE_HZ, _check, _check_fields, choice, signed

TIMING_MODES = ("ideal", "measured")
FALLBACK_POLICIES = ("stop", "hold_last")


@dataclass(frozen=True)
class ControlConfig:
    """The fixed-rate control loop (docs/DESIGN.md §5)."""

    rate_hz: float = signed(10.0, "> 0")
    max_plan_age_s: float = signed(1.0, "> 0")
    # When a replayed plan becomes available (blockplan replay; the live node runs in real
    # time and has no such setting).
    timing: str = choice("ideal", TIMING_MODES, node_parameter=False)

    def __post_init__(self) -> None:
        _check_fields(self, "control")
        _check(
            self.rate_hz <= MAX_RATE_HZ,
            "control.rate_hz",
            self.rate_hz,
            f"must be <= {MAX_RATE_HZ}",
        )


@dataclass(frozen=True)
class FallbackConfig:
    """What is published when there is no fresh valid plan."""

    policy: str = choice("hold_last", FALLBACK_POLICIES)
    stop_deceleration: float = signed(2.0, "> 0")
    max_hold_age_s: float = signed(1.5, "> 0")

    def __post_init__(self) -> None:
        _check_fields(self, "fallback")
