"""A join's records from its elements and their known ends (``element_intervals.py``): the
open layers kept by provisional end, value-equal pairs overlapping and meeting across
cycles, a late query over the same join, and a restart from saved state.
"""

from __future__ import annotations

import pandas as pd

from sparkcq import Engine

STREAMS = """
    CREATE STREAM a (k BIGINT, t BIGINT) WITH (event_time='t');
    CREATE STREAM b (k BIGINT, t BIGINT) WITH (event_time='t');
"""
JOIN = "SELECT a.k AS k FROM a [RANGE 10] JOIN b [RANGE 10] ON a.k = b.k"
# (stream, rows, watermark) per cycle; every pair has k = 1:
#   a0-b0 [0, 10), a0-b6 [6, 10), a12-b6 [12, 16), a12-b16 [16, 22)
# so k = 1 holds once over [0, 6), twice over [6, 10), once over [12, 22): three
# elements, the last two pairs one element as they meet
CYCLES = [
    ([{"k": 1, "t": 0}], [{"k": 1, "t": 0}, {"k": 2, "t": 1}], 5),
    ([], [{"k": 1, "t": 6}], 11),
    ([{"k": 1, "t": 12}], [], 14),
    ([], [{"k": 1, "t": 16}], None),
]
EXPECTED = [(1, 0, 10), (1, 6, 10), (1, 12, 22)]


def intervals(eng: Engine, query: str) -> list[tuple[int, int, int | None]]:
    """The query's elements as (k, start, end), end None while open."""
    frame = eng.results(query)
    ends = [None if pd.isna(te) else int(te) for te in frame["_te"]]
    return sorted(zip(map(int, frame["k"]), map(int, frame["_ts"]), ends, strict=True),
                  key=lambda e: (e[0], e[1], -1 if e[2] is None else e[2]))


def records(eng: Engine, query: str) -> list[tuple[int, int, int | None, str]]:
    """The query's records as the sink took them: (k, start, end, I or C)."""
    info = eng.catalog.query(query)
    frame = eng.sinks[info.sink].frame(info.name, ["k"])
    ends = [None if pd.isna(te) else int(te) for te in frame["_te"]]
    return list(zip(map(int, frame["k"]), map(int, frame["_ts"]), ends, frame["_op"],
                    strict=True))


def joined(spark, name: str = "j") -> Engine:  # noqa: ANN001
    eng = Engine(spark=spark)
    eng.execute(STREAMS)
    eng.execute(f"CREATE QUERY {name} AS {JOIN}")
    return eng


def feed(eng: Engine, cycles: list) -> None:
    for a_rows, b_rows, watermark in cycles:
        end = watermark is None
        eng.push("a", a_rows, watermark=watermark, end=end)
        eng.push("b", b_rows, watermark=watermark, end=end)
        eng.run_cycle()
    eng.run_until_idle()


def test_layers_kept_by_end_coalesce_across_cycles(spark):
    eng = joined(spark)
    feed(eng, CYCLES[:2])
    # the query takes the path: its open layers are held by provisional end
    (qid,) = eng.queries.intervals.progress.by_end
    assert eng.queries.intervals.progress.by_end[qid].state_rows == 1  # k = 1 since 0
    feed(eng, CYCLES[2:])
    assert intervals(eng, "j") == EXPECTED
    eng.stop()


def test_a_late_query_over_the_join_starts_from_its_contents(spark):
    eng = joined(spark, "early")
    feed(eng, CYCLES[:2])
    eng.execute(f"CREATE QUERY late AS {JOIN}")  # shares the join; k = 1 holds at 11
    feed(eng, CYCLES[2:])
    assert intervals(eng, "early") == EXPECTED
    # from its start (11) on: nothing holds at 11, so it sees the last element only
    assert intervals(eng, "late") == [(1, 12, 22)]
    eng.stop()


def test_a_restart_from_saved_state_repeats_and_loses_nothing(spark, tmp_path):
    whole = joined(spark)
    feed(whole, CYCLES)
    before = joined(spark)
    feed(before, CYCLES[:3])
    before.save_state(str(tmp_path / "state"))
    # the last element is open at the save
    assert intervals(before, "j") == [(1, 0, 10), (1, 6, 10), (1, 12, None)]
    before.stop()
    after = joined(spark)
    after.restore_state(str(tmp_path / "state"))
    feed(after, CYCLES[3:])
    # it closes after the restart, under the start it opened with: nothing opened again
    assert records(after, "j") == [(1, 12, 22, "C")]
    assert intervals(whole, "j") == EXPECTED
    whole.stop()
    after.stop()
