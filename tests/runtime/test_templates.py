"""An operator's SQL analysed once and re-bound each cycle gives what analysing it afresh
gives: new frames and new bounds in place, whatever the rows; texts a template cannot
stand for (a view read twice, a CTE, a frame of another schema) are analysed as before.
"""

from __future__ import annotations

import pytest

from sparkcq import Engine
from sparkcq.runtime.frames import SqlViews, bound_sql
from sparkcq.runtime.partitioning import SmallCycles
from sparkcq.runtime.templates import forget_shared


def frame(spark, rows: list[tuple[int, int, int]], checkpoint: bool = True):
    """A frame of (k, v, t) rows, cut from its lineage as a cycle's frames are."""
    df = spark.createDataFrame(rows, "k BIGINT, v BIGINT, t BIGINT")
    return df.localCheckpoint(eager=False) if checkpoint else df.where("v IS NOT NULL")


def rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


CYCLES = [
    # (events, state, lo, hi)
    ([(1, 10, 5), (2, 20, 7), (1, 5, 12)], [(1, 100, 0)], 0, 10),
    ([(3, 1, 15), (1, 2, 18)], [(1, 115, 0), (2, 20, 0)], 10, 20),
    ([(2, 7, 21), (2, 8, 29), (4, 1, 30)], [(3, 1, 0)], 20, 30),
    ([], [(9, 9, 0)], 30, 40),
]

TEXT = ("SELECT k, sum(v) AS v, min(t) AS t FROM ("
        "SELECT k, v, t FROM {events} WHERE t >= {lo} AND t < {hi} "
        "UNION ALL SELECT k, v, t FROM {state}) GROUP BY k")


@pytest.mark.parametrize("checkpoint", [True, False], ids=["checkpoints", "lazy frames"])
def test_a_text_re_bound_each_cycle_gives_what_analysing_it_afresh_gives(
        spark, analyses, checkpoint):
    views = SqlViews(spark, "test")
    for events, state, lo, hi in CYCLES:
        text = TEXT.replace("{lo}", bound_sql(lo)).replace("{hi}", bound_sql(hi))
        ev, st = frame(spark, events, checkpoint), frame(spark, state, checkpoint)
        got = views.sql(text, events=ev, state=st)
        ev.createOrReplaceTempView("test_events")
        st.createOrReplaceTempView("test_state")
        want = spark.sql(text.replace("{events}", "test_events")
                         .replace("{state}", "test_state"))
        assert rows(got) == rows(want)
        assert got.schema == want.schema
    # analysed once, with placeholders for the bounds; every later cycle re-bound
    assert len(analyses) == 1
    assert bound_sql(0) not in analyses[0]


def test_a_result_re_bound_is_read_by_later_plans_like_any_frame(spark):
    views = SqlViews(spark, "test")
    totals = []
    for events, state, lo, hi in CYCLES:
        text = TEXT.replace("{lo}", bound_sql(lo)).replace("{hi}", bound_sql(hi))
        got = views.sql(text, events=frame(spark, events), state=frame(spark, state))
        # a self-join of the re-bound frame, built by the DataFrame API (analysed then)
        pairs = got.alias("a").join(got.alias("b"), "k").selectExpr("a.v + b.v AS w")
        totals.append(sorted(r.w for r in pairs.collect()))
    assert totals == [[40, 220], [2, 40, 234], [2, 30], [18]]


def test_texts_a_template_cannot_stand_for_are_analysed_every_time(spark, analyses):
    views = SqlViews(spark, "test")
    self_join = ("SELECT a.k, a.v + b.v AS w FROM {x} a JOIN {x} b ON a.k = b.k "
                 "WHERE a.t < {hi}")
    cte = "WITH c AS (SELECT k, v FROM {x} WHERE t < {hi}) SELECT k, sum(v) AS v FROM c GROUP BY k"
    for events, _state, _lo, hi in CYCLES[:3]:
        x = frame(spark, events)
        got = views.sql(self_join.replace("{hi}", bound_sql(hi)), x=x)
        assert rows(got) == sorted((a, b + d) for a, b, t in events for c, d, _ in events
                                   if a == c and t < hi)
        got = views.sql(cte.replace("{hi}", bound_sql(hi)), x=x)
        sums: dict[int, int] = {}
        for k, v, t in events:
            if t < hi:
                sums[k] = sums.get(k, 0) + v
        assert rows(got) == sorted(sums.items())
    # each text analysed for its template (refused), then once a cycle
    assert len(analyses) == 2 + 2 * 3


def test_a_frame_of_another_schema_takes_a_new_analysis(spark, analyses):
    views = SqlViews(spark, "test")
    text = "SELECT k, v * 2 AS w FROM {x}"
    longs = frame(spark, [(1, 2, 3)])
    doubles = spark.createDataFrame([(1, 2.5, 3)], "k BIGINT, v DOUBLE, t BIGINT")
    assert rows(views.sql(text, x=longs)) == [(1, 4)]
    assert rows(views.sql(text, x=doubles)) == [(1, 5.0)]
    assert rows(views.sql(text, x=frame(spark, [(5, 6, 7)]))) == [(5, 12)]
    # the last frame has the first one's schema: its template is re-bound
    assert len(analyses) == 2


def test_a_column_never_null_fits_a_nullable_slot_and_not_the_reverse(spark, analyses):
    no_nulls = spark.range(2).selectExpr("id AS k", "id AS v", "id AS t")
    nullable = frame(spark, [(1, 2, 3), (4, None, 6)])
    text = "SELECT k, coalesce(v, -1) * 2 AS w FROM {x}"
    views = SqlViews(spark, "test")
    assert rows(views.sql(text, x=nullable)) == [(1, 4), (4, -2)]
    assert rows(views.sql(text, x=no_nulls)) == [(0, 0), (1, 2)]
    assert len(analyses) == 1  # re-bound: the slot admits NULLs the frame never has
    forget_shared(spark)
    views = SqlViews(spark, "test")
    assert rows(views.sql(text, x=no_nulls)) == [(0, 0), (1, 2)]
    # a template made for a column never NULL may have dropped the NULL check
    assert rows(views.sql(text, x=nullable)) == [(1, 4), (4, -2)]
    assert len(analyses) == 3


def test_operators_of_one_session_share_a_template_and_read_their_own_frames(spark, analyses):
    text = "SELECT k, sum(v) AS s FROM {x} GROUP BY k"
    first, second = SqlViews(spark, "test"), SqlViews(spark, "test")
    assert rows(first.sql(text, x=frame(spark, [(1, 2, 3), (1, 5, 4)]))) == [(1, 7)]
    assert rows(second.sql(text, x=frame(spark, [(2, 1, 3), (3, 4, 4)]))) == [(2, 1), (3, 4)]
    assert rows(first.sql(text, x=frame(spark, [(4, 4, 4)]))) == [(4, 4)]
    assert len(analyses) == 1  # the second operator's text re-bound from the first's


def test_a_text_calling_a_users_function_keeps_its_operators_function(spark, analyses):
    text = "SELECT bump(v) AS b FROM {x}"
    spark.udf.register("bump", lambda v: v + 1, "bigint")
    first = SqlViews(spark, "test")
    assert rows(first.sql(text, x=frame(spark, [(1, 2, 3)]))) == [(3,)]
    spark.udf.register("bump", lambda v: v + 100, "bigint")  # another engine's, same name
    second = SqlViews(spark, "test")
    assert rows(second.sql(text, x=frame(spark, [(1, 2, 3)]))) == [(102,)]
    assert rows(first.sql(text, x=frame(spark, [(1, 5, 3)]))) == [(6,)]
    assert len(analyses) == 2  # not shared: each operator analysed it once


def test_a_random_function_draws_a_new_seed_every_cycle(spark, analyses):
    views = SqlViews(spark, "test")
    text = "SELECT k, rand() AS r FROM {x}"
    draws = [[r.r for r in views.sql(text, x=frame(spark, [(1, 2, 3)])).collect()]
             for _ in range(3)]
    assert len(set(map(tuple, draws))) == 3  # not one seed, kept in a template
    # one analysis a cycle: the first, made to try a template, is that cycle's frame
    assert len(analyses) == 3


def test_two_frames_with_the_same_columns_each_read_their_own_rows(spark):
    views = SqlViews(spark, "test")
    text = "SELECT 'a' AS side, k FROM {a} UNION ALL SELECT 'b' AS side, k FROM {b}"
    for events, _state, _lo, _hi in CYCLES[:3]:
        both = frame(spark, events)
        a, b = both.where("k = 1"), both.where("k <> 1")  # one frame's columns, ids and all
        got = views.sql(text, a=a, b=b)
        assert rows(got) == sorted([("a", k) for k, _v, _t in events if k == 1]
                                   + [("b", k) for k, _v, _t in events if k != 1])


def test_a_window_join_analyses_its_probes_in_its_first_cycle_only(spark, analyses):
    """Each of an interval join's four probes reads each side once, so each is analysed
    once and re-bound after (one text of all four read each side twice: analysed every
    cycle)."""
    eng = Engine(spark=spark, small_cycles=SmallCycles.parse("single"))
    eng.execute("CREATE STREAM a (k BIGINT, t BIGINT) WITH (event_time='t', lateness='0'); "
                "CREATE STREAM b (k BIGINT, t BIGINT) WITH (event_time='t', lateness='0'); "
                "CREATE QUERY j AS ISTREAM SELECT x.k AS k, x.t AS xt, y.t AS yt "
                "FROM a [RANGE 3] AS x JOIN b [RANGE 3] AS y ON x.k = y.k")
    counts = []
    for t in range(6):
        eng.push("a", [{"k": t % 2, "t": t}], watermark=t)
        eng.push("b", [{"k": (t + 1) % 2, "t": t}], watermark=t)
        eng.run_cycle()
        counts.append(len(analyses))
    got = eng.results("j")
    # x at t pairs with y at u of the same key while both windows hold them (|t - u| < 3),
    # from the later of the two: those before the last watermark, 5, are out
    want = sorted((t % 2, t, u) for t in range(6) for u in range(6)
                  if t % 2 == (u + 1) % 2 and abs(t - u) < 3 and max(t, u) < 5)
    assert sorted(zip(got["k"], got["xt"], got["yt"], strict=True)) == want
    assert counts[2:] == [counts[2]] * 4, counts


def test_a_frame_moving_to_another_key_is_read_under_its_new_key(spark):
    """A scan's held batches shift keys from text to text (``b1`` then ``b0``): a text
    analysed afresh reads each frame under its own key, not through the view another key
    of the same text binds again.
    """
    views = SqlViews(spark, "moving")
    first, second, third = (frame(spark, [(n, n, n)]) for n in (1, 2, 3))
    text = "SELECT k FROM {b0} UNION ALL SELECT k FROM {b1}"
    assert rows(views.sql(text, b0=first, b1=second)) == [(1,), (2,)]
    other = "SELECT k FROM {b0} UNION ALL SELECT k + 0 AS k FROM {b1}"  # analysed afresh
    analysed, keys = views.analyse(other, {"b0": second, "b1": third})
    assert rows(analysed) == [(2,), (3,)]
    assert sorted(keys.values()) == ["b0", "b1"]  # a view per key: a template can stand
    assert rows(views.sql(other, b0=second, b1=third)) == [(2,), (3,)]


def test_a_text_over_more_views_than_the_binding_takes_as_arguments(spark, analyses):
    """Six views: the binding takes the frames as a list rather than one by one."""
    views = SqlViews(spark, "test")
    names = [f"v{i}" for i in range(6)]
    text = " UNION ALL ".join(f"SELECT k, v + {i} AS v FROM {{{n}}} WHERE t < {{hi}}"
                              for i, n in enumerate(names))
    for events, _state, _lo, hi in CYCLES:
        frames = {n: frame(spark, [(k, v * (i + 1), t) for k, v, t in events])
                  for i, n in enumerate(names)}
        got = views.sql(text.replace("{hi}", bound_sql(hi)), **frames)
        assert rows(got) == sorted((k, v * (i + 1) + i) for i in range(6)
                                   for k, v, t in events if t < hi)
    assert len(analyses) == 1
