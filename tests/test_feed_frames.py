"""Reading feed frames from a TCP connection's bytes (server/feed.py), without an engine."""

from __future__ import annotations

import asyncio

from sparkcq.io.feed_protocol import Boundary
from sparkcq.server.feed import FeedLimits, FeedService


def frames(data: bytes) -> list:
    async def read_all() -> list:
        reader = asyncio.StreamReader(limit=FeedLimits().max_message_bytes + 1)
        reader.feed_data(data)
        reader.feed_eof()
        service = FeedService(loop=None)  # type: ignore[arg-type] - reading needs no engine
        out = []
        while (frame := await service.read_frame(reader)) is not None:
            out.append(frame)
        return out
    return asyncio.run(read_all())


def test_a_long_run_of_blank_lines_is_skipped():
    # each blank line was a recursive call: 5,000 of them ended the connection's reader
    # with a RecursionError and left the connection hanging, unanswered
    got = frames(b"\n" * 5_000 + b'{"kind": "BOUNDARY", "seq": 1, "time": 5}\n' + b"\n  \n")
    assert got == [Boundary(5, 1)]
