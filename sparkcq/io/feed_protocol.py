r"""The feed protocol (``docs/feed.md``): the messages a live source sends, read from their frames.

A frame is one line of JSON (newline-delimited), or for bulk rows a line announcing an
Arrow IPC stream followed by exactly that many bytes of it:

    {"kind": "CONNECT", "stream": "packets", "producer": "router-1", "token": "..."}
    {"kind": "HEADER", "columns": "pid BIGINT, t TIMESTAMP, bytes INT", "event_time": "t"}
    {"kind": "INSERTION", "seq": 1, "rows": [{"pid": 1, "t": "2026-01-01T00:00:00Z", ...}]}
    {"kind": "INSERTION", "seq": 2, "format": "arrow", "bytes": 1234}\n<1234 bytes>
    {"kind": "BOUNDARY", "seq": 3, "time": "2026-01-01T00:00:05Z"}
    {"kind": "STOP"}   {"kind": "REMOVE"}   {"kind": "DELETE", "rows": [...]}

Every message gets one answer line, in order: ``{"ok": true, "seq": ..., ...}`` or
``{"ok": false, "error": "...", "kind": "...", "seq": ...}``. A message that cannot be read
is answered with an error and skipped; the connection stays usable. ``seq`` (optional, a
positive whole number increasing per producer) makes a resend after a reconnect safe: the
server acknowledges a message it already holds durably without taking it twice.

This module only reads and checks messages; what they do is the server's (``server/feed.py``)
and the stream's source's (``io/feed_source.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pyarrow as pa

from sparkcq.errors import FeedError

#: what an Arrow frame's announcing line says in "format"
ARROW_FORMAT = "arrow"


class MessageKind(StrEnum):
    """The kinds of feed messages (``docs/feed.md``), plus CONNECT, which opens a connection."""

    CONNECT = "CONNECT"
    HEADER = "HEADER"
    INSERTION = "INSERTION"
    DELETE = "DELETE"
    BOUNDARY = "BOUNDARY"
    STOP = "STOP"
    REMOVE = "REMOVE"


class FeedMessageError(FeedError):
    """A message that cannot be read or does not have the fields its kind needs."""

    def __init__(self, message: str, seq: int | None = None, raw: str = ""):
        super().__init__(message)
        self.seq = seq
        self.raw = raw  # the start of the message as sent, for its dead letter


class OversizedError(FeedMessageError):
    """A frame over the server's limit; it was skipped unread."""


@dataclass(frozen=True)
class Connect:
    """The first message of a TCP connection: which stream it feeds, as which producer."""

    stream: str
    producer: str | None
    token: str | None


@dataclass(frozen=True)
class Header:
    """The stream's schema: columns (DDL text or name/type pairs), event time, and the
    optional end time, key, lateness and time unit (as CREATE STREAM's options).
    """

    columns: tuple[tuple[str, str], ...]
    options: dict[str, str]
    seq: int | None = None


@dataclass(frozen=True)
class Insertion:
    """Rows: a list of JSON objects, or an Arrow table."""

    rows: list[Any] | pa.Table
    seq: int | None = None


@dataclass(frozen=True)
class Delete:
    """Keys whose current rows end (keyed streams): objects with the key and event time."""

    rows: list[Any]
    seq: int | None = None


@dataclass(frozen=True)
class Boundary:
    """A heartbeat: no later message of the stream will be older than ``time``."""

    time: Any
    seq: int | None = None


@dataclass(frozen=True)
class Stop:
    """The producer pauses: the operators fed by the stream pause until data resumes."""

    seq: int | None = None


@dataclass(frozen=True)
class Remove:
    """The stream leaves the catalog; the queries reading it stop."""

    seq: int | None = None


Message = Connect | Header | Insertion | Delete | Boundary | Stop | Remove

#: HEADER fields that become CREATE STREAM options
HEADER_OPTIONS = ("event_time", "end_time", "key", "lateness", "time_unit")
_FIELDS: dict[MessageKind, set[str]] = {
    MessageKind.CONNECT: {"stream", "producer", "token"},
    MessageKind.HEADER: {"columns", *HEADER_OPTIONS},
    MessageKind.INSERTION: {"rows", "row", "format", "bytes"},
    MessageKind.DELETE: {"rows"},
    MessageKind.BOUNDARY: {"time"},
    MessageKind.STOP: set(),
    MessageKind.REMOVE: set(),
}


def read_json(line: bytes) -> dict[str, Any]:
    """One frame's JSON object; FeedMessageError says what is wrong with it."""
    try:
        value = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        msg = f"the message is not JSON: {e}"
        raise FeedMessageError(msg) from None
    if not isinstance(value, dict):
        msg = f"a message is a JSON object with a \"kind\"; got {type(value).__name__}"
        raise FeedMessageError(msg)
    return value


def message_seq(obj: dict[str, Any]) -> int | None:
    """The message's ``seq``, checked: a positive whole number."""
    seq = obj.get("seq")
    if seq is None:
        return None
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        msg = f"seq must be a positive whole number; got {seq!r}"
        raise FeedMessageError(msg)
    return seq


def message_kind(obj: dict[str, Any], seq: int | None) -> MessageKind:
    """The message's kind; the error lists the kinds there are."""
    kind = obj.get("kind")
    kinds = ", ".join(k.value for k in MessageKind)
    if kind is None:
        msg = f"the message has no \"kind\"; kinds: {kinds}"
        raise FeedMessageError(msg, seq)
    try:
        return MessageKind(str(kind).upper())
    except ValueError:
        msg = f"unknown message kind {kind!r}; kinds: {kinds}"
        raise FeedMessageError(msg, seq) from None


def arrow_bytes(obj: dict[str, Any]) -> int | None:
    """How many bytes of Arrow IPC follow an INSERTION's line (None: rows are in JSON)."""
    if obj.get("format") is None:
        return None
    if obj["format"] != ARROW_FORMAT:
        msg = f"format must be {ARROW_FORMAT!r} (or absent for JSON rows); got {obj['format']!r}"
        raise FeedMessageError(msg, obj.get("seq") if isinstance(obj.get("seq"), int) else None)
    size = obj.get("bytes")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        msg = f"an Arrow INSERTION needs \"bytes\": the length of the Arrow data; got {size!r}"
        raise FeedMessageError(msg)
    return size


def read_arrow(data: bytes, seq: int | None) -> pa.Table:
    """The rows of an Arrow IPC stream (or file)."""
    try:
        if data[:6] == b"ARROW1":
            return pa.ipc.open_file(pa.BufferReader(data)).read_all()
        return pa.ipc.open_stream(pa.BufferReader(data)).read_all()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as e:
        msg = f"the Arrow data cannot be read: {e}"
        raise FeedMessageError(msg, seq) from None


def _columns(value: Any, seq: int | None) -> tuple[tuple[str, str], ...]:
    """HEADER columns from DDL text (``"a BIGINT, b STRUCT<x: DOUBLE>"``) or a list of
    ``{"name": ..., "type": ...}``; types are checked by the engine.
    """
    if isinstance(value, str):
        return split_ddl(value, seq)
    if isinstance(value, list) and value:
        out = []
        for i, col in enumerate(value):
            if not (isinstance(col, dict) and isinstance(col.get("name"), str)
                    and isinstance(col.get("type"), str)):
                msg = (f"columns[{i}] must be {{\"name\": ..., \"type\": ...}} with text "
                       f"values; got {col!r}")
                raise FeedMessageError(msg, seq)
            out.append((col["name"], col["type"]))
        return tuple(out)
    msg = ("a HEADER needs \"columns\": DDL text such as \"pid BIGINT, t TIMESTAMP\" or a "
           f"list of {{\"name\", \"type\"}}; got {value!r}")
    raise FeedMessageError(msg, seq)


def split_ddl(text: str, seq: int | None = None) -> tuple[tuple[str, str], ...]:
    """``"a BIGINT, b STRUCT<x: DOUBLE, y: DOUBLE>"`` as (name, type) pairs."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    out = []
    for part in parts:
        name, _, type_sql = part.strip().partition(" ")
        if not name or not type_sql.strip():
            msg = f"column {part.strip()!r} needs a name and a type, as in 'pid BIGINT'"
            raise FeedMessageError(msg, seq)
        out.append((name.strip("`\""), type_sql.strip()))
    return tuple(out)


def parse_message(obj: dict[str, Any], arrow: bytes | None = None) -> Message:
    """The message a frame's JSON object (and the Arrow bytes after it) carries."""
    seq = message_seq(obj)
    kind = message_kind(obj, seq)
    unknown = sorted(set(obj) - _FIELDS[kind] - {"kind", "seq"})
    if unknown:
        allowed = ", ".join(sorted(_FIELDS[kind] | {"seq"})) or "seq"
        msg = f"unknown field(s) {', '.join(map(repr, unknown))} in a {kind}; it has {allowed}"
        raise FeedMessageError(msg, seq)
    if kind is MessageKind.CONNECT:
        stream = obj.get("stream")
        if not isinstance(stream, str) or not stream:
            msg = "CONNECT needs \"stream\": the name of a stream created with source='feed'"
            raise FeedMessageError(msg, seq)
        for name in ("producer", "token"):
            if obj.get(name) is not None and not isinstance(obj[name], str):
                msg = f"{name} must be text; got {obj[name]!r}"
                raise FeedMessageError(msg, seq)
        return Connect(stream, obj.get("producer"), obj.get("token"))
    if kind is MessageKind.HEADER:
        options = {}
        for name in HEADER_OPTIONS:
            value = obj.get(name)
            if value is None:
                continue
            if isinstance(value, list) and name == "key":
                value = ",".join(map(str, value))
            if not isinstance(value, str | int) or isinstance(value, bool):
                msg = f"{name} must be text; got {value!r}"
                raise FeedMessageError(msg, seq)
            options[name] = str(value)
        if "event_time" not in options:
            msg = "a HEADER needs \"event_time\": the column holding each row's event time"
            raise FeedMessageError(msg, seq)
        return Header(_columns(obj.get("columns"), seq), options, seq)
    if kind is MessageKind.INSERTION:
        if arrow is not None:
            return Insertion(read_arrow(arrow, seq), seq)
        if "row" in obj and "rows" in obj:
            msg = "an INSERTION has \"rows\" (a list) or \"row\" (one object), not both"
            raise FeedMessageError(msg, seq)
        rows = [obj["row"]] if "row" in obj else obj.get("rows")
        if not isinstance(rows, list):
            msg = (f"an INSERTION needs \"rows\": a list of objects; got "
                   f"{type(rows).__name__ if rows is not None else 'nothing'}")
            raise FeedMessageError(msg, seq)
        return Insertion(rows, seq)
    if kind is MessageKind.DELETE:
        rows = obj.get("rows")
        if not isinstance(rows, list):
            msg = "a DELETE needs \"rows\": a list of objects with the key and the event time"
            raise FeedMessageError(msg, seq)
        return Delete(rows, seq)
    if kind is MessageKind.BOUNDARY:
        if obj.get("time") is None:
            msg = "a BOUNDARY needs \"time\": no later message will be older than it"
            raise FeedMessageError(msg, seq)
        return Boundary(obj["time"], seq)
    if kind is MessageKind.STOP:
        return Stop(seq)
    return Remove(seq)


def raw_text(line: bytes, limit: int = 1000) -> str:
    """The start of a frame as text, for a dead letter."""
    text = line[:limit].decode("utf-8", errors="replace").rstrip("\n")
    return text + ("..." if len(line) > limit else "")


def ok(seq: int | None, **fields: Any) -> dict[str, Any]:
    """The answer to a message that was taken."""
    return {"ok": True, **({"seq": seq} if seq is not None else {}), **fields}


def refusal(error: BaseException, seq: int | None) -> dict[str, Any]:
    """The answer to a message that was not taken: what is wrong, the error's class."""
    return {"ok": False, **({"seq": seq} if seq is not None else {}),
            "error": str(error), "kind": type(error).__name__}


def encode(answer: dict[str, Any]) -> bytes:
    """An answer (or a message) as one frame."""
    return json.dumps(answer, default=str, separators=(",", ":")).encode() + b"\n"
