"""Small cycles run in one partition, large ones hash-partitioned, with the same results."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from sparkcq import Engine
from sparkcq.errors import PlanError
from sparkcq.model.columns import GROUP_HASH
from sparkcq.runtime.frames import hash_partitioned
from sparkcq.runtime.operators.sliced_aggregate import SlicedAggregateOperator
from sparkcq.runtime.partitioning import (
    INTERPRETED_CONF,
    SMALL_CYCLE_CONF,
    SmallCycles,
    large_cycle_conf,
)
from sparkcq.session import configured_partitions
from sparkcq.testing import CollectingSink, ListSource


def test_the_threshold_has_hysteresis():
    small = SmallCycles(enter=10, leave=30)
    single, seen = False, []
    for rows in [5, 20, 31, 20, 10, 0, 40]:
        single = small.single(rows, single)
        seen.append(single)
    # in at <= 10, stays in up to 30, out above 30, back in only at <= 10
    assert seen == [True, True, False, False, True, True, False]


def test_a_cycle_over_a_large_state_runs_partitioned_however_few_its_rows():
    small = SmallCycles(enter=10, leave=30, held=100)
    assert small.single(5, True, held=100)
    assert not small.single(5, True, held=101)
    assert not small.single(5, False, held=101)
    assert SmallCycles.always().single(5, False, held=1 << 40)


def test_only_the_smallest_cycles_interpret_their_expressions():
    small = SmallCycles(enter=100, leave=300, interpret=50)
    assert [small.interpreted(rows) for rows in (0, 50, 51, 300)] == [
        True, True, False, False]
    assert not SmallCycles(-1, -1, interpret=-1).interpreted(0)  # always compiled


@pytest.mark.parametrize(("text", "expected"), [
    ("auto", SmallCycles()),
    ("single", SmallCycles.always()),
    ("partitioned", SmallCycles.never()),
    ("100", SmallCycles(100, 200)),
    ("100,150", SmallCycles(100, 150)),
])
def test_layouts_by_name(text, expected):
    assert SmallCycles.parse(text) == expected


def test_a_bad_layout_says_what_it_takes():
    with pytest.raises(PlanError, match="'sometimes'.*'auto', 'single', 'partitioned'"):
        SmallCycles.parse("sometimes")


QUERIES = """
CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t', lateness='2');
CREATE QUERY agg AS SELECT k, sum(v) AS total, count(*) AS n FROM s [RANGE 4] GROUP BY k;
CREATE QUERY tumble AS RSTREAM SELECT k, max(v) AS top FROM s [CUT ON t BY 3] GROUP BY k;
CREATE QUERY big AS SELECT k, v FROM s WHERE v > 5;
CREATE QUERY pairs AS SELECT a.k AS k, a.v AS av, b.v AS bv
  FROM s [RANGE 2] AS a JOIN s [RANGE 3] AS b ON a.k = b.k;
"""


def run(spark, small_cycles: SmallCycles, rows_per_cycle: list[int]):
    eng = Engine(spark=spark, small_cycles=small_cycles)
    eng.execute(QUERIES)
    t = 0
    for n in rows_per_cycle:
        rows = [{"k": "ab"[i % 2], "v": (i * 7) % 11, "t": t + i // 3} for i in range(n)]
        t += n // 3 + 1
        eng.push("s", rows, watermark=t - 2)
        eng.run_cycle()
    eng.end_input("s")
    eng.run_until_idle()
    out = {q: eng.results(q).sort_values(list(eng.results(q).columns)).reset_index(drop=True)
           for q in ("agg", "tumble", "big", "pairs")}
    return out, [r.partitions for r in eng.reports]


def test_results_do_not_depend_on_the_layout(spark):
    """The same input in one partition, hash-partitioned (its expressions interpreted,
    as in cycles this small, or compiled), and switching as its cycles grow and shrink
    past the threshold: equal results, each cycle in the layout chosen.
    """
    sizes = [3, 12, 40, 9, 2, 30, 5]
    single, in_one = run(spark, SmallCycles.always(), sizes)
    partitioned, in_many = run(spark, SmallCycles.never(), sizes)
    compiled, _ = run(spark, SmallCycles(-1, -1, interpret=-1), sizes)
    switching, layouts = run(spark, SmallCycles(enter=10, leave=20), sizes)
    assert set(in_one) == {1}
    # the session's configured partitions (tests share one session, made by several)
    assert set(in_many) == {configured_partitions(spark)} and in_many[0] > 1
    # the last cycles end the input (no rows: small)
    wide = in_many[0]
    assert layouts[:len(sizes)] == [1, 1, wide, 1, 1, wide, 1]
    for name, frame in single.items():
        assert len(frame) > 0, name
        assert frame.equals(partitioned[name]), name
        assert frame.equals(compiled[name]), name
        assert frame.equals(switching[name]), name


def test_streams_counted_only_by_spark_are_estimated_each_from_its_own_last_cycle(spark):
    """Rows of files and generators are counted by the cycle's commit: a cycle expects
    each such stream to bring what it brought last cycle. Two streams of 8 rows a cycle
    are 16 rows, a small cycle; the estimate was once the last cycle's total per stream
    (32), which kept the demo's cycles partitioned.
    """
    eng = Engine(spark=spark, small_cycles=SmallCycles(enter=20, leave=20))
    for name in ("a", "b"):
        eng.execute(f"CREATE STREAM {name} (v BIGINT, t BIGINT) WITH (event_time='t'); "
                    f"CREATE QUERY q_{name} AS SELECT v FROM {name} WHERE v > 3")
        items = [{"v": i, "t": c} for c in range(4) for i in range(8)]
        eng.attach_source(name, ListSource(items, rows_per_cycle=8, on_driver=False))
    for _ in range(4):
        eng.run_cycle()
    assert [r.rows_in for r in eng.reports] == [16] * 4
    assert [r.partitions for r in eng.reports] == [1] * 4
    assert set(eng.results("q_a")["v"]) == set(eng.results("q_b")["v"]) == {4, 5, 6, 7}


@dataclass
class ConfSeeingSink(CollectingSink):
    """Notes the session's values of what a small cycle changes as each cycle commits."""

    spark: SparkSession | None = None
    seen: list[dict[str, str | None]] = field(default_factory=list)

    def write(self, cycle: int, records: dict) -> None:  # noqa: D102
        assert self.spark is not None
        self.seen.append({key: self.spark.conf.get(key)
                          for key in [*SMALL_CYCLE_CONF, *INTERPRETED_CONF]})
        super().write(cycle, records)


def test_a_small_cycle_plans_without_generated_code_or_broadcasts(spark):
    """A small cycle's plans skip code generation and broadcast joins; a large cycle's plan
    as the session was configured; between cycles the session has its own values back.
    """
    sink = ConfSeeingSink(spark=spark)
    eng = Engine(spark=spark, small_cycles=SmallCycles(enter=10, leave=10, interpret=10),
                 sinks={"seeing": sink})
    eng.execute("CREATE STREAM s (v BIGINT, t BIGINT) WITH (event_time='t'); "
                "CREATE QUERY q AS SELECT v FROM s WHERE v > 3; "
                "CREATE QUERY every INTO seeing AS SELECT v FROM s")
    own = large_cycle_conf(spark)
    assert own["spark.sql.codegen.wholeStage"] == "true"  # as the test session was made
    assert own["spark.sql.codegen.factoryMode"] == "FALLBACK"
    between, t = [], 0
    for n in (3, 30, 3):
        eng.push("s", [{"v": i, "t": t + i} for i in range(n)], watermark=t + n)
        t += n
        eng.run_cycle()
        between.append({key: spark.conf.get(key)
                        for key in [*SMALL_CYCLE_CONF, *INTERPRETED_CONF]})
    smallest = {**SMALL_CYCLE_CONF, **INTERPRETED_CONF}
    assert sink.seen == [smallest, own, smallest]
    assert between == [own] * 3
    assert [r.partitions for r in eng.reports] == [1, configured_partitions(spark), 1]
    assert sorted(eng.results("q")["v"]) == list(range(4, 30))
    # what the interpreted object factory cannot build, the session builds between cycles
    assert "s" not in {table.name for table in spark.catalog.listTables()}


def test_a_hash_partitioned_interpreted_cycle_gives_the_session_its_own_values_back(spark):
    """A cycle of few rows interprets its expressions even when it runs hash-partitioned;
    after it, the session's own values are back (they once stayed, and the next listing
    of the catalog failed to build its rows).
    """
    eng = Engine(spark=spark, small_cycles=SmallCycles.never())
    eng.execute("CREATE STREAM s (v BIGINT, t BIGINT) WITH (event_time='t'); "
                "CREATE QUERY q AS SELECT v FROM s WHERE v > 1")
    own = large_cycle_conf(spark)
    eng.push("s", [{"v": i, "t": i} for i in range(4)], watermark=4)
    eng.run_cycle()
    assert [r.partitions for r in eng.reports] == [configured_partitions(spark)]
    assert {key: spark.conf.get(key) for key in [*SMALL_CYCLE_CONF, *INTERPRETED_CONF]} == own
    assert sorted(eng.results("q")["v"]) == [2, 3]
    assert "s" not in {table.name for table in spark.catalog.listTables()}


def test_small_cycles_of_joined_state_shuffle_nothing_however_many_cycles_ran(spark):
    """A grouped aggregate joins each cycle's changes with its state, so the state's size
    estimate, kept by its checkpoint, would multiply cycle after cycle (10^90 bytes after
    eight cycles), and Spark reshuffles single-partition sides estimated above
    ``spark.sql.maxSinglePartitionBytes``. Small cycles' checkpoints are planned as one
    byte: every cycle one stage, nothing shuffled. A large cycle after them plans their
    states with no estimate, as its own: no broadcast job of a state.
    """
    eng = Engine(spark=spark, small_cycles=SmallCycles(enter=10, leave=10))
    eng.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t'); "
                "CREATE QUERY agg AS SELECT k, max(v) AS top, sum(v) AS total "
                "FROM s [RANGE 4] GROUP BY k")
    t = 0
    for n in [6] * 10 + [30]:
        eng.push("s", [{"k": "abc"[i % 3], "v": i, "t": t + i // 3} for i in range(n)],
                 watermark=t + n // 3 - 1)
        t += n // 3
        eng.run_cycle()
    costs = eng.cycle_costs(11)
    assert [c.partitions for c in costs] == [1] * 10 + [configured_partitions(spark)]
    small = [c.work for c in costs[:10]]
    assert [(w.jobs, w.stages, w.shuffled) for w in small] == [(1, 1, 0)] * 10
    assert costs[-1].work.jobs == 1
    assert len(eng.results("agg")) > 20


def test_a_generators_cycle_is_sized_by_the_rows_it_generated(spark):
    """A generator counts its rows, so even a first cycle, with no last cycle to go by,
    runs in the layout its own rows call for."""
    eng = Engine(spark=spark, small_cycles=SmallCycles(enter=10, leave=10))
    eng.execute("CREATE STREAM g (v BIGINT, t BIGINT) WITH (event_time='t', "
                "source='generator', pace='fast', batch='50', limit='55', expr_v='id', "
                "expr_t='id'); CREATE QUERY q AS SELECT v FROM g WHERE v % 5 = 0")
    eng.run_cycle()
    eng.run_cycle()
    assert [r.rows_in for r in eng.reports] == [50, 5]
    assert [r.partitions for r in eng.reports] == [configured_partitions(spark), 1]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_large_first_batch_of_files_runs_on_every_core(spark, tmp_path, fmt):
    """Files are counted by no one but Spark, so a stream's first cycle has no last cycle
    to go by: its files estimate their rows (Parquet's footers exactly, a text file from
    its lines), and a batch beyond what a small cycle may take runs hash-partitioned. It
    once ran in one partition, so a backlog taken in one cycle used one core. A smaller
    batch follows the last cycle, as before (none: one partition).
    """
    layouts = {}
    for name, rows in (("large", 200), ("small", 60)):
        eng = Engine(spark=spark, small_cycles=SmallCycles(enter=40, leave=100),
                     data_roots=[str(tmp_path)])
        folder = tmp_path / name
        folder.mkdir()
        frame = pd.DataFrame({"k": [f"k{i % 3}" for i in range(rows)],
                              "v": list(range(rows)), "t": [i // 20 for i in range(rows)]})
        if fmt == "csv":
            frame.to_csv(folder / "a.csv", index=False)
        else:
            frame.to_parquet(folder / "a.parquet", index=False)
        eng.execute(f"CREATE STREAM f (k STRING, v BIGINT, t BIGINT) WITH (event_time='t', "
                    f"source='files', format='{fmt}', path='{folder}', bounded='true');"
                    "CREATE QUERY q AS SELECT k, v FROM f WHERE v % 50 = 0")
        eng.run_until_idle()
        assert eng.reports[0].rows_in == rows
        assert sorted(eng.results("q")["v"]) == list(range(0, rows, 50))
        layouts[name] = eng.reports[0].partitions
    assert layouts == {"large": configured_partitions(spark), "small": 1}


def test_a_state_made_in_a_small_cycle_comes_back_hash_partitioned(spark):
    """A sliding window's panes made in one partition are read by the first large cycle
    hash-partitioned by the group hash, so merging old and new panes shuffles only the
    new ones, and the merged panes keep that partitioning for the cycles after.
    """
    eng = Engine(spark=spark, small_cycles=SmallCycles(enter=10, leave=20))
    eng.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');"
                "CREATE QUERY w AS RSTREAM SELECT k, sum(v) AS total "
                "FROM s [RANGE 6 SLIDE 2] GROUP BY k;")
    t = 0
    for n in (5, 60, 60):
        eng.push("s", [{"k": f"k{i % 7}", "v": i, "t": t + i // 10} for i in range(n)],
                 watermark=t + n // 10)
        t += n // 10 + 1
        eng.run_cycle()
    wide = configured_partitions(spark)
    assert [r.partitions for r in eng.reports] == [1, wide, wide]
    ops = eng.plan.operators(list(eng.plan.ops))
    panes = [op.panes for op in ops if isinstance(op, SlicedAggregateOperator)]
    assert len(panes) == 1 and panes[0].df is not None
    assert hash_partitioned(panes[0].df, GROUP_HASH, wide)


def test_a_sliding_window_over_many_keys_shuffles_its_events_once_with_the_same_rows(spark):
    """Forty keys, thirty events a cycle: the kept panes soon outnumber a cycle's events,
    so the window shuffles its events by group before summing them (one exchange instead
    of two); every snapshot is still the window's, computed here from the events.
    """
    eng = Engine(spark=spark, small_cycles=SmallCycles.never())
    eng.execute("CREATE STREAM s (k BIGINT, v BIGINT, t BIGINT) WITH (event_time='t'); "
                "CREATE QUERY w AS RSTREAM SELECT k, sum(v) AS s, count(*) AS n "
                "FROM s [RANGE 6 SLIDE 2] GROUP BY k")
    events, spread = [], []
    for c in range(8):
        rows = [{"k": (7 * i + c) % 40, "v": i + c, "t": 3 * c + i % 3} for i in range(30)]
        events += rows
        eng.push("s", rows, watermark=3 * c + 3)
        eng.run_cycle()
        (family,) = eng.plan.families.sliced_families()
        assert family.op is not None
        spread.append(family.op.progress.spreads)
    eng.end_input("s")
    eng.run_until_idle()
    assert True in spread and spread[0] is False
    expected = {}
    for p in range(0, 3 * 8 + 8, 2):  # an event at t is in the snapshots of [t, t + 6)
        for e in events:
            if e["t"] <= p < e["t"] + 6:
                s, n = expected.get((e["k"], p), (0, 0))
                expected[(e["k"], p)] = (s + e["v"], n + 1)
    got = eng.results("w")
    rows = {(k, int(ts)): (s, n)
            for k, s, n, ts in zip(got["k"], got["s"], got["n"], got["_ts"], strict=True)}
    assert len(got) == len(rows) == len(expected)
    assert rows == expected
