"""The planner node's parameters: declared with descriptors, read into the config, and
changes under load checked at once (a change the config would refuse is refused; an accepted
one waits for the next configure and is named on /diagnostics until then)."""

from __future__ import annotations

from typing import Any

from rcl_interfaces.msg import SetParametersResult

from blockplan.config import ConfigError, PlannerConfig
from blockplan.ros.interfaces import (
    parameter_descriptor,
)
from blockplan.ros.params import (
    ParameterSpec,
    base_parameter_specs,
    camera_parameter_specs,
    config_from_values,
    unknown_parameters,
)
from blockplan.runtime.health import OK, WARN, DiagnosticStatusData


class NodeParameters:
    """PlannerNode's parameter handling (a mixin of the lifecycle node)."""

    def _declare(self, specs: list[ParameterSpec]) -> None:
        for spec in specs:
            if not self.has_parameter(spec.name):  # a second configure keeps the values
                self.declare_parameter(spec.name, spec.default, parameter_descriptor(spec))
                self._declared[spec.name] = spec

    def _values(self) -> dict[str, Any]:
        return {name: self.get_parameter(name).value for name in self._declared}

    def _read_parameters(self) -> PlannerConfig:
        self._declare(base_parameter_specs())
        self._declare(camera_parameter_specs(list(self.get_parameter("cameras.names").value)))
        # rclpy keeps the params-file values in `_parameter_overrides` (no public accessor);
        # one the node does not declare is a typo that would otherwise be ignored.
        given = getattr(self, "_parameter_overrides", {})
        unknown = unknown_parameters(given, self._declared)
        if unknown:
            raise ConfigError(f"unknown parameter(s) {unknown}: not fields of the planner config")
        values = self._values()
        config = config_from_values(values)
        self._configured_values, self._pending, self._refused = values, {}, []
        if not self._is_validating_changes:
            self.add_on_set_parameters_callback(self._on_set_parameters)
            self._is_validating_changes = True
        return config

    def _on_set_parameters(self, parameters: list[Any]) -> SetParametersResult:
        """Reject a change the config would reject; accepted ones apply at the next
        configure (deactivate → cleanup → configure → activate)."""
        declared = self._declared
        changes = {
            p.name: p.value
            for p in parameters
            if p.name in declared and not declared[p.name].read_only  # rclpy refuses those
        }
        if not changes:
            return SetParametersResult(successful=True)
        try:
            config_from_values({**self._values(), **changes})
        except ConfigError as e:
            given = ", ".join(f"{k}={v!r}" for k, v in sorted(changes.items()))
            self._refused = [*self._refused[-4:], f"{given} ({e})"]
            return SetParametersResult(successful=False, reason=str(e))
        for name, value in changes.items():
            if name in self._configured_values and value == self._configured_values[name]:
                self._pending.pop(name, None)  # back to what runs
            else:
                self._pending[name] = value
        self.get_logger().info(f"{sorted(changes)} changed: applied at the next configure")
        return SetParametersResult(successful=True)

    def _parameters_status(self) -> DiagnosticStatusData:
        """`blockplan: parameters`: OK while the parameters are those the running config
        was built from; WARN naming the changes that wait for the next configure and the
        changes refused since the last diagnostics."""
        pending, refused = dict(self._pending), self._refused
        self._refused = []
        parts = []
        if pending:
            changed = ", ".join(f"{k}={v!r}" for k, v in sorted(pending.items()))
            parts.append(f"changed since configure, applied at the next configure: {changed}")
        if refused:
            parts.append(f"refused: {'; '.join(refused)}")
        values = {"pending": ", ".join(sorted(pending)) or "none"}
        if not parts:
            return DiagnosticStatusData("blockplan: parameters", OK, "as configured", values=values)
        return DiagnosticStatusData("blockplan: parameters", WARN, "; ".join(parts), values=values)
