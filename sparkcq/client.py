"""Python clients of a running sparkcq server: the feed (``Feed``) and the control API
(``Client``, from ``sparkcq.server.client``). Standard library and pyarrow only.

    from sparkcq.client import Feed
    with Feed("packets", producer="router-1") as feed:       # 127.0.0.1:8766
        feed.header("pid BIGINT, t TIMESTAMP, bytes INT", event_time="t")
        feed.send({"pid": 1, "t": "2026-01-01T00:00:00Z", "bytes": 40})
        feed.boundary("2026-01-01T00:00:05Z")
    # leaving the block flushes and waits until the server acknowledged every message

Rows are batched (``batch_rows``) into INSERTION messages, as JSON or Arrow, and several
messages are in flight at once. Every message has a number (``seq``); the server
acknowledges a number once the message is durable. If the connection breaks, the client
reconnects and the server says the last number it holds for this producer: the client
sends again only what came after, so nothing is lost and nothing is taken twice.
"""

from __future__ import annotations

import json
import os
import select
import socket
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import pyarrow as pa

from sparkcq.errors import FeedError
from sparkcq.server.client import Client, ServerError

DEFAULT_FEED = ("127.0.0.1", 8766)


@dataclass
class FeedStats:
    """What the server answered so far: rows accepted, rows refused or late (with reasons)."""

    accepted: int = 0
    duplicates: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    late: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)  # messages refused whole


@dataclass
class _Sent:
    seq: int
    frame: bytes
    kind: str
    first_row: int = 0  # rows this producer sent before the message's (INSERTION)


class Feed:
    """One producer's connection to one stream of a server's feed (TCP)."""

    def __init__(self, stream: str, host: str | None = None, port: int | None = None,
                 token: str | None = None, producer: str | None = None,
                 batch_rows: int = 1000, arrow: bool = False, max_in_flight: int = 64,
                 reconnect_seconds: float = 30.0, timeout: float = 120.0):
        self.stream = stream
        self.host = host or os.environ.get("SPARKCQ_FEED_HOST") or DEFAULT_FEED[0]
        self.port = port or int(os.environ.get("SPARKCQ_FEED_PORT") or DEFAULT_FEED[1])
        self.token = token or os.environ.get("SPARKCQ_TOKEN")
        self.producer = producer or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.batch_rows = batch_rows
        self.arrow = arrow
        self.max_in_flight = max_in_flight
        self.reconnect_seconds = reconnect_seconds
        self.timeout = timeout
        self.stats = FeedStats()
        self.schema: str | None = None  # as the server knows it, after CONNECT or HEADER
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._rows: list[Any] = []
        self._rows_sent = 0
        self._seq = 0
        self._unacked: deque[_Sent] = deque()
        self._answers: dict[int, dict[str, Any]] = {}  # answers to control messages

    # -- connection -------------------------------------------------------------------------
    def connect(self) -> Feed:
        """Open the connection (and after a break, send again what was not acknowledged)."""
        deadline = time.monotonic() + self.reconnect_seconds
        while True:
            try:
                self._open()
                return self
            except OSError as e:
                if time.monotonic() > deadline:
                    msg = f"cannot reach the feed at {self.host}:{self.port}: {e}"
                    raise FeedError(msg) from None
                time.sleep(0.2)

    def _open(self) -> None:
        self.drop_connection()
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._buffer = sock, b""
        hello = {"kind": "CONNECT", "stream": self.stream, "producer": self.producer}
        if self.token:
            hello["token"] = self.token
        sock.sendall(_line(hello))
        answer = self._read_answer()
        if not answer.get("ok"):
            self.drop_connection()
            raise FeedError(answer.get("error", "the feed refused the connection"))
        self.schema = answer.get("schema")
        held = int(answer.get("resume") or 0)
        while self._unacked and self._unacked[0].seq <= held:
            self._unacked.popleft()  # the server held it before the break
        for sent in self._unacked:
            sock.sendall(sent.frame)

    @property
    def queued(self) -> list[Any]:
        """The rows sent with ``send`` that are not in an INSERTION yet."""
        return list(self._rows)

    def drop_connection(self) -> None:
        """Close the socket at once, without sending what is queued (as a crash would)."""
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def __enter__(self) -> Feed:
        return self.connect()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None:
            self.close()
        else:
            self.drop_connection()

    # -- messages -----------------------------------------------------------------------------
    def header(self, columns: str | Iterable[tuple[str, str]], event_time: str,
               **options: str) -> dict[str, Any]:
        """Declare (or change) the stream's schema; the server's answer (FeedError if refused).

        ``columns``: DDL text (``"pid BIGINT, t TIMESTAMP"``) or (name, type) pairs;
        ``options``: end_time, key, lateness, time_unit, as CREATE STREAM's.
        """
        self.flush()
        cols: Any = columns if isinstance(columns, str) else \
            [{"name": n, "type": t} for n, t in columns]
        answer = self._control({"kind": "HEADER", "columns": cols, "event_time": event_time,
                                **options})
        self.schema = answer.get("schema")
        return answer

    def send(self, rows: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> None:
        """Queue one row (a mapping) or many; sent in INSERTIONs of ``batch_rows``."""
        if isinstance(rows, Mapping):
            self._rows.append(rows)
        else:
            self._rows.extend(rows)
        # one pass over the queued rows (slicing off the rest after each batch would copy
        # it again each time: quadratic in the rows of one call)
        pending, self._rows, start = self._rows, [], 0
        try:
            while len(pending) - start >= self.batch_rows:
                start += self.batch_rows
                self._send_rows(pending[start - self.batch_rows:start])
        finally:
            self._rows = pending[start:]

    def send_table(self, table: pa.Table) -> None:
        """Send an Arrow table as one INSERTION (bulk rows without a Python object each)."""
        self.flush()
        self._send_arrow(table)

    def flush(self) -> None:
        """Send the rows queued by ``send``."""
        if self._rows:
            batch, self._rows = self._rows, []
            self._send_rows(batch)

    def boundary(self, time_value: Any) -> None:
        """Heartbeat: no later message will be older than ``time_value``."""
        self.flush()
        self._send({"kind": "BOUNDARY", "time": time_value})

    def stop(self) -> dict[str, Any]:
        """Pause the queries fed by the stream until data resumes."""
        self.flush()
        return self._control({"kind": "STOP"})

    def remove(self) -> dict[str, Any]:
        """Take the stream out of the catalog; the queries reading it stop."""
        self.flush()
        return self._control({"kind": "REMOVE"})

    def sync(self) -> FeedStats:
        """Flush and wait until the server acknowledged every message sent."""
        self.flush()
        deadline = time.monotonic() + self.timeout
        while self._unacked:
            if time.monotonic() > deadline:
                msg = f"{len(self._unacked)} messages not acknowledged within {self.timeout} s"
                raise FeedError(msg)
            self._receive(block=True)
        return self.stats

    def close(self) -> FeedStats:
        """``sync``, then close the connection."""
        try:
            return self.sync()
        finally:
            self.drop_connection()

    # -- sending and answers --------------------------------------------------------------------
    def _send_rows(self, rows: list[Any]) -> None:
        if self.arrow:
            self._send_arrow(pa.Table.from_pylist(rows))
        else:
            # dates and times become ISO text in the encoder (``_jsonable``), not by copying
            # every row first
            self._send({"kind": "INSERTION", "rows": [r if type(r) is dict else dict(r)
                                                       for r in rows]}, len(rows))

    def _send_arrow(self, table: pa.Table) -> None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        body = sink.getvalue().to_pybytes()
        self._seq += 1
        head = _line({"kind": "INSERTION", "seq": self._seq, "format": "arrow",
                      "bytes": len(body)})
        self._transmit(_Sent(self._seq, head + body, "INSERTION", self._rows_sent))
        self._rows_sent += table.num_rows

    def _send(self, message: dict[str, Any], rows: int = 0) -> int:
        self._seq += 1
        self._transmit(_Sent(self._seq, _line({**message, "seq": self._seq}),
                             message["kind"], self._rows_sent))
        self._rows_sent += rows
        return self._seq

    def _control(self, message: dict[str, Any]) -> dict[str, Any]:
        seq = self._send(message)
        self.sync()
        answer = self._answers.pop(seq, {})
        if not answer.get("ok", False):
            raise FeedError(answer.get("error", f"{message['kind']} was not acknowledged"))
        return answer

    def _transmit(self, sent: _Sent) -> None:
        if self._sock is None:
            self.connect()
        self._unacked.append(sent)
        while len(self._unacked) > self.max_in_flight:
            self._receive(block=True)
        try:
            assert self._sock is not None
            self._sock.sendall(sent.frame)
        except OSError:
            self.connect()  # sends every unacknowledged message again, this one too
        self._receive(block=False)

    def _receive(self, block: bool) -> None:
        """Read the answers that arrived (at least one when ``block``)."""
        try:
            if self._sock is None:
                self.connect()
                return
            if not block and not select.select([self._sock], [], [], 0)[0]:
                return
            self._take(self._read_answer())
            while b"\n" in self._buffer:
                self._take(self._read_answer())
        except (OSError, FeedError) as e:
            if isinstance(e, FeedError) and not isinstance(e, _Broken):
                raise
            self.connect()

    def _take(self, answer: dict[str, Any]) -> None:
        seq = answer.get("seq")
        sent = None
        while self._unacked and (seq is None or self._unacked[0].seq <= seq):
            sent = self._unacked.popleft()
            if seq is None or sent.seq == seq:
                break
        if not answer.get("ok"):
            self.stats.errors.append(answer)
        self.stats.accepted += int(answer.get("accepted", 0))
        self.stats.duplicates += bool(answer.get("duplicate"))
        first = sent.first_row if sent is not None else 0
        # "row": the row's number among all this producer sent (from 0)
        self.stats.rejected += [{**r, "row": first + r["index"]}
                                for r in answer.get("rejected", [])]
        self.stats.late += [{**r, "row": first + r["index"]} for r in answer.get("late", [])]
        if sent is not None and sent.kind in ("HEADER", "STOP", "REMOVE"):
            self._answers[sent.seq] = answer

    def _read_answer(self) -> dict[str, Any]:
        assert self._sock is not None
        while b"\n" not in self._buffer:
            chunk = self._sock.recv(1 << 16)
            if not chunk:
                msg = "the server closed the connection"
                raise _Broken(msg)
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return dict(json.loads(line))


class _Broken(FeedError):
    """The connection broke; the client reconnects."""


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), default=_jsonable).encode() + b"\n"


def _jsonable(value: Any) -> Any:
    """A value JSON has no type for: dates and times as ISO text, numpy and other scalars
    with ``item()`` as their Python value (NaN as NULL), anything else as text.
    """
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "item") and callable(value.item):
        plain = value.item()
        if isinstance(plain, float) and plain != plain:
            return None
        if isinstance(plain, bool | int | float | str) or plain is None:
            return plain
    return str(value)


__all__ = ["Client", "Feed", "FeedStats", "ServerError"]
