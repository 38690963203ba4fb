"""The sandbox of an untrusted engine (plan/sandbox.py): functions, paths and names a server
client may use, in process and over HTTP against `sparkcq serve`.
"""

from __future__ import annotations

import os

import pytest
from served import start_server, wait_for
from udas import UMax

from sparkcq import Engine
from sparkcq.errors import AnalysisError, CatalogError, ExecutionError
from sparkcq.io.files import FilesSource
from sparkcq.io.sinks import FilesSink
from sparkcq.plan.allowed_functions import ALLOWED, REFUSED
from sparkcq.server.client import ServerError

STREAM = ("CREATE STREAM s (k STRING, v DOUBLE, arr ARRAY<INT>, t BIGINT) "
          "WITH (event_time='t')")


@pytest.fixture
def sandboxed(engine):
    engine.execute(STREAM)
    return engine


def refusal(eng, sql) -> AnalysisError:
    with pytest.raises(AnalysisError) as err:
        eng.execute(sql)
    return err.value


def underlined(e: AnalysisError, sql: str) -> str:
    assert e.loc is not None
    return sql[e.loc.start:e.loc.end]


# -- functions -------------------------------------------------------------------------------

REFUSED_CALLS = {
    "java_method": "java_method('java.lang.System', 'exit', 3)",
    "reflect": "reflect('java.util.UUID', 'randomUUID')",
    "try_reflect": "try_reflect('java.lang.Runtime', 'getRuntime')",
    "read_files": "read_files('/etc')",
    "input_file_name": "input_file_name()",
    "current_user": "current_user()",
    "session_user": "session_user()",
    "version": "version()",
    "raise_error": "raise_error('stop')",
    "assert_true": "assert_true(v > 0)",
    "xpath_string": "xpath_string(k, '/a')",
    "spark_partition_id": "spark_partition_id()",
}


@pytest.mark.parametrize("name", list(REFUSED_CALLS))
def test_a_refused_function_is_an_error_at_its_call(sandboxed, name):
    sql = f"CREATE QUERY q AS\n  SELECT k,\n         {REFUSED_CALLS[name]} AS z FROM s"
    e = refusal(sandboxed, sql)
    assert f"function {name!r} is not allowed for server clients" in e.message
    assert "docs/sandbox.md" in e.message and "Engine(trusted=True)" in e.message
    assert (e.loc.line, e.loc.col) == (3, 10)
    assert underlined(e, sql) == name
    assert "q" not in sandboxed.catalog.queries


@pytest.mark.parametrize("trusted", [False, True], ids=["server client", "trusted"])
def test_an_unknown_function_is_named_so_with_the_nearest_names(engine, trusted_engine,
                                                                trusted):
    eng = trusted_engine if trusted else engine
    eng.execute(STREAM)
    sql = "CREATE QUERY q AS SELECT k, uper(k) AS u FROM s"
    e = refusal(eng, sql)
    assert e.message.startswith("unknown function 'uper'; did you mean upper"), e.message
    assert "not allowed" not in e.message
    assert underlined(e, sql) == "uper"


def test_an_unknown_function_without_near_names_says_where_to_look(sandboxed):
    e = refusal(sandboxed, "CREATE QUERY q AS SELECT k, zqxjw(k) AS u FROM s")
    assert e.message.startswith("unknown function 'zqxjw'; SHOW FUNCTIONS"), e.message


@pytest.mark.parametrize("sql, culprit", [
    # where it hides: WHERE, a GROUP BY query's SELECT list and HAVING, a lambda, a join
    ("SELECT k FROM s WHERE length(reflect('java.util.UUID', 'randomUUID')) > 0", "reflect"),
    ("SELECT k, count(*) AS n, java_method('java.lang.System', 'exit', 3) AS z "
     "FROM s [RANGE 10] GROUP BY k", "java_method"),
    ("SELECT k, count(*) AS n FROM s [RANGE 10] GROUP BY k HAVING count(*) > length(version())",
     "version"),
    ("SELECT transform(arr, x -> x + length(current_user())) AS y FROM s", "current_user"),
    ("SELECT a.k FROM s [NOW] AS a JOIN s [NOW] AS b ON a.k = b.k AND version() = ''",
     "version"),
    # spelled otherwise: without parentheses, back-quoted, upper case, qualified
    ("SELECT current_user AS u FROM s", "current_user"),
    ("SELECT `java_method`('java.lang.System', 'exit', 3) AS z FROM s", "java_method"),
    ("SELECT JAVA_METHOD('java.lang.System', 'exit', 3) AS z FROM s", "JAVA_METHOD"),
    ("SELECT system.builtin.abs(v) AS z FROM s", "abs"),
], ids=["where", "group-by-select", "having", "lambda", "join-on", "no-parens", "backquoted",
        "upper-case", "qualified"])
def test_refused_wherever_it_is_written(sandboxed, sql, culprit):
    e = refusal(sandboxed, f"CREATE QUERY q AS {sql}")
    assert "is not allowed for server clients" in e.message
    assert underlined(e, f"CREATE QUERY q AS {sql}") == culprit


@pytest.mark.parametrize("sql, says, culprit", [
    ("SELECT (SELECT 1 FROM text.`/etc/passwd` LIMIT 1) AS x FROM s", "subqueries", "(SELECT"),
    # (EXISTS and IN (SELECT ...) are refused for everyone, as semi and anti joins to write)
    ("SELECT k FROM s WHERE v > (SELECT 1)", "subqueries", "(SELECT"),
    ("SELECT '${env:HOME}' AS home FROM s", "'${...}'", "${"),
], ids=["scalar-subquery", "where-subquery", "variable-substitution"])
def test_subqueries_and_substitution_are_refused(sandboxed, sql, says, culprit):
    e = refusal(sandboxed, f"CREATE QUERY q AS {sql}")
    assert says in e.message and "not allowed for server clients" in e.message
    assert underlined(e, f"CREATE QUERY q AS {sql}") == culprit


def test_a_generator_expression_is_checked_too(engine):
    sql = ("CREATE STREAM g (v STRING, t TIMESTAMP) WITH (event_time='t', source='generator', "
           "expr_v='reflect(\"java.util.UUID\", \"randomUUID\")')")
    e = refusal(engine, sql)
    assert e.message.startswith("expr_v: function 'reflect' is not allowed")
    assert underlined(e, sql) == "reflect"


def test_the_allow_list_keeps_out_what_it_refuses():
    assert not ALLOWED & set(REFUSED)
    assert {"abs", "round", "coalesce", "concat", "upper", "date_trunc", "transform",
            "from_json", "get_json_object", "uuid", "rand", "url_decode"} <= ALLOWED
    assert {"java_method", "reflect", "try_reflect", "input_file_name", "current_user",
            "raise_error", "from_protobuf", "xpath"} <= set(REFUSED)


def test_common_functions_bind_and_run(sandboxed):
    sandboxed.execute("""
        CREATE QUERY q AS SELECT upper(k) AS ku, abs(v) AS a, round(v, 1) AS r,
          coalesce(nullif(k, 'x'), 'none') AS c, concat(k, '-', cast(t AS STRING)) AS kc,
          substr(k, 1, 2) AS sb, date_trunc('HOUR', timestamp_seconds(t)) AS h,
          CASE WHEN v > 0 THEN 'pos' ELSE 'neg' END AS sign, floor(v) AS f,
          greatest(v, 0.0) AS g, transform(arr, x -> x + 1) AS arr1,
          array_contains(arr, 2) AS has2, size(filter(arr, x -> x > 1)) AS big,
          get_json_object('{"a": 1}', '$.a') AS j, extract(YEAR FROM timestamp_seconds(t)) AS y
        FROM s WHERE length(k) > 0 AND v IS NOT NULL
    """)
    sandboxed.push("s", [{"k": "abc", "v": -2.46, "arr": [1, 2], "t": 3_601}], end=True)
    sandboxed.run_until_idle()
    row = sandboxed.results("q").iloc[0].to_dict()
    assert {k: row[k] for k in ("ku", "a", "r", "c", "kc", "sb", "sign", "f", "g")} == {
        "ku": "ABC", "a": 2.46, "r": -2.5, "c": "abc", "kc": "abc-3601", "sb": "ab",
        "sign": "neg", "f": -3, "g": 0.0}
    assert str(row["h"]).startswith("1970-01-01 01:00:00")
    assert (list(row["arr1"]), row["has2"], row["big"], row["j"], row["y"]) == (
        [2, 3], True, 1, "1", 1970)


def test_own_functions_and_aggregates_are_allowed(sandboxed):
    sandboxed.create_function("twice", lambda x: 2 * x, "DOUBLE")
    sandboxed.create_aggregate("umax", UMax, ["DOUBLE"], "DOUBLE")
    sandboxed.execute("CREATE QUERY q AS SELECT k, umax(twice(v)) AS m, sum(abs(v)) AS s "
                      "FROM s [RANGE 10] GROUP BY k")
    assert "q" in sandboxed.catalog.queries


def test_trusted_engine_calls_any_function_and_reads_any_path(trusted_engine, tmp_path):
    trusted_engine.execute(STREAM)
    trusted_engine.execute("CREATE QUERY q AS SELECT k, version() AS v FROM s")
    outside = tmp_path / "anywhere.csv"
    outside.write_text("a\n1\n")
    trusted_engine.execute(f"CREATE TABLE x (a INT) WITH (format='csv', path='{outside}')")
    assert trusted_engine.trusted and "x" in trusted_engine.catalog.tables


# -- paths -----------------------------------------------------------------------------------

@pytest.fixture
def root(tmp_path):
    """The engine fixture's data root, with a CSV table in it and a folder next to it."""
    (tmp_path / "hosts.csv").write_text("ip,host\n1.1.1.1,alpha\n2.2.2.2,beta\n")
    (tmp_path / "in").mkdir()
    return tmp_path


def test_a_table_inside_the_data_root_is_read(engine, root):
    engine.execute("CREATE TABLE rel (ip STRING, host STRING) WITH (format='csv', "
                   "path='hosts.csv')")  # relative: under the first data root
    engine.execute(f"CREATE TABLE ab (ip STRING, host STRING) WITH (format='csv', "
                   f"path='{root}/in/../hosts.csv')")
    assert engine.catalog.tables["rel"].dataframe.count() == 2
    assert "ab" in engine.catalog.tables


@pytest.mark.parametrize("path, says", [
    ("/etc/passwd", "outside the data roots"),
    ("../outside.csv", "outside the data roots"),
    ("{root}/../outside.csv", "outside the data roots"),
    ("{root}/link", "outside the data roots"),
    ("{root}/link/secret.csv", "outside the data roots"),
    ("file:///etc/passwd", "no glob patterns, URLs or backslashes"),
    ("*.csv", "no glob patterns, URLs or backslashes"),
    ("{{hosts,/etc/passwd}}", "no glob patterns, URLs or backslashes"),
], ids=["absolute", "relative-dotdot", "absolute-dotdot", "symlink", "through-symlink", "url",
        "glob", "alternation"])
def test_a_path_outside_the_data_roots_is_refused(engine, root, tmp_path_factory, path, says):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "secret.csv").write_text("ip,host\nx,y\n")
    os.symlink(elsewhere, root / "link")
    path = path.format(root=root)
    sql = f"CREATE TABLE pw (ip STRING, host STRING) WITH (format='csv', path='{path}')"
    e = refusal(engine, sql)
    assert says in e.message and repr(path) in e.message and str(root) in e.message
    assert "--data-root DIR" in e.message or "glob" in says
    assert underlined(e, sql) == path
    assert "pw" not in engine.catalog.tables


def test_without_a_data_root_no_path_is_allowed(spark, root):
    eng = Engine(spark=spark)
    e = refusal(eng, f"CREATE TABLE t (a STRING) WITH (format='text', path='{root}/hosts.csv')")
    assert "this engine has no data root" in e.message
    assert "Engine(data_roots=[...])" in e.message and "Engine(trusted=True)" in e.message


def test_files_sources_and_sinks_stay_inside(engine, root):
    engine.execute(STREAM)
    engine.execute("CREATE STREAM f (k STRING, t BIGINT) WITH (event_time='t', source='files', "
                   "path='in')")
    assert engine.sources["f"].path == str(root / "in")
    e = refusal(engine, "CREATE STREAM g (k STRING, t BIGINT) WITH (event_time='t', "
                        "source='files', path='/etc')")
    assert "'/etc' is outside the data roots" in e.message
    engine.execute("CREATE QUERY out INTO files WITH (path='out') AS SELECT k FROM s")
    assert engine.catalog.queries["out"].options["path"] == str(root / "out")
    e = refusal(engine, "CREATE QUERY q2 INTO files WITH (path='/tmp/anywhere') "
                        "AS SELECT k FROM s")
    assert "'/tmp/anywhere' is outside the data roots" in e.message
    e = refusal(engine, "CREATE TABLE j (a STRING) WITH (format='jdbc', path='x')")
    assert "format 'jdbc' is not allowed for server clients" in e.message


def test_a_files_source_skips_links_leading_out(spark, root, tmp_path_factory):
    secret = tmp_path_factory.mktemp("elsewhere") / "secret.csv"
    secret.write_text("k,t\nx,1\n")
    (root / "in" / "a.csv").write_text("k,t\ny,1\n")
    os.symlink(secret, root / "in" / "b.csv")
    source = FilesSource(spark, "f", None, {"path": str(root / "in")}, roots=[str(root)])
    assert source.new_files() == [str(root / "in" / "a.csv")]


@pytest.mark.parametrize("table", ["csv.`/etc/passwd`", "parquet.`/tmp`", "text.`/etc/passwd`"])
def test_spark_path_tables_are_not_tables(sandboxed, table):
    e = refusal(sandboxed, f"CREATE QUERY q AS SELECT * FROM {table}")
    assert "unknown stream or table" in e.message


# -- names -----------------------------------------------------------------------------------

BAD_NAMES = ["../../x", "a/b", "a.b", "a b", "9lives", "a\x00b", "é", "x" * 129]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
@pytest.mark.parametrize("create", [
    "CREATE QUERY {} AS SELECT k FROM s",
    "CREATE STREAM {} (k STRING, t BIGINT) WITH (event_time='t')",
    "CREATE STREAM {} AS SELECT k FROM s",
    "CREATE TABLE {} (k STRING)",
    "CREATE AGGREGATE {}(x DOUBLE) RETURNS DOUBLE USING 'udas:UMax'",
], ids=["query", "stream", "derived-stream", "table", "aggregate"])
def test_names_are_identifiers_never_paths(sandboxed, name, create):
    sql = create.format(f"`{name}`")
    e = refusal(sandboxed, sql)
    assert f"name {name!r} is not allowed" in e.message
    assert underlined(e, sql) == f"`{name}`"


def test_the_python_api_checks_names_too(engine):
    with pytest.raises(CatalogError, match="table name '../x' is not allowed"):
        engine.register_table("../x", [{"a": 1}])
    with pytest.raises(CatalogError, match="function name 'a/b' is not allowed"):
        engine.create_function("a/b", abs, "DOUBLE")
    with pytest.raises(CatalogError, match="aggregate name 'a.b' is not allowed"):
        engine.create_aggregate("a.b", UMax, ["DOUBLE"], "DOUBLE")
    engine.execute("CREATE TABLE good_name_1 (k STRING)")  # letters, digits, underscores


def test_the_files_sink_writes_only_into_its_folder(tmp_path):
    assert FilesSink.query_folder(str(tmp_path), "q") == str(tmp_path / "q")
    with pytest.raises(ExecutionError, match="outside its folder"):
        FilesSink.query_folder(str(tmp_path), "../x")
    os.symlink("/tmp", tmp_path / "linked")
    with pytest.raises(ExecutionError, match="outside its folder"):
        FilesSink.query_folder(str(tmp_path), "linked")


# -- over HTTP, against `sparkcq serve` --------------------------------------------------------

@pytest.fixture(scope="module")
def served(tmp_path_factory):
    served = start_server(tmp_path_factory.mktemp("sandbox"))
    yield served
    served.stop()


def http_refusal(client, sql) -> ServerError:
    with pytest.raises(ServerError) as err:
        client.submit(sql)
    assert err.value.status == 400
    return err.value


@pytest.mark.slow
def test_server_clients_are_sandboxed(served):
    client = served.client
    client.submit("CREATE STREAM pk (ip STRING, bytes BIGINT, t BIGINT) WITH (event_time='t')")
    e = http_refusal(client, "CREATE QUERY z AS SELECT java_method('java.lang.System', 'exit', "
                             "3) AS z FROM pk")
    assert "function 'java_method' is not allowed" in str(e) and "line 1, col 26" in str(e)
    e = http_refusal(client, "CREATE TABLE pw (value STRING) WITH (format='text', "
                             "path='/etc/passwd')")
    assert "outside the data roots" in str(e) and str(served.data_root) in str(e)
    e = http_refusal(client, "CREATE QUERY f INTO files WITH (path='/tmp/anywhere') "
                             "AS SELECT ip FROM pk")
    assert "'/tmp/anywhere' is outside the data roots" in str(e)
    e = http_refusal(client, "CREATE QUERY `../../x` AS SELECT ip FROM pk")
    assert "query name '../../x' is not allowed" in str(e)

    # the JVM is alive and a table under the data root joins
    (served.data_root / "hosts.csv").write_text("ip,host\n1.1.1.1,alpha\n2.2.2.2,beta\n")
    client.submit("CREATE TABLE hosts (ip STRING, host STRING) WITH (format='csv', "
                  "path='hosts.csv')")
    client.submit("CREATE QUERY named AS ISTREAM SELECT h.host AS host, p.bytes AS bytes "
                  "FROM pk [NOW] AS p JOIN hosts AS h ON p.ip = h.ip")
    client.push("pk", [{"ip": "2.2.2.2", "bytes": 10, "t": 1},
                       {"ip": "9.9.9.9", "bytes": 20, "t": 2}], end=True)
    got = wait_for(lambda: (lambda f: f if len(f) else None)(client.results("named")[0]))
    assert got[["host", "bytes"]].values.tolist() == [["beta", 10]]
    assert {q["name"] for q in client.queries()} == {"named"}
