"""Reading and writing ROS 2 bags (mcap by default, sqlite3 on request) with rosbags.

`BagWriter` registers a connection the first time a topic is written, with the QoS a ROS 2
recorder would offer (sensor data for cameras, transient-local for /tf_static, reliable
otherwise), and is a context manager that always closes the bag, so everything written stays
readable when the caller fails. `flush()` additionally makes the messages written so far
readable from the storage file even if the process is killed before `close()` (handed to the
OS, not fsync'ed: a power loss may still lose them).

A path ending in `.mcap` or `.db3` is written as one file (Foxglove, `ros2 bag play FILE`);
any other path becomes a rosbag2 directory with metadata.yaml.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import shutil
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rosbags.interfaces import (
    Connection,
    MessageDefinitionFormat,
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosbags.rosbag2 import Reader, ReaderError, StoragePlugin, Writer, WriterError
from rosbags.serde import SerdeError
from rosbags.typesys import get_types_from_idl, get_types_from_msg
from rosbags.typesys.store import Typestore

from blockplan.bags.namespace import default_typestore
from blockplan.errors import UserError

log = logging.getLogger(__name__)

STORAGES = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
_FILE_SUFFIX = {"mcap": ".mcap", "sqlite3": ".db3"}
BAG_VERSION = 8  # rosbag2 metadata version of Jazzy

_ZERO = QosTime(0, 0)


def _qos(depth: int, reliability: QosReliability, durability: QosDurability) -> Qos:
    return Qos(
        QosHistory.KEEP_LAST,
        depth,
        reliability,
        durability,
        _ZERO,
        _ZERO,
        QosLiveliness.AUTOMATIC,
        _ZERO,
        False,
    )


QOS_RELIABLE = _qos(10, QosReliability.RELIABLE, QosDurability.VOLATILE)
QOS_SENSOR_DATA = _qos(5, QosReliability.BEST_EFFORT, QosDurability.VOLATILE)
QOS_LATCHED = _qos(1, QosReliability.RELIABLE, QosDurability.TRANSIENT_LOCAL)
_SENSOR_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")


class BagError(UserError, RuntimeError):
    """A bag cannot be opened, read or written; the message names the bag and the problem."""


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        hint = " (free space on that disk)" if error.errno == errno.ENOSPC else ""
        return f"{error.strerror} [errno {error.errno}]{hint}"
    return str(error)


def default_qos(topic: str, msgtype: str) -> Qos:
    if topic == "/tf_static":
        return QOS_LATCHED
    if msgtype in _SENSOR_TYPES:
        return QOS_SENSOR_DATA
    return QOS_RELIABLE


class BagWriter:
    """Writes serialized ROS 2 messages; use as `with BagWriter(path) as bag: bag.write(...)`."""

    def __init__(
        self, path: str | Path, storage: str = "mcap", typestore: Typestore | None = None
    ) -> None:
        if storage not in STORAGES:
            raise BagError(f"storage={storage!r}: must be one of {sorted(STORAGES)}")
        self.path = Path(path)
        self.storage = storage
        self.typestore = typestore or default_typestore()
        self.is_single_file = self.path.suffix in _FILE_SUFFIX.values()
        if self.is_single_file and self.path.suffix != _FILE_SUFFIX[storage]:
            raise BagError(
                f"{self.path}: suffix {self.path.suffix!r} does not fit storage={storage}"
            )
        if self.path.exists():
            raise BagError(f"{self.path} exists already; not overwriting")
        # A single file is written as a hidden rosbag2 directory next to it, then moved.
        self._bag_dir = (
            self.path.with_name(f".{self.path.name}.partial") if self.is_single_file else self.path
        )
        if self._bag_dir.exists():
            raise BagError(f"{self._bag_dir} exists already (a previous run died?); remove it")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer: Writer | None = Writer(
            self._bag_dir, version=BAG_VERSION, storage_plugin=STORAGES[storage]
        )
        self._writer.open()
        self._connections: dict[str, Connection] = {}
        self.num_written = 0

    def __enter__(self) -> BagWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if exc_type is None:
            self.close()
            return
        # The caller failed: keep what was written readable if the bag can still be closed;
        # if closing fails too (a full disk), remove the staging folder so it cannot block
        # the next run, and let the caller's error be the one reported (saying so).
        try:
            self.close()
        except BagError as e:
            log.debug("%s", e)
            if isinstance(exc, BagError) and exc.args:
                exc.args = (f"{exc.args[0]}; the partial bag was removed", *exc.args[1:])

    def discard(self) -> None:
        """Drop the bag being written (a single file's staging folder, or the bag folder):
        after a failed close nothing half-written stays behind."""
        writer, self._writer = self._writer, None
        if writer is not None:
            with contextlib.suppress(Exception):  # the storage is being thrown away
                writer.close()
        shutil.rmtree(self._bag_dir, ignore_errors=True)

    @property
    def is_open(self) -> bool:
        return self._writer is not None

    @property
    def storage_file(self) -> Path:
        """The storage file being written (inside the staging directory until closed)."""
        return self._bag_dir / f"{self._bag_dir.name}{_FILE_SUFFIX[self.storage]}"

    def _connection(self, topic: str, msgtype: str, qos: Qos | None) -> Connection:
        conn = self._connections.get(topic)
        if conn is None:
            assert self._writer is not None
            conn = self._writer.add_connection(
                topic,
                msgtype,
                typestore=self.typestore,
                offered_qos_profiles=[qos or default_qos(topic, msgtype)],
            )
            self._connections[topic] = conn
        elif conn.msgtype != msgtype:
            raise BagError(f"{self.path}: topic {topic} has type {conn.msgtype}, not {msgtype}")
        return conn

    def write(self, topic: str, msg: Any, log_time_ns: int, qos: Qos | None = None) -> None:
        """Serialize `msg` (a typestore message) and write it at `log_time_ns`."""
        msgtype = msg.__msgtype__
        try:
            data = self.typestore.serialize_cdr(msg, msgtype)
        except (ValueError, TypeError, AttributeError, KeyError, struct.error) as e:
            raise BagError(f"{self.path}: cannot serialize {msgtype} for {topic}: {e!r}") from e
        self.write_raw(topic, msgtype, data, log_time_ns, qos)

    def write_raw(
        self, topic: str, msgtype: str, data: bytes, log_time_ns: int, qos: Qos | None = None
    ) -> None:
        if self._writer is None:
            raise BagError(f"{self.path}: write after close")
        if log_time_ns < 0:
            raise BagError(f"{self.path}: log_time_ns={log_time_ns} must be >= 0 ({topic})")
        try:
            self._writer.write(self._connection(topic, msgtype, qos), int(log_time_ns), data)
        except (WriterError, OSError) as e:  # OSError: a full disk, a vanished folder
            raise BagError(f"{self.path}: cannot write {topic}: {_reason(e)}") from e
        self.num_written += 1

    def flush(self) -> None:
        """Hand every message written so far to the storage file (readable if the process dies;
        mcap: without an index, e.g. with mcap's NonSeekingReader)."""
        if self._writer is None:
            return
        storage = self._writer.storage
        # rosbags keeps the current mcap chunk in memory and commits sqlite3 only on close.
        if hasattr(storage, "close_chunk") and storage.chunk.bio.tell():
            storage.close_chunk()
            storage.bio.flush()
        elif hasattr(storage, "conn"):
            storage.conn.commit()

    def close(self) -> None:
        """Write the index / metadata; move a single-file bag into place. Idempotent."""
        writer = self._writer
        if writer is None:
            return
        try:
            writer.close()
            if self.is_single_file:
                self.storage_file.replace(self.path)
                shutil.rmtree(self._bag_dir)
        except (WriterError, OSError) as e:
            self._writer = writer
            self.discard()
            raise BagError(
                f"{self.path}: cannot finish the bag ({_reason(e)}); the partial bag was removed"
            ) from e
        self._writer = None


@dataclass(frozen=True)
class BagRecord:
    """One serialized message as stored: topic, type, log time (ns) and CDR bytes."""

    topic: str
    msgtype: str
    log_time_ns: int
    rawdata: bytes


@dataclass(frozen=True)
class TopicSummary:
    msgtype: str
    num_messages: int


class BagReader:
    """An open bag; created by `open_bag_reader`."""

    def __init__(self, reader: Reader, path: Path, typestore: Typestore) -> None:
        self._reader = reader
        self.path = path
        self.typestore = typestore
        self.topics: dict[str, TopicSummary] = {
            name: TopicSummary(info.msgtype or "", info.msgcount)
            for name, info in reader.topics.items()
        }
        self.start_time_ns = reader.start_time if reader.message_count else 0
        self.end_time_ns = reader.end_time if reader.message_count else 0
        self.num_messages = reader.message_count

    def records(self, topics: Iterable[str] | None = None) -> Iterator[BagRecord]:
        """Messages of `topics` (all when None) in log-time order, still serialized."""
        wanted = None if topics is None else set(topics)
        conns = [c for c in self._reader.connections if wanted is None or c.topic in wanted]
        if not conns:
            return
        try:
            for conn, log_time, raw in self._reader.messages(connections=conns):
                yield BagRecord(conn.topic, conn.msgtype, int(log_time), bytes(raw))
        except ReaderError as e:
            raise BagError(f"{self.path}: cannot read messages: {e}") from e

    def _ensure_type(self, msgtype: str) -> None:
        if msgtype in self.typestore.types:
            return
        for conn in self._reader.connections:
            if conn.msgtype == msgtype and conn.msgdef.data:
                if conn.msgdef.format == MessageDefinitionFormat.IDL:
                    types = get_types_from_idl(conn.msgdef.data)
                else:
                    types = get_types_from_msg(conn.msgdef.data, msgtype)
                self.typestore.register(types)
                return
        raise BagError(f"{self.path}: message type {msgtype} is unknown and has no definition")

    def deserialize(self, record: BagRecord) -> Any:
        """The message of `record`; a corrupt payload raises BagError naming topic and time."""
        self._ensure_type(record.msgtype)
        try:
            return self.typestore.deserialize_cdr(record.rawdata, record.msgtype)
        except (SerdeError, ValueError, IndexError, KeyError, TypeError, struct.error) as e:
            raise BagError(
                f"{self.path}: cannot deserialize {record.msgtype} on {record.topic} at "
                f"{record.log_time_ns} ns: {e!r}"
            ) from e

    def messages(self, topics: Iterable[str] | None = None) -> Iterator[tuple[BagRecord, Any]]:
        for record in self.records(topics):
            yield record, self.deserialize(record)


def _open_hint(path: Path, error: Exception) -> str:
    """What to do about a bag that does not open (appended to the error)."""
    text = str(error)
    if path.is_dir() and not (path / "metadata.yaml").is_file():
        files = sorted(p.name for p in path.iterdir() if p.suffix in _FILE_SUFFIX.values())
        if files:
            return (
                f" (the folder has no metadata.yaml, but holds {', '.join(files)}: pass the "
                f"file itself, e.g. {path / files[0]})"
            )
        return " (a rosbag2 folder holds metadata.yaml and its .mcap / .db3 files)"
    if path.name == "metadata.yaml":
        return f" (pass the bag folder {path.parent}, not its metadata.yaml)"
    if path.suffix == ".mcap" and "end magic" in text:
        return (
            " (the file ends early: the recording was cut off, or it is still being copied; "
            "`mcap recover` of the mcap CLI rebuilds what it holds into a new file)"
        )
    if path.suffix == ".mcap" and "magic" in text:
        return " (this is not an mcap file)"
    return ""


@contextlib.contextmanager
def open_bag_reader(path: str | Path, typestore: Typestore | None = None) -> Iterator[BagReader]:
    """Open a rosbag2 directory, or a bare .mcap / .db3 file, for reading."""
    path = Path(path)
    if not path.exists():
        raise BagError(f"{path}: no such bag")
    try:
        reader = Reader(path)
        reader.open()
    except (ReaderError, OSError, ValueError) as e:
        raise BagError(f"{path}: cannot open as a ROS 2 bag: {e}{_open_hint(path, e)}") from e
    try:
        yield BagReader(reader, path, typestore or default_typestore())
    finally:
        reader.close()
