"""The feed client's batching, without a server."""

from __future__ import annotations

import datetime as dt
import json
from collections import UserDict

import pytest

from sparkcq.client import Feed
from sparkcq.errors import FeedError


class Recording(Feed):
    """A Feed whose INSERTIONs are recorded instead of sent."""

    def __init__(self, batch_rows: int, fail_at: int | None = None):
        super().__init__("s", batch_rows=batch_rows)
        self.batches: list[list[int]] = []
        self.fail_at = fail_at

    def _send_rows(self, rows):
        if len(self.batches) == self.fail_at:
            msg = "the connection broke"
            raise FeedError(msg)
        self.batches.append([r["id"] for r in rows])


def test_send_cuts_rows_into_batches_in_order_and_keeps_the_rest():
    feed = Recording(batch_rows=3)
    feed.send({"id": 0})
    feed.send([{"id": i} for i in range(1, 8)])
    assert feed.batches == [[0, 1, 2], [3, 4, 5]]
    feed.flush()
    assert feed.batches[-1] == [6, 7]


def test_send_of_many_rows_is_linear():
    feed = Recording(batch_rows=1)
    feed.send([{"id": i} for i in range(200_000)])  # quadratic slicing took minutes
    assert len(feed.batches) == 200_000 and feed.batches[-1] == [199_999]


def test_rows_after_a_failed_batch_stay_queued():
    feed = Recording(batch_rows=2, fail_at=1)
    with pytest.raises(FeedError):
        feed.send([{"id": i} for i in range(6)])
    assert feed.batches == [[0, 1]]
    assert [r["id"] for r in feed.queued] == [4, 5]


def test_rows_and_boundaries_encode_dates_as_iso_text():
    sent: list[bytes] = []

    class Capturing(Feed):
        def _transmit(self, message):
            sent.append(message.frame)

    feed = Capturing("s", batch_rows=2)
    when = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
    feed.send([{"id": 1, "t": when}, UserDict({"id": 2, "t": dt.date(2026, 1, 2)})])
    feed.boundary(when)
    feed.boundary(5)
    rows, early, five = (json.loads(frame) for frame in sent)
    assert rows["rows"] == [{"id": 1, "t": "2026-01-01T12:00:00+00:00"},
                            {"id": 2, "t": "2026-01-02"}]
    assert early["time"] == "2026-01-01T12:00:00+00:00" and five["time"] == 5


def test_numpy_scalars_travel_as_json_values():
    import numpy as np

    from sparkcq.client import _line

    line = json.loads(_line({"n": np.int64(5), "b": np.bool_(True), "x": np.float32(0.5),
                             "s": np.str_("a")}))
    assert line == {"n": 5, "b": True, "x": 0.5, "s": "a"}
