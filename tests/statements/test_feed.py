"""Feed streams in the engine (``docs/feed.md``): the protocol's messages read from their
frames, the spool, a stream without a schema until its HEADER, schema changes judged per
query, STOP and REMOVE, and spooled input surviving a restart. The same over real sockets
is in test_feed_server.py.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from sparkcq import Engine
from sparkcq.catalog import QueryStatus
from sparkcq.errors import AnalysisError, FeedError
from sparkcq.io.feed_protocol import (
    Boundary,
    FeedMessageError,
    Header,
    Insertion,
    parse_message,
    read_json,
)
from sparkcq.io.feed_source import FeedInput
from sparkcq.io.spool import Spool

COLUMNS = [("k", "BIGINT"), ("t", "BIGINT"), ("v", "DOUBLE")]


def rows_of(eng: Engine, query: str) -> list[tuple]:
    """The query's records as tuples (NULL as None), sorted."""
    frame = eng.results(query).astype(object)
    frame = frame.where(frame.notna(), None)
    return sorted((tuple(r) for r in frame.itertuples(index=False)), key=repr)


# -- the protocol ----------------------------------------------------------------------------
@pytest.mark.parametrize(("line", "error"), [
    (b"{not json", "the message is not JSON"),
    (b"[1, 2]", 'a message is a JSON object with a "kind"; got list'),
    (b'{"rows": []}', 'the message has no "kind"; kinds: CONNECT, HEADER, INSERTION'),
    (b'{"kind": "INSERT"}', "unknown message kind 'INSERT'; kinds: CONNECT"),
    (b'{"kind": "INSERTION"}', 'an INSERTION needs "rows": a list of objects; got nothing'),
    (b'{"kind": "INSERTION", "rows": {"a": 1}}', 'needs "rows": a list of objects; got dict'),
    (b'{"kind": "INSERTION", "rows": [], "colour": 1}',
     "unknown field(s) 'colour' in a INSERTION; it has bytes, format, row, rows, seq"),
    (b'{"kind": "BOUNDARY"}', 'a BOUNDARY needs "time"'),
    (b'{"kind": "HEADER", "columns": "k BIGINT"}', 'a HEADER needs "event_time"'),
    (b'{"kind": "HEADER", "columns": "k", "event_time": "k"}',
     "column 'k' needs a name and a type, as in 'pid BIGINT'"),
    (b'{"kind": "HEADER", "columns": 5, "event_time": "k"}', 'a HEADER needs "columns"'),
    (b'{"kind": "STOP", "seq": -1}', "seq must be a positive whole number; got -1"),
    (b'{"kind": "CONNECT"}', 'CONNECT needs "stream"'),
])
def test_unreadable_messages_say_what_is_wrong(line, error):
    with pytest.raises(FeedMessageError) as e:
        parse_message(read_json(line))
    assert error in str(e.value)


def test_messages_read_from_json_and_arrow():
    header = parse_message(read_json(
        b'{"kind": "header", "columns": "k BIGINT, p STRUCT<x: DOUBLE, y: DOUBLE>, t BIGINT",'
        b' "event_time": "t", "key": ["k"], "seq": 1}'))
    assert header == Header((("k", "BIGINT"), ("p", "STRUCT<x: DOUBLE, y: DOUBLE>"),
                             ("t", "BIGINT")), {"event_time": "t", "key": "k"}, 1)
    assert parse_message(read_json(b'{"kind": "BOUNDARY", "time": 5}')) == Boundary(5)
    table = pa.table({"k": [1, 2]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    message = parse_message({"kind": "INSERTION", "format": "arrow", "bytes": 1},
                            sink.getvalue().to_pybytes())
    assert isinstance(message, Insertion) and message.rows.equals(table)
    with pytest.raises(FeedMessageError, match="the Arrow data cannot be read"):
        parse_message({"kind": "INSERTION", "format": "arrow", "bytes": 3}, b"abc")


# -- the spool -------------------------------------------------------------------------------
def test_spool_keeps_entries_and_producers_across_a_restart(tmp_path):
    schema = pa.schema([("k", pa.int64())])
    spool = Spool(str(tmp_path / "s"))
    first = spool.append(pa.table({"k": [1, 2]}, schema=schema), schema, None, False, (),
                         {"p": 3})
    second = spool.append(None, schema, 40, False, (), {"p": 4, "q": 1})
    (tmp_path / "s" / "0000000000000009.arrow.tmp").write_bytes(b"torn")  # a crash mid-append
    again = Spool(str(tmp_path / "s"))
    assert again.seqs() == [first, second]
    assert again.read(first).table.column("k").to_pylist() == [1, 2]
    assert again.read(second).watermark == 40
    assert again.producers == {"p": 4, "q": 1}
    assert not any(n.endswith(".tmp") for n in os.listdir(tmp_path / "s"))
    assert again.trim(second) == 1
    assert Spool(str(tmp_path / "s")).producers == {"p": 4, "q": 1}  # kept after the trim
    assert again.next_seq == second + 1


# -- a stream before and after its HEADER --------------------------------------------------------
def test_a_feed_stream_has_no_columns_until_its_header(engine):
    engine.execute("CREATE STREAM s WITH (source='feed')")
    assert engine.show("STREAMS").set_index("name").loc["s", "state"] == "not connected"
    with pytest.raises(AnalysisError) as e:
        engine.execute("CREATE QUERY q AS SELECT k FROM s")
    assert "stream 's' is not connected: its columns are unknown until its feed sends a " \
        "HEADER (line 1, col 33)" in str(e.value)
    with pytest.raises(FeedError, match="has no schema yet|send a HEADER"):
        engine.feed_source("s").push_group([FeedInput([{"k": 1}])], None)
    assert engine.feed_header("s", COLUMNS, {"event_time": "t"})["change"] == "connected"
    assert engine.feed_header("s", COLUMNS, {"event_time": "t"})["change"] == "unchanged"
    engine.execute("CREATE QUERY q AS SELECT k, v FROM s")
    engine.feed_source("s").push_group([FeedInput([{"k": 1, "t": 5, "v": 0.5}], 10)], None)
    engine.run_cycle()
    assert rows_of(engine, "q") == [(1, 0.5, 5, 5)]  # k, v, _ts, _te


@pytest.mark.parametrize(("columns", "options", "error"), [
    ([("k", "BIGINT"), ("t", "NUMBERISH")], {"event_time": "t"},
     "HEADER: unknown type 'NUMBERISH' for column 't'"),
    ([("k", "BIGINT"), ("K", "BIGINT")], {"event_time": "k"}, "HEADER names column 'K' twice"),
    (COLUMNS, {"event_time": "when"},
     "HEADER for 's': event_time column 'when' is not a column of 's'"),
    (COLUMNS, {"event_time": "v"},
     "HEADER for 's': event_time column 'v' is double; it must be a TIMESTAMP or an integral"),
    (COLUMNS, {"event_time": "t", "lateness": "soon"}, "HEADER for 's': lateness:"),
])
def test_a_bad_header_says_what_is_wrong(engine, columns, options, error):
    engine.execute("CREATE STREAM s WITH (source='feed')")
    with pytest.raises(FeedError) as e:
        engine.feed_header("s", columns, options)
    assert error in str(e.value)
    assert not engine.catalog.stream("s").connected


def test_only_a_feed_stream_takes_a_feed(engine):
    engine.execute("CREATE STREAM m (k BIGINT, t BIGINT) WITH (event_time='t')")
    with pytest.raises(FeedError, match="fed by the memory source; a feed connects only to a "
                                        "stream created WITH \\(source='feed'\\)"):
        engine.feed_source("m")


def test_rows_refused_late_and_resent_are_told_apart(engine):
    engine.execute("CREATE STREAM s (k BIGINT, t BIGINT, v DOUBLE) "
                   "WITH (source='feed', event_time='t')")
    engine.execute("CREATE QUERY q AS SELECT k, v FROM s")
    source = engine.feed_source("s")
    first = source.push_group([
        FeedInput([{"k": 1, "t": 10, "v": 1.0}, {"k": "one", "t": 11}], seq=1),
        FeedInput(pa.table({"k": [2], "t": [12], "v": [2.0]}), seq=2)], "p")
    assert [r.accepted for r in first] == [1, 1]
    assert first[0].rejected[0].describe() == \
        "row 1, column 'k': 'one' is not a whole number (column type BIGINT)"
    late = source.push_group([FeedInput([{"k": 3, "t": 13}, {"k": 4, "t": 5}], seq=3),
                              FeedInput([{"k": 9, "t": 99}], seq=2),
                              FeedInput(None, 20, seq=4)], "p")
    assert [(e.index, e.reason) for e in late[0].late] == [
        (1, "late: event time 5 is before the stream's watermark 12")]
    assert late[1].duplicate and late[1].accepted == 0  # seq 2 was taken already
    engine.run_cycle()
    assert [r[:2] for r in rows_of(engine, "q")] == [(1, 1.0), (2, 2.0), (3, None)]
    dead = engine.dead_letters("s")
    reasons = sorted(str(r) for r in dead["_reason"])
    assert len(reasons) == 2
    assert reasons[0] == "late: event time 5 is before the watermark 12"
    assert "'one' is not a whole number" in reasons[1]


# -- schema changes ------------------------------------------------------------------------------
def test_a_schema_change_keeps_the_queries_that_still_compile(engine):
    engine.execute("CREATE STREAM s WITH (source='feed')")
    engine.feed_header("s", COLUMNS, {"event_time": "t"})
    engine.execute("CREATE QUERY total AS SELECT k, SUM(v) AS s FROM s GROUP BY k")
    engine.execute("CREATE QUERY only_k AS SELECT k FROM s")
    engine.execute("CREATE QUERY kept WITH (on_schema_change='keep') AS SELECT k, v FROM s")
    source = engine.feed_source("s")
    source.push_group([FeedInput([{"k": 1, "t": 1, "v": 2.0}, {"k": 1, "t": 2, "v": 3.0}])],
                      None)
    engine.run_cycle()
    # v becomes text: SUM(v) no longer compiles; k alone does; `kept` asked to keep v
    outcome = engine.feed_header("s", [("k", "BIGINT"), ("t", "BIGINT"), ("v", "STRING"),
                                        ("w", "STRING")], {"event_time": "t"})
    assert outcome["change"] == "changed"
    assert sorted(outcome["kept"]) == ["kept", "only_k"] and outcome["stopped"] == ["total"]
    total = engine.catalog.query("total")
    assert total.status is QueryStatus.STOPPED
    assert "stopped: unknown column 'v'" in total.log[-1]
    assert "it keeps running" in engine.catalog.query("only_k").log[-1]
    assert "it keeps the old columns" in engine.catalog.query("kept").log[-1]
    engine.execute("CREATE QUERY wide AS SELECT k, v, w FROM s")  # the new columns
    source.push_group([FeedInput([{"k": 2, "t": 3, "v": "x", "w": "y"}], 10)], None)
    engine.run_cycle()
    assert rows_of(engine, "only_k") == [(1, 1, 1), (1, 2, 2), (2, 3, 3)]
    assert rows_of(engine, "kept") == [(1, 2.0, 1, 1), (1, 3.0, 2, 2), (2, None, 3, 3)]
    assert rows_of(engine, "wide") == [(2, "x", "y", 3, 3)]
    engine.drop("QUERY", "kept")
    engine.drop("QUERY", "only_k")
    assert engine.scans.earlier["s"] == []  # no query reads the old schema: its scan is freed


# -- STOP and REMOVE -----------------------------------------------------------------------------
def test_stop_pauses_readers_until_data_and_remove_stops_them(engine):
    engine.execute("CREATE STREAM a WITH (source='feed'); CREATE STREAM b WITH (source='feed')")
    engine.feed_header("a", COLUMNS, {"event_time": "t"})
    engine.feed_header("b", COLUMNS, {"event_time": "t"})
    engine.execute("CREATE QUERY qa AS SELECT k FROM a")
    engine.execute("CREATE QUERY qab AS SELECT a.k FROM a [RANGE 5], b [RANGE 5] "
                   "WHERE a.k = b.k")
    assert engine.feed_stop("a") == ["qa", "qab"]
    assert engine.show("STREAMS").set_index("name").loc["a", "state"] == "stopped"
    engine.run_cycle()
    assert engine.catalog.query("qa").status is QueryStatus.PAUSED
    engine.feed_source("a").push_group([FeedInput([{"k": 1, "t": 1}], 5)], None)
    engine.run_cycle()
    assert engine.catalog.query("qa").status is QueryStatus.RUNNING
    assert "resumed: data came again on stream 'a'" in engine.catalog.query("qa").log[-1]
    assert engine.feed_remove("b").stopped == ["qab"]
    qab = engine.catalog.query("qab")
    assert qab.status is QueryStatus.STOPPED
    assert "stopped: stream 'b' was removed: its feed removed it (REMOVE)" in qab.log[-1]
    assert "b" not in engine.catalog.streams
    assert engine.catalog.query("qa").status is QueryStatus.RUNNING
    engine.run_cycle()
    assert rows_of(engine, "qa") == [(1, 1, 1)]



def test_a_query_that_keeps_a_removed_stream_drains_its_windows_and_goes_on(engine):
    """on_remove='keep': REMOVE ends the stream's input, so its open windows close (by hand:
    k=1 counts 1 on [1, 3), 2 on [3, 11), 1 on [11, 13); k=2 counts 1 on [4, 14)); the query
    keeps running with the other stream; the removed stream is refused to everyone else and
    leaves with its last reader.
    """
    engine.execute("CREATE STREAM a WITH (source='feed'); CREATE STREAM b WITH (source='feed')")
    engine.feed_header("a", COLUMNS, {"event_time": "t"})
    engine.feed_header("b", COLUMNS, {"event_time": "t"})
    engine.execute("CREATE QUERY counts WITH (on_remove='keep') AS "
                   "SELECT k, COUNT(*) AS n FROM b [RANGE 10] GROUP BY k")
    engine.execute("CREATE QUERY both_ WITH (on_remove='KEEP') AS "
                   "SELECT a.k, b.v FROM a [RANGE 5], b [RANGE 5] WHERE a.k = b.k")
    engine.execute("CREATE QUERY plain AS SELECT k FROM b")
    engine.feed_source("b").push_group([FeedInput(
        [{"k": 1, "t": 1, "v": 1.0}, {"k": 1, "t": 3, "v": 2.0}, {"k": 2, "t": 4, "v": 3.0}],
        5)], None)
    engine.run_cycle()
    # at watermark 5 the elements that started are out, those still valid open
    assert rows_of(engine, "counts") == [(1, 1, 1, 3), (1, 2, 3, None), (2, 1, 4, None)]
    removal = engine.feed_remove("b")
    assert (removal.stopped, sorted(removal.kept)) == (["plain"], ["both_", "counts"])
    assert "(on_remove='keep')" in engine.catalog.query("counts").log[-1]
    assert engine.show("STREAMS").set_index("name").loc["b", "state"] == "removed"
    with pytest.raises(AnalysisError, match="stream 'b' was removed by its feed"):
        engine.execute("CREATE QUERY late AS SELECT k FROM b")
    with pytest.raises(AnalysisError, match="stream 'b' was removed by its feed"):
        engine.execute("CREATE QUERY late LANGUAGE apas AS 'select o[k = $b.k]; select [$o[T]]'")
    with pytest.raises(FeedError, match="stream 'b' was removed"):
        engine.feed_header("b", COLUMNS, {"event_time": "t"})
    engine.run_cycle()
    assert rows_of(engine, "counts") == [(1, 1, 1, 3), (1, 1, 11, 13), (1, 2, 3, 11),
                                         (2, 1, 4, 14)]
    # the join goes on: b's rows stay valid to their window's end, a's meet them
    engine.feed_source("a").push_group([FeedInput([{"k": 2, "t": 6, "v": 0.0}], 20)], None)
    engine.run_cycle()
    assert rows_of(engine, "both_") == [(2, 3.0, 6, 9)]
    assert engine.catalog.query("both_").status is QueryStatus.RUNNING
    engine.drop("QUERY", "counts")
    assert "b" in engine.catalog.streams  # both_ still reads it
    engine.drop("QUERY", "both_")
    assert "b" not in engine.catalog.streams
    engine.execute("CREATE STREAM b WITH (source='feed')")  # the name is free again


def test_on_remove_takes_stop_or_keep(engine):
    engine.execute("CREATE STREAM s (k BIGINT, t BIGINT) WITH (event_time='t')")
    with pytest.raises(AnalysisError, match="on_remove 'drain': use 'stop'"):
        engine.execute("CREATE QUERY q WITH (on_remove='drain') AS SELECT k FROM s")

# -- durability ----------------------------------------------------------------------------------
def test_acknowledged_rows_not_yet_taken_survive_a_restart(spark, tmp_path):
    folder = str(tmp_path / "ck")
    first = Engine(spark=spark, checkpoint_dir=folder)
    first.execute("CREATE STREAM s WITH (source='feed')")
    first.feed_header("s", COLUMNS, {"event_time": "t"})
    first.execute("CREATE QUERY q AS SELECT k, SUM(v) AS total FROM s GROUP BY k")
    source = first.feed_source("s")
    source.push_group([FeedInput([{"k": 1, "t": 1, "v": 1.0}], seq=1)], "p")
    first.run_cycle()
    first.wait_for_checkpoint()  # written in the background
    # checkpointed: the spool is trimmed but for the entry whose event the stream holds
    # at its watermark (1), which the checkpoint names rather than writes
    assert source.spool.seqs() == [1]
    source.push_group([FeedInput([{"k": 1, "t": 2, "v": 2.0}], seq=2),
                       FeedInput(None, 10, seq=3)], "p")
    assert source.spool.seqs() == [1, 2]  # 2 acknowledged, not taken: a crash now
    again = Engine(spark=spark, checkpoint_dir=folder)  # the restart
    resumed = again.feed_source("s")
    assert resumed.producers_seq("p") == 3
    assert resumed.push_group([FeedInput([{"k": 7, "t": 3}], seq=2)], "p")[0].duplicate
    again.run_cycle()
    # the restarted engine closes the total of 1.0 at t=2, when the spooled row arrives
    assert [r[:4] for r in rows_of(again, "q")] == [(1, 1.0, 1, 2), (1, 3.0, 2, None)]


def test_a_keyed_feed_stream_takes_deletes(engine):
    """HEADER with a key: each key keeps its current row; a DELETE ends it."""
    engine.execute("CREATE STREAM rooms WITH (source='feed')")
    engine.feed_header("rooms", [("room", "STRING"), ("t", "BIGINT"), ("temp", "DOUBLE")],
                        {"event_time": "t", "key": "room"})
    assert engine.show("STREAMS").set_index("name").loc["rooms", "key"] == "room"
    engine.execute("CREATE QUERY cur AS SELECT room, temp FROM rooms")
    source = engine.feed_source("rooms")
    got = source.push_group([
        FeedInput([{"room": "a", "t": 1, "temp": 20.0}, {"room": "b", "t": 2, "temp": 18.0}]),
        FeedInput([{"room": "a", "t": 5, "temp": 21.0}]),
        FeedInput(None, None, False, None, [{"room": "b", "t": 7}, {"room": "c"}]),
        FeedInput(None, 10)], None)
    assert [(r.accepted, r.deleted) for r in got] == [(2, 0), (1, 0), (0, 1), (0, 0)]
    assert got[2].rejected[0].what == "delete" and got[2].rejected[0].column == "t"
    engine.run_cycle()
    assert rows_of(engine, "cur") == [("a", 20.0, 1, 5), ("a", 21.0, 5, None),
                                      ("b", 18.0, 2, 7)]
