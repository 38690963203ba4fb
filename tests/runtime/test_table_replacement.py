"""A table replaced while queries read it: a temporal relation whose old rows hold before
the instant R where each join switches, and whose new rows hold from R.

Input (stream s, numeric time, [RANGE 10]):
    before the replacement: a:1@1  d:8@2  b:2@3  c:4@4      watermark 5
    after it:               a:3@5  b:5@6  c:6@7             watermark 8, then the end
Table h (k -> r):  version 0: a -> north, b -> south, d -> north
                   version 1: a -> east,  c -> west,  d -> north   (b removed, c added)
Table g (r -> zone): north 1, south 2, east 3, west 4 (never replaced)

The replacement is registered between the cycle that ends at watermark 5 and the next, so
every join switches at R = 5. Elements of s: a1 [1,11), d8 [2,12), b2 [3,13), c4 [4,14),
a3 [5,15), b5 [6,16), c6 [7,17). Joined with h (hand-computed):
    a1 north [1,5) then east [5,11)     split at R
    d8 north [2,12)                     unchanged row: one element across R
    b2 south [3,5)                      b removed: closed at R
    c4 west  [5,14)                     c added: opened at R
    a3 east [5,15) (an event at R itself), c6 west [7,17); b5 meets no row
"""

from __future__ import annotations

import pandas as pd
import pytest

from sparkcq import Engine
from sparkcq.errors import CatalogError, ExecutionError, ScriptError
from sparkcq.plan.nodes import TableScan
from sparkcq.runtime.operators.join import JoinOperator
from sparkcq.runtime.operators.table import TableOperator

INF = None
BEFORE = [dict(k="a", v=1, t=1), dict(k="d", v=8, t=2), dict(k="b", v=2, t=3),
          dict(k="c", v=4, t=4)]
AFTER = [dict(k="a", v=3, t=5), dict(k="b", v=5, t=6), dict(k="c", v=6, t=7)]
H0 = [{"k": "a", "r": "north"}, {"k": "b", "r": "south"}, {"k": "d", "r": "north"}]
H1 = [{"k": "a", "r": "east"}, {"k": "c", "r": "west"}, {"k": "d", "r": "north"}]
G = [{"r": "north", "zone": 1}, {"r": "south", "zone": 2}, {"r": "east", "zone": 3},
     {"r": "west", "zone": 4}]

JOIN = "SELECT s.k AS k, h.r AS r, s.v AS v FROM s [RANGE 10] JOIN h ON s.k = h.k"
QUERIES = {
    "joined": JOIN,
    "per_region": ("SELECT h.r AS r, sum(s.v) AS total FROM s [RANGE 10] JOIN h "
                   "ON s.k = h.k GROUP BY h.r"),
    "changes": f"CHANGELOG {JOIN}",
    "entering": f"ISTREAM {JOIN}",
    "leaving": f"DSTREAM {JOIN}",
    # the static side a join of two tables: h is replaced under it
    "zoned": ("SELECT s.k AS k, g.zone AS zone, s.v AS v FROM h JOIN g ON h.r = g.r "
              "JOIN s [RANGE 10] ON s.k = h.k"),
    # outer and anti joins keep the stream's rows: a row's padding switches too
    "left": "SELECT s.k AS k, h.r AS r, s.v AS v FROM s [RANGE 10] LEFT JOIN h ON s.k = h.k",
    "unmatched": "SELECT k, v FROM s [RANGE 10] LEFT ANTI JOIN h ON s.k = h.k",
    # h twice: the outer join's relation is the inner join, which switches too
    "twice": ("SELECT s.k AS k, x.r AS r1, y.r AS r2, s.v AS v FROM s [RANGE 10] "
              "JOIN h AS x ON s.k = x.k JOIN h AS y ON x.k = y.k"),
}

JOINED = [
    ("a", "east", 1, 5, 11), ("a", "east", 3, 5, 15), ("a", "north", 1, 1, 5),
    ("b", "south", 2, 3, 5), ("c", "west", 4, 5, 14), ("c", "west", 6, 7, 17),
    ("d", "north", 8, 2, 12),
]


def rows(frame: pd.DataFrame, *cols: str, time: tuple[str, ...] = ("_ts", "_te")) -> list:
    """Sorted tuples of the given columns plus the time columns; NaN/None -> None."""
    out = []
    for rec in frame[[*cols, *time]].itertuples(index=False):
        out.append(tuple(None if x is None or pd.isna(x)
                         else int(x) if isinstance(x, float) and x.is_integer() else x
                         for x in rec))
    return sorted(out, key=lambda r: tuple((v is None, v) for v in r))


def start(spark, queries: dict[str, str] = QUERIES) -> Engine:  # noqa: ANN001
    eng = Engine(spark=spark)
    eng.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
    eng.register_table("h", H0)
    eng.register_table("g", G)
    for name, sql in queries.items():
        eng.execute(f"CREATE QUERY {name} AS {sql}")
    return eng


# The same input cut into cycles two ways; in both, the replacement comes right after the
# cycle that ends at watermark 5 (in the second, a cycle in which s stays at 5 follows it:
# the joins hold their switch until s passes 5).
SPLITS = {
    "two cycles": ([(BEFORE, 5)], [(AFTER, 8)]),
    "small cycles, idle after": ([(BEFORE[:2], 2), (BEFORE[2:3], 3), (BEFORE[3:], 5)],
                                 [([], 5), (AFTER[:2], 6), (AFTER[2:], 8)]),
}


@pytest.fixture(scope="module", params=list(SPLITS))
def results(request, spark):
    before, after = SPLITS[request.param]
    eng = start(spark)
    for events, mark in before:
        eng.push("s", events, watermark=mark)
        eng.run_cycle()
    eng.load_table("h", H1)
    joins = [op for op in eng.plan.ops.values() if isinstance(op, JoinOperator)]
    held = []
    for events, mark in after:
        eng.push("s", events, watermark=mark)
        eng.run_cycle()
        held.append([op.switches.frame.get() is not None for op in joins
                     if hasattr(op, "switches")])
    eng.end_input("s")
    eng.run_until_idle()
    out: dict = {name: eng.results(name) for name in QUERIES}
    out["held"] = held
    out["versions"] = [(r.tables["h"], r.tables["g"]) for r in eng.reports]
    out["cycles before"] = len(before)
    out["log"] = eng.query_log("joined")
    out["explain"] = eng.explain_global()
    return out


def test_old_rows_until_the_switch_new_rows_from_it(results):
    assert rows(results["joined"], "k", "r", "v") == JOINED


def test_a_left_join_pads_from_the_switch_where_a_row_lost_its_match(results):
    # b2 loses south at 5 and is padded from there; c4 is padded until west comes at 5;
    # b5 never meets a row
    assert rows(results["left"], "k", "r", "v") == sorted(
        [*JOINED, ("b", None, 2, 5, 13), ("c", None, 4, 4, 5), ("b", None, 5, 6, 16)],
        key=lambda r: tuple((v is None, v) for v in r))
    assert rows(results["unmatched"], "k", "v") == [("b", 2, 5, 13), ("b", 5, 6, 16),
                                                    ("c", 4, 4, 5)]


def test_an_aggregate_over_the_join(results):
    # north: a1 [1,5), d8 [2,12); south: b2 [3,5); east: a1 [5,11), a3 [5,15);
    # west: c4 [5,14), c6 [7,17)
    assert rows(results["per_region"], "r", "total") == [
        ("east", 3, 11, 15), ("east", 4, 5, 11),
        ("north", 1, 1, 2), ("north", 8, 5, 12), ("north", 9, 2, 5),
        ("south", 2, 3, 5),
        ("west", 4, 5, 7), ("west", 6, 14, 17), ("west", 10, 7, 14),
    ]


def test_the_changelog_moves_only_changed_rows_at_the_switch(results):
    # at 5: a1 north out, a1 east in, b2 out, c4 in (and a3 arrives); d8 north is in both
    assert rows(results["changes"], "k", "r", "v", "_op", time=("_ts",)) == [
        ("a", "east", 1, "+", 5), ("a", "east", 1, "-", 11), ("a", "east", 3, "+", 5),
        ("a", "east", 3, "-", 15), ("a", "north", 1, "+", 1), ("a", "north", 1, "-", 5),
        ("b", "south", 2, "+", 3), ("b", "south", 2, "-", 5), ("c", "west", 4, "+", 5),
        ("c", "west", 4, "-", 14), ("c", "west", 6, "+", 7), ("c", "west", 6, "-", 17),
        ("d", "north", 8, "+", 2), ("d", "north", 8, "-", 12),
    ]


def test_istream_and_dstream_at_the_switch(results):
    assert rows(results["entering"], "k", "r", "v", time=("_ts",)) == [
        ("a", "east", 1, 5), ("a", "east", 3, 5), ("a", "north", 1, 1), ("b", "south", 2, 3),
        ("c", "west", 4, 5), ("c", "west", 6, 7), ("d", "north", 8, 2),
    ]
    assert rows(results["leaving"], "k", "r", "v", time=("_ts",)) == [
        ("a", "east", 1, 11), ("a", "east", 3, 15), ("a", "north", 1, 5), ("b", "south", 2, 5),
        ("c", "west", 4, 14), ("c", "west", 6, 17), ("d", "north", 8, 12),
    ]


def test_a_join_of_tables_switches_as_a_whole(results):
    zones = {"north": 1, "south": 2, "east": 3, "west": 4}
    assert rows(results["zoned"], "k", "zone", "v") == sorted(
        (k, zones[r], v, ts, te) for k, r, v, ts, te in JOINED)


def test_a_join_above_a_switching_join(results):
    assert rows(results["twice"], "k", "r1", "r2", "v") == sorted(
        (k, r, r, v, ts, te) for k, r, v, ts, te in JOINED)


def test_a_switch_waits_while_the_input_stays_at_its_instant(results):
    # with an idle cycle after the replacement every join holds its switch through it (5
    # is not final while s stays at 5: a3 still comes at 5), and emits it in the next; five
    # joins with h: three inner (``twice``'s first join is ``joined``'s, equal in meaning
    # under other aliases: one operator), the left and the anti join
    assert results["held"] in ([[False] * 5], [[True] * 5, [False] * 5, [False] * 5])


def test_the_log_and_explain_say_which_version_from_when(results):
    # each cycle's report: the version of each table it read
    n = results["cycles before"]
    versions = results["versions"]
    assert versions[:n] == [(0, 0)] * n and set(versions[n:]) == {(1, 0)}
    assert any("table 'h' version 1 in effect from 5" in line for line in results["log"])
    assert "TableScan h  [table]" in results["explain"]
    assert "version=1" in results["explain"] and "tables=h v1 from 5" in results["explain"]


def test_a_query_added_after_the_replacement_sees_only_the_new_rows(spark):
    eng = start(spark, {"joined": JOIN})
    eng.push("s", BEFORE, watermark=5)
    eng.run_cycle()
    eng.load_table("h", H1)
    # added before the switch: one shares the running join, one has a join of its own
    eng.execute(f"CREATE QUERY shared AS {JOIN}")
    eng.execute("CREATE QUERY own AS SELECT s.k AS k, h.r AS r, s.v AS v FROM s [RANGE 10] "
                "JOIN h ON s.k = h.k AND s.v < 100")
    eng.push("s", AFTER, watermark=8)
    eng.run_cycle()
    eng.execute("CREATE QUERY later AS SELECT s.k AS k, h.r AS r, s.v AS v "
                "FROM s [RANGE 10] JOIN h ON s.k = h.k AND s.v < 1000")
    eng.end_input("s")
    eng.run_until_idle()
    assert rows(eng.results("joined"), "k", "r", "v") == JOINED
    # started at 5 and at 8: the new rows' matches from there on
    from5 = [("a", "east", 1, 5, 11), ("a", "east", 3, 5, 15), ("c", "west", 4, 5, 14),
             ("c", "west", 6, 7, 17), ("d", "north", 8, 5, 12)]
    assert rows(eng.results("shared"), "k", "r", "v") == from5
    assert rows(eng.results("own"), "k", "r", "v") == from5
    assert rows(eng.results("later"), "k", "r", "v") == [
        ("a", "east", 1, 8, 11), ("a", "east", 3, 8, 15), ("c", "west", 4, 8, 14),
        ("c", "west", 6, 8, 17), ("d", "north", 8, 8, 12)]


def test_a_failed_cycle_does_not_apply_half_a_replacement(spark, monkeypatch):
    eng = start(spark, {"joined": JOIN})
    eng.push("s", BEFORE, watermark=5)
    eng.run_cycle()
    eng.load_table("h", H1)
    eng.push("s", AFTER, watermark=8)
    table = next(op for node, op in eng.plan.ops.items() if isinstance(node, TableScan))
    assert isinstance(table, TableOperator)
    served = table.df
    commit = eng.rt.commit_cycle
    calls = {"n": 0}

    def failing_commit(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls["n"] += 1
        if calls["n"] == 1:  # the cycle's own commit; trying each query alone then succeeds
            msg = "the sink's storage went away"
            raise OSError(msg)
        return commit(*args, **kwargs)

    monkeypatch.setattr(eng.rt, "commit_cycle", failing_commit)
    with pytest.raises(ExecutionError, match="input kept for the next cycle"):
        eng.run_cycle()
    monkeypatch.undo()
    # rolled back as a whole: the old rows served, no switch waiting, nothing logged
    assert table.df is served and table.version == 0
    join = next(op for node, op in eng.plan.ops.items() if hasattr(op, "switches"))
    assert join.switches.frame.get() is None and join.tables == ()
    assert not any("in effect" in line for line in eng.query_log("joined"))
    eng.run_cycle()  # the same cycle again, with the input it kept
    assert table.version == 1
    eng.end_input("s")
    eng.run_until_idle()
    assert rows(eng.results("joined"), "k", "r", "v") == JOINED


def test_replacements_that_queries_could_not_follow_are_refused(spark):
    eng = start(spark, {"joined": JOIN})
    with pytest.raises(CatalogError, match=r"keep its columns \(k STRING, r STRING\), got "
                                           r"\(k STRING, r STRING, x BIGINT\)"):
        eng.register_table("h", pd.DataFrame({"k": ["a"], "r": ["x"], "x": [1]}).pipe(
            eng.spark.createDataFrame))
    with pytest.raises(CatalogError, match="have columns k, region; the table has k, r"):
        eng.load_table("h", [{"k": "a", "region": "x"}])
    # a stream without a window in a join is [UNBOUNDED]: no copy of its rows is kept
    eng.execute("CREATE QUERY everything AS SELECT s.k, h.r FROM s JOIN h ON s.k = h.k")
    eng.push("s", BEFORE, watermark=5)
    eng.run_cycle()
    with pytest.raises(CatalogError, match=r"table 'h' cannot be replaced while query "
                                           r"'everything' runs: .*UNBOUNDED.*drop 'everything'"):
        eng.load_table("h", H1)
    eng.drop("QUERY", "everything")
    # a script whose CREATE TABLE replaced the rows but failed later calls the switch off
    with pytest.raises(ScriptError):
        eng.execute("CREATE TABLE h (k STRING, r STRING);\nCREATE QUERY bad AS SELECT nope FROM s")
    node = next(n for n in eng.plan.ops if isinstance(n, TableScan) and n.name == "h")
    table = eng.plan.ops[node]
    assert isinstance(table, TableOperator) and table.serves(eng.queries.compiled.tables[node])
    assert eng.catalog.tables["h"].version == 0
    eng.load_table("h", H1)
    assert not table.serves(eng.queries.compiled.tables[node])
    eng.push("s", AFTER, watermark=8)
    eng.end_input("s")
    eng.run_until_idle()
    assert rows(eng.results("joined"), "k", "r", "v") == JOINED


# -- aggregates of a chunked stream joined with the table, stream side first ----------------
# (plan/rules/aggregate_before_table_joins.py): duplicate table rows, and a switch inside a
# chunk

# x is under p twice and under q once; z has no row
HG0 = [{"k": "x", "g": "p"}, {"k": "x", "g": "p"}, {"k": "x", "g": "q"}, {"k": "y", "g": "q"}]
HG1 = [{"k": "x", "g": "q"}, {"k": "y", "g": "p"}]
CHUNK_EVENTS = [dict(k="x", v=1, t=1), dict(k="z", v=9, t=2), dict(k="y", v=4, t=3),
                dict(k="x", v=2, t=4), dict(k="x", v=5, t=8)]
GROUPED = ("SELECT h.g AS g, sum(s.v) AS total, count(*) AS n, avg(s.v) AS a, max(s.v) AS hi "
           "FROM s [CUT BY 5] JOIN h ON s.k = h.k GROUP BY h.g")


def start_grouped(spark, table: list[dict]) -> Engine:  # noqa: ANN001
    eng = Engine(spark=spark)
    eng.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
    eng.register_table("h", table)
    eng.execute(f"CREATE QUERY q AS {GROUPED}")
    eng.execute(f"CREATE QUERY snapshots AS RSTREAM {GROUPED}")  # combined per instant
    return eng


@pytest.mark.parametrize("cycles", [[5], [1, 2, 3, 4, 5]], ids=["one cycle", "one per event"])
def test_partial_sums_joined_with_duplicate_table_rows(spark, cycles):
    eng = start_grouped(spark, HG0)
    assert "SlicedAggregate" in eng.explain("q")
    taken = 0
    for n in cycles:
        eng.push("s", CHUNK_EVENTS[taken:n])
        taken = n
        eng.run_cycle()
    eng.end_input("s")
    eng.run_until_idle()
    # chunk [0, 5), valid [5, 10): x1 x2 meet p twice and q once, y4 meets q, z9 nothing;
    # chunk [5, 10), valid [10, 15): x5
    assert rows(eng.results("q"), "g", "total", "n", "a", "hi") == [
        ("p", 6, 4, 1.5, 2, 5, 10), ("p", 10, 2, 5.0, 5, 10, 15),
        ("q", 5, 1, 5.0, 5, 10, 15), ("q", 7, 3, 7 / 3, 4, 5, 10)]
    assert "InstantAggregate" in eng.explain("snapshots")
    assert rows(eng.results("snapshots"), "g", "total", "n", "a", "hi") == [
        ("p", 6, 4, 1.5, 2, 5, 5), ("p", 10, 2, 5.0, 5, 10, 10),
        ("q", 5, 1, 5.0, 5, 10, 10), ("q", 7, 3, 7 / 3, 4, 5, 5)]


def test_a_replaced_table_switches_inside_a_chunk(spark):
    eng = start_grouped(spark, HG0)
    eng.push("s", CHUNK_EVENTS[:4], watermark=5)
    eng.run_cycle()
    eng.push("s", [], watermark=7)
    eng.run_cycle()
    eng.load_table("h", HG1)  # from the join's position, 7: x -> q, y -> p
    eng.push("s", CHUNK_EVENTS[4:], watermark=12)
    eng.run_cycle()
    eng.end_input("s")
    eng.run_until_idle()
    # chunk [0, 5) holds x1 y4 x2 over [5, 10): version 0 until 7, version 1 from 7
    assert rows(eng.results("q"), "g", "total", "n") == [
        ("p", 4, 1, 7, 10), ("p", 6, 4, 5, 7),
        ("q", 3, 2, 7, 10), ("q", 5, 1, 10, 15), ("q", 7, 3, 5, 7)]
    # RSTREAM evaluates at the cuts: 5 before the switch, 10 after it
    assert rows(eng.results("snapshots"), "g", "total", "n") == [
        ("p", 6, 4, 5, 5), ("q", 5, 1, 10, 10), ("q", 7, 3, 5, 5)]
