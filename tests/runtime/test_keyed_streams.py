"""Keyed (temporal-tabular) streams: hand-computed examples.

A stream declared ``WITH (key='k')`` keeps one current row per key: a row with a new key
is valid from its event time, open; the next row of its key replaces it (closes it at the
new row's time); a delete closes it at the delete's time. At one instant a key's deletes
come before its rows, and its rows go in value order (the last one stays).

Input (stream prices, key k, numeric time), worked out in the comments of each test:
    @1  k1 n 10        @2  k2 s 20        @4  k1 n 11 (replaces 10)
    @6  delete k2      @8  k2 s 21, k3 n 30
    @9  delete k1 and k1 s 12 (an update: the delete goes first, 12 stays)
    @10 k2 s 22 and k2 s 23 (same instant: 22 is valid for no time, 23 stays)
    @12 delete k3
(stream trades, append-only, [NOW]): k1 q5 @3, k2 q7 @7, k1 q1 @9, k2 q3 @10, k3 q2 @11
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pandas as pd
import pytest

from sparkcq import Engine
from sparkcq.errors import AnalysisError, SourceError

INF = None

PRICES = [
    {"k": 1, "region": "n", "t": 1, "v": 10.0}, {"k": 2, "region": "s", "t": 2, "v": 20.0},
    {"k": 1, "region": "n", "t": 4, "v": 11.0}, {"k": 2, "region": "s", "t": 8, "v": 21.0},
    {"k": 3, "region": "n", "t": 8, "v": 30.0}, {"k": 1, "region": "s", "t": 9, "v": 12.0},
    {"k": 2, "region": "s", "t": 10, "v": 23.0}, {"k": 2, "region": "s", "t": 10, "v": 22.0},
]
DELETES = [{"k": 2, "t": 6}, {"k": 1, "t": 9}, {"k": 3, "t": 12}]
TRADES = [{"k": 1, "q": 5, "t": 3}, {"k": 2, "q": 7, "t": 7}, {"k": 1, "q": 1, "t": 9},
          {"k": 2, "q": 3, "t": 10}, {"k": 3, "q": 2, "t": 11}]

QUERIES = {
    "rows": "SELECT k, region, v FROM prices",
    "total": "SELECT sum(v) AS total, count(*) AS n FROM prices",
    "per_region": "SELECT region, sum(v) AS total FROM prices GROUP BY region",
    "priced": "SELECT tr.k AS k, tr.q AS q, p.v AS v FROM trades [NOW] AS tr "
              "JOIN prices AS p ON tr.k = p.k",
    "inserted": "ISTREAM SELECT k, v FROM prices WHERE v > 20",
}


def records(engine: Engine, query: str) -> list[tuple]:
    frame = engine.results(query)
    return sorted(tuple(None if pd.isna(v) else v for v in row)  # open end as None
                  for row in frame.itertuples(index=False))


def keyed_engine(spark) -> Engine:
    eng = Engine(spark=spark)
    eng.execute("""
        CREATE STREAM prices (k BIGINT, region STRING, t BIGINT, v DOUBLE)
            WITH (event_time='t', key='k');
        CREATE STREAM trades (k BIGINT, q BIGINT, t BIGINT) WITH (event_time='t');
    """)
    return eng


@pytest.fixture(scope="module")
def results(spark):
    """Every query over the input, pushed one instant at a time (the rows of an instant in
    reverse order), several instants per cycle: the results are those worked out by hand,
    which are also what one cycle of all the input gives (the property suite checks that
    results do not depend on the cycles)."""
    eng = keyed_engine(spark)
    for name, sql in QUERIES.items():
        eng.execute(f"CREATE QUERY {name} AS {sql}")
    for t in range(1, 13):
        eng.push("prices", [r for r in PRICES if r["t"] == t][::-1], watermark=t,
                 deletes=[d for d in DELETES if d["t"] == t])
        eng.push("trades", [r for r in TRADES if r["t"] == t], watermark=t)
        if t % 4 == 0:
            eng.run_until_idle()
    eng.end_input("prices")
    eng.end_input("trades")
    eng.run_until_idle()
    out = {name: records(eng, name) for name in QUERIES}
    eng.stop()
    return out


def test_a_row_lives_until_its_key_is_replaced_or_deleted(results):
    assert results["rows"] == [
        (1, "n", 10.0, 1, 4),  # replaced by 11 @4
        (1, "n", 11.0, 4, 9),  # deleted @9 (and replaced by 12 at the same instant)
        (1, "s", 12.0, 9, INF),
        (2, "s", 20.0, 2, 6),  # deleted @6
        (2, "s", 21.0, 8, 10),  # replaced @10 by 23 (22 came at the same instant: 22 < 23)
        (2, "s", 23.0, 10, INF),
        (3, "n", 30.0, 8, 12),  # deleted @12
    ]


def test_an_aggregate_sums_the_current_rows(results):
    # current rows:  @1 {10}  @2 {10,20}  @4 {11,20}  @6 {11}  @8 {11,21,30}
    #                @9 {12,21,30}  @10 {12,23,30}  @12 {12,23}
    assert results["total"] == [
        (10.0, 1, 1, 2), (11.0, 1, 6, 8), (30.0, 2, 2, 4), (31.0, 2, 4, 6), (35.0, 2, 12, INF),
        (62.0, 3, 8, 9), (63.0, 3, 9, 10), (65.0, 3, 10, 12),
    ]


def test_a_replacement_moves_a_key_between_groups(results):
    # k1 is in region n until @9, then in s; n is empty from @12 (k3 deleted), s from @6
    # to @8 (k2 deleted, then back)
    assert results["per_region"] == [
        ("n", 10.0, 1, 4), ("n", 11.0, 4, 8), ("n", 30.0, 9, 12), ("n", 41.0, 8, 9),
        ("s", 20.0, 2, 6), ("s", 21.0, 8, 9), ("s", 33.0, 9, 10), ("s", 35.0, 10, INF),
    ]


def test_a_join_with_an_append_stream_finds_the_row_valid_at_each_event(results):
    # trade k2 @7 finds none: k2 was deleted @6 and comes back @8
    assert results["priced"] == [
        (1, 1, 12.0, 9, 10), (1, 5, 10.0, 3, 4), (2, 3, 23.0, 10, 11), (3, 2, 30.0, 11, 12),
    ]


def test_istream_of_a_keyed_stream_is_its_insertions(results):
    assert results["inserted"] == [(2, 21.0, 8, 8), (2, 23.0, 10, 10), (3, 30.0, 8, 8)]


def test_a_late_delete_goes_to_the_dead_letters(engine):
    engine.execute("CREATE STREAM s (k BIGINT, t BIGINT, v BIGINT) "
                   "WITH (event_time='t', key='k')")
    engine.execute("CREATE QUERY q AS SELECT k, v FROM s")
    engine.push("s", [{"k": 1, "t": 1, "v": 5}], watermark=10)
    receipt = engine.delete("s", [{"k": 1, "t": 3}, {"k": 1, "t": 12}, {"k": 1}, {"t": 4}])
    assert (receipt.accepted, receipt.deleted) == (0, 2)
    assert [(e.what, e.index, e.column) for e in receipt.rejected] == [
        ("delete", 2, "t"), ("delete", 3, "k")]
    assert "a delete of 's' needs this column" in receipt.rejected[0].reason
    engine.end_input("s")
    engine.run_until_idle()
    assert records(engine, "q") == [(1, 5, 1, 12)]  # only the delete @12 applies
    dead = engine.dead_letters("s")
    late = dead[dead["_reason"].str.startswith("late")]
    assert late[["k", "t"]].values.tolist() == [[1, 3]]
    assert late["_reason"].tolist() == [
        "late: event time 3 is before the watermark 10 (a delete)"]
    assert dead["_reason"].str.startswith("delete 2, column 't'").sum() == 1
    assert engine.metrics()["dead_letters"] == {"s": 3}


def test_import_table_makes_rows_valid_from_the_watermark(engine):
    engine.execute("""
        CREATE STREAM st (k BIGINT, name STRING, t BIGINT) WITH (event_time='t', key='k');
        CREATE TABLE names (k BIGINT, name STRING);
        CREATE QUERY q AS SELECT k, name FROM st;
    """)
    with pytest.raises(SourceError, match="has no watermark yet"):
        engine.import_table("st", [{"k": 1, "name": "b"}])
    engine.push("st", [{"k": 1, "name": "a", "t": 1}], watermark=5)
    engine.run_until_idle()
    # added at 5, over the keyed stream q reads: it starts from the current rows (k1)
    engine.execute("CREATE QUERY n AS SELECT count(*) AS n FROM st")
    # valid from the watermark, 5: replaces k1's row, adds k2's
    receipt = engine.import_table("st", [{"k": 1, "name": "b"}, {"k": 2, "name": "c"}])
    assert receipt.accepted == 2
    engine.load_table("names", [{"k": 2, "name": "d"}, {"k": 3, "name": "e"}])
    engine.import_table("st", "names", at=7)  # from a table, at an explicit time
    with pytest.raises(SourceError, match="unknown column"):
        engine.import_table("st", [{"k": 4, "name": "x", "t": 8}])  # the time is ``at``'s
    engine.end_input("st")
    engine.run_until_idle()
    assert records(engine, "q") == [
        (1, "a", 1, 5), (1, "b", 5, INF), (2, "c", 5, 7), (2, "d", 7, INF), (3, "e", 7, INF)]
    assert records(engine, "n") == [(2, 5, 7), (3, 7, INF)]


def test_a_timestamp_keyed_stream_takes_deletes_and_an_import(engine):
    engine.execute("CREATE STREAM s (id STRING, zone STRING, at TIMESTAMP) "
                   "WITH (event_time='at', key='id, zone')")
    engine.execute("CREATE QUERY q AS SELECT id, zone, count(*) AS n FROM s GROUP BY id, zone")
    engine.push("s", [{"id": "a", "zone": "z", "at": "2026-01-01T00:00:01Z"}],
                deletes=[{"id": "a", "zone": "z", "at": "2026-01-01T00:00:03Z"}])
    # the delete @3 s raised the watermark to 3 s: the import is on time from 5 s
    engine.import_table("s", [{"id": "b", "zone": "z"}], at="2026-01-01T00:00:05Z")
    engine.end_input("s")
    engine.run_until_idle()
    got = engine.results("q")
    spans = sorted((r["id"], r["n"], str(r["_ts"]), str(r["_te"]))
                   for r in got.to_dict("records"))
    assert spans == [("a", 1, "2026-01-01 00:00:01+00:00", "2026-01-01 00:00:03+00:00"),
                     ("b", 1, "2026-01-01 00:00:05+00:00", "NaT")]


@pytest.mark.parametrize(
    ("ddl", "fragment"),
    [
        ("WITH (event_time='t', key='kk')", "key column 'kk' is not a column of 's'"),
        ("WITH (event_time='t', key='k, nope')", "key column 'nope'"),
        ("WITH (event_time='t', key='k, K')", "names a column twice"),
        ("WITH (event_time='t', key='')", "name the key columns"),
        ("WITH (event_time='t', end_time='t', key='k')", "cannot also take end_time"),
    ],
    ids=["unknown", "unknown of two", "twice", "empty", "with end_time"],
)
def test_a_bad_key_option_is_refused_where_it_is_written(engine, ddl, fragment):
    sql = f"CREATE STREAM s (k BIGINT, v DOUBLE, t BIGINT) {ddl}"
    with pytest.raises(AnalysisError, match=fragment) as err:
        engine.execute(sql)
    start = sql.index("key=")
    assert (err.value.loc.start, err.value.loc.end) == (start, sql.index("'", start + 5) + 1)


def test_a_window_clause_on_a_keyed_stream_is_refused(engine):
    engine.execute("CREATE STREAM s (k BIGINT, v DOUBLE, t BIGINT) "
                   "WITH (event_time='t', key='k')")
    sql = "CREATE QUERY q AS SELECT k, sum(v) AS s FROM s [RANGE 10] GROUP BY k"
    with pytest.raises(AnalysisError, match="'s' is a keyed stream") as err:
        engine.execute(sql)
    assert err.value.loc.col == sql.index("[RANGE") + 1


def test_deletes_need_a_keyed_memory_stream(engine):
    engine.execute("CREATE STREAM s (k BIGINT, t BIGINT) WITH (event_time='t')")
    with pytest.raises(SourceError, match="has no key, so it takes no deletes"):
        engine.delete("s", [{"k": 1, "t": 1}])
    with pytest.raises(SourceError, match="has no key"):
        engine.import_table("s", [{"k": 1}], at=1)


def post(app: Any, path: str, body: dict) -> tuple[int, dict]:
    """One POST to an ASGI app, in process."""
    sent: list[dict] = []
    data = json.dumps(body).encode()

    async def receive() -> dict:
        return {"type": "http.request", "body": data, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(),
             "query_string": b"", "headers": [(b"content-type", b"application/json")],
             "http_version": "1.1", "scheme": "http", "server": ("127.0.0.1", 80),
             "client": ("127.0.0.1", 1), "root_path": ""}
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    payload = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(payload)


def test_the_push_route_takes_deletes(engine):
    pytest.importorskip("starlette")
    from sparkcq.server.app import build_app
    from sparkcq.server.loop import EngineLoop

    engine.execute("CREATE STREAM s (k BIGINT, t BIGINT, v BIGINT) "
                   "WITH (event_time='t', key='k')")
    engine.execute("CREATE QUERY q AS SELECT k, v FROM s")
    app = build_app(EngineLoop(engine))
    status, answer = post(app, "/streams/s/rows", {
        "rows": [{"k": 1, "t": 1, "v": 5}, {"k": 2, "t": 1, "v": 6}],
        "deletes": [{"k": 1, "t": 4}, {"k": "x", "t": 5}], "end": True})
    assert status == 200
    assert answer["accepted"] == 2 and answer["deleted"] == 1
    assert [(r["index"], r["column"], r.get("delete")) for r in answer["rejected"]] == [
        (1, "k", True)]
    engine.run_until_idle()
    assert records(engine, "q") == [(1, 5, 1, 4), (2, 6, 1, INF)]
