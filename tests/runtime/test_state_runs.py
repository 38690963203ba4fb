"""State kept as runs (``runtime/state_runs.py``), through a window join's sides: runs merge
size-tiered and expire whole, so a long run holds few of them and writes each element a
few times, and the pairs stay exactly those of the windows.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from sparkcq import Engine
from sparkcq.runtime.operators.interval_join import IntervalJoinOperator
from sparkcq.runtime.partitioning import SmallCycles
from sparkcq.runtime.state_runs import Run

WINDOW = 100
STEP = 2  # event time a cycle: one event per unit on each side
CYCLES = 120
JOIN = f"""
CREATE STREAM a (id BIGINT, k BIGINT, t BIGINT) WITH (event_time='t');
CREATE STREAM b (id BIGINT, k BIGINT, t BIGINT) WITH (event_time='t');
CREATE QUERY pairs AS ISTREAM SELECT a.id AS ai, b.id AS bi
  FROM a [RANGE {WINDOW}] JOIN b [RANGE {WINDOW}] ON a.k = b.k;
"""


@pytest.mark.parametrize("small", [True, False], ids=["one partition", "partitioned"])
def test_runs_merge_and_expire_and_the_pairs_stay_exact(spark, small):
    """Over 120 cycles of 2 units (an element lives 100, 50 cycles), four runs of one level
    merge into one of the next while the merge spans at most a third of 100 units: levels
    of 1, 4 and 16 cycles (8 and 32 units), never 64 (128 units). So a side never holds
    more than 50 / 16 + 3 + 3 + 1 runs (those of 16 cycles the window can hold, three of
    each lower level, and the new one), and an element is written at most three times: when
    it arrives and in two merges. Every pair of one key within 100 units is found once.
    """
    cycles = SmallCycles.always() if small else SmallCycles.never()
    eng = Engine(spark=spark, small_cycles=cycles)
    eng.execute(JOIN)
    join = next(op for op in eng.plan.ops.values() if isinstance(op, IntervalJoinOperator))
    most = 0
    for c in range(CYCLES):
        times = range(STEP * c, STEP * c + STEP)
        eng.push("a", [{"id": t, "k": t % 3, "t": t} for t in times], watermark=STEP * c + STEP)
        eng.push("b", [{"id": 10_000 + t, "k": t % 2, "t": t} for t in times],
                 watermark=STEP * c + STEP)
        eng.run_cycle()
        most = max(most, *(len(side.runs) for side in join.sides))
        levels = {r.level for side in join.sides for r in side.runs}
        assert levels <= {0, 1, 2}, (c, levels)
    assert 2 in {r.level for side in join.sides for r in side.runs}
    assert most <= WINDOW // (16 * STEP) + 1 + 3 + 3 + 1
    written = sum(r.state_rows_written for r in eng.reports)
    assert 2 * STEP * CYCLES < written <= 3 * 2 * STEP * CYCLES
    events = range(STEP * CYCLES)
    expected = sorted((ta, 10_000 + tb) for ta in events for tb in events
                      if ta % 3 == tb % 2 and abs(ta - tb) < WINDOW)
    got = eng.results("pairs")
    assert sorted(zip(got["ai"], got["bi"], strict=True)) == expected


def test_a_run_is_read_only_where_its_elements_may_start():
    """A run made in the cycle from 20 whose latest element starts at 40 may hold starts
    in [20, 40] only; one whose first start is not known, anywhere up to 40.
    """
    run = Run(None, 0, False, rows=5, last_start=40, first_end=50, last_end=90,  # type: ignore[arg-type]
              first_start=20)
    assert run.starts_within(30, 35) and run.starts_within(0, 21) and run.starts_within(40, 99)
    assert not run.starts_within(0, 20) and not run.starts_within(41, 60)
    assert replace(run, first_start=None).starts_within(0, 5)
    assert Run(None, 0, False).starts_within(0, 1)  # type: ignore[arg-type] # not yet made


def test_a_run_of_many_rows_is_merged_no_further(spark):
    """Four runs of one level merge; four of which one holds ``FINAL_ROWS`` rows do not
    (the three after it are too few to merge on their own), so a cycle never rewrites what
    large cycles took in.
    """
    from pyspark.sql.types import LongType, StructField, StructType

    from sparkcq.runtime.state_runs import FANOUT, FINAL_ROWS, StateRuns

    schema = StructType([StructField("s", LongType()), StructField("e", LongType())])
    state = StateRuns(None, schema, "side", "s", "e")  # type: ignore[arg-type]

    def run(rows: int) -> Run:
        return Run(None, 0, False, rows=rows, last_start=1, first_end=2, last_end=3)  # type: ignore[arg-type]

    state.runs = tuple(run(10) for _ in range(FANOUT))
    assert state.mergeable() == 0
    state.runs = (run(FINAL_ROWS), *(run(10) for _ in range(FANOUT - 1)))
    assert state.mergeable() is None
    state.runs = (*state.runs, run(FINAL_ROWS - 1))
    assert state.mergeable() == 1
