"""Table functions with state: hand-computed results, the call sequence and its scopes,
failures that stop only their query, and every misuse refused at its place.
"""

from __future__ import annotations

import pytest

from sparkcq import Engine
from sparkcq.errors import AnalysisError, QuerySyntaxError, SparkcqError

CALLS = [("a", "x", 10, 1), ("b", "y", 5, 2), ("a", "x", 10, 2), ("a", "x", 11, 3),
         ("a", "x", 30, 6), ("a", "x", 10, 7), ("b", "y", 5, 8), ("a", "x", 50, 12)]

LIBRARY = """
    CREATE STREAM calls (caller STRING, callee STRING, start BIGINT, t BIGINT)
        WITH (event_time='t');
    CREATE FUNCTION dedup(of STRING, tolerance BIGINT, horizon BIGINT)
        RETURNS TABLE (callee STRING, start BIGINT)
        USING 'sparkcq.table_functions.library:Deduplicate';
    CREATE FUNCTION ema(of STRING, alpha DOUBLE) RETURNS TABLE (average DOUBLE, samples BIGINT)
        USING 'sparkcq.table_functions.library:ExponentialAverage';
"""


def records(frame, columns):
    return sorted(tuple(r) for r in frame[[*columns, "_ts", "_te"]].itertuples(index=False))


def run_calls(engine, per_cycle):
    engine.execute(LIBRARY + """
        CREATE QUERY clean AS SELECT * FROM dedup(TABLE calls [CUT ON t BY 5]
                                                  PARTITION BY caller, 'start', 1, 10);
        CREATE QUERY smooth AS SELECT caller, average, samples
                               FROM ema(TABLE calls PARTITION BY caller, 'start', 0.5);
    """)
    rows = [dict(zip(("caller", "callee", "start", "t"), r, strict=True)) for r in CALLS]
    for i in range(0, len(rows), per_cycle):
        batch = rows[i:i + per_cycle]
        engine.push("calls", batch, watermark=batch[-1]["t"])
        engine.run_until_idle()
    engine.end_input("calls")
    engine.run_until_idle()
    return (records(engine.results("clean"), ["caller", "callee", "start"]),
            records(engine.results("smooth"), ["caller", "average", "samples"]))


@pytest.mark.parametrize("per_cycle", [8, 1])
def test_deduplicate_and_moving_average_by_hand(spark, per_cycle):
    # chunks of 5 cut at 5, 10, 15. Caller a: 10 kept, 10 and 11 within 1 of it; then 30
    # kept, 10 repeats the first chunk's (cut 5 > 10 - 10); then 50 kept, the first
    # chunk's values gone (cut 5 <= 15 - 10). Caller b: 5, then 5 again at 8 dropped.
    # The average of a: 10, 10, 10.5, 20.25, 15.125, 32.5625; each instant its own chunk.
    clean, smooth = run_calls(Engine(spark=spark), per_cycle)
    assert clean == [("a", "x", 10, 5, 5), ("a", "x", 30, 10, 10), ("a", "x", 50, 15, 15),
                     ("b", "y", 5, 5, 5)]
    assert smooth == [("a", 10.0, 1, 1, 1), ("a", 10.0, 1, 2, 2), ("a", 10.5, 1, 3, 3),
                      ("a", 15.125, 1, 7, 7), ("a", 20.25, 1, 6, 6), ("a", 32.5625, 1, 12, 12),
                      ("b", 5.0, 1, 2, 2), ("b", 5.0, 1, 8, 8)]


def test_call_sequence_and_its_three_scopes(spark):
    # CUT EVERY 3 ROWS: {1, 2, 3} cut at 4 (the next chunk's first row), {4} cut at 5 (the
    # input ends one unit after its last row). Batches of two rows: the first chunk is
    # processed in two calls. The call count lives across chunks and cycles (the query's
    # scope), the chunk's name from begin_chunk to end_chunk (the chunk's).
    eng = Engine(spark=spark, allow_udf_modules=["tablefns"])
    eng.execute("""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE FUNCTION trace() RETURNS TABLE (call STRING, n BIGINT) USING 'tablefns:Trace';
        CREATE QUERY q AS SELECT * FROM trace(TABLE s [CUT EVERY 3 ROWS] PARTITION BY k);
    """)
    for v in (1, 2, 3, 4):
        eng.push("s", [{"k": "a", "v": v, "t": v}], watermark=v)
        eng.run_until_idle()
    eng.end_input("s")
    eng.run_until_idle()
    got = sorted(eng.results("q")[["call", "n", "_ts"]].itertuples(index=False, name=None),
                 key=lambda r: r[1])
    assert got == [("process 4:3 1,2", 2, 4), ("process 4:3 3", 3, 4), ("end 4:3", 4, 4),
                   ("process 5:1 4", 6, 5), ("end 5:1", 7, 5)]
    assert "TableFunction trace() PARTITION BY k" in eng.explain_global()
    assert "instances=1" in eng.explain_global()


def test_failing_table_function_stops_only_its_query(spark):
    eng = Engine(spark=spark, allow_udf_modules=["tablefns"])
    eng.execute("""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE FUNCTION fragile() RETURNS TABLE (v BIGINT) USING 'tablefns:Fragile';
        CREATE FUNCTION liar() RETURNS TABLE (n BIGINT) USING 'tablefns:Liar';
        CREATE QUERY bad AS SELECT * FROM fragile(TABLE s PARTITION BY k);
        CREATE QUERY wrong AS SELECT * FROM liar(TABLE s PARTITION BY k);
        CREATE QUERY good AS SELECT k, v FROM s WHERE v > 0;
    """)
    eng.push("s", [{"k": "a", "v": 1, "t": 1}], watermark=2)
    eng.run_until_idle()
    eng.push("s", [{"k": "a", "v": 7, "t": 3}, {"k": "b", "v": 2, "t": 4}], watermark=5)
    eng.run_until_idle()
    eng.push("s", [{"k": "a", "v": 3, "t": 6}], watermark=7)
    eng.run_until_idle()
    status = eng.show("QUERIES").set_index("name")["status"].to_dict()
    assert status == {"bad": "failed", "wrong": "failed", "good": "running"}
    log = "\n".join(eng.query_log("bad"))
    assert "table function 'fragile'" in log
    assert "process(rows) raised ValueError: cannot take 7" in log
    assert "tablefns.py" in log and "in process" in log  # the user's frame
    assert eng.results("bad")["v"].tolist() == [1]  # what it emitted before it failed
    assert ("column 'n' got 'many' (str), but it is declared BIGINT"
            in "\n".join(eng.query_log("wrong")))
    assert eng.results("good")["v"].tolist() == [1, 7, 2, 3]


@pytest.mark.parametrize(("query", "message", "fragment"), [
    ("SELECT * FROM nope(TABLE calls)", "unknown table function 'nope'; table functions: "
     "dedup, ema", "nope"),
    ("SELECT * FROM ema(TABLE calls [RANGE 5], 'start', 0.5)", "reads a stream chunk by "
     "chunk, and 'calls' is a window other than a chunk window",
     "ema(TABLE calls [RANGE 5], 'start', 0.5)"),
    ("SELECT * FROM ema(TABLE calls [CUT ON t BY 5 WINDOW 2 CHUNKS], 'start', 0.5)",
     "reads each chunk once", "ema(TABLE calls [CUT ON t BY 5 WINDOW 2 CHUNKS], 'start', 0.5)"),
    ("SELECT * FROM ema(TABLE calls, 'start')", "takes 2 argument(s) after the table "
     "(of, alpha), got 1", "ema(TABLE calls, 'start')"),
    ("SELECT * FROM ema(TABLE calls, 3, 0.5)", "argument 'of' is STRING, got 3",
     "ema(TABLE calls, 3, 0.5)"),
    ("SELECT * FROM ema(TABLE calls PARTITION BY who, 'start', 0.5)",
     "unknown column 'who' in PARTITION BY of 'ema'",
     "ema(TABLE calls PARTITION BY who, 'start', 0.5)"),
    ("SELECT * FROM ema(TABLE calls, start, 0.5)", "arguments after the table are literals",
     "start"),
    ("SELECT * FROM ema(TABLE calls PARTITION caller, 'start', 0.5)",
     "expected PARTITION BY or the end of the table argument", "PARTITION"),
    ("SELECT * FROM dedup(TABLE calls PARTITION BY callee, 'start', 1, 10)",
     "returns column 'callee', which is also a PARTITION BY column",
     "dedup(TABLE calls PARTITION BY callee, 'start', 1, 10)"),
], ids=["unknown", "range window", "window of chunks", "arguments", "argument type",
        "partition column", "not a literal", "partition syntax", "column twice"])
def test_misused_table_function_is_refused_at_its_place(engine, query, message, fragment):
    engine.execute(LIBRARY)
    with pytest.raises((AnalysisError, QuerySyntaxError)) as e:
        engine.execute(f"CREATE QUERY q AS {query}")
    assert message in str(e.value)
    loc = e.value.loc
    assert loc is not None
    assert f"CREATE QUERY q AS {query}"[loc.start:loc.end] == fragment


def test_functions_are_listed_dropped_and_loaded_only_from_allowed_modules(engine):
    engine.execute(LIBRARY)
    shown = engine.show("FUNCTIONS").set_index("name")["signature"].to_dict()
    assert shown["ema"] == "ema(of STRING, alpha DOUBLE) -> TABLE (average DOUBLE, samples BIGINT)"
    engine.execute("CREATE QUERY q AS SELECT * FROM ema(TABLE calls, 'start', 0.5)")
    with pytest.raises(SparkcqError, match="function 'ema' is used by q; drop them first"):
        engine.execute("DROP FUNCTION ema")
    engine.execute("DROP QUERY q")
    engine.execute("DROP FUNCTION ema")
    assert list(engine.show("FUNCTIONS")["name"]) == ["dedup"]
    with pytest.raises(AnalysisError, match="module 'tablefns' is not allowed to load code"):
        engine.execute("CREATE FUNCTION f() RETURNS TABLE (x BIGINT) USING 'tablefns:Trace'")
    with pytest.raises(QuerySyntaxError, match="write RETURNS TABLE"):
        engine.execute("CREATE FUNCTION f(x DOUBLE) RETURNS DOUBLE USING 'tablefns:Trace'")
    with pytest.raises(AnalysisError, match="lacks process"):
        engine.execute("CREATE FUNCTION f() RETURNS TABLE (x BIGINT) "
                       "USING 'sparkcq.aggregates.library:Median'")


def test_equal_calls_share_one_operator_and_a_late_query_sees_later_chunks(spark):
    eng = Engine(spark=spark)
    eng.execute(LIBRARY + """
        CREATE QUERY first AS SELECT * FROM dedup(TABLE calls [CUT ON t BY 5]
                                                  PARTITION BY caller, 'start', 1, 10);
        CREATE QUERY twin AS SELECT callee, start FROM dedup(TABLE calls [CUT ON t BY 5]
                                                  PARTITION BY caller, 'start', 1, 10);
    """)
    rows = [dict(zip(("caller", "callee", "start", "t"), r, strict=True)) for r in CALLS]
    eng.push("calls", rows[:4], watermark=6)  # the chunk cut at 5 is final
    eng.run_until_idle()
    line = next(ln for ln in eng.explain_global().splitlines() if "TableFunction" in ln)
    assert "refs=2" in line and "queries=[first, twin]" in line
    # started after the first chunk was cut: it shares the running operator and reads what
    # it emits from then on, as a query over a stream reads the events after its start;
    # b's 5 at 8 repeats the 5 the shared instance saw at 2
    eng.execute("CREATE QUERY late AS SELECT callee, start FROM dedup(TABLE calls "
                "[CUT ON t BY 5] PARTITION BY caller, 'start', 1, 10)")
    eng.push("calls", rows[4:], watermark=20)
    eng.run_until_idle()
    assert sorted(eng.results("twin")[["callee", "start", "_ts"]].itertuples(
        index=False, name=None)) == [("x", 10, 5), ("x", 30, 10), ("x", 50, 15), ("y", 5, 5)]
    assert sorted(eng.results("late")[["callee", "start", "_ts"]].itertuples(
        index=False, name=None)) == [("x", 30, 10), ("x", 50, 15)]
    assert "refs=3" in next(ln for ln in eng.explain_global().splitlines()
                            if "TableFunction" in ln)
