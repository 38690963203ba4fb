"""Properties: whatever users do to a running engine, every query equals the reference.

Each property draws a scenario (``scenarios.py``: many cases sharing one run, input out of
order within the lateness bound and stragglers beyond it, streams advancing in different
cycles, idle streams, heartbeats, early ends) and a set of queries covering a part of the
dialect, runs them on a real engine and compares every case with the reference interpreter
(``oracle.py``), and every dead letter with the events the contract calls late. Hypothesis
shrinks a failure (by emptying cases and simplifying the schedule) and keeps it in the
example database under ``tests/.hypothesis``; the failure message shows the failing case as
it was delivered, cycle by cycle.

Profiles (``HYPOTHESIS_PROFILE``): ``ci`` (default) runs a few scenarios of about a hundred
cases each, so every query shape is checked on hundreds of cases; ``slow`` runs more.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle import (
    AGGS,
    APAS_AGGS,
    OVER_AGGS,
    UDAS,
    AggQuery,
    AlignedQuery,
    BandJoinQuery,
    ChunkTopQuery,
    DerivedRelationQuery,
    DerivedStreamQuery,
    DistinctQuery,
    FilterQuery,
    JoinQuery,
    OuterJoinQuery,
    OverQuery,
    ProjectQuery,
    SetOperationQuery,
    TableAggQuery,
    TableFunctionQuery,
    ThreeWayJoinQuery,
    TopNQuery,
    UnionQuery,
    UnionStreamsQuery,
    Win,
    WindowFunctionQuery,
)
from scenarios import Query, Scenario, check_scenario, scenarios, twin_sql

FORMS = ["", "", "ISTREAM", "DSTREAM", "RSTREAM", "CHANGELOG"]

# every property in both layouts of a cycle: one partition (a small cycle: no exchange at
# all) and hash-partitioned (a large cycle); the results must not differ
LAYOUTS = pytest.mark.parametrize("layout", ["single", "partitioned"])

WINDOWS = {
    "RANGE": st.builds(Win, st.just("range"), st.integers(1, 12)),
    "RANGE SLIDE": st.builds(lambda size, slide: Win("slide", size, slide),
                             st.integers(2, 12), st.integers(2, 6)),
    "NOW": st.just(Win("now")),
    "UNBOUNDED": st.just(Win("unbounded")),
    "ROWS": st.builds(lambda n: Win("rows", n), st.integers(1, 3)),
    "PARTITION BY ROWS": st.builds(lambda n, by_k: Win("rows", n, partition=("ex", "k")[:1 + by_k]),
                                   st.integers(1, 3), st.booleans()),
    "CUT": st.builds(lambda d: Win("cut", d, 1), st.integers(2, 10)),
    "CUT WINDOW n CHUNKS": st.builds(lambda d, n: Win("cut", d, n), st.integers(2, 10),
                                     st.integers(2, 3)),
    "CUT EVERY n ROWS": st.builds(lambda n, m: Win("cutrows", n, m), st.integers(1, 4),
                                  st.integers(1, 3)),
    "CUT ON key": st.builds(lambda m, keys: Win("cutkey", 0, m, partition=keys),
                            st.integers(1, 3), st.sampled_from([("k",), ("ex", "k")])),
    "SESSION": st.builds(lambda gap: Win("session", gap), st.integers(1, 4)),
    "PARTITION BY SESSION": st.builds(
        lambda gap, by_k: Win("session", gap, partition=("ex", "k")[:1 + by_k]),
        st.integers(1, 5), st.booleans()),
}
any_window = st.one_of(*WINDOWS.values())
# windows whose elements' ends are known on arrival: the joins that can shed
timed_windows = st.one_of(*[WINDOWS[k] for k in ("RANGE", "RANGE SLIDE", "NOW", "CUT",
                                                  "CUT WINDOW n CHUNKS")])
shedding_options = st.builds(
    lambda mode, n: f"shedding='{mode}', throttle='1', basic_windows='{n}'",
    st.sampled_from(["adaptive", "random"]), st.integers(1, 6))
shedding_below_one = st.builds(
    lambda mode, n, z: f"shedding='{mode}', throttle='{z}', basic_windows='{n}'",
    st.sampled_from(["adaptive", "random"]), st.integers(1, 6),
    st.sampled_from(["0.2", "0.5", "0.8"]))
# windows within one case (ROWS over all cases would let one case's rows end another's)
case_windows = st.one_of(*[w for kind, w in WINDOWS.items()
                           if kind not in ("ROWS", "CUT EVERY n ROWS", "CUT ON key", "SESSION")])


def agg_query(win: Win, aggs: list[str], form: str | None = None, stream: str = "s",
              calls: tuple[str, ...] = ()) -> st.SearchStrategy[AggQuery]:
    """An aggregate of ``calls`` and up to three of ``aggs`` over ``win``, in ``form`` or
    any form."""
    return st.builds(
        AggQuery, st.just(win),
        st.lists(st.sampled_from(sorted(aggs)), min_size=0 if calls else 1, max_size=3,
                 unique=True).map(lambda more: tuple(dict.fromkeys((*calls, *more)))),
        grouped=st.booleans(), where=st.none() | st.integers(0, 6),
        having=st.none() | st.integers(0, 2),
        agg_form=st.sampled_from(FORMS) if form is None else st.just(form),
        stream=st.just(stream))


def with_twin(draw, queries: dict[str, Query]) -> dict[str, Query]:
    """``queries`` and a twin of one of them: the same query in other words (``twin_sql``),
    which must give the reference's output and share every operator with it.
    """
    candidates = sorted(name for name, q in queries.items() if not q.subset
                        and q.language == "sql" and twin_sql(q.shape.sql()) != q.shape.sql())
    name = draw(st.sampled_from(candidates), label="twin of")
    return {**queries, f"{name}_twin": replace(queries[name], twin_of=name)}


@st.composite
def aggregate_queries(draw) -> dict[str, Query]:
    """One grouped aggregate per window kind, a second over one of those windows (fused
    with it into a family), the CUT or RANGE SLIDE one again over another window of its kind
    (one family over panes of both windows), a user aggregate, and a twin of one of them
    in other words."""
    queries = {}
    wins = {}
    # every output form and every built-in aggregate in every scenario, over windows that
    # differ from scenario to scenario
    forms = draw(st.permutations([*FORMS, "", "", "ISTREAM", "RSTREAM", "", "CHANGELOG"]),
                 label="forms")
    calls = draw(st.permutations(sorted(AGGS)), label="calls")
    for i, (kind, strategy) in enumerate(WINDOWS.items()):
        wins[kind] = draw(strategy)
        shape = draw(agg_query(wins[kind], list(AGGS), forms[i], calls=tuple(calls[i::8])))
        queries[f"agg{i}"] = Query(shape, "aggregate")
    kind = draw(st.sampled_from(sorted(WINDOWS)), label="family window")
    queries["family"] = Query(draw(agg_query(wins[kind], list(AGGS))), "aggregate family")
    # the CUT or RANGE SLIDE query again over another window of its kind, with its own
    # calls and form: one family over panes of a step dividing both windows' steps, each
    # window's rows from them regrouped
    again = draw(st.sampled_from(["CUT", "CUT WINDOW n CHUNKS", "RANGE SLIDE"]),
                 label="window again")
    first = queries[f"agg{list(WINDOWS).index(again)}"].shape
    other_win = draw(st.one_of(WINDOWS["CUT"], WINDOWS["CUT WINDOW n CHUNKS"])
                     if again.startswith("CUT") else WINDOWS["RANGE SLIDE"])
    other = draw(agg_query(other_win, list(AGGS)))
    queries["lengths"] = Query(replace(first, win=other.win, aggs=other.aggs,
                                       agg_form=other.agg_form),
                               "windows of several lengths")
    queries["uda"] = Query(draw(agg_query(draw(case_windows), list(UDAS))), "user aggregate")
    queries["table"] = Query(draw(st.builds(
        TableAggQuery, case_windows,
        st.lists(st.sampled_from(sorted(AGGS)), min_size=1, max_size=3, unique=True).map(tuple),
        by_key=st.booleans(), where=st.none() | st.integers(0, 6),
        agg_form=st.sampled_from(FORMS))), "aggregate of a join with a table")
    return with_twin(draw, queries)


@pytest.mark.slow
@LAYOUTS
@given(scenario=scenarios(("s",), cases=80), queries=aggregate_queries())
def test_aggregates_over_every_window(spark, layout: str, scenario: Scenario,
        queries: dict[str, Query]):
    check_scenario(spark, scenario, queries, udas=True, layout=layout)


@st.composite
def two_stream_queries(draw) -> dict[str, Query]:
    """Joins (shedding at z = 1, equi, theta, band, self), unions of relations and of
    streams, a raw-stream filter, a projection, a derived stream and a derived relation read
    by two queries; and a join shedding below z = 1, whose records must be whole pairs of
    the join (some of them); and a twin of one of them in other words."""
    totals = draw(case_windows, label="totals window")
    # every output form over a join in every scenario (interval joins: ISTREAM and
    # RSTREAM read their changes and segments differently from the interval records)
    forms = draw(st.permutations(["", "ISTREAM", "DSTREAM", "RSTREAM", "CHANGELOG"]),
                 label="join forms")
    shapes = {
        # the whole shedding machinery (sub-windows, a sample, recorded shares) at z = 1;
        # created first: a window another query already runs is shared, not shed
        "shedding join": JoinQuery(draw(timed_windows), draw(timed_windows),
                                   theta=draw(st.booleans()), join_form=forms[4],
                                   shedding=draw(shedding_options)),
        "equi": JoinQuery(draw(case_windows), draw(case_windows), theta=False,
                          join_form=forms[0]),
        "theta": JoinQuery(draw(case_windows), draw(case_windows), theta=True,
                           join_form=forms[1]),
        "band": BandJoinQuery(draw(case_windows), draw(case_windows), join_form=forms[2]),
        "self join": JoinQuery(draw(case_windows), draw(case_windows), theta=True,
                               streams=("s", "s"), join_form=forms[3]),
        "union": UnionQuery(draw(case_windows), draw(case_windows), draw(st.integers(0, 6))),
        "union streams": UnionStreamsQuery(draw(st.integers(0, 6))),
        "filter": FilterQuery(draw(st.integers(0, 8)), stream="s2"),
        "project": ProjectQuery(draw(case_windows), draw(st.integers(0, 6)),
                                draw(st.sampled_from(FORMS)), stream="s2"),
        "derived stream": DerivedStreamQuery("d1", draw(st.integers(0, 9)), draw(case_windows)),
        "derived relation join": DerivedRelationQuery("tot1", totals, draw(case_windows)),
        "derived relation filter": DerivedRelationQuery("tot1", totals, None),
        "three way join": ThreeWayJoinQuery(draw(timed_windows), draw(timed_windows),
                                            draw(timed_windows), draw(st.booleans()),
                                            join_form=draw(st.sampled_from(FORMS))),
    }
    queries = {name.replace(" ", "_"): Query(shape, name) for name, shape in shapes.items()}
    below = JoinQuery(draw(timed_windows), draw(timed_windows), theta=draw(st.booleans()),
                      shedding=draw(shedding_below_one))
    three = ThreeWayJoinQuery(draw(timed_windows), draw(timed_windows), draw(timed_windows),
                              draw(st.booleans()), shedding=draw(shedding_below_one))
    # first too: their windows are not shared
    return with_twin(draw, {
        "shedding_below_one": Query(below, "shedding join below z = 1", subset=True),
        "three_way_shedding": Query(three, "three-way join shedding below z = 1",
                                    subset=True),
        **queries})


@st.composite
def keyed_queries(draw, key: tuple[str, ...]) -> dict[str, Query]:
    """Queries over a keyed stream ``ks`` (rows replaced by their key's next row, closed by
    deletes) and an append stream ``s2``: two aggregates (every built-in call between
    them), a projection, a join of the keyed stream with a windowed stream (on a drawn
    side), a self join and a union with a windowed stream, in drawn output forms."""
    keyed = Win("keyed", partition=key)
    forms = draw(st.permutations(FORMS), label="forms")
    calls = draw(st.permutations(sorted(AGGS)), label="calls")
    queries = {f"kagg{i}": Query(draw(agg_query(keyed, list(AGGS), forms[i], stream="ks",
                                                calls=tuple(calls[i::2]))),
                                 "keyed stream: aggregate")
               for i in range(2)}
    other = draw(case_windows, label="window of s2")
    wins, streams = ((keyed, other), ("ks", "s2"))
    if draw(st.booleans(), label="keyed stream on the right"):
        wins, streams = ((other, keyed), ("s2", "ks"))
    shapes = {
        "project": ProjectQuery(keyed, draw(st.integers(0, 6)), forms[2], stream="ks"),
        "join with a windowed stream": JoinQuery(*wins, theta=draw(st.booleans()),
                                                 streams=streams, join_form=forms[3]),
        "self join": BandJoinQuery(keyed, keyed, streams=("ks", "ks"), join_form=forms[4]),
        "union with a windowed stream": UnionQuery(keyed, draw(case_windows),
                                                   draw(st.integers(0, 6)),
                                                   streams=("ks", "s2")),
    }
    queries |= {f"k_{name.replace(' ', '_')}": Query(shape, f"keyed stream: {name}")
                for name, shape in shapes.items()}
    return queries


@pytest.mark.slow
@LAYOUTS
@given(data=st.data())
def test_keyed_streams_in_aggregates_and_joins(spark, layout, data):
    """A keyed stream's rows, replaced and deleted, arrive out of order within the lateness
    and in cycles cut anywhere; aggregates and joins over it equal the reference."""
    scenario = data.draw(scenarios(("ks", "s2"), cases=100, max_cycles=6, keyed=("ks",)),
                         label="scenario")
    queries = data.draw(keyed_queries(scenario.streams["ks"].key), label="queries")
    check_scenario(spark, scenario, queries, layout=layout)


@pytest.mark.slow
@LAYOUTS
@given(scenario=scenarios(("s", "s2"), cases=90), queries=two_stream_queries())
def test_joins_unions_and_derived_streams(spark, layout: str, scenario: Scenario,
        queries: dict[str, Query]):
    check_scenario(spark, scenario, queries, layout=layout)


def same_aggregate(a: AggQuery, b: AggQuery) -> bool:
    """Whether two queries compute the same aggregate (their output forms aside). A HAVING
    is a filter above the aggregate: it changes the aggregate only by a count(*) of its own
    when the SELECT list has none, whatever its bound (``HAVING count(*) > 0`` and
    ``> 1`` read the same count).
    """
    calls_alike = (a.having is None) == (b.having is None) or "count(*)" in a.aggs
    return calls_alike and (a.win, a.aggs, a.grouped, a.where) == (b.win, b.aggs, b.grouped,
                                                                   b.where)


@st.composite
def late_queries(draw, cycles: int) -> dict[str, Query]:
    """Queries from the start, and queries added later: the same query (shares all of it),
    another aggregate over its window (a new member of its family), one that needs the
    window's elements (the early ones may have none, computed from panes), a HAVING over its
    aggregate, another output form of it, and an aggregate over a window no one else
    computes (it sees only the events from its start on)."""
    win = draw(any_window, label="shared window")
    early = [draw(agg_query(win, list(AGGS)).filter(lambda q: q.form == "")) for _ in range(2)]
    base = early[0]
    start = draw(st.integers(1, cycles - 1), label="late start")
    fresh_win = draw(any_window.filter(lambda w: w != win), label="fresh window")
    late = {
        "same": (base, "the same query"),
        "member": (draw(agg_query(win, list(AGGS))), "another aggregate over its window"),
        # computed from the window's elements even where the early ones use panes
        "elements": (draw(agg_query(win, ["count(DISTINCT v)", "count(DISTINCT v % 3)"])),
                     "an aggregate over its window that needs its elements"),
        "having": (AggQuery(win, base.aggs, base.grouped, base.where, having=1),
                   "a HAVING above its aggregate"),
        "form": (AggQuery(win, base.aggs, base.grouped, base.where,
                          agg_form=draw(st.sampled_from(FORMS[2:]))),
                 "another output form of its aggregate"),
    }
    queries = {f"early{i}": Query(q, "sharing: from the start") for i, q in enumerate(early)}
    for name, (shape, what) in late.items():
        # a window's contents are its live elements; an UNBOUNDED window keeps none, so
        # above it only an aggregate that already runs starts from what it holds
        shared = win.kind != "unbounded" or any(same_aggregate(shape, q) for q in early)
        queries[name] = Query(shape, f"sharing: late, {what}", start, shared=shared)
    queries["fresh"] = Query(draw(agg_query(fresh_win, list(AGGS))),
                             "sharing: late, over a window no one else computes", start)
    return queries


@pytest.mark.slow
@LAYOUTS
@given(data=st.data())
def test_late_queries_start_from_shared_state(spark, layout, data):
    scenario = data.draw(scenarios(("s",), cases=120), label="scenario")
    # submitted while the stream still delivers, so there is state to start from
    queries = data.draw(late_queries(max(2, len(scenario.streams["s"].batches))),
                        label="queries")
    check_scenario(spark, scenario, queries, layout=layout)


# windows the StreamAPAS language has (window.range, .now, .unbounded, .rows)
apas_windows = st.one_of(*[WINDOWS[k] for k in ("RANGE", "RANGE SLIDE", "NOW", "UNBOUNDED")])


@st.composite
def apas_queries(draw) -> dict[str, Query]:
    """Queries in the StreamAPAS language: grouped and global aggregates (a HAVING as a
    filter step over an aggregate step), an equi and a theta join, a union of two windowed
    streams (util.union) and a raw-stream filter; next to an aggregate and a join in SQL
    drawn on their own, so the two languages meet shared and unshared operators."""
    calls = draw(st.permutations(sorted(APAS_AGGS)), label="calls")

    def aggregate(i: int) -> st.SearchStrategy[AggQuery]:
        return st.builds(AggQuery, apas_windows, st.just(tuple(calls[2 * i:2 * i + 2])),
                         grouped=st.booleans(), where=st.none() | st.integers(0, 6),
                         having=st.none() | st.integers(0, 2),
                         stream=st.sampled_from(["s", "s2"]))

    queries = {f"apas_agg{i}": Query(draw(aggregate(i)), "aggregate", language="apas")
               for i in range(3)}
    shapes = {
        "equi join": JoinQuery(draw(apas_windows), draw(apas_windows), theta=False),
        "theta join": JoinQuery(draw(apas_windows), draw(apas_windows), theta=True),
        "union": UnionQuery(draw(apas_windows), draw(apas_windows), draw(st.integers(0, 6))),
        "filter": FilterQuery(draw(st.integers(0, 8)), stream="s2"),
    }
    queries |= {f"apas_{name.replace(' ', '_')}": Query(shape, name, language="apas")
                for name, shape in shapes.items()}
    queries["sql_agg"] = Query(draw(aggregate(0)), "aggregate")
    queries["sql_join"] = Query(JoinQuery(draw(apas_windows), draw(apas_windows),
                                          theta=draw(st.booleans())), "join")
    return queries


@pytest.mark.slow
@LAYOUTS
@given(scenario=scenarios(("s", "s2"), cases=80), queries=apas_queries())
def test_apas_queries_next_to_sql(spark, layout: str, scenario: Scenario,
        queries: dict[str, Query]):
    check_scenario(spark, scenario, queries, layout=layout)


@st.composite
def relational_queries(draw) -> dict[str, Query]:
    """What a Flink or Spark SQL user expects beyond inner joins: LEFT, RIGHT, FULL, SEMI
    and ANTI joins of windowed streams (equi and theta, a WHERE above some), SELECT
    DISTINCT, UNION, INTERSECT and EXCEPT (ALL or not), Top-N as ORDER BY ... LIMIT and as
    ranking functions (over rows or over counts), in drawn output forms; and a twin of one
    of them in other words."""
    forms = draw(st.permutations([*FORMS, *FORMS, "", ""]), label="forms")
    queries = {}
    for i, how in enumerate(["LEFT", "RIGHT", "FULL", "SEMI", "ANTI"]):
        shape = OuterJoinQuery(draw(case_windows), draw(case_windows), how,
                               theta=draw(st.booleans()), where=draw(st.booleans()),
                               join_form=forms[i])
        queries[f"{how.lower()}_join"] = Query(shape, f"{how} JOIN")
    queries["distinct"] = Query(DistinctQuery(draw(any_window), forms[5]), "SELECT DISTINCT")
    for i, op in enumerate(["UNION", "INTERSECT", "EXCEPT"]):
        shape = SetOperationQuery(draw(case_windows), draw(case_windows), op,
                                  every=op != "UNION" and draw(st.booleans()),
                                  join_form=forms[6 + i])
        queries[f"set_{op.lower()}"] = Query(shape, op)
    for i, kind in enumerate(["LIMIT", "ROW_NUMBER", "RANK", "DENSE_RANK"]):
        shape = TopNQuery(draw(any_window if kind != "LIMIT" else case_windows), kind,
                          draw(st.integers(1, 3)), desc=draw(st.booleans()),
                          by_k=draw(st.booleans()), counts=kind != "LIMIT" and draw(
                              st.booleans()), agg_form=forms[9 + i])
        queries[f"top_{kind.lower()}"] = Query(shape, f"Top-N {kind}")
    return with_twin(draw, queries)


@pytest.mark.slow
@LAYOUTS
@given(scenario=scenarios(("s", "s2"), cases=80), queries=relational_queries())
def test_outer_joins_distinct_top_n(spark, layout: str, scenario: Scenario,
        queries: dict[str, Query]):
    check_scenario(spark, scenario, queries, layout=layout)


@st.composite
def window_function_queries(draw) -> dict[str, Query]:
    """Flink's TUMBLE, HOP, CUMULATE and SESSION and Spark's window() and
    session_window(), each over lengths drawn small beside the event times (0 .. 30), so
    events fall on window edges (and exactly a gap apart) often; and SQL's OVER window,
    whose lower end (both ends are in) falls on other events often.
    """
    queries = {}
    for kind in ("TUMBLE", "HOP", "CUMULATE", "SESSION", "window()", "session_window()"):
        step = draw(st.integers(1, 6), label=f"{kind} step")
        size = step * (1 if kind in ("TUMBLE", "SESSION", "session_window()")
                       else draw(st.integers(1, 4)))
        session = "SESSION" in kind.upper()
        shape = draw(st.builds(
            WindowFunctionQuery,
            st.just("SESSION" if session else "HOP" if kind == "window()" else kind),
            st.just(step), st.just(size),
            st.lists(st.sampled_from(sorted(AGGS)), min_size=1, max_size=3,
                     unique=True).map(tuple),
            grouped=st.booleans(),
            where=st.none() if session else st.none() | st.integers(0, 6),
            having=st.none() if session else st.none() | st.integers(0, 2),
            spark=st.just(kind.endswith("()"))))
        queries[f"wf_{kind.strip('()').lower()}"] = Query(shape, f"window function {kind}")
    for i in range(2):  # SQL's OVER window: each event with its partition's last events
        shape = draw(st.builds(
            OverQuery, st.integers(1, 12),
            st.lists(st.sampled_from(OVER_AGGS), min_size=1, max_size=3,
                     unique=True).map(tuple),
            grouped=st.booleans(), where=st.none() | st.integers(0, 6)))
        queries[f"over{i}"] = Query(shape, "OVER window")
    return queries


@pytest.mark.slow
@given(scenario=scenarios(("s",), cases=80), queries=window_function_queries())
def test_window_functions_give_flinks_and_sparks_windows(spark, scenario, queries):
    check_scenario(spark, scenario, queries)


@st.composite
def chunk_top_queries(draw) -> dict[str, Query]:
    """Each chunk's rows with their chunk's highest v (NEXMark q7's shape) or with the
    highest v of another stream's chunk (q8's: the streams advance in their own cycles),
    per case or per case and key, with and without a further condition, in every form.
    """
    queries = {}
    # the first query makes the stream run: it is the ChunkJoin, the second (the stream
    # running by then) the general join, each drawn over both variants
    variants = draw(st.permutations([(False, False), (True, True), (True, False),
                                     (False, True)]), label="variants")[:2]
    for i, (per_key, theta) in enumerate(variants):
        by = draw(st.integers(2, 8), label="chunk length")
        form = draw(st.sampled_from(FORMS), label="form")
        of = draw(st.sampled_from(["s", "s2"]), label="aggregate of")
        shape = ChunkTopQuery(f"top{i}", by, per_key, theta, form, of)
        queries[f"chunk_top{i}"] = Query(shape, "join of chunks with their aggregate")
    return queries


@pytest.mark.slow
@given(scenario=scenarios(("s", "s2"), cases=80), queries=chunk_top_queries())
def test_joins_of_chunks_with_their_aggregate(spark, scenario, queries):
    check_scenario(spark, scenario, queries)


@st.composite
def table_function_queries(draw) -> dict[str, Query]:
    """A table function with state over the stream as it is (each instant a chunk) and over
    chunks cut by time, by count and by key, per case or per case and key.
    """
    chunk_windows = st.one_of(
        st.none(), WINDOWS["CUT"],
        st.builds(lambda n: Win("cutrows", n, 1), st.integers(1, 4)),
        st.builds(lambda keys: Win("cutkey", 0, 1, partition=keys),
                  st.sampled_from([("k",), ("ex", "k")])))
    return {f"fold{i}": Query(TableFunctionQuery(draw(chunk_windows, label="chunks"),
                                                 draw(st.booleans(), label="per key"),
                                                 draw(st.integers(2, 9), label="base")),
                              "table function")
            for i in range(3)}


@LAYOUTS
@given(scenario=scenarios(("s",), cases=60), queries=table_function_queries())
def test_table_functions_over_chunks(spark, layout, scenario, queries):
    check_scenario(spark, scenario, queries, layout=layout)


#: windows whose aggregates change only at multiples of a step
GRID_WINDOWS = st.one_of(
    st.builds(lambda slide, n: Win("slide", slide * n, slide), st.integers(2, 5),
              st.integers(1, 3)),
    st.builds(lambda by, n: Win("cut", by, n), st.integers(2, 6), st.integers(1, 2)))


@st.composite
def aligned_queries(draw) -> dict[str, Query]:
    """Queries over queries on a grid of instants: NEXMark q5's counts joined with their
    maximum or ranked, an aggregate of an aggregate, a join of two streams' aggregates of every
    kind, in every form.
    """
    queries = {}
    for i in range(2):
        kind = draw(st.sampled_from(["top", "topn", "agg", "INNER", "LEFT", "RIGHT", "FULL", "SEMI",
                                     "ANTI"]), label="kind")
        win = draw(GRID_WINDOWS, label="window")
        # on the same step (an aligned join) or on any (the general one)
        same_step = (Win("slide", win.slide * draw(st.integers(1, 3)), win.slide)
                     if win.kind == "slide" else Win("cut", win.size, draw(st.integers(1, 2))))
        shape = AlignedQuery(f"c{i}", win, kind, draw(st.sampled_from(FORMS), label="form"),
                             draw(st.just(same_step) | GRID_WINDOWS,
                                  label="window of s2"))
        queries[f"aligned{i}"] = Query(shape, "query over queries")
    return queries


@pytest.mark.slow
@LAYOUTS
@given(scenario=scenarios(("s", "s2"), cases=80), queries=aligned_queries())
def test_queries_over_queries(spark, layout, scenario, queries):
    check_scenario(spark, scenario, queries, layout=layout)
