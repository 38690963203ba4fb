"""The cycle's frame helpers: an n-ary union by name gives what chained ``unionByName``
calls give (names matched, types widened, missing columns padded or named); a view bound
again reads its new frame, and frames analysed before keep reading the old one; a kept
frame's order holds wherever a plan reads it.
"""

from __future__ import annotations

import gc

import pytest
from pyspark.errors import AnalysisException

from sparkcq import Engine
from sparkcq.runtime.frames import Runtime, SqlViews, col, rebind_view, union_by_name


def test_a_union_by_name_of_many_frames_matches_names_and_widens_types(spark):
    a = spark.range(3).selectExpr("id AS x", "'a' AS s")
    b = spark.range(2).selectExpr("'b' AS s", "id * 10 AS x")  # other column order
    c = spark.range(1).selectExpr("CAST(id + 7 AS INT) AS x", "'c' AS s")  # INT, not BIGINT
    same = union_by_name([a, b, a])
    assert sorted(tuple(r) for r in same.collect()) == [
        (0, "a"), (0, "a"), (0, "b"), (1, "a"), (1, "a"), (2, "a"), (2, "a"), (10, "b")]
    widened = union_by_name([a, b, c])
    assert dict(widened.dtypes)["x"] == "bigint"
    assert sorted(r.x for r in widened.collect()) == [0, 0, 1, 2, 7, 10]


def test_a_union_with_missing_columns_pads_them_or_names_what_is_missing(spark):
    a = spark.range(2).selectExpr("id AS x")
    b = spark.range(1).selectExpr("id + 5 AS y")
    padded = union_by_name([a, b, a], allow_missing=True)
    assert sorted((r.x, r.y) for r in padded.collect() if r.y is None) == [
        (0, None), (0, None), (1, None), (1, None)]
    assert [(r.x, r.y) for r in padded.collect() if r.y is not None] == [(None, 5)]
    with pytest.raises(AnalysisException, match='"x"'):
        union_by_name([a, b, a])


def test_a_view_bound_again_reads_its_new_frame_and_older_frames_keep_theirs(spark):
    name = "sparkcq_test_rebound_view"
    rebind_view(name, spark.range(3).selectExpr("id AS x", "'first' AS s"))
    first = spark.sql(f"SELECT x, s FROM {name}")  # analysed now: bound to the first frame
    rebind_view(name, spark.range(10, 12).selectExpr("id AS x", "'second' AS s"))
    second = spark.sql(f"SELECT x, s FROM {name}")
    assert sorted(tuple(r) for r in first.collect()) == [(0, "first"), (1, "first"),
                                                         (2, "first")]
    assert sorted(tuple(r) for r in second.collect()) == [(10, "second"), (11, "second")]
    # another schema: bound again by Spark's own command
    rebind_view(name, spark.range(1).selectExpr("'third' AS t"))
    assert [tuple(r) for r in spark.sql(f"SELECT * FROM {name}").collect()] == [("third",)]
    rebind_view(name, spark.range(2).selectExpr("'fourth' AS t"))
    assert [tuple(r) for r in spark.sql(f"SELECT * FROM {name}").collect()] == [
        ("fourth",), ("fourth",)]
    spark.catalog.dropTempView(name)


def test_a_dropped_querys_views_leave_the_session_with_their_frames(spark):
    """An operator's views hold its last frames' plans in the JVM: once the query that
    used it is dropped and the operator collected, the next analysed text drops them."""
    def views() -> set[str]:
        return {t.name for t in spark.catalog.listTables() if t.isTemporary
                and t.name.startswith("sparkcq_aggregate_")}

    eng = Engine(spark=spark)
    eng.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
    eng.execute("CREATE QUERY keep AS SELECT k, count(*) AS n FROM s [RANGE 4] GROUP BY k")
    before = views()
    eng.execute("CREATE QUERY gone AS SELECT k, max(v) AS m FROM s [RANGE 3] GROUP BY k")
    for i in range(2):
        eng.push("s", [{"k": "a", "v": i, "t": i}])
        eng.run_cycle()
    theirs = views() - before
    assert theirs, "the aggregate of 'gone' bound views of its own"
    bound = dict(SqlViews._bound)
    eng.execute("DROP QUERY gone")
    gc.collect()
    eng.push("s", [{"k": "a", "v": 5, "t": 5}])
    eng.run_cycle()
    assert not views() & theirs
    assert not set(SqlViews._bound) & theirs
    assert {n for n in bound if n in SqlViews._bound} - theirs  # the others' stay bound
    assert eng.results("keep")["n"].tolist()[-1:] == [1]
    eng.stop()


def test_a_kept_frame_sorted_under_a_subquerys_name_is_read_sorted_by_every_reading(spark):
    """A frame sorted by ``c.k`` (a subquery's column) and kept for the cycle is merge
    joined without a sort, also where one plan reads it several times (Spark renames the
    columns of every reading but the first): the joins' rows are those of the frame.
    """
    rt = Runtime(spark)
    rt.run_in_one_partition(True)
    try:
        views = SqlViews(spark, "kept")
        made = spark.range(40).selectExpr("id % 7 AS k", "id AS v")
        kept = rt.cache_for_cycle(views.sql(
            "SELECT * FROM (SELECT /*+ COALESCE(1) */ * FROM {made}) AS c SORT BY k",
            made=made), ordered=True)
        other = rt.cache_for_cycle(views.sql(
            "SELECT * FROM (SELECT /*+ COALESCE(1) */ id AS j FROM {few}) AS d SORT BY j",
            few=spark.range(3)), ordered=True)
        texts = [f"SELECT /*+ MERGE(r) */ l.v, r.j FROM {{kept}} AS l JOIN {{other}} AS r "
                 f"ON l.k = r.j AND l.v {op} 20" for op in ("<", ">=")]
        joined = views.sql_union(texts, kept=kept, other=other)
        plan = joined._jdf.queryExecution().executedPlan().toString()
        assert plan.count("SortMergeJoin") == 2
        assert "Sort [" not in plan
        assert sorted(r.v for r in joined.collect()) == [v for v in range(40) if v % 7 < 3]
    finally:
        rt.end_cycle()  # frees the frames, puts the session's settings back


def test_a_union_of_kept_runs_stays_partitioned_when_one_is_read_twice(spark):
    """Runs hash-partitioned by a window over a subquery (``_rows``) and kept under another
    subquery's name (``_p``), as coalescing keeps open layers: a plan reading their union
    and one of them again (Spark renames that reading's columns) shuffles neither the union
    nor the run, and its rows are the runs'.
    """
    rt = Runtime(spark, partitions=3)
    rt.run_in_one_partition(False)
    try:
        views = SqlViews(spark, "runs")
        text = ("SELECT k, v FROM (SELECT k, v, row_number() OVER (PARTITION BY k ORDER BY v) "
                "AS n FROM (SELECT id % 7 AS k, id AS v FROM {made}) AS _rows) AS _p WHERE n > 0")
        runs = [rt.checkpoint(rt.partition_by(views.sql(text, made=spark.range(lo, lo + 30)),
                                              col("k")))
                for lo in (0, 30, 60)]
        joined = views.sql(
            "SELECT /*+ SHUFFLE_HASH(t) */ l.k, l.v FROM {live} AS l LEFT SEMI JOIN "
            "(SELECT k FROM {again} WHERE v < 33) AS t ON l.k = t.k",  # k of 30, 31, 32
            live=union_by_name(runs), again=runs[1])
        plan = joined._jdf.queryExecution().executedPlan().toString()
        assert "Exchange" not in plan
        assert sorted(r.v for r in joined.collect()) == [v for v in range(90)
                                                        if v % 7 in (2, 3, 4)]
    finally:
        rt.end_cycle()


def task_partition_bytes(df) -> int:
    """The most bytes one of ``df``'s partitions takes in a task (Java serialised, as Spark
    sends it).
    """
    utils = df.sparkSession._jvm.org.apache.spark.util.Utils
    return max(len(utils.serialize(p)) for p in df._jdf.queryExecution().toRdd().partitions())


def test_a_frame_kept_for_many_cycles_sends_its_tasks_nothing_of_the_cycles_before(spark):
    """Each cycle keeps the union of the frame the cycle before kept and three new rows,
    coalesced to one partition, as a sliced window merges its runs in a small cycle: a
    task reading it after sixty cycles gets a partition as small as after five (before,
    each held the partitions of every cycle before it, until a task was too deep for
    Java's serialisation), and the frame holds every cycle's rows.
    """
    rt = Runtime(spark)
    rt.run_in_one_partition(True)
    kept = None
    sizes = {}
    for c in range(60):
        new = spark.range(3 * c, 3 * c + 3)
        merged = rt.cache_for_cycle(new if kept is None else union_by_name([kept, new]))
        rt.keep_after_cycle(merged)
        if kept is not None:
            rt.release_at_cycle_end(kept)
        kept = merged
        rt.commit_cycle({"rows": kept})
        rt.end_cycle()
        sizes[c] = task_partition_bytes(kept)
    assert sizes[59] <= sizes[4] + 64, sizes
    assert sorted(r.id for r in kept.collect()) == list(range(180))
    rt.free([kept])
