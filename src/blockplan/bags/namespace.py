"""Message namespaces: one way to build ROS messages, whatever library provides the classes.

The conversion functions in `bags/` never import a message class. They call
`ns.make("nav_msgs/msg/Path", header=..., poses=[...])` on a *message namespace* and read
messages by field name (duck typing). Two namespaces exist:

* `TypestoreMessages` — classes from a rosbags typestore (replay, tests, bag writing). rosbags
  dataclasses have no defaults, so fields not given are filled with zero values derived from
  the typestore's field definitions.
* `ModuleMessages` — classes from generated Python message modules (`sensor_msgs.msg`, …), as
  rclpy uses them in the live node. It relies only on the rosidl convention
  `get_fields_and_field_types()`; it never imports rclpy itself.

Both accept the same Python values: ints, floats, strings, nested messages, lists of messages
and numpy arrays for numeric arrays; each coerces to what its classes need (`octet` fields as
`bytes` and `uint8[]` as `array.array` for rosidl classes).
"""

from __future__ import annotations

import array
import importlib
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from rosbags.interfaces import Nodetype
from rosbags.typesys import Stores, get_typestore
from rosbags.typesys.store import Typestore

ROS_DISTRO_STORE = Stores.ROS2_JAZZY

_NUMPY_DTYPES = {
    "bool": np.bool_,
    "byte": np.uint8,
    "char": np.uint8,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "uint16": np.uint16,
    "int32": np.int32,
    "uint32": np.uint32,
    "int64": np.int64,
    "uint64": np.uint64,
    "float32": np.float32,
    "float64": np.float64,
}

_TYPESTORE: Typestore | None = None


class MessageFieldError(ValueError):
    """A message was built with a field its type does not have, or a value of the wrong kind."""


def default_typestore() -> Typestore:
    """The rosbags typestore of the ROS distribution blockplan targets first (Jazzy)."""
    global _TYPESTORE
    if _TYPESTORE is None:
        _TYPESTORE = get_typestore(ROS_DISTRO_STORE)
    return _TYPESTORE


class MessageNamespace(Protocol):
    """What conversion code needs to build messages."""

    def make(self, msgtype: str, **fields: Any) -> Any:
        """A message of `msgtype` ("pkg/msg/Name") with `fields`; others take zero values."""
        ...

    def constant(self, msgtype: str, name: str) -> int:
        """A constant of a message type as an int (e.g. Marker.LINE_STRIP)."""
        ...


class TypestoreMessages:
    """Message namespace over a rosbags typestore."""

    def __init__(self, typestore: Typestore | None = None) -> None:
        self.typestore = typestore or default_typestore()

    def _fielddefs(self, msgtype: str) -> tuple[list, list]:
        try:
            return self.typestore.fielddefs[msgtype]
        except KeyError:
            raise MessageFieldError(f"unknown message type {msgtype!r} in the typestore") from None

    def make(self, msgtype: str, **fields: Any) -> Any:
        _, defs = self._fielddefs(msgtype)
        known = {name for name, _ in defs}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise MessageFieldError(f"{msgtype} has no field {unknown[0]!r}")
        values = {}
        for name, desc in defs:
            if name in fields:
                values[name] = self._coerce(msgtype, name, desc, fields[name])
            else:
                values[name] = self._zero(desc)
        return self.typestore.types[msgtype](**values)

    def constant(self, msgtype: str, name: str) -> int:
        consts, _ = self._fielddefs(msgtype)
        for cname, _, value in consts:
            if cname == name:
                return int(value)
        raise MessageFieldError(f"{msgtype} has no constant {name!r}")

    def _zero(self, desc: tuple) -> Any:
        nodetype, detail = desc
        if nodetype == Nodetype.BASE:
            typ = detail[0]
            if typ == "string" or typ == "wstring":
                return ""
            if typ == "bool":
                return False
            if typ in ("float32", "float64"):
                return 0.0
            return 0
        if nodetype == Nodetype.NAME:
            return self.make(detail)
        sub, length = detail
        if sub[0] == Nodetype.BASE and sub[1][0] in _NUMPY_DTYPES:
            return np.zeros(length if nodetype == Nodetype.ARRAY else 0, _NUMPY_DTYPES[sub[1][0]])
        if nodetype == Nodetype.ARRAY:
            return [self._zero(sub) for _ in range(length)]
        return []

    def _coerce(self, msgtype: str, name: str, desc: tuple, value: Any) -> Any:
        nodetype, detail = desc
        if nodetype in (Nodetype.ARRAY, Nodetype.SEQUENCE):
            sub, length = detail
            if sub[0] == Nodetype.BASE and sub[1][0] in _NUMPY_DTYPES:
                arr = np.ascontiguousarray(value, dtype=_NUMPY_DTYPES[sub[1][0]]).reshape(-1)
                if nodetype == Nodetype.ARRAY and arr.size != length:
                    raise MessageFieldError(
                        f"{msgtype}.{name}: needs {length} values, got {arr.size}"
                    )
                return arr
            return list(value)
        if nodetype == Nodetype.BASE:
            typ = detail[0]
            if typ in ("float32", "float64"):
                return float(value)
            if typ == "bool":
                return bool(value)
            if typ in ("string", "wstring"):
                return str(value)
            return int(value)
        return value


def _import_rosidl_class(msgtype: str) -> type:
    package, _, name = msgtype.split("/")
    module = importlib.import_module(f"{package}.msg")
    return getattr(module, name)


class ModuleMessages:
    """Message namespace over generated rosidl Python classes (what rclpy uses).

    `resolve` maps "pkg/msg/Name" to the class; by default it imports `pkg.msg`.
    """

    def __init__(self, resolve: Callable[[str], type] = _import_rosidl_class) -> None:
        self._resolve = resolve
        self._classes: dict[str, type] = {}

    def message_class(self, msgtype: str) -> type:
        if msgtype not in self._classes:
            try:
                self._classes[msgtype] = self._resolve(msgtype)
            except (ImportError, AttributeError, ValueError) as e:
                raise MessageFieldError(f"cannot import message type {msgtype!r}: {e}") from e
        return self._classes[msgtype]

    def make(self, msgtype: str, **fields: Any) -> Any:
        cls = self.message_class(msgtype)
        types = cls.get_fields_and_field_types()
        unknown = sorted(set(fields) - set(types))
        if unknown:
            raise MessageFieldError(f"{msgtype} has no field {unknown[0]!r}")
        values = {name: _coerce_rosidl(types[name], value) for name, value in fields.items()}
        return cls(**values)

    def constant(self, msgtype: str, name: str) -> int:
        value = getattr(self.message_class(msgtype), name, None)
        if value is None:
            raise MessageFieldError(f"{msgtype} has no constant {name!r}")
        return value[0] if isinstance(value, bytes) else int(value)


def _coerce_rosidl(field_type: str, value: Any) -> Any:
    """rosidl setters: `octet` wants bytes, `sequence<uint8>` is fastest as array.array('B'),
    fixed numeric arrays take numpy arrays of the exact dtype."""
    if field_type == "octet" and isinstance(value, (int, np.integer)):
        return bytes([int(value)])
    if field_type in ("sequence<uint8>", "sequence<octet>") or field_type.startswith("uint8["):
        if isinstance(value, np.ndarray):
            return array.array("B", np.ascontiguousarray(value, dtype=np.uint8).tobytes())
        if isinstance(value, (bytes, bytearray, memoryview)):
            return array.array("B", bytes(value))
        return value
    if field_type.startswith(("double[", "float[")) and not field_type.startswith("sequence"):
        dtype = np.float64 if field_type.startswith("double") else np.float32
        return np.asarray(value, dtype=dtype)
    if field_type in ("double", "float"):
        return float(value)
    return value
