"""What a cycle cost, as EXPLAIN ANALYZE shows it: the driver's phases, and the Spark work
read back from Spark's status store by the cycle's job tag.
"""

from __future__ import annotations

import pytest

from sparkcq import Engine
from sparkcq.errors import QuerySyntaxError
from sparkcq.language.sql.parser import parse_script
from sparkcq.language.sql.statements import Explain
from sparkcq.runtime.cycle_cost import Phase
from sparkcq.runtime.partitioning import SmallCycles
from sparkcq.session import configured_partitions

QUERIES = """
CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
CREATE QUERY agg AS SELECT k, sum(v) AS total FROM s [RANGE 4] GROUP BY k;
CREATE QUERY big AS SELECT k, v FROM s WHERE v > 5;
"""


def run_cycles(spark, sizes: list[int]) -> Engine:
    eng = Engine(spark=spark, small_cycles=SmallCycles(enter=10, leave=10))
    eng.execute(QUERIES)
    t = 0
    for n in sizes:
        eng.push("s", [{"k": f"k{i % 5}", "v": i % 9, "t": t + i // 4} for i in range(n)],
                 watermark=t + n // 4)
        t += n // 4 + 1
        eng.run_cycle()
    return eng


def test_each_cycles_spark_work_is_read_back_by_its_tag(spark):
    """A small cycle is one stage of one task with nothing shuffled; a large one shuffles
    its aggregate's input across the configured partitions. Two engines on one session
    each see only their own jobs.
    """
    eng = run_cycles(spark, [4, 4, 40])
    other = run_cycles(spark, [40])
    costs = eng.cycle_costs()
    assert [c.cycle for c in costs] == [r.cycle for r in eng.reports] == [0, 1, 2]
    assert [c.partitions for c in costs] == [1, 1, configured_partitions(spark)]
    for cost, report in zip(costs, eng.reports, strict=True):
        work = cost.work
        assert work.jobs >= report.jobs >= 1, cost
        assert 0 < work.busy_s <= cost.seconds
        if cost.partitions == 1:
            assert (work.stages, work.tasks, work.shuffled) == (work.jobs, work.jobs, 0), cost
        else:
            assert work.shuffled > 0 and work.tasks > work.stages, cost
    [alone] = other.cycle_costs()
    assert alone.work.jobs == other.reports[0].jobs


def test_the_driver_phases_add_up_within_the_cycle(spark):
    eng = run_cycles(spark, [4, 6])
    for report in eng.reports:
        phases = report.phases
        assert set(phases) == set(Phase)
        assert all(v >= 0 for v in phases.values())
        inside = phases[Phase.OPERATORS] + phases[Phase.COMMIT] + phases[Phase.DELIVER]
        assert inside <= report.seconds
        assert phases[Phase.COMMIT_PLANNING] <= phases[Phase.COMMIT]
    assert eng.metrics()["last_cycle_phases"] == {str(k): v for k, v in phases.items()}


def test_explain_analyze_shows_the_plan_and_the_last_cycles(spark):
    eng = run_cycles(spark, [4, 6])
    text = eng.execute("EXPLAIN ANALYZE")
    assert isinstance(text, str)
    plan, _, cycles = text.partition("\n\nlast cycles:\n")
    assert "SlicedAggregate sum" in plan and "plan_ms/cycle=" in plan
    lines = cycles.splitlines()
    blocks = [lines[i:i + 4] for i in range(0, len(lines), 4)]
    for report, (head, driver, work, state) in zip(eng.reports, blocks, strict=True):
        assert head.startswith(f"cycle {report.cycle}: {report.rows_in:,} rows in "), head
        assert driver.strip().startswith("driver: operators "), driver
        assert work.strip().startswith("Spark: 1 job, 1 stage, 1 task, "), work
        assert work.endswith("0 records shuffled"), work
        assert state.strip() == f"state: {report.state_rows_written:,} rows written", state


JOIN = """
CREATE STREAM a (k STRING, t BIGINT) WITH (event_time='t');
CREATE STREAM b (k STRING, t BIGINT) WITH (event_time='t');
CREATE QUERY pairs AS ISTREAM SELECT a.k, a.t AS ta, b.t AS tb
  FROM a [RANGE 10] JOIN b [RANGE 10] ON a.k = b.k;
"""


@pytest.mark.parametrize("small", [True, False], ids=["one partition", "partitioned"])
def test_a_cycle_counts_the_state_rows_it_wrote(spark, small):
    """A window join keeps each side's elements as runs, a cycle's new ones a run of their
    own (an event at t is the element [t, t + 10)), and writes only those: by hand, 3 + 2
    rows in the first cycle, 2 + 1 in the second, 1 + 1 in the third, none in a cycle
    without events (four runs of a side would merge; a side never has more than three here).
    """
    cycles = SmallCycles.always() if small else SmallCycles.never()
    eng = Engine(spark=spark, small_cycles=cycles)
    eng.execute(JOIN)
    pushes = [([0, 1, 2], [0, 1], 5), ([5, 6], [5], 12), ([13], [13], 20), ([], [], 25)]
    for ta, tb, mark in pushes:
        eng.push("a", [{"k": "x", "t": t} for t in ta], watermark=mark)
        eng.push("b", [{"k": "x", "t": t} for t in tb], watermark=mark)
        eng.run_cycle()
    assert [r.state_rows_written for r in eng.reports] == [5, 3, 2, 0]
    assert eng.metrics()["last_cycle_state_rows_written"] == 0


def test_explain_analyze_parses_alone():
    [stmt] = parse_script("EXPLAIN ANALYZE")
    assert stmt == Explain(None, glob=True, analyze=True)
    with pytest.raises(QuerySyntaxError, match="unexpected text"):
        parse_script("EXPLAIN ANALYZE q")
