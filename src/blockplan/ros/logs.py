"""The blockplan package's Python logging (the runtime's warnings: a time jump, a stale
camera) through a ROS node's logger, so that they carry a severity and a stamp, reach
/rosout and sit next to the node's own lines. Pure Python: no rclpy import here."""

from __future__ import annotations

import logging
import sys
from typing import Any

PACKAGE_LOGGER = "blockplan"


class RosLogHandler(logging.Handler):
    """Forwards INFO-and-up records to a ROS logger (`node.get_logger()`: .info/.warning/
    .error); after the ROS context is gone (Ctrl-C) the line goes to stderr instead."""

    def __init__(self, ros_logger: Any) -> None:
        super().__init__(logging.INFO)
        self.ros_logger = ros_logger
        self.level_before = logging.NOTSET  # the package logger's level, restored at the end

    def emit(self, record: logging.LogRecord) -> None:
        line = self.format(record)
        if record.levelno >= logging.ERROR:
            log = self.ros_logger.error
        elif record.levelno >= logging.WARNING:
            log = self.ros_logger.warning
        else:
            log = self.ros_logger.info
        try:
            log(line)
        except Exception:
            print(f"[{record.levelname}] {record.name}: {line}", file=sys.stderr, flush=True)


def route_package_logging(ros_logger: Any) -> RosLogHandler:
    """Attach a `RosLogHandler` to the package's logger (INFO and up) and return it (pass
    it to `unroute_package_logging` when the node goes)."""
    handler = RosLogHandler(ros_logger)
    package = logging.getLogger(PACKAGE_LOGGER)
    package.addHandler(handler)
    handler.level_before = package.level
    if package.level == logging.NOTSET or package.level > logging.INFO:
        package.setLevel(logging.INFO)
    package.propagate = False  # not printed a second time, bare, by the root's handlers
    return handler


def unroute_package_logging(handler: RosLogHandler) -> None:
    package = logging.getLogger(PACKAGE_LOGGER)
    package.removeHandler(handler)
    if not any(isinstance(h, RosLogHandler) for h in package.handlers):
        package.propagate = True
        package.setLevel(handler.level_before)
