"""Checkpoint and recovery (``Engine(checkpoint_dir=...)``): a restarted engine
resumes after the last committed cycle, redoes the cycles logged after its checkpoint with
the same input, and gives, cycle by cycle, the records of a run that never stopped.

Here the "crash" abandons an engine between two statements of the test (its Spark session
lives on); tests/end_to_end/test_crash.py kills a whole process at random points.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os

import pandas as pd
import pytest

from sparkcq import Engine
from sparkcq.errors import CatalogError
from sparkcq.testing import CollectingSink

# one column of each type; three values that repeat, so groups come and go
TYPES = {
    "INT": [1, -2, 3],
    "BIGINT": [2**40, -1, 7],
    "DOUBLE": [0.1, -2.5, 1e300],
    "BOOLEAN": [True, False, True],
    "STRING": ["a", "", "é ünïcode"],
    "TIMESTAMP": [dt.datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=dt.UTC),
                  dt.datetime(1999, 12, 31, 23, 59, 59, tzinfo=dt.UTC),
                  dt.datetime(2030, 6, 1, tzinfo=dt.UTC)],
    "DATE": [dt.date(2026, 1, 1), dt.date(1970, 1, 1), dt.date(2100, 2, 28)],
    "DECIMAL(10,2)": [decimal.Decimal("1.25"), decimal.Decimal("-99999999.99"),
                      decimal.Decimal("0.01")],
    "STRUCT<a: INT, b: STRING>": [{"a": 1, "b": "x"}, {"a": 2, "b": None}, {"a": 1, "b": "x"}],
    "ARRAY<INT>": [[1, 2], [], [3]],
}

COLUMNS = {sql_type: f"x{i}" for i, sql_type in enumerate(TYPES)}
SETUP = (
    "CREATE STREAM s (" + ", ".join(f"{c} {t}" for t, c in COLUMNS.items())
    + ", t BIGINT) WITH (event_time='t');"
    + "CREATE QUERY last_rows INTO collect AS SELECT * FROM s [ROWS 2];"
    # one grouping by a key of every type: an aggregate's state keyed by each type
    + "CREATE QUERY per_value INTO collect AS SELECT " + ", ".join(COLUMNS.values())
    + ", count(*) AS n FROM s [RANGE 4] GROUP BY " + ", ".join(COLUMNS.values()) + ";"
    # one query of every column's max: an aggregate's state of each type, in fewer queries
    + "CREATE QUERY largest INTO collect AS SELECT "
    + ", ".join(f"max({c}) AS m_{c}" for c in COLUMNS.values()) + ", sum(t) AS st "
    + "FROM s [RANGE 3];")


def per_cycle(sink: CollectingSink) -> dict[tuple[str, int], list]:
    """Each query's records of each cycle, in a canonical order."""
    out = {}
    for query, cycles in sink.cycles.items():
        for cycle, frame in cycles:
            rows = [tuple(_plain(v) for v in r) for r in frame.itertuples(index=False)]
            out[(query, cycle)] = sorted(rows, key=repr)
    return out


def _plain(v: object) -> object:
    if isinstance(v, list | tuple):
        return tuple(_plain(x) for x in v)
    if hasattr(v, "tolist"):
        return _plain(v.tolist())  # type: ignore[union-attr]
    if isinstance(v, dict):
        return tuple(sorted((k, _plain(x)) for k, x in v.items()))
    return None if v is None or (isinstance(v, float) and pd.isna(v)) else v


def feed(engine: Engine, times: range) -> None:
    for t in times:
        row = {c: TYPES[sql_type][t % 3] for sql_type, c in COLUMNS.items()}
        engine.push("s", [{**row, "t": t}], watermark=t)
        engine.run_cycle()


def finish(engine: Engine) -> None:
    engine.end_input("s")
    engine.run_until_idle()


def merged(before: CollectingSink, after: CollectingSink) -> dict[tuple[str, int], list]:
    """The records a transactional sink would hold: each cycle once. A cycle both engines
    committed (redone after the restart) must have given the same records both times.
    """
    first, second = per_cycle(before), per_cycle(after)
    for key in first.keys() & second.keys():
        assert first[key] == second[key], f"cycle {key} redone with other records"
    return {**first, **second}


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    """One run that never stops, and one stopped after cycle 5 (checkpoints after cycles 2
    and 4, cycle 5 only logged) then restarted from its directory; the sinks of each."""
    ref_sink = CollectingSink()
    ref = Engine(spark=spark, sinks={"collect": ref_sink})
    ref.execute(SETUP)
    feed(ref, range(8))
    finish(ref)
    folder = str(tmp_path_factory.mktemp("types") / "ck")
    sink1 = CollectingSink()
    first = Engine(spark=spark, checkpoint_dir=folder, checkpoint_every=2,
                   sinks={"collect": sink1})
    first.execute(SETUP)
    feed(first, range(5))
    first.wait_for_checkpoint()  # the crash comes after it is written
    sink2 = CollectingSink()
    second = Engine(spark=spark, checkpoint_dir=folder, checkpoint_every=2,
                    sinks={"collect": sink2})
    redone = {c for _q, c in per_cycle(sink2)}
    cycle = second.cycle
    feed(second, range(5, 8))
    finish(second)
    return per_cycle(ref_sink), merged(sink1, sink2), redone, cycle


def test_a_restart_redoes_the_cycles_after_its_checkpoint(runs):
    _ref, _got, redone, cycle = runs
    assert cycle == 5
    assert redone == {4}


def test_every_query_gives_after_a_restart_what_it_gives_without_one(runs):
    ref, got, _redone, _cycle = runs
    for query in ("last_rows", "per_value", "largest"):
        mine = {k: v for k, v in got.items() if k[0] == query}
        assert mine == {k: v for k, v in ref.items() if k[0] == query}, query
        assert mine, query


@pytest.mark.parametrize("sql_type", list(TYPES))
def test_state_of_every_column_type_survives_a_restart(runs, sql_type):
    """Each query's records hold the column of ``sql_type`` at its index (SELECT *, the
    grouping keys, the maxima in column order): the restarted run's values of it, cycle
    by cycle, are the reference's."""
    ref, got, _redone, _cycle = runs
    i = list(COLUMNS).index(sql_type)

    def column(records: dict[tuple[str, int], list], query: str) -> dict:
        return {k: sorted((r[i] for r in v), key=repr) for k, v in records.items()
                if k[0] == query}

    for query in ("last_rows", "per_value", "largest"):
        mine = column(got, query)
        assert mine == column(ref, query), query
        assert any(mine.values()), query


def test_the_catalog_comes_back_as_it_was(spark, tmp_path):
    folder = str(tmp_path / "ck")
    first = Engine(spark=spark, checkpoint_dir=folder)
    first.execute("""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE TABLE names (k STRING, name STRING);
        CREATE QUERY gone AS SELECT k FROM s;
    """)
    first.load_table("names", [{"k": "a", "name": "alpha"}])
    first.execute("CREATE QUERY named AS SELECT n.name, sum(s.v) AS total FROM s [RANGE 5] "
                  "JOIN names n ON n.k = s.k GROUP BY n.name")
    first.push("s", [{"k": "a", "v": 2, "t": 1}], watermark=2)
    first.run_cycle()
    first.drop("QUERY", "gone")
    first.execute("SHOW QUERIES; EXPLAIN named")  # shows only: not journaled
    first.wait_for_checkpoint()  # the crash comes after it is written
    second = Engine(spark=spark, checkpoint_dir=folder)
    assert sorted(second.queries.running) == ["named"]
    assert second.cycle == 1
    second.push("s", [{"k": "a", "v": 3, "t": 3}], watermark=10)
    second.end_input("s")
    second.run_until_idle()
    got = sorted(second.results("named").itertuples(index=False, name=None))
    # the first cycle's record (2 from 1) was committed before the restart
    assert got == [("alpha", 3, 6, 8), ("alpha", 5, 3, 6)]
    entries = [e for line in open(os.path.join(folder, "catalog.jsonl"))
               if (e := line.strip())]
    assert len(entries) == 4  # the script, the table's rows, the query, the drop


def test_files_are_read_once_across_a_restart(spark, tmp_path):
    data, folder = tmp_path / "in", str(tmp_path / "ck")
    data.mkdir()
    setup = (f"CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t', "
             f"source='files', path='{data}', files_per_cycle='1', bounded='true');"
             "CREATE QUERY total INTO collect AS SELECT k, sum(v) AS v FROM s [UNBOUNDED] "
             "GROUP BY k;")
    for i in range(4):
        (data / f"part-{i}.csv").write_text(f"k,v,t\na,{i + 1},{i}\n")
    sink1 = CollectingSink()
    first = Engine(spark=spark, checkpoint_dir=folder, checkpoint_every=3,
                   sinks={"collect": sink1}, data_roots=[str(tmp_path)])
    first.execute(setup)
    first.run_cycle()
    first.run_cycle()
    sink2 = CollectingSink()
    second = Engine(spark=spark, checkpoint_dir=folder, checkpoint_every=3,
                    sinks={"collect": sink2}, data_roots=[str(tmp_path)])
    assert second.cycle == 2  # both cycles redone from the input log
    second.run_until_idle()
    frame = pd.concat([f for _c, f in merged_frames(sink1, sink2)])
    # each file once: the running total opens at 1, 3, 6 and 10 (the data set ends with
    # the last file, so its last value is final)
    assert sorted(frame.loc[frame["_op"] == "I", "v"]) == [1, 3, 6, 10]
    assert second.sources["s"].position()["seen"] == sorted(str(p) for p in data.iterdir())


def test_a_restart_numbers_its_cycles_after_the_journal_entries(spark, tmp_path):
    """Idle cycles are not logged; a restart that numbered its cycles from the last logged
    one (0 here) would log the next input under a cycle before the CREATE STREAM's, and
    the restart after it would redo that input before the stream exists.
    """
    folder = str(tmp_path / "ck")
    first = Engine(spark=spark, checkpoint_dir=folder, checkpoint_every=100,
                   sinks={"collect": CollectingSink()})
    for _ in range(3):
        first.run_cycle()  # idle: nothing logged
    first.execute("CREATE STREAM s (v BIGINT, t BIGINT) WITH (event_time='t');"
                  "CREATE QUERY q INTO collect AS SELECT v FROM s;")
    sink2 = CollectingSink()
    second = Engine(spark=spark, checkpoint_dir=folder, checkpoint_every=100,
                    sinks={"collect": sink2})
    assert second.cycle == 3  # where the first one made its last change
    second.push("s", [{"v": 7, "t": 1}], watermark=2)
    second.run_cycle()
    sink3 = CollectingSink()
    third = Engine(spark=spark, checkpoint_dir=folder, checkpoint_every=100,
                   sinks={"collect": sink3})
    assert third.cycle == 4
    assert [(c, list(f["v"])) for c, f in sink3.cycles["q"]] == [(3, [7])]
    assert [(c, list(f["v"])) for c, f in sink2.cycles["q"]] == [(3, [7])]


def merged_frames(before: CollectingSink, after: CollectingSink) -> list[tuple[int, pd.DataFrame]]:
    cycles = dict(before.cycles.get("total", []))
    cycles.update(dict(after.cycles.get("total", [])))
    return sorted(cycles.items(), key=lambda x: x[0])


def test_a_function_defined_in_main_is_refused_with_a_checkpoint(spark, tmp_path):
    eng = Engine(spark=spark, checkpoint_dir=str(tmp_path / "ck"))

    def local(x: int) -> int:
        return x

    with pytest.raises(CatalogError, match="define it at the top of a module"):
        eng.create_function("local_fn", local, "BIGINT")
