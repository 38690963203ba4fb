"""PostgreSQL tables (Spark's JDBC reader) and the transactional sink, on a real server.

The ``postgres`` fixture (tests/conftest.py) runs a private server for the session; each test
uses tables of its own names.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pandas as pd
import psycopg
import pytest

from sparkcq import Engine
from sparkcq.errors import AnalysisError, CatalogError, SinkError, SourceError
from sparkcq.model.clock import ManualClock

UTC = dt.UTC


@pytest.fixture
def db(postgres):
    """A psycopg connection to the test database (autocommit)."""
    with psycopg.connect(postgres.conninfo(), autocommit=True) as conn:
        yield conn


@pytest.fixture
def clock():
    """Processing time that moves only when a test says so."""
    return ManualClock()


@pytest.fixture
def pg_engine(spark, postgres, tmp_path, clock):
    """A sandboxed engine (like the server's) whose operator configured database 'inv'."""
    eng = Engine(spark=spark, data_roots=[str(tmp_path)], databases={"inv": postgres.url},
                 clock=clock)
    yield eng
    eng.stop()


def make_table(db, name: str, ddl: str, rows: list[tuple]) -> None:
    db.execute(f"DROP TABLE IF EXISTS {name}")
    db.execute(f"CREATE TABLE {name} ({ddl})")
    if rows:
        marks = ", ".join(["%s"] * len(rows[0]))
        with db.cursor() as cur:
            cur.executemany(f"INSERT INTO {name} VALUES ({marks})", rows)


def fetch(db, sql: str) -> list[tuple]:
    return db.execute(sql).fetchall()


def test_a_stream_joined_with_a_postgres_table(pg_engine, db):
    make_table(db, "hosts_join", "ip text, host_id text, rack integer",
               [("10.0.0.1", "h1", 1), ("10.0.0.2", "h2", 2), ("10.0.0.3", "h3", 3)])
    pg_engine.execute("""
        CREATE TABLE hosts (ip STRING, host_id STRING, rack BIGINT)
          WITH (format='postgres', database='inv', table='hosts_join');
        CREATE STREAM packets (pid BIGINT, t BIGINT, from_ip STRING, bytes BIGINT)
          WITH (event_time='t');
        CREATE QUERY traffic AS
          SELECT h.host_id AS host, sum(p.bytes) AS total
          FROM packets [CUT ON t BY 60] AS p JOIN hosts AS h ON p.from_ip = h.ip
          GROUP BY h.host_id;
    """)
    pg_engine.push("packets", [
        {"pid": 1, "t": 10, "from_ip": "10.0.0.1", "bytes": 100},
        {"pid": 2, "t": 20, "from_ip": "10.0.0.2", "bytes": 50},
        {"pid": 3, "t": 30, "from_ip": "10.0.0.1", "bytes": 25},
        {"pid": 4, "t": 70, "from_ip": "10.0.0.1", "bytes": 10},
        {"pid": 5, "t": 80, "from_ip": "10.9.9.9", "bytes": 999},  # no such host
    ])
    pg_engine.end_input("packets")
    pg_engine.run_until_idle()
    got = pg_engine.results("traffic").sort_values(["_ts", "host"])
    # chunk [0, 60): h1 100 + 25, h2 50, valid for one chunk from its cut point 60;
    # chunk [60, 120): h1 10, valid on [120, 180)
    assert [tuple(r) for r in got.itertuples(index=False)] == [
        ("h1", 125, 60, 120), ("h2", 50, 60, 120), ("h1", 10, 120, 180)]
    tables = pg_engine.show("TABLES").set_index("name")
    assert tables.loc["hosts", "source"] == "postgres inv: hosts_join"
    assert tables.loc["hosts", "version"] == 0
    assert tables.loc["hosts", "schema"] == "struct<ip:string,host_id:string,rack:bigint>"
    assert pg_engine.reports[-1].tables == {"hosts": 0}
    # the rows were read once, when the table was created: the database is not read again
    db.execute("DELETE FROM hosts_join")
    pg_engine.execute("""
        CREATE STREAM more (t BIGINT, from_ip STRING) WITH (event_time='t');
        CREATE QUERY again AS ISTREAM SELECT h.host_id AS host
          FROM more [NOW] AS p JOIN hosts AS h ON p.from_ip = h.ip;
    """)
    pg_engine.push("more", [{"t": 200, "from_ip": "10.0.0.3"}], watermark=201)
    pg_engine.run_cycle()
    assert list(pg_engine.results("again")["host"]) == ["h3"]


def test_a_postgres_table_without_columns_takes_the_database_s(pg_engine, db):
    make_table(db, "typed", "id bigint, price numeric(8,2), seen timestamptz, ok boolean",
               [(1, Decimal("9.50"), dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), True)])
    pg_engine.execute("CREATE TABLE typed WITH (format='postgres', database='inv', "
                      "table='public.typed')")
    info = pg_engine.catalog.tables["typed"]
    assert info.schema.simpleString() == \
        "struct<id:bigint,price:decimal(8,2),seen:timestamp,ok:boolean>"
    row = info.dataframe.collect()[0]
    assert (row.id, row.price, row.ok) == (1, Decimal("9.50"), True)
    e = pytest.raises(AnalysisError, pg_engine.execute,
                      "CREATE TABLE t2 (id BIGINT, nope STRING) WITH (format='postgres', "
                      "database='inv', table='typed')").value
    assert "has no column 'nope'; its columns: id, price, seen, ok" in e.message
    e = pytest.raises(AnalysisError, pg_engine.execute,
                      "CREATE TABLE t3 WITH (format='csv', path='t3.csv')").value
    assert "only a format='postgres' table takes the database's" in e.message


def test_refresh_table_reads_changed_rows_for_a_new_query(pg_engine, db):
    make_table(db, "hosts_refresh", "ip text, host_id text", [("1.1.1.1", "old")])
    pg_engine.execute("""
        CREATE TABLE hosts (ip STRING, host_id STRING)
          WITH (format='postgres', database='inv', table='hosts_refresh');
        CREATE STREAM pk (ip STRING, t BIGINT) WITH (event_time='t');
        CREATE QUERY q1 AS ISTREAM SELECT h.host_id AS host
          FROM pk [NOW] AS p JOIN hosts AS h ON p.ip = h.ip;
    """)
    pg_engine.push("pk", [{"ip": "1.1.1.1", "t": 1}], watermark=2)
    pg_engine.run_cycle()
    assert list(pg_engine.results("q1")["host"]) == ["old"]
    db.execute("UPDATE hosts_refresh SET host_id = 'new'")
    read_before = pg_engine.catalog.tables["hosts"].read_at
    # a running query reads it: it switches to the new rows in the next cycle, at its
    # position (2); an event from then on meets 'new'
    pg_engine.execute("REFRESH TABLE hosts")
    tables = pg_engine.show("TABLES").set_index("name")
    assert tables.loc["hosts", "version"] == 1
    assert pg_engine.catalog.tables["hosts"].read_at >= read_before
    pg_engine.push("pk", [{"ip": "1.1.1.1", "t": 3}], watermark=4)
    pg_engine.run_cycle()
    assert list(pg_engine.results("q1")["host"]) == ["old", "new"]
    pg_engine.execute("CREATE QUERY q2 AS ISTREAM SELECT h.host_id AS host "
                      "FROM pk [NOW] AS p JOIN hosts AS h ON p.ip = h.ip")
    pg_engine.push("pk", [{"ip": "1.1.1.1", "t": 5}], watermark=6)
    pg_engine.run_cycle()
    assert list(pg_engine.results("q2")["host"]) == ["new"]
    assert pg_engine.reports[-1].tables == {"hosts": 1}
    # a table registered from data has nothing to re-read
    pg_engine.register_table("mem", [{"a": 1}])
    e = pytest.raises(CatalogError, pg_engine.execute, "REFRESH TABLE mem").value
    assert "registered from data" in str(e)
    # a failed read keeps the version the table has
    db.execute("DROP TABLE hosts_refresh")
    e = pytest.raises(SourceError, pg_engine.refresh_table, "hosts").value
    assert 'relation "hosts_refresh" does not exist' in str(e)
    assert "keeps version 1" in str(e)


def test_refresh_interval_re_reads_at_the_first_cycle_after_it(pg_engine, db, clock):
    make_table(db, "rates", "k text, r double precision", [("a", 1.0)])
    make_table(db, "rates_used", "k text, r double precision", [("a", 1.0)])
    pg_engine.execute("""
        CREATE TABLE rates (k STRING, r DOUBLE)
          WITH (format='postgres', database='inv', table='rates', refresh='1 SECOND');
        CREATE TABLE used (k STRING, r DOUBLE)
          WITH (format='postgres', database='inv', table='rates_used', refresh='1 SECOND');
        CREATE STREAM s (k STRING, t BIGINT) WITH (event_time='t');
        CREATE QUERY q AS ISTREAM SELECT u.r AS r FROM s [NOW] AS x JOIN used AS u ON x.k = u.k;
    """)
    db.execute("UPDATE rates SET r = 2.0")
    clock.advance(0.9)
    pg_engine.run_cycle()  # within the interval: nothing is read
    assert pg_engine.show("TABLES")["version"].tolist() == [0, 0]
    clock.advance(0.1)
    pg_engine.run_cycle()
    tables = pg_engine.show("TABLES").set_index("name")
    assert tables.loc["rates", "version"] == 1
    assert tables.loc["rates", "refresh"] == "1 SECONDS"
    assert pg_engine.catalog.tables["rates"].dataframe.collect()[0].r == 2.0
    # the table a running query reads is re-read too: the query switches to it
    assert tables.loc["used", "version"] == 1
    assert tables.loc["used", "note"] is None


def test_the_sink_commits_two_queries_of_a_cycle_in_one_transaction(pg_engine, db):
    for name in ("sink_events", "sink_latest", "sparkcq_commits"):
        db.execute(f"DROP TABLE IF EXISTS {name}")
    pg_engine.execute("""
        CREATE STREAM s (k STRING, v BIGINT, amount DECIMAL(10,2), t TIMESTAMP)
          WITH (event_time='t');
        CREATE QUERY events INTO postgres WITH (database='inv', table='sink_events')
          AS SELECT k, v, amount FROM s;
        CREATE QUERY latest INTO postgres WITH (database='inv', table='sink_latest')
          AS SELECT k, v FROM s [PARTITION BY k ROWS 1];
    """)
    columns = fetch(db, "SELECT column_name, data_type FROM information_schema.columns "
                        "WHERE table_name = 'sink_events' ORDER BY ordinal_position")
    assert columns == [("k", "text"), ("v", "bigint"), ("amount", "numeric"),
                       ("_ts", "timestamp with time zone"), ("_te", "timestamp with time zone"),
                       ("_cycle", "bigint")]

    def at(second: int) -> dt.datetime:
        return dt.datetime(2026, 1, 1, 0, 0, second)

    pg_engine.push("s", [{"k": "a", "v": 1, "amount": Decimal("1.50"), "t": at(1)},
                         {"k": "a", "v": 2, "amount": None, "t": at(5)}], watermark=at(6))
    pg_engine.run_cycle()
    t1, t5, t8 = (at(s).replace(tzinfo=UTC) for s in (1, 5, 8))
    assert fetch(db, "SELECT k, v, amount, _ts, _te, _cycle FROM sink_events ORDER BY _ts") == [
        ("a", 1, Decimal("1.50"), t1, t1, 0), ("a", 2, None, t5, t5, 0)]
    # the latest row per key holds until the next row of its key: (a, 2) is still open
    assert fetch(db, "SELECT k, v, _ts, _te, _cycle FROM sink_latest ORDER BY _ts") == [
        ("a", 1, t1, t5, 0), ("a", 2, t5, None, 0)]
    assert fetch(db, "SELECT sink_id, cycle, queries, rows FROM sparkcq_commits") == [
        (pg_engine.engine_id, 0, "events, latest", 4)]

    pg_engine.push("s", [{"k": "a", "v": 3, "amount": Decimal("2"), "t": at(8)}],
                   watermark=at(9))
    pg_engine.run_cycle()
    # cycle 1 closed (a, 2) at 8 in the row cycle 0 wrote, and opened (a, 3)
    assert fetch(db, "SELECT k, v, _ts, _te, _cycle FROM sink_latest ORDER BY _ts") == [
        ("a", 1, t1, t5, 0), ("a", 2, t5, t8, 0), ("a", 3, t8, None, 1)]
    assert fetch(db, "SELECT cycle FROM sparkcq_commits ORDER BY cycle") == [(0,), (1,)]

    # writing a committed cycle again (a replay after a crash) adds nothing
    sink = pg_engine.sinks["postgres"]
    out = pg_engine.sinks.destination("events").output
    again = pd.DataFrame({"k": ["z"], "v": [9], "amount": [None], "_ts": [pd.Timestamp(at(8))],
                          "_te": [pd.Timestamp(at(8))], "_op": ["I"]})
    sink.write(1, {"events": (out, again)})
    assert fetch(db, "SELECT count(*) FROM sink_events") == [(3,)]
    assert fetch(db, "SELECT count(*) FROM sparkcq_commits") == [(2,)]


def test_a_failing_sink_writes_nothing_of_the_cycle_and_the_cycle_is_done_again(
        pg_engine, db):
    for name in ("fail_ok", "fail_bad", "sparkcq_commits"):
        db.execute(f"DROP TABLE IF EXISTS {name}")
    db.execute("CREATE TABLE fail_bad (k text, v bigint CHECK (v < 100), _ts bigint, "
               "_te bigint, _cycle bigint)")
    pg_engine.execute("""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE QUERY ok INTO postgres WITH (database='inv', table='fail_ok')
          AS SELECT k, v FROM s;
        CREATE QUERY bad INTO postgres WITH (database='inv', table='fail_bad')
          AS SELECT k, v FROM s WHERE v > 10;
        CREATE QUERY mem AS SELECT k, v FROM s;
    """)
    pg_engine.push("s", [{"k": "a", "v": 5, "t": 1}, {"k": "b", "v": 500, "t": 2}], watermark=3)
    e = pytest.raises(SinkError, pg_engine.run_cycle).value
    assert "postgres sink: writing cycle 0 of query bad into table 'fail_bad'" in str(e)
    assert "nothing of the cycle was written (rolled back)" in str(e)
    assert 'violates check constraint "fail_bad_v_check"' in str(e)
    # nothing of the cycle is visible: not the rows of 'ok' (same transaction), not the
    # commit record, not the memory sink's records (it is written after the replayable ones)
    assert fetch(db, "SELECT count(*) FROM fail_ok") == [(0,)]
    assert fetch(db, "SELECT count(*) FROM sparkcq_commits") == [(0,)]
    assert pg_engine.results("mem").empty
    assert pg_engine.cycle == 0
    # the cycle was rolled back with its input kept: once the table takes the row, the
    # same cycle is done again
    db.execute("ALTER TABLE fail_bad DROP CONSTRAINT fail_bad_v_check")
    pg_engine.run_cycle()
    assert fetch(db, "SELECT k, v, _ts, _cycle FROM fail_ok ORDER BY _ts") == [
        ("a", 5, 1, 0), ("b", 500, 2, 0)]
    assert fetch(db, "SELECT k, v, _cycle FROM fail_bad") == [("b", 500, 0)]
    assert fetch(db, "SELECT cycle FROM sparkcq_commits") == [(0,)]
    assert sorted(pg_engine.results("mem")["v"]) == [5, 500]


def test_a_sink_table_without_the_query_s_columns_is_refused(pg_engine, db):
    make_table(db, "other_shape", "x integer", [])
    pg_engine.execute("CREATE STREAM s (k STRING, t BIGINT) WITH (event_time='t')")
    e = pytest.raises(AnalysisError, pg_engine.execute,
                      "CREATE QUERY q INTO postgres WITH (database='inv', table='other_shape') "
                      "AS SELECT k FROM s").value
    assert "table 'other_shape'" in e.message
    assert "without the column(s) 'k', '_ts', '_te', '_cycle'" in e.message
    assert "q" not in pg_engine.catalog.queries


def test_server_clients_name_configured_databases_only(pg_engine, postgres):
    eng = pg_engine
    eng.execute("CREATE STREAM s (k STRING, t BIGINT) WITH (event_time='t')")
    for sql in (
        f"CREATE TABLE t (a STRING) WITH (format='postgres', url='{postgres.url}', table='x')",
        "CREATE TABLE t (a STRING) WITH (format='postgres', database='inv', query='SELECT 1')",
        f"CREATE QUERY q INTO postgres WITH (url='{postgres.url}', table='x') "
        "AS SELECT k FROM s",
    ):
        e = pytest.raises(AnalysisError, eng.execute, sql).value
        assert "is not allowed for server clients" in e.message
        assert "database='name' (inv;" in e.message
        assert postgres.password not in e.message
    e = pytest.raises(AnalysisError, eng.execute,
                      "CREATE TABLE t (a STRING) WITH (format='postgres', database='elsewhere', "
                      "table='x')").value
    assert "unknown database 'elsewhere'; configured databases: inv" in e.message
    assert postgres.url not in e.message
    e = pytest.raises(AnalysisError, eng.execute,
                      "CREATE TABLE t (a STRING) WITH (format='postgres', database='inv', "
                      "table='(SELECT pg_read_file(current_setting(\\'data_directory\\'))) x')"
                      ).value
    assert "is not a PostgreSQL table name" in e.message
    assert list(eng.catalog.tables) == [] and list(eng.catalog.queries) == []


def test_a_trusted_engine_may_name_a_url(spark, postgres, db):
    make_table(db, "by_url", "a text", [("x",)])
    eng = Engine(spark=spark, trusted=True)
    jdbc = f"jdbc:postgresql://127.0.0.1:{postgres.port}/{postgres.dbname}"
    eng.execute(f"CREATE TABLE t (a STRING) WITH (format='postgres', url='{jdbc}', "
                f"user='{postgres.user}', password='{postgres.password}', table='by_url')")
    assert [r.a for r in eng.catalog.tables["t"].dataframe.collect()] == ["x"]
    assert eng.show("TABLES")["source"].tolist() == [
        f"postgres postgresql://{postgres.user}@127.0.0.1:{postgres.port}/sparkcq_test by_url"]


def test_close_records_close_one_equal_open_row_each(postgres, db):
    """Two equal elements open at once are two rows; each close record closes one of them
    (and a table may be named like the sink's own helper relations).
    """
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sparkcq.io.postgres import PostgresSink, parse_databases
    from sparkcq.io.sinks import QueryOutput

    db.execute("DROP TABLE IF EXISTS o")
    sink = PostgresSink(parse_databases({"inv": postgres.url}), "closes-test")
    schema = StructType([StructField("k", StringType()), StructField("v", LongType())])
    out = QueryOutput("q", ["k", "v"], False, {"database": "inv", "table": "o"}, schema)
    sink.prepare(out)

    def records(rows):
        return pd.DataFrame(rows, columns=["k", "v", "_ts", "_te", "_op"])

    try:
        sink.write(0, {"q": (out, records([("a", None, 1, None, "I"), ("a", None, 1, None, "I"),
                                           ("b", 2, 1, None, "I")]))})
        sink.write(1, {"q": (out, records([("a", None, 1, 4, "C")]))})
        assert fetch(db, "SELECT k, v, _ts, _te FROM o ORDER BY k, _te NULLS LAST") == [
            ("a", None, 1, 4), ("a", None, 1, None), ("b", 2, 1, None)]
        sink.write(2, {"q": (out, records([("a", None, 1, 6, "C"), ("b", 2, 1, 6, "C")]))})
        assert fetch(db, "SELECT k, v, _ts, _te, _cycle FROM o ORDER BY k, _te") == [
            ("a", None, 1, 4, 0), ("a", None, 1, 6, 0), ("b", 2, 1, 6, 0)]
    finally:
        sink.close()


def test_the_published_host_to_host_query_with_hosts_in_postgres(pg_engine, db):
    from test_chunks import HOST_TO_HOST, PACKETS

    make_table(db, "published_hosts", "ip text, host_id text",
               [("10.0.0.1", "web"), ("10.0.0.2", "db")])
    pg_engine.execute("""
        CREATE STREAM packet_stream (pid BIGINT, t BIGINT, from_ip STRING, to_ip STRING,
                                     bytes BIGINT) WITH (event_time='t', time_unit='seconds');
        CREATE TABLE Hosts (ip STRING, host_id STRING)
          WITH (format='postgres', database='inv', table='published_hosts');
    """)
    pg_engine.execute(f"CREATE QUERY traffic AS {HOST_TO_HOST}")
    pg_engine.push("packet_stream", [dict(zip(("pid", "t", "from_ip", "to_ip", "bytes"), p,
                                              strict=True)) for p in PACKETS])
    pg_engine.end_input("packet_stream")
    pg_engine.run_until_idle()
    got = sorted(pg_engine.results("traffic").itertuples(index=False, name=None))
    # minute 0: web -> db 100 + 50, db -> web 8; minute 1: db -> web 7 (10.0.0.9 unknown)
    assert got == [(0, "db", "web", 8, 60, 120), (0, "web", "db", 150, 60, 120),
                   (1, "db", "web", 7, 120, 180)]
