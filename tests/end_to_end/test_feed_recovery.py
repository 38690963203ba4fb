"""A feed stream's spool across restarts, in process (the "crash" abandons an engine
between two statements, as in test_recovery.py): the regressions tests/end_to_end/test_feed_crash.py
found by killing ``sparkcq serve``.
"""

from __future__ import annotations

import pytest

from sparkcq import Engine
from sparkcq.io.feed_source import FeedInput, FeedSource
from sparkcq.testing import CollectingSink

PRODUCER = "p"


def start(spark, folder: str, sink: CollectingSink) -> Engine:
    """An engine on ``folder`` with the feed stream ``s`` and the query ``q`` (created the
    first time, recovered after)."""
    eng = Engine(spark=spark, checkpoint_dir=folder, sinks={"collect": sink})
    if "s" not in eng.catalog.streams:
        eng.execute("CREATE STREAM s WITH (source='feed')")
        eng.feed_header("s", [("id", "BIGINT"), ("t", "BIGINT")], {"event_time": "t"})
        eng.execute("CREATE QUERY q INTO collect AS SELECT id FROM s")
    return eng


def send(eng: Engine, seq: int, ids: range) -> None:
    """One acknowledged message of the producer (spooled, as the feed service does)."""
    source = eng.sources["s"]
    assert isinstance(source, FeedSource)
    receipt, = source.push_group([FeedInput([{"id": i, "t": i} for i in ids], None, False,
                                            seq)], PRODUCER)
    assert receipt.accepted == len(ids) and not receipt.duplicate


def finish(eng: Engine, seq: int) -> None:
    """A BOUNDARY past every row (the last row is emitted once the watermark passes it),
    then the cycles that take what is queued."""
    source = eng.sources["s"]
    assert isinstance(source, FeedSource)
    source.push_group([FeedInput(None, 1_000_000, False, seq)], PRODUCER)
    eng.run_until_idle()


def ids(*sinks: CollectingSink) -> list[int]:
    return sorted(int(i) for sink in sinks for _c, f in sink.cycles.get("q", [])
                  for i in f["id"])


@pytest.fixture
def folder(tmp_path):
    return str(tmp_path / "ck")


def test_spool_numbers_go_on_after_a_restart_whose_spool_was_trimmed_empty(spark, folder):
    """A checkpoint trims every entry it took; the restart's spool must not number its
    entries from 1 again, or they sort before the checkpoint's position and the next
    restart skips them: acknowledged rows lost.
    """
    sink1, sink2, sink3 = CollectingSink(), CollectingSink(), CollectingSink()
    first = start(spark, folder, sink1)
    send(first, 1, range(0, 10))
    first.run_cycle()  # checkpointed: the spool is trimmed empty
    first.wait_for_checkpoint()  # written in the background before the crash
    second = start(spark, folder, sink2)
    send(second, 2, range(10, 20))  # acknowledged, not yet taken by a cycle
    third = start(spark, folder, sink3)
    source = third.sources["s"]
    assert isinstance(source, FeedSource)
    assert source.producers_seq(PRODUCER) == 2  # what a reconnecting producer is told
    again, = source.push_group([FeedInput([{"id": 10, "t": 10}], None, False, 2)], PRODUCER)
    assert again.duplicate and again.accepted == 0  # a resend is not taken twice
    finish(third, 3)
    assert ids(sink1, sink2, sink3) == list(range(20))


def test_a_feed_whose_header_came_after_the_checkpoint_restarts(spark, folder):
    """The checkpoint (taken for stream ``a``) holds ``b``'s position from before ``b``'s
    HEADER; the restart seeks ``b`` before the journal gives it its schema again, and must
    not read ``b``'s spool without one (it failed: no column '' for the watermark).
    """
    sink1, sink2 = CollectingSink(), CollectingSink()
    first = start(spark, folder, sink1)
    first.execute("CREATE STREAM b WITH (source='feed')")
    send(first, 1, range(0, 10))
    first.run_cycle()  # checkpointed with b's position, b without a schema
    first.wait_for_checkpoint()  # written in the background before the crash
    first.feed_header("b", [("id", "BIGINT"), ("t", "BIGINT")], {"event_time": "t"})
    first.execute("CREATE QUERY qb INTO collect AS SELECT id FROM b")
    b = first.sources["b"]
    assert isinstance(b, FeedSource)
    b.push_group([FeedInput([{"id": 100, "t": 100}], None, False, 1),
                  FeedInput(None, 1_000, False, 2)], PRODUCER)
    second = start(spark, folder, sink2)
    second.run_until_idle()
    assert [int(i) for _c, f in sink2.cycles["qb"] for i in f["id"]] == [100]
