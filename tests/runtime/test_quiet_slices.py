"""A window aggregate's cycle that holds none of its window's change instants builds no
segments: over ``[RANGE 4 SLIDE 2]`` a group's row changes only at multiples of 2 (where a
pane enters, and 4 later where it leaves), so a cycle whose watermark moves from 2 to 3
changes nothing, and only its panes (the state) take its events.

Events of group a: 1@1 and 2@2 (pane ending at 2, valid [2, 6)), 4@5 (pane ending at 6,
valid [6, 10)). Coalesced: sum 3, count 2 over [2, 6); sum 4, count 1 over [6, 10).
"""

from __future__ import annotations

import pytest

from sparkcq import Engine
from sparkcq.runtime.operators.sliced_aggregate import SlicedAggregateOperator
from sparkcq.runtime.partitioning import SmallCycles
from sparkcq.testing import EndOfInput, ListSource, Watermark

QUERY = "SELECT k, sum(v) AS s, count(*) AS n FROM s [RANGE 4 SLIDE 2] GROUP BY k"
EVENTS = {1: [{"k": "a", "v": 1, "t": 1}], 2: [{"k": "a", "v": 2, "t": 2}],
          5: [{"k": "a", "v": 4, "t": 5}]}


def one_step_a_cycle(end: bool = True) -> list:
    """The events of each instant, then a watermark just past it: one unit a cycle."""
    items: list = [Watermark(0)]
    for t in range(12):
        items += [*EVENTS.get(t, []), Watermark(t + 1)]
    return [*items, EndOfInput()] if end else items


@pytest.mark.parametrize("fuse", [False, True], ids=["own", "family"])
@pytest.mark.parametrize("form", ["", "RSTREAM"])
def test_cycles_between_change_instants_build_no_segments(spark, monkeypatch, fuse: bool,
                                                         form: str):
    built: list[tuple[int, int]] = []
    segments_sql = SlicedAggregateOperator.segments_sql

    def spied(self, lo: int, hi: int) -> str:
        built.append((lo, hi))
        return segments_sql(self, lo, hi)

    monkeypatch.setattr(SlicedAggregateOperator, "segments_sql", spied)
    eng = Engine(spark=spark, fuse=fuse, small_cycles=SmallCycles.parse("single"))
    eng.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) "
                "WITH (event_time='t', lateness='0')")
    eng.attach_source("s", ListSource(one_step_a_cycle()))
    eng.execute(f"CREATE QUERY q AS {form} {QUERY}")
    eng.run_until_idle()
    got = eng.results("q")
    if form == "RSTREAM":  # the window's content at each multiple of 2
        assert sorted(zip(got["s"], got["n"], got["_ts"], strict=True)) == [
            (3, 2, 2), (3, 2, 4), (4, 1, 6), (4, 1, 8)]
    else:
        assert sorted(zip(got["s"], got["n"], got["_ts"], got["_te"], strict=True)) == [
            (3, 2, 2, 6), (4, 1, 6, 10)]
    # after the first slice read (where the query's elements may start), only the slices
    # that hold a multiple of 2: [3, 4), [5, 6) ... took their events into the panes alone
    assert all(lo + (-lo) % 2 < hi for lo, hi in built[1:]), built
    assert {lo for lo, _hi in built} >= {2, 4, 6, 8, 10}, built


@pytest.mark.parametrize("fuse", [False, True], ids=["own", "family"])
def test_cycles_after_the_first_output_analyse_no_new_text(spark, analyses, fuse: bool):
    """A window's first output (its queries fresh, no run held, no layer open) and the ones
    after it run the same texts: no cycle after the first output analyses SQL again."""
    eng = Engine(spark=spark, fuse=fuse, small_cycles=SmallCycles.parse("single"))
    eng.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) "
                "WITH (event_time='t', lateness='0')")
    eng.attach_source("s", ListSource(one_step_a_cycle(end=False)))  # each window ends
    eng.execute(f"CREATE QUERY q AS {QUERY}")
    eng.execute("CREATE QUERY r AS SELECT k, max(v) AS m FROM s [RANGE 4 SLIDE 2] GROUP BY k")
    first_output = None
    while eng.has_pending_input():
        report = eng.run_cycle()
        if first_output is None and report.rows_out.get("q"):
            first_output = len(analyses)
    got = eng.results("q")
    assert sorted(zip(got["s"], got["n"], got["_ts"], got["_te"], strict=True)) == [
        (3, 2, 2, 6), (4, 1, 6, 10)]
    got = eng.results("r")
    assert sorted(zip(got["m"], got["_ts"], got["_te"], strict=True)) == [(2, 2, 6), (4, 6, 10)]
    assert first_output is not None
    assert analyses[first_output:] == []
