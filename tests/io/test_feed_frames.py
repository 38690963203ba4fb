"""Reading feed frames from a TCP connection's bytes (server/feed.py), without an engine."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from sparkcq.io.feed_protocol import Boundary
from sparkcq.server.feed import FeedLimits, FeedService
from sparkcq.statements.header import HeaderChange


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


def test_the_documented_header_answers_are_the_ones_given():
    """docs/feed.md names each answer a HEADER can get, and only those (it once said
    ``"replaced"`` where the engine answers ``"changed"``).
    """
    doc = (Path(__file__).parent.parent.parent / "docs" / "feed.md").read_text()
    documented = set(re.findall(r'"change":\s*"([a-z ]+)"', doc))
    assert documented == {c.value for c in HeaderChange}
