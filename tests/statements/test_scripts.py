"""A script is all or nothing: a failing statement undoes the ones before it."""

from __future__ import annotations

import pytest

from sparkcq import Engine
from sparkcq.errors import AnalysisError, CatalogError, QuerySyntaxError, ScriptError

STREAM = "CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')"
AVG = "CREATE QUERY avg_v AS SELECT k, avg(v) AS a FROM s [RANGE 10] GROUP BY k"


def test_a_failing_query_undoes_the_stream_created_before_it(engine):
    script = f"{STREAM};\n{AVG};\nCREATE QUERY bad AS SELECT k, vv FROM s"
    with pytest.raises(ScriptError) as err:
        engine.execute(script)
    message = str(err.value)
    assert "statement 3 of 3 (line 3: CREATE QUERY bad AS SELECT k, vv FROM s)" in message
    assert "the script was not applied" in message
    assert "unknown column 'vv'" in message
    assert isinstance(err.value.cause, AnalysisError) and err.value.line == 3
    assert engine.catalog.streams == {} and engine.catalog.queries == {}
    assert engine.queries.running == {} and engine.scans == {} and engine.sources == {}
    assert len(engine.plan.ops) == 0
    # the names are free again: the corrected script runs
    engine.execute(f"{STREAM};\n{AVG};\nCREATE QUERY good AS SELECT k, v FROM s")
    assert set(engine.catalog.queries) == {"avg_v", "good"}


def test_a_script_of_good_statements_applies_them_all(engine):
    result = engine.execute(f"""
        {STREAM};
        {AVG};
        CREATE QUERY max_v AS SELECT k, max(v) AS m FROM s [RANGE 10] GROUP BY k;
    """)
    assert result == "max_v"
    assert set(engine.queries.running) == {"avg_v", "max_v"}
    engine.push("s", [{"k": "a", "v": 2.0, "t": 1}], end=True)
    engine.run_until_idle()
    assert engine.results("max_v")["m"].tolist() == [2.0]


def test_undo_leaves_what_existed_before_the_script_running(engine):
    engine.execute(f"{STREAM}; {AVG}")
    engine.push("s", [{"k": "a", "v": 2.0, "t": 1}], watermark=2)
    engine.run_until_idle()
    ops_before = dict(engine.plan.ops)
    refs_before = dict(engine.plan.refs)
    script = """
        CREATE QUERY twin AS SELECT k, avg(v) AS a FROM s [RANGE 10] GROUP BY k;
        CREATE STREAM d AS SELECT k, v, t FROM s WHERE v > 1;
        EXPLAIN nosuch
    """
    with pytest.raises(ScriptError, match=r"statement 3 of 3 \(line 4: EXPLAIN nosuch\)"):
        engine.execute(script)
    assert set(engine.catalog.queries) == {"avg_v"} and set(engine.catalog.streams) == {"s"}
    assert dict(engine.plan.ops) == ops_before
    assert {n: r for n, r in engine.plan.refs.items() if r} == refs_before
    engine.push("s", [{"k": "a", "v": 4.0, "t": 3}], end=True)
    engine.run_until_idle()
    assert engine.results("avg_v")["a"].tolist() == [2.0, 3.0, 4.0]


def test_a_syntax_error_anywhere_runs_nothing(engine):
    with pytest.raises(QuerySyntaxError) as err:
        engine.execute(f"{STREAM};\nCREATE QUERY q AS SELEC k FROM s")
    assert err.value.loc.line == 2
    assert engine.catalog.streams == {}


def test_one_statement_raises_its_own_error(engine):
    engine.execute(STREAM)
    with pytest.raises(AnalysisError, match="unknown column 'vv'"):
        engine.execute("CREATE QUERY bad AS SELECT vv FROM s")
    assert engine.catalog.queries == {}


def test_unnamed_queries_are_numbered_as_if_the_failed_script_never_ran(engine):
    engine.execute(STREAM)
    with pytest.raises(ScriptError):
        engine.execute("SELECT k FROM s; SELECT nope FROM s")
    assert engine.execute("SELECT k FROM s") == "query_1"


def test_a_replaced_table_comes_back(engine):
    engine.register_table("roads", [{"sector": "a", "name": "A1"}])
    before = engine.catalog.tables["roads"]
    with pytest.raises(ScriptError, match="statement 2 of 2"):
        engine.execute("CREATE TABLE roads (sector STRING);\n"
                       "CREATE QUERY q AS SELECT nope FROM roads")
    assert engine.catalog.tables["roads"] is before


def test_a_created_aggregate_is_undone(spark):
    eng = Engine(spark=spark, allow_udf_modules=["udas"])
    eng.execute(STREAM)
    with pytest.raises(ScriptError, match="line 2"):
        eng.execute("CREATE AGGREGATE usum(x BIGINT) RETURNS BIGINT USING 'udas:USum';\n"
                    "CREATE QUERY q AS SELECT usum(nope) AS n FROM s [RANGE 10]")
    assert eng.catalog.aggregates == {}


def test_drop_does_not_mix_with_other_statements(engine):
    engine.execute(f"{STREAM}; {AVG}")
    with pytest.raises(AnalysisError, match="must hold only DROP statements") as err:
        engine.execute("CREATE QUERY other AS SELECT k FROM s;\nDROP QUERY avg_v")
    assert err.value.loc.line == 2
    assert set(engine.catalog.queries) == {"avg_v"}


def test_drops_are_checked_together_before_any_runs(engine):
    engine.execute(f"{STREAM}; {AVG}; CREATE STREAM d AS SELECT k, v, t FROM s")
    # s is used by avg_v and d; dropping them first in the same script is fine ...
    with pytest.raises(ScriptError, match=r"line 3: DROP STREAM nosuch.*not applied") as err:
        engine.execute("DROP QUERY avg_v;\nDROP STREAM d;\nDROP STREAM nosuch")
    assert isinstance(err.value.cause, CatalogError)
    assert set(engine.catalog.queries) == {"avg_v"} and set(engine.catalog.streams) == {"s", "d"}
    # ... but not after it
    with pytest.raises(ScriptError, match="'s' is used by avg_v"):
        engine.execute("DROP STREAM d; DROP STREAM s; DROP QUERY avg_v")
    with pytest.raises(ScriptError, match="already dropped"):
        engine.execute("DROP QUERY avg_v; DROP QUERY avg_v")
    engine.execute("DROP QUERY avg_v; DROP STREAM d; DROP STREAM s")
    assert engine.catalog.streams == {} and engine.catalog.queries == {}
    assert len(engine.plan.ops) == 0
