"""The feed service: live sources over TCP (asyncio) and HTTP, speaking ``io/feed_protocol``.

A TCP connection opens with CONNECT naming its stream (and the token when the server is not
bound to localhost), then sends messages; each gets one answer line, in order. Messages are
read ahead into a bounded queue; the data messages waiting there (INSERTION, BOUNDARY) are
taken as one group: checked at the door, written to the stream's spool with one flush to
disk, then answered. So acknowledgements cost one fsync per group, not per message, and a
full queue or spool slows the answers (and, through TCP, the sender) rather than growing
memory. HEADER, STOP and REMOVE change the catalog and go through the engine thread.

``POST /feed/{stream}`` takes the same messages as NDJSON (or one Arrow IPC stream of rows)
and answers ``{"answers": [...]}``.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sparkcq.engine import Engine
from sparkcq.errors import BackpressureError, FeedError, SparkcqError
from sparkcq.io.feed_protocol import (
    Boundary,
    Connect,
    Delete,
    FeedMessageError,
    Header,
    Insertion,
    Message,
    OversizedError,
    Remove,
    Stop,
    arrow_bytes,
    encode,
    ok,
    parse_message,
    raw_text,
    read_json,
    refusal,
)
from sparkcq.io.feed_source import FeedInput, FeedReceipt, FeedSource
from sparkcq.io.push import time_value
from sparkcq.model.rows import RowError
from sparkcq.server.loop import EngineLoop

log = logging.getLogger("sparkcq.feed")


@dataclass(frozen=True)
class FeedLimits:
    """Bounds of the feed service."""

    max_message_bytes: int = 16 * 2**20  # a frame (a JSON line, or an Arrow body)
    read_ahead: int = 256  # messages read and not yet answered, per connection
    group_rows: int = 200_000  # rows taken in one spool append
    ack_timeout: float = 60.0  # how long a full queue may hold an answer back


class AuthError(FeedError):
    """CONNECT without the server's token (it is not bound to localhost)."""


class NotConnectedError(FeedError):
    """A message before CONNECT named the stream."""


Frame = Message | FeedMessageError  # what reading one frame gives


def _rows(errors: Sequence[RowError]) -> list[dict[str, Any]]:
    return [{"index": e.index, "column": e.column, "reason": e.reason} for e in errors]


def receipt_answer(seq: int | None, receipt: FeedReceipt) -> dict[str, Any]:
    """The answer to a data message that was taken (possibly with refused or late rows)."""
    fields: dict[str, Any] = {"accepted": receipt.accepted}
    if receipt.deleted:
        fields["deleted"] = receipt.deleted
    if receipt.rejected:
        fields["rejected"] = _rows(receipt.rejected)
    if receipt.late_rows:
        fields["late"] = _rows(receipt.late)
        fields["late_rows"] = receipt.late_rows
    if receipt.duplicate:
        fields["duplicate"] = True
    return ok(seq, **fields)


class FeedService:
    """Takes feed messages for the engine of ``loop``, from any connection or request."""

    def __init__(self, loop: EngineLoop, token: str | None = None,
                 limits: FeedLimits | None = None):
        self.loop = loop
        self.token = token
        self.limits = limits or FeedLimits()

    @property
    def engine(self) -> Engine:
        self.loop.check_alive()
        return self.loop.engine

    async def call(self, fn: Callable[[Engine], Any]) -> Any:
        """Run ``fn`` in the engine thread (a catalog change) and wait for it."""
        return await asyncio.wrap_future(self.loop.submit(fn))

    def source(self, stream: str) -> FeedSource:
        """The stream's feed source (read without the engine thread: a dictionary lookup)."""
        return self.engine.feed_source(stream)

    # -- one group of messages --------------------------------------------------------------
    async def take(self, stream: str, producer: str | None,
                   frames: Sequence[Frame]) -> list[dict[str, Any]]:
        """Answer ``frames`` of ``stream`` in order; consecutive data messages are taken at once."""
        answers: list[dict[str, Any]] = []
        data: list[Insertion | Boundary | Delete] = []

        async def flush() -> None:
            if data:
                answers.extend(await self._take_data(stream, producer, list(data)))
                data.clear()

        for frame in frames:
            if isinstance(frame, Insertion | Boundary | Delete):
                data.append(frame)
                continue
            await flush()
            answers.append(await self._take_other(stream, frame))
        await flush()
        return answers

    async def _take_other(self, stream: str, frame: Frame) -> dict[str, Any]:
        if isinstance(frame, FeedMessageError):
            try:  # a dead letter of the stream, once it has a schema
                source = self.source(stream)
                if source.connected:
                    await asyncio.to_thread(source.refuse_message, str(frame), frame.raw)
            except SparkcqError:
                pass
            return refusal(frame, frame.seq)
        seq = getattr(frame, "seq", None)
        try:
            if isinstance(frame, Header):
                result = await self.call(lambda e: e.feed_header(stream, frame.columns,
                                                                  frame.options))
                return ok(seq, **result)
            if isinstance(frame, Stop):
                paused = await self.call(lambda e: e.feed_stop(stream))
                return ok(seq, paused=paused)
            if isinstance(frame, Remove):
                removal = await self.call(lambda e: e.feed_remove(stream))
                return ok(seq, **removal.as_json())
            if isinstance(frame, Connect):
                msg = "CONNECT comes once, first; open another connection for another stream"
                raise FeedError(msg)
        except Exception as e:  # noqa: BLE001 - the sender gets the reason
            return refusal(e, seq)
        msg = f"unexpected message {frame!r}"
        raise AssertionError(msg)

    async def _take_data(self, stream: str, producer: str | None,
                         frames: list[Insertion | Boundary | Delete]) -> list[dict[str, Any]]:
        """One spool append for ``frames`` (refused whole if the stream cannot take them)."""
        try:
            source = self.source(stream)
            kind = self.engine.catalog.stream(stream).time_kind
            if not source.connected:
                msg = (f"stream {stream!r} has no schema yet: send a HEADER before rows")
                raise FeedError(msg)
        except Exception as e:  # noqa: BLE001
            return [refusal(e, f.seq) for f in frames]
        inputs: list[FeedInput] = []
        answers: list[dict[str, Any] | None] = []
        for frame in frames:
            if isinstance(frame, Boundary):
                try:
                    mark = time_value(frame.time, kind)
                except (ValueError, TypeError) as e:
                    answers.append(refusal(FeedMessageError(
                        f"BOUNDARY time {frame.time!r} is not a time of stream {stream!r}: {e}"),
                        frame.seq))
                    continue
                inputs.append(FeedInput(None, mark, False, frame.seq))
            elif isinstance(frame, Delete):
                inputs.append(FeedInput(None, None, False, frame.seq, frame.rows))
            else:
                inputs.append(FeedInput(frame.rows, None, False, frame.seq))
            answers.append(None)
        if not inputs:
            return [a for a in answers if a is not None]
        receipts: list[FeedReceipt] = []
        error: Exception | None = None
        deadline = time.monotonic() + self.limits.ack_timeout
        wait = 0.01
        while len(receipts) < len(inputs):
            try:
                receipts += await asyncio.to_thread(source.push_group, inputs[len(receipts):],
                                                    producer)
                continue
            except BackpressureError as e:
                if time.monotonic() > deadline:  # the queue stayed full: refuse, to resend
                    error = e
                    break
            except Exception as e:  # noqa: BLE001 - the sender gets the reason
                error = e
                break
            await asyncio.sleep(wait)  # the answers slow down until cycles take rows
            wait = min(wait * 2, 0.5)
        taken = iter(receipts)
        out = []
        it = iter(inputs)
        for answer in answers:
            if answer is not None:
                out.append(answer)
                continue
            one = next(it)
            receipt = next(taken, None)
            out.append(receipt_answer(one.seq, receipt) if receipt is not None
                       else refusal(error or FeedError("not taken"), one.seq))
        return out

    # -- TCP ------------------------------------------------------------------------------
    async def read_frame(self, reader: asyncio.StreamReader) -> Frame | None:
        """The next frame, or None at the end of the connection."""
        limit = self.limits.max_message_bytes
        line = b""
        while not line.strip():  # blank lines between frames are skipped
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as e:
                if not e.partial.strip():
                    return None
                line = e.partial
            except asyncio.LimitOverrunError as e:
                start = bytes(reader._buffer[:200])  # type: ignore[attr-defined]  # noqa: SLF001
                await skip_line(reader, e.consumed)
                msg = f"the message is over the limit of {limit:,} bytes; it was skipped"
                return OversizedError(msg, None, raw_text(start, 200))
        try:
            obj = read_json(line)
            size = arrow_bytes(obj) if str(obj.get("kind", "")).upper() == "INSERTION" else None
        except FeedMessageError as e:
            e.raw = raw_text(line)
            return e
        arrow = None
        if size is not None:
            if size > limit:
                await skip_bytes(reader, size)
                msg = f"the Arrow data has {size:,} bytes; the limit is {limit:,}; it was skipped"
                return OversizedError(msg, obj.get("seq") if isinstance(obj.get("seq"), int)
                                      else None, raw_text(line))
            try:
                arrow = await reader.readexactly(size)
            except asyncio.IncompleteReadError:
                return None
        try:
            return parse_message(obj, arrow)
        except FeedMessageError as e:
            e.raw = raw_text(line)
            return e

    async def serve_connection(self, reader: asyncio.StreamReader,
                               writer: asyncio.StreamWriter) -> None:
        """One producer's connection, until it closes."""
        stream: str | None = None
        producer: str | None = None
        source: FeedSource | None = None
        pending: asyncio.Queue[Frame | None] = asyncio.Queue(self.limits.read_ahead)

        async def read_ahead() -> None:
            try:
                while (frame := await self.read_frame(reader)) is not None:
                    await pending.put(frame)
            except (ConnectionError, OSError):
                pass
            except Exception:  # a bug: log it and end the connection, never leave it hanging
                log.exception("feed connection of %s: reading failed", stream)
            await pending.put(None)

        reading = asyncio.create_task(read_ahead())
        try:
            while True:
                frame = await pending.get()
                if frame is None:
                    break
                if stream is None:
                    answer, stream, producer = self._connect(frame)
                    if stream is not None:
                        source = self.source(stream)
                        source.connections += 1
                        answer = ok(None, stream=stream, producer=producer,
                                    schema=source.schema.simpleString() if source.connected
                                    else None, resume=source.producers_seq(producer),
                                    durable=source.spool is not None)
                    writer.write(encode(answer))
                    await writer.drain()
                    if isinstance(frame, Connect) and answer.get("kind") == AuthError.__name__:
                        break
                    continue
                frames = [frame]
                rows = _row_count(frame)
                while rows < self.limits.group_rows and not pending.empty():
                    more = pending.get_nowait()
                    if more is None:
                        pending.put_nowait(None)
                        break
                    frames.append(more)
                    rows += _row_count(more)
                for answer in await self.take(stream, producer, frames):
                    writer.write(encode(answer))
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            reading.cancel()
            if source is not None:
                source.connections -= 1
            writer.close()

    def _connect(self, frame: Frame) -> tuple[dict[str, Any], str | None, str | None]:
        """The answer to a connection's first frame, and its stream and producer if accepted."""
        if isinstance(frame, FeedMessageError):
            return refusal(frame, frame.seq), None, None
        if not isinstance(frame, Connect):
            error = NotConnectedError("send CONNECT first: {\"kind\": \"CONNECT\", "
                                      "\"stream\": \"name\"}")
            return refusal(error, getattr(frame, "seq", None)), None, None
        if self.token is not None and not hmac.compare_digest(
                (frame.token or "").encode(), self.token.encode()):
            return refusal(AuthError("missing or wrong token"), None), None, None
        try:
            source = self.source(frame.stream)
        except SparkcqError as e:
            return refusal(e, None), None, None
        return {}, source.name, frame.producer

    async def start(self, host: str, port: int) -> asyncio.Server:
        """Listen for feed connections on ``host:port``."""
        server = await asyncio.start_server(self.serve_connection, host, port,
                                            limit=self.limits.max_message_bytes + 1)
        log.info("feed listening on %s:%d", host, port)
        return server


def _row_count(frame: Frame) -> int:
    if isinstance(frame, Insertion):
        return frame.rows.num_rows if not isinstance(frame.rows, list) else len(frame.rows)
    return 1


async def skip_line(reader: asyncio.StreamReader, consumed: int) -> None:
    """Read past the rest of an over-long line (asyncio left ``consumed`` bytes of it)."""
    while True:
        await reader.readexactly(consumed)
        try:
            await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError as e:
            consumed = e.consumed
        except asyncio.IncompleteReadError:
            return
        else:
            return


async def skip_bytes(reader: asyncio.StreamReader, size: int) -> None:
    """Read past ``size`` bytes of an over-large Arrow body."""
    while size > 0:
        chunk = await reader.read(min(size, 1 << 16))
        if not chunk:
            return
        size -= len(chunk)
