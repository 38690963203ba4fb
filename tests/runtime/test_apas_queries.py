"""StreamAPAS queries on the engine: the published two-sector query and its range-window
variant equal the SQL queries and the reference interpreter, share the SQL queries'
operators, and report their mistakes at their place in the APAS text.
"""

import re
import statistics

import pytest
from oracle import Relation, aggregate, output, union
from scenarios import engine_records, per_case

from sparkcq.errors import AnalysisError, QuerySyntaxError
from sparkcq.language.apas.parser import quote_query

# the paper's inputs: speeds per road sector, each valid over an interval
SECTOR_I = [(40, 2, 10), (70, 4, 10), (70, 8, 14), (80, 9, 17)]
SECTOR_II = [(90, 3, 7), (70, 5, 9), (50, 7, 14), (100, 9, 18)]

TWO_SECTORS = """\
select o1[sektor = 1, avg = agg.avg($I.val), minmax = (agg.min($I.val) + agg.max($I.val)) / 2];
select o2[sektor = 2, avg = agg.avg($II.val), minmax = (agg.min($II.val) + agg.max($II.val)) / 2];
where util.union($o1[T], $o2[T]) select facts[$new[T]];
where $facts.avg > 70 select result[$facts[T]];
select [$result[T]]"""

RANGED = (TWO_SECTORS
          .replace("select o1", "where window.range($I, 1h) select o1", 1)
          .replace("select o2", "where window.range($II, 1h) select o2", 1))

SQL = """SELECT sektor, avg, minmax FROM (
    SELECT 1 AS sektor, avg(val) AS avg, (min(val) + max(val)) / 2 AS minmax FROM I{w}
    UNION ALL
    SELECT 2 AS sektor, avg(val) AS avg, (min(val) + max(val)) / 2 AS minmax FROM II{w}
) AS facts WHERE avg > 70"""


def reference(window: int | None) -> list[tuple]:
    """The two-sector query by the reference interpreter (tests/oracle.py)."""
    def sector(rows: list[tuple], number: int) -> Relation:
        elements = tuple(((v,), ts, te if window is None else ts + window)
                         for v, ts, te in rows)
        vals = lambda rs: [r["val"] for r in rs]  # noqa: E731
        agg = aggregate(Relation(("val",), elements), (), [
            ("avg", lambda rs: statistics.mean(vals(rs))),
            ("minmax", lambda rs: (min(vals(rs)) + max(vals(rs))) / 2)])
        return agg.select(("sektor", "avg", "minmax"),
                          lambda r: (number, float(r["avg"]), float(r["minmax"])))

    facts = union(sector(SECTOR_I, 1), sector(SECTOR_II, 2)).where(lambda r: r["avg"] > 70)
    return output(facts, "")


def run_sectors(engine, queries: dict[str, tuple[str, str]]) -> dict[str, list[tuple]]:
    engine.execute("""
        CREATE STREAM I (val BIGINT, t BIGINT, t_end BIGINT)
            WITH (event_time='t', end_time='t_end', time_unit='hours');
        CREATE STREAM II (val BIGINT, t BIGINT, t_end BIGINT)
            WITH (event_time='t', end_time='t_end', time_unit='hours');
    """)
    for name, (language, text) in queries.items():
        engine.create_query(name, text, language=language)
    for stream, rows in (("I", SECTOR_I), ("II", SECTOR_II)):
        engine.push(stream, [{"val": v, "t": a, "t_end": b} for v, a, b in rows], end=True)
    engine.run_until_idle()
    return {name: sorted(engine_records(engine.results(name), "intervals"))
            for name in queries}


def test_two_sector_query_equals_sql_and_the_reference(engine):
    got = run_sectors(engine, {"apas": ("apas", TWO_SECTORS), "sql": ("sql", SQL.format(w=""))})
    want = sorted(reference(None))
    # sector I is 75 on [10, 14) and 80 on [14, 17); sector II 90, 80, 75, 100 where > 70
    assert want == [((1, 75.0, 75.0), 10, 14), ((1, 80.0, 80.0), 14, 17),
                    ((2, 75.0, 75.0), 9, 14), ((2, 80.0, 80.0), 5, 7),
                    ((2, 90.0, 90.0), 3, 5), ((2, 100.0, 100.0), 14, 18)]
    assert got["apas"] == want
    assert got["sql"] == want


def test_range_window_variant_equals_sql_and_the_reference(engine):
    got = run_sectors(engine, {"apas": ("apas", RANGED),
                               "sql": ("sql", SQL.format(w=" [RANGE 1 HOURS]"))})
    want = sorted(reference(1))
    assert want and got["apas"] == want
    assert got["sql"] == want


def test_apas_and_sql_queries_share_every_operator(engine):
    engine.execute("""
        CREATE STREAM I (val BIGINT, t BIGINT, t_end BIGINT)
            WITH (event_time='t', end_time='t_end');
        CREATE STREAM II (val BIGINT, t BIGINT, t_end BIGINT)
            WITH (event_time='t', end_time='t_end');
    """)
    engine.create_query("apas", TWO_SECTORS, language="apas")
    alone = engine.explain_global()
    engine.create_query("sql", SQL.format(w=""), language="sql")
    both = engine.explain_global()
    nodes = [line for line in both.splitlines() if re.match(r"#\d+ ", line)]
    assert len(nodes) == len([ln for ln in alone.splitlines() if re.match(r"#\d+ ", ln)])
    assert any(line.startswith("#2 Aggregate avg(val) AS avg, min(val), max(val)")
               for line in nodes)
    for line in nodes:
        assert "refs=2" in line and "queries=[apas, sql]" in line, line


def test_a_query_from_a_statement_in_a_script(engine):
    engine.execute(f"""
        CREATE STREAM I (val BIGINT, t BIGINT, t_end BIGINT)
            WITH (event_time='t', end_time='t_end');
        CREATE STREAM II (val BIGINT, t BIGINT, t_end BIGINT)
            WITH (event_time='t', end_time='t_end');
        CREATE QUERY roads LANGUAGE apas AS {quote_query(TWO_SECTORS)};
    """)
    assert "Aggregate avg(val) AS avg" in engine.explain("roads")
    for stream, rows in (("I", SECTOR_I), ("II", SECTOR_II)):
        engine.push(stream, [{"val": v, "t": a, "t_end": b} for v, a, b in rows], end=True)
    engine.run_until_idle()
    assert sorted(engine_records(engine.results("roads"), "intervals")) == sorted(reference(None))


@pytest.fixture
def sensors(engine):
    engine.execute("CREATE STREAM s (k STRING, v BIGINT, x DOUBLE, ok BOOLEAN, t BIGINT) "
                   "WITH (event_time='t')")
    return engine


@pytest.mark.parametrize(("text", "message", "line", "fragment"), [
    ("select o[a = $s.v - $s.k];\nselect [$o[T]]",
     "type error: operator '-' does not apply to INTEGER and STRING; it applies to INTEGER, "
     "DOUBLE", 1, "$s.v - $s.k"),
    ("select o[a = $s.vv];\nselect [$o[T]]",
     "unknown attribute 'vv' of $s; attributes: k, v, x, ok, t", 1, "$s.vv"),
    ("select o[a = $s.v];\nwhere $o.a select p[$o[T]];\nselect [$p[T]]",
     "a where-condition must be BOOLEAN, found INTEGER", 2, "$o.a"),
    ("select o[a = agg.avg($s.k)];\nselect [$o[T]]",
     "type error: agg.avg takes INTEGER or DOUBLE, found STRING", 1, "$s.k"),
    ("select o[a = geo.dist($s.x)];\nselect [$o[T]]",
     "unknown library 'geo' in geo.dist; libraries: agg, util, window", 1,
     "geo.dist($s.x)"),
    ("select o[a = agg.mean($s.v)];\nselect [$o[T]]",
     "unknown function 'agg.mean'; library 'agg' has avg, count, count_distinct, max, min, "
     "stats, stddev, "
     "stddev_pop, stddev_samp, sum, var_pop, var_samp, variance, variance_pop", 1,
     "agg.mean($s.v)"),
    ("select o[a = $q.v];\nselect [$o[T]]", "unknown stream or step $q; known: $s", 1,
     "$q.v"),
    ("select o[a = agg.sum($s.v), b = agg.min($s.v) + $s.v];\nselect [$o[T]]",
     "mixes an aggregate with $s.v outside one", 1, "agg.min($s.v) + $s.v"),
    ("where agg.count() > 1 select o[a = $s.v];\nselect [$o[T]]",
     "an aggregate is not allowed in a where-clause", 1, "agg.count() > 1"),
    ("select o[a = $s.v, a = 2];\nselect [$o[T]]", "attribute 'a' is defined twice", 1,
     "a = 2"),
    ("select o[a = $s.v];\nselect o[b = $s.v];\nselect [$o[T]]",
     "step 'o' is defined twice", 2, "o"),
    ("where window.range($s, 10) and window.now($s) select o[a = $s.v];\nselect [$o[T]]",
     "$s has two windows in this step", 1, "window.now($s)"),
    ("select o[a = $s.v];\nwhere window.range($o, 10) select p[b = $o.a];\nselect [$p[T]]",
     "$o is a step of this query; a window applies to a stream", 2, "window.range($o, 10)"),
    ("select o[a = $s.v, b = $s.ok];\nselect p[a = $s.v];\nwhere util.union($o[T], $p[T]) "
     "select u[$new[T]];\nselect [$u[T]]",
     "util.union: $p has attributes a, the first input a, b", 3, "$p[T]"),
    ("select o[a = window.now($s)];\nselect [$o[T]]",
     "window.now shapes a step's input; call it in the where-clause", 1,
     "window.now($s)"),
    ("select o[a = $s];\nselect [$o[T]]", "$s is a whole input, not a value", 1, "$s"),
    ("select o[a = $s.v.w];\nselect [$o[T]]",
     "$s.v is INTEGER, not a tree; it has no attribute 'w'", 1, "$s.v.w"),
], ids=lambda x: x if isinstance(x, str) and len(x) < 20 else None)
def test_mistakes_are_refused_at_their_place_in_the_apas_text(sensors, text, message, line,
                                                              fragment):
    with pytest.raises(AnalysisError) as err:
        sensors.create_query("q", text, language="apas")
    e = err.value
    assert message in e.message
    col = text.splitlines()[line - 1].index(fragment) + 1
    assert (e.loc.line, e.loc.col) == (line, col), str(e)
    assert e.text == text
    assert text[e.loc.start:e.loc.end] == fragment
    assert sensors.show("QUERIES").empty


def test_a_syntax_error_of_a_statement_underlines_the_statement(sensors):
    statement = ("CREATE QUERY q LANGUAGE apas AS 'select o[a = $s.v];\n"
                 "select [$o[T]]]'")
    with pytest.raises(QuerySyntaxError) as err:
        sensors.execute(statement)
    assert (err.value.loc.line, err.value.loc.col) == (2, 15)
    assert "select [$o[T]]]" in str(err.value)


def test_a_type_error_in_a_statement_underlines_the_statement(sensors):
    statement = "CREATE QUERY q LANGUAGE apas AS 'select o[a = $s.k - true]; select [$o[T]]'"
    with pytest.raises(AnalysisError) as err:
        sensors.execute(statement)
    e = err.value
    assert statement[e.loc.start:e.loc.end] == "$s.k - true"
    assert "operator '-' does not apply to STRING and BOOLEAN" in e.message


def test_per_key_aggregate_groups_by_the_other_attributes(sensors):
    sensors.create_query("per_key", (
        "where window.range($s, 10) and $s.v > 0 select o[k = $s.k, n = agg.count(), "
        "total = agg.sum($s.v), first = 1];\nselect [$o[T]]"), language="apas")
    sensors.create_query("sql", "SELECT k, count(*) AS n, sum(v) AS total, 1 AS first "
                         "FROM s [RANGE 10] WHERE v > 0 GROUP BY k")
    sensors.push("s", [{"k": k, "v": v, "x": 0.0, "ok": True, "t": t}
                       for k, v, t in [("a", 1, 1), ("b", 2, 2), ("a", 3, 5), ("a", 0, 6)]],
                 end=True)
    sensors.run_until_idle()
    got = per_case(engine_records(sensors.results("per_key"), "intervals"))
    assert got == per_case(engine_records(sensors.results("sql"), "intervals"))
    assert sorted(got["a"]) == [(("a", 1, 1, 1), 1, 5), (("a", 1, 3, 1), 11, 15),
                                (("a", 2, 4, 1), 5, 11)]


# -- attribute trees, in both languages -------------------------------------------------------
CARS = [("a", 1.0, 2.0, 1), ("a", 3.0, 2.0, 2), ("a", 8.0, 5.0, 3), ("b", 0.0, 0.0, 4)]


@pytest.fixture
def cars(engine):
    engine.execute("CREATE STREAM cars (id STRING, position STRUCT<x: DOUBLE, y: DOUBLE>, "
                   "t BIGINT) WITH (event_time='t')")
    return engine


def push_cars(engine):
    engine.push("cars", [{"id": i, "position": {"x": x, "y": y}, "t": t} for i, x, y, t in CARS],
                end=True)
    engine.run_until_idle()


def rows(engine, query: str) -> list[tuple]:
    frame = engine.results(query)
    cols = [c for c in frame.columns if c not in ("_te", "_op")]
    plain = lambda v: tuple(sorted(v.items())) if isinstance(v, dict) else v  # noqa: E731
    return sorted(tuple(plain(r[c]) for c in cols) for r in frame.to_dict("records"))


def test_paths_into_a_struct_in_both_languages(cars):
    cars.execute("CREATE QUERY sql AS SELECT id, position.x AS px, cars.position.y AS py "
                 "FROM cars WHERE position.x > 2")
    cars.create_query("apas", "where $cars.position.x > 2 select o[id = $cars.id, "
                      "px = $cars.position.x, py = $cars.position.y];\nselect [$o[T]]",
                      language="apas")
    push_cars(cars)
    want = [("a", 3.0, 2.0, 2), ("a", 8.0, 5.0, 3)]
    assert rows(cars, "sql") == want
    assert rows(cars, "apas") == want
    assert "Project `id`, `position`.`x` AS px, `position`.`y` AS py" in cars.explain("sql")
    top = [cars.explain(q).splitlines()[0].split("  (shared")[0] for q in ("apas", "sql")]
    assert top[0] == top[1]


def test_subtrees_copied_and_built(cars):
    cars.execute("CREATE QUERY sql AS SELECT id, position FROM cars")
    cars.create_query("apas", "select o[id = $cars.id, $cars.position[T], "
                      "p.x2 = $cars.position.x * 2, p.src = $cars.id, d = [u = 1, w = true], "
                      "all = $cars[T]];\nselect [$o[T]]", language="apas")
    push_cars(cars)
    assert rows(cars, "sql") == [(i, (("x", x), ("y", y)), t) for i, x, y, t in CARS]
    got = rows(cars, "apas")
    assert got == sorted(
        (i, (("x", x), ("y", y)), (("src", i), ("x2", 2 * x)), (("u", 1), ("w", True)),
         (("id", i), ("position", {"x": x, "y": y}), ("t", t)), t) for i, x, y, t in CARS)
    frame = cars.results("apas")
    assert list(frame.columns[:5]) == ["id", "position", "p", "d", "all"]
    assert list(frame["p"][0]) == ["x2", "src"]  # in the order written



def test_a_bare_t_is_the_whole_tree_of_the_steps_input(cars):
    """``o[T]`` copies every attribute of the step's one input (here ``$cars``, named by
    the where-clause), as ``o[$cars[T]]`` does; ``select [T]`` copies ``$o``. The SQL twin
    shares the plan. A step reading two inputs is refused: ``T`` would not say which.
    """
    cars.create_query("bare", "where $cars.position.x > 2 select o[T]; select [T]",
                      language="apas")
    cars.create_query("named", "where $cars.position.x > 2 select o[$cars[T]]; "
                      "select [$o[T]]", language="apas")
    cars.execute("CREATE QUERY sql AS SELECT * FROM cars WHERE position.x > 2")
    with pytest.raises(AnalysisError, match=r"T is the whole tree of the step's input, and "
                       r"this step reads \$o, \$cars"):
        cars.create_query("two", "select o[id = $cars.id]; where $o.id == $cars.id "
                          "select p[T]; select [$p[T]]", language="apas")
    push_cars(cars)
    want = [("a", (("x", 3.0), ("y", 2.0)), 2, 2), ("a", (("x", 8.0), ("y", 5.0)), 3, 3)]
    assert rows(cars, "bare") == rows(cars, "named") == rows(cars, "sql") == want
    assert "(shared with named, sql)" in cars.explain("bare").splitlines()[0]


def test_names_relative_to_the_tree_being_built(cars):
    """The paper's Fig. 8 form: ``a.b = [...]`` then ``w = a.b.z * $cars.position.y`` reads
    the attribute just defined; ``q[x = 1.5, u = x + 1]`` is ``q.x = 1.5, q.u = q.x + 1``,
    the innermost tree first. The nested form and the path form are one plan."""
    cars.create_query("fig8", "select o[id = $cars.id, a.b = [z = $cars.position.x * 2], "
                      "w = a.b.z * $cars.position.y, q[x = 1.5, u = x + 1, v = id]];\n"
                      "select [$o[T]]", language="apas")
    cars.create_query("nested", "select o[p[x = $cars.position.x]]; select [$o[T]]",
                      language="apas")
    cars.create_query("paths", "select o[p.x = $cars.position.x]; select [$o[T]]",
                      language="apas")
    push_cars(cars)
    def deep(v: object) -> object:
        return tuple(sorted((k, deep(x)) for k, x in v.items())) if isinstance(v, dict) else v

    frame = cars.results("fig8")
    got = sorted(tuple(deep(r[c]) for c in ("id", "a", "w", "q", "_ts"))
                 for r in frame.to_dict("records"))
    assert got == sorted((i, (("b", (("z", 2 * x),)),), 2 * x * y,
                          (("u", 2.5), ("v", i), ("x", 1.5)), t) for i, x, y, t in CARS)
    assert rows(cars, "nested") == rows(cars, "paths")
    assert "(shared with paths)" in cars.explain("nested").splitlines()[0]


@pytest.mark.parametrize(("text", "message"), [
    ("select o[a = 1, w = b * 2]; select [$o[T]]",
     "unknown attribute 'b' of the tree being built (defined before it: id, a)"),
    ("where x > 1 select o[a = 1]; select [$o[T]]", "'x' names no attribute here"),
])
def test_a_bare_name_must_be_defined_before_it(cars, text, message):
    with pytest.raises(AnalysisError, match=re.escape(message)):
        cars.create_query("bad", text.replace("select o[a", "select o[id = $cars.id, a"),
                          language="apas")

def test_tree_valued_aggregate_in_both_languages(cars):
    cars.execute("CREATE QUERY sql AS SELECT id, stats(position.x).median AS med, "
                 "stats(position.x) AS s FROM cars [RANGE 10] GROUP BY id")
    cars.create_query("apas", "where window.range($cars, 10) select o[id = $cars.id, "
                      "s = agg.stats($cars.position.x)];\n"
                      "select p[id = $o.id, med = $o.s.median, $o.s[T]];\nselect [$p[T]]",
                      language="apas")
    cars.create_query("field", "where window.range($cars, 10) select o[id = $cars.id, "
                      "med = agg.stats($cars.position.x).median];\nselect [$o[T]]",
                      language="apas")
    push_cars(cars)
    # a's x over [RANGE 10]: {1} on [1,2), {1,3} on [2,3), {1,3,8} on [3,11), {3,8} on
    # [11,12), {8} on [12,13); b's {0} on [4,14)
    stats = {1: (1.0, 1.0, 1.0, 1.0), 2: (1.0, 3.0, 2.0, 2.0), 3: (1.0, 8.0, 3.0, 4.0),
             11: (3.0, 8.0, 5.5, 5.5), 12: (8.0, 8.0, 8.0, 8.0)}
    want = sorted([("a", med, (("avg", avg), ("max", hi), ("median", med), ("min", lo)), ts)
                   for ts, (lo, hi, med, avg) in stats.items()]
                  + [("b", 0.0, (("avg", 0.0), ("max", 0.0), ("median", 0.0), ("min", 0.0)), 4)])
    assert rows(cars, "sql") == want
    assert rows(cars, "apas") == want
    assert rows(cars, "field") == [(i, med, ts) for i, med, _, ts in want]
    frame = cars.results("apas")
    assert list(frame["s"][0]) == ["min", "max", "median", "avg"]
    # one aggregate node with four partials, shared by the two queries
    assert ("Aggregate min(position.x), max(position.x), median(position.x), avg(position.x) "
            "BY id") in cars.explain("apas")
    assert "(shared with field, sql)" in cars.explain("apas").split("Aggregate")[1].splitlines()[0]


def test_tree_mistakes(cars):
    with pytest.raises(AnalysisError, match=r"unknown attribute 'z' of \$cars.position; "
                                            r"attributes: x, y"):
        cars.create_query("q", "select o[a = $cars.position.z]; select [$o[T]]",
                          language="apas")
    with pytest.raises(AnalysisError, match=r"unknown attribute 'mean' of agg.stats\(...\); "
                                            "attributes: min, max, median, avg"):
        cars.create_query("q", "select o[a = agg.stats($cars.position.x).mean]; "
                          "select [$o[T]]", language="apas")
    with pytest.raises(AnalysisError, match="agg.stats takes INTEGER or DOUBLE, found a tree"):
        cars.create_query("q", "select o[a = agg.stats($cars.position)]; select [$o[T]]",
                          language="apas")
    with pytest.raises(AnalysisError, match="stats\\(x\\) takes a number, found STRING"):
        cars.execute("CREATE QUERY q AS SELECT stats(id) AS s FROM cars [RANGE 5]")
    with pytest.raises(AnalysisError, match="No such struct field `?z`?|z"):
        cars.execute("CREATE QUERY q AS SELECT position.z AS z FROM cars")


# -- libraries ------------------------------------------------------------------------------
def test_a_library_added_while_queries_run(spark):
    from sparkcq import Engine

    eng = Engine(spark=spark, allow_udf_modules=["geo_library"])
    eng.execute("CREATE STREAM cars (id STRING, position STRUCT<x: DOUBLE, y: DOUBLE>, "
                "t BIGINT) WITH (event_time='t')")
    eng.create_query("before", "select o[id = $cars.id, x = $cars.position.x];\n"
                     "select [$o[T]]", language="apas")
    eng.push("cars", [{"id": "a", "position": {"x": 3.0, "y": 4.0}, "t": 1}])
    eng.run_cycle()
    with pytest.raises(AnalysisError, match="unknown library 'geo' in geo.dist"):
        eng.create_query("early", "select o[d = geo.dist($cars.position.x, 1)]; select [$o[T]]",
                         language="apas")
    eng.register_library("geo", "geo_library")  # while "before" runs
    eng.create_query("after", "select o[id = $cars.id, d = geo.dist($cars.position.x, "
                     "$cars.position.y), n = geo.label($cars.id, 7)];\nselect [$o[T]]",
                     language="apas")
    eng.push("cars", [{"id": "b", "position": {"x": 6.0, "y": 8.0}, "t": 2}], end=True)
    eng.run_until_idle()
    assert rows(eng, "before") == [("a", 3.0, 1), ("b", 6.0, 2)]
    # a query started later sees the events from the watermark at its start on (here 1)
    assert rows(eng, "after") == [("a", 5.0, "a#7", 1), ("b", 10.0, "b#7", 2)]
    functions = eng.show("FUNCTIONS")
    assert "geo.dist(DOUBLE, DOUBLE) -> DOUBLE" in set(functions["signature"])
    assert "geo.label(STRING, INTEGER) -> STRING" in set(functions["signature"])
    with pytest.raises(AnalysisError) as err:
        eng.create_query("bad", "select o[d = geo.dist($cars.id, 1)]; select [$o[T]]",
                         language="apas")
    assert "argument 1 of geo.dist is STRING, which does not convert to DOUBLE" in str(err.value)
    with pytest.raises(AnalysisError, match="library 'geo' has dist, label, spread, track"):
        eng.create_query("bad", "select o[d = geo.helper($cars.id)]; select [$o[T]]",
                         language="apas")
    with pytest.raises(Exception, match="library 'geo' is used by after; drop them first"):
        eng.execute("DROP LIBRARY geo")
    eng.execute("DROP QUERY after")
    eng.execute("DROP LIBRARY geo")
    with pytest.raises(AnalysisError, match="unknown library 'geo'"):
        eng.create_query("again", "select o[d = geo.dist($cars.position.x, 2)]; "
                         "select [$o[T]]", language="apas")
    eng.stop()


def test_a_library_contributes_an_aggregate_class(spark):
    """A class of the module with plus, minus and value is ``geo.spread(x)``, typed by its
    annotations. By hand, ids a (x = 1, 3, 8 at 1, 2, 3) and b (0 at 4) over [RANGE 10]:
    a 0 on [1, 2), 2 on [2, 3), 7 on [3, 11), 5 on [11, 12), 0 on [12, 13); b 0 on [4, 14).
    """
    from sparkcq import Engine

    eng = Engine(spark=spark, allow_udf_modules=["geo_library"])
    eng.execute("CREATE STREAM cars (id STRING, position STRUCT<x: DOUBLE, y: DOUBLE>, "
                "t BIGINT) WITH (event_time='t'); CREATE LIBRARY geo USING 'geo_library'")
    eng.create_query("apas", "where window.range($cars, 10) select o[id = $cars.id, "
                     "s = geo.spread($cars.position.x)]; select [$o[T]]", language="apas")
    with pytest.raises(AnalysisError, match="geo.spread takes 1 arguments, got 2"):
        eng.create_query("bad", "select o[s = geo.spread($cars.position.x, 1.0)]; "
                         "select [$o[T]]", language="apas")
    push_cars(eng)
    assert sorted(engine_records(eng.results("apas"), "intervals")) == [
        (("a", 0.0), 1, 2), (("a", 0.0), 12, 13), (("a", 2.0), 2, 3), (("a", 5.0), 11, 12),
        (("a", 7.0), 3, 11), (("b", 0.0), 4, 14)]
    eng.execute("DROP QUERY apas")
    eng.execute("DROP LIBRARY geo")
    assert "geo__spread" not in eng.catalog.aggregates
    eng.stop()


def test_a_library_contributes_a_table_function_shared_with_sql(spark):
    """A class of the module with ``process`` and ``returns`` is ``geo.track``: the step
    reads ``$cars`` through it. By hand, chunks of 2 (cut at 2, 4, 6) and scale 2: a at x =
    1 (chunk cut at 2), then 3 and 8 (cut at 4): 0 after one point, 2 * (2 + 5) = 14 after
    three; b at 0 (cut at 6): 0 after one point. The SQL twin shares the operator.
    """
    from sparkcq import Engine

    eng = Engine(spark=spark, allow_udf_modules=["geo_library"])
    eng.execute("CREATE STREAM cars (id STRING, position STRUCT<x: DOUBLE, y: DOUBLE>, "
                "t BIGINT) WITH (event_time='t'); CREATE LIBRARY geo USING 'geo_library'")
    eng.create_query("apas", "where window.cut($cars, 2) and geo.track($cars, $cars.id, 2.0) "
                     "select o[id = $cars.id, d = $cars.travelled, n = $cars.points]; "
                     "select [$o[T]]", language="apas")
    eng.execute("CREATE QUERY sql AS SELECT id, travelled AS d, points AS n FROM "
                "geo__track(TABLE cars [CUT ON t BY 2] PARTITION BY id, 2.0)")
    with pytest.raises(AnalysisError, match="arguments after the stream and its partition "
                       "attributes are constants"):
        eng.create_query("bad", "where geo.track($cars, $cars.id, 1 + 1) select o[id = "
                         "$cars.id]; select [$o[T]]", language="apas")
    with pytest.raises(AnalysisError, match=r"takes 1 argument\(s\) after the table "
                       r"\(scale\), got 0"):
        eng.create_query("bad", "where geo.track($cars, $cars.id) select o[id = "
                         "$cars.id]; select [$o[T]]", language="apas")
    push_cars(eng)
    expected = [("a", 0.0, 1, 2), ("a", 14.0, 3, 4), ("b", 0.0, 1, 6)]
    assert rows(eng, "apas") == rows(eng, "sql") == expected
    line = next(ln for ln in eng.explain_global().splitlines() if "TableFunction" in ln)
    assert "queries=[apas, sql]" in line
    eng.execute("DROP QUERY apas; DROP QUERY sql")
    eng.execute("DROP LIBRARY geo")
    assert "geo__track" not in eng.catalog.table_functions
    eng.stop()


def test_a_library_only_from_an_allowed_module(engine):
    with pytest.raises(AnalysisError, match="module 'geo_library' is not allowed to load code"):
        engine.execute("CREATE LIBRARY geo USING 'geo_library'")
    with pytest.raises(AnalysisError, match="library prefix 'agg' is built in"):
        engine.execute("CREATE LIBRARY agg USING 'sparkcq.aggregates.library'")


def test_a_user_aggregate_is_callable_as_agg_name(sensors):
    sensors.execute("CREATE AGGREGATE median(x DOUBLE) RETURNS DOUBLE "
                    "USING 'sparkcq.aggregates.library:Median'")
    sensors.create_query("apas", "where window.range($s, 10) select o[k = $s.k, "
                         "m = agg.median($s.v)];\nselect [$o[T]]", language="apas")
    sensors.execute("CREATE QUERY sql AS SELECT k, median(v) AS m FROM s [RANGE 10] GROUP BY k")
    sensors.push("s", [{"k": "a", "v": v, "x": 0.0, "ok": True, "t": t}
                       for v, t in [(1, 1), (5, 2), (2, 3)]], end=True)
    sensors.run_until_idle()
    # {1} on [1,2), {1,5} on [2,3), {1,2,5} on [3,11), {2,5} on [11,12), {2} on [12,13)
    want = [("a", 1.0, 1), ("a", 2.0, 3), ("a", 2.0, 12), ("a", 3.0, 2), ("a", 3.5, 11)]
    assert rows(sensors, "apas") == want
    assert rows(sensors, "sql") == want
    assert "(shared with apas)" in sensors.explain("sql").split("Aggregate")[1].splitlines()[0]


def test_a_union_takes_each_attributes_type_from_its_first_input(sensors):
    sensors.create_query("widened", (
        "select a[k = $s.k, n = $s.x];\nselect b[n = $s.v, k = $s.k];\n"
        "where util.union($a[T], $b[T]) select u[$new[T]];\nselect [$u[T]]"), language="apas")
    sensors.push("s", [{"k": "a", "v": 2, "x": 0.5, "ok": True, "t": 1}], end=True)
    sensors.run_until_idle()
    frame = sensors.results("widened")
    assert list(frame.columns[:2]) == ["k", "n"]
    assert sorted(frame["n"]) == [0.5, 2.0]  # b's INTEGER n as a DOUBLE, in a's order
    with pytest.raises(AnalysisError) as err:
        sensors.create_query("narrowed", (
            "select a[n = $s.v];\nselect b[n = $s.x];\n"
            "where util.union($a[T], $b[T]) select u[$new[T]];\nselect [$u[T]]"),
            language="apas")
    assert ("util.union: attribute 'n' is INTEGER in the first input but DOUBLE in $b, and "
            "does not convert to it") in err.value.message


def test_explain_an_apas_query_before_it_runs(sensors):
    plan = sensors.execute("EXPLAIN LANGUAGE apas 'where window.range($s, 10) select "
                           "o[k = $s.k, n = agg.count()]; select [$o[T]]'")
    same = sensors.execute("EXPLAIN SELECT k, count(*) AS n FROM s [RANGE 10] GROUP BY k")
    assert plan == same and "Window [RANGE 10]" in plan
    with pytest.raises(AnalysisError) as err:
        sensors.execute("EXPLAIN LANGUAGE apas 'select o[n = $s.nope]; select [$o[T]]'")
    statement = "EXPLAIN LANGUAGE apas 'select o[n = $s.nope]; select [$o[T]]'"
    assert statement[err.value.loc.start:err.value.loc.end] == "$s.nope"


def test_a_windowed_stream_is_read_without_naming_an_attribute(sensors):
    sensors.create_query("n", "where window.range($s, 10) select o[n = agg.count()];\n"
                         "select [$o[T]]", language="apas")
    sensors.execute("CREATE QUERY sql AS SELECT count(*) AS n FROM s [RANGE 10]")
    sensors.push("s", [{"k": "a", "v": 1, "x": 0.0, "ok": True, "t": t} for t in (1, 4)],
                 end=True)
    sensors.run_until_idle()
    # one element on [1, 4) and [11, 14), two on [4, 11)
    assert rows(sensors, "n") == [(1, 1), (1, 11), (2, 4)]
    assert rows(sensors, "sql") == rows(sensors, "n")


def test_the_remainder_takes_the_dividends_sign_and_shares_with_sql(engine):
    """``%`` as in SQL and Java: 7 % 3 = 1, -7 % 3 = -1, 5 % 3 = 2; on DOUBLE 7 % 2.5 =
    2.0, -7 % 2.5 = -2.0, 5 % 2.5 = 0.0 (by hand). The APAS query and the equal SQL share
    their operators."""
    engine.execute("CREATE STREAM n (v BIGINT, t BIGINT) WITH (event_time='t')")
    engine.create_query("apas", "select o[m = $n.v % 3]; select [$o[T]]", language="apas")
    engine.create_query("sql", "SELECT v % 3 AS m FROM n", language="sql")
    engine.create_query("dbl", "select o[d = $n.v % 2.5, w = $n.v * 2 % 3]; select [$o[T]]",
                        language="apas")
    nodes = [ln for ln in engine.explain_global().splitlines() if re.match(r"#\d+ ", ln)]
    assert any("queries=[apas, sql]" in ln for ln in nodes), nodes
    engine.push("n", [{"v": 7, "t": 1}, {"v": -7, "t": 2}, {"v": 5, "t": 3}], end=True)
    engine.run_until_idle()
    for name in ("apas", "sql"):
        assert sorted(engine_records(engine.results(name), "intervals")) == [
            ((-1,), 2, 2), ((1,), 1, 1), ((2,), 3, 3)]
    assert sorted(engine_records(engine.results("dbl"), "intervals")) == [
        ((-2.0, -2), 2, 2), ((0.0, 1), 3, 3), ((2.0, 2), 1, 1)]


def test_count_distinct_equals_sql_and_shares_its_aggregate(engine):
    """agg.count_distinct is SQL's count(DISTINCT x). By hand, v = 5 at 1 and 2, 6 at 3,
    each for 10: {5} on [1, 3), {5, 6} on [3, 12), {6} on [12, 13)."""
    engine.execute("CREATE STREAM n (k BIGINT, v BIGINT, t BIGINT) WITH (event_time='t')")
    engine.create_query("apas", "where window.range($n, 10) select o[k = $n.k, "
                        "c = agg.count_distinct($n.v)]; select [$o[T]]", language="apas")
    engine.create_query("sql", "SELECT k, count(DISTINCT v) AS c FROM n [RANGE 10] GROUP BY k",
                        language="sql")
    aggregate = next(ln for ln in engine.explain_global().splitlines() if "Aggregate" in ln)
    assert "queries=[apas, sql]" in aggregate, aggregate
    engine.push("n", [{"k": 1, "v": 5, "t": 1}, {"k": 1, "v": 5, "t": 2},
                      {"k": 1, "v": 6, "t": 3}], end=True)
    engine.run_until_idle()
    for name in ("apas", "sql"):
        assert sorted(engine_records(engine.results(name), "intervals")) == [
            ((1, 1), 1, 3), ((1, 1), 12, 13), ((1, 2), 3, 12)]
    with pytest.raises(AnalysisError, match="agg.count_distinct takes one value"):
        engine.create_query("bad", "select o[c = agg.count_distinct($n.k, $n.v)]; "
                            "select [$o[T]]", language="apas")


@pytest.mark.parametrize("form", ["istream", "dstream", "changelog"])
def test_an_output_form_in_the_final_step_equals_sql(engine, form):
    """``select istream [...]`` is SQL's ``AS ISTREAM SELECT`` (and DSTREAM, CHANGELOG). By
    hand, counts of [RANGE 10] over events at 1, 2, 3: 1 on [1, 2), 2 on [2, 3), 3 on
    [3, 11), 2 on [11, 12), 1 on [12, 13); ISTREAM gives each at its start."""
    engine.execute("CREATE STREAM n (k BIGINT, t BIGINT) WITH (event_time='t')")
    engine.create_query("apas", "where window.range($n, 10) select o[k = $n.k, "
                        f"c = agg.count()]; select {form.upper()} [$o[T]]", language="apas")
    engine.execute(f"CREATE QUERY sql AS {form.upper()} "
                   "SELECT k, count(*) AS c FROM n [RANGE 10] GROUP BY k")
    engine.push("n", [{"k": 1, "t": t} for t in (1, 2, 3)], end=True)
    engine.run_until_idle()
    got = sorted(engine_records(engine.results("apas"), form), key=repr)
    assert got == sorted(engine_records(engine.results("sql"), form), key=repr)
    if form == "istream":
        assert sorted(got) == [((1, 1), 1), ((1, 1), 12), ((1, 2), 2), ((1, 2), 11),
                               ((1, 3), 3)]


@pytest.mark.parametrize(("window", "clause"), [
    ("window.session($n, 3)", "[SESSION 3]"),
    ("window.session($n, 3, $n.k)", "[PARTITION BY k SESSION 3]"),
    ("window.rows($n, 1, $n.k)", "[PARTITION BY k ROWS 1]"),
    ("window.cut($n, 10)", "[CUT ON t BY 10]"),
    ("window.cut($n, 10, 2)", "[CUT ON t BY 10 WINDOW 2 CHUNKS]"),
    ("window.cut_rows($n, 2)", "[CUT EVERY 2 ROWS]"),
    ("window.cut_key($n, $n.k)", "[CUT ON k]"),
])
def test_session_partition_and_chunk_windows_equal_sql(engine, window, clause):
    engine.execute("CREATE STREAM n (k STRING, t BIGINT) WITH (event_time='t')")
    engine.create_query("apas", f"where {window} select o[k = $n.k, c = agg.count()]; "
                        "select [$o[T]]", language="apas")
    engine.create_query("sql", f"SELECT k, count(*) AS c FROM n {clause} GROUP BY k",
                        language="sql")
    nodes = [ln for ln in engine.explain_global().splitlines() if re.match(r"#\d+ ", ln)]
    assert nodes and all("queries=[apas, sql]" in ln for ln in nodes), nodes  # all shared
    engine.push("n", [{"k": k, "t": t} for k, t in
                      (("a", 1), ("a", 4), ("b", 5), ("a", 12), ("b", 13), ("a", 14))],
                end=True)
    engine.run_until_idle()
    got = sorted(engine_records(engine.results("apas"), "intervals"), key=repr)
    assert got and got == sorted(engine_records(engine.results("sql"), "intervals"), key=repr)


@pytest.mark.parametrize(("window", "message"), [
    ("window.cut($n, 10, 0)", "expected a positive whole number of chunks"),
    ("window.session($n)", "window.session takes 2 or more arguments, got 1"),
    ("window.session($n, 3, $m.k)", "expected an attribute of $n to partition by"),
    ("window.cut_key($n)", "window.cut_key takes 2 or more arguments, got 1"),
])
def test_window_mistakes_are_refused_at_their_place(engine, window, message):
    engine.execute("CREATE STREAM n (k STRING, t BIGINT) WITH (event_time='t')")
    with pytest.raises(AnalysisError, match=re.escape(message)):
        engine.create_query("bad", f"where {window} select o[c = agg.count()]; "
                            "select [$o[T]]", language="apas")


@pytest.mark.parametrize("kind", ["inner", "left", "right", "full", "semi", "anti"])
def test_outer_semi_and_anti_joins_equal_sql(engine, kind):
    """``util.left_join($a, $b)`` and its kin: the where-clause's conditions are the join's
    ON, as SQL's ``a LEFT JOIN b ON ...``; ``inner`` is a plain where-condition."""
    engine.execute("CREATE STREAM a (k STRING, v BIGINT, t BIGINT) WITH (event_time='t'); "
                   "CREATE STREAM b (k STRING, w BIGINT, t BIGINT) WITH (event_time='t')")
    join = "" if kind == "inner" else f" and util.{kind}_join($a, $b)"
    tree = "k = $a.k, v = $a.v" + ("" if kind in ("semi", "anti") else ", w = $b.w")
    engine.create_query("apas", f"where window.range($a, 10) and window.range($b, 5){join} "
                        f"and $a.k == $b.k select j[{tree}]; select [$j[T]]", language="apas")
    columns = "a.k AS k, a.v AS v" + ("" if kind in ("semi", "anti") else ", b.w AS w")
    how = {"inner": "JOIN", "semi": "LEFT SEMI JOIN", "anti": "LEFT ANTI JOIN"}.get(
        kind, f"{kind.upper()} JOIN")
    engine.create_query("sql", f"SELECT {columns} FROM a [RANGE 10] {how} b [RANGE 5] "
                        "ON a.k = b.k", language="sql")
    nodes = [ln for ln in engine.explain_global().splitlines() if re.match(r"#\d+ ", ln)]
    assert nodes and all("queries=[apas, sql]" in ln for ln in nodes), nodes
    engine.push("a", [{"k": k, "v": v, "t": t} for k, v, t in
                      (("x", 1, 1), ("y", 2, 3), ("x", 3, 12))], end=True)
    engine.push("b", [{"k": k, "w": w, "t": t} for k, w, t in
                      (("x", 10, 4), ("z", 20, 6), ("x", 30, 14))], end=True)
    engine.run_until_idle()
    got = sorted(engine_records(engine.results("apas"), "intervals"), key=repr)
    assert got and got == sorted(engine_records(engine.results("sql"), "intervals"), key=repr)
    if kind == "semi":  # x@1 meets x@4 over [4, 9); x@12 meets x@14 over [14, 19)
        assert sorted(got) == [(("x", 1), 4, 9), (("x", 3), 14, 19)]


@pytest.mark.parametrize(("where", "message"), [
    ("util.left_join($a, $b)", "util.left_join needs a condition between $a and $b"),
    ("util.left_join($a) and $a.k == $b.k", "util.left_join takes two inputs"),
    ("util.anti_join($a, $b) and $a.k == $b.k", "util.anti_join keeps the elements of $a only"),
])
def test_join_mistakes_are_refused(engine, where, message):
    engine.execute("CREATE STREAM a (k STRING, v BIGINT, t BIGINT) WITH (event_time='t'); "
                   "CREATE STREAM b (k STRING, w BIGINT, t BIGINT) WITH (event_time='t')")
    with pytest.raises(AnalysisError, match=re.escape(message)):
        engine.create_query("bad", f"where {where} select j[k = $a.k, w = $b.w]; "
                            "select [$j[T]]", language="apas")
